"""Statistics of an array that already lives in host memory, exact per dtype (SPEC 4.4).

When a framework runs on the CPU there is no device to keep statistics on and nothing to
synchronise: both adapters hand the tensor's memory to numpy (without a copy where the dtype allows)
and get the record at once. One pass each for max, min, sum and sum of squares; mean and norm follow
on the host. Integers and float64 reduce in float64, float16 widens to float32 so sums cannot
overflow, float32 stays float32 (as msprobe 1.1.1 writes it), complex values reduce over their
absolute value, bool gives any/all.
"""

from __future__ import annotations

import math

import numpy as np

from msprobe.core.records import TensorStats


def array_stats(values: np.ndarray) -> TensorStats:
    if values.size == 0:
        return TensorStats(None, None, None, None)
    if values.dtype == np.bool_:
        return TensorStats(bool(values.any()), bool(values.all()), None, None)
    if np.iscomplexobj(values):
        values = np.abs(values)
    if values.dtype == np.float16:
        values = values.astype(np.float32)
    elif values.dtype != np.float32:
        values = values.astype(np.float64)
    flat = values.reshape(-1)
    with np.errstate(invalid="ignore", over="ignore"):  # inf/nan give inf/nan statistics, as wanted
        high, low, total, squares = (float(v) for v in (flat.max(), flat.min(), flat.sum(), flat @ flat))
    stats = TensorStats(high, low, total / flat.size, math.sqrt(squares) if squares >= 0 else squares)
    return with_finite_extremes(stats, flat)


def with_finite_extremes(stats: TensorStats, flat: np.ndarray) -> TensorStats:
    """Add the extremes over finite elements where max or min is not finite (SPEC 4.4)."""
    if math.isfinite(stats.max) and math.isfinite(stats.min):
        return stats
    finite = flat[np.isfinite(flat)]
    if finite.size:
        stats.max_except_inf_nan = None if math.isfinite(stats.max) else float(finite.max())
        stats.min_except_inf_nan = None if math.isfinite(stats.min) else float(finite.min())
    return stats
