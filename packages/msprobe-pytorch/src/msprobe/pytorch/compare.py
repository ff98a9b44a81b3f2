"""``compare`` and ``compare_distributed`` for PyTorch dumps: the core engine with a ``.pt`` loader.

Reading the tensors is most of a comparison's time, and ``torch.load`` spends most of its own in
its general-purpose unpickler. A dump's ``.pt`` files are plain tensors written by ``torch.save``
(a zip holding ``data.pkl`` and one raw storage), so :func:`read_plain_pt` (in msprobe.core, where
MindSpore's compare reads a PyTorch bench with it too) reads them with a
pickle reader that knows only the handful of names such a file uses; anything else — another
object, an unknown storage type, big-endian data — goes through ``torch.load(weights_only=True)``.
Neither runs pickled code. bfloat16 becomes float32, which is exact.

Both paths check the tensor against dump.json's shape and dtype and against the bytes the file
stores before any element is copied (:mod:`msprobe.core.compare.tensorfile`): a 2 KB file holding a
stride-0 view of a huge shape is refused instead of expanded. Files written by torch.save are zips
of stored (uncompressed) members; a compressed member or a pre-1.6 (non-zip) file is refused, since
either could claim more memory than the file holds.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from msprobe.core.compare.api import compare_api, compare_distributed_api
from msprobe.core.compare.ptfile import (  # noqa: F401 (_Storage, _View, _materialise: tested through this module)
    NotPlain,
    _materialise,
    _Storage,
    _View,
    check_archive,
    read_plain_pt,
)
from msprobe.core.compare.tensorfile import NO_SPEC, TensorFileError, TensorSpec, check_tensor


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
    tensor = tensor.detach()
    stored = tensor.untyped_storage().nbytes() // max(tensor.element_size(), 1)
    check_tensor(path, spec, tuple(tensor.shape), str(tensor.dtype), tensor.numel(), stored)
    if tensor.dtype in (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2):
        tensor = tensor.float()
    return tensor.resolve_conj().numpy()


def compare(input_param: dict[str, Any], output_path: str | os.PathLike, stack_mode: bool = False,
            auto_analyze: bool = True, fuzzy_match: bool = False, attribute: int = 0, **options: Any):
    """Compare two PyTorch dumps; ``input_param`` holds ``npu_json_path``/``bench_json_path`` (1.1.1's
    keys) or ``npu_path``/``bench_path``, optionally ``stack_json_path``/``stack_path``. ``attribute=N``
    replays the first N diverging APIs on this machine's device (``msprobe.pytorch.attribution``)."""
    replay = None
    if attribute:
        from msprobe.pytorch.attribution import TorchReplay

        replay = TorchReplay()
    return compare_api(load_pt, input_param, output_path, stack_mode, auto_analyze, fuzzy_match,
                       attribute=attribute, replay=replay, **options)


def compare_distributed(npu_dump_dir: str | os.PathLike, bench_dump_dir: str | os.PathLike,
                        output_path: str | os.PathLike, **options: Any):
    """Compare two step directories rank by rank; see :func:`msprobe.core.compare.compare_steps`."""
    return compare_distributed_api(load_pt, npu_dump_dir, bench_dump_dir, output_path, **options)
