"""Ill-conditioned ops (msprobe.core.compare.judge.conditioning) and what the first-divergence rule does after one
(msprobe.core.compare.judge.rounding): rows computed from it are not divergences, a parameter entering after it is,
and so is inf/nan. Also the carry's arithmetic: the inputs' carries add up, a moved extreme carries into the
output's extremes only, and an output that is an earlier output's value keeps that value's excess."""

from __future__ import annotations

import math

import numpy as np
import pytest

from msprobe.core.compare.judge.conditioning import (
    FEW_VALUES,
    Normalisation,
    amplification,
    ill_conditioned,
    normalisation,
)
from msprobe.core.compare.judge.divergence import amplified_rows, first_divergence
from msprobe.core.compare.judge.rounding import EXTREME_FACTOR, FORWARD_SLACK, judge_entries
from msprobe.core.compare.judge.verdict import RowResult
from msprobe.core.compare.read.rows import Row

BF16 = 2.0**-8


def tensor(entry: str, suffix: str, shape: list[int], npu: dict, bench: dict | None = None) -> RowResult:
    part = suffix.split(".")[0]
    sides = ((npu, "torch.bfloat16"), (bench or npu, "torch.float32"))
    npu_row, bench_row = (Row(entry, suffix, part, {"type": "torch.Tensor", "dtype": dtype, "shape": shape, **values})
                          for values, dtype in sides)
    return RowResult(npu_row, bench_row, "summary")


def scalar(entry: str, suffix: str, value: object) -> RowResult:
    row = Row(entry, suffix, "input", {"type": type(value).__name__, "value": value})
    return RowResult(row, row, "summary")


def stats(scale: float, moved: float = 0.0) -> dict:
    """Statistics of a tensor of RMS ``scale`` over 64 elements; ``moved`` shifts each of them by that fraction."""
    return {"Max": 3 * scale * (1 + moved), "Min": -3 * scale * (1 + moved), "Mean": 0.1 * scale * (1 + moved),
            "Norm": 8 * scale * (1 + moved)}


def batch_norm(entry: str, shape: list[int], training: object = True) -> list[RowResult]:
    return [tensor(entry, "input.0", shape, stats(1.0)), tensor(entry, "input.weight", [shape[1]], stats(0.5)),
            scalar(entry, "input.training", training), tensor(entry, "output.0", shape, stats(1.0))]


@pytest.mark.parametrize("rows, reason", [
    (batch_norm("Functional.batch_norm.0.forward", [2, 16, 1, 1]), "normalises 2 values per channel"),
    (batch_norm("Functional.batch_norm.0.forward", [3, 16]), "normalises 3 values per channel"),
    (batch_norm("Functional.batch_norm.0.forward", [2, 16, 2, 1]), None),  # 4 values: FEW_VALUES is 3
    (batch_norm("Functional.batch_norm.0.forward", [2, 16, 1, 1], training=False), None),  # running statistics
    ([tensor("Primitive.bn_train.BatchNorm.6.forward", "input.0", [2, 256, 1, 1], stats(1.0))],
     "normalises 2 values per channel"),  # MindSpore's nn.BatchNorm2d in training calls bn_train
    ([tensor("Functional.instance_norm.0.forward", "input.0", [8, 4, 1, 2], stats(1.0))],
     "normalises 2 values per channel of each sample"),
    ([tensor("Functional.group_norm.0.forward", "input.0", [8, 6, 1, 1], stats(1.0)),
      scalar("Functional.group_norm.0.forward", "input.1", 3)], "normalises 2 values per group"),
    ([tensor("Functional.layer_norm.0.forward", "input.0", [4, 2], stats(1.0)),
      scalar("Functional.layer_norm.0.forward", "input.1.0", 2)], "normalises 2 values per normalised slice"),
    ([tensor("Functional.layer_norm.0.forward", "input.0", [4, 2], stats(1.0))], None),  # normalized_shape unknown
    ([tensor("Module.bn.BatchNorm2d.forward.0", "input.0", [2, 16, 1, 1], stats(1.0))], None),  # mode unknown
    ([tensor("Functional.batch_norm.0.backward", "input.0", [2, 16, 1, 1], stats(1.0))], None),
])
def test_which_normalisations_are_ill_conditioned(rows, reason):
    assert FEW_VALUES == 3
    assert ill_conditioned(rows) == reason


def _amplification_in_numpy(groups: list[np.ndarray], eps: float) -> float:
    """Each group's RMS over its spread, by the textbook formulas, then their RMS over the groups."""
    ratios = [np.sqrt(np.sum(g.astype(np.float64) ** 2) / g.size) / np.sqrt(np.var(g.astype(np.float64)) + eps)
              for g in groups]
    return float(np.sqrt(np.mean(np.square(ratios))))


def test_how_much_each_normalisation_amplifies_its_input_s_relative_rounding():
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((4, 6, 3, 5)) * 0.05 + rng.standard_normal((1, 6, 1, 1)) * 3).astype(np.float32)
    entry = "Functional.{}.0.forward"
    cases = [  # (rows of the entry, the groups as numpy slices them)
        (batch_norm(entry.format("batch_norm"), list(x.shape)), [x[:, c] for c in range(6)]),
        ([tensor(entry.format("instance_norm"), "input.0", list(x.shape), stats(1.0))],
         [x[n, c] for n in range(4) for c in range(6)]),
        ([tensor(entry.format("group_norm"), "input.0", list(x.shape), stats(1.0)),
          scalar(entry.format("group_norm"), "input.1", 2), scalar(entry.format("group_norm"), "input.eps", 1e-3)],
         [x[n, 3 * g:3 * g + 3] for n in range(4) for g in range(2)]),
        ([tensor(entry.format("layer_norm"), "input.0", list(x.shape), stats(1.0)),
          scalar(entry.format("layer_norm"), "input.1.0", 3), scalar(entry.format("layer_norm"), "input.1.1", 5)],
         [x[n, c] for n in range(4) for c in range(6)]),
    ]
    for rows, groups in cases:
        norm = normalisation(rows)
        assert norm.groups == len(groups)
        assert amplification(x, norm) == pytest.approx(_amplification_in_numpy(groups, norm.eps), rel=1e-12)
    assert normalisation(cases[2][0]).eps == 1e-3 and normalisation(cases[0][0]).eps == 1e-5
    assert amplification(x[:, :3], normalisation(cases[0][0])) is None  # 3 channels where the op had 6
    centred = x - x.mean(axis=(0, 2, 3), keepdims=True)
    assert amplification(centred, Normalisation(6, True, 0.0, "channel")) == pytest.approx(1.0, rel=1e-6)


def _run(entries: list[list[RowResult]]) -> list[RowResult]:
    judge_entries(entries, BF16)
    return [r for rows in entries for r in rows]


def test_after_an_ill_conditioned_op_rows_beyond_rounding_are_amplified_not_divergences():
    """A BatchNorm over 2 values per channel, then a linear whose output moves 20% (what a flipped sign does),
    then a linear whose weight is 5% off: the first is amplified rounding, the second still enters."""
    bn = batch_norm("Functional.batch_norm.0.forward", [2, 16, 1, 1])
    flat = stats(1.0)
    swung = [tensor("Functional.linear.0.forward", "input.0", [2, 16, 1, 1], flat),
             tensor("Functional.linear.0.forward", "input.1", [4, 16], stats(0.3)),
             tensor("Functional.linear.0.forward", "output.0", [2, 4], stats(2.0, 0.2), stats(2.0))]
    faulted = [tensor("Functional.linear.1.forward", "input.0", [2, 4], stats(2.0, 0.2), stats(2.0)),
               tensor("Functional.linear.1.forward", "input.1", [4, 4], stats(0.3, 0.05), stats(0.3)),
               tensor("Functional.linear.1.forward", "output.0", [2, 4], stats(1.0, 0.3), stats(1.0))]
    rows = _run([bn, swung, faulted])
    origin = "Functional.batch_norm.0.forward (normalises 2 values per channel)"
    assert bn[0].amplified_by is None and bn[-1].amplified_by == origin  # its input came before it
    assert swung[2].excess > 1 and swung[2].amplified_by == origin and not swung[2].diverges
    weight = faulted[1]
    assert weight.entering and weight.amplified_by is None and weight.diverges  # a parameter: not computed from it
    found = first_divergence(rows, {})
    assert found.entry == "Functional.linear.1.forward" and [e.row for e in found.entering] == [weight]
    amplified = amplified_rows(rows)
    assert amplified.origin == origin and amplified.rows == 3  # swung's output, faulted's input and output
    assert amplified.worst == max(swung[2].excess, faulted[2].excess)


def test_inf_after_an_ill_conditioned_op_still_diverges():
    bn = batch_norm("Functional.batch_norm.0.forward", [2, 16, 1, 1])
    overflow = [tensor("Torch.exp.0.forward", "input.0", [2, 16, 1, 1], stats(1.0)),
                tensor("Torch.exp.0.forward", "output.0", [2, 16, 1, 1], {**stats(1.0), "Max": math.inf}, stats(1.0))]
    rows = _run([bn, overflow])
    assert overflow[1].amplified_by is not None and overflow[1].excess == math.inf and overflow[1].diverges
    assert first_divergence(rows, {}).entry == "Torch.exp.0.forward"


def test_without_an_ill_conditioned_op_nothing_is_amplified():
    rows = _run([batch_norm("Functional.batch_norm.0.forward", [8, 16, 1, 1]),
                 [tensor("Functional.linear.0.forward", "input.0", [8, 16, 1, 1], stats(1.0)),
                  tensor("Functional.linear.0.forward", "output.0", [8, 4], stats(2.0, 0.2), stats(2.0))]])
    assert all(r.amplified_by is None for r in rows)
    assert first_divergence(rows, {}).entry == "Functional.linear.0.forward" and amplified_rows(rows) is None


def _scales(value: dict, count: int) -> dict[str, float]:
    rms = value["Norm"] / math.sqrt(count)
    peak = max(abs(value["Max"]), abs(value["Min"]), rms)
    return {"Max": peak, "Min": peak, "Mean": rms, "Norm": value["Norm"]}


def _carried_excess(inputs: list[RowResult], out_npu: dict, out_bench: dict) -> float:
    """The rule in float64 numpy: per input its largest relative move in Norm and Mean, and in all four."""
    deviations = []
    for result in inputs:
        n, b = result.npu.value, result.bench.value
        scale = {k: max(_scales(n, 64)[k], _scales(b, 64)[k]) for k in ("Max", "Min", "Mean", "Norm")}
        moved = {k: abs(np.float64(n[k]) - b[k]) / scale[k] for k in scale}
        deviations.append((max(moved["Mean"], moved["Norm"]), max(moved.values()), scale))
    out_scale = {k: max(_scales(out_npu, 64)[k], _scales(out_bench, 64)[k]) for k in ("Max", "Min", "Mean", "Norm")}
    worst = 0.0
    for key in out_scale:
        slack = FORWARD_SLACK * BF16 * (EXTREME_FACTOR if key in ("Max", "Min") else 1.0) * out_scale[key]
        carry = sum((d[1] if key in ("Max", "Min") else d[0]) * max(d[2][key], out_scale[key]) for d in deviations)
        worst = max(worst, abs(out_npu[key] - out_bench[key]) / (slack + carry))
    return worst


@pytest.mark.parametrize("norm_units, max_units, diverges", [(13, 0, True), (5, 105, False)])
def test_the_carries_of_an_entry_s_inputs_add_up_and_a_moved_extreme_carries_into_extremes_only(
        norm_units, max_units, diverges):
    """Two passing inputs: one whose Norm moved 3 units, one whose Max moved 40 units (within the extremes'
    slack). The output's Norm allowance is 8 + 3 units (the extreme does not carry into it), so 13 diverges; its
    Max allowance is 64 + 3 + 40 units (the carries add up; the larger alone would be 104), so 105 passes."""
    a_bench, b_bench = stats(1.0), stats(1.0)
    a_npu = {**a_bench, "Norm": a_bench["Norm"] * (1 + 3 * BF16)}
    b_npu = {**b_bench, "Max": b_bench["Max"] * (1 + 40 * BF16)}
    out_bench = stats(1.0)
    out_npu = {**out_bench, "Max": out_bench["Max"] * (1 + max_units * BF16),
               "Norm": out_bench["Norm"] * (1 + norm_units * BF16)}
    rows = [tensor("Torch.add.0.forward", "input.0", [64], a_npu, a_bench),
            tensor("Torch.add.0.forward", "input.1", [64], b_npu, b_bench),
            tensor("Torch.add.0.forward", "output.0", [64], out_npu, out_bench)]
    _run([rows])
    assert rows[2].excess == pytest.approx(_carried_excess(rows[:2], out_npu, out_bench), rel=1e-12)
    assert rows[2].diverges == diverges


def test_an_output_that_an_earlier_entry_made_keeps_its_excess():
    """At level mix a module's output is the value its last API made: it is judged once, with the API's inputs."""
    api = [tensor("Functional.relu.0.forward", "input.0", [64], stats(1.0, 0.03), stats(1.0)),
           tensor("Functional.relu.0.forward", "output.0", [64], stats(1.0, 0.06), stats(1.0))]
    module = [tensor("Module.block.Block.forward.0", "input.0", [64], stats(0.5)),
              tensor("Module.block.Block.forward.0", "output.0", [64], stats(1.0, 0.06), stats(1.0))]
    _run([api, module])
    assert module[1].excess == api[1].excess < 1  # alone, with its passing input, it would be beyond rounding


def test_an_exact_up_cast_keeps_a_value_s_identity():
    """MindSpore's amp casts a cell's fp16 output to fp32 outside any recorded API: the same statistics."""
    made = [tensor("Primitive.bias_add.BiasAdd.0.forward", "input.0", [8], stats(1.0)),
            tensor("Primitive.bias_add.BiasAdd.0.forward", "output.0", [8], stats(1.0, 0.001), stats(1.0))]
    cast = tensor("Tensor.astype.0.forward", "input.0", [8], stats(1.0, 0.001), stats(1.0))
    cast.npu.value["dtype"] = "Float32"
    _run([made, [cast]])
    assert not cast.entering and cast.excess == made[1].excess


def test_a_value_each_run_made_in_a_call_of_its_own_is_not_a_parameter_entering():
    """MindSpore's amp casts a black-listed cell's fp32 output to fp16 in a cell the fp32 run does not have:
    the fp16 run's value comes from that cell, the fp32 run's from the BatchNorm. Both were made by recorded
    calls, so the value cannot be where a divergence enters (it was named so, at 1.67 times rounding)."""
    bench = stats(1.0)
    bn = [tensor("Primitive.bn_train.BatchNorm.6.forward", "input.0", [8, 8], stats(1.0)),
          tensor("Primitive.bn_train.BatchNorm.6.forward", "output.0", [8, 8], bench)]
    fp16 = stats(1.0, 0.05)  # 5% off: beyond what rounding explains
    cast = RowResult(Row("Cell.bn._OutputTo16.forward.0", "output.0", "output",
                         {"type": "mindspore.Tensor", "dtype": "Float16", "shape": [8, 8], **fp16}), None, "summary")
    add = [tensor("Tensor.__iadd__.0.forward", "input.0", [8, 8], fp16, bench),
           tensor("Tensor.__iadd__.0.forward", "output.0", [8, 8], stats(2.0, 0.05), stats(2.0))]
    rows = _run([bn, [cast], add])
    assert add[0].excess > 1 and not add[0].entering
    elsewhere = tensor("Tensor.__iadd__.1.forward", "input.0", [8, 8], stats(3.0, 0.05), stats(3.0))
    _run([[elsewhere]])
    assert elsewhere.entering  # made by no recorded call on either side: a parameter, a buffer, the batch
    assert first_divergence(rows, {}).entry == "Tensor.__iadd__.0.forward"  # judged as inherited, not entering
    assert not first_divergence(rows, {}).entering
