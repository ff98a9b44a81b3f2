"""``compare`` and ``compare_distributed`` for PyTorch dumps: the core engine with a ``.pt`` loader.

Reading the tensors is most of a comparison's time, and ``torch.load`` spends most of its own in
its general-purpose unpickler. A dump's ``.pt`` files are plain tensors written by ``torch.save``
(a zip holding ``data.pkl`` and one raw storage), so :func:`read_plain_pt` reads them with a
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

import math
import os
import pickle
import zipfile
from collections import OrderedDict
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from msprobe.core.compare.api import compare_api, compare_distributed_api
from msprobe.core.compare.tensorfile import NO_SPEC, TensorFileError, TensorSpec, check_tensor

_STORAGE_DTYPES = {
    "FloatStorage": np.float32, "DoubleStorage": np.float64, "HalfStorage": np.float16,
    "BFloat16Storage": np.uint16, "LongStorage": np.int64, "IntStorage": np.int32, "ShortStorage": np.int16,
    "CharStorage": np.int8, "ByteStorage": np.uint8, "BoolStorage": np.bool_,
    "ComplexFloatStorage": np.complex64, "ComplexDoubleStorage": np.complex128,
}


class _NotPlain(Exception):
    """The file holds something :func:`read_plain_pt` does not read; torch.load will."""


class _Storage(NamedTuple):
    data: np.ndarray
    kind: str  # the storage class name, e.g. BFloat16Storage


class _View(NamedTuple):
    """A tensor as the pickle describes it; nothing is copied until it has been checked."""

    storage: _Storage
    offset: int
    size: tuple
    stride: tuple


def _rebuild_tensor(storage: _Storage, offset: int, size: tuple, stride: tuple, *_: Any) -> _View:
    return _View(storage, offset, tuple(size), tuple(stride))


def _materialise(view: _View) -> np.ndarray:
    """The view's elements as a new array; refuses views that read outside their storage."""
    data, (offset, size, stride) = view.storage.data, view[1:]
    if len(size) != len(stride) or not all(isinstance(n, int) for n in (offset, *size, *stride)):
        raise TensorFileError(f"tensor view {list(size)}/{list(stride)} at {offset} is not a tensor view")
    if offset < 0 or any(n < 0 for n in (*size, *stride)):
        raise TensorFileError(f"tensor view {list(size)}/{list(stride)} at {offset} has a negative size or stride")
    if 0 in size:
        array = np.empty(size, data.dtype)
    elif offset + sum((n - 1) * s for n, s in zip(size, stride)) >= len(data):
        raise TensorFileError(f"tensor view {list(size)}/{list(stride)} at {offset} reaches past its storage "
                              f"of {len(data)} elements")  # never read out of bounds
    else:
        array = np.lib.stride_tricks.as_strided(data[offset:], size, [s * data.itemsize for s in stride]).copy()
    return (array.astype(np.uint32) << 16).view(np.float32) if view.storage.kind == "BFloat16Storage" else array


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

    def persistent_load(self, pid: Any) -> _Storage:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage" and pid[1] in _STORAGE_DTYPES):
            raise _NotPlain(repr(pid))
        dtype = np.dtype(_STORAGE_DTYPES[pid[1]])
        raw = self.archive.read(f"{self.prefix}data/{pid[2]}")  # its size was checked by _check_archive
        if not isinstance(pid[4], int) or pid[4] < 0 or pid[4] * dtype.itemsize > len(raw):
            raise TensorFileError(f"storage {pid[2]!r} claims {pid[4]!r} elements but holds {len(raw)} bytes")
        return _Storage(np.frombuffer(raw, dtype, count=pid[4]), pid[1])


def _check_archive(path: Path, archive: zipfile.ZipFile) -> None:
    """torch.save stores its members uncompressed, so together they fit in the file; anything else could
    inflate far past the file's size when read."""
    limit = os.path.getsize(path)
    members = archive.infolist()
    if any(m.compress_type != zipfile.ZIP_STORED for m in members) or sum(m.file_size for m in members) > limit:
        raise TensorFileError(f"{path} is not a torch.save archive: its members are compressed or claim more than "
                              f"the file's {limit} bytes")


def read_plain_pt(path: Path, spec: TensorSpec = NO_SPEC) -> np.ndarray:
    """A tensor saved by ``torch.save`` as a numpy array, without torch; raises ``_NotPlain`` for files it does
    not read and :class:`TensorFileError` for a tensor that does not match ``spec`` or its own storage."""
    try:
        with zipfile.ZipFile(path) as archive:
            _check_archive(path, archive)
            prefix = next((n[: -len("data.pkl")] for n in archive.namelist() if n.endswith("/data.pkl")), None)
            if prefix is None or archive.read(f"{prefix}byteorder").decode() != "little":
                raise _NotPlain("not a little-endian torch zip archive")
            result = _PlainTensorUnpickler(archive, prefix).load()
    except (zipfile.BadZipFile, KeyError, pickle.UnpicklingError) as exc:
        raise _NotPlain(str(exc)) from exc
    if not isinstance(result, _View):
        raise _NotPlain(type(result).__name__)
    elements = math.prod(result.size)
    check_tensor(path, spec, result.size, result.storage.kind.replace("Storage", "").lower() or "?", elements,
                 len(result.storage.data))
    return _materialise(result)


def load_pt(path: Path, spec: TensorSpec = NO_SPEC) -> np.ndarray:
    """One saved tensor as a numpy array (bf16 → float32; other dtypes as they are), checked against ``spec``."""
    try:
        return read_plain_pt(path, spec)
    except _NotPlain:
        pass
    if not zipfile.is_zipfile(path):
        raise TensorFileError(f"{path} is not a torch.save zip archive (files from torch before 1.6 are not read)")
    with zipfile.ZipFile(path) as archive:
        _check_archive(path, archive)
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
            auto_analyze: bool = True, fuzzy_match: bool = False, **options: Any):
    """Compare two PyTorch dumps; ``input_param`` holds ``npu_json_path``/``bench_json_path`` (1.1.1's
    keys) or ``npu_path``/``bench_path``, optionally ``stack_json_path``/``stack_path``."""
    return compare_api(load_pt, input_param, output_path, stack_mode, auto_analyze, fuzzy_match, **options)


def compare_distributed(npu_dump_dir: str | os.PathLike, bench_dump_dir: str | os.PathLike,
                        output_path: str | os.PathLike, **options: Any):
    """Compare two step directories rank by rank; see :func:`msprobe.core.compare.compare_steps`."""
    return compare_distributed_api(load_pt, npu_dump_dir, bench_dump_dir, output_path, **options)
