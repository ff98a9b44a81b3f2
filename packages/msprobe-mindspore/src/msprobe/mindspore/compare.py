"""``compare`` and ``compare_distributed`` for MindSpore dumps: the core engine with a ``.npy`` loader.

The loader is :func:`msprobe.core.compare.tensorfile.load_npy`: it never unpickles, and checks each
file's header against dump.json's shape and dtype, and against the file's size, before reading data.
"""

from __future__ import annotations

import os
from typing import Any

from msprobe.core.compare.api import compare_api, compare_distributed_api
from msprobe.core.compare.tensorfile import load_npy

__all__ = ["compare", "compare_distributed", "load_npy"]


def compare(input_param: dict[str, Any], output_path: str | os.PathLike, stack_mode: bool = False,
            auto_analyze: bool = True, fuzzy_match: bool = False, **options: Any):
    """Compare two MindSpore dumps (same parameters as ``msprobe.pytorch.compare``)."""
    return compare_api(load_npy, input_param, output_path, stack_mode, auto_analyze, fuzzy_match, **options)


def compare_distributed(npu_dump_dir: str | os.PathLike, bench_dump_dir: str | os.PathLike,
                        output_path: str | os.PathLike, **options: Any):
    """Compare two step directories rank by rank."""
    return compare_distributed_api(load_npy, npu_dump_dir, bench_dump_dir, output_path, **options)
