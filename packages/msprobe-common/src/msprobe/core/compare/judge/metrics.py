"""The numbers of a comparison, in float64 over every element, never rounded.

Cosine, MaxAbsErr, MaxRelativeErr and the thousandth ratios as 1.1.1 names them, with the cases it left open
(non-finite elements, all-zero sides, a single element) decided in docs/compare.md#metrics; plus, for the
first-divergence rule (:mod:`msprobe.core.compare.judge.rounding`), ``diff_norm`` = ‖n − b‖ and ``scale_norm`` =
max(‖n‖, ‖b‖), L2 norms over the elements finite on both sides.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

THOUSANDTH, FIVE_THOUSANDTHS = 0.001, 0.005

MSG_SHAPE = "Shape of NPU and bench Tensor do not match. Skipped."
MSG_EMPTY = "This is empty data, can not compare."
MSG_SCALAR = "Single element: Cosine is not defined, judged on MaxAbsErr."
MSG_ONE_ZERO = "One side is all zeros: Cosine is not defined, judged on MaxAbsErr."
MSG_ALL_NONFINITE = "Every element is inf/nan at the same positions on both sides: nothing left to compare."
MSG_NO_FINITE_PAIR = "No element is finite on both sides: nothing left to compare past the inf/nan mismatch."


@dataclass(frozen=True)
class Stats:
    """max, min, mean and L2 norm of one side (None where not defined, e.g. an empty tensor)."""

    max: float | None = None
    min: float | None = None
    mean: float | None = None
    norm: float | None = None


@dataclass(frozen=True)
class TensorMetrics:
    cosine: float | None = None
    max_abs_err: float | None = None
    max_relative_err: float | None = None
    one_thousandth_ratio: float | None = None
    five_thousandths_ratio: float | None = None
    diff_norm: float | None = None
    scale_norm: float | None = None
    npu: Stats = field(default_factory=Stats)
    bench: Stats = field(default_factory=Stats)
    nonfinite_mismatch: int = 0
    shape_mismatch: bool = False
    messages: tuple[str, ...] = ()
    amplification: float | None = None  # a normalisation's input: how it multiplies relative rounding (.conditioning)


def as_float64(array: np.ndarray) -> np.ndarray:
    """Any numeric or bool array as a flat float64 array (complex by modulus)."""
    array = np.asarray(array)
    if np.iscomplexobj(array):
        array = np.abs(array)
    return array.astype(np.float64, copy=False).ravel()


def stats(array: np.ndarray) -> Stats:
    """Statistics over all elements in float64 (NaN and inf propagate, as they are the data)."""
    values = as_float64(array)
    if values.size == 0:
        return Stats()
    with np.errstate(all="ignore"):
        return Stats(
            float(values.max()), float(values.min()), float(values.mean()), float(np.sqrt(np.dot(values, values)))
        )


def relative_errors(abs_err: np.ndarray, bench: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = abs_err / np.abs(bench)
    rel[(bench == 0) & (abs_err == 0)] = 0.0
    rel[(bench == 0) & (abs_err != 0)] = np.inf
    return rel


def l2_norm(values: np.ndarray) -> float:
    """‖values‖ without overflow or underflow: scaled by the largest magnitude first."""
    if values.size == 0:
        return 0.0
    top = float(np.abs(values).max())
    if top == 0 or not math.isfinite(top):
        return top
    scaled = values / top
    return top * math.sqrt(float(np.dot(scaled, scaled)))


def cosine(npu: np.ndarray, bench: np.ndarray) -> tuple[float | None, str | None]:
    """Cosine similarity, or None with the reason; scaled by each norm first so it cannot overflow."""
    if npu.size == 1:
        return None, MSG_SCALAR
    scale_n, scale_b = np.abs(npu).max(), np.abs(bench).max()
    if scale_n == 0 and scale_b == 0:
        return 1.0, None
    if scale_n == 0 or scale_b == 0:
        return None, MSG_ONE_ZERO
    n, b = npu / scale_n, bench / scale_b
    return float(np.dot(n, b) / (np.sqrt(np.dot(n, n)) * np.sqrt(np.dot(b, b)))), None


def compare_tensors(npu: np.ndarray, bench: np.ndarray) -> TensorMetrics:
    """Every tensor metric of one NPU/bench pair (see the module docstring)."""
    npu_stats, bench_stats = stats(npu), stats(bench)
    if tuple(np.shape(npu)) != tuple(np.shape(bench)):
        return TensorMetrics(npu=npu_stats, bench=bench_stats, shape_mismatch=True, messages=(
            f"{MSG_SHAPE} NPU {list(np.shape(npu))}, bench {list(np.shape(bench))}.",))
    n, b = as_float64(npu), as_float64(bench)
    if n.size == 0:
        return TensorMetrics(npu=npu_stats, bench=bench_stats, messages=(MSG_EMPTY,))
    finite_n, finite_b = np.isfinite(n), np.isfinite(b)
    both_finite = finite_n & finite_b
    same_nonfinite = ~finite_n & ~finite_b & ((n == b) | (np.isnan(n) & np.isnan(b)))
    mismatch = int(n.size - both_finite.sum() - same_nonfinite.sum())
    messages = []
    if mismatch:
        messages.append(
            f"The Position of inf or nan in NPU and bench Tensor do not match: {mismatch} of {n.size} elements."
        )
    n, b = n[both_finite], b[both_finite]
    if n.size == 0:
        return TensorMetrics(npu=npu_stats, bench=bench_stats, nonfinite_mismatch=mismatch,
                             messages=(*messages, MSG_NO_FINITE_PAIR if mismatch else MSG_ALL_NONFINITE))
    abs_err = np.abs(n - b)
    rel = relative_errors(abs_err, b)
    cos, why = cosine(n, b)
    if why:
        messages.append(why)
    return TensorMetrics(
        cosine=cos,
        max_abs_err=float(abs_err.max()),
        max_relative_err=float(rel.max()),
        one_thousandth_ratio=float(np.mean(rel < THOUSANDTH)),
        five_thousandths_ratio=float(np.mean(rel < FIVE_THOUSANDTHS)),
        diff_norm=l2_norm(abs_err),
        scale_norm=max(l2_norm(n), l2_norm(b)),
        npu=npu_stats,
        bench=bench_stats,
        nonfinite_mismatch=mismatch,
        messages=tuple(messages),
    )


def stat_of(value: Any, key: str) -> float | None:
    """A statistic from a dump.json tensor value as a float (bools as 0/1), None when absent or when the value
    is no tensor (a ``null`` leaf: 26.2.0 records a positional ``None`` argument so, where a tensor may pair)."""
    raw = value.get(key) if isinstance(value, dict) else None
    if isinstance(raw, bool):
        return float(raw)
    if isinstance(raw, (int, float)):
        try:
            return float(raw)
        except OverflowError:  # an integer past float range (dump.json may hold any JSON number)
            return math.inf if raw > 0 else -math.inf
    return None


def stat_diff(npu: float | None, bench: float | None) -> tuple[float | None, float | None]:
    """(npu − bench, |npu − bench| / |bench|) with the relative-error rules above; None when absent."""
    if npu is None or bench is None:
        return None, None
    if math.isnan(npu) and math.isnan(bench):
        return 0.0, 0.0
    with np.errstate(all="ignore"):
        diff = float(np.float64(npu) - np.float64(bench))
    if npu == bench:
        return 0.0, 0.0
    if bench == 0:
        return diff, math.inf
    return diff, abs(diff) / abs(bench)
