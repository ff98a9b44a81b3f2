"""Float64 numpy values of the monitor's ops, and readers of its output, shared by both frameworks' tests."""

from __future__ import annotations

import csv
import math
import re
from pathlib import Path

import numpy as np

OPS = ("min", "max", "norm", "mean", "zeros", "nans")


def metric_reference(array: np.ndarray, eps: float = 1e-8) -> dict[str, float]:
    """Each op of ``array``'s values in float64, independent of the code under test."""
    values = np.asarray(array, dtype=np.float64).ravel()
    return {
        "min": float(values.min()), "max": float(values.max()), "norm": math.sqrt(float(values @ values)),
        "mean": float(values.mean()), "zeros": float(np.count_nonzero(np.abs(values) < eps)) / values.size,
        "nans": float(np.count_nonzero(np.isnan(values))),
    }


def read_rows(run_dir: Path, group: str) -> list[dict]:
    """Every CSV row of ``group`` (all its step files), values of the ops as floats."""
    rows = []
    files = [p for p in run_dir.glob(f"{group}_*.csv") if re.fullmatch(rf"{group}_\d+-\d+\.csv", p.name)]
    for path in sorted(files):
        with path.open(newline="") as handle:
            for row in csv.DictReader(handle):
                rows.append({k: (float(v) if k in OPS else v) for k, v in row.items()})
    return rows


def assert_close_to_reference(row: dict, array: np.ndarray, rel: float = 2e-5) -> None:
    """``row``'s op values match the float64 reference (values rounded to 6 digits in the CSV)."""
    expected = metric_reference(array)
    for op in OPS:
        if op in row:
            tolerance = max(rel * abs(expected[op]), 1.5e-6)
            assert abs(row[op] - expected[op]) <= tolerance, (row["name"], op, row[op], expected[op])


def only_run_dir(output: Path) -> Path:
    (run_dir,) = [p for p in output.iterdir() if p.is_dir()]
    return run_dir
