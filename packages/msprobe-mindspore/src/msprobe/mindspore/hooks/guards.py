"""Settling pending reads before anything changes a tensor in place.

Statistics on the CPU are read after the call (:mod:`msprobe.mindspore.reads`); a tensor changed in place
before that read would be recorded with its new values. Every path that writes into an existing tensor
therefore makes the pending reads first: in-place APIs and ``@jit`` functions (through the interceptor at
L1 and mix, through these guards at L0, where APIs are not intercepted), primitives marked
``side_effect_mem``, the optimizers of ``mindspore.nn`` and ``mindspore.experimental.optim`` (``mint.optim``),
and ``Parameter.set_data``/``Tensor.assign_value``. The interceptor settles when it is disabled too, so
what an optimizer does between ``stop()`` and ``step()`` cannot reach a pending read. What no guard sees
is writing through the array ``asnumpy()`` returned (docs/mindspore/dump.md#statistics-on-the-cpu).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import mindspore
import mindspore.experimental.optim as experimental_optim
from msprobe.core.services.handles import Handle, HandleGroup, patch_attributes
from msprobe.mindspore import reads
from msprobe.mindspore.hooks.api_patch import ApiPatches
from msprobe.mindspore.hooks.catalog import ApiTarget
from msprobe.mindspore.hooks.jit import patch_jit

_OPTIMIZERS = (mindspore.nn.Optimizer, experimental_optim.Optimizer)
_WRITERS = ((mindspore.Parameter, "set_data"), (mindspore.Tensor, "assign_value"))


def settle_then(original: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        reads.settle()
        return original(*args, **kwargs)

    return call


def _settle_then_run(prefix: str, api: str, original: Callable, args: tuple, kwargs: dict, mutates: bool) -> Any:
    """The ``run_api`` of the L0 guards: nothing recorded."""
    reads.settle()
    return original(*args, **kwargs)


class MutationGuards:
    """The guards one interceptor installs; ``inplace_apis``: the in-place API targets to guard (empty
    where the interceptor records APIs itself and settles there)."""

    def __init__(self, inplace_apis: list[ApiTarget]) -> None:
        self._apis = ApiPatches(inplace_apis, _settle_then_run) if inplace_apis else None

    def install(self) -> Handle:
        # wrapped as they are now: at L1 the interceptor's own wrapper of a writer stays on the call path
        writers = [(cls, "__call__") for cls in _OPTIMIZERS] + list(_WRITERS)
        handles = [patch_attributes([(owner, name, settle_then(getattr(owner, name))) for owner, name in writers])]
        if self._apis is not None:
            handles += [self._apis.install(), patch_jit(_settle_then_run)]
        return HandleGroup(handles)
