"""What one grad-probe step must have written, checked in float64 numpy against the gradients the
optimizer received. Shared by the PyTorch and MindSpore grad-probe tests (numpy only, no framework)."""

from __future__ import annotations

import csv
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest


def read_rows(path: Path) -> list[list[str]]:
    with open(path, newline="") as handle:
        return list(csv.reader(handle))


def check_l2_step(rank_dir: Path, step: int, grads: dict[str, np.ndarray], bounds: Sequence[float]) -> list[list[str]]:
    """``grad_summary_{step}.csv`` has one row per gradient of ``grads`` (name → array, in order): interval
    fractions, ``=0``, max, min, norm and shape as numpy computes them, and ``step{step}/{name}.npy`` holds
    ``grad > 0``. Returns the rows, header first."""
    rows = read_rows(rank_dir / f"grad_summary_{step}.csv")
    assert [r[0] for r in rows[1:]] == list(grads)
    edges = [-np.inf, *bounds, np.inf]
    for name, *cells in rows[1:]:
        grad = grads[name]
        g64 = grad.astype(np.float64).ravel()
        fractions = [np.mean((g64 > low) & (g64 <= high)) for low, high in zip(edges, edges[1:])]
        assert [float(v) for v in cells[:-4]] == pytest.approx([*fractions, np.mean(g64 == 0)], abs=1e-15)
        assert float(cells[-4]) == g64.max() and float(cells[-3]) == g64.min()
        assert float(cells[-2]) == pytest.approx(np.linalg.norm(g64), rel=1e-6)
        assert cells[-1] == str(list(grad.shape))
        signs = np.load(rank_dir / f"step{step}" / f"{name}.npy")
        assert signs.dtype == np.bool_
        np.testing.assert_array_equal(signs, grad > 0)
    return rows


def check_l0_step(rank_dir: Path, step: int, grads: dict[str, np.ndarray]) -> None:
    """L0: the header, the ``MD5`` column (CRC-32 of the float32 bytes, as msprobe 1.1.1), max, and no
    sign files."""
    rows = read_rows(rank_dir / f"grad_summary_{step}.csv")
    assert rows[0] == ["param_name", "MD5", "max", "min", "norm", "shape"]
    assert [r[0] for r in rows[1:]] == list(grads)
    for name, checksum, maximum, *_ in rows[1:]:
        grad = grads[name]
        assert checksum == f"{zlib.crc32(np.ascontiguousarray(grad, dtype=np.float32).tobytes()):08x}"
        assert float(maximum) == grad.astype(np.float64).max()
    assert not (rank_dir / f"step{step}").exists()
