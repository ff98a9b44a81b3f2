"""The training side's sender: a bounded queue and one background thread (docs/run_ut_online.md).

Why a thread and a bound: the hooks run inside the user's forward and backward, so they only
snapshot the call's tensors and hand the record over; turning tensors into bytes, framing and sending
happen here, off the training thread. The queue holds at most ``queue_size`` records and
``queue_bytes`` bytes of tensors; a full queue makes :meth:`Sender.offer` wait ``max_wait`` seconds at
most, then the record is dropped and counted. While the receiver is unreachable the sender says so
(:meth:`Sender.accepting` is False, the hooks skip the call without copying anything) and tries to
reconnect once a second. Drops are logged once per step. Nothing here raises into the training.
"""

from __future__ import annotations

import atexit
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from msprobe.core.services.log import logger
from msprobe.core.online import wire
from msprobe.core.online.tcp import Link
from msprobe.core.online.wire import Kind, Limits, Message, WireError, WireTensor

RETRY_SECONDS = 1.0
# tensor snapshot → its bytes on the host (the framework's half: ``FrameworkKit.wire_tensor``)
ToWire = Callable[[str, Any], WireTensor]


@dataclass(frozen=True)
class SenderOptions:
    queue_size: int = 256
    queue_bytes: int = 1 << 30
    max_wait: float = 0.0  # seconds a hook may wait for room in a full queue
    limits: Limits = Limits()
    stop_timeout: float = 30.0  # seconds finish() waits for the queue to drain and the STOP answer


@dataclass
class Outgoing:
    """A record waiting to be sent: its description and the snapshots of its tensors."""

    step: int
    meta: dict[str, Any]
    tensors: list[tuple[str, Any]] = field(default_factory=list)
    nbytes: int = 0


@dataclass
class _StepEnd:
    step: int
    dropped: int  # dropped on the training thread during the step


_STOP = object()


class Sender:
    """Sends :class:`Outgoing` records of one rank over ``link`` from a background thread."""

    def __init__(self, link: Link, rank: int, to_wire: ToWire, options: SenderOptions = SenderOptions()) -> None:
        self.link, self.rank, self.to_wire, self.options = link, rank, to_wire, options
        self._items: deque = deque()
        self._cond = threading.Condition()
        self._queued_records = 0
        self._queued_bytes = 0
        self._dropped_here = 0  # training thread: since the last step end
        self._dropped_there = 0  # sending thread: since the last step end
        self.sent = 0
        self.dropped = 0
        self._seq = 0
        self._connected = False
        self._down_until = 0.0
        self._reported: set[str] = set()
        self._abandon = False
        self.closed = False
        self._thread = threading.Thread(target=self._run, name=f"msprobe-online-sender-{rank}", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    # ------------------------------------------------------------------ training thread
    def accepting(self) -> bool:
        """False while the receiver is known to be unreachable, or the queue is full and the hooks may not
        wait for room: the hooks then copy nothing (the record is dropped, :meth:`drop`)."""
        if self.options.max_wait <= 0 and self._queued_records >= self.options.queue_size:
            return False
        return not self.closed and time.monotonic() >= self._down_until

    def drop(self) -> None:
        self._dropped_here += 1

    def offer(self, item: Outgoing) -> bool:
        """Queue ``item``; False (dropped, counted) when there is no room within ``max_wait``."""
        opts = self.options
        with self._cond:
            def room() -> bool:
                return self._queued_records < opts.queue_size and (
                    self._queued_bytes + item.nbytes <= opts.queue_bytes or not self._queued_records)

            if self.closed or not (room() or opts.max_wait > 0 and self._cond.wait_for(room, opts.max_wait)):
                self._dropped_here += 1
                return False
            self._items.append(item)
            self._queued_records += 1
            self._queued_bytes += item.nbytes
            self._cond.notify_all()
        return True

    def step_end(self, step: int) -> None:
        """The training finished ``step``: the receiver gets STEP_END; drops of the step are logged once."""
        dropped, self._dropped_here = self._dropped_here, 0
        self._control(_StepEnd(step, dropped))

    def close(self) -> None:
        """Send what is queued and STOP, waiting ``stop_timeout`` seconds at most; idempotent."""
        if self.closed:
            return
        atexit.unregister(self.close)
        self._control(_STOP)
        with self._cond:
            self.closed = True
        self._thread.join(self.options.stop_timeout)
        if self._thread.is_alive():
            self._abandon = True
            self.link.close()  # unblocks a send waiting on a silent receiver
            self._thread.join(2.0)
            logger.warning("online run_ut: the receiver did not take the last records within %.0f s; gave up",
                           self.options.stop_timeout)

    def _control(self, item: object) -> None:
        with self._cond:
            if self.closed:
                return
            self._items.append(item)
            self._cond.notify_all()

    # ------------------------------------------------------------------ sending thread
    def _take_all(self) -> list:
        """Everything queued now (waiting for the first item): sent in one batch, few system calls."""
        with self._cond:
            self._cond.wait_for(lambda: bool(self._items))
            items = list(self._items)
            self._items.clear()
            self._queued_records = self._queued_bytes = 0
            self._cond.notify_all()
            return items

    def _run(self) -> None:
        while True:
            batch: list[tuple[wire.Header, bytes]] = []
            for item in self._take_all():
                if item is _STOP:
                    self._transmit(batch)
                    self._stop()
                    return
                if isinstance(item, _StepEnd):
                    # the step's records go first, so that a link failing under them counts them in this
                    # step's end (framed below); framed before them, a step's end caught up in one batch with
                    # later steps named none of their drops (only the final summary counted them)
                    self._transmit(batch)
                    batch = []
                try:
                    frame = self._step_end(item) if isinstance(item, _StepEnd) else self._frame(item)
                except Exception as exc:  # never let the thread die on a record: count it, go on
                    self._dropped_there += 1
                    self._report_once(type(exc).__name__, f"online run_ut: a record could not be sent ({exc})")
                    continue
                if frame is not None:
                    batch.append((wire.parse_header(frame[:wire.HEADER.size], self.options.limits), frame))
            self._transmit(batch)

    def _report_once(self, key: str, message: str) -> None:
        if key not in self._reported:
            self._reported.add(key)
            logger.warning(message)

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _ensure_link(self) -> bool:
        if self._connected:
            return True
        if self._abandon or time.monotonic() < self._down_until:
            return False
        try:
            self.link.open()
        except OSError as exc:
            self._link_down(exc)
            return False
        self._connected = True
        return True

    def _link_down(self, exc: BaseException) -> None:
        self._connected = False
        self.link.close()
        self._down_until = time.monotonic() + RETRY_SECONDS
        self._report_once(f"down:{type(exc).__name__}", f"online run_ut: the receiver cannot be reached ({exc}); "
                          "records are dropped while it is away (retrying every second)")

    def _transmit(self, batch: list[tuple[wire.Header, bytes]]) -> None:
        """Send a batch; when the link fails, its records count as dropped."""
        if not batch:
            return
        records = sum(1 for header, _ in batch if header.kind == Kind.DATA)
        if self._abandon or not self._ensure_link():
            self._dropped_there += records
            return
        try:
            self.link.send(batch)
        except OSError as exc:
            self._link_down(exc)
            self._dropped_there += records
            return
        self.sent += records

    def _frame(self, item: Outgoing) -> bytes | None:
        if self._abandon:
            self._dropped_there += 1
            return None
        tensors = [self.to_wire(name, snapshot) for name, snapshot in item.tensors]
        try:
            # the hooks left the tensor descriptions as records (cheaper there); the wire renders them
            return wire.encode(Message(Kind.DATA, self.rank, item.step, self._next_seq(), item.meta, tensors),
                               self.options.limits)
        except WireError as exc:  # larger than the maximum message size
            self._dropped_there += 1
            self._report_once("too-large", f"online run_ut: {item.meta.get('name')} not sent: {exc}")
            return None

    def _step_end(self, item: _StepEnd) -> bytes:
        dropped, self._dropped_there = item.dropped + self._dropped_there, 0
        self.dropped += dropped
        if dropped:
            logger.warning("online run_ut: step %d: %d records dropped (the queue was full or the receiver away)",
                           item.step, dropped)
        return wire.encode(Message(Kind.STEP_END, self.rank, item.step, self._next_seq(), {"dropped": dropped}))

    def _stop(self) -> None:
        self.dropped += self._dropped_there + self._dropped_here
        self._dropped_there = self._dropped_here = 0
        self._down_until = 0.0  # one last attempt even right after a failure
        if not self._abandon and self._ensure_link():
            try:
                self.link.stop(self.rank, 0, self._next_seq(), {"sent": self.sent, "dropped": self.dropped})
            except OSError as exc:
                self._report_once("stop", f"online run_ut: STOP was not acknowledged ({exc})")
        self.link.close()
        logger.info("online run_ut: rank %d sent %d records, dropped %d", self.rank, self.sent, self.dropped)
