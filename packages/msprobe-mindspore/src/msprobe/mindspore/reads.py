"""Host reads of MindSpore tensors on the CPU, made in batches.

PyNative runs operators in MindSpore's executor threads, and any host read of any tensor waits until
everything queued is done: about 0.1–1 ms per read whatever the tensor, which was most of msprobe's cost
per call (docs/performance.md#round-6-2026-12-04-mindspore-reads-in-batches). So a read is noted at the
call (:func:`note`) and made later with every other pending read after one such wait (:func:`settle`): at
the batch's fetch, and before anything may change a noted tensor in place. MindSpore tensors carry no
version counter, so what keeps a late read equal to what the call saw is that every in-place path settles
first (:mod:`msprobe.mindspore.hooks.guards`). The queue is the process's, like the executor it waits for.

Batching leaves the waits a call cannot defer: the first ``dtype`` of a fresh result, its gradient node and
its tensor hook (the backward capture) each wait for PyNative's asynchronous pipeline, 0.1 ms on a quiet
machine and 1–9 ms per wait on a loaded one (the pipeline's thread must be scheduled first). So while
capture is on, on the CPU, operators run synchronously (:func:`synchronous_capture`): the same kernels in the
same order, so the same numbers, and every one of those reads is then immediate
(docs/performance.md#round-7-2026-12-05-the-same-tiny-ops-in-both-frameworks).

A tensor's dtype and shape are read once while it is in use (:func:`seen`): one call's output is the next
call's input, and its record, its statistics and the backward capture all ask for them (each read goes
through MindSpore's C++ tensor; docs/performance.md#round-8-2026-12-06-metadata-read-once-output-hooks-on-nodes).

At the settle, after one wait for everything queued, numpy looks at each plain tensor's host memory through
the array interface (:func:`_host_array`) instead of ``asnumpy()``, whose own wait and buffer-format parse cost
about three times as much per tensor (docs/performance.md#round-9-2026-12-06-the-main-threads-share).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import mindspore
from msprobe.core.contract import TensorStats, UserComputationError
from msprobe.core.dump.host_stats import HostCopy, host_stats
from msprobe.core.services.handles import Handle, HandleGroup
from msprobe.mindspore.private_api import _pynative_executor, pynative_synchronize, set_pynative_synchronize

# Tensors held for a later read keep their memory: past this many bytes the reads are made at once.
PENDING_MAX_BYTES = 64 << 20


class PendingRead:
    """The statistics of one tensor, read at the next :func:`settle` (``result``: a :class:`HostCopy` or the
    statistics themselves, as :func:`~msprobe.core.dump.host_stats.host_stats` gives them); with another
    ``reduce``, what it makes of the host array (summary_mode xor: the folded word)."""

    __slots__ = ("tensor", "result", "reduce")

    def __init__(self, tensor: mindspore.Tensor, reduce: Callable[[np.ndarray], Any] = host_stats) -> None:
        self.tensor: mindspore.Tensor | None = tensor
        self.result: Any = None
        self.reduce = reduce

    @property
    def stats(self) -> TensorStats | None:
        """The statistics once read and reduced (``None`` until then), as every pending handle has them."""
        return self.result.stats if isinstance(self.result, HostCopy) else self.result


_pending: list[PendingRead] = []
_pending_bytes = 0


class Seen:
    """One tensor's dtype (by name: comparing names costs a tenth of comparing MindSpore dtypes) and ``shape``
    as read once, and the statistics handle of a tensor a recorded call produced (``stats``: reused when the
    next call takes it as input, as it is read at the same :func:`settle`)."""

    __slots__ = ("tensor", "dtype_name", "shape", "stats")

    def __init__(self, tensor: mindspore.Tensor) -> None:
        self.tensor = tensor  # held: the key is its id
        self.dtype_name = str(tensor.dtype)
        self.shape = tuple(tensor.shape)
        self.stats: Any = None


# The tensors seen last, by id: a call's inputs and outputs and the next call's (a bounded few, so no tensor
# is kept alive for long). Emptied at every settle, which comes before anything changes a tensor in place.
_seen: dict[int, Seen] = {}
_SEEN_MAX = 8


def seen(tensor: mindspore.Tensor) -> Seen:
    """``tensor``'s dtype and shape, read at its first sight since the last :func:`settle`."""
    entry = _seen.get(id(tensor))
    if entry is not None and entry.tensor is tensor:
        return entry
    entry = Seen(tensor)
    if len(_seen) >= _SEEN_MAX:
        del _seen[next(iter(_seen))]  # the oldest
    _seen[id(tensor)] = entry
    return entry


def note(tensor: mindspore.Tensor, reduce: Callable[[np.ndarray], Any] = host_stats) -> PendingRead:
    """A read of ``tensor`` to make at the next :func:`settle`, handed to ``reduce``."""
    global _pending_bytes
    read = PendingRead(tensor, reduce)
    _pending.append(read)
    _pending_bytes += tensor.nbytes
    if _pending_bytes > PENDING_MAX_BYTES:
        settle()
    return read


def settle() -> None:
    """Make every pending read, the newest first: its read waits for the queue once, and the older tensors
    are computed by then. An operator that failed in the meantime raises at the first read, whichever tensor
    it reads (MindSpore's way), and the executor skips what was queued after it: which of the batch's
    tensors hold values is then unknown, so each unread one gets null statistics (as a tensor without data
    does), and the error goes to the user's code that is running now, as MindSpore would have raised it at
    the user's next read."""
    global _pending_bytes
    _seen.clear()  # what is seen after this may have been changed in place
    reads = _pending[::-1]
    _pending.clear()
    _pending_bytes = 0
    try:
        read_one = read_host
        if reads and _ADDRESSES and on_cpu():  # elsewhere (xor checksums on a device) the address is the device's
            _wait_for_queue()
            read_one = _host_array
        for read in reads:
            read.result, read.tensor = read.reduce(read_one(read.tensor)), None
    except UserComputationError:
        for read in reads:
            if read.tensor is not None:
                unread = TensorStats(None, None, None, None) if read.reduce is host_stats else None
                read.result, read.tensor = unread, None
        raise


def read_host(tensor: mindspore.Tensor) -> np.ndarray:
    """The tensor in host memory (shared with it: copy what must outlive a change). MindSpore raises a
    failed operator's error at the first read of its result: when that read is ours, the error is the
    user's to see."""
    try:
        return tensor.asnumpy()
    except RuntimeError as error:
        raise UserComputationError(error) from error


_device_is_cpu: bool | None = None


def on_cpu() -> bool:
    """MindSpore runs on the CPU. Asked once, at the first tensor read or described: by then the device is
    fixed, and asking costs ≈ 14 µs, as much as the statistics of a small tensor."""
    global _device_is_cpu
    if _device_is_cpu is None:
        _device_is_cpu = mindspore.get_context("device_target") == "CPU"
    return _device_is_cpu


def _wait_for_queue() -> None:
    """Wait once until MindSpore's executor has run everything queued (its error, if one failed, is the
    user's, as at :func:`read_host`)."""
    try:
        _pynative_executor.sync()
    except RuntimeError as error:
        raise UserComputationError(error) from error


# A tensor's address (private, checked once: without it every read goes through asnumpy())
_ADDRESSES = hasattr(mindspore.Tensor, "_data_ptr")
# numpy's type string of each dtype :func:`_host_array` reads from host memory directly
_TYPESTRS = {getattr(mindspore, name): np.dtype(name).str for name in (
    "float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")}
_TYPESTRS[mindspore.bool_] = np.dtype(np.bool_).str


class _HostMemory:
    """A tensor's host memory as numpy's array interface describes it; it holds the tensor, so an array
    made from it keeps the memory alive."""

    __slots__ = ("__array_interface__", "tensor")

    def __init__(self, tensor: mindspore.Tensor, address: int, typestr: str) -> None:
        self.__array_interface__ = {"data": (address, True), "shape": tuple(tensor.shape), "typestr": typestr,
                                    "version": 3}
        self.tensor = tensor


def _host_array(tensor: mindspore.Tensor) -> np.ndarray:
    """:func:`read_host` once the queue is run (:func:`_wait_for_queue`): a contiguous tensor of a plain dtype
    is taken at its address (its storage offset included), read-only and shared like ``asnumpy()``'s array;
    anything else (a strided view, an initializer not run yet, bfloat16, complex) through ``asnumpy()``."""
    typestr = _TYPESTRS.get(tensor.dtype)
    if typestr is None or tensor.has_init or not tensor.is_contiguous():
        return read_host(tensor)
    address = tensor._data_ptr()
    if not address:  # no memory (an empty tensor)
        return read_host(tensor)
    return np.asarray(_HostMemory(tensor, address, typestr))


def _pipelines_on_again() -> None:
    """The pipelines back in their threads, unless a ``mindspore.saved_tensors_hooks`` block entered during
    capture is still open: its hooks need them in the calling thread, and the block, having found them so,
    leaves them there when it ends (they stay so: slower, the same numbers)."""
    if not _pynative_executor.is_saved_tensor_hook_active():
        _pynative_executor.enable_frontend_and_bprop_pipeline()


def synchronous_capture() -> Handle:
    """PyNative runs each operator at its call while capture is on, on the CPU (the module's docstring says
    why), and its front-end and gradient-graph pipelines run in the calling thread (as under
    ``mindspore.saved_tensors_hooks``): once the process ran operators asynchronously, those pipelines' queue
    threads otherwise take each synchronous operator in turn and a captured step waits on them, 15–20 % of its
    time (docs/performance.md#round-9-2026-12-06-the-main-threads-share). The user's settings come back when
    the handle is removed. Elsewhere (Ascend, GPU) the device runs asynchronously as the user set it: nothing
    changes."""
    if mindspore.get_context("device_target") != "CPU":
        return Handle()
    handles = HandleGroup()
    if not _pynative_executor.disable_frontend_and_bprop_pipeline():  # it was on: on again at the end
        handles.add(Handle(_pipelines_on_again))
    if not pynative_synchronize():
        set_pynative_synchronize(True)
        handles.add(Handle(lambda: set_pynative_synchronize(False)))
    return handles
