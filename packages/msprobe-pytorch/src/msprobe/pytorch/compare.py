"""``compare`` and ``compare_distributed`` for PyTorch dumps: the core engine with a ``.pt`` loader.

Reading the tensors is most of a comparison's time, and ``torch.load`` spends most of its own in
its general-purpose unpickler. A dump's ``.pt`` files are plain tensors written by ``torch.save``
(a zip holding ``data.pkl`` and one raw storage), so :func:`read_plain_pt` reads them with a
pickle reader that knows only the handful of names such a file uses; anything else — another
object, an unknown storage type, big-endian data — goes through ``torch.load(weights_only=True)``.
Neither runs pickled code. bfloat16 becomes float32, which is exact.
"""

from __future__ import annotations

import os
import pickle
import zipfile
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

from msprobe.core.compare.api import compare_api, compare_distributed_api

_STORAGE_DTYPES = {
    "FloatStorage": np.float32, "DoubleStorage": np.float64, "HalfStorage": np.float16,
    "BFloat16Storage": np.uint16, "LongStorage": np.int64, "IntStorage": np.int32, "ShortStorage": np.int16,
    "CharStorage": np.int8, "ByteStorage": np.uint8, "BoolStorage": np.bool_,
    "ComplexFloatStorage": np.complex64, "ComplexDoubleStorage": np.complex128,
}


class _NotPlain(Exception):
    """The file holds something :func:`read_plain_pt` does not read; torch.load will."""


def _rebuild_tensor(storage: tuple[np.ndarray, bool], offset: int, size: tuple, stride: tuple, *_: Any) -> np.ndarray:
    data, bf16 = storage
    if len(size) != len(stride) or offset < 0 or any(s < 0 for s in (*size, *stride)):
        raise _NotPlain(f"tensor view {size}/{stride} at {offset} is not a plain view")
    if 0 not in size and offset + sum((n - 1) * s for n, s in zip(size, stride)) >= len(data):
        raise _NotPlain(f"tensor view {size}/{stride} at {offset} reaches past its storage")  # never read out of bounds
    if 0 in size:
        array = np.empty(size, data.dtype)
    else:
        array = np.lib.stride_tricks.as_strided(data[offset:], size, [s * data.itemsize for s in stride]).copy()
    return (array.astype(np.uint32) << 16).view(np.float32) if bf16 else array


class _PlainTensorUnpickler(pickle.Unpickler):
    def __init__(self, archive: zipfile.ZipFile, prefix: str) -> None:
        super().__init__(archive.open(f"{prefix}data.pkl"))
        self.archive, self.prefix = archive, prefix

    def find_class(self, module: str, name: str) -> Any:
        if module == "torch" and name in _STORAGE_DTYPES:
            return name
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return _rebuild_tensor
        if (module, name) == ("torch._utils", "_rebuild_parameter"):
            return lambda data, *_: data
        if (module, name) == ("collections", "OrderedDict"):
            return OrderedDict
        raise _NotPlain(f"{module}.{name}")

    def persistent_load(self, pid: Any) -> tuple[np.ndarray, bool]:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage" and pid[1] in _STORAGE_DTYPES):
            raise _NotPlain(repr(pid))
        raw = self.archive.read(f"{self.prefix}data/{pid[2]}")
        return np.frombuffer(raw, _STORAGE_DTYPES[pid[1]], count=pid[4]), pid[1] == "BFloat16Storage"


def read_plain_pt(path: Path) -> np.ndarray:
    """A tensor saved by ``torch.save`` as a numpy array, without torch; raises ``_NotPlain`` otherwise."""
    try:
        with zipfile.ZipFile(path) as archive:
            prefix = next((n[: -len("data.pkl")] for n in archive.namelist() if n.endswith("/data.pkl")), None)
            if prefix is None or archive.read(f"{prefix}byteorder").decode() != "little":
                raise _NotPlain("not a little-endian torch zip archive")
            result = _PlainTensorUnpickler(archive, prefix).load()
    except (zipfile.BadZipFile, KeyError, pickle.UnpicklingError) as exc:
        raise _NotPlain(str(exc)) from exc
    if not isinstance(result, np.ndarray):
        raise _NotPlain(type(result).__name__)
    return result


def load_pt(path: Path) -> np.ndarray:
    """One saved tensor as a numpy array (bf16 → float32; other dtypes as they are)."""
    try:
        return read_plain_pt(path)
    except _NotPlain:
        pass
    import torch

    tensor = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{path} holds a {type(tensor).__name__}, not a tensor")
    tensor = tensor.detach().cpu()
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
