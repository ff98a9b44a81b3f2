"""The shared-directory transport (``nfs_path``): the sender's :class:`DirLink`, the receiver's :class:`DirWatcher`.

One file per message, named ``r{rank}_s{step}_q{sequence}.msg``, written to a hidden temporary name and
renamed into place (a reader never sees half a file); the receiver reads each in sequence order per rank,
then deletes it. STOP is the file ``r{rank}.stop`` (docs/run_ut_online.md#transports).
"""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path

from msprobe.core.online import wire
from msprobe.core.online.link import Intake, TransportError, handle_message
from msprobe.core.online.wire import Header, Kind, Limits, WireError
from msprobe.core.services.fileio import write_file
from msprobe.core.services.log import logger

_FILE = re.compile(r"r(\d{1,7})_s(\d{1,10})_q(\d{1,20})\.msg")
_STOP_FILE = re.compile(r"r(\d{1,7})\.stop")


def message_file(rank: int, step: int, seq: int) -> str:
    return f"r{rank}_s{step}_q{seq}.msg"


class DirLink:
    """The sender's shared directory: one file per message, renamed into place when complete."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)

    def open(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True, mode=0o750)
        if self.path.is_symlink():
            raise TransportError(f"nfs_path {str(self.path)!r} is a symbolic link")

    def _write(self, name: str, frame: bytes) -> None:
        write_file(self.path / name, lambda handle: handle.write(frame))  # temporary name, then rename

    def send(self, frames: list[tuple[Header, bytes]]) -> None:
        for header, frame in frames:
            self._write(message_file(header.rank, header.step, header.seq), frame)

    def stop(self, rank: int, step: int, seq: int, meta: dict) -> None:
        self._write(f"r{rank}.stop", wire.control(Kind.STOP, rank, step, seq, **meta))

    def close(self) -> None:
        pass


class DirWatcher:
    """The receiver's shared directory: polled, each file read in sequence order per rank and deleted."""

    def __init__(self, path: str, limits: Limits, intake: Intake, poll: float = 0.05) -> None:
        self.path, self.limits, self.intake, self.poll = Path(path), limits, intake, poll
        self.path.mkdir(parents=True, exist_ok=True, mode=0o750)
        if self.path.is_symlink():
            raise ValueError(f"nfs_path {str(self.path)!r} is a symbolic link")
        self._closed = threading.Event()
        self._ignored: set[int] = set()
        self._thread = threading.Thread(target=self._run, name="msprobe-online-dir", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._closed.is_set():
            if not self.scan():
                self._closed.wait(self.poll)

    def _wanted(self, rank: int) -> bool:
        if self.intake.accepts(rank):
            return True
        if rank not in self._ignored:
            self._ignored.add(rank)
            logger.warning("online run_ut: files of rank %d in %s are left alone (not in rank_list)", rank, self.path)
        return False

    def scan(self) -> bool:
        """Handle every complete file now there; True when there was any."""
        found, stops = [], []
        for entry in os.scandir(self.path):
            if (m := _FILE.fullmatch(entry.name)) and self._wanted(int(m.group(1))):
                found.append((int(m.group(1)), int(m.group(3)), entry.name))
            elif (m := _STOP_FILE.fullmatch(entry.name)) and self._wanted(int(m.group(1))):
                stops.append(entry.name)
        for _rank, _seq, name in sorted(found):
            self._consume(name)
        for name in stops:  # after the data files seen in the same scan: a stop file is written last
            self._consume(name)
        return bool(found or stops)

    def _consume(self, name: str) -> None:
        path = self.path / name
        try:
            size = path.stat().st_size
            if path.is_symlink() or size > self.limits.max_message + wire.HEADER.size:
                raise WireError(f"{size} bytes, more than the maximum message size" if not path.is_symlink()
                                else "a symbolic link")
            frame = path.read_bytes()
            header = wire.parse_header(frame[:wire.HEADER.size], self.limits)
            _check_name(name, header)
            message = handle_message(self.intake, header, frame, self.limits, name)
            if message is not None and message.kind == Kind.STOP:
                self.intake.stopped(header.rank, message.meta)
        except (WireError, OSError) as exc:
            self.intake.malformed(name, exc)
        finally:
            path.unlink(missing_ok=True)

    def close(self) -> None:
        self._closed.set()
        self._thread.join(timeout=2)


def _check_name(name: str, header: Header) -> None:
    m = _FILE.fullmatch(name)
    if m and (int(m.group(1)), int(m.group(2)), int(m.group(3))) != (header.rank, header.step, header.seq):
        raise WireError(f"file name says rank/step/sequence {m.groups()}, its header "
                        f"{header.rank}/{header.step}/{header.seq}")
    if m is None and header.kind != Kind.STOP:
        raise WireError(f"a stop file holding a {header.kind.name} message")
