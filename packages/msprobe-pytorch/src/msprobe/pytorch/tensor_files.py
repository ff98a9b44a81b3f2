"""Tensors between torch and numpy for every PyTorch reader: ``.pt`` files of a dump, replay outputs.

The PyTorch side of :mod:`msprobe.core.compare.read.ptfile`: a dump's ``.pt`` files are read without torch
when they are plain tensors (the common, fast case) and through ``torch.load(weights_only=True)``
otherwise; neither runs pickled code. Both paths check the tensor against dump.json's shape and dtype
and against the bytes the file stores before any element is copied (docs/compare.md). compare, graph,
run_ut and attribution all read tensors here, so none of them imports another's module to do so.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from msprobe.core.compare.read import (
    NO_SPEC,
    NotPlain,
    TensorFileError,
    TensorSpec,
    check_archive,
    check_tensor,
    read_plain_pt,
)

if TYPE_CHECKING:  # torch is imported when a tensor is read: `msprobe.pytorch` imports this module eagerly
    import torch


def load_pt(path: Path, spec: TensorSpec = NO_SPEC) -> np.ndarray:
    """One saved tensor as a numpy array (bf16 → float32; other dtypes as they are), checked against ``spec``."""
    try:
        return read_plain_pt(path, spec)
    except NotPlain:
        pass
    if not zipfile.is_zipfile(path):
        raise TensorFileError(f"{path} is not a torch.save zip archive (files from torch before 1.6 are not read)")
    with zipfile.ZipFile(path) as archive:
        check_archive(path, archive)
    import torch

    tensor = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{path} holds a {type(tensor).__name__}, not a tensor")
    stored = tensor.untyped_storage().nbytes() // max(tensor.element_size(), 1)
    check_tensor(path, spec, tuple(tensor.shape), str(tensor.dtype), tensor.numel(), stored)
    return host_numpy(tensor)


def host_numpy(tensor: torch.Tensor) -> np.ndarray:
    """``tensor`` on the CPU as numpy, exactly: the dtypes numpy lacks widened (bfloat16 and float8 to
    float32, complex32 to complex64)."""
    import torch

    tensor = tensor.detach().cpu()
    if tensor.dtype in (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2):
        tensor = tensor.float()
    elif tensor.dtype == torch.complex32:
        tensor = tensor.to(torch.complex64)
    return tensor.resolve_conj().numpy()
