"""The framework-free half of free benchmark: comparison (incl. one-sided non-finite), thresholds,
preheat calibration, and the CSV appended across steps and processes."""

from __future__ import annotations

import csv
import math
import multiprocessing

import numpy as np
import pytest

from msprobe.core.fileio import append_csv_rows
from msprobe.core.free_benchmark import CSV_COLUMNS, Thresholds, dtype_threshold, max_relative_error
from msprobe.core.free_benchmark.compare import SMALL_FRACTION


def _reference(a, b):
    """Independent float64 formula: |a-b| / max(|b|, SMALL_FRACTION * max|b|)."""
    a, b = np.float64(a), np.float64(b)
    floor = np.abs(b).max() * SMALL_FRACTION
    return max(abs(x - y) / max(abs(y), floor) for x, y in zip(a.ravel(), b.ravel()))


def test_relative_error_against_float64_reference():
    rng = np.random.default_rng(0)
    perturbed = rng.standard_normal(1000)
    original = (perturbed.astype(np.float16)).astype(np.float64)
    assert math.isclose(max_relative_error(original, perturbed), _reference(original, perturbed), rel_tol=1e-12)
    assert max_relative_error(original, perturbed) <= dtype_threshold("float16")  # fp16 rounding is stable


def test_cancellation_near_zero_is_not_instability():
    assert max_relative_error(np.array([1e-9, 1.0]), np.array([2e-9, 1.0])) < 1e-5


@pytest.mark.parametrize(
    "original,perturbed,expected",
    [([np.inf, 1.0], [7e4, 1.0], math.inf), ([1.0, 2.0], [np.nan, 2.0], math.inf),
     ([np.inf, 1.0], [np.inf, 1.0], 0.0), ([np.nan, 1.0], [np.nan, 1.0], 0.0),
     ([np.inf, 1.0], [-np.inf, 1.0], math.inf), ([np.inf], [np.inf], 0.0)],
)
def test_non_finite_values(original, perturbed, expected):
    assert max_relative_error(np.array(original), np.array(perturbed)) == expected


def test_shape_mismatch_is_a_difference():
    assert max_relative_error(np.ones(3), np.ones(4)) == math.inf


def test_thresholds_grow_with_coarser_dtypes():
    assert dtype_threshold("float64") < dtype_threshold("float32") < dtype_threshold("float16") < dtype_threshold(
        "bfloat16")
    assert dtype_threshold("complex64") == dtype_threshold("float32")


def test_preheat_samples_and_calibrates():
    t = Thresholds(if_preheat=True, preheat_step=2, max_sample=3)
    assert [t.wants("Torch.matmul", 0) for _ in range(5)] == [True] * 3 + [False] * 2
    t.observe("Torch.matmul", "float16", 0.02, step=1)
    t.observe("Torch.matmul", "float16", math.inf, step=1)  # non-finite never calibrates
    assert t.threshold("Torch.matmul", "float16", step=1) == dtype_threshold("float16")
    assert t.threshold("Torch.matmul", "float16", step=2) == pytest.approx(0.04)
    assert t.threshold("Torch.relu", "float16", step=2) == dtype_threshold("float16")
    t.observe("Torch.matmul", "float16", 5.0, step=3)  # after preheat nothing more is learnt
    assert t.threshold("Torch.matmul", "float16", step=3) == pytest.approx(0.04)
    assert t.wants("Torch.matmul", 2)


def test_without_preheat_every_call_is_checked():
    t = Thresholds()
    assert all(t.wants("Torch.exp", 0) for _ in range(100))


@pytest.mark.parametrize("field,value", [("preheat_step", 0), ("max_sample", -1), ("max_sample", True)])
def test_bad_preheat_settings(field, value):
    with pytest.raises(ValueError, match=field):
        Thresholds(if_preheat=True, **{field: value})


def _append(path, rank):
    for step in range(20):
        append_csv_rows(path, CSV_COLUMNS, [[rank, "add_noise", "forward", step, f"Torch.exp.{i}", 0.5,
                                            "torch.float16", "(2, 3)", ""] for i in range(10)])


def test_rows_from_several_ranks_never_interleave(tmp_path):
    path = tmp_path / "free_benchmark.csv"
    processes = [multiprocessing.get_context("fork").Process(target=_append, args=(path, r)) for r in range(4)]
    for p in processes:
        p.start()
    for p in processes:
        p.join()
    with open(path, newline="") as handle:
        rows = list(csv.reader(handle))
    assert tuple(rows[0]) == CSV_COLUMNS and rows.count(list(CSV_COLUMNS)) == 1
    assert len(rows) == 1 + 4 * 20 * 10 and all(len(r) == len(CSV_COLUMNS) for r in rows)
