"""``summary_mode: xor``: a 64-bit XOR checksum of a tensor's bytes (docs/dump_format.md#xor-checksum).

The bytes of the tensor's elements, in row-major order and zero-padded to a multiple of 8, read as
little-endian 64-bit words and XORed together; written where md5 writes its checksum (member ``md5``) as
``0x`` and 16 lowercase hex digits, as msprobe 26.2.0 writes it. It is cheaper than CRC-32 because the
words fold in any order: on an accelerator the framework folds them on the device and leaves one 64-bit
word there (a :class:`PendingChecksum`); a batch of such words comes to the host in one transfer
(:func:`resolve_checksums`), the way statistics do. Host memory is folded at once by numpy
(:func:`host_xor`), which is also the reference the tests check the device fold against.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

WORD_BYTES = 8
_MASK = (1 << 64) - 1


def xor_hex(word: int) -> str:
    """A folded word as dump.json writes it: ``0x`` and 16 hex digits of its unsigned 64-bit value (a
    framework's int64 word may come back negative)."""
    return f"0x{word & _MASK:016x}"


def xor_word(data: Any) -> int:
    """The folded word of a bytes-like object (a contiguous tensor's memory, read in place)."""
    raw = np.frombuffer(data, dtype=np.uint8)
    padding = -raw.size % WORD_BYTES
    if padding:
        raw = np.concatenate((raw, np.zeros(padding, np.uint8)))
    words = raw.view("<u8")
    return int(np.bitwise_xor.reduce(words)) if words.size else 0


def host_xor(data: Any) -> str:
    """The checksum of a bytes-like object, as dump.json writes it."""
    return xor_hex(xor_word(data))


class PendingChecksum:
    """One checksum left on its device: ``word`` is the framework's 0-d 64-bit tensor until its batch is
    fetched, then ``checksum`` is the text (and the word is let go)."""

    __slots__ = ("word", "checksum")

    def __init__(self, word: Any) -> None:
        self.word: Any = word
        self.checksum: str | None = None


Checksum = str | PendingChecksum


def resolve_checksums(
    handles: Sequence[Checksum], transfer: Callable[[list[Any]], list[int | None]]
) -> list[str | None]:
    """The checksums of ``handles`` in order; the unresolved device words go to the host in one
    ``transfer`` (a framework's: device words → Python ints, ``None`` for a tensor that could not be
    read, whose record then has no checksum), each handle once."""
    pending = {id(h): h for h in handles if isinstance(h, PendingChecksum) and h.checksum is None}
    if pending:
        for handle, word in zip(pending.values(), transfer([h.word for h in pending.values()])):
            handle.checksum, handle.word = (None if word is None else xor_hex(word)), None
    return [h if isinstance(h, str) else h.checksum for h in handles]
