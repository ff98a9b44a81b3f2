"""Tensor files (task ``tensor``) written by a background thread, from host copies, within a byte budget.

A file costs the training thread little to prepare (a host copy: what the call saw, whatever changes the
tensor afterwards) and much to write; the file system calls release the interpreter's lock, so a writer
thread overlaps them with the step. A synchronous write's promises stay: bounded memory
(``MSPROBE_TENSOR_QUEUE_MB``), every file on disk when :meth:`TensorWriter.drain` returns (before dump.json
is renamed into place), the writer's first error raised on the training thread, an unchanged tensor saved
twice hard-linked (:func:`~msprobe.core.services.fileio.link_written`). The user's side of it:
docs/pytorch/dump.md#durability-the-training-run-always-goes-on.
"""

from __future__ import annotations

import atexit
import os
import threading
import weakref
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from msprobe.core.services.fileio import WrittenFile, link_written, write_file
from msprobe.core.services.settings import IntSetting

QUEUE_MB = IntSetting("MSPROBE_TENSOR_QUEUE_MB", 1024, 1, 1 << 20, "MiB of tensor copies waiting to be written")

_writers: weakref.WeakSet[TensorWriter] = weakref.WeakSet()


class FrozenTensor:
    """A host copy of a tensor as a call saw it, and the first file written of it.

    ``payload`` is the copy (what the adapter's serialiser writes); it is let go once its first file is
    written, so memory is held only while a write waits. ``written`` is that first file, set by the
    writer before ``payload`` is let go.
    """

    __slots__ = ("payload", "nbytes", "written", "queued")

    def __init__(self, payload: Any, nbytes: int) -> None:
        self.payload: Any = payload
        self.nbytes = nbytes
        self.written: WrittenFile | None = None
        self.queued = False  # a first write of it was handed to the writer


class FreezingAdapter(Protocol):
    """What the writer needs of a framework's tensor adapter."""

    def freeze(self, tensor: Any, *, reuse: bool = True, remember: bool = False) -> FrozenTensor:
        """A host copy later in-place changes cannot reach; with ``reuse``, the same object as before
        for the same tensor unchanged since it was frozen with ``remember``."""

    def write_frozen(self, payload: Any, handle: BinaryIO) -> None:
        """Serialise a :attr:`FrozenTensor.payload` (``torch.save``, ``numpy.save``)."""


@dataclass(frozen=True)
class _Job:
    target: Path
    frozen: FrozenTensor
    payload: Any  # held by the job: a second name waiting for the first file still has the bytes
    nbytes: int  # what this job counts against the budget (0 for a second name)
    first: bool


class TensorWriter:
    """The tensor files of a run, written in order by one thread (started on demand, stopped by
    :meth:`drain`)."""

    def __init__(self, adapter: FreezingAdapter, budget_bytes: int | None = None) -> None:
        self.adapter = adapter
        self.budget = QUEUE_MB.read() << 20 if budget_bytes is None else budget_bytes
        self._start_empty()
        _writers.add(self)

    def _start_empty(self) -> None:
        """No job, no thread, no error, a new lock: a new writer, or a forked child's copy of one."""
        self._jobs: deque[_Job] = deque()
        self._queued_bytes = 0  # of the jobs queued and the one being written
        self._busy = False
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._changed = threading.Condition()

    # ------------------------------------------------------------------ the training thread
    def save(self, tensor: Any, target: Path, *, remember: bool = False) -> None:
        """Copy ``tensor`` now and write it to ``target`` soon; may wait for room within the budget.
        ``remember``: a tensor a recorded call produced, whose file a later save of it may link to."""
        self._raise_error()
        frozen = self.adapter.freeze(tensor, remember=remember)
        if frozen.queued:
            payload = frozen.payload  # read once: the writer lets it go after the first file
            if payload is not None:  # the first file is still to be written: a second name after it
                self._put(_Job(target, frozen, payload, 0, first=False))
                return
            if link_written(frozen.written, target):
                return
            frozen = self.adapter.freeze(tensor, reuse=False, remember=remember)  # moved or replaced: anew
        frozen.queued = True
        self._put(_Job(target, frozen, frozen.payload, frozen.nbytes, first=True))

    def drain(self) -> None:
        """Return when every queued file is written, and stop the thread; raise the first write error."""
        with self._changed:
            while (self._jobs or self._busy) and self._error is None:
                self._changed.wait()
            thread, self._thread = self._thread, None
            self._changed.notify_all()  # an idle writer sees that it is no longer wanted
        self._let_go(thread)
        self._raise_error()

    def discard(self) -> None:
        """Give up what is queued (after a write error, or at exit without ``stop()``, when no dump.json
        would name the files); the file being written finishes or fails, so no temporary file stays."""
        with self._changed:
            self._drop_queued()
            self._error = None
            while self._busy:
                self._changed.wait()
            thread, self._thread = self._thread, None
            self._changed.notify_all()
        self._let_go(thread)

    def _let_go(self, thread: threading.Thread | None) -> None:
        if thread is not None:
            thread.join()
            atexit.unregister(self.discard)

    def _put(self, job: _Job) -> None:
        with self._changed:
            while self._queued_bytes and self._queued_bytes + job.nbytes > self.budget and self._error is None:
                self._changed.wait()
            self._raise_error()
            self._jobs.append(job)
            self._queued_bytes += job.nbytes
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="msprobe-tensor-writer", daemon=True)
                self._thread.start()
                atexit.register(self.discard)  # a program that ends without stop(): see discard
            self._changed.notify_all()

    def _drop_queued(self) -> None:
        """Forget the queued jobs and their bytes (called holding the lock)."""
        self._queued_bytes -= sum(job.nbytes for job in self._jobs)
        self._jobs.clear()

    def _raise_error(self) -> None:
        error = self._error
        if error is not None:
            raise error

    # ------------------------------------------------------------------ the writer thread
    def _run(self) -> None:
        me = threading.current_thread()
        while True:
            with self._changed:
                while not self._jobs and self._thread is me:
                    self._changed.wait()
                if self._thread is not me:
                    return  # drained (or discarded) and let go
                job = self._jobs.popleft()
                self._busy = True
            try:
                self._write(job)
            except BaseException as error:  # noqa: BLE001 - handed to the training thread, raised there
                with self._changed:
                    if self._error is None:
                        self._error = error
                    self._drop_queued()  # the step is given up: nothing queued is wanted any more
            finally:
                with self._changed:
                    self._busy = False
                    self._queued_bytes -= job.nbytes
                    self._changed.notify_all()

    def _write(self, job: _Job) -> None:
        frozen = job.frozen
        if not job.first and frozen.written is not None and link_written(frozen.written, job.target):
            return
        written = write_file(job.target, lambda handle: self.adapter.write_frozen(job.payload, handle))
        if job.first:
            frozen.written = written  # before the payload goes: save() reads payload, then written
            frozen.payload = None


def _start_afresh_in_child() -> None:
    """A forked child (a DataLoader worker) has no writer thread, and the lock may have been held by it at
    the fork: the child's copies of the writers start empty, with a new lock and nothing to do at exit."""
    for writer in list(_writers):
        atexit.unregister(writer.discard)
        writer._start_empty()


if hasattr(os, "register_at_fork"):  # not on Windows, which does not fork
    os.register_at_fork(after_in_child=_start_afresh_in_child)
