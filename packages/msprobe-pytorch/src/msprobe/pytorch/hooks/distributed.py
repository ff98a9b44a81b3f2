"""``torch.distributed`` collectives: the one place function modes cannot see, so they are wrapped.

Collectives write into their tensor arguments, so the sink gets the inputs before the call (it
snapshots what it needs) and, as the output, the tensor arguments after the call. An asynchronous call
(``async_op=True``) returns a work handle we do not wait on: waiting would change the overlap of
communication and compute the user asked for, so its output is the handle itself.

Wrappers are installed on ``torch.distributed`` while collecting; their handle puts the originals back.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from msprobe.core.handles import Handle, patch_attributes
from msprobe.pytorch.hooks.recorder import Recorder

COLLECTIVES = (
    "all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "gather", "scatter",
    "reduce_scatter", "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "barrier",
    "send", "recv", "isend", "irecv", "broadcast_object_list", "all_gather_object",
)  # fmt: skip


def install_collectives(recorder: Recorder) -> Handle:
    """Wrap the collectives of ``torch.distributed``; the handle puts the originals back."""
    dist = torch.distributed
    found = [(name, getattr(dist, name, None)) for name in COLLECTIVES] if dist.is_available() else []
    return patch_attributes([(dist, name, _wrapper(recorder, name, original))
                             for name, original in found if original is not None])


def _wrapper(recorder: Recorder, api: str, original: Any) -> Any:
    @functools.wraps(original)
    def collective(*args: Any, **kwargs: Any) -> Any:
        if not recorder.sees_calls:
            return original(*args, **kwargs)
        pending = recorder.begin_api("Distributed", api, args, kwargs, mutates=True, differentiable=False)
        with recorder.pause():  # torch code inside the collective is not the user's
            result = original(*args, **kwargs)
        if kwargs.get("async_op", False):
            recorder.finish(pending, result)
        else:
            tensors = [a for a in args if isinstance(a, (torch.Tensor, list))]
            recorder.finish(pending, result if result is not None else tensors)
        return result

    return collective
