"""The online pre-check's message format: safe to read from any peer (docs/run_ut_online.md).

A message is a fixed 36-byte header followed by ``length`` bytes of payload::

    magic "MSPO" | version u16 | kind u8 | flags u8 | rank u32 | step u32 | sequence u64 | length u64 | CRC-32 u32

all big-endian; the CRC-32 covers the payload. The payload is a u32 JSON length, a UTF-8 JSON object
``{"meta": {...}, "tensors": [{"name", "dtype", "shape"}, ...]}`` and then the raw bytes of each
tensor, in order, C-contiguous, little-endian as the hosts store them.

Why no pickle: whatever a peer sends is only ever parsed as JSON and copied as bytes, so no message
can run code on the receiver. Why every bound is checked first: the header's ``length`` is compared
with :attr:`Limits.max_message` before a byte of payload is read, the JSON length with the payload,
each tensor's byte count (``prod(shape) * itemsize``) with what is left — so a garbage or hostile
header costs nothing but its 36 bytes.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from msprobe.core.dump.encode import render

MAGIC = b"MSPO"
VERSION = 1
HEADER = struct.Struct(">4sHBBIIQQI")
_JSON_LEN = struct.Struct(">I")
MAX_RANK = 2**20
MAX_STEP = 2**31

# Element sizes of the dtypes a tensor may have on the wire (names as torch and numpy print them).
DTYPE_SIZES = {
    "float64": 8, "float32": 4, "float16": 2, "bfloat16": 2,
    "int64": 8, "int32": 4, "int16": 2, "int8": 1, "uint8": 1, "bool": 1,
    "complex64": 8, "complex128": 16,
}


class Kind(IntEnum):
    """What a message is. A sender says HELLO, sends DATA and STEP_END, and ends with STOP; the TCP
    receiver answers each with ACK (or RESEND after a checksum failure, REFUSE for a rank it does not
    accept) and STOP with STOP_ACK."""

    HELLO = 1
    DATA = 2
    STEP_END = 3
    STOP = 4
    ACK = 5
    RESEND = 6
    REFUSE = 7
    STOP_ACK = 8


class WireError(ValueError):
    """A message that is not ours or breaks a bound; the stream it came from cannot be trusted further."""


class ChecksumError(WireError):
    """The payload arrived, but not as sent (the header was sound: the sender may send it again)."""


@dataclass(frozen=True)
class Limits:
    """Bounds every reader checks before allocating (the defaults suit one API call of a large model)."""

    max_message: int = 1 << 30  # bytes of payload
    max_tensors: int = 4096
    max_json: int = 16 << 20
    max_ndim: int = 32

    @classmethod
    def from_megabytes(cls, megabytes: int) -> Limits:
        return cls(max_message=megabytes << 20)


@dataclass(frozen=True)
class Header:
    kind: Kind
    rank: int
    step: int
    seq: int
    length: int
    checksum: int


@dataclass
class WireTensor:
    """One tensor: its name in the record's description (``data_name``), dtype, shape and bytes."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    data: bytes | memoryview


@dataclass
class Message:
    kind: Kind
    rank: int = 0
    step: int = 0
    seq: int = 0
    meta: dict[str, Any] = field(default_factory=dict)
    tensors: list[WireTensor] = field(default_factory=list)


def tensor_nbytes(dtype: str, shape: tuple[int, ...] | list[int]) -> int:
    """Bytes of a tensor; a :class:`WireError` for an unknown dtype or a bad shape."""
    size = DTYPE_SIZES.get(dtype)
    if size is None:
        raise WireError(f"tensor dtype {dtype!r} is not one of {', '.join(DTYPE_SIZES)}")
    count = 1
    for n in shape:
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise WireError(f"tensor shape {list(shape)!r} has an element that is not an integer >= 0")
        count *= n
    return count * size


# ---------------------------------------------------------------------------------------------- writing
def encode(message: Message, limits: Limits = Limits()) -> bytes:
    """The bytes of ``message`` (header + payload); a :class:`WireError` when it breaks ``limits``."""
    if len(message.tensors) > limits.max_tensors:
        raise WireError(f"{len(message.tensors)} tensors in one message; at most {limits.max_tensors}")
    described = []
    for t in message.tensors:
        expected = tensor_nbytes(t.dtype, t.shape)
        if len(t.data) != expected:
            raise WireError(f"tensor {t.name!r}: {len(t.data)} bytes for {t.dtype} {list(t.shape)} ({expected})")
        described.append({"name": t.name, "dtype": t.dtype, "shape": list(t.shape)})
    # the meta may hold a dump entry's tensor records: rendered by the one dump.json renderer
    text = f'{{"meta":{render(message.meta)},"tensors":{json.dumps(described, separators=(",", ":"))}}}'.encode()
    if len(text) > limits.max_json:
        raise WireError(f"description of {len(text)} bytes; at most {limits.max_json}")
    parts = [_JSON_LEN.pack(len(text)), text, *(t.data for t in message.tensors)]
    payload = b"".join(parts)
    if len(payload) > limits.max_message:
        raise WireError(f"message of {len(payload)} bytes; at most {limits.max_message} (max message size)")
    return header_bytes(message.kind, message.rank, message.step, message.seq, payload) + payload


def header_bytes(kind: Kind, rank: int, step: int, seq: int, payload: bytes) -> bytes:
    return HEADER.pack(MAGIC, VERSION, int(kind), 0, rank, step, seq, len(payload), zlib.crc32(payload))


def control(kind: Kind, rank: int = 0, step: int = 0, seq: int = 0, **meta: Any) -> bytes:
    """A message without tensors (HELLO, STEP_END, STOP, ACK...)."""
    return encode(Message(kind, rank, step, seq, meta))


# ---------------------------------------------------------------------------------------------- reading
def parse_header(data: bytes, limits: Limits = Limits()) -> Header:
    """The header of a message, checked: ours, this version, a known kind, sane rank/step, a payload
    no larger than ``limits.max_message``."""
    if len(data) != HEADER.size:
        raise WireError(f"a header is {HEADER.size} bytes, got {len(data)}")
    magic, version, kind, _flags, rank, step, seq, length, checksum = HEADER.unpack(data)
    if magic != MAGIC:
        raise WireError(f"not an msprobe online message (magic {magic!r})")
    if version != VERSION:
        raise WireError(f"message version {version}; this msprobe reads version {VERSION}")
    try:
        kind = Kind(kind)
    except ValueError:
        raise WireError(f"unknown message kind {kind}") from None
    if rank >= MAX_RANK or step >= MAX_STEP:
        raise WireError(f"rank {rank} / step {step} out of range")
    if length > limits.max_message:
        raise WireError(f"length field {length} exceeds the maximum message size {limits.max_message}")
    if length < _JSON_LEN.size:
        raise WireError(f"length field {length} is shorter than any payload")
    return Header(kind, rank, step, seq, length, checksum)


def decode_payload(header: Header, payload: bytes | memoryview, limits: Limits = Limits()) -> Message:
    """The message of a checked header and its payload. Tensor bytes are views into ``payload``."""
    if len(payload) != header.length:
        raise WireError(f"payload of {len(payload)} bytes, header says {header.length}")
    if zlib.crc32(payload) != header.checksum:
        raise ChecksumError(f"checksum mismatch in message {header.seq} of rank {header.rank}")
    view = memoryview(payload)
    (json_len,) = _JSON_LEN.unpack_from(view)
    if json_len > limits.max_json or json_len > len(view) - _JSON_LEN.size:
        raise WireError(f"description length {json_len} exceeds the payload or the limit {limits.max_json}")
    start = _JSON_LEN.size + json_len
    try:
        body = json.loads(bytes(view[_JSON_LEN.size:start]).decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise WireError(f"description is not valid JSON: {exc}") from None
    if not isinstance(body, dict) or not isinstance(body.get("meta"), dict) or not isinstance(
            body.get("tensors"), list):
        raise WireError("description is not {'meta': {...}, 'tensors': [...]}")
    described = body["tensors"]
    if len(described) > limits.max_tensors:
        raise WireError(f"{len(described)} tensors in one message; at most {limits.max_tensors}")
    tensors, offset = [], start
    for item in described:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not isinstance(
                item.get("shape"), list) or len(item["shape"]) > limits.max_ndim:
            raise WireError(f"tensor description {str(item)[:200]!r} is not name/dtype/shape")
        shape = tuple(item["shape"])
        nbytes = tensor_nbytes(str(item.get("dtype")), shape)
        if nbytes > len(view) - offset:
            raise WireError(f"tensor {item['name']!r} needs {nbytes} bytes, {len(view) - offset} are left")
        tensors.append(WireTensor(item["name"], item["dtype"], shape, view[offset:offset + nbytes]))
        offset += nbytes
    if offset != len(view):
        raise WireError(f"{len(view) - offset} bytes after the last tensor")
    return Message(header.kind, header.rank, header.step, header.seq, body["meta"], tensors)


def decode(data: bytes | memoryview, limits: Limits = Limits()) -> Message:
    """One whole message (a shared-directory file)."""
    if len(data) < HEADER.size:
        raise WireError(f"{len(data)} bytes: shorter than a header")
    view = memoryview(data)
    header = parse_header(bytes(view[:HEADER.size]), limits)
    return decode_payload(header, view[HEADER.size:], limits)


def read_message(read_exact: Callable[[int], bytes], limits: Limits = Limits()) -> tuple[Header, bytes]:
    """The next header and its payload from a stream (``read_exact(n)`` returns n bytes or raises).
    The payload is read only after the header passed :func:`parse_header`."""
    header = parse_header(read_exact(HEADER.size), limits)
    return header, read_exact(header.length)
