"""``compare`` and ``compare_distributed`` for PyTorch dumps: the core engine with a ``.pt`` loader.

``.pt`` files are read with ``weights_only=True`` (no pickled code runs) and upcast to float32
when numpy has no matching dtype (bfloat16), which is exact.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from msprobe.core.compare.api import compare_api, compare_distributed_api


def load_pt(path: Path) -> np.ndarray:
    """One saved tensor as a numpy array (bf16 → float32; other dtypes as they are)."""
    import torch

    tensor = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{path} holds a {type(tensor).__name__}, not a tensor")
    tensor = tensor.detach()
    if tensor.dtype in (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2):
        tensor = tensor.float()
    return tensor.resolve_conj().numpy()


def compare(input_param: dict[str, Any], output_path: str | os.PathLike, stack_mode: bool = False,
            auto_analyze: bool = True, fuzzy_match: bool = False, **options: Any):
    """Compare two PyTorch dumps; ``input_param`` holds ``npu_json_path``/``bench_json_path`` (1.1.1's
    keys) or ``npu_path``/``bench_path``, optionally ``stack_json_path``/``stack_path``."""
    return compare_api(load_pt, input_param, output_path, stack_mode, auto_analyze, fuzzy_match, **options)


def compare_distributed(npu_dump_dir: str | os.PathLike, bench_dump_dir: str | os.PathLike,
                        output_path: str | os.PathLike, **options: Any):
    """Compare two step directories rank by rank; see :func:`msprobe.core.compare.compare_steps`."""
    return compare_distributed_api(load_pt, npu_dump_dir, bench_dump_dir, output_path, **options)
