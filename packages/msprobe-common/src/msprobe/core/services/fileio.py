"""Safe file primitives shared by every writer.

Files we write must survive a crash mid-run (temp file + rename, so a reader sees the old file or the
new one, never half of one), must not be readable by other users (directories 0o750, files 0o640), and
must never follow a symlink an attacker planted where we write. A failed write (a full disk) leaves no
temporary file behind and reports the operating system's own error, with the bytes it still needed.
"""

from __future__ import annotations

import csv
import hashlib
import io
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

DIR_MODE = 0o750
FILE_MODE = 0o640
_BUFFER_BYTES = 1 << 16


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


class DumpWriteError(OSError):
    """An OSError met while writing ``filename``; ``needed`` is how many more bytes the failing write
    had to put on disk (None when unknown), so the log can say how much space was missing."""

    def __init__(self, error: OSError, path: str | os.PathLike, needed: int | None = None) -> None:
        super().__init__(error.errno, error.strerror or str(error), str(path))
        self.needed = needed


class _RecordingFile(io.FileIO):
    """A raw file that remembers the OSError of a failed write: serialisers such as ``torch.save``
    turn it into a RuntimeError that no longer says "No space left on device"."""

    failure: tuple[OSError, int] | None = None  # the error and the bytes the failing write had to write

    def write(self, data) -> int:  # type: ignore[override]
        try:
            return super().write(data)
        except OSError as error:
            self.failure = (error, memoryview(data).nbytes)
            raise


@dataclass(frozen=True)
class WrittenFile:
    """A file this process wrote, as it was then (device, inode, size, modification time): a later hard
    link to it first checks that the file at ``path`` is still that one."""

    path: Path
    identity: tuple[int, int, int, int]

    @staticmethod
    def identity_of(st: os.stat_result) -> tuple[int, int, int, int]:
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)

    def unchanged(self) -> bool:
        try:
            return self.identity_of(os.lstat(self.path)) == self.identity
        except OSError:
            return False


def temp_path(target: Path) -> Path:
    """The hidden temporary sibling ``target`` is written under before its rename: ``.{name}.{pid}.tmp``,
    or a hash of the name when that would pass the 255-byte limit of a file name."""
    name = f".{target.name}.{os.getpid()}.tmp"
    if len(name.encode("utf-8", errors="surrogatepass")) > 255:
        digest = hashlib.sha256(target.name.encode("utf-8", errors="surrogatepass")).hexdigest()[:32]
        name = f".{digest}.{os.getpid()}.tmp"
    return target.with_name(name)


class PendingFile:
    """A file written under its temporary name and renamed onto ``target`` by :meth:`commit`.

    The one way msprobe writes a file: a reader or a crash sees the old file or the new one, never half
    of one; an existing ``target`` is replaced, never written through (a hard link to it elsewhere keeps
    its bytes); the temporary file is created exclusively (a planted symlink is not followed) and
    :meth:`discard` removes it. Every OSError comes out as a :class:`DumpWriteError` naming ``target``.
    """

    def __init__(self, target: str | os.PathLike) -> None:
        self.target = Path(target)
        self.temp = temp_path(self.target)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        try:
            try:
                fd = os.open(self.temp, flags, FILE_MODE)
            except FileExistsError:  # left by a killed process that had our pid; never followed
                os.unlink(self.temp)
                fd = os.open(self.temp, flags, FILE_MODE)
        except OSError as error:
            raise DumpWriteError(error, self.target) from error
        self._raw = _RecordingFile(fd, "wb")
        self.file = io.BufferedWriter(self._raw, _BUFFER_BYTES)

    def write(self, data: bytes) -> None:
        try:
            self.file.write(data)
        except OSError as error:
            raise self.failed_on_disk(error) from error

    def flush(self) -> None:
        """Hand what is buffered to the operating system."""
        try:
            self.file.flush()
        except OSError as error:
            raise self.failed_on_disk(error) from error

    def commit(self, *, sync: bool = False) -> WrittenFile:
        """Flush (and with ``sync`` fsync) the file and rename it onto the target."""
        try:
            self.file.flush()
            if sync:
                os.fsync(self._raw.fileno())
            identity = WrittenFile.identity_of(os.fstat(self._raw.fileno()))
            self.file.close()
            os.replace(self.temp, self.target)
        except OSError as error:
            self.discard()
            raise self.failed_on_disk(error) from error
        return WrittenFile(self.target, identity)

    def discard(self) -> None:
        """Close and remove the temporary file (after a failure: errors closing it are expected)."""
        for close in (self.file.close, self._raw.close):
            try:
                close()
            except (OSError, ValueError):
                pass
        _remove(self.temp)

    def failed_on_disk(self, error: BaseException) -> DumpWriteError | None:
        """The disk's own error behind ``error`` (also when a serialiser wrapped it), naming ``target``;
        None when ``error`` did not come from the disk."""
        if self._raw.failure is not None:
            disk_error, needed = self._raw.failure
            return DumpWriteError(disk_error, self.target, needed)
        return DumpWriteError(error, self.target) if isinstance(error, OSError) else None


class _Handle:
    """What a serialiser writes to: ``write`` and ``flush`` only. Given a real file object, numpy writes
    around it (``ndarray.tofile``) and a full disk then surfaces without its errno."""

    __slots__ = ("write", "flush")

    def __init__(self, file: io.BufferedWriter) -> None:
        self.write, self.flush = file.write, file.flush


def write_file(path: str | os.PathLike, write: Callable[[BinaryIO], object], *, sync: bool = False) -> WrittenFile:
    """Write a file through ``write(handle)`` (e.g. ``lambda f: torch.save(t, f)``), via :class:`PendingFile`.

    On any failure no temporary file is left; when the disk refused a write, that OSError is raised (as
    a :class:`DumpWriteError`) even if ``write`` reported it as something else.
    """
    pending = PendingFile(path)
    try:
        write(_Handle(pending.file))  # type: ignore[arg-type]
    except BaseException as error:
        pending.discard()
        failure = pending.failed_on_disk(error)
        if failure is None:
            raise
        raise failure from error
    return pending.commit(sync=sync)


def link_written(source: WrittenFile, path: str | os.PathLike) -> bool:
    """Make ``path`` a second name of ``source`` (saving an unchanged tensor twice costs no bytes).

    Only when ``source`` sits in the same directory and is still the file this process wrote: a file
    remembered from earlier may since have been moved aside or replaced by someone else's. False when
    no link was made (the caller then writes the file).
    """
    target = Path(path)
    if source.path.parent != target.parent or not source.unchanged():
        return False
    temp = temp_path(target)
    try:
        os.link(source.path, temp)
        os.replace(temp, target)
    except OSError:  # a stale temporary name, a file system without hard links, ...: write instead
        _remove(temp)
        return False
    _remove(temp)  # still there when target already was this file: rename() then does nothing
    return True


def _remove(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary sibling, an fsync and an atomic rename."""
    write_file(path, lambda handle: handle.write(data), sync=True)


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
