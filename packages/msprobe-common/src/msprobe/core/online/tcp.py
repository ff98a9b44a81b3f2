"""The TCP transport (TLS unless plain loopback): the sender's :class:`TcpLink`, the receiver's :class:`TcpServer`.

Why both sides live here: the HELLO/ACK/RESEND/STOP exchange (docs/run_ut_online.md#transports) is one
protocol, written once. ``tls_path`` empty means plain TCP, allowed only towards or on a loopback address.
"""

from __future__ import annotations

import ipaddress
import select
import socket
import ssl
import threading
from collections import OrderedDict
from pathlib import Path

from msprobe.core.online import wire
from msprobe.core.online.link import Intake, TransportError, handle_message
from msprobe.core.online.wire import Header, Kind, Limits, Message, WireError
from msprobe.core.services.log import logger

RESENDS = 3
CA_FILE = "ca.crt"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _files(tls_path: str, names: tuple[str, ...], field: str) -> list[Path]:
    folder = Path(tls_path)
    missing = [n for n in names if not (folder / n).is_file()]
    if missing:
        raise ValueError(f"{field} {tls_path!r} lacks {', '.join(missing)} (TLS needs {', '.join(names)}; "
                         f"an empty {field} means plain TCP, allowed only on a loopback host)")
    return [folder / n for n in names]


def tls_context(tls_path: str, host: str, *, server: bool, field: str) -> ssl.SSLContext | None:
    """The TLS context of one side, or None for plain TCP (``tls_path`` empty and ``host`` loopback).
    A ValueError naming ``field`` when the files are missing or unusable."""
    if not tls_path:
        if not is_loopback(host):
            raise ValueError(f"{field} is empty (plain TCP) but host {host!r} is not a loopback address: give "
                             f"{field} a directory with the TLS keys and certificates")
        return None
    key, cert = _files(tls_path, ("server.key", "server.crt") if server else ("client.key", "client.crt"), field)
    ca = Path(tls_path) / CA_FILE
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if server else ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
        if ca.is_file():
            context.load_verify_locations(ca)
            context.verify_mode = ssl.CERT_REQUIRED
        elif not server:  # no CA to check the receiver against: encrypted, not authenticated
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
    except (ssl.SSLError, OSError) as exc:
        raise ValueError(f"{field} {tls_path!r}: the keys or certificates cannot be used ({exc})") from None
    return context


class _Answers:
    """The receiver's answers, read in large chunks and parsed from a buffer (one system call for many)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = bytearray()

    def _fill(self) -> None:
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            raise TransportError("the receiver closed the connection")
        self.buffer += chunk

    def ready(self) -> bool:
        """True when an answer can be read without waiting."""
        if len(self.buffer) >= wire.HEADER.size:
            return True
        pending = getattr(self.sock, "pending", None)
        readable, _, _ = select.select([self.sock], [], [], 0)
        return bool(readable) or bool(pending and pending())

    def next(self) -> Message:
        while len(self.buffer) < wire.HEADER.size:
            self._fill()
        header = wire.parse_header(bytes(self.buffer[:wire.HEADER.size]), _ANSWER_LIMITS)
        while len(self.buffer) < wire.HEADER.size + header.length:
            self._fill()
        end = wire.HEADER.size + header.length
        message = wire.decode_payload(header, bytes(self.buffer[wire.HEADER.size:end]), _ANSWER_LIMITS)
        del self.buffer[:end]
        return message


_ANSWER_LIMITS = Limits(max_message=1 << 16)


class TcpLink:
    """The sender's TCP connection (``context`` None: plain TCP).

    Why a window: waiting for each answer before the next message would cost a round trip and, in a
    Python thread next to a busy training thread, a wait for the interpreter lock at every system call.
    So up to :attr:`window` messages are sent unanswered, several per system call, and answers are read
    in bulk; a RESEND answer sends the kept copy of that message again.
    """

    def __init__(self, host: str, port: int, context: ssl.SSLContext | None, rank: int,
                 timeout: float = 30.0, window: int = 256) -> None:
        self.host, self.port, self.context, self.rank, self.timeout = host, port, context, rank, timeout
        self.window = window
        self._sock: socket.socket | None = None
        self._answers: _Answers | None = None
        self._unanswered: OrderedDict[int, tuple[bytes, int]] = OrderedDict()  # seq → (frame, resends)

    def open(self) -> None:
        self.close()
        raw = socket.create_connection((self.host, self.port), timeout=self.timeout)
        try:
            sock = self.context.wrap_socket(raw, server_hostname=self.host) if self.context else raw
        except (ssl.SSLError, OSError):
            raw.close()
            raise
        self._sock, self._answers = sock, _Answers(sock)
        sock.sendall(wire.control(Kind.HELLO, self.rank, protocol=wire.VERSION))
        reply = self._answers.next()
        if reply.kind == Kind.REFUSE:
            self.close()
            raise TransportError(f"the receiver refused rank {self.rank}: {reply.meta.get('reason', '')}")
        if reply.kind != Kind.ACK:
            raise TransportError(f"unexpected answer {reply.kind.name} to HELLO")

    def _connected(self) -> tuple[socket.socket, _Answers]:
        if self._sock is None or self._answers is None:
            raise TransportError("not connected")
        return self._sock, self._answers

    def send(self, frames: list[tuple[Header, bytes]]) -> None:
        sock, answers = self._connected()
        for start in range(0, len(frames), self.window):
            batch = frames[start:start + self.window]
            sock.sendall(b"".join(frame for _, frame in batch))
            for header, frame in batch:
                self._unanswered[header.seq] = (frame, 0)
            self._collect(answers, keep=self.window)

    def _collect(self, answers: _Answers, keep: int) -> None:
        """Read answers: all those already there, and more until at most ``keep`` are outstanding."""
        while self._unanswered and (len(self._unanswered) > keep or answers.ready()):
            reply = answers.next()
            entry = self._unanswered.get(reply.seq)
            if entry is None:
                raise TransportError(f"answer {reply.kind.name} to a message never sent ({reply.seq})")
            if reply.kind == Kind.ACK:
                del self._unanswered[reply.seq]
            elif reply.kind == Kind.RESEND and entry[1] < RESENDS:
                self._unanswered[reply.seq] = (entry[0], entry[1] + 1)
                self._connected()[0].sendall(entry[0])
            elif reply.kind == Kind.RESEND:
                raise TransportError(f"message {reply.seq} failed its checksum {1 + RESENDS} times")
            else:
                raise TransportError(f"unexpected answer {reply.kind.name} to message {reply.seq}")

    def stop(self, rank: int, step: int, seq: int, meta: dict) -> None:
        sock, answers = self._connected()
        self._collect(answers, keep=0)
        sock.sendall(wire.control(Kind.STOP, rank, step, seq, **meta))
        reply = answers.next()
        if reply.kind != Kind.STOP_ACK:
            raise TransportError(f"unexpected answer {reply.kind.name} to STOP")

    def close(self) -> None:
        sock, self._sock, self._answers = self._sock, None, None
        self._unanswered.clear()
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()


class TcpServer:
    """The receiver's listening socket: one thread per connection, each message handed to ``intake``."""

    def __init__(self, host: str, port: int, context: ssl.SSLContext | None, limits: Limits, intake: Intake,
                 timeout: float = 30.0) -> None:
        self.context, self.limits, self.intake, self.timeout = context, limits, intake, timeout
        self._listener = socket.create_server((host, port), reuse_port=False)
        self._listener.settimeout(0.2)
        self.port = self._listener.getsockname()[1]
        self._closed = threading.Event()
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, name="msprobe-online-accept", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                raw, address = self._listener.accept()
            except (TimeoutError, socket.timeout):
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(raw, f"{address[0]}:{address[1]}"), daemon=True,
                             name="msprobe-online-conn").start()

    def _serve(self, raw: socket.socket, where: str) -> None:
        raw.settimeout(self.timeout)
        try:
            sock = self.context.wrap_socket(raw, server_side=True) if self.context else raw
        except (ssl.SSLError, OSError) as exc:
            logger.warning("online run_ut: TLS handshake with %s failed (%s); connection refused", where, exc)
            raw.close()
            return
        with self._lock:
            self._conns.add(sock)
        try:
            self._converse(sock, where)
        except OSError as exc:  # lost before it said HELLO (once it has, _converse logs the loss)
            if not self._closed.is_set():
                logger.warning("online run_ut: connection from %s closed before HELLO (%s)", where, exc)
        except WireError as exc:
            self.intake.malformed(where, exc)
        finally:
            with self._lock:
                self._conns.discard(sock)
            sock.close()

    def _converse(self, sock: socket.socket, where: str) -> None:
        def reply(kind: Kind, header: Header, **meta: object) -> None:
            sock.sendall(wire.control(kind, header.rank, header.step, header.seq, **meta))

        stream = sock.makefile("rb", buffering=1 << 16)  # many messages per system call

        def read_exact(n: int) -> bytes:
            data = stream.read(n)
            if len(data) != n:
                raise TransportError("the connection was closed")
            return data

        header, payload = wire.read_message(read_exact, self.limits)
        if header.kind != Kind.HELLO:
            raise WireError(f"first message from {where} is {header.kind.name}, not HELLO")
        if not self.intake.accepts(header.rank):
            logger.warning("online run_ut: refused rank %d from %s (not in rank_list)", header.rank, where)
            reply(Kind.REFUSE, header, reason="rank not in rank_list")
            return
        reply(Kind.ACK, header)
        sock.settimeout(None)  # HELLO had to come in time; later a sender may be idle as long as it likes
        rank = header.rank
        while not self._closed.is_set():
            try:
                raw_header = read_exact(wire.HEADER.size)
                header = wire.parse_header(raw_header, self.limits)
                if header.rank != rank:
                    raise WireError(f"rank {header.rank} in a connection opened as rank {rank}")
                frame = raw_header + read_exact(header.length)
            except OSError as exc:  # TransportError (end of stream), a reset, a TLS connection cut short
                if not self._closed.is_set():
                    logger.warning("online run_ut: rank %d (%s) disconnected without STOP (%s)", rank, where, exc)
                return
            try:
                message = handle_message(self.intake, header, frame, self.limits, where)
            except wire.ChecksumError as exc:
                logger.warning("online run_ut: %s; asking %s to send it again", exc, where)
                reply(Kind.RESEND, header)
                continue
            if message is not None and message.kind == Kind.STOP:
                with self._lock:  # nothing is left to read: a close() once every rank stopped leaves the answer be
                    self._conns.discard(sock)
                self.intake.stopped(rank, message.meta)
                reply(Kind.STOP_ACK, header)
                return
            reply(Kind.ACK, header)

    def close(self) -> None:
        self._closed.set()
        self._listener.close()
        with self._lock:
            conns = list(self._conns)
        for sock in conns:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._thread.join(timeout=2)
