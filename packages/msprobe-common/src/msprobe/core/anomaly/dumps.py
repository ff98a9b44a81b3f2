"""The dumps of one step, every rank: where they are and what each entry says about inf/NaN.

A step directory holds one directory per process, named as either generation names them; each holds a
dump.json (entries in execution order) and usually a stack.json. Both layouts are read by compare's read room
(:func:`msprobe.core.compare.read.process_dirs`, :func:`~msprobe.core.compare.read.read_stack`), as every
reader of a dump reads them. docs/anomaly_origin.md#what-it-reads.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from msprobe.core.compare.read import CompareError, process_dirs, read_dump, read_stack

STAT_KEYS = ("Max", "Min", "Mean", "Norm")
_NON_FINITE_TEXT = {"nan", "inf", "-inf", "infinity", "-infinity", "+inf"}
MODULE_PREFIXES = ("Module", "Cell")
COLLECTIVE_PREFIX = "Distributed"


class AnomalyError(ValueError):
    """The input of an anomaly search is missing or is not a statistics dump."""


@dataclass
class RankDump:
    """One process's dump of the step: its entries in execution order and their stacks."""

    rank: int
    directory: Path
    entries: dict[str, dict]
    stacks: dict[str, list[str]] = field(default_factory=dict)


def is_non_finite(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    return isinstance(value, str) and value.strip().lower() in _NON_FINITE_TEXT


def tensor_values(value: Any) -> Iterator[dict]:
    """Every recorded tensor (a dict with statistics) inside a nested entry value."""
    if isinstance(value, dict):
        if any(key in value for key in STAT_KEYS):
            yield value
            return
        for inner in value.values():
            yield from tensor_values(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from tensor_values(inner)


def holds_non_finite(value: Any) -> bool:
    return any(is_non_finite(t.get(key)) for t in tensor_values(value) for key in STAT_KEYS)


def read_step(step_dir: str | os.PathLike) -> list[RankDump]:
    """Every rank's dump of one step directory (or of one process directory), by rank."""
    root = Path(step_dir)
    if not root.is_dir():
        raise AnomalyError(f"-i {str(root)!r} is not a directory: pass a step directory such as dump/step0")
    dumps = []
    try:
        found = {0: root} if (root / "dump.json").is_file() else process_dirs(root, "-i")
    except CompareError as error:
        raise AnomalyError(str(error)) from None
    for rank, directory in found.items():
        try:
            dump = read_dump(directory / "dump.json")
            stack_file = directory / "stack.json"
            stacks = read_stack(stack_file) if stack_file.is_file() else {}
        except CompareError as error:
            raise AnomalyError(str(error)) from None
        if dump.task not in ("statistics", "tensor", "overflow_check"):
            raise AnomalyError(f"{str(dump.path)!r}: task {dump.task!r} records no statistics; "
                               f"allowed: statistics, tensor, overflow_check")
        dumps.append(RankDump(rank, directory, dump.entries, stacks))
    return dumps
