"""Reading a tensor that ``torch.save`` wrote, without torch: for PyTorch dumps, and for a PyTorch bench
compared from MindSpore (``msprobe -f mindspore compare`` against a PyTorch dump, where torch need not
be installed).

A dump's ``.pt`` files are plain tensors (a zip holding ``data.pkl`` and one raw storage), so
:func:`read_plain_pt` reads them with a pickle reader that knows only the handful of names such a file
uses and runs no pickled code; bfloat16 becomes float32, which is exact. Anything else raises
:class:`NotPlain` (``msprobe.pytorch.tensor_files.load_pt`` then falls back to ``torch.load``). The tensor is
checked against dump.json's shape and dtype and against the bytes the file stores before any element is
copied (:mod:`msprobe.core.compare.read.tensorfile`); a compressed member is refused, since it could claim more
memory than the file holds.
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

from msprobe.core.compare.read.tensorfile import NO_SPEC, TensorFileError, TensorSpec, check_tensor

_STORAGE_DTYPES = {
    "FloatStorage": np.float32, "DoubleStorage": np.float64, "HalfStorage": np.float16,
    "BFloat16Storage": np.uint16, "LongStorage": np.int64, "IntStorage": np.int32, "ShortStorage": np.int16,
    "CharStorage": np.int8, "ByteStorage": np.uint8, "BoolStorage": np.bool_,
    "ComplexFloatStorage": np.complex64, "ComplexDoubleStorage": np.complex128,
}


class NotPlain(Exception):
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
    if view.storage.kind != "BFloat16Storage":
        return array
    # flat first: numpy cannot view a 0-d array (a bf16 loss) as another dtype
    return (array.reshape(-1).astype(np.uint32) << np.uint32(16)).view(np.float32).reshape(array.shape)


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
        raise NotPlain(f"{module}.{name}")

    def persistent_load(self, pid: Any) -> _Storage:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage" and pid[1] in _STORAGE_DTYPES):
            raise NotPlain(repr(pid))
        dtype = np.dtype(_STORAGE_DTYPES[pid[1]])
        raw = self.archive.read(f"{self.prefix}data/{pid[2]}")  # its size was checked by check_archive
        if not isinstance(pid[4], int) or pid[4] < 0 or pid[4] * dtype.itemsize > len(raw):
            raise TensorFileError(f"storage {pid[2]!r} claims {pid[4]!r} elements but holds {len(raw)} bytes")
        return _Storage(np.frombuffer(raw, dtype, count=pid[4]), pid[1])


def check_archive(path: Path, archive: zipfile.ZipFile) -> None:
    """torch.save stores its members uncompressed, so together they fit in the file; anything else could
    inflate far past the file's size when read."""
    limit = os.path.getsize(path)
    members = archive.infolist()
    if any(m.compress_type != zipfile.ZIP_STORED for m in members) or sum(m.file_size for m in members) > limit:
        raise TensorFileError(f"{path} is not a torch.save archive: its members are compressed or claim more than "
                              f"the file's {limit} bytes")


def read_plain_pt(path: Path, spec: TensorSpec = NO_SPEC) -> np.ndarray:
    """A tensor saved by ``torch.save`` as a numpy array, without torch; raises ``NotPlain`` for files it does
    not read and :class:`TensorFileError` for a tensor that does not match ``spec`` or its own storage."""
    try:
        with zipfile.ZipFile(path) as archive:
            check_archive(path, archive)
            prefix = next((n[: -len("data.pkl")] for n in archive.namelist() if n.endswith("/data.pkl")), None)
            if prefix is None or archive.read(f"{prefix}byteorder").decode() != "little":
                raise NotPlain("not a little-endian torch zip archive")
            result = _PlainTensorUnpickler(archive, prefix).load()
    except (zipfile.BadZipFile, KeyError, pickle.UnpicklingError) as exc:
        raise NotPlain(str(exc)) from exc
    if not isinstance(result, _View):
        raise NotPlain(type(result).__name__)
    elements = math.prod(result.size)
    check_tensor(path, spec, result.size, result.storage.kind.replace("Storage", "").lower() or "?", elements,
                 len(result.storage.data))
    return _materialise(result)
