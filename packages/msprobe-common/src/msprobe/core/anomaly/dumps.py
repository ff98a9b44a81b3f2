"""The dumps of one step, every rank: where they are and what each entry says about inf/NaN.

A step directory holds one directory per process: ``rank{R}`` in a distributed job, a bare ``rank``
outside one (this project and msprobe 1.1.1), ``proc{pid}`` outside one for msprobe 26.2.0. Each holds a
dump.json (entries in execution order) and usually a stack.json, either ``{entry: frames}`` or 26.2.0's
grouped ``{"0": [[entries...], [frames...]], ...}``. docs/anomaly_origin.md#what-it-reads.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from msprobe.core.compare.read import CompareError, load_json_file, read_dump

STAT_KEYS = ("Max", "Min", "Mean", "Norm")
_PROCESS_DIR = re.compile(r"^(?:rank(\d*)|proc(\d+))$")
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


def _process_dirs(step_dir: Path) -> list[tuple[int, Path]]:
    """(rank, directory) of every process directory with a dump.json; ``rank``/``proc…`` count as rank 0."""
    if (step_dir / "dump.json").is_file():
        return [(0, step_dir)]
    found = []
    for child in sorted(step_dir.iterdir()):
        match = _PROCESS_DIR.match(child.name)
        if match and (child / "dump.json").is_file():
            found.append((int(match.group(1)) if match.group(1) else 0, child))
    ranks = [rank for rank, _ in found]
    if len(set(ranks)) != len(ranks):
        raise AnomalyError(
            f"step directory {str(step_dir)!r} holds several processes without a rank "
            f"({', '.join(p.name for _, p in found)}): pass one process's directory as -i"
        )
    return found


def read_stacks(path: Path) -> dict[str, list[str]]:
    """stack.json in either form, as entry → frames (innermost first); empty when there is none."""
    if not path.is_file():
        return {}
    obj = load_json_file(path, "stack file")
    if not isinstance(obj, dict):
        raise AnomalyError(f"stack file {str(path)!r} is not a JSON object")
    stacks: dict[str, list[str]] = {}
    for key, value in obj.items():
        grouped = key.isdigit() and isinstance(value, list) and len(value) == 2 and isinstance(value[0], list)
        names, frames = (value[0], value[1]) if grouped else ([key], value)
        for name in names:
            stacks[str(name)] = _flat_frames(frames)
    return stacks


def _flat_frames(value: Any) -> list[str]:
    if isinstance(value, list):
        return [line for item in value for line in _flat_frames(item)]
    return [] if value is None else [str(value)]


def read_step(step_dir: str | os.PathLike) -> list[RankDump]:
    """Every rank's dump of one step directory (or of one process directory), by rank."""
    root = Path(step_dir)
    if not root.is_dir():
        raise AnomalyError(f"-i {str(root)!r} is not a directory: pass a step directory such as dump/step0")
    found = _process_dirs(root)
    if not found:
        raise AnomalyError(
            f"-i {str(root)!r} holds no rank*/proc* directory with a dump.json: pass a step directory "
            f"such as dump/step0"
        )
    dumps = []
    for rank, directory in found:
        try:
            dump = read_dump(directory / "dump.json")
            stacks = read_stacks(directory / "stack.json")
        except CompareError as error:
            raise AnomalyError(str(error)) from None
        if dump.task not in ("statistics", "tensor", "overflow_check"):
            raise AnomalyError(f"{str(dump.path)!r}: task {dump.task!r} records no statistics; "
                               f"allowed: statistics, tensor, overflow_check")
        dumps.append(RankDump(rank, directory, dump.entries, stacks))
    return dumps
