"""How online messages travel: TCP (TLS unless plain loopback) or a shared directory.

Both sides of both modes are here, so the protocol is written once (docs/run_ut_online.md):

- **TCP.** The sender connects, says HELLO with its rank and waits for ACK (REFUSE: the receiver does
  not check this rank). Every DATA and STEP_END message is answered ACK, or RESEND when its payload's
  checksum failed (sent again, at most :data:`RESENDS` times). STOP is answered STOP_ACK; the sender
  waits :attr:`TcpLink.timeout` seconds at most for any answer. A header the receiver cannot trust
  (not ours, too long) ends that connection, never the receiver.
- **TLS.** ``tls_path`` holds ``server.key``/``server.crt`` (receiver) and ``client.key``/``client.crt``
  (sender), TLS 1.2 or later; with a ``ca.crt`` there, both sides verify each other against it (mutual
  authentication). ``tls_path`` empty means plain TCP, allowed only towards or on a loopback address.
- **Shared directory** (``nfs_path``). One file per message, named ``r{rank}_s{step}_q{sequence}.msg``,
  written to a hidden temporary name and renamed into place (a reader never sees half a file); the
  receiver reads each in sequence order per rank, then deletes it. STOP is the file ``r{rank}.stop``.
"""

from __future__ import annotations

import ipaddress
import os
import re
import select
import socket
import ssl
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Protocol

from msprobe.core.services.fileio import write_file
from msprobe.core.services.log import logger
from msprobe.core.online import wire
from msprobe.core.online.wire import Header, Kind, Limits, Message, WireError

RESENDS = 3
CA_FILE = "ca.crt"
_FILE = re.compile(r"r(\d{1,7})_s(\d{1,10})_q(\d{1,20})\.msg")
_STOP_FILE = re.compile(r"r(\d{1,7})\.stop")


class TransportError(OSError):
    """The link to the receiver is unusable (closed, refused, timed out, or it refused this rank)."""


# ---------------------------------------------------------------------------------------------- TLS
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


# ---------------------------------------------------------------------------------------------- sending
class Link(Protocol):
    """Where a sender's messages go; every failure is an OSError (:class:`TransportError` for ours)."""

    def open(self) -> None: ...

    def send(self, frames: list[tuple[Header, bytes]]) -> None:
        """Send messages in order (the TCP link waits for answers only when its window is full)."""

    def stop(self, rank: int, step: int, seq: int, meta: dict) -> None:
        """Everything sent is answered, then STOP is."""

    def close(self) -> None: ...


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


# ---------------------------------------------------------------------------------------------- receiving
class Intake(Protocol):
    """What a receiver does with what arrives (``msprobe.core.online.receiver.Intake``)."""

    def accepts(self, rank: int) -> bool: ...

    def message(self, message: Message, frame: bytes) -> None:
        """A sound DATA or STEP_END message; ``frame`` is its bytes (header + payload)."""

    def stopped(self, rank: int, meta: dict) -> None: ...

    def malformed(self, where: str, error: Exception) -> None: ...


def _handle(intake: Intake, header: Header, frame: bytes, limits: Limits, where: str) -> Message | None:
    """Decode one message whose header passed; a bad payload is reported to ``intake`` and skipped."""
    try:
        message = wire.decode_payload(header, memoryview(frame)[wire.HEADER.size:], limits)
    except wire.ChecksumError:
        raise
    except WireError as exc:
        intake.malformed(where, exc)
        return None
    if message.kind in (Kind.DATA, Kind.STEP_END):
        intake.message(message, frame)
    return message


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
                message = _handle(self.intake, header, frame, self.limits, where)
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
            message = _handle(self.intake, header, frame, self.limits, name)
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
