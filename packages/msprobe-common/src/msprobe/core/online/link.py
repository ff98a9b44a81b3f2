"""What both transports share: the sender's :class:`Link`, the receiver's :class:`Intake`, and how one
received message is decoded and handed over.

The protocol is written once, in docs/run_ut_online.md#transports; each transport is one module
(:mod:`.tcp`: TCP, TLS unless plain loopback; :mod:`.directory`: a shared directory), so a receiver or a
sender imports only the transport it runs.
"""

from __future__ import annotations

from typing import Protocol

from msprobe.core.online import wire
from msprobe.core.online.wire import Header, Kind, Limits, Message, WireError


class TransportError(OSError):
    """The link to the receiver is unusable (closed, refused, timed out, or it refused this rank)."""


class Link(Protocol):
    """Where a sender's messages go; every failure is an OSError (:class:`TransportError` for ours)."""

    def open(self) -> None: ...

    def send(self, frames: list[tuple[Header, bytes]]) -> None:
        """Send messages in order (the TCP link waits for answers only when its window is full)."""

    def stop(self, rank: int, step: int, seq: int, meta: dict) -> None:
        """Everything sent is answered, then STOP is."""

    def close(self) -> None: ...


class Intake(Protocol):
    """What a receiver does with what arrives (``msprobe.core.online.receiver.Intake``)."""

    def accepts(self, rank: int) -> bool: ...

    def message(self, message: Message, frame: bytes) -> None:
        """A sound DATA or STEP_END message; ``frame`` is its bytes (header + payload)."""

    def stopped(self, rank: int, meta: dict) -> None: ...

    def malformed(self, where: str, error: Exception) -> None: ...


def handle_message(intake: Intake, header: Header, frame: bytes, limits: Limits, where: str) -> Message | None:
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
