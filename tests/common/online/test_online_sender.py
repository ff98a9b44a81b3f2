"""The online sender (bounded queue, background thread, drops counted and logged once per step) and the
receiver's intake (rank filter, forward/backward pairing), without a framework."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from msprobe.core.online import sender as sender_module
from msprobe.core.online import wire
from msprobe.core.online.receiver import Intake
from msprobe.core.online.sender import Outgoing, Sender, SenderOptions
from msprobe.core.online.wire import Kind, Message, WireTensor

if str(Path(__file__).parents[1]) not in sys.path:
    sys.path.insert(0, str(Path(__file__).parents[1]))
from waiting import until  # noqa: E402

pytestmark = pytest.mark.timeout(60)


def to_wire(name: str, array: np.ndarray) -> WireTensor:
    return WireTensor(name, str(array.dtype), array.shape, array.tobytes())


class FakeLink:
    """A link that keeps what it is sent; ``gated``: each send waits until :attr:`gate` is set (a slow
    receiver, without a clock), ``refuse`` to connect, ``hang`` forever."""

    def __init__(self, gated: bool = False, refuse: bool = False, hang: bool = False) -> None:
        self.refuse, self.hang = refuse, hang
        self.gate = threading.Event()
        if not gated:
            self.gate.set()
        self.frames: list[Message] = []
        self.stops: list[dict] = []
        self.opened = 0
        self._released = threading.Event()

    def open(self) -> None:
        self.opened += 1
        if self.refuse:
            raise ConnectionRefusedError("nobody listens")

    def send(self, frames) -> None:
        if self.hang and not self._released.wait(30):
            raise TimeoutError
        if self._released.is_set() and self.hang:
            raise OSError("closed")
        self.gate.wait(30)
        for _header, frame in frames:
            self.frames.append(wire.decode(frame))

    def stop(self, rank, step, seq, meta) -> None:
        self.stops.append(meta)

    def close(self) -> None:
        self._released.set()


def _record(step: int, i: int, size: int = 4) -> Outgoing:
    item = Outgoing(step, {"name": f"Torch.add.{i}.forward", "entry": {}})
    item.tensors.append((f"t{i}", np.full(size, i, dtype=np.float32)))
    item.nbytes = size * 4
    return item


def test_records_arrive_in_order_with_their_bytes_and_stop_counts():
    link = FakeLink()
    sender = Sender(link, 3, to_wire, SenderOptions(queue_size=100))
    for i in range(5):
        assert sender.offer(_record(0, i))
    sender.step_end(0)
    sender.close()
    data = [m for m in link.frames if m.kind == Kind.DATA]
    assert [m.meta["name"] for m in data] == [f"Torch.add.{i}.forward" for i in range(5)]
    assert [m.seq for m in link.frames] == [1, 2, 3, 4, 5, 6]  # the STEP_END is the sixth
    assert link.frames[-1].kind == Kind.STEP_END and link.frames[-1].meta == {"dropped": 0}
    assert np.frombuffer(bytes(data[4].tensors[0].data), np.float32).tolist() == [4.0] * 4
    assert all(m.rank == 3 for m in link.frames)
    assert link.stops == [{"sent": 5, "dropped": 0}]


def test_a_full_queue_never_holds_the_training_until_there_is_room(msprobe_log):
    """The receiver takes nothing until the gate opens: every offer still returns (a full queue drops after
    ``max_wait``, it does not wait for room), so the loop below ends while the link is blocked."""
    link = FakeLink(gated=True)
    sender = Sender(link, 0, to_wire, SenderOptions(queue_size=2, max_wait=0.01))
    accepted = sum(sender.offer(_record(0, i)) for i in range(20))
    assert not link.frames  # all 20 offers returned with the receiver still blocked
    assert accepted <= 4  # at most one batch of 2 being sent and 2 queued
    link.gate.set()
    sender.step_end(0)
    sender.close()
    dropped = 20 - accepted
    assert sender.dropped == dropped and link.stops == [{"sent": accepted, "dropped": dropped}]
    lines = [m for m in msprobe_log.messages if "records dropped" in m]
    assert lines == [f"online run_ut: step 0: {dropped} records dropped (the queue was full or the receiver away)"]


def test_the_byte_bound_drops_records_too():
    link = FakeLink(gated=True)
    sender = Sender(link, 0, to_wire, SenderOptions(queue_size=100, queue_bytes=1000))
    results = [sender.offer(_record(0, i, size=100)) for i in range(10)]  # 400 bytes each: 2 fit
    link.gate.set()
    sender.close()
    assert results.count(False) >= 6  # at most 2 being sent and 2 queued


def test_an_absent_receiver_drops_without_copying_and_logs_once(msprobe_log, monkeypatch):
    monkeypatch.setattr(sender_module, "RETRY_SECONDS", 3600.0)  # away until close(): no retry window to miss
    link = FakeLink(refuse=True)
    sender = Sender(link, 0, to_wire, SenderOptions(queue_size=10))
    assert sender.offer(_record(0, 0))
    assert until(lambda: not sender.accepting(), 30.0)  # the failed connection was noticed
    sender.drop()  # what the hooks do while the receiver is away: nothing copied
    sender.step_end(0)
    sender.close()
    assert not sender._thread.is_alive() and not any("gave up" in m for m in msprobe_log.messages)  # no wait
    assert sender.dropped == 2 and sender.sent == 0
    assert sum("cannot be reached" in m for m in msprobe_log.messages) == 1
    assert any("step 0: 2 records dropped" in m for m in msprobe_log.messages)


def test_close_gives_up_on_a_silent_receiver_after_the_bound(msprobe_log):
    link = FakeLink(hang=True)  # would hang 30 s: the thread ends only because close() gave up and closed it
    sender = Sender(link, 0, to_wire, SenderOptions(queue_size=10, stop_timeout=0.5))
    for i in range(3):
        sender.offer(_record(0, i))
    sender.close()
    assert any("gave up" in m for m in msprobe_log.messages)
    sender._thread.join(30)
    assert not sender._thread.is_alive() and link._released.is_set()


def test_offer_after_close_is_a_counted_drop():
    sender = Sender(FakeLink(), 0, to_wire)
    sender.close()
    assert not sender.offer(_record(0, 0)) and not sender.accepting()


def test_a_record_larger_than_the_maximum_is_dropped_and_the_next_one_sent(msprobe_log):
    link = FakeLink()
    sender = Sender(link, 0, to_wire, SenderOptions(limits=wire.Limits(max_message=2000)))
    sender.offer(_record(0, 0, size=1000))
    sender.offer(_record(0, 1, size=10))
    sender.close()
    assert [m.meta["name"] for m in link.frames if m.kind == Kind.DATA] == ["Torch.add.1.forward"]
    assert sender.dropped == 1 and any("not sent" in m for m in msprobe_log.messages)


# ----------------------------------------------------------------------------------------------- the intake
def _message(kind, rank, step, seq, **meta) -> tuple[Message, bytes]:
    message = Message(kind, rank, step, seq, meta)
    return message, wire.encode(message)


def test_intake_pairs_forward_and_backward_and_flushes_at_step_end():
    sent = []
    intake = Intake((0, 1), lambda rank, step, fwd, bwd: sent.append((rank, step, wire.decode(fwd).seq,
                                                                        bwd and wire.decode(bwd).seq)))
    assert intake.accepts(1) and not intake.accepts(2)
    intake.message(*_message(Kind.DATA, 0, 0, 1, name="Torch.add.0.forward", entry={}, backward=True))
    intake.message(*_message(Kind.DATA, 0, 0, 2, name="Torch.mul.0.forward", entry={}, backward=False))
    intake.message(*_message(Kind.DATA, 0, 0, 3, name="Torch.sub.0.forward", entry={}, backward=True))
    intake.message(*_message(Kind.DATA, 0, 0, 4, name="Torch.add.0.backward", entry={}))
    intake.message(*_message(Kind.DATA, 0, 0, 5, name="Torch.div.0.backward", entry={}))  # no forward
    assert sent == [(0, 0, 2, None), (0, 0, 1, 4)]
    intake.message(*_message(Kind.STEP_END, 0, 0, 6, dropped=3))
    assert sent[-1] == (0, 0, 3, None)  # its backward can no longer come
    intake.message(*_message(Kind.DATA, 0, 0, 7, name="no direction", entry={}))
    assert intake.counts["malformed"] == 1 and intake.counts["backward without forward"] == 1
    assert not intake.done
    intake.stopped(0, {"sent": 5, "dropped": 3})
    intake.stopped(1, {"sent": 0, "dropped": 0})
    assert intake.done and intake.dropped_by_sender == {0: 3, 1: 0}
