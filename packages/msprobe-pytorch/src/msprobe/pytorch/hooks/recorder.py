"""The part every interception point shares: name and count a call, hand it to the sink, arm its
backward capture.

API calls (``api.py``), module forwards (``module.py``) and collectives (``distributed.py``) differ
only in how they learn about a call; what happens to it is decided here once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from msprobe.core.events import Call, CallSink
from msprobe.core.naming import CallCounter, backward_name
from msprobe.pytorch.hooks.backward import BackwardCapture, EmitOrder
from msprobe.pytorch.hooks.flat import flatten


@dataclass
class Pending:
    """A call between its start and its end, with the capture of its backward when one is wanted."""

    call: Call
    capture: BackwardCapture | None = None


class Recorder:
    """Owns the sink, the call counter and the two switches every hook reads.

    ``active``: collection is on (set by ``Interceptor.enable``). ``paused``: msprobe itself is running
    torch code (the sink, our own wrapping) and nothing must be seen as a user call.
    """

    def __init__(self, sink: CallSink) -> None:
        self.sink = sink
        self.counter = CallCounter()
        self.active = False
        self.paused = False
        self._order = EmitOrder()

    def pause(self) -> _Paused:
        """``with recorder.pause():`` — torch code run inside is msprobe's own, not the user's."""
        return _Paused(self)

    def begin(
        self,
        name: str,
        args: tuple,
        kwargs: dict,
        *,
        is_module: bool,
        mutates: bool,
        differentiable: bool = True,
        func: Callable[..., Any] | None = None,
    ) -> Pending:
        """Tell the sink a call starts; when it wants the backward and gradients are involved, note
        where the inputs' gradients flow (``backward.py``: nothing is put into the user's graph).

        ``func``: the real API, offered to the sink as ``Call.rerun`` (run with interception paused).
        """
        call = Call(name, args, kwargs, is_module=is_module, mutates_inputs=mutates,
                    rerun=None if func is None else self._paused_runner(func))
        with self.pause():
            wants_backward = self.sink.forward_start(call)
        pending = Pending(call)
        if not (wants_backward and differentiable and torch.is_grad_enabled()):
            return pending
        flat, _ = flatten((args, kwargs))
        # A module's parameters can make its outputs need gradients even when no input does.
        if not is_module and not any(isinstance(v, torch.Tensor) and v.requires_grad for v in flat):
            return pending
        pending.capture = BackwardCapture(self._emitter(call), self._order, flat)
        return pending

    def end(self, pending: Pending, output: Any) -> Any:
        """Tell the sink the call returned ``output`` and watch the output gradients. Returns what the
        user gets: ``output``, or the sink's replacement for it."""
        with self.pause():
            replacement = self.sink.forward_end(pending.call, output)
            if replacement is not None:
                output = replacement
            if pending.capture is not None:
                outputs, _ = flatten(output)
                pending.capture.arm(outputs)
        return output

    def _paused_runner(self, func: Callable[..., Any]) -> Callable[..., Any]:
        def rerun(*args: Any, **kwargs: Any) -> Any:
            with self.pause():
                return func(*args, **kwargs)

        return rerun

    def _emitter(self, call: Call) -> Callable[[tuple, tuple], None]:
        def emit(grad_input: tuple, grad_output: tuple) -> None:
            if not self.active:
                return
            call.extra.setdefault("backward_name", backward_name(call.name))
            with self.pause():
                self.sink.backward(call, grad_input, grad_output)

        return emit


class _Paused:
    """The context of :meth:`Recorder.pause` (a plain class: a generator context manager cost more
    than the rest of a call's bookkeeping, and this runs several times per recorded call)."""

    __slots__ = ("_recorder", "_previous")

    def __init__(self, recorder: Recorder) -> None:
        self._recorder = recorder
        self._previous = False

    def __enter__(self) -> None:
        self._previous, self._recorder.paused = self._recorder.paused, True

    def __exit__(self, *exc_info: object) -> None:
        self._recorder.paused = self._previous

