"""array_stats skips numpy.errstate when no sum can overflow: same numbers, and no warning either way."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from msprobe.core.dump.host_stats import array_stats

CASES = {
    "plain float32": np.array([[1.5, -2.0], [3.25, 0.5]], np.float32),
    "nan": np.array([1.0, np.nan, 2.0], np.float32),
    "inf and -inf": np.array([np.inf, -np.inf, 1.0], np.float32),
    "float64 squares overflow": np.array([1e200, 1.0]),
    "float16 inf": np.array([np.inf, 1.0], np.float16),
    "int64": np.arange(7),
}


@pytest.mark.parametrize("name", CASES)
def test_same_numbers_as_under_errstate_and_no_warning(name):
    values = CASES[name]
    flat = values.astype(np.float32 if values.dtype in (np.float16, np.float32) else np.float64).reshape(-1)
    with np.errstate(invalid="ignore", over="ignore"):
        squares = float(np.add.reduce(flat * flat))
        want = [float(flat.max()), float(flat.min()), float(flat.sum()) / flat.size, math.sqrt(squares)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        stats = array_stats(values)
    np.testing.assert_array_equal(np.array([stats.max, stats.min, stats.mean, stats.norm]), np.array(want))


@pytest.mark.parametrize("values", [
    np.array([3e38, 3e38], np.float32),  # the sum leaves float32's range
    np.array([2e19, 1.0], np.float32),  # the squares do
    np.linspace(1e-23, 1e-21, 96, dtype=np.float32),  # the squares are subnormal (AdamW's exp_avg_sq)
    np.linspace(-3.3e38, 3.3e38, 5000, dtype=np.float32),  # a large array, both ends
], ids=["sum overflows", "squares overflow", "squares subnormal", "large"])
def test_finite_float32_at_the_ends_of_its_range_is_reduced_in_float64_without_warning(values):
    exact = values.astype(np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        stats = array_stats(values)
    assert stats.mean == pytest.approx(exact.mean(), rel=1e-12, abs=1e-12 * np.abs(exact).max())
    assert stats.norm == pytest.approx(np.linalg.norm(exact), rel=1e-12)
