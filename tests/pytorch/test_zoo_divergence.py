"""The first divergence on real architectures (issue 10, point 3): a 5% fault in ONE middle-layer weight
is named at its own layer whether the faulted run is bf16 autocast or fp32, and bf16 against fp32
without a fault names nothing. ``tools/zoo_divergence.py`` prints the same as a table."""

from __future__ import annotations

import json

import pytest
import torch
from zoo import FAULTED, ZOO, dump_one_step, in_layer

from msprobe.pytorch import compare

pytestmark = pytest.mark.slow


def _first(npu, bench, out) -> str | None:
    result = compare({"npu_path": str(npu / "dump.json"), "bench_path": str(bench / "dump.json"),
                      "stack_path": str(npu / "stack.json")}, str(out))
    return None if result.first_divergence is None else result.first_divergence.entry


@pytest.mark.parametrize("spec", ZOO, ids=lambda s: s.name)
def test_a_faulted_weight_is_named_at_its_layer_and_rounding_is_not(tmp_path, spec):
    layer = FAULTED[spec.name]
    fp32 = dump_one_step(spec, tmp_path / "fp32", "statistics", "mix", None, None)
    construct = json.loads((fp32 / "construct.json").read_text())
    for autocast in (torch.bfloat16, None):
        faulted = dump_one_step(spec, tmp_path / f"fault_{autocast}", "statistics", "mix", autocast, layer)
        named = _first(faulted, fp32, tmp_path / f"cmp_{autocast}")
        assert in_layer(named, layer, construct), (autocast, named)
    bf16 = dump_one_step(spec, tmp_path / "bf16", "statistics", "mix", torch.bfloat16, None)
    assert _first(bf16, fp32, tmp_path / "cmp_clean") is None
