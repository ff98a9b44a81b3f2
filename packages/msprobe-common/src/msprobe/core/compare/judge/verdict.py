"""Turn numbers into the verdict columns and the row highlights (docs/compare.md#verdicts).

Verdicts: tensor mode ``Accuracy Reached or Not`` is Yes / No / None / Unmatched; summary mode
``Result`` is Warning or empty; md5 mode ``Result`` is pass / Different; a row that exists on one
side only is Unmatched in every mode. Non-tensor arguments are compared by value.

Highlights look at one entry at a time, because a number means more next to the entry's inputs:
red marks an output that fails (or holds inf/nan on the NPU side, or an error above 1e10, or whose
One Thousandth ratio collapses below 0.6 while every input stays above 0.9); yellow marks an input
that fails, and an output that passes but is clearly worse than its inputs (Cosine or One
Thousandth ratio 0.1 lower, relative error above 0.1 where inputs stay below 0.01, or absolute
error above 1 and ten times the inputs').
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from msprobe.core.compare.judge.metrics import TensorMetrics, stat_diff, stat_of
from msprobe.core.compare.read import STAT_KEYS, Row, canonical_dtype
from msprobe.core.dump.uninitialised import MEMBER as UNINITIALISED

YES, NO, NONE, UNMATCHED = "Yes", "No", "None", "Unmatched"
WARNING, PASS, DIFFERENT = "Warning", "pass", "Different"
FAILING = (NO, WARNING, DIFFERENT)
RED, YELLOW = "red", "yellow"
MSG_NO_BENCH = "No bench data matched."
MSG_NO_NPU = "No NPU data matched."
MSG_UNINITIALISED = "Uninitialised memory (an empty-like API's output): not numerically comparable."


@dataclass
class RowResult:
    """One report row: the paired rows, what was computed, and what it means."""

    npu: Row | None
    bench: Row | None
    mode: str
    tensor: TensorMetrics | None = None
    stat_diffs: tuple[tuple[float | None, float | None], ...] = ()
    verdict: str = ""
    messages: list[str] = field(default_factory=list)
    highlight: str = ""
    first_of_entry: bool = False  # 1.1.1 shows an entry's stack on its first row only
    excess: float | None = None  # difference / what rounding explains (compare.judge.rounding); > 1 diverges
    not_compared: bool = False  # its tensor files are missing or unreadable
    entering: bool = False  # an input no earlier entry output: a parameter, buffer or the batch (judge.rounding)
    amplified_by: str | None = None  # the ill-conditioned op this value was computed from (compare.judge.conditioning)
    uninitialised: bool = False  # a side holds uninitialised memory (empty_like & co): never diverges, never carries

    @property
    def diverges(self) -> bool:
        """Beyond rounding (compare.judge.rounding), or, where that rule has no number (md5 mode, non-numeric
        values), a failing verdict. A finite difference of a value computed from an ill-conditioned op is
        not a divergence: rounding amplified there has no bound a compare could check. Uninitialised memory
        never diverges: it holds whatever the allocator left."""
        if self.uninitialised:
            return False
        if self.excess is None:
            return self.failed
        return self.excess > 1 and (self.amplified_by is None or not math.isfinite(self.excess))

    @property
    def amplified(self) -> bool:
        """Beyond rounding, but computed from an ill-conditioned op, so not a divergence (judge.conditioning)."""
        return self.amplified_by is not None and self.excess is not None and self.excess > 1 and not self.diverges

    @property
    def entry(self) -> str:
        return (self.npu or self.bench).entry  # type: ignore[union-attr]

    @property
    def part(self) -> str:
        return (self.npu or self.bench).part  # type: ignore[union-attr]

    @property
    def failed(self) -> bool:
        return self.verdict in FAILING


def scalar_value(value: object) -> object:
    """The value of a non-tensor row; a dtype argument by its canonical name, since ``Float32`` (MindSpore)
    and ``torch.float32`` are one dtype (cross-framework compares)."""
    if not isinstance(value, dict):
        return value
    raw = value.get("value")
    if str(value.get("type", "")).endswith(".dtype") and isinstance(raw, str):
        return canonical_dtype(raw) or raw
    return raw


def _same_value(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def judge_uninitialised(results: list[RowResult]) -> None:
    """Mark, in execution order, the paired rows whose value is uninitialised memory on a side: an output the
    dump marks (``"uninitialised": true``, docs/compare.md#uninitialised-values) and every later row that holds
    that value unchanged (same dtype, shape and statistics: the tensor passed on, viewed or returned by a
    module) on both sides, or on one side while the other differs. A row holding on one side only a value
    that side's garbage once held, and the same on the other, is a defined value the allocator happened to
    leave in a buffer: it is compared as usual. Marked rows get an empty (summary) or ``None`` verdict; no
    tensor file is read for them."""
    seen: tuple[set[tuple], set[tuple]] = (set(), set())
    for result in results:
        if result.npu is None or result.bench is None:
            continue
        keys = (_value_key(result.npu), _value_key(result.bench))
        marked = False
        for side_seen, row, key in zip(seen, (result.npu, result.bench), keys):
            if key is not None and row.value.get(UNINITIALISED) is True:
                side_seen.add(key)
                marked = True
        held = sum(key is not None and key in side_seen for key, side_seen in zip(keys, seen))
        if marked or held == 2 or (held == 1 and keys[0] != keys[1]):
            result.uninitialised = True
            result.verdict = "" if result.mode == "summary" else NONE
            result.messages.append(MSG_UNINITIALISED)


def _value_key(row: Row | None) -> tuple | None:
    """A tensor value by dtype, shape and statistics; None for a non-tensor or one recording no statistics.
    A NaN statistic (garbage often holds one) keys as ``"nan"``: NaN equals nothing, not even itself."""
    if row is None or not row.is_tensor or not isinstance(row.value, dict):
        return None
    stats = tuple("nan" if isinstance(v, float) and math.isnan(v) else v
                  for v in (row.value.get(k) for k in (*STAT_KEYS, "md5")))
    if all(v is None for v in stats):
        return None
    return (row.value.get("dtype"), tuple(row.value.get("shape") or ()), *stats)


def judge_not_compared(result: RowResult, why: str) -> None:
    """A tensor pair whose files are missing, unreadable or not what dump.json records."""
    result.verdict = NONE
    result.not_compared = True
    result.messages.append(why)


def judge_excess(result: RowResult, excess: float | None, entering: bool | None = None) -> None:
    """The rounding rule's number for the row (compare.judge.rounding); ``entering``: an input no earlier entry
    output."""
    result.excess = excess
    if entering is not None:
        result.entering = entering


def judge_amplified(result: RowResult, amplifier: str) -> None:
    """The row is computed from an ill-conditioned op (compare.judge.conditioning)."""
    result.amplified_by = amplifier


def note_entering(result: RowResult, description: str) -> None:
    """The Err_message of an input the first divergence enters through says so (the xlsx and csv column)."""
    note = f"First divergence enters here: {description} differs beyond rounding."
    if note not in result.messages:
        result.messages.append(note)


def judge_unmatched(result: RowResult) -> None:
    result.verdict = UNMATCHED
    result.messages.append(MSG_NO_BENCH if result.bench is None else MSG_NO_NPU)


def judge_values(result: RowResult, equal: str, different: str) -> bool:
    """Compare a non-tensor pair by value; returns False when a side is a tensor (not judged here)."""
    assert result.npu is not None and result.bench is not None
    if result.npu.is_tensor and result.bench.is_tensor:
        return False
    if result.npu.is_tensor != result.bench.is_tensor:
        result.verdict = UNMATCHED
        result.messages.append("One side is a tensor and the other is not.")
        return True
    a, b = scalar_value(result.npu.value), scalar_value(result.bench.value)
    if _same_value(a, b):
        result.verdict = equal
    else:
        result.verdict = different
        result.messages.append(f"Values differ: NPU {a!r}, bench {b!r}.")
    return True


def judge_tensor(result: RowResult, metrics: TensorMetrics) -> None:
    """Accuracy Reached or Not from the tensor metrics (docs/compare.md#verdicts)."""
    result.tensor = metrics
    result.messages.extend(metrics.messages)
    cos, err = metrics.cosine, metrics.max_abs_err
    if metrics.shape_mismatch:
        result.verdict = UNMATCHED
    elif metrics.nonfinite_mismatch:
        result.verdict = NO
    elif err is None:
        result.verdict = NONE
    elif err > 1 or (cos is not None and (cos < 0.9 or (cos < 0.99 and err > 0.001))):
        result.verdict = NO
    else:
        result.verdict = YES


def judge_summary(result: RowResult) -> None:
    """Warning when any statistic differs from the bench by more than half the bench's magnitude."""
    assert result.npu is not None and result.bench is not None
    npu, bench = result.npu.value, result.bench.value
    result.stat_diffs = tuple(stat_diff(stat_of(npu, k), stat_of(bench, k)) for k in STAT_KEYS)
    worst = [rel for _, rel in result.stat_diffs if rel is not None and not math.isnan(rel)]
    if any(rel > 0.5 for rel in worst):
        result.verdict = WARNING
        result.messages.append("Need double check api accuracy.")


def judge_md5(result: RowResult) -> None:
    assert result.npu is not None and result.bench is not None
    same = result.npu.value.get("md5") == result.bench.value.get("md5")
    result.verdict = PASS if same else DIFFERENT


def highlight_entry(results: list[RowResult]) -> None:
    """Set ``highlight`` on the rows of one entry (see the module docstring)."""
    inputs = [r for r in results if r.part == "input" and r.npu and r.bench and not r.uninitialised]
    for result in results:
        if result.npu is None or result.bench is None or result.uninitialised:
            continue
        if result.part != "output":
            if result.failed:
                result.highlight = YELLOW
            continue
        reason = _red_reason(result, inputs)
        if reason or result.failed:
            result.highlight = RED
            result.messages.extend([reason] if reason else [])
            continue
        reason = _yellow_reason(result, inputs)
        if reason:
            result.highlight = YELLOW
            result.messages.append(reason)


def _max_abs(result: RowResult) -> float | None:
    if result.tensor is not None:
        return result.tensor.max_abs_err
    if result.stat_diffs and result.stat_diffs[0][0] is not None:
        return abs(result.stat_diffs[0][0])
    return None


def _max_rel(result: RowResult) -> float | None:
    """The relative error of the max: tensor MaxRelativeErr, or summary Max diff / max(0.01, |bench max|)."""
    if result.tensor is not None:
        return result.tensor.max_relative_err
    if result.stat_diffs and result.stat_diffs[0][0] is not None and result.bench is not None:
        bench_max = stat_of(result.bench.value, "Max") or 0.0
        return abs(result.stat_diffs[0][0]) / max(0.01, abs(bench_max))
    return None


def _red_reason(result: RowResult, inputs: list[RowResult]) -> str:
    value = result.npu.value if result.npu else None
    if result.npu is not None and result.npu.is_tensor and isinstance(value, dict):
        if any(isinstance(value.get(k), float) and not math.isfinite(value[k]) for k in ("Max", "Min")):
            return "NPU max or min is inf or nan."
    err = _max_abs(result)
    if err is not None and err > 1e10:
        return "MaxAbsErr is above 1e+10."
    ratio = result.tensor.one_thousandth_ratio if result.tensor else None
    in_ratios = [r.tensor.one_thousandth_ratio for r in inputs if r.tensor]
    if ratio is not None and ratio < 0.6 and in_ratios and all(x is not None and x > 0.9 for x in in_ratios):
        return "One Thousandth Err Ratio: inputs above 0.9, output below 0.6."
    rel = _max_rel(result)
    if result.tensor is None and rel is not None and rel > 0.5:
        return "Relative error of the output max is above 0.5."
    return ""


def _yellow_reason(result: RowResult, inputs: list[RowResult]) -> str:
    if result.tensor is not None:
        worst_in_cos = _lowest([r.tensor.cosine for r in inputs if r.tensor])
        if result.tensor.cosine is not None and worst_in_cos is not None and worst_in_cos - result.tensor.cosine > 0.1:
            return "Cosine is more than 0.1 lower than the inputs'."
        worst_in_ratio = _lowest([r.tensor.one_thousandth_ratio for r in inputs if r.tensor])
        ratio = result.tensor.one_thousandth_ratio
        if ratio is not None and worst_in_ratio is not None and worst_in_ratio - ratio > 0.1:
            return "One Thousandth Err Ratio is more than 0.1 lower than the inputs'."
    rel, in_rels = _max_rel(result), [_max_rel(r) for r in inputs]
    if rel is not None and rel > 0.1 and in_rels and all(x is not None and x < 0.01 for x in in_rels):
        return "Relative error of the output is above 0.1 while the inputs' stay below 0.01."
    err, in_errs = _max_abs(result), [_max_abs(r) for r in inputs]
    known = [x for x in in_errs if x is not None]
    if err is not None and known and min(known) > 1 and err > 1 and err > 10 * max(known):
        return "MaxAbsErr of inputs and output is above 1 and the output's is 10 times larger."
    return ""


def _lowest(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return min(known) if known else None
