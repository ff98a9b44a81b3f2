"""``compare`` and ``compare_distributed`` for MindSpore dumps: the core engine with a ``.npy`` loader."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from msprobe.core.compare.api import compare_api, compare_distributed_api


def load_npy(path: Path) -> np.ndarray:
    """One saved tensor; ``allow_pickle=False`` so a crafted file cannot run code."""
    return np.load(path, allow_pickle=False)


def compare(input_param: dict[str, Any], output_path: str | os.PathLike, stack_mode: bool = False,
            auto_analyze: bool = True, fuzzy_match: bool = False, **options: Any):
    """Compare two MindSpore dumps (same parameters as ``msprobe.pytorch.compare``)."""
    return compare_api(load_npy, input_param, output_path, stack_mode, auto_analyze, fuzzy_match, **options)


def compare_distributed(npu_dump_dir: str | os.PathLike, bench_dump_dir: str | os.PathLike,
                        output_path: str | os.PathLike, **options: Any):
    """Compare two step directories rank by rank."""
    return compare_distributed_api(load_npy, npu_dump_dir, bench_dump_dir, output_path, **options)
