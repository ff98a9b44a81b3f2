"""Reading a saved tensor without trusting the file: what dump.json says it holds is checked first.

A tensor file is small on disk but may describe something huge: a ``.pt`` view with stride 0 over a
one-element storage, or a ``.npy`` header claiming a billion elements, makes a naive reader allocate
gigabytes. Loaders (``load_npy`` here, ``load_pt`` in msprobe.pytorch) therefore read only the
header first and refuse, with a :class:`TensorFileError`, a tensor whose shape differs from the one
dump.json records (the same elements in another shape pass: ``np.ascontiguousarray`` saves a 0-d
tensor as shape [1]), whose dtype is neither the recorded one nor its exact float32 widening, or whose
elements do not fit in the bytes the file actually stores. Memory is then bounded by the file's size.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

_CANONICAL = {
    "float64": "float64", "double": "float64", "float32": "float32", "float": "float32",
    "float16": "float16", "half": "float16", "bfloat16": "bfloat16",
    "int64": "int64", "long": "int64", "int32": "int32", "int": "int32", "int16": "int16", "short": "int16",
    "int8": "int8", "char": "int8", "uint8": "uint8", "byte": "uint8", "uint16": "uint16", "uint32": "uint32",
    "uint64": "uint64", "bool": "bool", "bool_": "bool",
    "complex64": "complex64", "cfloat": "complex64", "complexfloat": "complex64",
    "complex128": "complex128", "cdouble": "complex128", "complexdouble": "complex128",
}
_WIDENED = {("bfloat16", "float32"), ("float16", "float32")}  # saved as float32 because numpy has no bf16


class TensorFileError(ValueError):
    """A tensor file that does not hold what dump.json says, or that would need more memory than it stores."""


@dataclass(frozen=True)
class TensorSpec:
    """What dump.json records about a saved tensor; None where it records nothing usable."""

    shape: tuple[int, ...] | None = None
    dtype: str | None = None

    @classmethod
    def of(cls, value: Any) -> TensorSpec:
        if not isinstance(value, dict):
            return cls()
        shape = value.get("shape")
        valid = isinstance(shape, list) and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0
                                                for n in shape)
        dtype = value.get("dtype")
        return cls(tuple(shape) if valid else None, dtype if isinstance(dtype, str) else None)


NO_SPEC = TensorSpec()


def canonical_dtype(name: str) -> str | None:
    """``torch.float32``, ``Float32``, ``float32``, ``FloatStorage``... → ``float32``; None when unknown."""
    short = name.rsplit(".", 1)[-1].strip().lower()
    return _CANONICAL.get(short)


def check_tensor(path: Path, spec: TensorSpec, shape: tuple[int, ...], dtype: str, elements: int,
                 stored: int) -> None:
    """Refuse a file whose tensor (``shape``, ``dtype``) is not what ``spec`` records, or whose ``elements``
    exceed the ``stored`` elements behind them; called before any element is read."""
    shape = tuple(int(n) for n in shape)
    if spec.shape is not None and shape != spec.shape and _count(shape) != _count(spec.shape):
        raise TensorFileError(f"{path} holds a tensor of shape {list(shape)} but dump.json records {list(spec.shape)}")
    recorded = canonical_dtype(spec.dtype) if spec.dtype else None
    actual = canonical_dtype(dtype)
    if recorded and actual and recorded != actual and (recorded, actual) not in _WIDENED:
        raise TensorFileError(f"{path} holds {dtype} data but dump.json records dtype {spec.dtype}")
    if elements > stored:
        raise TensorFileError(f"{path}: a tensor of shape {list(shape)} needs {elements} elements but the file stores "
                              f"{stored}; refusing to expand it in memory")


def _count(shape: tuple[int, ...]) -> int:
    count = 1
    for n in shape:
        count *= n
    return count


def load_npy(path: Path, spec: TensorSpec = NO_SPEC) -> np.ndarray:
    """A ``.npy`` file checked against ``spec`` and its own size before its data is read; never unpickles."""
    with open(path, "rb") as handle:
        try:
            version = np.lib.format.read_magic(handle)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(handle)
            elif version == (2, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(handle)
            else:
                raise TensorFileError(f"{path} is .npy format {version[0]}.{version[1]}; msprobe reads 1.0 and 2.0")
        except ValueError as exc:
            if isinstance(exc, TensorFileError):
                raise
            raise TensorFileError(f"{path} is not a .npy file: {exc}") from None
        if dtype.hasobject:
            raise TensorFileError(f"{path} holds Python objects, not numbers; it is not read")
        elements = _count(shape)
        stored = (os.fstat(handle.fileno()).st_size - handle.tell()) // max(dtype.itemsize, 1)
        check_tensor(path, spec, shape, dtype.name, elements, stored)
        data = np.fromfile(handle, dtype=dtype, count=elements)
    return data.reshape(shape, order="F" if fortran else "C")
