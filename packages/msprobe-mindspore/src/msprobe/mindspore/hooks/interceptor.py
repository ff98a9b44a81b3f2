"""The one interception mechanism of MindSpore PyNative mode, used by every task.

:class:`Interceptor` ties together API attribute replacement (:mod:`.api_patch`), cell hooks
(:mod:`.cells`), primitives of the attached model (:mod:`.primitives`), ``@jit`` functions
(:mod:`.jit`) and per-call backward captures (:mod:`.backward`), and reports what they see through core's
:class:`~msprobe.core.lifecycle.calls.CallReporter` — the same sequence the PyTorch interceptor uses.

Everything is installed by :meth:`Interceptor.enable`, each part returning a
:class:`~msprobe.core.services.handles.Handle`, and removed through them by :meth:`Interceptor.disable`, so a
disabled interceptor costs nothing. The reporter is paused while a recorded call runs and while the
sink works: calls made then are neither recorded nor counted (outermost calls only, docs/dump_format.md#counting).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mindspore import nn
from msprobe.core.contract import CallSink
from msprobe.core.lifecycle.calls import CallReporter, Level, Started
from msprobe.core.services.handles import Handle, HandleGroup
from msprobe.mindspore import reads
from msprobe.mindspore.hooks.api_patch import ApiPatches, install_custom_apis
from msprobe.mindspore.hooks.backward import (
    BackwardCapture,
    EmitOrder,
    differentiable_inputs,
    differentiable_outputs,
    grad_enabled,
    grad_is_recording,
    grad_recording_as,
    grad_recording_off,
)
from msprobe.mindspore.hooks.catalog import api_targets
from msprobe.mindspore.hooks.cells import CellHooks
from msprobe.mindspore.hooks.guards import MutationGuards
from msprobe.mindspore.hooks.jit import patch_jit
from msprobe.mindspore.hooks.param_grads import ParameterGradHooks
from msprobe.mindspore.hooks.primitives import PrimitiveTaps


class Interceptor:
    """Sees a PyNative run at ``level`` (L0 cells, L1 APIs, mix both) and reports it to ``sink``."""

    def __init__(self, sink: CallSink, *, level: str) -> None:
        self._level = Level(level)
        # the sink's own ops (statistics, copies) stay out of the gradient graph
        self._reporter = CallReporter(sink, quiet=grad_recording_off)
        self._order = EmitOrder(self._reporter.backward)  # one for APIs and cells: a cell after its APIs
        targets = api_targets()
        self._api_patches = ApiPatches(targets, self._run_api) if self._level.apis else None
        self._guards = MutationGuards([] if self._level.apis else [t for t in targets if t.mutates_inputs])
        self._cells: CellHooks | None = None
        self._param_grads: ParameterGradHooks | None = None  # parameters_grad entries (L0, mix)
        self._primitives: PrimitiveTaps | None = None
        self._installed = HandleGroup()  # everything enable() put in place

    @property
    def enabled(self) -> bool:
        return self._reporter.active

    # lifecycle -----------------------------------------------------------------------------------

    def attach(self, model: nn.Cell | None) -> None:
        """Watch ``model``: its sub-cells (L0, mix) and the primitives its cells call (L1, mix)."""
        if model is not None and not isinstance(model, nn.Cell):
            raise TypeError(f"model must be a mindspore.nn.Cell or None, got {type(model).__name__}")
        if not self._level.apis and model is None:
            raise ValueError("level L0 records cells and needs the model: pass an nn.Cell")
        was_enabled = self.enabled
        self.disable()
        self._cells = self._primitives = self._param_grads = None
        if model is not None and self._level.modules:
            self._cells = CellHooks(model, self._cell_start, self._cell_end, self._order, grad_is_recording)
            self._param_grads = ParameterGradHooks(self._reporter, model)
        if model is not None and self._level.apis:
            self._primitives = PrimitiveTaps(model, self._run_api)
        if was_enabled:
            self.enable()

    def enable(self) -> None:
        if self.enabled:
            return
        self._installed = HandleGroup(install() for install in self._installers())
        self._reporter.active = True

    def disable(self) -> None:
        if not self.enabled:
            return
        self._installed.remove()  # while still active: cells left partial report their parameter gradients
        self._reporter.active = False
        reads.settle()  # before the user's code runs unguarded (an optimizer between stop() and step())

    def reset_counts(self) -> None:
        """Next step: counts start again from 0 and forwards still waiting for a backward are dropped."""
        self._reporter.counter.reset()
        self._order.forget()
        if self._cells is not None:
            self._cells.forget_pending()

    def detach(self) -> None:
        """Restore everything msprobe replaced and forget the model."""
        self.disable()
        self._cells = self._primitives = self._param_grads = None

    def _installers(self) -> list[Callable[[], Handle]]:
        installers: list[Callable[[], Handle]] = []
        if self._api_patches is not None:
            installers += [self._api_patches.install, lambda: patch_jit(self._run_api),
                           lambda: install_custom_apis(self._run_api)]
        installers += [part.install for part in (self._cells, self._param_grads, self._primitives) if part is not None]
        return [reads.synchronous_capture, *installers, self._guards.install]

    # recording -----------------------------------------------------------------------------------

    def _run_api(self, prefix: str, api: str, original: Callable, args: tuple, kwargs: dict,
                 mutates: bool) -> Any:
        reporter = self._reporter
        if reporter.paused:
            if mutates:
                reads.settle()  # an in-place call inside a recorded one (whose inputs wait to be read)
            return original(*args, **kwargs)
        # A jit function is a whole compiled graph that may update Parameters (an optimizer's
        # construct): running it again would apply its side effects twice, so it is never re-run.
        # A re-run records gradients as the call did, so a replacement output joins the graph alike.
        recording = grad_enabled()
        rerun = None if prefix == "Jit" else reporter.unrecorded(original, lambda: grad_recording_as(recording))
        with reporter.pause():  # calls made inside this one are not the user's (outermost calls only)
            started = reporter.start_api(prefix, api, args, kwargs, mutates=mutates, rerun=rerun)
            if mutates or prefix == "Jit":  # a jit function may update Parameters
                reads.settle()  # what the inputs hold before the call changes them (msprobe.mindspore.reads)
            capture = None
            if started.wants_backward and not mutates and grad_is_recording():
                capture = BackwardCapture(self._order, started.call, differentiable_inputs(args, kwargs))
            output = reporter.end(started, original(*args, **kwargs))
            if capture is not None:
                capture.arm(differentiable_outputs(output))
            return output

    def _cell_start(self, path: str, cls: str, args: tuple) -> Started | None:
        if self._reporter.paused:
            return None
        return self._reporter.start_module("Cell", path, cls, args, {})

    def _cell_end(self, started: Started, output: Any) -> None:
        self._reporter.end(started, output)
