"""The step directories of a dump (docs/pytorch/dump.md#output-layout) and the rules that two runs never mix
(docs/pytorch/dump.md#durability-the-training-run-always-goes-on).

A *run* is one debugger in one process; each rank of a job is a process that writes only its own
``step{N}/rank{R}`` directories. So a run holds ``{dump_path}/.msprobe-rank{R}.lock`` under ``flock`` (a
second holder gets :class:`DumpPathBusy`; the kernel drops the lock of a dead process), and the first time
it writes a rank directory name it renames every non-empty one an earlier run left to
``rank{R}.moved-{timestamp}``, never deleting one (:func:`claim_step_dir`).
"""

from __future__ import annotations

import atexit
import errno
import os
import re
import socket
import time
from pathlib import Path

from msprobe.core.services.fileio import FILE_MODE, UnsafePathError, check_writable_path, make_dir
from msprobe.core.services.log import logger

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no flock; runs are then not kept apart
    fcntl = None  # type: ignore[assignment]

# Where launchers put a process's rank: torchrun (RANK), MindSpore's msrun (RANK_ID), mpirun, Slurm.
RANK_ENV_VARS = ("RANK", "RANK_ID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")
_STEP_DIR = re.compile(r"step(\d+)")
_PROC_DIR = re.compile(r"proc\d+")
_LISTED_MOVES = 3


DUMP_FORMATS = ("1.1.1", "26")  # config.json's dump_format (docs/dump_format.md#two-layouts)
DEFAULT_DUMP_FORMAT = "1.1.1"


def rank_dir_name(rank: int | None, dump_format: str = DEFAULT_DUMP_FORMAT) -> str:
    """``rank{R}``; without a process group a bare ``rank`` (msprobe 1.1.1's name) or, with dump_format
    ``26``, ``proc{pid}`` (msprobe 26.2.0's)."""
    if rank is not None:
        return f"rank{rank}"
    return f"proc{os.getpid()}" if dump_format == "26" else "rank"


def step_dir(dump_path: str | os.PathLike, step: int, rank: int | None, dump_format: str = DEFAULT_DUMP_FORMAT) -> Path:
    """``{dump_path}/step{N}/rank{R}``; without a process group see :func:`rank_dir_name`."""
    return Path(dump_path) / f"step{step}" / rank_dir_name(rank, dump_format)


def launcher_rank() -> int | None:
    """The rank a launcher gave this process in its environment, or None (a single process)."""
    for name in RANK_ENV_VARS:
        value = os.environ.get(name, "").strip()
        if value.isdigit():
            return int(value)
    return None


class DumpPathBusy(OSError):
    """Another live process writes this rank of the dump_path; ``holder`` is what its lock file says."""

    def __init__(self, lock_file: Path, holder: str) -> None:
        super().__init__(
            errno.EBUSY, f"{holder} is writing {lock_file.parent} (it holds {lock_file.name})", str(lock_file)
        )
        self.holder = holder


class _Lock:
    """One lock file under ``flock``, shared by every hold of this process on it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.users = 0
        self.fd = _locked_fd(path)
        self.pid = os.getpid()  # a forked child inherits the lock but must not remove the file


_locks: dict[Path, _Lock] = {}


def _locked_fd(path: Path) -> int:
    """Open ``path`` and lock it without waiting; write our pid and host into it."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), FILE_MODE)
        if fcntl is None:
            break
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode("utf-8", errors="replace").strip() or "another process"
            os.close(fd)
            raise DumpPathBusy(path, holder) from None
        except BaseException:
            os.close(fd)
            raise
        # Its previous holder may have removed the file between our open and our lock: lock the new one.
        try:
            if os.path.samestat(os.fstat(fd), os.lstat(path)):
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {os.getpid()} on host {socket.gethostname()}\n".encode(), 0)
    return fd


def _acquire(path: Path) -> _Lock:
    lock = _locks.get(path)
    if lock is None or lock.pid != os.getpid():  # a lock inherited through fork is the parent's, not ours
        lock = _locks[path] = _Lock(path)
    lock.users += 1
    return lock


def _release(lock: _Lock) -> None:
    lock.users -= 1
    if lock.users > 0 or _locks.get(lock.path) is not lock:
        return
    del _locks[lock.path]
    if lock.pid == os.getpid():
        try:
            os.unlink(lock.path)  # removed while still locked: a process that opened it meanwhile retries
        except OSError:
            pass
    os.close(lock.fd)


@atexit.register
def _release_all() -> None:
    for lock in list(_locks.values()):
        lock.users = 1
        _release(lock)


class DumpPathHold:
    """What one run holds in a dump_path: the locks of its rank directories and the names it claimed."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.claimed: set[str] = set()
        self.pid = os.getpid()
        self._locks: dict[str, _Lock] = {}

    def lock(self, name: str) -> None:
        """Hold rank directory ``name``; :class:`DumpPathBusy` when another process holds it."""
        if name not in self._locks:
            self._locks[name] = _acquire(self.root / f".msprobe-{name}.lock")

    def release(self) -> None:
        """The run is over: another run may write here (and will move this run's steps aside)."""
        for lock in self._locks.values():
            _release(lock)
        self._locks.clear()
        if _holds.get(self.root) is self:
            del _holds[self.root]


_holds: dict[Path, DumpPathHold] = {}  # dump_path → the newest run of this process there


def hold_dump_path(dump_path: str | os.PathLike, rank: int | None,
                   dump_format: str = DEFAULT_DUMP_FORMAT) -> DumpPathHold:
    """Start a run in ``dump_path`` (created if missing) for ``rank``; :class:`DumpPathBusy` when another
    process writes that rank there. The run's writes land in this hold until :meth:`~DumpPathHold.release`."""
    root = check_writable_path(dump_path)
    make_dir(root)
    hold = DumpPathHold(root)
    hold.lock(rank_dir_name(rank))  # one lock per rank, whichever layout names its directory
    _holds[root] = hold
    return hold


def claim_step_dir(dump_path: str | os.PathLike, step: int, rank: int | None,
                   dump_format: str = DEFAULT_DUMP_FORMAT) -> Path:
    """Create the step directory for this run and return its absolute path.

    ``dump_path`` must not be (or contain) a symlink nor belong to another user. The first claim of a
    rank directory name in a run takes its lock and moves every earlier run's directory of that name
    aside.
    """
    root = check_writable_path(dump_path)
    name = rank_dir_name(rank, dump_format)
    target = root / f"step{step}" / name
    if target.is_symlink():
        raise UnsafePathError(f"step directory {str(target)!r} is a symlink; refusing to write there")
    hold = _holds.get(root)
    if hold is None or hold.pid != os.getpid():  # no debugger of this process holds it: the process is the run
        hold = _holds[root] = DumpPathHold(root)
    if name not in hold.claimed:
        make_dir(root)
        hold.lock(rank_dir_name(rank))
        _move_earlier_run_aside(root, name)
        hold.claimed.add(name)
    for directory in (root, target.parent, target):  # each level checked; recreated if removed meanwhile
        make_dir(directory)
    return target


def _move_earlier_run_aside(root: Path, name: str) -> None:
    """Rename every non-empty ``step{N}/{name}`` under ``root`` with one ``.moved-{timestamp}`` suffix; for a
    ``proc{pid}`` name every ``proc{pid}`` directory (an earlier run outside a distributed job had another pid)."""
    earlier = []
    for step in root.iterdir():
        if not (_STEP_DIR.fullmatch(step.name) and step.is_dir() and not step.is_symlink()):
            continue
        candidates = [d for d in step.iterdir() if _PROC_DIR.fullmatch(d.name)] if _PROC_DIR.fullmatch(name) else [
            step / name]
        earlier += [d for d in candidates if d.is_dir() and not d.is_symlink() and any(d.iterdir())]
    if not earlier:
        return
    earlier.sort(key=lambda d: int(d.parent.name[len("step"):]))
    suffix = _unused_suffix(earlier)
    for directory in earlier:
        directory.rename(directory.with_name(directory.name + suffix))
    shown = ", ".join(f"{d} -> {d.with_name(d.name + suffix)}" for d in earlier[:_LISTED_MOVES])
    more = len(earlier) - _LISTED_MOVES
    rest = f" and {more} more, steps {_step_ranges(earlier[_LISTED_MOVES:])}" if more > 0 else ""
    logger.warning(
        f"{root} holds {len(earlier)} step directories of an earlier run for {name}; each was renamed with the "
        f"suffix {suffix} inside its step directory (nothing was deleted): {shown}{rest}"
    )


def _unused_suffix(directories: list[Path]) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    suffix, attempt = f".moved-{stamp}", 0
    while any(os.path.lexists(d.with_name(d.name + suffix)) for d in directories):
        attempt += 1
        suffix = f".moved-{stamp}-{attempt}"
    return suffix


def _step_ranges(directories: list[Path]) -> str:
    """``3-7, 9`` for the steps of ``directories`` (sorted)."""
    steps = [int(d.parent.name[len("step"):]) for d in directories]
    ranges: list[list[int]] = []
    for step in steps:
        if ranges and step == ranges[-1][1] + 1:
            ranges[-1][1] = step
        else:
            ranges.append([step, step])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)
