"""The local engine: this machine's process pools, as msprobe ran its jobs before engines existed."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from msprobe.core.engine import WorkerLost, batch_size


class LocalEngine:
    """Units in the caller (one worker, or too few units to pay for processes) or in a process pool."""

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any], workers: int, *, chunksize: int | None = None,
            isolated: bool = False, serial_below: int = 0) -> Iterator[Any]:
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
        raise WorkerLost(f"a worker process died: {exc}") from None
    finally:
        pool.shutdown()
