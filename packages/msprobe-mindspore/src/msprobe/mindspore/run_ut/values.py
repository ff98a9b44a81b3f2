"""An API's arguments rebuilt from its dump.json entry, without committing to a framework yet.

Every tensor becomes a :class:`Leaf`: its values as a numpy array holding exactly the numbers of the
recorded dtype (float64 for floating dtypes, int64 for integers, bool), read from the dump's ``.npy``
(task ``tensor``) or generated from the recorded statistics (task ``statistics``, seeded, see
:mod:`msprobe.core.run_ut.replay_common`). Each side of the replay (MindSpore at the recorded dtype,
the upcast bench in MindSpore or PyTorch) then makes its own tensors from the same leaves, so both
sides start from identical numbers. Everything else is rebuilt from its JSON form; JSON lists become
tuples (a shape, an index such as ``x[0, 1:]``, the tensors of ``cat``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from msprobe.core.compare.read import TensorSpec, load_npy
from msprobe.core.run_ut.replay_common import (
    RunUtError,
    Unreplayable,
    generate_values,
    is_tensor_value,
    tensor_file,
)

# MindSpore dtype names in a dump.json → the canonical (numpy / torch attribute) name.
DTYPES = {
    "Float16": "float16", "BFloat16": "bfloat16", "Float32": "float32", "Float64": "float64",
    "Int8": "int8", "Int16": "int16", "Int32": "int32", "Int64": "int64",
    "UInt8": "uint8", "UInt16": "uint16", "UInt32": "uint32", "UInt64": "uint64",
    "Bool": "bool", "Complex64": "complex64", "Complex128": "complex128",
}
RECORDED = {canonical: name for name, canonical in DTYPES.items()}
UPCAST = {"float16": "float32", "bfloat16": "float32", "float32": "float64"}
FLOATS = frozenset({"float16", "bfloat16", "float32", "float64"})
_SCALARS = {"int", "float", "bool", "str", "float16", "float32", "float64", "int8", "int16", "int32", "int64",
            "uint8", "bool_"}


def canonical(name: Any) -> str:
    """``Float16`` (or ``mindspore.float16``, ``float16``) → ``float16``; :class:`Unreplayable` when unknown."""
    text = str(name).rsplit(".", 1)[-1]
    if text in DTYPES:
        return DTYPES[text]
    lowered = text.lower().removesuffix("_")
    if lowered in RECORDED:
        return lowered
    raise Unreplayable(f"unknown dtype {name!r}")


def kind_of(dtype: str) -> str:
    """``float``, ``int``, ``bool`` or ``complex`` of a canonical dtype name."""
    if dtype in FLOATS:
        return "float"
    if dtype == "bool":
        return "bool"
    return "complex" if dtype.startswith("complex") else "int"


@dataclass(frozen=True, eq=False)
class Leaf:
    """One tensor argument: its values (exact numbers of ``dtype``) and its canonical dtype name (compared
    by identity: two arguments with equal values are still two leaves)."""

    values: np.ndarray
    dtype: str

    @property
    def differentiable(self) -> bool:
        return kind_of(self.dtype) in ("float", "complex")


@dataclass(frozen=True)
class DtypeArg:
    """A ``mindspore.dtype`` argument (``mint.sum(x, dtype=mindspore.float32)``), canonical name."""

    dtype: str


class InputSource:
    """Where an entry's tensors come from: the dump's files (``folder``) or generated (None).
    ``round_to(values, dtype)`` rounds float64 values to a dtype's numbers (bfloat16 has no numpy
    type: the MindSpore side supplies it)."""

    def __init__(self, folder: Path | None, round_to: Callable[[np.ndarray, str], np.ndarray]) -> None:
        self.folder, self.round_to = folder, round_to

    def leaf(self, value: dict, rng: np.random.Generator) -> Leaf:
        dtype = canonical(value.get("dtype"))
        kind = kind_of(dtype)
        if self.folder is None:
            if kind == "complex":
                raise Unreplayable(f"generating {dtype} inputs from statistics is not supported")
            limits = (int(np.iinfo(dtype).min), int(np.iinfo(dtype).max)) if kind == "int" else None
            array = generate_values(value, kind, rng, limits)
        else:
            path = tensor_file(self.folder, value)
            try:
                array = load_npy(path, TensorSpec.of(value))
            except (OSError, ValueError, TypeError) as exc:
                raise RunUtError(f"tensor file {str(path)!r} cannot be read: {exc}") from None
        if kind == "float":
            return Leaf(self.round_to(np.asarray(array, dtype=np.float64), dtype), dtype)
        if kind == "complex":
            return Leaf(np.asarray(array).astype(np.complex128), dtype)
        return Leaf(np.asarray(array).astype(np.bool_ if kind == "bool" else np.int64), dtype)


def rebuild(value: Any, make_tensor: Callable[[dict], Any]) -> Any:
    """A Python value from its dump.json form; ``make_tensor`` turns a tensor record into a :class:`Leaf`
    (or anything standing for it)."""
    if value is None:
        return None
    if isinstance(value, list):
        return tuple(rebuild(v, make_tensor) for v in value)
    if not isinstance(value, dict):
        raise Unreplayable(f"unexpected value {value!r} in dump.json")
    kind = value.get("type")
    if is_tensor_value(value):
        return make_tensor(value)
    if kind in _SCALARS:
        return value.get("value")
    if kind == "slice":
        start, stop, step = (list(value.get("value") or []) + [None, None, None])[:3]
        return slice(start, stop, step)
    if kind == "ellipsis":
        return Ellipsis
    if kind == "mindspore.dtype":
        return DtypeArg(canonical(value.get("value")))
    if kind is None and all(isinstance(k, str) for k in value):  # a dict argument
        return {k: rebuild(v, make_tensor) for k, v in value.items()}
    raise Unreplayable(f"argument of type {kind!r} cannot be rebuilt")


def map_leaves(value: Any, convert: Callable[[Any], Any]) -> Any:
    """``value`` with every :class:`Leaf` and :class:`DtypeArg` replaced by ``convert(item)``."""
    if isinstance(value, (Leaf, DtypeArg)):
        return convert(value)
    if isinstance(value, tuple):
        return tuple(map_leaves(v, convert) for v in value)
    if isinstance(value, dict):
        return {k: map_leaves(v, convert) for k, v in value.items()}
    return value


def grad_slots(args: tuple, kwargs: dict) -> list[Leaf]:
    """The differentiable leaves in the order MindSpore's backward capture lists their gradients (a
    backward entry's ``output``): positional arguments, then keyword arguments, each a tensor or a
    tensor inside a list/tuple argument (one level)."""
    found: list[Leaf] = []
    for value in (*args, *kwargs.values()):
        items = value if isinstance(value, tuple) else (value,)
        found.extend(v for v in items if isinstance(v, Leaf) and v.differentiable)
    return found
