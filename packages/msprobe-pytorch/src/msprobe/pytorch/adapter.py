"""The torch implementation of :class:`msprobe.core.events.TensorAdapter`.

Statistics are launched on the tensor's device as one small computation per tensor whose result stays
there (a 6-element float64 vector); :meth:`TorchTensorAdapter.fetch` concatenates many of them and copies
to the host once, so a step costs one synchronisation instead of one ``.item()`` per statistic.

Precision (SPEC 4.4): float32 is reduced in float32 (what msprobe 1.1.1 writes, so numbers compare
equal), float16/bfloat16 are widened to float32 first so sums and norms do not overflow, integers and
float64 are reduced in float64, complex tensors over their absolute value, bool as any/all.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from msprobe.core.records import NOT_HANDLED, TensorRecord, TensorStats

_STAT_COUNT = 6  # max, min, mean, norm, finite max, finite min


@dataclass
class StatsHandle:
    """Statistics in flight: ``values`` is a device tensor of 6 float64 numbers, or ``None`` for an
    empty tensor; ``is_bool`` selects the any/all reading of max/min."""

    values: torch.Tensor | None
    is_bool: bool = False


def _reduction_dtype(dtype: torch.dtype) -> torch.dtype:
    if dtype in (torch.float16, torch.bfloat16, torch.float32):
        return torch.float32
    return torch.float64


def _float_stats(t: torch.Tensor) -> torch.Tensor:
    """[max, min, mean, norm, finite max, finite min] of a real tensor, as float64, on its device."""
    if t.is_complex():
        t = t.abs()
    t = t.to(_reduction_dtype(t.dtype))
    lo, hi = torch.aminmax(t)
    # Extremes over finite elements: non-finite values are pushed past the other end of the range; a
    # result that stays infinite means no element was finite (read back as None).
    finite = torch.isfinite(t)
    finite_hi = torch.where(finite, t, -torch.inf).amax()
    finite_lo = torch.where(finite, t, torch.inf).amin()
    parts = (hi, lo, t.mean(), torch.linalg.vector_norm(t), finite_hi, finite_lo)
    return torch.stack(parts).to(torch.float64)


class TorchTensorAdapter:
    """What the collector needs to know about and do with a ``torch.Tensor``."""

    type_name = "torch.Tensor"
    tensor_suffix = ".pt"

    def is_tensor(self, value: Any) -> bool:
        return isinstance(value, torch.Tensor)

    def describe(self, tensor: torch.Tensor) -> TensorRecord:
        return TensorRecord(
            type_name=self.type_name,
            dtype=str(tensor.dtype),
            shape=tuple(tensor.shape),
            requires_grad=tensor.requires_grad,
        )

    def stats(self, tensor: torch.Tensor) -> StatsHandle:
        with torch.no_grad():
            t = tensor.detach()
            if t.numel() == 0:
                return StatsHandle(None)
            if t.dtype == torch.bool:
                flags = torch.stack((t.any(), t.all())).to(torch.float64)
                return StatsHandle(torch.cat((flags, flags.new_zeros(_STAT_COUNT - 2))), is_bool=True)
            return StatsHandle(_float_stats(t))

    def fetch(self, handles: list[StatsHandle]) -> list[TensorStats]:
        live = [h.values for h in handles if h.values is not None]
        if not live:
            return [TensorStats(None, None, None, None) for _ in handles]
        if len({v.device for v in live}) > 1:
            live = [v.cpu() for v in live]
        flat = torch.cat(live).tolist()
        result = []
        offset = 0
        for handle in handles:
            if handle.values is None:
                result.append(TensorStats(None, None, None, None))
                continue
            row = flat[offset : offset + _STAT_COUNT]
            offset += _STAT_COUNT
            result.append(_to_stats(row, handle.is_bool))
        return result

    def checksum(self, tensor: torch.Tensor) -> str:
        t = tensor.detach().cpu().contiguous()
        if t.dtype == torch.bfloat16:  # numpy has no bfloat16: hash the same bytes as int16
            t = t.view(torch.int16)
        return f"{zlib.crc32(t.numpy().tobytes()) & 0xFFFFFFFF:08x}"

    def snapshot(self, tensor: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return tensor.detach().clone()

    def save(self, tensor: torch.Tensor, path: Path) -> None:
        torch.save(tensor.detach().cpu().contiguous().clone(), path)

    def encode_other(self, value: Any) -> Any:
        if isinstance(value, torch.dtype):
            return {"type": "torch.dtype", "value": str(value)}
        if isinstance(value, torch.device):
            return {"type": "torch.device", "value": str(value)}
        if isinstance(value, torch.Size):
            return [{"type": "int", "value": int(v)} for v in value]
        if _is_process_group(value):
            return _encode_group(value)
        return NOT_HANDLED


def _to_stats(row: list[float], is_bool: bool) -> TensorStats:
    if is_bool:
        return TensorStats(bool(row[0]), bool(row[1]), None, None)
    hi, lo, mean, norm, finite_hi, finite_lo = row
    return TensorStats(
        hi,
        lo,
        mean,
        norm,
        max_except_inf_nan=None if math.isfinite(hi) else _finite_or_none(finite_hi),
        min_except_inf_nan=None if math.isfinite(lo) else _finite_or_none(finite_lo),
    )


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _is_process_group(value: Any) -> bool:
    dist = torch.distributed
    return dist.is_available() and isinstance(value, dist.ProcessGroup)


def _encode_group(group: Any) -> dict:
    dist = torch.distributed
    ranks = dist.get_process_group_ranks(group) if dist.is_initialized() else []
    return {"type": "torch.ProcessGroup", "group_ranks": list(ranks), "group_id": str(id(group))}
