"""Checkpoint compare: two checkpoints as tensors by name → missing/extra keys, dtype and shape changes and
each common tensor's relative difference (docs/config_check.md#checkpoint-compare).

Reading a checkpoint is the framework half's (torch state_dict files and distributed checkpoints,
MindSpore ckpt); safetensors files are read here, without a framework: an 8-byte length, a JSON header,
then the raw little-endian data.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from msprobe.core.config_check.report import ReportRow

HEADER = ("key", "status", "dtype A", "dtype B", "shape A", "shape B", "relative difference", "max abs difference")
_SAFETENSORS_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
                       "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}
SAFETENSORS_HEADER_MAX = 100 << 20


class CheckpointError(ValueError):
    """A checkpoint that cannot be read; the message names the file."""


@dataclass(frozen=True)
class Tensor:
    """One tensor of a checkpoint: its recorded dtype and shape, and its values as float64."""

    dtype: str
    shape: tuple[int, ...]
    values: np.ndarray


Loader = Callable[[Path], "dict[str, Tensor]"]


def _bf16_to_f32(raw: np.ndarray) -> np.ndarray:
    return (raw.astype(np.uint32) << 16).view(np.float32)


def read_safetensors(path: Path) -> dict[str, Tensor]:
    with open(path, "rb") as handle:
        head = handle.read(8)
        if len(head) != 8:
            raise CheckpointError(f"safetensors file {str(path)!r} is shorter than its 8-byte header length")
        (length,) = struct.unpack("<Q", head)
        if length > SAFETENSORS_HEADER_MAX:
            raise CheckpointError(f"safetensors file {str(path)!r}: header of {length} bytes is too large")
        try:
            header = json.loads(handle.read(length))
        except ValueError as error:
            raise CheckpointError(f"safetensors file {str(path)!r}: header is not JSON: {error}") from None
        data = handle.read()
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = data[begin:end]
        kind = info["dtype"]
        if kind == "BF16":
            values = _bf16_to_f32(np.frombuffer(raw, dtype="<u2"))
        elif kind in _SAFETENSORS_DTYPES:
            values = np.frombuffer(raw, dtype=np.dtype(_SAFETENSORS_DTYPES[kind]).newbyteorder("<"))
        else:
            raise CheckpointError(f"safetensors file {str(path)!r}: tensor {name!r} has dtype {kind!r}, "
                                  f"allowed: {', '.join(['BF16', *_SAFETENSORS_DTYPES])}")
        shape = tuple(info["shape"])
        tensors[name] = Tensor(kind, shape, values.astype(np.float64).reshape(shape))
    return tensors


def load_checkpoint(path: str | os.PathLike, framework_loader: Loader | None) -> dict[str, Tensor]:
    source = Path(path)
    if not source.exists():
        raise CheckpointError(f"checkpoint {str(source)!r} does not exist")
    if source.suffix == ".safetensors":
        return read_safetensors(source)
    if framework_loader is None:
        raise CheckpointError(f"checkpoint {str(source)!r}: only .safetensors is read without a framework; "
                              f"name one with -f pytorch or -f mindspore")
    return framework_loader(source)


def relative_difference(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """(‖a − b‖ / ‖a‖, max |a − b|) in float64; ‖a − b‖ itself when ‖a‖ is 0."""
    delta = b - a
    norm = float(np.linalg.norm(a.ravel()))
    spread = float(np.linalg.norm(delta.ravel()))
    return (spread / norm if norm else spread), (float(np.max(np.abs(delta))) if delta.size else 0.0)


def compare_checkpoints(a: dict[str, Tensor], b: dict[str, Tensor]) -> list[ReportRow]:
    """One row per key of either checkpoint; differences first (all of them change numbers)."""
    rows = []
    for key in sorted(set(a) | set(b)):
        left, right = a.get(key), b.get(key)
        if left is None or right is None:
            status = "missing in B" if right is None else "missing in A"
            cells = (key, status, left.dtype if left else "", right.dtype if right else "",
                     str(list(left.shape)) if left else "", str(list(right.shape)) if right else "", "", "")
            rows.append(ReportRow("checkpoint", cells, True))
            continue
        changes = [what for what, differs in (("dtype", left.dtype != right.dtype),
                                              ("shape", left.shape != right.shape)) if differs]
        rel, top = ("", "")
        if left.shape == right.shape:
            rel_value, top_value = relative_difference(left.values, right.values)
            rel, top = repr(rel_value), repr(top_value)
            if not np.array_equal(left.values, right.values, equal_nan=True):
                changes.append("values")
        status = f"{' and '.join(changes)} differ" if changes else "equal"
        rows.append(ReportRow("checkpoint", (key, status, left.dtype, right.dtype, str(list(left.shape)),
                                             str(list(right.shape)), rel, top), bool(changes)))
    return sorted(rows, key=lambda r: not r.changes_numbers)
