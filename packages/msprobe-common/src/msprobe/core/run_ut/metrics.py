"""Element-wise error measures of the API pre-check, in float64 over flat arrays (no framework).

Every function takes ``device`` and ``bench`` as flat float64 arrays of the same size holding only
elements finite on both sides (:func:`finite_pairs` makes them); none of them rounds.
"""

from __future__ import annotations

import numpy as np

from msprobe.core.compare.judge import relative_errors


def finite_pairs(device: np.ndarray, bench: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """(device, bench, mismatches): the elements finite on both sides, and how many positions break
    the inf/nan rule — a position is fine when both sides are finite, both NaN, or the same infinity
    (same sign); anything else is a mismatch."""
    d, b = device.astype(np.float64, copy=False).ravel(), bench.astype(np.float64, copy=False).ravel()
    finite_d, finite_b = np.isfinite(d), np.isfinite(b)
    both = finite_d & finite_b
    same_special = ~finite_d & ~finite_b & ((d == b) | (np.isnan(d) & np.isnan(b)))
    mismatches = int(d.size - both.sum() - same_special.sum())
    return d[both], b[both], mismatches


def abs_errors(device: np.ndarray, bench: np.ndarray) -> np.ndarray:
    return np.abs(device - bench)


def rel_errors(device: np.ndarray, bench: np.ndarray) -> np.ndarray:
    """|d − b| / |b|: 0 where both are 0, +inf where only the bench is 0."""
    return relative_errors(abs_errors(device, bench), bench)


def ulp_of(bench: np.ndarray, mantissa_bits: int, min_exponent: int) -> np.ndarray:
    """The ULP of each bench value in a binary format with ``mantissa_bits`` stored mantissa bits and
    smallest normal exponent ``min_exponent``: 2^(max(floor(log2|b|), min_exponent) − mantissa_bits).
    Zeros and subnormals get the subnormal spacing 2^(min_exponent − mantissa_bits)."""
    _, exponent = np.frexp(np.abs(bench))  # |b| = m · 2^e with m in [0.5, 1): floor(log2|b|) = e − 1
    exponent = np.where(bench == 0, min_exponent, np.maximum(exponent.astype(np.int64) - 1, min_exponent))
    return np.ldexp(1.0, exponent - mantissa_bits)


def ulp_errors(device: np.ndarray, bench: np.ndarray, mantissa_bits: int, min_exponent: int) -> np.ndarray:
    """|d − b| in units of the bench value's ULP in the device format."""
    return abs_errors(device, bench) / ulp_of(bench, mantissa_bits, min_exponent)


def small_value_err_ratio(device: np.ndarray, bench: np.ndarray, small_value: float, atol: float) -> float:
    """Among elements with |b| < small_value, the fraction with |d − b| > atol (0 when there are none)."""
    small = np.abs(bench) < small_value
    if not small.any():
        return 0.0
    return float(np.mean(abs_errors(device[small], bench[small]) > atol))


def rmse(device: np.ndarray, bench: np.ndarray) -> float:
    """sqrt(mean((d − b)²)) over all elements (0 for none)."""
    if device.size == 0:
        return 0.0
    return float(np.sqrt(np.mean(np.square(device - bench))))


def rms(values: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(values)))) if values.size else 0.0


def normal_region(device: np.ndarray, bench: np.ndarray, small_value: float) -> tuple[np.ndarray, np.ndarray]:
    """The elements with |b| >= small_value (where a relative error means something)."""
    keep = np.abs(bench) >= small_value
    return device[keep], bench[keep]


def error_balance(device: np.ndarray, bench: np.ndarray) -> float:
    """|mean((d − b) / |b|)|: the bias of the errors (0 when they cancel), over nonzero benches."""
    if device.size == 0:
        return 0.0
    return float(abs(np.mean((device - bench) / np.abs(bench))))
