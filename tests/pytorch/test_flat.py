"""The cheap flattening of call arguments gives exactly pytree's leaves, order and rebuild."""

from __future__ import annotations

import collections

import pytest
import torch
from torch.utils._pytree import tree_flatten, tree_leaves, tree_unflatten

from msprobe.pytorch.hooks.flat import call_leaves, flatten, leaves, unflatten

Pair = collections.namedtuple("Pair", "a b")
T1, T2, T3 = torch.ones(2), torch.zeros(3), torch.arange(4)

CASES = [
    ((T1, 2.0, None), {"dim": 1, "out": None}),
    (([T1, T2], 0), {}),
    ((T1,), {"weight": T2, "bias": {"b": T3, "a": None}}),
    ((T1, slice(1, 2), Ellipsis, "name"), {}),
    ((Pair(T1, T2),), {}),  # a named tuple: pytree's own path
    ((T1, torch.Size([2, 3])), {}),  # torch.Size is a pytree node
    ((collections.OrderedDict(x=T1, y=[T2, (T3,)]),), {}),
    (torch.max(torch.tensor([[1.0, 3.0]]), dim=1),),  # torch.return_types
    (T1,),
    (),
]


@pytest.mark.parametrize("value", CASES, ids=range(len(CASES)))
def test_leaves_and_rebuild_match_pytree(value):
    leaves, spec = flatten(value)
    expected_leaves, expected_spec = tree_flatten(value)
    assert len(leaves) == len(expected_leaves)
    assert all(a is b for a, b in zip(leaves, expected_leaves))
    replaced = [f"leaf{i}" for i in range(len(leaves))]
    rebuilt, expected = unflatten(replaced, spec), tree_unflatten(replaced, expected_spec)
    assert rebuilt == expected
    assert type(rebuilt) is type(expected)


@pytest.mark.parametrize("value", CASES, ids=range(len(CASES)))
def test_leaves_alone_match_pytree(value):
    """``leaves`` (an output) and ``call_leaves`` (the arguments of a call) are ``flatten`` without the
    structure."""

    def same(found, expected):
        return len(found) == len(expected) and all(a is b for a, b in zip(found, expected))

    assert same(leaves(value), tree_leaves(value))
    args, kwargs = (value, 2.0), {"out": value, "dim": 1}
    assert same(call_leaves(args, kwargs), tree_leaves((args, kwargs)))
