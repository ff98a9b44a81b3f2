"""Is a difference more than rounding explains? The rule behind the first divergence.

The verdict columns keep msprobe 1.1.1's fixed thresholds (cosine 0.99, error 0.001...), which
cannot tell bf16 rounding from a fault: they flag near-zero statistics that rounding moved by 1e-10
and pass a 5% weight error. The first divergence is chosen by this rule instead:

- **unit** ``u``: the unit roundoff of the coarsest floating dtype in either dump (fp64 2^-53,
  fp32 2^-24, fp16 2^-11, bf16 2^-8, fp8 e4m3 2^-4, e5m2 2^-3). The whole run's, not the row's:
  under bf16 autocast, fp32 rows (parameter gradients, ops autocast keeps in fp32, integer results
  of bf16 values) are computed from bf16 values and carry bf16's error.
- **scale** ``S`` of a row: its own L2 norm (the larger of the two sides'). For a backward entry,
  at least the largest L2 norm among the entry's input tensors (the incoming gradients): gradient
  reductions cancel — a conv bias ahead of BatchNorm has a gradient near zero whatever the
  gradients it sums — and their rounding error is relative to what they summed. Forward rows get no
  such floor, because forward layers often shrink their input (at Hugging Face's init an MLP
  projection's output has a sixth of its input's norm) and an input floor would hide their faults.
- a **tensor** row diverges when ‖npu − bench‖ > slack · u · S.
- a **statistics** row diverges when a statistic moves more than slack · u times its scale: S for
  Norm; the RMS S/√numel for Mean (a near-zero mean is judged against the tensor's RMS, not
  itself); the tensor's largest magnitude max(|Max|, |Min|) (at least the RMS) for Max and Min,
  since every element's rounding is relative to the values that produced it, and the extreme
  element itself may change.
- **slack** (:data:`FORWARD_SLACK`, :data:`BACKWARD_SLACK`): how many units of accumulated rounding
  a row may carry, measured on real models (docs/compare.md): forward rows of bf16 autocast runs
  against fp32 stayed within 3.6 units, gradients within 70 (they carry every activation's error,
  and BatchNorm's backward and sums over the batch cancel), while scaling one weight by 1.05 moves
  its layer's output by 12 to 13 units. Forward 8, backward 128: twice the worst seen.
- inf/nan at different positions (or a statistic finite on one side only) always diverge; rows
  that could not be compared (unreadable, one-sided, different shapes) never do.

``excess`` = difference / allowance: above 1 the row diverges; the HTML report shows it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from msprobe.core.compare.metrics import stat_of
from msprobe.core.compare.rows import Row
from msprobe.core.compare.verdict import STAT_KEYS, RowResult
from msprobe.core.naming import BACKWARD, parse_name

UNITS = {
    "float64": 2.0**-53, "float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8,
    "float8_e4m3fn": 2.0**-4, "float8_e4m3fnuz": 2.0**-4, "float8_e5m2": 2.0**-3, "float8_e5m2fnuz": 2.0**-3,
    "complex128": 2.0**-53, "complex64": 2.0**-24, "complex32": 2.0**-11,
}
_ALIASES = {"double": "float64", "float": "float32", "half": "float16", "bf16": "bfloat16", "fp16": "float16",
            "fp32": "float32", "fp64": "float64", "cfloat": "complex64", "cdouble": "complex128", "chalf": "complex32"}
FORWARD_SLACK = 8.0
BACKWARD_SLACK = 128.0
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


def judge_entry(rows: list[RowResult], unit: float, cross_framework: bool = False) -> None:
    """Set ``excess`` on every row of one entry (a backward entry's rows share its input scale as a floor)."""
    backward = _is_backward(rows[0].entry)
    allowance = unit * (BACKWARD_SLACK if backward else FORWARD_SLACK) * (CROSS_FRAMEWORK_SLACK if cross_framework
                                                                          else 1.0)
    floor = max((_own_scale(r) for r in rows if r.part == "input"), default=0.0) if backward else 0.0
    for result in rows:
        result.excess = excess(result, allowance, floor)


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


def excess(result: RowResult, allowance: float, floor: float = 0.0) -> float | None:
    """The row's difference over ``allowance`` (slack · unit) times its scale; None where no number applies
    (one-sided rows, md5 mode, unreadable tensors, different shapes, non-numeric values)."""
    npu, bench = result.npu, result.bench
    if npu is None or bench is None or result.mode == "md5" or npu.is_tensor != bench.is_tensor:
        return None
    if npu.is_tensor:
        if result.mode == "summary":
            return _stats_excess(npu, bench, allowance, floor)
        metrics = result.tensor
        if metrics is None or metrics.shape_mismatch:
            return None
        if metrics.nonfinite_mismatch:
            return math.inf
        if metrics.diff_norm is None:
            return None
        return _ratio(metrics.diff_norm, allowance * max(metrics.scale_norm or 0.0, floor))
    return _value_excess(npu.value, bench.value, allowance, floor)


def _value_excess(npu: object, bench: object, allowance: float, floor: float) -> float | None:
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
    return _ratio(abs(a - b), allowance * max(abs(a), abs(b), floor))


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


def _stats_excess(npu: Row, bench: Row, allowance: float, floor: float) -> float | None:
    n_stats = [stat_of(npu.value, k) for k in STAT_KEYS]
    b_stats = [stat_of(bench.value, k) for k in STAT_KEYS]
    scale = max(_finite_abs(n_stats[3], b_stats[3]), floor)
    count = numel(bench.value) or numel(npu.value)
    rms = scale / math.sqrt(count) if count else scale
    peak = _finite_abs(*n_stats[:2], *b_stats[:2])  # the tensor's largest magnitude, either side
    worst: float | None = None
    for key, a, b in zip(STAT_KEYS, n_stats, b_stats):
        if a is None or b is None:
            continue
        if not (math.isfinite(a) and math.isfinite(b)):
            if a == b or (math.isnan(a) and math.isnan(b)):
                worst = worst or 0.0
                continue
            return math.inf
        own = scale if key == "Norm" else rms if key == "Mean" else max(peak, rms)
        ratio = _ratio(abs(a - b), allowance * own)
        worst = ratio if worst is None else max(worst, ratio)
    return worst
