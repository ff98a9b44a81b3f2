"""Is a difference more than rounding explains? The rule behind the first divergence, in one place.

The verdict columns keep msprobe 1.1.1's fixed thresholds, which cannot tell bf16 rounding from a fault;
the first divergence uses this rule instead: a row's allowance is slack · u · S (the run's unit roundoff,
the row's own scale; :data:`EXTREME_FACTOR` times the slack for Max and Min) plus what its inputs carry, and
``excess`` = difference / allowance diverges above 1, except after an ill-conditioned op
(:mod:`.conditioning`). The rule and the calibration of the slacks are stated in
docs/compare.md#first-divergence-beyond-rounding.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from msprobe.core.compare.judge.conditioning import ill_conditioned
from msprobe.core.compare.judge.metrics import stat_of
from msprobe.core.compare.judge.verdict import RowResult, judge_amplified, judge_excess
from msprobe.core.compare.read import STAT_KEYS, Row
from msprobe.core.lifecycle.naming import BACKWARD, FORWARD, parse_name

UNITS = {
    "float64": 2.0**-53, "float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8,
    "float8_e4m3fn": 2.0**-4, "float8_e4m3fnuz": 2.0**-4, "float8_e5m2": 2.0**-3, "float8_e5m2fnuz": 2.0**-3,
    "complex128": 2.0**-53, "complex64": 2.0**-24, "complex32": 2.0**-11,
}
_ALIASES = {"double": "float64", "float": "float32", "half": "float16", "bf16": "bfloat16", "fp16": "float16",
            "fp32": "float32", "fp64": "float64", "cfloat": "complex64", "cdouble": "complex128", "chalf": "complex32"}
FORWARD_SLACK = 8.0
BACKWARD_SLACK = 128.0
# Max and Min are single elements, Norm and Mean every element at once: an extreme element carries the rounding
# of every op that made it, amplified by ill-conditioned ops whose own statistics do not show it (a BatchNorm over
# a few values per channel), so a statistics row's Max and Min get this many times the slack
# (docs/compare.md#first-divergence-beyond-rounding).
EXTREME_FACTOR = 8.0
EXTREMES = ("Max", "Min")
# A MindSpore port against PyTorch runs two implementations of every kernel (another exp, another
# reduction order), not one kernel in two precisions: in float32 the fault-free ports of
# tests/mindspore/test_cross_framework_compare.py differ by up to 1.9 forward slacks (softmax), so the
# slacks are 4 times wider there; a 5% fault still exceeds them a hundredfold (docs/cross_framework_compare.md).
CROSS_FRAMEWORK_SLACK = 4.0
_MAX_NUMEL = 1 << 62


def rounding_unit(dtype: object) -> float | None:
    """Unit roundoff of a dtype as dump.json writes it (``torch.bfloat16``, ``BFloat16``, ``float32``);
    None for exact (integer, bool) and unknown dtypes."""
    if not isinstance(dtype, str):
        return None
    name = dtype.rsplit(".", 1)[-1].strip().lower()
    return UNITS.get(_ALIASES.get(name, name))


def describe_unit(unit: float) -> str:
    """``2^-8 (bfloat16)`` for the report; ``0 (no floating-point tensor)`` when there is none."""
    if unit <= 0:
        return "0 (no floating-point tensor: any difference diverges)"
    names = [name for name, u in UNITS.items() if u == unit and not name.startswith("complex")]
    return f"2^{round(math.log2(unit))} ({names[0] if names else 'unknown dtype'})"


def run_unit(results: Iterable[RowResult]) -> float:
    """The coarsest unit roundoff of any tensor on either side; 0 when no tensor is floating point."""
    units = (rounding_unit(row.value.get("dtype")) for r in results for row in (r.npu, r.bench)
             if row is not None and row.is_tensor)
    return max((u for u in units if u), default=0.0)


def _is_backward(entry: str) -> bool:
    try:
        return parse_name(entry).direction == BACKWARD
    except ValueError:
        return False


Signature = tuple


def _side(row: Row | None) -> tuple | None:
    """One side's statistics of a tensor (None when it is not a tensor or records none)."""
    if row is None or not row.is_tensor:
        return None
    stats = tuple(row.value.get(k) for k in (*STAT_KEYS, "md5"))
    return None if all(v is None for v in stats[:4]) else stats


def signature(result: RowResult) -> Signature | None:
    """What identifies a tensor value across entries: both sides' statistics, which a view, a reshape and an
    exact cast keep (so the shape and the dtype are left out: an unrecorded up-cast, as MindSpore's amp
    makes of a cell's output, is the same value). None when a side records no statistics."""
    sides = (_side(result.npu), _side(result.bench))
    return None if None in sides else sides


class Produced:
    """The values earlier entries output: by :func:`signature`, with the excess they were judged to have, and
    each side's statistics alone, so that a value made on each side by a recorded call is known as made even
    when no one entry made both (MindSpore's amp casts a black-listed cell's fp32 output to fp16 in a cell
    the fp32 run does not have)."""

    def __init__(self) -> None:
        self.excess: dict[Signature, float | None] = {}
        self._sides: tuple[set[tuple], set[tuple]] = (set(), set())

    def add(self, result: RowResult) -> None:
        key = signature(result)
        if key is not None:
            self.excess.setdefault(key, result.excess)
        for seen, row in zip(self._sides, (result.npu, result.bench)):
            if (stats := _side(row)) is not None:
                seen.add(stats)

    def made(self, result: RowResult) -> bool:
        """Each side's value was output by an earlier recorded call on that side."""
        return all(_side(row) in seen for seen, row in zip(self._sides, (result.npu, result.bench)))


def judge_entries(entries: Iterable[list[RowResult]], unit: float, cross_framework: bool = False) -> None:
    """Judge every entry in execution order: an input that an earlier entry output is that output, and
    takes its excess (judged with what its own inputs carried); an input that no earlier entry output
    (a parameter, a buffer, the batch) is judged by itself and marked ``entering``. From the first
    ill-conditioned op on (its own outputs included, not its inputs), every row but those entering inputs is
    marked ``amplified_by`` that op."""
    produced = Produced()
    amplifier: str | None = None
    for rows in entries:
        judge_entry(rows, unit, cross_framework, produced)
        after = amplifier is not None
        if amplifier is None and (reason := ill_conditioned(rows)) is not None:
            amplifier = f"{rows[0].entry} ({reason})"
        for result in rows:
            if amplifier is not None and not result.entering and (after or result.part != "input"):
                judge_amplified(result, amplifier)
            if result.part == "output":
                produced.add(result)


def judge_entry(rows: list[RowResult], unit: float, cross_framework: bool = False,
                produced: Produced | None = None) -> None:
    """Set ``excess`` on every row of one entry: inputs first (``produced``: the earlier outputs), then the
    other rows with the rounding the passing inputs carry (a backward entry's rows share its input scale as a
    floor); an output that is an earlier output's value keeps that output's excess."""
    backward = _is_backward(rows[0].entry)
    allowance = unit * (BACKWARD_SLACK if backward else FORWARD_SLACK) * (CROSS_FRAMEWORK_SLACK if cross_framework
                                                                          else 1.0)
    for result in rows:  # uninitialised memory (judge.verdict.judge_uninitialised): no excess, nothing carried
        if result.uninitialised:
            judge_excess(result, None, False)
    inputs = [r for r in rows if r.part == "input" and not r.uninitialised]
    floor = max((_own_scale(r) for r in inputs), default=0.0) if backward else 0.0
    for result in inputs:
        key = signature(result) if produced is not None else None
        if key is not None and key in produced.excess:
            judge_excess(result, produced.excess[key])
        else:
            judge_excess(result, excess(result, allowance, floor), key is not None and not produced.made(result))
    sliced = _is_slicing(rows[0].entry)
    carried = [Carried(*deviations, _scales(r, floor), _amplification(r), unit if sliced and r.entering else None)
               for r in inputs if r.excess is not None and r.excess <= 1 and (deviations := _deviations(r, floor))[1]]
    for result in rows:
        if result.part == "input" or result.uninitialised:
            continue
        key = signature(result) if produced is not None and result.part == "output" else None
        if key is not None and key in produced.excess:  # a module's output is the value the last API inside made
            judge_excess(result, produced.excess[key])
        else:
            judge_excess(result, excess(result, allowance, floor, carried))


# APIs whose output is a part of their first input (a slice, a split): a stacked or fused parameter (all the
# experts of a MoE layer in one [E, ...] tensor, a fused QKV) reaches the computation through one of them.
SLICING_APIS = frozenset({"__getitem__", "select", "narrow", "split", "split_with_sizes", "tensor_split", "chunk",
                          "unbind", "index_select"})


def _is_slicing(entry: str) -> bool:
    """A forward call of a :data:`SLICING_APIS` API. What a parameter (an input no recorded call produced) carries
    into its slice is at most one unit of the slice's own rounding: the parameter's deviation is measured over all
    of it, so an error confined to one slice moves the whole by a fraction within rounding, and carried at the
    whole's scale it would widen the slice's allowance until the slice's own error hides (docs/compare.md)."""
    try:
        parsed = parse_name(entry)
    except ValueError:
        return False
    return not parsed.is_module and parsed.direction == FORWARD and parsed.api.split(".")[-1] in SLICING_APIS


@dataclass(frozen=True)
class Carried:
    """What one passing input brings to its entry's outputs: its relative deviations and its scales."""

    deviation: float  # the input's largest difference over its own scale in Norm and Mean (:func:`_deviations`)
    extreme: float  # the same over all measures, its moved Max and Min included
    scales: dict[str, float]  # its scale per measure: "Norm" (tensor norm), "Max", "Min", "Mean"
    amplification: float = 1.0  # a normalisation's input: how much the op multiplies its relative deviation
    cap: float | None = None  # at most this times the output's scale (a parameter sliced: :data:`SLICING_APIS`)

    def allowance(self, measure: str, out_scale: float) -> float:
        """A moved extreme is one element: it can move the output's extremes as far, not its Norm or Mean."""
        deviation = self.extreme if measure in EXTREMES else self.deviation
        carried = deviation * max(self.scales.get(measure, 0.0), self.amplification * out_scale)
        return carried if self.cap is None else min(carried, self.cap * out_scale)


def _amplification(result: RowResult) -> float:
    measured = result.tensor.amplification if result.tensor is not None else None
    return measured if measured is not None and measured > 1 else 1.0


def _carry(carried: list[Carried], measure: str, out_scale: float) -> float:
    """The inputs' carries add up: an output's error is, to first order, the sum of what each input brings."""
    return sum(c.allowance(measure, out_scale) for c in carried)


def _finite_abs(*values: float | None) -> float:
    return max((abs(v) for v in values if v is not None and math.isfinite(v)), default=0.0)


def _own_scale(result: RowResult) -> float:
    if result.tensor is not None:
        return result.tensor.scale_norm or 0.0
    if result.mode == "summary" and result.npu is not None and result.bench is not None and result.npu.is_tensor:
        return _finite_abs(stat_of(result.npu.value, "Norm"), stat_of(result.bench.value, "Norm"))
    return 0.0


def _ratio(diff: float, allowance: float) -> float:
    if diff == 0:
        return 0.0
    if not math.isfinite(diff) or allowance == 0:
        return math.inf
    return diff / allowance


def excess(result: RowResult, allowance: float, floor: float = 0.0, carried: list[Carried] | None = None
           ) -> float | None:
    """The row's difference over ``allowance`` (slack · unit) times its scale, plus the rounding ``carried``
    in by the entry's passing inputs; None where no number applies (one-sided rows, md5 mode, unreadable
    tensors, different shapes, non-numeric values)."""
    carried = carried or []
    npu, bench = result.npu, result.bench
    if npu is None or bench is None or result.mode == "md5" or npu.is_tensor != bench.is_tensor:
        return None
    if npu.is_tensor:
        if result.mode == "summary":
            return _stats_excess(npu, bench, allowance, floor, carried)
        metrics = result.tensor
        if metrics is None or metrics.shape_mismatch:
            return None
        if metrics.nonfinite_mismatch:
            return math.inf
        if metrics.diff_norm is None:
            return None
        scale = max(metrics.scale_norm or 0.0, floor)
        return _ratio(metrics.diff_norm, allowance * scale + _carry(carried, "Norm", scale))
    return _value_excess(npu.value, bench.value, allowance, floor, carried)


def _value_excess(npu: object, bench: object, allowance: float, floor: float, carried: list[Carried]
                  ) -> float | None:
    """Floating-point scalars (``Tensor.item()``, float arguments) by the same rule; other values have none."""
    a = npu.get("value") if isinstance(npu, dict) else npu
    b = bench.get("value") if isinstance(bench, dict) else bench
    if not (isinstance(a, float) or isinstance(b, float)) or isinstance(a, bool) or isinstance(b, bool):
        return None
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
        return None
    a, b = _as_float(a), _as_float(b)
    if not (math.isfinite(a) and math.isfinite(b)):
        return 0.0 if a == b or (math.isnan(a) and math.isnan(b)) else math.inf
    scale = max(abs(a), abs(b), floor)
    return _ratio(abs(a - b), allowance * scale + _carry(carried, "Norm", scale))


def _as_float(value: int | float) -> float:
    try:
        return float(value)
    except OverflowError:  # an integer beyond float range
        return math.inf if value > 0 else -math.inf


def numel(value: dict) -> int | None:
    """Element count from a dump.json tensor's ``shape``; None when the shape is absent or not a shape."""
    shape = value.get("shape")
    if not isinstance(shape, list) or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0
                                              for n in shape):
        return None
    count = 1
    for n in shape:
        count *= n
        if count > _MAX_NUMEL:
            return None
    return count


def _stat_pairs(npu: Row, bench: Row) -> list[tuple[str, float | None, float | None]]:
    return [(k, stat_of(npu.value, k), stat_of(bench.value, k)) for k in STAT_KEYS]


def _stat_scales(npu: Row, bench: Row, floor: float) -> dict[str, float]:
    """The scale each statistic is judged against (see the module docstring)."""
    stats = {k: (a, b) for k, a, b in _stat_pairs(npu, bench)}
    scale = max(_finite_abs(*stats["Norm"]), floor)
    count = numel(bench.value) or numel(npu.value)
    rms = scale / math.sqrt(count) if count else scale
    peak = max(_finite_abs(*stats["Max"], *stats["Min"]), rms)  # the tensor's largest magnitude, either side
    return {"Max": peak, "Min": peak, "Mean": rms, "Norm": scale}


def _scales(result: RowResult, floor: float) -> dict[str, float]:
    """An input row's scales per measure, for what it carries to the outputs; {} for non-tensor rows."""
    npu, bench = result.npu, result.bench
    if npu is None or bench is None or not (npu.is_tensor and bench.is_tensor):
        return {}
    if result.mode == "summary":
        return _stat_scales(npu, bench, floor)
    scale = max(result.tensor.scale_norm or 0.0, floor) if result.tensor is not None else 0.0
    return {"Norm": scale} if scale else {}


def _deviations(result: RowResult, floor: float) -> tuple[float, float]:
    """An input's measured relative deviations, (in Norm and Mean, in any measure): its largest difference over
    that measure's scale; 0 where there is no number. A tensor row's one measure, its norm, is both."""
    npu, bench = result.npu, result.bench
    scales = _scales(result, floor)
    if not scales:
        return 0.0, 0.0
    if result.mode != "summary":
        deviation = excess(result, 1.0, floor)
        deviation = deviation if deviation is not None and math.isfinite(deviation) else 0.0
        return deviation, deviation
    moved = {key: _ratio(abs(a - b), scales[key]) for key, a, b in _stat_pairs(npu, bench)
             if a is not None and b is not None and math.isfinite(a) and math.isfinite(b)}
    moved = {key: value for key, value in moved.items() if math.isfinite(value)}
    aggregate = max((v for k, v in moved.items() if k not in EXTREMES), default=0.0)
    return aggregate, max(moved.values(), default=0.0)


def _stats_excess(npu: Row, bench: Row, allowance: float, floor: float, carried: list[Carried]) -> float | None:
    scales = _stat_scales(npu, bench, floor)
    worst: float | None = None
    for key, a, b in _stat_pairs(npu, bench):
        if a is None or b is None:
            continue
        if not (math.isfinite(a) and math.isfinite(b)):
            if a == b or (math.isnan(a) and math.isnan(b)) or _overflowed(npu, key) or _overflowed(bench, key):
                worst = worst or 0.0
                continue
            return math.inf
        slack = allowance * (EXTREME_FACTOR if key in EXTREMES else 1.0)
        ratio = _ratio(abs(a - b), slack * scales[key] + _carry(carried, key, scales[key]))
        worst = ratio if worst is None else max(worst, ratio)
    return worst


def _overflowed(row: Row, key: str) -> bool:
    """``row``'s Mean or Norm (``key``) is infinite while its Max and Min are finite: every element is finite, so
    the reduction overflowed (msprobe 26.2.0 sums a float32 tensor in float32: an attention mask of float32's
    lowest value), which says nothing of the run's values; ours reduce in float64. Left out of the judgement."""
    if key in EXTREMES or math.isfinite(stat_of(row.value, key) or 0.0):
        return False
    extremes = [stat_of(row.value, extreme) for extreme in EXTREMES]
    return all(value is not None and math.isfinite(value) for value in extremes)
