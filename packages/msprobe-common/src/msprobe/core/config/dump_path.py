"""Whether a debugger can write in its ``dump_path``, checked at construction.

Found at the first write instead, a bad dump_path would surface as a raw OSError in the middle of a
training run — or, since writes never break the run, only as a log line once the first selected step is
over. So the directory is checked before training starts, with the file system's own answer: a path that
is a file, a read-only mount, a directory this user cannot write. Writability is tested by creating and
removing a probe file, because ``os.access`` says yes to root on a read-only mount and on a 0o555
directory alike.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from msprobe.core.services.fileio import UnsafePathError, check_writable_path


def dump_path_problem(value: str) -> str | None:
    """What a usable ``dump_path`` would be, when ``value`` is not one (for a :class:`Problem`'s
    ``allowed``); None when the debugger can create it, or it exists, and write files in it."""
    if "\x00" in value:
        return "a path without NUL characters"
    try:
        check_writable_path(value)
    except UnsafePathError as error:
        return f"a directory that is no symlink and belongs to this user ({error})"
    path = Path(os.path.abspath(value))
    existing = path
    while not os.path.lexists(existing) and existing != existing.parent:
        existing = existing.parent
    try:
        mode = os.stat(existing).st_mode
    except OSError as error:
        return f"a directory msprobe can create and write in ({existing}: {error.strerror})"
    if not stat.S_ISDIR(mode):
        where = "it" if existing == path else str(existing)
        return f"a directory, or a path where one can be created ({where} is {_kind(mode)}, not a directory)"
    refused = _write_refused(existing)
    if refused is not None:
        return f"a directory msprobe can write in ({existing} refuses a new file: {refused})"
    return None


def _kind(mode: int) -> str:
    return "a regular file" if stat.S_ISREG(mode) else "not a directory but a special file"


def _write_refused(directory: Path) -> str | None:
    """Why a file cannot be created in ``directory`` (the file system's words), or None when it can."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".msprobe-probe-", dir=directory)
    except OSError as error:
        return error.strerror or str(error)
    os.close(fd)
    os.unlink(probe)
    return None
