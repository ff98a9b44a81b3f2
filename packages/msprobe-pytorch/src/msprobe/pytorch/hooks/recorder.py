"""The PyTorch side of reporting a call: core's :class:`~msprobe.core.calls.CallReporter` plus the
arming of each call's backward capture.

API calls (``api.py``), module forwards (``module.py``) and collectives (``distributed.py``) differ
only in how they learn about a call; what happens to it is decided here and in core.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from msprobe.core.calls import CallReporter, Started
from msprobe.core.events import CallSink
from msprobe.pytorch.hooks.backward import BackwardCapture, EmitOrder
from msprobe.pytorch.hooks.flat import call_leaves, leaves


class Pending:
    """A call between its start and its end, with the capture of its backward when one is wanted."""

    __slots__ = ("started", "capture")

    def __init__(self, started: Started, capture: BackwardCapture | None = None) -> None:
        self.started = started
        self.capture = capture


class Recorder(CallReporter):
    """Reports calls to the sink and watches the backward of those whose backward the sink wants."""

    def __init__(self, sink: CallSink) -> None:
        # Our own torch calls (the sink's, the capture's attribute reads and hooks) are hidden from every
        # TorchFunctionMode, the user's included: a user's mode must not see, count or alter them.
        super().__init__(sink, quiet=torch._C.DisableTorchFunction)
        self._order = EmitOrder(self.backward)

    def begin_api(self, prefix: str, api: str, args: tuple, kwargs: dict, *, mutates: bool,
                  func: Callable[..., Any] | None = None, differentiable: bool = True) -> Pending:
        """``func``: the real API, offered to the sink as ``Call.rerun``."""
        rerun = None if func is None else self.unrecorded(func)
        started = self.start_api(prefix, api, args, kwargs, mutates=mutates, rerun=rerun)
        return self._watch(started, args, kwargs, differentiable, needs_grad_input=True)

    def begin_module(self, path: str, cls: str, args: tuple, kwargs: dict) -> Pending:
        started = self.start_module("Module", path, cls, args, kwargs)
        # A module's parameters can make its outputs need gradients even when no input does.
        return self._watch(started, args, kwargs, differentiable=True, needs_grad_input=False)

    def finish(self, pending: Pending, output: Any) -> Any:
        """The call returned ``output``: tell the sink, then watch the backward of what the user gets."""
        output = self.end(pending.started, output)
        capture = pending.capture
        if capture is not None:
            with self.pause(), torch._C.DisableTorchFunction():
                capture.arm(leaves(output))
        return output

    def _watch(self, started: Started, args: tuple, kwargs: dict, differentiable: bool,
               needs_grad_input: bool) -> Pending:
        if not (started.wants_backward and differentiable and torch.is_grad_enabled()):
            return Pending(started)
        with torch._C.DisableTorchFunction():
            flat = call_leaves(args, kwargs)
            if needs_grad_input and not any(isinstance(v, torch.Tensor) and v.requires_grad for v in flat):
                return Pending(started)
            return Pending(started, BackwardCapture(self._order, started.call, flat))
