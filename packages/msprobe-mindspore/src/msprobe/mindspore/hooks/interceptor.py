"""The one interception mechanism of MindSpore PyNative mode, used by every task.

:class:`Interceptor` ties together API attribute replacement (:mod:`.api_patch`), cell hooks
(:mod:`.cells`), primitives of the attached model (:mod:`.primitives`), ``@jit`` functions
(:mod:`.jit`) and per-call backward taps (:mod:`.backward`), and turns what they see into
:class:`~msprobe.core.events.Call` events for a :class:`~msprobe.core.events.CallSink`.

Everything is installed by :meth:`Interceptor.enable` and removed by :meth:`Interceptor.disable`, so
a disabled interceptor costs nothing. One flag, ``busy``, is set while a recorded call runs and while
the sink works: calls made then are neither recorded nor counted (outermost calls only, SPEC 4.1).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mindspore import nn
from msprobe.core.events import Call, CallSink
from msprobe.core.naming import FORWARD, CallCounter, api_name, module_name
from msprobe.mindspore.hooks.api_patch import ApiPatches
from msprobe.mindspore.hooks.backward import (
    BackwardTap,
    grad_enabled,
    grad_is_recording,
    grad_recording_as,
    grad_recording_off,
)
from msprobe.mindspore.hooks.catalog import api_targets
from msprobe.mindspore.hooks.cells import CellHooks
from msprobe.mindspore.hooks.jit import JitPatch
from msprobe.mindspore.hooks.primitives import PrimitiveTaps

LEVELS = ("L0", "L1", "mix")


class Interceptor:
    """Sees a PyNative run at ``level`` (L0 cells, L1 APIs, mix both) and reports it to ``sink``."""

    def __init__(self, sink: CallSink, *, level: str) -> None:
        if level not in LEVELS:
            raise ValueError(f"level {level!r} is not one of {', '.join(LEVELS)} (MindSpore PyNative mode)")
        self._sink = sink
        self._level = level
        self._counter = CallCounter()
        self.busy = False
        self.enabled = False
        self._api_patches = ApiPatches(api_targets(), self._run_api) if level != "L0" else None
        self._jit = JitPatch(self._run_api) if level != "L0" else None
        self._cells: CellHooks | None = None
        self._primitives: PrimitiveTaps | None = None

    # lifecycle -----------------------------------------------------------------------------------

    def attach(self, model: nn.Cell | None) -> None:
        """Watch ``model``: its sub-cells (L0, mix) and the primitives its cells call (L1, mix)."""
        if model is not None and not isinstance(model, nn.Cell):
            raise TypeError(f"model must be a mindspore.nn.Cell or None, got {type(model).__name__}")
        if self._level == "L0" and model is None:
            raise ValueError("level L0 records cells and needs the model: pass an nn.Cell")
        was_enabled = self.enabled
        self.disable()
        self._cells = self._primitives = None
        if model is not None and self._level in ("L0", "mix"):
            self._cells = CellHooks(model, self._cell_start, self._cell_end,
                                    self._report_backward, grad_is_recording)
        if model is not None and self._level in ("L1", "mix"):
            self._primitives = PrimitiveTaps(model, self._run_api)
        if was_enabled:
            self.enable()

    def enable(self) -> None:
        if self.enabled:
            return
        for part in self._parts():
            part.install()
        self.enabled = True

    def disable(self) -> None:
        if not self.enabled:
            return
        self.enabled = False
        for part in self._parts():
            part.restore()

    def reset_counts(self) -> None:
        """Next step: counts start again from 0 and forwards still waiting for a backward are dropped."""
        self._counter.reset()
        if self._cells is not None:
            self._cells.forget_pending()

    def detach(self) -> None:
        """Restore everything msprobe replaced and forget the model."""
        self.disable()
        self._cells = self._primitives = None

    def _parts(self) -> list:
        parts = [self._api_patches, self._jit, self._cells, self._primitives]
        return [part for part in parts if part is not None]

    # recording -----------------------------------------------------------------------------------

    def _paused(self, action: Callable[..., Any], *args: Any) -> Any:
        """Run a sink method: not recorded, not counted, not part of the gradient graph."""
        previous, self.busy = self.busy, True
        try:
            with grad_recording_off():
                return action(*args)
        finally:
            self.busy = previous

    def _run_api(self, prefix: str, api: str, original: Callable, args: tuple, kwargs: dict,
                 mutates: bool) -> Any:
        if self.busy:
            return original(*args, **kwargs)
        count = self._counter.next(f"{prefix}.{api}")
        # A jit function is a whole compiled graph that may update Parameters (an optimizer's
        # construct): running it again would apply its side effects twice, so it is never re-run.
        rerun = None if prefix == "Jit" else self._unrecorded(original, grad_enabled())
        call = Call(api_name(prefix, api, count, FORWARD), args, kwargs, mutates_inputs=mutates, rerun=rerun)
        self.busy = True
        try:
            tap = None
            if self._paused(self._sink.forward_start, call) and not mutates and grad_is_recording():
                tap = BackwardTap(call, self._report_backward)
                args, kwargs = tap.tap_inputs(args, kwargs)
            output = original(*args, **kwargs)
            replacement = self._paused(self._sink.forward_end, call, output)
            if replacement is not None:
                output = replacement
            return tap.tap_output(output) if tap is not None else output
        finally:
            self.busy = False

    def _unrecorded(self, original: Callable, grad_recording: bool) -> Callable[..., Any]:
        """``Call.rerun``: the real API, not recorded, with gradient recording as it was at the call
        (so a replacement output made from it joins the gradient graph like the original would)."""

        def rerun(*args: Any, **kwargs: Any) -> Any:
            previous, self.busy = self.busy, True
            try:
                with grad_recording_as(grad_recording):
                    return original(*args, **kwargs)
            finally:
                self.busy = previous

        return rerun

    def _report_backward(self, call: Call, grad_input: tuple, grad_output: tuple) -> None:
        if self.enabled and not self.busy:
            self._paused(self._sink.backward, call, grad_input, grad_output)

    def _cell_start(self, path: str, cls: str, args: tuple) -> Call | None:
        if self.busy:
            return None
        count = self._counter.next(f"Cell.{path}.{cls}")
        call = Call(module_name("Cell", path, cls, FORWARD, count), args, {}, is_module=True)
        call.extra["wants_backward"] = self._paused(self._sink.forward_start, call)
        return call

    def _cell_end(self, call: Call, output: Any) -> None:
        self._paused(self._sink.forward_end, call, output)

