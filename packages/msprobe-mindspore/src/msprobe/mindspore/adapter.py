"""MindSpore tensors for the framework-free collector (``msprobe.core.contract.TensorAdapter``).

On an accelerator statistics are MindSpore ops that stay on the device until :meth:`fetch` brings every
pending handle to the host in one transfer; on the CPU numpy computes them from host memory, read in
batches (:mod:`msprobe.mindspore.reads`) because each host read waits for MindSpore's executor
(docs/mindspore/dump.md#statistics-on-the-cpu). Exactness per dtype: docs/dump_format.md#values; bfloat16
files and NaN extremes: docs/mindspore/dump.md#pynative-levels-l0-l1-and-mix.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any, BinaryIO

import numpy as np

import mindspore
from mindspore import ops
from msprobe.core.contract import NOT_HANDLED, TensorRecord, TensorStats
from msprobe.core.dump.device_stats import STAT_COUNT, DeviceCopy, StatsAdapterBase, StatsHandle
from msprobe.core.dump.host_stats import EXACT_FLOAT32_BOUNDS, crc32_hex
from msprobe.core.dump.tensor_writer import FrozenTensor
from msprobe.core.dump.xor_checksum import PendingChecksum, xor_word
from msprobe.mindspore import reads

_FLOAT64_REDUCED = (mindspore.float64, mindspore.int8, mindspore.int16, mindspore.int32, mindspore.int64,
                    mindspore.uint8, mindspore.uint16, mindspore.uint32, mindspore.uint64)
_FLOAT32_REDUCED = (mindspore.float16, mindspore.bfloat16, mindspore.float32)
_BFLOAT16 = str(mindspore.bfloat16)


def _reduction_input(tensor: mindspore.Tensor) -> mindspore.Tensor:
    if tensor.is_complex():
        tensor = ops.abs(tensor)
    if tensor.dtype in _FLOAT32_REDUCED:
        return tensor.astype(mindspore.float32)
    return tensor.astype(mindspore.float64)


@functools.cache
def _constants(dtype: mindspore.dtype.Type) -> tuple[mindspore.Tensor, ...]:
    """-inf, inf and NaN as 0-d tensors of ``dtype``, made once (building them per call costs more
    than the statistics)."""
    return tuple(mindspore.Tensor(value, dtype) for value in (-math.inf, math.inf, math.nan))


class MindSporeTensorAdapter(StatsAdapterBase):
    type_name = "mindspore.Tensor"
    tensor_suffix = ".npy"
    tensor_type = mindspore.Tensor

    def describe(self, tensor: mindspore.Tensor) -> TensorRecord:
        seen = reads.seen(tensor)
        return TensorRecord(self.type_name, seen.dtype_name, seen.shape)

    def capture(self, tensor: mindspore.Tensor, remember: bool = False) -> tuple[TensorRecord, Any]:
        """The record and statistics from one read of the tensor's metadata (:func:`reads.seen`); a tensor a
        recorded call produced (``remember``) keeps its statistics handle there, and the next call that
        takes it as input shares it (both would read the same values at the same settle)."""
        seen = reads.seen(tensor)
        record = TensorRecord(self.type_name, seen.dtype_name, seen.shape)
        if seen.stats is not None:
            return record, seen.stats
        stats = self._stats(tensor, seen.dtype_name)
        if remember:
            seen.stats = stats
        return record, stats

    def stats(self, tensor: mindspore.Tensor) -> StatsHandle | DeviceCopy | reads.PendingRead | TensorStats:
        return self._stats(tensor, reads.seen(tensor).dtype_name)

    def _stats(self, tensor: mindspore.Tensor, dtype_name: str
               ) -> StatsHandle | DeviceCopy | reads.PendingRead | TensorStats:
        if reads.on_cpu():
            if dtype_name == _BFLOAT16:  # the name: comparing MindSpore dtypes costs 0.5 µs
                tensor = tensor.astype(mindspore.float32)  # numpy has no bfloat16; exact widening
            return reads.note(tensor)
        return device_stats(tensor)

    def fetch(self, handles: Sequence[Any]) -> list[TensorStats]:
        reads.settle()
        return super().fetch([h.result if isinstance(h, reads.PendingRead) else h for h in handles])

    def reduce_copies(self, copies: list[mindspore.Tensor], key: tuple) -> mindspore.Tensor:
        """One group's rows (``key``: their dtype and size): one stacked matrix, one op per statistic over
        its rows."""
        rows = ops.stack(copies)
        finite = ops.isfinite(rows)
        neg_inf, pos_inf, nan = _constants(key[0])  # from the key: asking the fresh stack would wait
        has_nan = ops.isnan(rows).any(axis=1)  # as in device_stats: a NaN anywhere makes max and min NaN
        high, low = rows.max(axis=1), rows.min(axis=1)
        scale = _power_of_two_scale(ops.maximum(ops.abs(high), ops.abs(low)), key[0])
        scaled = rows * scale.reshape(-1, 1)
        unscale = scale.astype(mindspore.float64)  # the way back may leave float32's range (a norm past 3e38)
        values = [ops.where(has_nan, nan, high), ops.where(has_nan, nan, low),
                  scaled.mean(axis=1).astype(mindspore.float64) / unscale,
                  ops.sqrt(ops.reduce_sum(scaled * scaled, 1)).astype(mindspore.float64) / unscale,
                  ops.where(finite, rows, neg_inf).max(axis=1), ops.where(finite, rows, pos_inf).min(axis=1)]
        return ops.stack([v.astype(mindspore.float64) for v in values], axis=1).reshape(-1)

    def transfer(self, values: list[mindspore.Tensor]) -> list[list[float]]:
        flat = ops.concat(values).asnumpy().tolist()
        return [flat[i : i + STAT_COUNT] for i in range(0, len(flat), STAT_COUNT)]

    def checksum(self, tensor: mindspore.Tensor, remember: bool = False) -> str:
        return crc32_hex(np.ascontiguousarray(reads.read_host(tensor)).tobytes())

    def xor_checksum(self, tensor: mindspore.Tensor, remember: bool = False) -> PendingChecksum:
        """On the host, from a batched read (:mod:`msprobe.mindspore.reads`): the tensor's bytes are read
        whole, on every device (docs/dump_format.md#xor-checksum)."""
        return PendingChecksum(reads.note(tensor, _host_word))

    def transfer_words(self, words: list[reads.PendingRead]) -> list[int | None]:
        reads.settle()
        return [word.result for word in words]

    def snapshot(self, tensor: mindspore.Tensor) -> mindspore.Tensor:
        return tensor.copy()

    def freeze(self, tensor: mindspore.Tensor, *, reuse: bool = True, remember: bool = False) -> FrozenTensor:
        """A C-ordered numpy copy for :class:`~msprobe.core.dump.tensor_writer.TensorWriter` (``reuse`` and
        ``remember`` have no effect: MindSpore tensors carry no version counter to tell an unchanged
        tensor by, so nothing is kept for reuse)."""
        if tensor.dtype == mindspore.bfloat16:
            tensor = tensor.astype(mindspore.float32)
        array = np.array(reads.read_host(tensor), order="C", copy=True)  # asnumpy() may share the tensor's memory
        return FrozenTensor(array, array.nbytes)

    def write_frozen(self, payload: np.ndarray, handle: BinaryIO) -> None:
        np.save(handle, payload, allow_pickle=False)

    def watch_gradient(self, tensor: mindspore.Tensor, on_grad: Callable[[mindspore.Tensor], None]) -> Any:
        """Level debug's ``save_backward``: a tensor hook (PyNative) that hands ``tensor``'s gradient to
        ``on_grad`` when backward computes it, and returns None, so the gradient flows on unchanged. None for
        a Parameter that does not require a gradient (a plain tensor has a gradient whenever a
        ``mindspore.grad``/``value_and_grad`` differentiates through it: it is always watched)."""
        if isinstance(tensor, mindspore.Parameter) and not tensor.requires_grad:
            return None

        def read_only(grad: mindspore.Tensor) -> None:
            on_grad(grad)

        return tensor.register_hook(read_only)

    def encode_other(self, value: Any) -> Any:
        if isinstance(value, mindspore.dtype.Type):
            return {"type": "mindspore.dtype", "value": str(value)}
        return NOT_HANDLED


def _host_word(array: np.ndarray) -> int:
    return xor_word(np.ascontiguousarray(array).reshape(-1).view(np.uint8))


# Tensors up to this many elements are copied and reduced with their batch (each copy is held until the
# batch's fetch: at most 32 KiB).
_DEVICE_BATCHED_MAX_ELEMENTS = 4096


def device_stats(tensor: mindspore.Tensor) -> StatsHandle | DeviceCopy | TensorStats:
    """The statistics as MindSpore ops, left on the tensor's device (GPU/Ascend; runs on CPU too)."""
    if tensor.size == 0:
        return TensorStats(None, None, None, None)
    if tensor.dtype != mindspore.bool_ and not tensor.is_complex() and tensor.size <= _DEVICE_BATCHED_MAX_ELEMENTS:
        x = _reduction_input(tensor)
        if x.dtype == tensor.dtype:  # astype to its own dtype shares the tensor's memory: copy it
            x = ops.mul(x, 1)
        return DeviceCopy(x.reshape(-1), (x.dtype, tensor.size))
    if tensor.dtype == mindspore.bool_:
        flat = tensor.reshape(-1)
        values = ops.stack([flat.any(), flat.all()]).astype(mindspore.float64)
        return StatsHandle(ops.concat([values, ops.zeros(STAT_COUNT - 2, mindspore.float64)]), is_bool=True)
    x = _reduction_input(tensor).reshape(-1)
    finite = ops.isfinite(x)
    neg_inf, pos_inf, nan = _constants(x.dtype)
    # MindSpore's CPU max/min skip NaN; like numpy and torch, a NaN anywhere makes both NaN
    has_nan = ops.isnan(x).any()
    high, low = x.max(), x.min()
    scale = _power_of_two_scale(ops.maximum(ops.abs(high), ops.abs(low)), x.dtype)
    scaled = x * scale
    unscale = scale.astype(mindspore.float64)  # the way back may leave float32's range (a norm past 3e38)
    values = [ops.where(has_nan, nan, high), ops.where(has_nan, nan, low),
              scaled.mean().astype(mindspore.float64) / unscale,
              ops.sqrt(ops.reduce_sum(scaled * scaled)).astype(mindspore.float64) / unscale,
              ops.where(finite, x, neg_inf).max(), ops.where(finite, x, pos_inf).min()]
    return StatsHandle(ops.stack([v.astype(mindspore.float64) for v in values]))


# Scaled tensors' largest magnitude is about 2**20: the scale itself stays a normal float32 at both ends
# (2**-107 for 3e38; a subnormal scale is flushed to zero where the device flushes them), and sums of
# squares of a billion elements stay far inside float32's range.
_SCALED_EXPONENT = 20.0


def _power_of_two_scale(bound: mindspore.Tensor, dtype: mindspore.dtype.Type) -> mindspore.Tensor:
    """1 where float32's own mean and norm are exact for largest magnitudes ``bound``
    (``EXACT_FLOAT32_BOUNDS``, the host's rule), else the power of two that brings ``bound`` near 2**20, so the
    mean and norm of every finite tensor are finite and exact; as MindSpore ops, without a sync."""
    if dtype != mindspore.float32:
        return ops.ones_like(bound)
    low, high = EXACT_FLOAT32_BOUNDS
    outside = ops.isfinite(bound) & (bound > 0) & ((bound < low) | (bound > high))
    return ops.where(outside, ops.exp2(_SCALED_EXPONENT - ops.floor(ops.log2(bound))), ops.ones_like(bound))
