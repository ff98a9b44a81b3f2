"""The built-in MindSpore → PyTorch map against the installed frameworks: every API msprobe records for
MindSpore maps to a PyTorch API that exists (or, said explicitly, to none), and the name lists the map was
derived from still hold."""

from __future__ import annotations

import inspect

import mindspore.ops as ops
import pytest
import torch
import torch.nn.functional as F

from msprobe.core.compare.align.framework_map import builtin, torch_api_for
from msprobe.mindspore.hooks.catalog import api_targets

_NAMESPACES = {"Torch": torch, "Functional": F, "Tensor": torch.Tensor, "Distributed": torch.distributed}


def resolves(pt_api: str) -> bool:
    prefix, _, name = pt_api.partition(".")
    obj = _NAMESPACES[prefix]
    for part in name.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return False
    return callable(obj)


def test_every_recorded_mindspore_api_maps_to_an_existing_pytorch_api_or_to_none():
    recorded = [f"{t.prefix}.{t.attr}" for t in api_targets()]
    assert len(recorded) > 500
    mapped = {name: torch_api_for(name) for name in recorded}
    missing = sorted(f"{ms} -> {pt}" for ms, pt in mapped.items() if pt is not None and not resolves(pt))
    assert not missing, missing
    # the namespaces that mirror PyTorch are mapped nearly whole
    for prefix in ("Mint", "MintFunctional"):
        names = [n for n in recorded if n.startswith(prefix + ".")]
        assert sum(mapped[n] is not None for n in names) >= 0.95 * len(names)


def test_table_targets_and_name_lists_hold():
    fmap = builtin()
    assert all(resolves(t) for t in (*fmap.apis.values(), *fmap.primitives.values()) if t is not None)
    assert all(hasattr(ops, n) and hasattr(torch, n) for n in fmap.ops_in_torch)
    assert all(hasattr(ops, n) and hasattr(F, n) for n in fmap.ops_in_functional)


@pytest.mark.parametrize("api", ["Functional.batch_norm", "Functional.layer_norm", "Functional.softmax",
                                 "Functional.relu", "Functional.dropout"])
def test_recorded_signatures_are_pytorchs(api):
    parameters = inspect.signature(getattr(F, api.split(".")[1])).parameters
    assert builtin().signatures[api] == list(parameters)[: len(builtin().signatures[api])]


def test_shipped_signatures_are_the_installed_frameworks():
    """framework_signatures.json is what tools/framework_signatures.py reads from the frameworks installed here."""
    import importlib.util
    from pathlib import Path

    tool = Path(__file__).resolve().parents[2] / "tools" / "framework_signatures.py"
    spec = importlib.util.spec_from_file_location("framework_signatures", tool)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.OUT.read_text(encoding="utf-8") == module.render(module.generate())


def test_layer_norm_primitive_pairs_by_name():
    """LayerNorm(input_x, gamma, beta) against layer_norm(input, normalized_shape, weight, bias, eps)."""
    from msprobe.core.compare.align.framework_map import torch_suffix_for

    assert list(inspect.signature(ops.LayerNorm.__call__).parameters)[1:] == ["input_x", "gamma", "beta"]
    assert list(inspect.signature(F.layer_norm).parameters)[2:4] == ["weight", "bias"]
    assert torch_suffix_for("Primitive.layer_norm.LayerNorm", "input.1") == "input.2"  # gamma is weight
    assert torch_suffix_for("Primitive.layer_norm.LayerNorm", "input.2") == "input.3"  # beta is bias
