"""Flatten dump entries into rows, one per argument leaf, named as 1.1.1's reports name them.

``Torch.add.0.forward`` becomes ``...forward.input.0``, ``...forward.input.alpha`` (keyword
arguments), ``...forward.output.0``; nested lists add an index per level (``input.3.0``); a backward
entry's ``input``/``output`` lists flatten the same way. A leaf is a tensor, a scalar, a list of plain
values (a slice, a ``torch.Size``) or ``null``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

_PART_OF_KEY = {"input_args": "input", "input_kwargs": "input", "input": "input", "output": "output"}
STAT_KEYS = ("Max", "Min", "Mean", "Norm")  # the statistics a tensor leaf records
TENSOR_TYPES = ("torch.Tensor", "mindspore.Tensor", "numpy.ndarray", "torch.nn.parameter.Parameter")


@dataclass(frozen=True)
class Row:
    """One argument leaf of one entry. ``suffix`` is the name after the entry (``input.0``)."""

    entry: str
    suffix: str
    part: str  # "input" | "output" | another top-level key of the entry
    value: Any  # the leaf as dump.json holds it

    @property
    def name(self) -> str:
        return f"{self.entry}.{self.suffix}"

    @property
    def is_tensor(self) -> bool:
        return is_tensor(self.value)


def is_tensor(value: Any) -> bool:
    return isinstance(value, dict) and value.get("type") in TENSOR_TYPES


def _is_leaf(value: Any) -> bool:
    if isinstance(value, dict):
        return "type" in value or not value
    if isinstance(value, list):
        return not any(isinstance(item, (dict, list)) for item in value)
    return True


def _walk(entry: str, part: str, path: str, value: Any, out: list[Row]) -> None:
    if _is_leaf(value):
        out.append(Row(entry, path, part, value))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _walk(entry, part, f"{path}.{index}", item, out)
    else:
        for key, item in value.items():
            _walk(entry, part, f"{path}.{key}", item, out)


def flatten_entry(entry: str, record: dict) -> list[Row]:
    """Rows of one dump.json entry, inputs before outputs, in argument order."""
    rows: list[Row] = []
    for key, value in record.items():
        part = _PART_OF_KEY.get(key, key)
        if isinstance(value, list):
            for index, item in enumerate(value):
                _walk(entry, part, f"{part}.{index}", item, rows)
        elif isinstance(value, dict) and "type" not in value:
            for name, item in value.items():
                _walk(entry, part, f"{part}.{name}", item, rows)
        elif value is not None:
            rows.append(Row(entry, part, part, value))
    return rows


def structure(rows: list[Row]) -> tuple:
    """The argument structure of an entry: row suffixes with tensor shapes (dtype left out on purpose,
    so a bf16 run and an fp32 run have the same structure)."""
    return tuple((row.suffix, tuple(row.value.get("shape") or ()) if row.is_tensor else None) for row in rows)
