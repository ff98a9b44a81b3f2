"""Flattening a call's arguments and outputs, as ``torch.utils._pytree`` does, but cheaply.

Every recorded call flattens its inputs and outputs up to three times; pytree's general machinery
(node registry look-ups, spec objects per level) cost about as much as the rest of the backward
capture together. Almost every call only nests plain tuples, lists and dicts, so those are walked
here directly; anything else pytree knows as a container (a named tuple, ``torch.Size``,
``torch.return_types``, an ``OrderedDict``) goes to pytree itself, so the leaves and their order are
always exactly pytree's.
"""

from __future__ import annotations

from typing import Any

from torch.utils._pytree import SUPPORTED_NODES, TreeSpec, tree_flatten, tree_leaves, tree_unflatten

_PLAIN = (tuple, list, dict)


class _PlainSpec:
    """The structure of a value made of plain tuples, lists and dicts: the value itself."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def flatten(value: Any) -> tuple[list, _PlainSpec | TreeSpec]:
    """The leaves of ``value`` in pytree's order, and what :func:`unflatten` needs to rebuild it."""
    found: list = []
    if _collect((value,), found):
        return found, _PlainSpec(value)
    return tree_flatten(value)


def leaves(value: Any) -> list:
    """The leaves of ``value`` in pytree's order (:func:`flatten` without the structure)."""
    found: list = []
    if _collect((value,), found):
        return found
    return tree_leaves(value)


def call_leaves(args: tuple, kwargs: dict) -> list:
    """``leaves((args, kwargs))``, without building the pair: the arguments of every recorded call."""
    found: list = []
    if _collect(args, found) and _collect(kwargs.values(), found):
        return found
    return tree_leaves((args, kwargs))


def unflatten(leaves: list, spec: _PlainSpec | TreeSpec) -> Any:
    """``value`` of :func:`flatten` again, with ``leaves`` in place of its leaves."""
    if isinstance(spec, _PlainSpec):
        return _rebuild(spec.value, iter(leaves))
    return tree_unflatten(leaves, spec)


def _collect(items: Any, found: list) -> bool:
    """Append the leaves of the items of a plain container; False when a container only pytree knows
    how to open is met. Leaves are appended here, not in a call of their own: most items are leaves."""
    for item in items:
        kind = type(item)
        if kind is tuple or kind is list:
            if not _collect(item, found):
                return False
        elif kind is dict:
            if not _collect(item.values(), found):
                return False
        elif kind in SUPPORTED_NODES or isinstance(item, _PLAIN):
            return False
        else:
            found.append(item)
    return True


def _rebuild(value: Any, leaves: Any) -> Any:
    kind = type(value)
    if kind is tuple:
        return tuple(_rebuild(item, leaves) for item in value)
    if kind is list:
        return [_rebuild(item, leaves) for item in value]
    if kind is dict:
        return {key: _rebuild(item, leaves) for key, item in value.items()}
    return next(leaves)
