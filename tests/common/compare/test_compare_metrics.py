"""Tensor metrics against a direct float64 numpy computation, and the edge cases docs/compare.md#metrics names."""

from __future__ import annotations

import math

import numpy as np
import pytest

from msprobe.core.compare.judge.metrics import (
    MSG_ALL_NONFINITE,
    MSG_EMPTY,
    MSG_NO_FINITE_PAIR,
    MSG_ONE_ZERO,
    MSG_SCALAR,
    compare_tensors,
    stat_diff,
)


def reference(n: np.ndarray, b: np.ndarray) -> dict:
    """The definitions written out plainly, over elements finite on both sides."""
    n, b = n.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    keep = np.isfinite(n) & np.isfinite(b)
    n, b = n[keep], b[keep]
    d = np.abs(n - b)
    rel = np.array([0.0 if x == 0 and y == 0 else (math.inf if y == 0 else x / abs(y)) for x, y in zip(d, b)])
    return {
        "cosine": float(np.dot(n, b) / (np.linalg.norm(n) * np.linalg.norm(b))),
        "max_abs_err": float(d.max()),
        "max_relative_err": float(rel.max()),
        "one_thousandth_ratio": float(np.mean(rel < 0.001)),
        "five_thousandths_ratio": float(np.mean(rel < 0.005)),
        "diff_norm": float(np.linalg.norm(n - b)),
        "scale_norm": float(max(np.linalg.norm(n), np.linalg.norm(b))),
    }


def check(n: np.ndarray, b: np.ndarray) -> None:
    got, want = compare_tensors(n, b), reference(n, b)
    for key, value in want.items():
        assert getattr(got, key) == pytest.approx(value, rel=1e-12, abs=1e-15), key


def test_random_float32_against_bf16_like_noise():
    rng = np.random.default_rng(0)
    b = rng.standard_normal((64, 33)).astype(np.float32)
    n = (b * (1 + rng.normal(0, 3e-3, b.shape))).astype(np.float32)
    check(n, b)
    got = compare_tensors(n, b)
    assert 0 < got.one_thousandth_ratio < got.five_thousandths_ratio < 1
    assert got.npu.norm == pytest.approx(float(np.linalg.norm(n.astype(np.float64))), rel=1e-13)
    assert got.bench.mean == pytest.approx(float(b.astype(np.float64).mean()), rel=1e-12)


def test_metrics_are_not_rounded():
    b = np.array([1.0, 2.0, 3.0])
    n = b + np.array([1e-13, 0, 0])
    assert compare_tensors(n, b).max_abs_err == pytest.approx(1e-13, rel=1e-3)


def test_integer_and_bool_tensors_compare_as_float64():
    big = np.array([2**40 + 1, 5, -7], dtype=np.int64)
    check(big, big - np.array([1, 0, 0]))
    got = compare_tensors(np.array([True, False, True]), np.array([True, True, True]))
    assert got.max_abs_err == 1.0 and got.one_thousandth_ratio == pytest.approx(2 / 3)


def test_zeros_on_both_sides_are_identical_and_one_side_zero_has_no_cosine():
    assert compare_tensors(np.zeros(4), np.zeros(4)).cosine == 1.0
    got = compare_tensors(np.zeros(4), np.ones(4))
    assert got.cosine is None and MSG_ONE_ZERO in got.messages and got.max_abs_err == 1.0
    assert got.max_relative_err == 1.0
    assert compare_tensors(np.ones(3), np.zeros(3)).max_relative_err == math.inf


def test_single_element_has_no_cosine():
    got = compare_tensors(np.array(1.5), np.array(1.0))
    assert got.cosine is None and MSG_SCALAR in got.messages
    assert got.max_abs_err == 0.5 and got.max_relative_err == 0.5


def test_inf_nan_at_same_positions_are_excluded():
    n = np.array([np.nan, np.inf, 1.0, 2.0, -np.inf])
    b = np.array([np.nan, np.inf, 1.5, 2.0, -np.inf])
    got = compare_tensors(n, b)
    assert got.nonfinite_mismatch == 0
    check(n, b)


def test_inf_nan_at_different_positions_are_counted():
    n = np.array([np.inf, 1.0, np.nan, 4.0])
    b = np.array([1.0, 1.0, np.nan, -np.inf])
    got = compare_tensors(n, b)
    assert got.nonfinite_mismatch == 2
    assert "2 of 4" in got.messages[0]
    assert got.max_abs_err == 0.0


def test_all_nan_leaves_nothing_to_compare():
    got = compare_tensors(np.full(3, np.nan), np.full(3, np.nan))
    assert got.max_abs_err is None and got.nonfinite_mismatch == 0
    assert got.messages == (MSG_ALL_NONFINITE,)


def test_an_overflowed_scalar_reports_the_mismatch_only():
    got = compare_tensors(np.array([np.inf], np.float16), np.array([7e5], np.float32))
    assert got.max_abs_err is None and got.nonfinite_mismatch == 1
    assert "1 of 1" in got.messages[0] and got.messages[1:] == (MSG_NO_FINITE_PAIR,)


def test_shape_mismatch_and_empty():
    got = compare_tensors(np.ones((2, 3)), np.ones((3, 2)))
    assert got.shape_mismatch and "[2, 3]" in got.messages[0] and got.cosine is None
    assert compare_tensors(np.ones((0, 3)), np.ones((0, 3))).messages == (MSG_EMPTY,)


def test_stat_diff():
    assert stat_diff(1.5, 1.0) == (0.5, 0.5)
    assert stat_diff(1.0, 0.0) == (1.0, math.inf)
    assert stat_diff(math.inf, math.inf) == (0.0, 0.0)
    assert stat_diff(None, 1.0) == (None, None)


def test_norms_for_the_rounding_rule_neither_overflow_nor_count_nonfinite_elements():
    b = np.array([3e200, 4e200, np.inf, 1.0])
    n = np.array([3e200, 4.4e200, np.inf, 1.0])
    got = compare_tensors(n, b)
    assert got.diff_norm == pytest.approx(0.4e200, rel=1e-12)  # squaring 4e200 would overflow to inf
    assert got.scale_norm == pytest.approx(math.hypot(3, 4.4) * 1e200, rel=1e-12)
