"""The online wire format: round trips, and every bound checked before anything is allocated."""

from __future__ import annotations

import os
import struct
import zlib

import numpy as np
import pytest

from msprobe.core.online import wire
from msprobe.core.online.wire import (
    HEADER,
    ChecksumError,
    Kind,
    Limits,
    Message,
    WireError,
    WireTensor,
    decode,
    encode,
    parse_header,
)


def _tensor(name: str, array: np.ndarray) -> WireTensor:
    return WireTensor(name, str(array.dtype), array.shape, array.tobytes())


def _message(**meta) -> Message:
    a = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    b = np.array([True, False, True])
    c = np.zeros((0, 5), dtype=np.int64)
    return Message(Kind.DATA, rank=3, step=7, seq=42, meta={"name": "Torch.add.0.forward", **meta},
                   tensors=[_tensor("a", a), _tensor("b", b), _tensor("c", c)])


def test_round_trip_keeps_header_description_and_bytes():
    message = _message(entry={"input_args": [{"type": "torch.Tensor", "data_name": "a"}]})
    back = decode(encode(message))
    assert (back.kind, back.rank, back.step, back.seq) == (Kind.DATA, 3, 7, 42)
    assert back.meta == message.meta
    for sent, got in zip(message.tensors, back.tensors):
        assert (got.name, got.dtype, got.shape) == (sent.name, sent.dtype, sent.shape)
        assert bytes(got.data) == bytes(sent.data)
    a = np.frombuffer(bytes(back.tensors[0].data), dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(a, np.arange(12, dtype=np.float64).reshape(3, 4).astype(np.float32) / 7)


def test_header_layout_is_the_documented_one():
    frame = encode(_message())
    magic, version, kind, flags, rank, step, seq, length, checksum = struct.unpack(">4sHBBIIQQI", frame[:36])
    assert (magic, version, kind, flags, rank, step, seq) == (b"MSPO", 1, 2, 0, 3, 7, 42)
    assert length == len(frame) - 36 and checksum == zlib.crc32(frame[36:])


@pytest.mark.parametrize("seed", range(20))
def test_garbage_bytes_are_refused_with_a_wire_error(seed):
    garbage = os.urandom(36 + seed * 50)
    with pytest.raises(WireError):
        decode(garbage)


def test_garbage_after_a_valid_magic_is_refused():
    rng = np.random.default_rng(0)
    for _ in range(50):
        frame = b"MSPO" + rng.integers(0, 256, size=200, dtype=np.uint8).tobytes()
        with pytest.raises(WireError):
            decode(frame)


def test_oversized_length_field_is_refused_before_reading_the_payload():
    header = HEADER.pack(wire.MAGIC, wire.VERSION, int(Kind.DATA), 0, 0, 0, 1, 2**63, 0)
    with pytest.raises(WireError, match="exceeds the maximum message size"):
        parse_header(header)
    reads = []

    def read_exact(n: int) -> bytes:
        reads.append(n)
        return header if n == HEADER.size else b""

    with pytest.raises(WireError):
        wire.read_message(read_exact, Limits(max_message=1 << 20))
    assert reads == [HEADER.size]  # the payload was never asked for


def test_configured_maximum_applies_to_both_sides():
    message = Message(Kind.DATA, tensors=[_tensor("x", np.zeros(1000, dtype=np.float64))])
    with pytest.raises(WireError, match="at most"):
        encode(message, Limits(max_message=4000))
    frame = encode(message)
    with pytest.raises(WireError, match="exceeds"):
        decode(frame, Limits(max_message=4000))


def test_checksum_failure_is_its_own_error():
    frame = bytearray(encode(_message()))
    frame[-1] ^= 0xFF
    with pytest.raises(ChecksumError):
        decode(bytes(frame))


def _forged(description: dict | bytes, blob: bytes = b"") -> bytes:
    text = description if isinstance(description, bytes) else __import__("json").dumps(description).encode()
    payload = struct.pack(">I", len(text)) + text + blob
    return wire.header_bytes(Kind.DATA, 0, 0, 1, payload) + payload


@pytest.mark.parametrize("description, blob, message", [
    ({"meta": {}, "tensors": [{"name": "x", "dtype": "float32", "shape": [10**12]}]}, b"", "needs"),
    ({"meta": {}, "tensors": [{"name": "x", "dtype": "object", "shape": [1]}]}, b"1234", "dtype"),
    ({"meta": {}, "tensors": [{"name": "x", "dtype": "float32", "shape": [-1]}]}, b"", "shape"),
    ({"meta": {}, "tensors": [{"name": "x", "dtype": "float32", "shape": [1] * 40}]}, b"1234", "name/dtype/shape"),
    ({"meta": {}, "tensors": [{"name": "x", "dtype": "uint8", "shape": [2]}]}, b"123", "bytes after"),
    ({"meta": [], "tensors": []}, b"", "meta"),
    (b"{not json", b"", "JSON"),
    (b"[" * 100000 + b"]" * 100000, b"", "JSON|meta"),
    (b"\xff\xfe", b"", "JSON"),
])
def test_forged_descriptions_are_refused(description, blob, message):
    with pytest.raises(WireError, match=message):
        decode(_forged(description, blob))


def test_too_many_tensors_is_refused():
    many = {"meta": {}, "tensors": [{"name": str(i), "dtype": "uint8", "shape": [0]} for i in range(10)]}
    with pytest.raises(WireError, match="at most 5"):
        decode(_forged(many), Limits(max_tensors=5))


def test_json_length_beyond_the_payload_is_refused():
    payload = struct.pack(">I", 2**31) + b"{}"
    with pytest.raises(WireError, match="description length"):
        decode(wire.header_bytes(Kind.DATA, 0, 0, 1, payload) + payload)


def test_unknown_version_and_kind_are_refused():
    good = encode(_message())
    with pytest.raises(WireError, match="version"):
        decode(good[:4] + struct.pack(">H", 99) + good[6:])
    with pytest.raises(WireError, match="kind"):
        decode(good[:6] + bytes([200]) + good[7:])


def test_encode_refuses_bytes_that_do_not_match_dtype_and_shape():
    with pytest.raises(WireError, match="bytes for"):
        encode(Message(Kind.DATA, tensors=[WireTensor("x", "float32", (2,), b"123")]))
