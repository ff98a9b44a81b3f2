"""``cc_distribution`` on MindSpore: the communication functions for the monitor's
:class:`~msprobe.core.monitor.collectives.CollectiveWatch` (the naming and filtering rules are there).

The functions wrapped are the dump's (``distributed_targets`` of ``msprobe.mindspore.hooks.catalog``):
``mindspore.communication.comm_func``, which returns its result as a new tensor (``(output, handle)``), and
``mindspore.mint.distributed``, which writes it into its tensor arguments as torch.distributed does. A call's
``post`` rows are its output tensors where it returns some, else its tensor arguments after the call. An
asynchronous call (``async_op=True``) has its ``post`` rows measured when its handle's ``wait()`` returns.
Collectives inside a compiled graph (``nn.DistributedGradReducer``'s ``AllReduce``) do not pass through these
functions and are not seen.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mindspore import ops
from mindspore.communication.comm_func import CommHandle_ as CommHandle  # the base of Python's and C++'s handles
from msprobe.core.monitor.collectives import call_tensors
from msprobe.mindspore.hooks.catalog import distributed_targets
from msprobe.mindspore.monitor.stats import measurable


def _concat(tensors: list) -> Any:
    return ops.cat([t.reshape(-1) for t in tensors])


def _tensors(values) -> list:
    """The measurable tensors among ``values`` (core's walk: a list of measurable tensors as one)."""
    return call_tensors(values, measurable, _concat, measurable)


def _on_wait(handle: CommHandle, on_wait: Callable[[], None]) -> None:
    """Call ``on_wait`` once, when ``handle.wait()`` returns (the call's result is defined only then). A handle
    that takes no attribute of its own leaves its call's ``post`` rows out."""
    wait = handle.wait

    def waited(*args, **kwargs):
        result = wait(*args, **kwargs)
        del handle.wait  # the class's own again
        on_wait()
        return result

    try:
        handle.wait = waited
    except AttributeError:
        pass


class MindSporeCollectives:
    files = (__file__,)

    def targets(self) -> list[tuple[Any, str]]:
        return [(target.owner, target.attr) for target in distributed_targets()]

    def tensors(self, args: tuple, kwargs: dict) -> list:
        return _tensors((*args, *kwargs.values()))

    def after(self, result: Any, args: tuple, kwargs: dict, measure: Callable[[list], None]) -> Any:
        parts = result if isinstance(result, (tuple, list)) else (result,)
        handle = next((part for part in parts if isinstance(part, CommHandle)), None)

        def measured() -> None:
            measure(_tensors(parts) or self.tensors(args, kwargs))

        if handle is not None:
            _on_wait(handle, measured)
        else:
            measured()
        return result
