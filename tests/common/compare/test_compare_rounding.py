"""The dtype-aware rule that chooses the first divergence (msprobe.core.compare.judge.rounding), against
float64 numpy."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from msprobe.core.compare import CompareOptions, compare_dumps
from msprobe.core.compare.judge.metrics import compare_tensors
from msprobe.core.compare.judge.rounding import (
    BACKWARD_SLACK,
    EXTREME_FACTOR,
    FORWARD_SLACK,
    judge_entry,
    rounding_unit,
    run_unit,
)
from msprobe.core.compare.judge.verdict import RowResult, judge_summary, judge_uninitialised
from msprobe.core.compare.read.rows import Row
from msprobe.core.compare.read.tensorfile import load_npy

BF16 = 2.0**-8


def to_bf16(array: np.ndarray) -> np.ndarray:
    """Round float32 values to bfloat16 (nearest, ties to even) and back: what a bf16 run stores."""
    bits = np.asarray(array, np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
    return rounded.astype(np.uint32).view(np.float32)


def value(dtype: str, shape: list[int], **stats: float) -> dict:
    return {"type": "torch.Tensor", "dtype": dtype, "shape": shape, **stats}


def tensor_row(entry: str, suffix: str, npu: np.ndarray, bench: np.ndarray, dtypes=("torch.bfloat16", "torch.float32")):
    part = suffix.split(".")[0]
    rows = (Row(entry, suffix, part, value(dtypes[0], list(npu.shape))),
            Row(entry, suffix, part, value(dtypes[1], list(bench.shape))))
    return RowResult(*rows, "tensor", tensor=compare_tensors(npu, bench))


def stats_row(entry: str, suffix: str, shape: list[int], npu: dict, bench: dict) -> RowResult:
    part = suffix.split(".")[0]
    result = RowResult(Row(entry, suffix, part, value("torch.bfloat16", shape, **npu)),
                       Row(entry, suffix, part, value("torch.float32", shape, **bench)), "summary")
    judge_summary(result)
    return result


@pytest.mark.parametrize("dtype, unit", [
    ("torch.float64", 2.0**-53), ("torch.float32", 2.0**-24), ("torch.float16", 2.0**-11), ("torch.bfloat16", BF16),
    ("BFloat16", BF16), ("Float16", 2.0**-11), ("Float32", 2.0**-24), ("float32", 2.0**-24),
    ("torch.float8_e4m3fn", 2.0**-4), ("torch.float8_e5m2", 2.0**-3), ("torch.complex64", 2.0**-24),
    ("torch.int64", None), ("Bool", None), ("torch.bool", None), (None, None),
])
def test_rounding_unit_of_each_dtype_name(dtype, unit):
    assert rounding_unit(dtype) == unit


def test_a_tensor_row_diverges_past_8_units_of_its_own_norm():
    rng = np.random.default_rng(0)
    bench = rng.standard_normal(4096).astype(np.float32) * 1000  # large values: 1.1.1's MaxAbsErr > 1 fails them
    rounded, faulty = tensor_row("Torch.mul.0.forward", "output.0", to_bf16(bench), bench), \
        tensor_row("Torch.mul.0.forward", "output.0", to_bf16(bench * 1.05), bench)
    judge_entry([rounded], BF16)
    judge_entry([faulty], BF16)
    for result, npu in ((rounded, to_bf16(bench)), (faulty, to_bf16(bench * 1.05))):
        n, b = npu.astype(np.float64), bench.astype(np.float64)
        want = np.linalg.norm(n - b) / (FORWARD_SLACK * BF16 * max(np.linalg.norm(n), np.linalg.norm(b)))
        assert result.excess == pytest.approx(want, rel=1e-12)
    assert rounded.tensor.max_abs_err > 1 and rounded.excess < 0.1 and not rounded.diverges  # one bf16 rounding
    assert 1.4 < faulty.excess < 1.7 and faulty.diverges  # a 5% error is ~12.8 units


@pytest.mark.parametrize("what, shape, npu, bench", [
    # the near-zero statistics msprobe reported as first divergences of fault-free bf16 runs
    ("BatchNorm output Mean", [4, 8, 8, 8], {"Max": 3.1, "Min": -2.9, "Mean": 0.0, "Norm": 45.2},
     {"Max": 3.1, "Min": -2.9, "Mean": -6.5e-6, "Norm": 45.25}),
    ("LayerNorm output Mean", [4, 64, 32], {"Max": 4.0, "Min": -3.5, "Mean": 4.6e-10, "Norm": 90.5},
     {"Max": 4.0, "Min": -3.5, "Mean": -5.3e-10, "Norm": 90.5}),
    ("pow Min", [4, 64], {"Max": 9.0, "Min": 2.5e-12, "Mean": 1.0, "Norm": 20.0},
     {"Max": 9.0, "Min": 1.9e-13, "Mean": 1.0, "Norm": 20.0}),
])
def test_near_zero_statistics_are_judged_on_the_tensor_scale(what, shape, npu, bench):
    result = stats_row("Functional.x.0.forward", "output.0", shape, npu, bench)
    assert result.verdict == "Warning"  # 1.1.1's rule: relative difference above 0.5
    judge_entry([result], BF16)
    norm = max(npu["Norm"], bench["Norm"])
    rms = norm / math.sqrt(np.prod(shape))
    peak = max(abs(npu["Max"]), abs(npu["Min"]), abs(bench["Max"]), abs(bench["Min"]))
    scales = {"Max": max(peak, rms), "Min": max(peak, rms), "Mean": rms, "Norm": norm}
    slacks = {"Max": EXTREME_FACTOR, "Min": EXTREME_FACTOR, "Mean": 1.0, "Norm": 1.0}
    want = max(abs(npu[k] - bench[k]) / (FORWARD_SLACK * slacks[k] * BF16 * scales[k]) for k in scales)
    assert result.excess == pytest.approx(want, rel=1e-12) and result.excess < 1 and not result.diverges


@pytest.mark.parametrize("stat, factor", [("Norm", 1.05), ("Mean", None), ("Max", 1.5), ("Min", 1.5)])
def test_statistics_that_move_by_5_percent_of_their_scale_diverge_and_extremes_by_50(stat, factor):
    """Norm and Mean average every element: 5% (12.8 bf16 units) diverges. Max and Min are one element each,
    which an ill-conditioned op before it can move far: they get EXTREME_FACTOR times the slack."""
    bench = {"Max": 3.0, "Min": -3.0, "Mean": 0.1, "Norm": 64.0}  # 4096 elements: RMS 1.0
    npu = dict(bench)
    npu[stat] = bench[stat] * factor if factor else bench[stat] + 0.05  # the Mean moves by 5% of the RMS
    result = stats_row("Functional.x.0.forward", "output.0", [4096], npu, bench)
    judge_entry([result], BF16)
    assert 1.2 < result.excess < 1.7 and result.diverges
    if stat in ("Max", "Min"):
        npu[stat] = bench[stat] * 1.05
        within = stats_row("Functional.x.0.forward", "output.0", [4096], npu, bench)
        judge_entry([within], BF16)
        assert within.excess == pytest.approx(0.15 / (FORWARD_SLACK * EXTREME_FACTOR * BF16 * 3.15), rel=1e-12)
        assert not within.diverges


def test_a_backward_row_is_judged_at_least_on_its_incoming_gradient():
    """A conv bias gradient ahead of BatchNorm sums a gradient whose per-channel mean is zero: rounding noise
    relative to itself, small relative to the gradient it summed."""
    rng = np.random.default_rng(1)
    grad = rng.standard_normal((4, 8, 6, 6)).astype(np.float32)
    grad -= grad.mean(axis=(0, 2, 3), keepdims=True)
    bias_bench = grad.astype(np.float64).sum(axis=(0, 2, 3))  # ~1e-6: cancelled
    bias_npu = to_bf16(grad).astype(np.float64).sum(axis=(0, 2, 3))  # what bf16 inputs leave of it
    rows = [tensor_row("Functional.conv2d.0.backward", "input.0", to_bf16(grad), grad),
            tensor_row("Functional.conv2d.0.backward", "output.2", bias_npu, bias_bench)]
    judge_entry(rows, BF16)
    n, b, g, gn = bias_npu, bias_bench, grad.astype(np.float64), to_bf16(grad).astype(np.float64)
    floor = max(np.linalg.norm(gn), np.linalg.norm(g))
    carried = np.linalg.norm(gn - g) / floor * floor  # the incoming gradient's relative deviation × max(S_in, S_out)
    scale = max(np.linalg.norm(n), np.linalg.norm(b), floor)
    want = np.linalg.norm(n - b) / (BACKWARD_SLACK * BF16 * scale + carried)
    assert rows[1].excess == pytest.approx(want, rel=1e-12) and not rows[1].diverges
    assert rows[1].tensor.cosine < 0.9 and np.linalg.norm(n - b) > np.linalg.norm(b)  # noise, relative to itself
    forward = tensor_row("Functional.sum.0.forward", "output.0", bias_npu, bias_bench)
    judge_entry([forward], BF16)
    assert forward.diverges  # a forward output gets no floor


def test_the_unit_is_the_coarsest_dtype_of_either_dump():
    fp32 = tensor_row("Torch.a.0.forward", "output.0", np.ones(3), np.ones(3), ("torch.float32", "torch.float32"))
    bf16 = tensor_row("Torch.b.0.forward", "output.0", np.ones(3), np.ones(3), ("torch.float32", "torch.bfloat16"))
    ints = tensor_row("Torch.c.0.forward", "output.0", np.ones(3), np.ones(3), ("torch.int64", "torch.int64"))
    assert run_unit([fp32, ints]) == 2.0**-24 and run_unit([fp32, bf16, ints]) == BF16 and run_unit([ints]) == 0
    exact = tensor_row("Torch.c.0.forward", "output.0", np.array([1, 2, 4]), np.array([1, 2, 3]),
                       ("torch.int64", "torch.int64"))
    judge_entry([exact], 0.0)
    assert exact.excess == math.inf


def test_inf_or_nan_at_different_positions_always_diverges():
    result = tensor_row("Torch.exp.0.forward", "output.0", np.array([1.0, np.inf]), np.array([1.0, 3e38]))
    judge_entry([result], BF16)
    assert result.excess == math.inf
    stats = stats_row("Torch.exp.0.forward", "output.0", [2], {"Max": math.inf, "Min": 1.0, "Mean": math.inf,
                                                                "Norm": math.inf},
                      {"Max": 3e38, "Min": 1.0, "Mean": 1.5e38, "Norm": 3e38})
    judge_entry([stats], BF16)
    assert stats.excess == math.inf


def test_a_mean_or_norm_that_overflowed_its_float32_sum_is_not_a_divergence():
    """msprobe 26.2.0 sums a float32 tensor in float32: an attention mask of float32's lowest value gives Mean -inf
    and Norm inf while every element, Max and Min, is finite. Ours (float64) are the true values; the overflow
    says nothing of the run, so only the extremes are judged (against float64 numpy's statistics of the mask)."""
    mask = np.array([0.0, np.finfo(np.float32).min] * 4, dtype=np.float32).astype(np.float64)
    ours = {"Max": mask.max(), "Min": mask.min(), "Mean": mask.mean(), "Norm": np.sqrt(np.sum(mask * mask))}
    assert math.isfinite(ours["Mean"]) and math.isfinite(ours["Norm"])
    theirs = {"Max": mask.max(), "Min": mask.min(), "Mean": -math.inf, "Norm": math.inf}
    for npu, bench in ((ours, theirs), (theirs, ours)):
        stats = stats_row("Module.attn.Attention.forward.0", "input.attention_mask", [8], npu, bench)
        judge_entry([stats], BF16)
        assert stats.excess == 0.0
    moved = stats_row("Module.attn.Attention.forward.0", "input.attention_mask", [8], ours,
                      {**theirs, "Min": -math.inf})  # an element that is -inf: a value of the run
    judge_entry([moved], BF16)
    assert moved.excess == math.inf


def write_dump(rank_dir: Path, calls: list, stacks: dict[str, list[str]]) -> Path:
    """A tensor dump: ``(entry, inputs, outputs)`` with arrays saved as .npy, recorded as bf16 or fp32."""
    (rank_dir / "dump_tensor_data").mkdir(parents=True)
    data = {}
    for entry, inputs, outputs, dtype in calls:
        record = {"input_args": [], "output": []}
        for part, key, arrays in (("input", "input_args", inputs), ("output", "output", outputs)):
            for i, array in enumerate(arrays):
                name = f"{entry}.{part}.{i}.npy"
                np.save(rank_dir / "dump_tensor_data" / name, array.astype(np.float32))
                record[key].append({"type": "torch.Tensor", "dtype": dtype, "shape": list(array.shape),
                                    "data_name": name})
        data[entry] = record
    (rank_dir / "dump.json").write_text(json.dumps({"task": "tensor", "level": "L1", "data": data}))
    (rank_dir / "stack.json").write_text(json.dumps(stacks))
    return rank_dir / "dump.json"


def test_the_first_divergence_is_where_the_first_value_beyond_rounding_appears(tmp_path):
    """bf16 rounding everywhere (which 1.1.1's MaxAbsErr > 1 fails at this magnitude), one weight scaled by 1.05,
    then calls that carry its error, then an optimizer update that magnifies rounding noise."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((8, 16)).astype(np.float32) * 1000
    w = rng.standard_normal((16, 16)).astype(np.float32)
    bad_w = w * 1.05
    adam = {"Tensor.addcdiv_.0.forward": ["File /venv/lib/site-packages/torch/optim/adamw.py, line 400, in _single"]}
    bench_calls = [("Functional.gelu.0.forward", [x], [x * 2], "torch.float32"),
                   ("Functional.linear.0.forward", [x * 2, w], [x * 2 @ w], "torch.float32"),
                   ("Torch.relu.0.forward", [x * 2 @ w], [np.maximum(x * 2 @ w, 0)], "torch.float32"),
                   ("Tensor.addcdiv_.0.forward", [w], [w], "torch.float32")]
    npu_calls = [("Functional.gelu.0.forward", [to_bf16(x)], [to_bf16(x * 2)], "torch.bfloat16"),
                 ("Functional.linear.0.forward", [to_bf16(x * 2), bad_w], [to_bf16(x * 2 @ bad_w)], "torch.bfloat16"),
                 ("Torch.relu.0.forward", [to_bf16(x * 2 @ bad_w)], [to_bf16(np.maximum(x * 2 @ bad_w, 0))],
                  "torch.bfloat16"),
                 ("Tensor.addcdiv_.0.forward", [w], [-w], "torch.float32")]
    npu = write_dump(tmp_path / "npu", npu_calls, adam)
    bench = write_dump(tmp_path / "bench", bench_calls, adam)
    result = compare_dumps(npu, bench, tmp_path / "out", load_npy, options=CompareOptions(workers=1, progress=False))
    gelu_out = next(r for r in result.results if r.npu.name == "Functional.gelu.0.forward.output.0")
    assert gelu_out.verdict == "No" and not gelu_out.diverges  # 1.1.1's verdict fails bf16 rounding
    found = result.first_divergence
    assert found.entry == "Functional.linear.0.forward"  # its weight is the first value beyond rounding
    assert found.inputs_pass and [r.npu.name for r in found.failing_rows] == ["Functional.linear.0.forward.output.0"]
    relu = next(r for r in result.results if r.npu.name == "Torch.relu.0.forward.output.0")
    assert relu.diverges  # carried, not chosen
    assert [d.entry for d in result.optimizer] == ["Tensor.addcdiv_.0.forward"]
    assert result.optimizer[0].excess == pytest.approx(2 / (FORWARD_SLACK * BF16))  # ‖-w - w‖ = 2‖w‖


def test_when_every_diverging_entry_inherits_its_inputs_the_earliest_is_named_and_says_so(tmp_path):
    x = np.linspace(1, 2, 16).astype(np.float32)
    calls = [("Torch.argmax.0.forward", [x], [np.array([15.0])], "torch.float32"),  # input differs, output not
             ("Torch.mul.0.forward", [x], [x * 2], "torch.float32")]
    npu_calls = [(e, [i * 1.1 for i in ins], outs if e.startswith("Torch.argmax") else [o * 1.1 for o in outs], d)
                 for e, ins, outs, d in calls]
    npu = write_dump(tmp_path / "npu", npu_calls, {})
    bench = write_dump(tmp_path / "bench", calls, {})
    found = compare_dumps(npu, bench, tmp_path / "out", load_npy,
                          options=CompareOptions(workers=1, progress=False)).first_divergence
    assert found.entry == "Torch.mul.0.forward" and not found.inputs_pass


def _summary_rows(entry: str, suffix: str, npu: dict, bench: dict, marked: tuple[bool, bool] = (False, False)):
    """A summary row pair; ``marked``: which side the dump marks ``"uninitialised": true``."""
    part = suffix.split(".")[0]
    sides = [{**value("torch.float32", [4], **stats), **({"uninitialised": True} if mark else {})}
             for stats, mark in zip((npu, bench), marked)]
    return RowResult(Row(entry, suffix, part, sides[0]), Row(entry, suffix, part, sides[1]), "summary")


def test_uninitialised_memory_is_followed_only_where_the_two_sides_differ():
    """docs/compare.md#uninitialised-values: the garbage of an empty buffer passed on is marked; a defined value
    the allocator happened to leave in the buffer on one side, held later on both sides, is compared as usual."""
    x = {"Max": 1.0, "Min": -1.0, "Mean": 0.0, "Norm": 2.0}
    garbage = {"Max": 9e30, "Min": 0.0, "Mean": 3e30, "Norm": 1e31}
    rows = [_summary_rows("Torch.empty_like.0.forward", "output.0", x, garbage, marked=(True, True)),
            _summary_rows("Tensor.copy_.0.forward", "input.0", x, garbage),  # the buffer passed on: b's garbage
            _summary_rows("Tensor.copy_.0.forward", "input.1", x, x),  # x itself, which side a's buffer held
            _summary_rows("Functional.linear.0.forward", "input.0", x, x)]
    judge_uninitialised(rows)
    assert [r.uninitialised for r in rows] == [True, True, False, False]


def test_garbage_holding_nan_on_both_sides_is_followed():
    def nan() -> dict:  # a fresh float each, as json.load gives: NaN is not even equal to itself
        return {key: float("nan") for key in ("Max", "Min", "Mean", "Norm")}
    rows = [_summary_rows("Torch.empty_like.0.forward", "output.0", nan(), nan(), marked=(True, True)),
            _summary_rows("Tensor.copy_.0.forward", "input.0", nan(), nan())]
    judge_uninitialised(rows)
    assert [r.uninitialised for r in rows] == [True, True]
