"""Statistics of small host arrays computed with their batch (msprobe.core.dump.host_stats.host_stats and
resolve_copies): the numbers are array_stats's, bit for bit, and close to a float64 reference."""

from __future__ import annotations

import math

import numpy as np
import pytest

from msprobe.core.dump.host_stats import BATCHED_MAX_ELEMENTS, HostCopy, array_stats, host_stats, resolve_copies
from msprobe.core.contract import TensorStats

FIELDS = ("max", "min", "mean", "norm", "max_except_inf_nan", "min_except_inf_nan")


def _same(a: TensorStats, b: TensorStats) -> bool:
    return all(
        (x is None and y is None) or (x is not None and y is not None and (x == y or (math.isnan(x) and math.isnan(y))))
        for x, y in ((getattr(a, f), getattr(b, f)) for f in FIELDS)
    )


def _arrays() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    arrays = []
    for size in (1, 2, 7, 8, 9, 31, 32, 100, 127, 128, 129, 1000, BATCHED_MAX_ELEMENTS):
        for _ in range(3):  # several of one size and dtype: reduced as one stack
            scale = 10.0 ** rng.integers(-3, 4)
            arrays.append((rng.standard_normal(size) * scale).astype(np.float32))
        arrays.append(rng.standard_normal(size).astype(np.float16))
        arrays.append(rng.standard_normal(size))
        arrays.append(rng.integers(-1000, 1000, size).astype(np.int32))
        arrays.append(rng.integers(0, 255, size).astype(np.uint8))
    special = [np.array([1.0, np.nan, 2.0], np.float32), np.array([np.inf, -np.inf, 1.0], np.float32),
               np.array([3e38, 3e38, 1.0], np.float32), np.array([2e19, 1.0, 1.0], np.float32),
               np.array([1.0, 2.0, 3.0], np.float32)]  # the last shares their stack: plain again
    return arrays + special


def test_batched_numbers_are_array_stats_numbers_and_close_to_float64():
    arrays = _arrays()
    handles = [host_stats(a) for a in arrays]
    assert all(isinstance(h, HostCopy) for h in handles)
    resolve_copies(handles)
    for array, handle in zip(arrays, handles):
        assert _same(handle.stats, array_stats(array)), (array.dtype, array.size)
        if np.isfinite(array.astype(np.float64)).all() and np.abs(array.astype(np.float64)).max() < 1e18:
            reference = array.astype(np.float64)
            assert handle.stats.max == reference.max() and handle.stats.min == reference.min()
            assert handle.stats.mean == pytest.approx(reference.mean(), rel=1e-5, abs=1e-6)
            assert handle.stats.norm == pytest.approx(np.sqrt((reference * reference).sum()), rel=1e-5)
        assert handle.values is None  # the copy is let go once reduced


def test_non_finite_and_overflowing_rows_get_what_array_stats_gives():
    arrays = _arrays()[-5:]
    handles = [host_stats(a) for a in arrays]
    resolve_copies(handles)
    nan, infs, big_sum, big_squares, plain = (h.stats for h in handles)
    assert math.isnan(nan.max) and nan.max_except_inf_nan == 2.0
    assert (infs.max, infs.min, infs.max_except_inf_nan, infs.min_except_inf_nan) == (math.inf, -math.inf, 1.0, 1.0)
    for stats, array in ((big_sum, arrays[2]), (big_squares, arrays[3])):  # finite: reduced in float64
        exact = array.astype(np.float64)
        assert stats.mean == pytest.approx(exact.mean(), rel=1e-12)
        assert stats.norm == pytest.approx(np.linalg.norm(exact), rel=1e-12)
    assert (plain.max, plain.min, plain.mean) == (3.0, 1.0, 2.0)


def test_the_copy_is_what_the_call_saw_and_a_shared_handle_is_reduced_once():
    array = np.array([1.0, 2.0, 3.0], np.float32)
    handle = host_stats(array)
    array[:] = 100.0  # changed in place before the batch is fetched
    resolve_copies([handle, handle])
    assert (handle.stats.max, handle.stats.mean) == (3.0, 2.0)
    first = handle.stats
    resolve_copies([handle])
    assert handle.stats is first


def test_large_bool_complex_and_empty_arrays_are_computed_at_once():
    for values in (np.ones(BATCHED_MAX_ELEMENTS + 1, np.float32), np.array([True, False]),
                   np.array([3 + 4j]), np.zeros(0, np.float32)):
        stats = host_stats(values)
        assert isinstance(stats, TensorStats) and _same(stats, array_stats(values))
