"""``compare`` and ``compare_distributed`` for MindSpore dumps: the core engine with a ``.npy`` loader.

The loader is :func:`msprobe.core.compare.read.tensorfile.load_npy`: it never unpickles, and checks each
file's header against dump.json's shape and dtype, and against the file's size, before reading data.
A PyTorch bench (cross-framework compare, docs/cross_framework_compare.md) has ``.pt`` files: those
are read by :func:`msprobe.core.compare.read.ptfile.read_plain_pt`, without torch.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from msprobe.core.compare.api import compare_api, compare_distributed_api
from msprobe.core.compare.read import NO_SPEC, NotPlain, TensorFileError, TensorSpec, load_npy, read_plain_pt

__all__ = ["compare", "compare_distributed", "load_npy", "load_tensor"]


def load_tensor(path: Path, spec: TensorSpec = NO_SPEC) -> np.ndarray:
    """A MindSpore ``.npy`` file, or a PyTorch bench's ``.pt`` file (a plain tensor as torch.save writes it).

    MindSpore saves a 0-d tensor as shape [1]; it is given dump.json's shape back, so that it compares
    with PyTorch's 0-d tensor (the loader has checked the element count)."""
    if Path(path).suffix != ".pt":
        array = load_npy(path, spec)
        return array.reshape(spec.shape) if spec.shape is not None and array.shape != spec.shape else array
    try:
        return read_plain_pt(path, spec)
    except NotPlain as exc:
        raise TensorFileError(f"{path} is not a plain tensor saved by torch.save ({exc}): the MindSpore compare "
                              f"reads .pt files without torch, and only plain tensors") from None


def compare(input_param: dict[str, Any], output_path: str | os.PathLike, stack_mode: bool = False,
            auto_analyze: bool = True, fuzzy_match: bool = False, **options: Any):
    """Compare two MindSpore dumps, or a MindSpore dump against a PyTorch one (same parameters as
    ``msprobe.pytorch.compare``, plus ``api_mapping``/``cell_mapping``/``layer_mapping``: 1.1.1's -am/-cm/-lm)."""
    return compare_api(load_tensor, input_param, output_path, stack_mode, auto_analyze, fuzzy_match, **options)


def compare_distributed(npu_dump_dir: str | os.PathLike, bench_dump_dir: str | os.PathLike,
                        output_path: str | os.PathLike, **options: Any):
    """Compare two step directories rank by rank."""
    return compare_distributed_api(load_tensor, npu_dump_dir, bench_dump_dir, output_path, **options)
