"""``torch.distributed`` collectives: the one place function modes cannot see, so they are wrapped while
collecting (their handle puts the originals back).

A collective writes into its tensor arguments, so the sink gets the inputs before the call and, as the
output, the tensor arguments as the call left them; an asynchronous one is recorded when the user waits on
its work (:func:`recorded_work`), never earlier. DDP's C++ reducer never reaches these wrappers:
:func:`ddp_bucket_hook` is the opt-in comm hook for its gradient buckets. A collective a reentrant
checkpoint repeats is not recorded again (``recorder.py``). The rules: docs/pytorch/distributed.md#collectives.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from msprobe.core.services.handles import Handle, patch_attributes
from msprobe.pytorch.hooks.recorder import Pending, Recorder, backward_pass_id

COLLECTIVES = (
    "all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "gather", "scatter",
    "reduce_scatter", "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "barrier",
    "send", "recv", "isend", "irecv", "broadcast_object_list", "all_gather_object",
    "all_gather_single", "reduce_scatter_single",  # torch 2.13's names (FSDP2 calls them)
)  # fmt: skip


def install_collectives(recorder: Recorder) -> Handle:
    """Wrap the collectives of ``torch.distributed``; the handle puts the originals back."""
    found = [(name, getattr(dist, name, None)) for name in COLLECTIVES] if dist.is_available() else []
    return patch_attributes([(dist, name, _wrapper(recorder, name, original))
                             for name, original in found if original is not None])


def _written(args: tuple, kwargs: dict) -> list:
    """The tensor arguments (tensors and lists of them, positional then keyword), which a collective
    reads or writes: its recorded output, read after it."""
    return [a for a in (*args, *kwargs.values()) if isinstance(a, (torch.Tensor, list))]


def _wrapper(recorder: Recorder, api: str, original: Any) -> Any:
    @functools.wraps(original)
    def collective(*args: Any, **kwargs: Any) -> Any:
        if not recorder.sees_calls:
            return original(*args, **kwargs)
        key = ("Distributed", api)
        if backward_pass_id() != -1 and recorder.begin_replay(key, args, kwargs, module=False) is not None:
            with recorder.pause():  # a recomputation repeating its forward's collective: recorded there, once
                return original(*args, **kwargs)
        pending = recorder.begin_api("Distributed", api, args, kwargs, mutates=True, differentiable=False)
        with recorder.pause():  # torch code inside the collective is not the user's
            result = original(*args, **kwargs)
        if isinstance(result, _Work):
            return recorded_work(result, recorder, pending, _written(args, kwargs))
        recorder.finish(pending, _written(args, kwargs))
        return result

    return collective


_Work: Any = dist.Work if dist.is_available() else object  # a build without distributed has no collectives


class WaitedWork(_Work):
    """The work of an asynchronous collective that calls ``on_wait`` once, when ``wait()`` returns (the
    collective's result is defined only then). A ``dist.Work`` itself (FSDP2 waits only on values that
    are), delegating everything to the real work. Shared by the dump (:func:`recorded_work`) and the
    training-state monitor's ``cc_distribution``."""

    def __init__(self, work: Any, on_wait: Callable[[], None]) -> None:
        super().__init__()
        self._work = work
        self._on_wait: Callable[[], None] | None = on_wait

    def wait(self, *args: Any, **kwargs: Any) -> bool:
        done = self._work.wait(*args, **kwargs)
        on_wait, self._on_wait = self._on_wait, None  # once: a second wait records nothing
        if on_wait is not None:
            on_wait()
        return done

    def is_completed(self) -> bool:
        return self._work.is_completed()

    def is_success(self) -> bool:
        return self._work.is_success()

    def exception(self) -> Any:
        return self._work.exception()

    def source_rank(self) -> int:
        return self._work.source_rank()

    def result(self) -> list:
        return self._work.result()

    def synchronize(self) -> None:
        self._work.synchronize()

    def get_future(self) -> Any:
        return self._work.get_future()

    def block_current_stream(self) -> None:
        self._work.block_current_stream()


def recorded_work(work: Any, recorder: Recorder, pending: Pending, tensors: list) -> WaitedWork:
    """The dump's asynchronous collective: recorded under its own entry when ``wait()`` returns, with the
    tensors as the collective left them. Work never waited on while collecting is not recorded: nothing
    tells when its tensors hold the result."""
    def record() -> None:
        if recorder.active:  # not after stop(): that step's files are closed
            recorder.finish(pending, tensors)

    return WaitedWork(work, record)


def ddp_bucket_hook(recorder: Recorder) -> Any:
    """A DDP comm hook that reduces each gradient bucket as DDP's default hook does (divide by the world
    size, all-reduce) and records it as ``Distributed.ddp_bucket_all_reduce.{n}.forward``: the bucket's
    flat gradients before (input) and after (output) the reduction. It waits for each bucket's reduction
    before returning (overlap with the rest of the backward is lost; the numbers are the default hook's)."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    def hook(process_group, bucket):  # unannotated: DDP rejects annotations other than its own
        if not recorder.sees_calls:
            return allreduce_hook(process_group, bucket)
        buffer = bucket.buffer()
        pending = recorder.begin_api("Distributed", "ddp_bucket_all_reduce", (buffer,), {}, mutates=True,
                                     differentiable=False)
        with recorder.pause():
            future = allreduce_hook(process_group, bucket)
            future.wait()
        recorder.finish(pending, [buffer])
        return future

    return hook
