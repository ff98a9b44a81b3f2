"""The checking side of online run_ut, without a framework (docs/run_ut_online.md).

Data flows one way: a transport (:class:`~msprobe.core.online.tcp.TcpServer` or
:class:`~msprobe.core.online.tcp.DirWatcher`) hands sound messages to the :class:`Intake`; the
intake keeps only ``rank_list`` ranks, pairs each forward record with its backward, and hands the
pair to the :class:`ReplayPool` (worker processes running the framework's replay: local processes, or
Ray actors whose number grows with the backlog, each holding one device of ``-d`` when it names accelerators,
:mod:`msprobe.core.engine`); the
:class:`Receiver` writes each judged API into the run_ut reports of its step and rank
(``{out}/step{S}/rank{R}/accuracy_checking_*``) and ends, with a summary, once every rank of
``rank_list`` has sent STOP.

Why pairing here: run_ut replays an API's backward from its forward inputs and the gradients of its
outputs, which arrive in two records. A forward whose backward will not come (the sender says so) is
replayed at once; the others wait for their backward until their rank's step ends. Why a bounded pool:
a slow replay must slow the transport (which then slows its acknowledgements and the sender drops
records) rather than pile records up in memory here.
"""

from __future__ import annotations

import json
import queue
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Collection
from concurrent.futures import Executor, Future
from concurrent.futures.process import BrokenProcessPool
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from msprobe.core.engine import Accelerators, EngineChoice, EngineError, open_engine
from msprobe.core.services.fileio import atomic_write_text
from msprobe.core.lifecycle.layout import step_dir
from msprobe.core.services.log import logger
from msprobe.core.online.wire import Kind, Message
from msprobe.core.run_ut import SKIP
from msprobe.core.run_ut.report import NOT_APPLICABLE, Report

MAX_PENDING = 4096  # forward records waiting for their backward, all ranks together
_LOGGED_MALFORMED = 20  # the first ones are logged one by one, later ones only counted

# (forward frame, backward frame or None) → the API's ApiRow (None: not selected); runs in a worker process
Replay = Callable[[bytes, "bytes | None"], Any]
Dispatch = Callable[[int, int, bytes, "bytes | None"], None]


class Intake:
    """What the transports hand their messages to (thread-safe: one thread per TCP connection)."""

    def __init__(self, rank_list: Collection[int], dispatch: Dispatch) -> None:
        self.rank_list = frozenset(rank_list)
        self.dispatch = dispatch
        self.counts: Counter[str] = Counter()
        self.dropped_by_sender: Counter[int] = Counter()
        self.stopped_ranks: set[int] = set()
        self._pending: OrderedDict[tuple[int, int, str], bytes] = OrderedDict()
        self._lock = threading.Lock()

    def accepts(self, rank: int) -> bool:
        return rank in self.rank_list

    @property
    def done(self) -> bool:
        return self.stopped_ranks >= self.rank_list

    def message(self, message: Message, frame: bytes) -> None:
        if message.kind == Kind.STEP_END:
            self._sender_dropped(message.rank, message.meta.get("dropped"))
            self._flush(lambda key: key[0] == message.rank and key[1] <= message.step)
            return
        name, entry = message.meta.get("name"), message.meta.get("entry")
        if not isinstance(name, str) or not isinstance(entry, dict) or not name.endswith((".forward", ".backward")):
            self.malformed(f"rank {message.rank} message {message.seq}", ValueError("no API name and entry"))
            return
        self.counts["records"] += 1
        row = name.rsplit(".", 1)[0]
        key = (message.rank, message.step, row)
        if name.endswith(".backward"):
            with self._lock:
                forward = self._pending.pop(key, None)
            if forward is None:
                self.counts["backward without forward"] += 1
                return
            self.dispatch(message.rank, message.step, forward, frame)
        elif message.meta.get("backward") is True:
            with self._lock:
                self._pending[key] = frame
                overflow = self._pending.popitem(last=False) if len(self._pending) > MAX_PENDING else None
            if overflow is not None:
                self.counts["replayed without backward (too many waiting)"] += 1
                (rank, step, _), forward = overflow
                self.dispatch(rank, step, forward, None)
        else:
            self.dispatch(message.rank, message.step, frame, None)

    def stopped(self, rank: int, meta: dict) -> None:
        self._sender_dropped(rank, meta.get("dropped"), total=True)
        self._flush(lambda key: key[0] == rank)
        logger.info("online run_ut: rank %d stopped (it sent %s records, dropped %s)", rank, meta.get("sent"),
                    meta.get("dropped"))
        with self._lock:
            self.stopped_ranks.add(rank)

    def malformed(self, where: str, error: Exception) -> None:
        with self._lock:
            self.counts["malformed"] += 1
            count = self.counts["malformed"]
        if count <= _LOGGED_MALFORMED:
            logger.warning("online run_ut: skipped a malformed record from %s: %s", where, error)
        elif count == _LOGGED_MALFORMED + 1:
            logger.warning("online run_ut: more malformed records; they are counted, no longer logged")

    def _sender_dropped(self, rank: int, value: Any, total: bool = False) -> None:
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            with self._lock:
                if total:
                    self.dropped_by_sender[rank] = max(self.dropped_by_sender[rank], value)
                else:
                    self.dropped_by_sender[rank] += value

    def _flush(self, which: Callable[[tuple[int, int, str]], bool]) -> None:
        """Replay, without backward, the forwards whose backward can no longer come."""
        with self._lock:
            keys = [key for key in self._pending if which(key)]
            flushed = [(key, self._pending.pop(key)) for key in keys]
        for (rank, step, _), forward in flushed:
            self.dispatch(rank, step, forward, None)


class ReplayPool:
    """``replay`` in ``workers`` spawned processes (or, on Ray, at most ``workers`` actors), at most two tasks
    per worker in flight (the caller waits for a slot: backpressure). Results are put on :attr:`results` as
    (rank, step, future). ``accelerators`` (Ray only: :func:`msprobe.core.run_ut.parallel.offered`): each actor
    holds one of their devices, which a Ray started here declares, and ``initializer`` and ``replay`` get
    ``device=`` its name in the actor."""

    def __init__(self, workers: int, replay: Replay, initializer: Callable[..., None] | None = None,
                 engine: EngineChoice | None = None, accelerators: Accelerators | None = None) -> None:
        self.workers, self.replay, self.initializer, self.accelerators = workers, replay, initializer, accelerators
        self.results: queue.Queue[tuple[int, int, Future]] = queue.Queue()
        self._slots = threading.BoundedSemaphore(2 * workers)
        self._lock = threading.Lock()
        self._in_flight = 0
        self._stack = ExitStack()  # the engine stays open (a Ray connected) until close()
        self._engine = self._stack.enter_context(open_engine(engine, accelerators))
        self._executor = self._new_executor()

    def _new_executor(self) -> Executor:
        return self._engine.executor(self.workers, self.initializer, self.accelerators)

    def submit(self, rank: int, step: int, forward: bytes, backward: bytes | None) -> None:
        self._slots.acquire()
        with self._lock:
            self._in_flight += 1
        try:
            future = self._executor.submit(self.replay, forward, backward)
        except BrokenProcessPool:  # a worker died (killed, crashed): start a fresh pool, once
            logger.warning("online run_ut: a replay process died; starting new ones")
            self._executor = self._new_executor()
            future = self._executor.submit(self.replay, forward, backward)
        future.add_done_callback(lambda f: self._done(rank, step, f))

    def _done(self, rank: int, step: int, future: Future) -> None:
        self.results.put((rank, step, future))
        with self._lock:
            self._in_flight -= 1
        self._slots.release()

    @property
    def idle(self) -> bool:
        with self._lock:
            return self._in_flight == 0 and self.results.empty()

    def close(self) -> None:
        try:
            self._executor.shutdown(wait=True, cancel_futures=True)
        finally:
            self._stack.close()


class Receiver:
    """The reports of one online run: one run_ut report per step and rank under ``out``."""

    def __init__(self, out: str | Path, intake: Intake, pool: ReplayPool, info: dict[str, Any]) -> None:
        self.out, self.intake, self.pool, self.info = Path(out), intake, pool, info
        self.reports: dict[tuple[int, int], Report] = {}
        self.checked = 0

    def run(self, should_stop: Callable[[], bool] = lambda: False) -> dict[str, Any]:
        """Handle results until every rank stopped and every replay is written (or ``should_stop``); a worker that
        cannot replay at all (:class:`EngineError`: e.g. given a device ``-d`` does not offer) ends the run."""
        while True:
            try:
                rank, step, future = self.pool.results.get(timeout=0.1)
            except queue.Empty:
                if (self.intake.done and self.pool.idle) or should_stop():
                    break
                continue
            self._write(rank, step, future)
        return self.finish()

    def _write(self, rank: int, step: int, future: Future) -> None:
        try:
            row = future.result()
        except EngineError:
            raise
        except Exception as exc:  # a record the replay could not use at all
            self.intake.malformed(f"rank {rank} step {step}", exc)
            return
        if row is None:  # left out by the white/black lists
            self.intake.counts["not listed"] += 1
            return
        report = self.reports.get((rank, step))
        if report is None:
            report = self.reports[(rank, step)] = Report(step_dir(self.out, step, rank))
        report.add(row)
        self.intake.counts["replayed"] += 1
        if row.forward != SKIP or row.backward not in (SKIP, NOT_APPLICABLE):
            self.checked += 1

    def finish(self) -> dict[str, Any]:
        """Every report's summary JSON, and ``online_summary.json`` with the counts of the run."""
        for (rank, step), report in sorted(self.reports.items()):
            report.summary(**self.info, rank=rank, step=step, inputs="online records")
        counts = self.intake.counts
        summary = {
            **self.info,
            "ranks": sorted(self.intake.rank_list),
            "stopped_ranks": sorted(self.intake.stopped_ranks),
            "records": counts["records"],
            "replayed": counts["replayed"],
            "checked": self.checked,
            "malformed": counts["malformed"],
            "not_listed": counts["not listed"],
            "backward_without_forward": counts["backward without forward"],
            "dropped_by_senders": {str(k): v for k, v in sorted(self.intake.dropped_by_sender.items())},
            "reports": [str(step_dir(self.out, step, rank)) for rank, step in sorted(self.reports)],
        }
        self.out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.out / "online_summary.json", json.dumps(summary, indent=2))
        return summary
