"""Rebuild an API's arguments from its dump.json entry: tensors from their files (task ``tensor``) or
generated from the recorded statistics (task ``statistics``), other values from their JSON form.

Generated tensors (statistics dumps) are drawn from a numpy generator seeded with ``(seed, CRC-32 of
the entry name)``, so an API gets the same inputs whatever else the run checks: floats uniform in
``[Min, Max]``, integers uniform over ``Min..Max``, bools fair coin flips; a recorded ``Max``/``Min``
that is missing or not finite is replaced by ±1 (floats) or 0..1 (integers).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from msprobe.core.compare.tensorfile import TensorSpec

TENSOR_TYPES = ("torch.Tensor", "torch.nn.parameter.Parameter", "torch.nn.Parameter")
_NUMPY_SCALARS = {"float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool_", "bool"}


class RunUtError(ValueError):
    """The inputs of the run cannot be used at all (exit 2): a missing tensor file, a bad dump.json."""


class Unreplayable(Exception):
    """This API cannot be replayed (it is reported SKIP with the reason)."""


def is_tensor_value(value: Any) -> bool:
    return isinstance(value, dict) and value.get("type") in TENSOR_TYPES


def torch_dtype(name: Any) -> torch.dtype:
    text = str(name)
    dtype = getattr(torch, text.removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype):
        raise Unreplayable(f"unknown dtype {text!r}")
    return dtype


def rng_for(seed: int, entry: str) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(entry.encode("utf-8"))])


def _bound(value: Any, default: float) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
        else default


def generate(value: dict, rng: np.random.Generator) -> torch.Tensor:
    """A tensor of the recorded dtype and shape, drawn from the recorded [Min, Max]."""
    dtype = torch_dtype(value.get("dtype"))
    shape = value.get("shape")
    if not isinstance(shape, list) or not all(isinstance(n, int) and n >= 0 for n in shape):
        raise Unreplayable(f"tensor without a usable shape: {shape!r}")
    if dtype == torch.bool:
        return torch.from_numpy(rng.integers(0, 2, size=shape).astype(np.bool_))
    if dtype.is_complex or dtype.itemsize < 2 and dtype.is_floating_point:
        raise Unreplayable(f"generating {dtype} inputs from statistics is not supported")
    if dtype.is_floating_point:
        low, high = _bound(value.get("Min"), -1.0), _bound(value.get("Max"), 1.0)
        low, high = min(low, high), max(low, high)
        array = rng.uniform(low, high, size=shape) if high > low else np.full(shape, low)
        return torch.from_numpy(np.asarray(array, dtype=np.float64)).to(dtype)
    info = torch.iinfo(dtype)
    low = int(max(_bound(value.get("Min"), 0), info.min))
    high = int(min(_bound(value.get("Max"), 1), info.max))
    low, high = min(low, high), max(low, high)
    return torch.from_numpy(rng.integers(low, high, size=shape, endpoint=True).astype(np.int64)).to(dtype)


class TensorSource:
    """Where an entry's tensors come from: the dump's files (``tensor_dir``) or generated (None)."""

    def __init__(self, tensor_dir: Path | None, seed: int, loader: Callable[[Path, TensorSpec], np.ndarray]):
        self.tensor_dir, self.seed, self.loader = tensor_dir, seed, loader

    def tensor(self, value: dict, rng: np.random.Generator) -> torch.Tensor:
        if self.tensor_dir is None:
            return generate(value, rng)
        name = value.get("data_name")
        if not isinstance(name, str) or not name or "/" in name or "\\" in name or name in (".", ".."):
            raise RunUtError(f"a tensor in dump.json has no usable data_name ({name!r}): is this a task 'tensor' dump?")
        path = self.tensor_dir / name
        if not path.is_file():
            raise RunUtError(f"tensor file {str(path)!r} is missing (named in dump.json)")
        try:
            array = self.loader(path, TensorSpec.of(value))
        except (OSError, ValueError, TypeError) as exc:
            raise RunUtError(f"tensor file {str(path)!r} cannot be read: {exc}") from None
        return torch.from_numpy(np.ascontiguousarray(array)).to(torch_dtype(value.get("dtype")))


def rebuild(value: Any, make_tensor: Callable[[dict], Any], device: Callable[[str], Any]) -> Any:
    """A Python value from its dump.json form; ``make_tensor`` builds tensors, ``device`` maps a recorded
    device string to the device of the side being built."""
    if value is None:
        return None
    if isinstance(value, list):
        return [rebuild(v, make_tensor, device) for v in value]
    if not isinstance(value, dict):
        raise Unreplayable(f"unexpected value {value!r} in dump.json")
    kind = value.get("type")
    if kind in TENSOR_TYPES:
        return make_tensor(value)
    if kind in ("int", "float", "bool", "str") or kind in _NUMPY_SCALARS:
        return value.get("value")
    if kind == "slice":
        start, stop, step = (value.get("value") or [None, None, None])[:3]
        return slice(start, stop, step)
    if kind == "ellipsis":
        return Ellipsis
    if kind == "torch.dtype":
        return torch_dtype(value.get("value"))
    if kind == "torch.device":
        return device(str(value.get("value")))
    if kind is None and all(isinstance(k, str) for k in value):  # a dict argument
        return {k: rebuild(v, make_tensor, device) for k, v in value.items()}
    raise Unreplayable(f"argument of type {kind!r} cannot be rebuilt")
