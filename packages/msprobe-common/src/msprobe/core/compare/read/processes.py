"""The process directories of a step: which directory under ``step{N}/`` holds which rank's dump.

Three writers name them three ways (docs/dump_format.md#two-layouts): ``rank{R}`` in a distributed job
(both msprobe generations), a bare ``rank`` outside one (this project's default and msprobe 1.1.1), and
``proc{pid}`` outside one (msprobe 26.2.0, and this project with ``"dump_format": "26"``). The two names
without a rank are rank 0. Every reader of a step directory (compare, ``msprobe graph``, anomaly origin)
asks this module, so a new naming is taught once.
"""

from __future__ import annotations

import re
from pathlib import Path

from msprobe.core.compare.read.reader import CompareError

PROCESS_DIR = re.compile(r"(?:rank(\d*)|proc(\d+))")
DUMP_FILE = "dump.json"


def process_rank(name: str) -> int | None:
    """The rank a process directory's name stands for (``rank``/``proc{pid}``: 0), None for another name."""
    match = PROCESS_DIR.fullmatch(name)
    if match is None:
        return None
    return int(match.group(1)) if match.group(1) else 0


def process_dirs(step_dir: Path, what: str) -> dict[int, Path]:
    """Rank → the process directory of ``step_dir`` that holds a dump.json, in rank order.

    ``what`` names the role of the directory in errors (``"npu_path"``, ``"-i"``). Two directories of the same
    rank (``rank`` beside ``proc123``, or two ``proc`` directories: two processes outside a distributed job
    wrote into one step) cannot be told apart, so that is an error naming them."""
    if not step_dir.is_dir():
        raise CompareError(f"{what} {str(step_dir)!r} is not a directory")
    found: dict[int, list[Path]] = {}
    for child in sorted(step_dir.iterdir()):
        rank = process_rank(child.name)
        if rank is not None and (child / DUMP_FILE).is_file():
            found.setdefault(rank, []).append(child)
    if not found:
        raise CompareError(f"{what} {str(step_dir)!r} has no rank*/ or proc*/ directory with a dump.json: give a "
                           f"step directory such as step0")
    for rank, directories in found.items():
        if len(directories) > 1:
            raise CompareError(f"{what} {str(step_dir)!r} holds {', '.join(d.name for d in directories)}: several "
                               f"processes of rank {rank}; give one process's directory instead")
    return {rank: directories[0] for rank, directories in sorted(found.items())}
