"""Statistics of an array that already lives in host memory, exact per dtype (docs/dump_format.md#values).

When a framework runs on the CPU there is no device to keep statistics on and nothing to
synchronise: both adapters hand the tensor's memory to numpy (without a copy where the dtype allows).
A small array is copied and its statistics are computed with the rest of its batch, in stacks of
arrays of one dtype and size (:func:`host_stats`, :func:`resolve_copies`); a large one at once
(:func:`array_stats`). One pass each for max, min, sum and sum of squares; mean and norm follow
on the host. Integers and float64 reduce in float64, float16 widens to float32 so sums cannot
overflow, float32 stays float32 (as msprobe 1.1.1 writes it), complex values reduce over their
absolute value, bool gives any/all. :func:`crc32_hex` is the checksum both frameworks write.

Statistics left on an accelerator are :mod:`msprobe.core.dump.device_stats`'s.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from msprobe.core.contract import TensorStats

_MAX, _MIN, _SUM = np.maximum.reduce, np.minimum.reduce, np.add.reduce


def array_stats(values: np.ndarray) -> TensorStats:
    if values.size == 0:
        return TensorStats(None, None, None, None)
    kind = values.dtype.kind
    if kind == "b":
        return TensorStats(bool(values.any()), bool(values.all()), None, None)
    if kind == "c":
        values = np.abs(values)
    flat = _reduction_values(values)
    # the ufuncs' reductions themselves (what .max()/.min()/.sum() call, without their Python wrappers:
    # the same numbers, a quarter less time on the small tensors that are most of a model's calls)
    high, low = float(_MAX(flat)), float(_MIN(flat))  # max/min warn of nothing, not even of NaN
    if _cannot_overflow(high, low, flat):
        total, squares = float(_SUM(flat)), float(_SUM(flat * flat))
    elif flat.dtype == np.float32 and math.isfinite(high) and math.isfinite(low):
        total, squares = float(_SUM(flat, dtype=np.float64)), float(_SUM(np.square(flat, dtype=np.float64)))
    else:
        with np.errstate(invalid="ignore", over="ignore"):  # inf/nan give inf/nan statistics, as wanted
            total, squares = float(_SUM(flat)), float(_SUM(flat * flat))
    stats = TensorStats(high, low, total / flat.size, math.sqrt(squares) if squares >= 0 else squares)
    return with_finite_extremes(stats, flat)


def _reduction_values(values: np.ndarray) -> np.ndarray:
    """``values`` flat in the dtype its statistics are reduced in: float32 for float16/float32, float64
    for the rest."""
    if values.dtype == np.float16:
        values = values.astype(np.float32)
    elif values.dtype != np.float32:
        values = values.astype(np.float64)
    return values.ravel()


class HostCopy:
    """The statistics of a small array, not computed yet: a copy of it (what the call saw, whatever
    changes the tensor in place afterwards), reduced together with the other copies of its dtype and
    size when the batch is fetched (:func:`resolve_copies`).

    Why: a small tensor's four reductions cost ≈ 1 µs each through numpy's per-call machinery, and a
    model's calls are mostly small tensors; one reduction over a stack of a thousand rows costs about as
    much as one of them. ``stats`` is set when resolved (the copy is then let go), so a handle shared by
    an unchanged tensor seen again is reduced once. Copies live until their batch is fetched (at most
    ``FETCH_BATCH`` entries, or the step's end), each at most :data:`BATCHED_MAX_ELEMENTS` elements."""

    __slots__ = ("values", "stats")

    def __init__(self, values: np.ndarray) -> None:
        self.values: np.ndarray | None = values
        self.stats: TensorStats | None = None


# Arrays up to this many elements are copied and reduced in batches (a copy costs less than the
# reductions it replaces); larger ones are reduced at once.
BATCHED_MAX_ELEMENTS = 4096


def host_stats(values: np.ndarray) -> HostCopy | TensorStats:
    """The statistics of an array in host memory: a :class:`HostCopy` to resolve with its batch when it
    is small and real, otherwise computed now by :func:`array_stats`. Both give the same numbers."""
    if values.dtype.kind in "fiu" and 0 < values.size <= BATCHED_MAX_ELEMENTS:
        if values.dtype.char == "f":  # float32, most tensors: reduced as it is, so copied here
            return HostCopy(values.ravel().copy())
        return HostCopy(_reduction_values(values))  # widened: a new array already
    return array_stats(values)


def resolve_copies(copies: Sequence[HostCopy]) -> None:
    """Fill in the statistics of every unresolved copy: per dtype and size, max, min, sum and sum of
    squares over the rows of one stacked array. numpy reduces each row of a C-ordered stack exactly as it
    reduces that row alone, so the numbers are :func:`array_stats`'s; a row that is not finite or whose
    sums could overflow is handed to :func:`array_stats` itself (finite extremes, warnings)."""
    groups: dict[tuple[str, int], list[HostCopy]] = {}
    for copy in copies:
        if copy.stats is None and copy.values is not None:
            groups.setdefault((copy.values.dtype.char, copy.values.size), []).append(copy)
    for (_, size), group in groups.items():
        if len(group) == 1:
            group[0].stats = array_stats(group[0].values)
        else:
            _resolve_group(group, size)
        for copy in group:
            copy.values = None


def _resolve_group(group: list[HostCopy], size: int) -> None:
    rows = np.stack([copy.values for copy in group])
    high, low = _MAX(rows, axis=1), _MIN(rows, axis=1)
    bound = np.maximum(np.abs(high), np.abs(low))
    with np.errstate(invalid="ignore", over="ignore"):  # rows it could concern are recomputed below
        plain = np.isfinite(bound) & (np.maximum(bound, bound * bound) * size < _SAFE_LIMIT[rows.itemsize == 4])
        if rows.itemsize == 4:
            low_bound, high_bound = EXACT_FLOAT32_BOUNDS
            plain &= ((bound >= low_bound) & (bound <= high_bound)) | (bound == 0)
        totals, squares = _SUM(rows, axis=1), _SUM(rows * rows, axis=1)
    numbers = zip(plain.tolist(), high.tolist(), low.tolist(), totals.tolist(), squares.tolist())
    for copy, (is_plain, hi, lo, total, square) in zip(group, numbers):
        copy.stats = TensorStats(hi, lo, total / size, math.sqrt(square)) if is_plain else array_stats(copy.values)


def _cannot_overflow(high: float, low: float, flat: np.ndarray) -> bool:
    """Whether the sum and the sum of squares of ``flat`` (extremes ``high``/``low``), taken in its own
    dtype, are exact to that dtype's precision: they stay finite (so numpy has no floating-point warning
    to give and :class:`numpy.errstate`, 2 µs, can be skipped) and, in float32, the squares are not
    subnormal (:data:`EXACT_FLOAT32_BOUNDS`). Otherwise a finite float32 tensor is reduced in float64."""
    bound = max(abs(high), abs(low))  # NaN compares false below, so a NaN takes the errstate path
    if flat.dtype.itemsize == 4 and not exact_in_float32(bound):
        return False
    return max(bound, bound * bound) * flat.size < _SAFE_LIMIT[flat.dtype.itemsize == 4]


def exact_in_float32(bound: float) -> bool:
    """Whether float32's own mean and norm are exact for a float32 tensor whose largest magnitude is
    ``bound`` (:data:`EXACT_FLOAT32_BOUNDS`); False for NaN and infinity."""
    return bound == 0 or EXACT_FLOAT32_BOUNDS[0] <= bound <= EXACT_FLOAT32_BOUNDS[1]


# The largest magnitudes for which float32's own mean and norm are exact to float32's precision (one
# policy for every path, docs/pytorch/dump.md#statistics-precision): below 2**-40 the squares of the
# elements are subnormal or near it and lose digits (AdamW's exp_avg_sq, ~1e-22: 7e-5 relative), above
# 2**40 a sum of squares may leave float32's range (near 3e38 the mean itself does). Outside them the
# mean and the norm of a float32 tensor are reduced in float64 (host) or scaled by a power of two
# (device), so they are finite and exact for every finite tensor. All-zero tensors need neither.
EXACT_FLOAT32_BOUNDS = (2.0**-40, 2.0**40)


# Half the largest float32 / float64: a bound on every partial sum (any order) well inside the range.
_SAFE_LIMIT = {True: float(np.finfo(np.float32).max) / 2, False: float(np.finfo(np.float64).max) / 2}


def with_finite_extremes(stats: TensorStats, flat: np.ndarray) -> TensorStats:
    """Add the extremes over finite elements where max or min is not finite (docs/dump_format.md#values)."""
    if math.isfinite(stats.max) and math.isfinite(stats.min):
        return stats
    finite = flat[np.isfinite(flat)]
    if finite.size:
        stats.max_except_inf_nan = None if math.isfinite(stats.max) else float(finite.max())
        stats.min_except_inf_nan = None if math.isfinite(stats.min) else float(finite.min())
    return stats


def crc32_hex(data: Any) -> str:
    """CRC-32 of a bytes-like object as 8 lowercase hex digits (``summary_mode: md5``)."""
    return f"{zlib.crc32(data) & 0xFFFFFFFF:08x}"
