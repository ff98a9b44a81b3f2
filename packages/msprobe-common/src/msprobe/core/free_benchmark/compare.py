"""How far a perturbed run's output is from the original, and how far is too far (docs/free_benchmark.md#comparison).

``max_rel`` is the largest relative difference over the elements, measured in float64 against the
perturbed output (the more precise one under ``improve_precision``/``to_cpu``). Elements much smaller
than the output's largest magnitude are measured against ``SMALL_FRACTION`` of that magnitude, so a
cancellation near zero (a matmul element that is almost 0) does not read as instability.

Non-finite values are differences too — the case msprobe 1.1.1 mapped to "no difference": an inf or
NaN on one side only (fp16 ``exp`` overflows where the fp32 re-run does not) gives ``max_rel = inf``;
the same non-finite value on both sides counts as equal.

Thresholds are a few units in the last place of the dtype: a stable API moves its output by about as
much as its inputs were moved (one ulp under add_noise/bit_noise, rounding under improve_precision).
"""

from __future__ import annotations

import math

import numpy as np

SMALL_FRACTION = 2.0**-10
THRESHOLDS = {
    "float16": 2.0**-8,  # 4 ulp
    "bfloat16": 2.0**-5,  # 4 ulp
    "float32": 2.0**-18,  # 32 ulp: fp32 APIs accumulate over long reductions
    "float64": 2.0**-40,
}
DEFAULT_DTYPE = "float32"
# Relative size of the noise add_noise puts on every element: one ulp of the dtype.
NOISE = {"float16": 2.0**-10, "bfloat16": 2.0**-7, "float32": 2.0**-23, "float64": 2.0**-52}


def dtype_threshold(dtype: str) -> float:
    """The largest ``max_rel`` a stable API of this dtype shows (float32's for other dtypes)."""
    return THRESHOLDS.get(dtype, THRESHOLDS[DEFAULT_DTYPE])


def max_relative_error(original: np.ndarray, perturbed: np.ndarray) -> float:
    """Largest relative difference of ``original`` from ``perturbed``; ``inf`` when a non-finite
    value appears on one side only, or when the shapes differ."""
    a = np.asarray(original, dtype=np.float64)
    b = np.asarray(perturbed, dtype=np.float64)
    if a.shape != b.shape:
        return math.inf
    if a.size == 0:
        return 0.0
    finite_a, finite_b = np.isfinite(a), np.isfinite(b)
    if np.any(finite_a != finite_b):
        return math.inf
    both_non_finite = ~finite_a
    if np.any(both_non_finite):
        same = (a == b) | (np.isnan(a) & np.isnan(b))
        if not np.all(same[both_non_finite]):
            return math.inf
        a, b = a[finite_a], b[finite_b]
        if a.size == 0:
            return 0.0
    magnitude = np.abs(b)
    floor = max(float(magnitude.max()) * SMALL_FRACTION, np.finfo(np.float64).tiny)
    with np.errstate(over="ignore"):
        return float(np.max(np.abs(a - b) / np.maximum(magnitude, floor)))
