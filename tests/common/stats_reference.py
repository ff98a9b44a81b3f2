"""The float64 numpy reference for a tensor's dump.json statistics, shared by both frameworks' tests."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest


def reference(array: np.ndarray) -> dict[str, float | None]:
    """Max, Min, Mean, Norm and the finite extremes (where Max or Min is not finite) of ``array``'s
    values, in float64, keyed as :class:`~msprobe.core.contract.TensorStats` names them."""
    values = array.astype(np.float64).ravel()
    finite = values[np.isfinite(values)]
    high, low = float(values.max()), float(values.min())
    with np.errstate(invalid="ignore"):  # inf - inf: the mean is NaN, as it should be
        mean = float(values.mean())
    return {
        "max": high, "min": low, "mean": mean, "norm": math.sqrt(float(values @ values)),
        "max_except_inf_nan": float(finite.max()) if finite.size and not math.isfinite(high) else None,
        "min_except_inf_nan": float(finite.min()) if finite.size and not math.isfinite(low) else None,
    }


def close(a: float | None, b: float | None, rel: float) -> bool:
    """Both absent, both NaN, or within ``rel`` (relative, and absolute near zero)."""
    if a is None or b is None:
        return a is b
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == pytest.approx(b, rel=rel, abs=rel)


def reference_xor(raw: bytes) -> str:
    """The XOR checksum of ``raw`` in plain Python (docs/dump_format.md#xor-checksum): the bytes
    zero-padded to whole 8-byte words, read little-endian, XORed together, as ``0x`` + 16 hex digits."""
    word = 0
    for (value,) in struct.iter_unpack("<Q", raw + bytes(-len(raw) % 8)):
        word ^= value
    return f"0x{word:016x}"
