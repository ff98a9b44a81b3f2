"""Online transports on loopback: TCP with and without TLS, the shared directory, and their faults."""

from __future__ import annotations

import os
import socket
import ssl
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from msprobe.core.online import wire
from msprobe.core.online.directory import DirLink, DirWatcher
from msprobe.core.online.link import TransportError
from msprobe.core.online.tcp import TcpLink, TcpServer, tls_context
from msprobe.core.online.wire import HEADER, Kind, Limits, Message, WireTensor

if str(Path(__file__).parents[1]) not in sys.path:
    sys.path.insert(0, str(Path(__file__).parents[1]))
from online_tls import make_tls  # noqa: E402
from waiting import until  # noqa: E402

pytestmark = pytest.mark.timeout(60)


class Recorder:
    """An intake that keeps what arrives."""

    def __init__(self, ranks=(0,)) -> None:
        self.ranks = set(ranks)
        self.messages: list[Message] = []
        self.stops: list[tuple[int, dict]] = []
        self.bad: list[str] = []
        self.event = threading.Event()

    def accepts(self, rank: int) -> bool:
        return rank in self.ranks

    def message(self, message: Message, frame: bytes) -> None:
        assert wire.decode(frame).seq == message.seq
        self.messages.append(message)
        self.event.set()

    def stopped(self, rank: int, meta: dict) -> None:
        self.stops.append((rank, meta))
        self.event.set()

    def malformed(self, where: str, error: Exception) -> None:
        self.bad.append(str(error))
        self.event.set()


def _data(seq: int, rank: int = 0, step: int = 0) -> tuple[wire.Header, bytes]:
    array = np.arange(seq + 1, dtype=np.float32)
    frame = wire.encode(Message(Kind.DATA, rank, step, seq, {"name": f"Torch.add.{seq}.forward", "entry": {}},
                                [WireTensor("x", "float32", array.shape, array.tobytes())]))
    return wire.parse_header(frame[:HEADER.size]), frame


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    return make_tls(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def server_factory():
    servers = []

    def make(context=None, ranks=(0,), limits=None):
        recorder = Recorder(ranks)
        server = TcpServer("127.0.0.1", 0, context, limits or Limits(), recorder, timeout=5)
        servers.append(server)
        return server, recorder

    yield make
    for server in servers:
        server.close()


def _send_all(link: TcpLink, count: int) -> None:
    link.open()
    try:
        link.send([_data(seq) for seq in range(1, count + 1)])
        link.stop(0, 0, count + 1, {"sent": count, "dropped": 0})
    finally:
        link.close()


def test_plain_tcp_on_loopback_delivers_in_order_and_stops(server_factory):
    server, recorder = server_factory()
    _send_all(TcpLink("127.0.0.1", server.port, None, rank=0, timeout=5), 5)
    assert [m.seq for m in recorder.messages] == [1, 2, 3, 4, 5]
    assert np.frombuffer(bytes(recorder.messages[2].tensors[0].data), np.float32).tolist() == [0, 1, 2, 3]
    assert recorder.stops == [(0, {"sent": 5, "dropped": 0})]


def test_a_receiver_closed_as_soon_as_every_rank_stopped_still_answers_the_stop(server_factory):
    """The receiver closes its server once every rank has stopped, which it learns before STOP is answered:
    closing must not cut that answer off (the sender would take it for a lost receiver)."""
    server, recorder = server_factory()

    def stopped_then_closed(rank: int, meta: dict) -> None:
        Recorder.stopped(recorder, rank, meta)
        server.close()

    recorder.stopped = stopped_then_closed
    _send_all(TcpLink("127.0.0.1", server.port, None, rank=0, timeout=5), 2)  # raises without STOP_ACK
    assert recorder.stops == [(0, {"sent": 2, "dropped": 0})]


def test_mutual_tls_delivers(server_factory, tls):
    server, recorder = server_factory(tls_context(str(tls["receiver"]), "127.0.0.1", server=True, field="f"))
    context = tls_context(str(tls["sender"]), "127.0.0.1", server=False, field="f")
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2 and context.verify_mode == ssl.CERT_REQUIRED
    _send_all(TcpLink("127.0.0.1", server.port, context, rank=0, timeout=5), 3)
    assert [m.seq for m in recorder.messages] == [1, 2, 3] and recorder.stops


def test_a_certificate_of_another_ca_is_refused(server_factory, tls):
    server, recorder = server_factory(tls_context(str(tls["receiver"]), "127.0.0.1", server=True, field="f"))
    rogue = tls_context(str(tls["rogue"]), "127.0.0.1", server=False, field="f")
    link = TcpLink("127.0.0.1", server.port, rogue, rank=0, timeout=5)
    with pytest.raises(OSError):
        link.open()
        link.send([_data(1)])
    link.close()
    assert recorder.messages == []
    # the receiver goes on serving a sender with the right certificate
    _send_all(TcpLink("127.0.0.1", server.port, tls_context(str(tls["sender"]), "127.0.0.1", server=False,
                                                             field="f"), rank=0, timeout=5), 1)
    assert len(recorder.messages) == 1


def test_plain_client_to_a_tls_receiver_is_refused(server_factory, tls):
    server, recorder = server_factory(tls_context(str(tls["receiver"]), "127.0.0.1", server=True, field="f"))
    with pytest.raises(OSError):
        TcpLink("127.0.0.1", server.port, None, rank=0, timeout=5).open()
    assert recorder.messages == []


def test_tls_settings_are_checked_with_the_field_named(tls, tmp_path):
    with pytest.raises(ValueError, match=r"run_ut.tls_path is empty .* not a loopback"):
        tls_context("", "10.1.2.3", server=True, field="run_ut.tls_path")
    assert tls_context("", "127.0.0.1", server=True, field="run_ut.tls_path") is None
    with pytest.raises(ValueError, match=r"tensor.tls_path .* lacks client.key, client.crt"):
        tls_context(str(tmp_path), "127.0.0.1", server=False, field="tensor.tls_path")
    (tmp_path / "server.key").write_text("not a key")
    (tmp_path / "server.crt").write_text("not a certificate")
    with pytest.raises(ValueError, match="cannot be used"):
        tls_context(str(tmp_path), "127.0.0.1", server=True, field="run_ut.tls_path")


def test_a_rank_outside_rank_list_is_refused(server_factory):
    server, recorder = server_factory(ranks=(0,))
    with pytest.raises(TransportError, match="refused rank 5"):
        TcpLink("127.0.0.1", server.port, None, rank=5, timeout=5).open()
    assert recorder.messages == []


def _raw(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall(wire.control(Kind.HELLO, 0))
    header = wire.parse_header(sock.recv(HEADER.size))
    sock.recv(header.length)
    assert header.kind == Kind.ACK
    return sock


def _closed(sock: socket.socket) -> bool:
    try:
        return sock.recv(100) == b""
    except ConnectionResetError:
        return True


def test_garbage_bytes_end_that_connection_only(server_factory):
    server, recorder = server_factory()
    sock = _raw(server.port)
    sock.sendall(os.urandom(4096))
    assert until(lambda: recorder.bad, 10.0)
    assert _closed(sock)  # the receiver closed this connection
    sock.close()
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw:
        raw.sendall(os.urandom(100))  # garbage instead of HELLO
    assert until(lambda: len(recorder.bad) == 2, 10.0)
    _send_all(TcpLink("127.0.0.1", server.port, None, rank=0, timeout=5), 2)
    assert len(recorder.messages) == 2


def test_oversized_length_field_is_refused_without_reading_on(server_factory):
    server, recorder = server_factory(limits=Limits(max_message=1 << 20))
    sock = _raw(server.port)
    sock.sendall(HEADER.pack(wire.MAGIC, wire.VERSION, int(Kind.DATA), 0, 0, 0, 1, 2**62, 0))
    assert until(lambda: recorder.bad, 10.0)
    assert "exceeds the maximum message size" in recorder.bad[0]
    assert _closed(sock)
    sock.close()


def test_checksum_failure_is_answered_resend_and_the_resent_message_accepted(server_factory):
    server, recorder = server_factory()
    sock = _raw(server.port)
    _, frame = _data(1)
    damaged = bytearray(frame)
    damaged[-1] ^= 0x01
    for attempt, expected in ((bytes(damaged), Kind.RESEND), (frame, Kind.ACK)):
        sock.sendall(attempt)
        header = wire.parse_header(sock.recv(HEADER.size))
        sock.recv(header.length)
        assert header.kind == expected
    sock.close()
    assert [m.seq for m in recorder.messages] == [1]


def test_a_sender_killed_mid_message_leaves_the_receiver_running(server_factory, msprobe_log):
    server, recorder = server_factory()
    sock = _raw(server.port)
    _, frame = _data(7)
    sock.sendall(frame[: len(frame) // 2])
    sock.close()
    assert until(lambda: any("disconnected without STOP" in m for m in msprobe_log.messages), 30.0)
    _send_all(TcpLink("127.0.0.1", server.port, None, rank=0, timeout=5), 1)
    assert [m.seq for m in recorder.messages] == [1] and recorder.stops


def test_stop_without_answer_times_out(tmp_path):
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    accepted = []
    threading.Thread(target=lambda: accepted.append(listener.accept()), daemon=True).start()
    link = TcpLink("127.0.0.1", port, None, rank=0, timeout=0.5)
    with pytest.raises(TimeoutError):  # the link's own timeout ended the wait, not a closed connection
        link.open()  # HELLO is never answered
    link.close()
    for conn, _ in accepted:
        conn.close()
    listener.close()


# ----------------------------------------------------------------------------------------- shared directory
def test_shared_directory_files_are_named_read_in_order_and_deleted(tmp_path):
    link = DirLink(str(tmp_path / "nfs"))
    link.open()
    link.send([_data(seq, rank=0, step=4) for seq in (1, 2, 3)])
    link.send([_data(1, rank=1, step=4)])  # another rank: not ours
    names = sorted(os.listdir(tmp_path / "nfs"))
    assert names == ["r0_s4_q1.msg", "r0_s4_q2.msg", "r0_s4_q3.msg", "r1_s4_q1.msg"]
    (tmp_path / "nfs" / ".r0_s4_q9.msg.123.tmp").write_bytes(b"half a file")
    (tmp_path / "nfs" / "r0_s4_q5.msg").write_bytes(os.urandom(300))  # garbage
    link.stop(0, 4, 6, {"sent": 3, "dropped": 0})
    recorder = Recorder(ranks=(0,))
    watcher = DirWatcher(str(tmp_path / "nfs"), Limits(), recorder)
    try:
        assert until(lambda: recorder.stops, 10.0)
    finally:
        watcher.close()
        watcher._thread.join(30)  # close() waits 2 s at most; the file in hand is deleted after its handling
    assert [m.seq for m in recorder.messages] == [1, 2, 3]
    assert len(recorder.bad) == 1
    assert sorted(os.listdir(tmp_path / "nfs")) == [".r0_s4_q9.msg.123.tmp", "r1_s4_q1.msg"]


def test_shared_directory_refuses_oversized_and_misnamed_files(tmp_path):
    nfs = tmp_path / "nfs"
    nfs.mkdir()
    _, frame = _data(3, rank=0, step=1)
    (nfs / "r0_s1_q1.msg").write_bytes(frame)  # the name says sequence 1, the header 3
    (nfs / "r0_s1_q2.msg").write_bytes(frame + b"x" * 5000)
    recorder = Recorder()
    watcher = DirWatcher(str(nfs), Limits(max_message=2000), recorder)
    try:
        assert until(lambda: len(recorder.bad) == 2, 10.0)
    finally:
        watcher.close()
        watcher._thread.join(30)  # close() waits 2 s at most; the file in hand is deleted after its handling
    assert recorder.messages == [] and os.listdir(nfs) == []


def test_the_link_sends_a_message_again_when_asked_and_keeps_a_window(tmp_path):
    """A receiver that answers RESEND to the first copy of message 2: the link sends its kept copy."""
    listener = socket.create_server(("127.0.0.1", 0))
    got: list[int] = []

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            stream = conn.makefile("rb")
            asked = False
            while True:
                raw = stream.read(HEADER.size)
                if len(raw) < HEADER.size:
                    return
                header = wire.parse_header(raw)
                stream.read(header.length)
                if header.kind == Kind.DATA:
                    got.append(header.seq)
                answer = Kind.STOP_ACK if header.kind == Kind.STOP else Kind.ACK
                if header.seq == 2 and not asked:
                    asked, answer = True, Kind.RESEND
                conn.sendall(wire.control(answer, header.rank, header.step, header.seq))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    link = TcpLink("127.0.0.1", listener.getsockname()[1], None, rank=0, timeout=5, window=2)
    try:
        _send_all(link, 5)
    finally:
        listener.close()
        thread.join(5)
    assert sorted(got) == [1, 2, 2, 3, 4, 5]
