"""The torch implementation of :class:`msprobe.core.contract.TensorAdapter`: records, statistics, checksums, files.

On an accelerator statistics stay on the device until one batched fetch (:meth:`TorchTensorAdapter.fetch`;
a small tensor is copied at the call and reduced with its group at the fetch); on the CPU numpy computes
them, a fraction of the cost of torch's per-operation dispatch (docs/pytorch/dump.md#what-only-an-npu-can-do).
How exact they are per dtype, and why the user's autocast, modes and matmul precision cannot reach them
(:class:`_Exact`, :func:`_norm`): docs/pytorch/dump.md#statistics-precision.
"""

from __future__ import annotations

import ctypes
import math
import weakref
from collections.abc import Callable
from typing import Any, BinaryIO

import numpy as np
import torch
from torch.utils._python_dispatch import _disable_current_modes

from msprobe.core.contract import NOT_HANDLED, TensorRecord, TensorStats
from msprobe.core.dump.device_stats import STAT_COUNT, DeviceCopy, StatsAdapterBase, StatsHandle
from msprobe.core.dump.host_stats import (
    EXACT_FLOAT32_BOUNDS,
    HostCopy,
    crc32_hex,
    exact_in_float32,
    host_stats,
    with_finite_extremes,
)
from msprobe.core.dump.tensor_writer import FrozenTensor
from msprobe.core.dump.xor_checksum import WORD_BYTES, PendingChecksum, host_xor
from msprobe.pytorch.dtensor import PLAIN, local_shard

_RECENT_LIMIT = 4096  # tensors whose statistics are remembered for reuse


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
    if t.dtype == torch.float32:  # exact at both ends of float32's range: scaled by a power of two
        scale = _power_of_two_scale(torch.maximum(hi.abs(), lo.abs()))
        scaled = t * scale  # exact: every element keeps its digits (those that would not are negligible)
        mean, norm = scaled.mean().double() / scale, _norm(scaled.reshape(-1), t.shape) / scale
    else:
        mean, norm = t.mean(), _norm(t.reshape(-1), t.shape)
    return torch.stack((hi, lo, mean, norm, finite_hi, finite_lo)).to(torch.float64)


# Scaled tensors' largest magnitude is about 2**20: the scale itself stays a normal float32 at both ends
# (2**-107 for 3e38; a subnormal scale is flushed to zero where the device flushes them), and sums of
# squares of a billion elements stay far inside float32's range.
_SCALED_EXPONENT = 20.0


def _power_of_two_scale(bound: torch.Tensor) -> torch.Tensor:
    """1 when float32's own mean and norm are exact for a tensor of largest magnitude ``bound``
    (``EXACT_FLOAT32_BOUNDS``, the host's rule), else the power of two that brings ``bound`` near 2**20;
    computed on the device, without a sync (float64)."""
    low, high = EXACT_FLOAT32_BOUNDS
    bound = bound.double()
    outside = torch.isfinite(bound) & (bound > 0) & ((bound < low) | (bound > high))
    return torch.where(outside, torch.exp2(_SCALED_EXPONENT - torch.floor(torch.log2(bound))), torch.ones_like(bound))


# Length of the rows whose norms :func:`_norm` takes in float32 (a float32 reduction of up to 16,384
# elements stays within 1e-7), and the fixed row length used when no trailing dimensions fit.
_ROW_MIN, _ROW_MAX, _ROW = 256, 16384, 1024


def _norm(flat: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """The L2 norm of ``flat`` (a contiguous 1-D float32/float64 tensor of ``shape``'s elements), as a
    float64 scalar tensor on its device.

    Why not one ``vector_norm``: a float32 reduction accumulates in float32, and its error grows with the
    element count (measured on CPU: 1e-5 relative at 1M elements, 4e-4 at 10M; a BLAS dot 2e-6 and 4e-5).
    Norms of rows stay accurate in float32, and are combined in float64: 1e-9 at 10M elements, as fast as
    the single reduction, without a temporary copy. The rows are the tensor's trailing dimensions when
    they hold 256 to 16,384 elements (two operations: this runs for every large tensor, and each torch
    call costs ~1.5 µs of dispatch); otherwise rows of 1,024 elements and a shorter tail.
    """
    n = flat.numel()
    length = 1
    for size in reversed(shape):
        length *= size
        if length >= _ROW_MIN:
            break
    if _ROW_MIN <= length <= _ROW_MAX and n % length == 0:
        parts = torch.linalg.vector_norm(flat.view(n // length, length), dim=1)
    elif n <= _ROW_MAX:
        parts = flat
    else:
        rows = n // _ROW
        parts = torch.linalg.vector_norm(flat[: rows * _ROW].view(rows, _ROW), dim=1)
        if n % _ROW:
            parts = torch.cat((parts, torch.linalg.vector_norm(flat[rows * _ROW :]).reshape(1)))
    return torch.linalg.vector_norm(parts, dtype=torch.float64)


class _DtypeNames(dict):
    """``str(dtype)`` per dtype, made once (a handful of dtypes, named for every tensor of every entry)."""

    def __missing__(self, dtype: torch.dtype) -> str:
        self[dtype] = name = str(dtype)
        return name


_DTYPE_NAMES = _DtypeNames()


class _Exact:
    """Context in which statistics see nothing of the user's numerics settings (module docstring);
    autocast is turned off on ``tensor``'s device (``None``: no autocast-affected work inside).

    A plain class with cheap checks, because it is entered once per tensor: ~1 µs when no autocast and no
    dispatch mode is active, which is the common case.
    """

    __slots__ = ("_tensor", "_device", "_no_function_modes", "_autocast_was_on", "_dispatch_modes")

    def __init__(self, tensor: torch.Tensor | None) -> None:
        self._tensor = tensor
        self._device = ""
        self._no_function_modes = torch._C.DisableTorchFunction()
        self._autocast_was_on = False
        self._dispatch_modes: Any = None

    def __enter__(self) -> None:
        self._no_function_modes.__enter__()  # first: even reading ``.device`` is seen by function modes
        self._device = "" if self._tensor is None else self._tensor.device.type
        if self._device and torch._C._is_any_autocast_enabled() and torch._C._is_autocast_available(self._device):
            self._autocast_was_on = torch.is_autocast_enabled(self._device)
            if self._autocast_was_on:
                torch.set_autocast_enabled(self._device, False)
        if torch._C._len_torch_dispatch_stack():
            self._dispatch_modes = _disable_current_modes()
            self._dispatch_modes.__enter__()

    def __exit__(self, *exc_info: object) -> None:
        if self._dispatch_modes is not None:
            self._dispatch_modes.__exit__(*exc_info)
            self._dispatch_modes = None
        if self._autocast_was_on:
            torch.set_autocast_enabled(self._device, True)
            self._autocast_was_on = False
        self._no_function_modes.__exit__(*exc_info)


class TorchTensorAdapter(StatsAdapterBase):
    """What the collector needs to know about and do with a ``torch.Tensor``."""

    type_name = "torch.Tensor"
    tensor_suffix = ".pt"
    tensor_type = torch.Tensor

    def describe(self, tensor: torch.Tensor) -> TensorRecord:
        with torch._C.DisableTorchFunction():  # even attribute reads reach a user's TorchFunctionMode
            return self._describe(tensor)

    def _describe(self, tensor: torch.Tensor) -> TensorRecord:
        """A DTensor is described as its local shard, with its layout (``dtensor.py``)."""
        local, layout = local_shard(tensor)
        record = TensorRecord(self.type_name, _DTYPE_NAMES[local.dtype], tuple(local.shape), tensor.requires_grad)
        record.dtensor = layout
        return record

    def select_rows(self, tensor: torch.Tensor, rows: Any) -> torch.Tensor:
        """The rows ``rows`` selects (``slice`` / ``request_id``) as a view on the tensor's device: basic
        indexing, no copy, no sync, outside the user's modes and unseen by autograd (the view of a tensor
        that requires grad says so, as its record must). A DTensor's local shard is what is selected."""
        with _Exact(tensor):
            local = _readable(tensor)
            index = rows.index(tuple(local.shape))
            if index is None:
                return tensor
            with torch.no_grad():
                view = local.detach()[index]
            return view.requires_grad_() if tensor.requires_grad else view

    def capture(self, tensor: torch.Tensor, remember: bool = False
                ) -> tuple[TensorRecord, StatsHandle | HostCopy | TensorStats]:
        """:meth:`describe` and :meth:`stats` at once: one guard for both (this runs for every tensor of
        every entry), and none when the caller already hides everything (the sink runs inside
        ``DisableTorchFunction``) and neither autocast nor a dispatch mode is on. ``remember``: the tensor
        is one a recorded call produced (see ``__init__``)."""
        if torch._C._is_torch_function_all_disabled() and not torch._C._is_any_autocast_enabled() \
                and not torch._C._len_torch_dispatch_stack():
            return self._describe(tensor), _remembered(self._recent, tensor, self._compute_stats, remember)
        with _Exact(tensor):
            return self._describe(tensor), _remembered(self._recent, tensor, self._compute_stats, remember)

    def __init__(self) -> None:
        # The output of one call is usually the input of the next: statistics of a tensor that has not
        # changed since (same tensor, same version counter) are reused, not recomputed. Checksums and
        # tensor copies likewise (md5 mode hashes every byte, so a repeat is as dear as the first time).
        # Only what a recorded call produced is remembered, and only until the step ends (forget): a
        # version counter misses changes made inside a kernel (batch_norm updates its running statistics
        # in place without moving it) and through ``.data``, which parameters and buffers do see.
        self._recent: _Memo = {}
        self._checksums: _Memo = {}
        self._saved: _Memo = {}

    def forget(self) -> None:
        """A new step: nothing remembered from the last one is reused."""
        for memo in (self._recent, self._checksums, self._saved):
            memo.clear()

    def stats(self, tensor: torch.Tensor) -> StatsHandle | HostCopy | TensorStats:
        with _Exact(tensor):
            return _remembered(self._recent, tensor, self._compute_stats, False)

    def checksum(self, tensor: torch.Tensor, remember: bool = False) -> str:
        with _Exact(tensor):  # a user's mode must not see (or change) the copy we hash
            return _remembered(self._checksums, tensor, _crc32, remember)

    def xor_checksum(self, tensor: torch.Tensor, remember: bool = False) -> str | PendingChecksum:
        with _Exact(tensor):
            return _remembered(self._checksums, tensor, _xor, remember)

    def transfer_words(self, words: list[torch.Tensor]) -> list[int]:
        """The folded words of a batch, to the host in one transfer."""
        with _Exact(None):
            if len({w.device for w in words}) > 1:
                words = [w.cpu() for w in words]
            return torch.stack(words).tolist()

    def _compute_stats(self, tensor: torch.Tensor) -> StatsHandle | DeviceCopy | HostCopy | TensorStats:
        tensor = _readable(tensor)
        # is_cpu, not device.type: this runs for every tensor, and building a device object costs 0.3 µs
        return _host_stats(tensor) if tensor.is_cpu else _device_stats(tensor.detach())

    def reduce_copies(self, copies: list[torch.Tensor], key: tuple) -> torch.Tensor:
        """One group's rows (copies of one device, dtype and size): one stacked matrix and one reduction
        per statistic over its rows (each row reduced as that tensor alone would be)."""
        with _Exact(copies[0]), torch.no_grad():
            rows = torch.stack(copies)
            finite = torch.isfinite(rows)
            # amax/amin rather than aminmax(dim=): the most widely implemented reductions (torch_npu too)
            return torch.stack((  # float64: the norm's dtype promotes the rest (exactly)
                rows.amax(dim=1), rows.amin(dim=1), rows.mean(dim=1, dtype=torch.float64),  # finite near 3e38
                torch.linalg.vector_norm(rows, dim=1, dtype=torch.float64),
                torch.where(finite, rows, -torch.inf).amax(dim=1), torch.where(finite, rows, torch.inf).amin(dim=1),
            ), dim=1).view(-1)  # a view: the stack is contiguous

    def transfer(self, values: list[torch.Tensor]) -> list[list[float]]:
        """The rows of the device values (a handle's 6 numbers, a group's rows), to the host in one transfer."""
        with _Exact(None):
            if len({v.device for v in values}) > 1:
                values = [v.cpu() for v in values]
            flat = torch.cat(values).tolist()
        return [flat[i : i + STAT_COUNT] for i in range(0, len(flat), STAT_COUNT)]

    def snapshot(self, tensor: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return tensor.detach().clone()

    def freeze(self, tensor: torch.Tensor, *, reuse: bool = True, remember: bool = False) -> FrozenTensor:
        """A contiguous host copy of the tensor's own elements (a view's, not its whole storage), for
        :class:`~msprobe.core.dump.tensor_writer.TensorWriter`; the same one again for the same unchanged
        tensor that a recorded call produced (``remember``), so that its second file is a second name of
        the first."""
        if reuse and not remember:  # an output is read anew (see _remembered)
            known = _known(self._saved, tensor)
            if known is not None:
                return known
        copy = _readable(tensor).detach().to("cpu", memory_format=torch.contiguous_format, copy=True)
        frozen = FrozenTensor(copy, copy.numel() * copy.element_size())
        if remember:
            _remember(self._saved, tensor, frozen)
        return frozen

    def write_frozen(self, payload: torch.Tensor, handle: BinaryIO) -> None:
        torch.save(payload, handle)

    def watch_gradient(self, tensor: torch.Tensor, on_grad: Callable[[torch.Tensor], None]) -> Any:
        """Level debug's ``save_backward``: a tensor hook that hands ``tensor``'s gradient to ``on_grad`` when
        backward computes it, and returns None, so the gradient flows on unchanged. None (no hook) for a
        tensor that cannot have a gradient."""
        with torch._C.DisableTorchFunction():  # a user's TorchFunctionMode sees none of msprobe's calls
            if not tensor.requires_grad:
                return None

            def read_only(grad: torch.Tensor) -> None:
                on_grad(grad)

            return tensor.register_hook(read_only)

    def encode_other(self, value: Any) -> Any:
        if isinstance(value, torch.dtype):
            return {"type": "torch.dtype", "value": str(value)}
        if isinstance(value, torch.device):
            return {"type": "torch.device", "value": str(value)}
        if isinstance(value, torch.Size):
            return [{"type": "int", "value": int(v)} for v in value]
        if isinstance(value, torch.memory_format):
            return {"type": "torch.memory_format", "format": str(value).removeprefix("torch.")}
        if _is_process_group(value):
            return _encode_group(value)
        if isinstance(value, _WRITTEN_AS_NULL):
            return None  # as msprobe 1.1.1 writes them; a value of the user's run, not a loss to warn of
        return NOT_HANDLED


# Per-tensor memo: id(tensor) → (a weak reference to it, its version counter, the result).
_Memo = dict[int, tuple[weakref.ref, int, Any]]


def _known(cache: _Memo, tensor: torch.Tensor) -> Any:
    """What ``cache`` holds for this same tensor at this same version, or None."""
    known = cache.get(id(tensor))
    if known is not None and known[0]() is tensor and known[1] == tensor._version:
        return known[2]
    return None


def _remember(cache: _Memo, tensor: torch.Tensor, result: Any) -> None:
    if len(cache) >= _RECENT_LIMIT:
        cache.clear()
    cache[id(tensor)] = (weakref.ref(tensor), tensor._version, result)


def _remembered(cache: _Memo, tensor: torch.Tensor, compute: Any, remember: bool) -> Any:
    """What ``compute(tensor)`` gives. A call's output (``remember``) is always read anew and kept for
    later; an input is looked up first (the same tensor at the same version).

    Why an output is never looked up: a call can write a tensor without moving its version counter —
    gloo's ``all_reduce`` and ``broadcast`` do, so ``dist.all_reduce(t)`` recorded ``t``'s value from
    before the call as its output (docs/pytorch/distributed.md)."""
    if remember:
        result = compute(tensor)
        _remember(cache, tensor, result)
        return result
    result = _known(cache, tensor)
    return compute(tensor) if result is None else result


def _crc32(tensor: torch.Tensor) -> str:
    """CRC-32 of the tensor's elements in row-major order (no copy for a contiguous CPU tensor); of a
    DTensor's local shard."""
    t = _readable(tensor).detach().cpu().contiguous()
    return crc32_hex(_memory(t) if t.nbytes else b"")


def _xor(tensor: torch.Tensor) -> str | PendingChecksum:
    """The XOR checksum: folded by numpy at once in host memory, on the device elsewhere (one word left
    there for the batch's transfer)."""
    t = _readable(tensor).detach()
    if t.is_cpu:
        t = t.contiguous()
        return host_xor(_memory(t) if t.nbytes else b"")
    return PendingChecksum(device_xor(t))


def device_xor(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes in row-major order, zero-padded to whole 64-bit words and XORed together on its
    device: a 0-d int64 tensor, no host sync (halves fold onto each other, log2(n) launches)."""
    with torch.no_grad():
        raw = t.contiguous().reshape(-1).view(torch.uint8)
        padding = -raw.numel() % WORD_BYTES
        if padding:
            raw = torch.cat((raw, raw.new_zeros(padding)))
        words = raw.view(torch.int64) if raw.numel() else raw.new_zeros(1, dtype=torch.int64)
        while words.numel() > 1:
            if words.numel() % 2:
                words = torch.cat((words, words.new_zeros(1)))
            half = words.numel() // 2
            words = torch.bitwise_xor(words[:half], words[half:])
        return words.reshape(())


def _readable(tensor: torch.Tensor) -> torch.Tensor:
    """A plain tensor holding ``tensor``'s values, to read: the tensor itself, a DTensor's local shard,
    or for any other subclass a copy made through its own dispatch.

    Why a copy: a wrapper subclass's memory is not its values (its data pointer is 0, or an in-flight
    buffer: the ``AsyncCollectiveTensor`` that tensor parallelism hands out holds the all-reduce's
    result only once waited on, and every operator on it waits)."""
    if type(tensor) in PLAIN:
        return tensor
    local = local_shard(tensor)[0]  # a DTensor's own reductions would be collectives
    if type(local) in PLAIN:
        return local
    with torch.no_grad():
        plain = torch.empty(local.shape, dtype=local.dtype, device=local.device)
        plain.copy_(local.detach())  # the subclass copies its values into ours (its return value may wrap)
    return plain


def _memory(t: torch.Tensor) -> ctypes.Array:
    """The bytes of a contiguous CPU tensor's elements, read in place, to be read at once.

    Not ``Tensor.numpy()``: it marks the tensor's storage as not resizable for the rest of the
    storage's life (numpy may hold a view of it), and FSDP2 frees every unsharded parameter by
    resizing its storage to 0 — a dumped parameter crashed the user's next forward. A buffer made from
    the address holds no reference, so nothing of it may outlive the read: every caller reduces or
    copies it before returning, while the tensor is alive."""
    return (ctypes.c_char * t.nbytes).from_address(t.data_ptr())


_NUMPY_DTYPES = {
    torch.float16: np.float16, torch.float32: np.float32, torch.float64: np.float64,
    torch.uint8: np.uint8, torch.int8: np.int8, torch.int16: np.int16, torch.int32: np.int32,
    torch.int64: np.int64, torch.bool: np.bool_, torch.complex64: np.complex64, torch.complex128: np.complex128,
    torch.uint16: np.uint16, torch.uint32: np.uint32, torch.uint64: np.uint64,
}  # fmt: skip


def _host_values(t: torch.Tensor) -> np.ndarray:
    """The elements of a CPU tensor as a flat numpy array, to be reduced or copied at once: in place
    when contiguous (:func:`_memory`), else from a copy of our own."""
    if not t.is_contiguous():
        return t.detach().contiguous().numpy().reshape(-1)  # our own copy: its storage is nobody else's
    if not t.nbytes:
        return np.empty(0, _NUMPY_DTYPES[t.dtype])
    return np.frombuffer(_memory(t), _NUMPY_DTYPES[t.dtype])


# Tensors up to this many elements are copied and reduced with their batch on the device (each copy is
# held until the batch's fetch: at most 16 KiB in float32).
_DEVICE_BATCHED_MAX_ELEMENTS = 4096
_DEVICE_BATCHED = frozenset((
    torch.float16, torch.bfloat16, torch.float32, torch.float64,
    torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
))


def _device_stats(t: torch.Tensor) -> StatsHandle | DeviceCopy | TensorStats:
    """Statistics of a detached tensor launched on its device (any device: it runs on the CPU too); none
    for a tensor without data (empty, or on the meta device, as under deferred initialisation)."""
    if t.numel() == 0 or t.is_meta:
        return TensorStats(None, None, None, None)
    with torch.no_grad():
        if t.dtype in _DEVICE_BATCHED and t.numel() <= _DEVICE_BATCHED_MAX_ELEMENTS:
            copy = t.to(_reduction_dtype(t.dtype), memory_format=torch.contiguous_format, copy=True)
            return DeviceCopy(copy.view(-1), (copy.device, copy.dtype, copy.numel()))
        if t.dtype == torch.bool:
            flags = torch.stack((t.any(), t.all())).to(torch.float64)
            return StatsHandle(torch.cat((flags, flags.new_zeros(STAT_COUNT - 2))), is_bool=True)
        return StatsHandle(_float_stats(t))


# Below this many elements numpy's per-call cost beats torch's dispatcher; above it torch's single-pass
# aminmax wins (measured on CPU: 12 µs vs 22 µs at 1,000 elements, 360 µs vs 267 µs at 512k).
_NUMPY_MAX_ELEMENTS = 16384


# Real dtypes numpy reads as they are (no conjugate bit possible; the negative bit is checked).
_NUMPY_REAL = frozenset((
    torch.float16, torch.float32, torch.float64, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
))


def _host_stats(tensor: torch.Tensor) -> HostCopy | TensorStats:
    """Statistics of a CPU tensor: small tensors through numpy (shared with MindSpore; the smallest are
    copied and reduced with their batch, :func:`~msprobe.core.dump.host_stats.host_stats`), large ones now,
    with torch's single-pass aminmax plus a sum and :func:`_norm`."""
    if tensor.dtype in _NUMPY_REAL and tensor.numel() <= _NUMPY_MAX_ELEMENTS and not tensor.is_neg():
        return host_stats(_host_values(tensor))  # the common case, with the fewest torch calls (~0.1 µs each)
    t = tensor.detach()  # detached: nothing below is recorded by autograd
    if t.dtype == torch.bfloat16:
        t = t.float()  # numpy has no bfloat16
    t = t.resolve_conj().resolve_neg()
    if t.numel() <= _NUMPY_MAX_ELEMENTS or t.dtype == torch.bool or t.is_complex():
        return host_stats(_host_values(t))
    flat = t.reshape(-1)
    if flat.dtype != torch.float32:
        flat = flat.float() if flat.dtype == torch.float16 else flat.double()
    low, high = torch.aminmax(flat)
    high, low = high.item(), low.item()  # on the CPU: nothing to wait for
    if flat.dtype == torch.float32 and math.isfinite(high + low) and not exact_in_float32(max(high, -low)):
        total, norm = (flat.sum(dtype=torch.float64).item(), torch.linalg.vector_norm(flat, dtype=torch.float64).item())
    else:
        total, norm = torch.stack((flat.sum(), _norm(flat, t.shape))).tolist()
    stats = TensorStats(high, low, total / flat.numel(), norm)
    return with_finite_extremes(stats, _host_values(flat))


def _null_types() -> tuple[type, ...]:
    types: list[type] = [torch.Generator, torch.layout]
    if torch.distributed.is_available():
        types += [torch.distributed.ReduceOp, torch.distributed.ReduceOp.RedOpType]
    return tuple(types)


# Argument types msprobe 1.1.1 writes as null (docs/pytorch/dump.md): a generator, a layout, a reduce op.
_WRITTEN_AS_NULL = _null_types()


def _is_process_group(value: Any) -> bool:
    dist = torch.distributed
    return dist.is_available() and isinstance(value, dist.ProcessGroup)


def _encode_group(group: Any) -> dict:
    dist = torch.distributed
    ranks = dist.get_process_group_ranks(group) if dist.is_initialized() else []
    return {"type": "torch.ProcessGroup", "group_ranks": list(ranks), "group_id": str(id(group))}
