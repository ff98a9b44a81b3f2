"""Safe file primitives shared by every writer.

Files we write must survive a crash mid-run (temp file + rename, so a reader sees the old file or the
new one, never half of one), must not be readable by other users (directories 0o750, files 0o640), and
must never follow a symlink an attacker planted where we write.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

DIR_MODE = 0o750
FILE_MODE = 0o640


class UnsafePathError(ValueError):
    """A path we were asked to write under is a symlink or belongs to another user."""


def check_writable_path(path: str | os.PathLike) -> Path:
    """Refuse a dump path that is a symlink, or that exists and belongs to another user.

    Each component the user wrote is checked (``a``, ``a/b``, ``a/b/c`` for ``a/b/c``), so a symlink
    planted anywhere inside the given path is caught; system directories above an absolute path (a
    symlinked ``/tmp`` on some systems) are left to the administrator. Returns the absolute path.
    """
    given = Path(path)
    parts = given.parts
    for depth in range(1, len(parts) + 1):
        component = Path(*parts[:depth])
        if given.is_absolute() and depth < len(parts):
            continue
        if component.is_symlink():
            raise UnsafePathError(
                f"dump_path {str(path)!r}: {str(component)!r} is a symlink; give a real directory"
            )
    if given.exists() and hasattr(os, "getuid") and given.stat().st_uid not in (os.getuid(), 0):
        raise UnsafePathError(f"dump_path {str(path)!r} belongs to another user; refusing to write there")
    return Path(os.path.abspath(given))


def make_dir(path: str | os.PathLike) -> Path:
    """Create ``path`` (and parents) with mode 0o750; an existing symlink is refused.

    Missing parents are created one by one with the same mode (``Path.mkdir(parents=True)`` would give
    them the umask's default, usually 0o755).
    """
    p = Path(path)
    if p.is_symlink():
        raise UnsafePathError(f"directory {str(p)!r} is a symlink; refusing to write there")
    missing = [d for d in p.parents if not d.exists() and not d.is_symlink()]
    for directory in reversed(missing):
        directory.mkdir(mode=DIR_MODE, exist_ok=True)
    p.mkdir(mode=DIR_MODE, exist_ok=True)
    return p


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary sibling and an atomic rename."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), FILE_MODE)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def _csv_text(rows: Iterable[Sequence[object]]) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    return buffer.getvalue()


def write_csv(path: str | os.PathLike, header: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    """Write a whole CSV file atomically."""
    atomic_write_text(path, _csv_text([list(header), *rows]))


def append_csv_rows(path: str | os.PathLike, header: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    """Append ``rows`` to a CSV shared by several processes (ranks) without interleaving lines.

    The file is opened with ``O_APPEND`` and the rows go out in one ``write`` under an exclusive
    ``flock``; the header is written by whichever process finds the file empty.
    """
    body = _csv_text(rows)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0), FILE_MODE)
    try:
        _lock(fd)
        if os.fstat(fd).st_size == 0:
            body = _csv_text([list(header)]) + body
        os.write(fd, body.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)


def _lock(fd: int) -> None:
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows has no flock; O_APPEND alone still keeps lines whole
        return
    fcntl.flock(fd, fcntl.LOCK_EX)
