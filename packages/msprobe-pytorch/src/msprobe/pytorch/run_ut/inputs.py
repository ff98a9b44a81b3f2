"""Rebuild an API's arguments from its dump.json entry: tensors from their files (task ``tensor``) or
generated from the recorded statistics (task ``statistics``, by the seeded rule both frameworks share:
:func:`msprobe.core.run_ut.replay_common.generate_values`), other values from their JSON form — ours
and msprobe 1.1.1's (``torch.Size`` as ``{"type": "torch.Size", "value": [...]}``, a device as
``"cpu:None"``, a generator or layout as null: the default; docs/run_ut.md).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from msprobe.core.compare.read import TensorSpec
from msprobe.core.run_ut.replay_common import (
    TENSOR_TYPES,
    RunUtError,
    TensorFileError,
    Unreplayable,
    generate_values,
    is_tensor_value,
    rng_for,
    tensor_file,
)

__all__ = ["RunUtError", "TensorFileError", "TensorSource", "Unreplayable", "generate", "is_tensor_value",
           "rebuild", "rng_for", "torch_dtype"]

_NUMPY_SCALARS = {"float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool_", "bool"}


def torch_dtype(name: Any) -> torch.dtype:
    text = str(name)
    dtype = getattr(torch, text.removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype):
        raise Unreplayable(f"unknown dtype {text!r}")
    return dtype


def generate(value: dict, rng: np.random.Generator) -> torch.Tensor:
    """A tensor of the recorded dtype and shape, drawn from the recorded [Min, Max]."""
    dtype = torch_dtype(value.get("dtype"))
    if dtype == torch.bool:
        return torch.from_numpy(generate_values(value, "bool", rng))
    if dtype.is_complex or dtype.itemsize < 2 and dtype.is_floating_point:
        raise Unreplayable(f"generating {dtype} inputs from statistics is not supported")
    if dtype.is_floating_point:
        return torch.from_numpy(generate_values(value, "float", rng)).to(dtype)
    info = torch.iinfo(dtype)
    return torch.from_numpy(generate_values(value, "int", rng, (info.min, info.max))).to(dtype)


class TensorSource:
    """Where an entry's tensors come from: the dump's files (``tensor_dir``) or generated (None)."""

    def __init__(self, tensor_dir: Path | None, seed: int, loader: Callable[[Path, TensorSpec], np.ndarray]):
        self.tensor_dir, self.seed, self.loader = tensor_dir, seed, loader

    def tensor(self, value: dict, rng: np.random.Generator) -> torch.Tensor:
        if self.tensor_dir is None:
            return generate(value, rng)
        path = tensor_file(self.tensor_dir, value)
        try:
            array = self.loader(path, TensorSpec.of(value))
        except (OSError, ValueError, TypeError) as exc:
            raise TensorFileError(f"tensor file {str(path)!r} cannot be read: {exc}") from None
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
    if kind == "torch.memory_format":
        return _memory_format(value.get("format"))
    if kind == "torch.Size":  # 1.1.1's form; ours writes a list of ints
        return _size(value.get("value"))
    if kind is None and all(isinstance(k, str) for k in value):  # a dict argument
        return {k: rebuild(v, make_tensor, device) for k, v in value.items()}
    raise Unreplayable(f"argument of type {kind!r} cannot be rebuilt")


def _memory_format(name: Any) -> torch.memory_format:
    """``{"type": "torch.memory_format", "format": "preserve_format"}`` (msprobe 1.1.1's spelling) → the format."""
    memory_format = getattr(torch, str(name), None)
    if not isinstance(memory_format, torch.memory_format):
        raise Unreplayable(f"unknown memory_format {name!r}")
    return memory_format


def _size(dims: Any) -> torch.Size:
    """``{"type": "torch.Size", "value": [6, 20]}`` (msprobe 1.1.1's spelling) → the size."""
    if not isinstance(dims, list) or not all(isinstance(d, int) and not isinstance(d, bool) for d in dims):
        raise Unreplayable(f"torch.Size without a list of ints: {dims!r}")
    return torch.Size(dims)
