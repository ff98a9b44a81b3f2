"""A path MindSpore accepts for a dump directory whose own path it rejects.

MindSpore 2.10 checks its dump ``path`` when the first graph compiles: absolute, and only ASCII letters,
digits, ``-``, ``_`` and ``/`` (``RuntimeError: Dump path only support alphabets, digit or {'-', '_', '/'}``).
It checks the text, not the directory: a symlink with an accepted name that points at the real directory is
written through. So for any other ``dump_path`` msprobe stages MindSpore's dump under a private temporary
directory (``mkdtemp``, mode 0700) holding one symlink to ``{dump_path}/mindspore_dump``: the kernel files
land on the dump_path's own file system (no copy; msprobe then moves them into ``step{N}/rank{R}`` by
rename) and nothing is staged in the temporary directory but the link.

MindSpore keeps the path for the whole process and may write through it until the process ends, so the
link lives until exit; one link per kernel directory per process (each rank of a job has its own, and its
own copy of MindSpore's configuration beside it: :func:`.config.install`).
"""

from __future__ import annotations

import atexit
import os
import re
import tempfile
from pathlib import Path

from msprobe.core.config import ConfigError, Problem
from msprobe.core.services.log import logger

_ACCEPTED = re.compile(r"/[A-Za-z0-9_/-]*")
MINDSPORE_RULE = "MindSpore's dump path rule: an absolute path of ASCII letters, digits, '-', '_' and '/' only"
LINK_NAME = "mindspore_dump"
_aliases: dict[Path, str] = {}  # kernel directory → the accepted path MindSpore was given in this process


def accepted_by_mindspore(path: str) -> bool:
    return _ACCEPTED.fullmatch(path) is not None


def _alias_parents() -> list[str]:
    """Where a private alias directory may go, in order of preference (the first MindSpore accepts wins)."""
    candidates = [tempfile.gettempdir(), "/tmp", "/var/tmp"]
    return [c for i, c in enumerate(candidates) if c not in candidates[:i]]


def _remove_alias(alias_dir: str) -> None:
    """Remove the link, the files msprobe put beside it and the directory; never what the link points at."""
    try:
        for entry in os.scandir(alias_dir):
            if entry.is_symlink() or entry.is_file(follow_symlinks=False):
                os.unlink(entry.path)
        os.rmdir(alias_dir)
    except OSError:
        pass  # already gone, or MindSpore wrote into it after the link vanished: leave it


def make_alias(target: Path, parents: list[str]) -> str | None:
    """``{alias_dir}/mindspore_dump`` → ``target`` under the first of ``parents`` MindSpore accepts, else None."""
    for parent in parents:
        if not accepted_by_mindspore(os.path.abspath(parent)):
            continue
        try:
            alias_dir = tempfile.mkdtemp(prefix="msprobe_ms_", dir=os.path.abspath(parent))
        except OSError:
            continue
        link = os.path.join(alias_dir, LINK_NAME)
        if not accepted_by_mindspore(link):  # mkdtemp's letters are [a-z0-9_]; checked all the same
            os.rmdir(alias_dir)
            continue
        try:
            os.symlink(target, link, target_is_directory=True)
        except OSError:
            os.rmdir(alias_dir)
            continue
        atexit.register(_remove_alias, alias_dir)
        return link
    return None


def path_for_mindspore(kernel_root: Path, dump_path: str) -> str:
    """The path to give MindSpore for ``kernel_root``: itself when MindSpore accepts it, else an alias.

    A ConfigError naming ``dump_path`` and MindSpore's rule when no alias can be made (no writable temporary
    directory whose path MindSpore accepts, or no symlinks there).
    """
    if accepted_by_mindspore(str(kernel_root)):
        return str(kernel_root)
    if kernel_root not in _aliases:
        link = make_alias(kernel_root, _alias_parents())
        if link is None:
            allowed = (
                f"{MINDSPORE_RULE}; msprobe reaches any other dump_path through a symlink in a temporary "
                f"directory, but none of {_alias_parents()} could hold one (set TMPDIR to a writable directory "
                "whose path follows that rule)"
            )
            raise ConfigError([Problem("dump_path", dump_path, allowed)])
        _aliases[kernel_root] = link
        logger.info(
            f"MindSpore accepts no dump path like {str(kernel_root)!r} ({MINDSPORE_RULE}): it writes through "
            f"the symlink {link} instead, into the same directory"
        )
    return _aliases[kernel_root]
