"""The local engine: this machine's process pools, as msprobe ran its jobs before engines existed."""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from msprobe.core.engine import Accelerators, WorkerLost, batch_size


class LocalEngine:
    """Units in the caller (one worker, or too few units to pay for processes) or in a process pool."""

    def executor(self, max_workers: int, initializer: Callable[[], None] | None = None,
                 accelerators: Accelerators | None = None) -> Executor:
        """A pool of ``max_workers`` spawned processes, started now, each ending with this process (``accelerators``
        apply on Ray only)."""
        executor = ProcessPoolExecutor(max_workers, mp_context=multiprocessing.get_context("spawn"),
                                       initializer=_start_worker, initargs=(initializer,))
        for _ in range(max_workers):  # start the processes now (e.g. while the online senders connect)
            executor.submit(os.getpid)
        return executor

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any], workers: int, *, chunksize: int | None = None,
            isolated: bool = False, serial_below: int = 0, accelerator: str | None = None) -> Iterator[Any]:
        if not isolated and (workers <= 1 or len(items) < serial_below):
            return map(fn, items)
        context = multiprocessing.get_context("spawn") if isolated else None
        pool = ProcessPoolExecutor(max_workers=workers, mp_context=context)
        # submitted now, so the workers start before the caller starts threads of its own (a progress bar)
        results = pool.map(fn, items, chunksize=chunksize or batch_size(len(items), workers))
        return _drain(pool, results)


def _drain(pool: ProcessPoolExecutor, results: Iterator[Any]) -> Iterator[Any]:
    try:
        yield from results
    except BrokenProcessPool as exc:
        raise WorkerLost(str(exc)) from None  # the pool's own words, as callers reported them before engines
    finally:
        pool.shutdown()


def _start_worker(initializer: Callable[[], None] | None) -> None:
    """In each worker process: end with the parent, even when it is killed (no orphan workers)."""
    parent = multiprocessing.parent_process()
    if parent is not None:
        threading.Thread(target=lambda: (parent.join(), os._exit(1)), daemon=True).start()
    if initializer is not None:
        initializer()
