"""The step directories of a dump (SPEC 4.3) and the rule that two runs never mix (SPEC 4.6).

``{dump_path}/step{N}/rank{R}`` belongs to one run. A run is this process: a directory it created
(or found empty) is its own and may be written again — a second ``start``/``stop`` in the same step
continues it. A directory that already holds files when this process first asks for it was left by an
earlier run; it is renamed aside with a timestamp, never deleted, and the log says where it went.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from msprobe.core.fileio import UnsafePathError, check_writable_path, make_dir
from msprobe.core.log import logger

_dirs_of_this_run: set[Path] = set()


def step_dir(dump_path: str | os.PathLike, step: int, rank: int | None) -> Path:
    """``{dump_path}/step{N}/rank{R}``; without a process group the rank directory is a bare ``rank``."""
    return Path(dump_path) / f"step{step}" / ("rank" if rank is None else f"rank{rank}")


def claim_step_dir(dump_path: str | os.PathLike, step: int, rank: int | None) -> Path:
    """Create the step directory for this run and return its absolute path.

    ``dump_path`` must not be (or contain) a symlink nor belong to another user. A directory left by an
    earlier run is moved aside first.
    """
    root = check_writable_path(dump_path)
    target = step_dir(root, step, rank)
    if target.is_symlink():
        raise UnsafePathError(f"step directory {str(target)!r} is a symlink; refusing to write there")
    if target not in _dirs_of_this_run:
        if target.is_dir() and any(target.iterdir()):
            _move_aside(target)
        _dirs_of_this_run.add(target)
    for directory in (root, target.parent, target):  # each level checked; recreated if removed meanwhile
        make_dir(directory)
    return target


def _move_aside(directory: Path) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    moved = directory.with_name(f"{directory.name}.moved-{stamp}")
    attempt = 1
    while moved.exists() or moved.is_symlink():
        moved = directory.with_name(f"{directory.name}.moved-{stamp}-{attempt}")
        attempt += 1
    directory.rename(moved)
    logger.warning(f"{directory} held the files of an earlier run; moved them to {moved} (nothing deleted)")
    return moved
