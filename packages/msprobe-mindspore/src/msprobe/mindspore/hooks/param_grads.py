"""Levels L0 and mix on MindSpore: each cell's parameter gradients of one backward pass as one entry,
``Cell.{path}.{Class}.parameters_grad.{n}`` (docs/dump_format.md#parameters_grad).

A tensor hook (PyNative) on every parameter that requires a gradient receives the gradient
``mindspore.grad``/``value_and_grad`` computes for it; when every such parameter of a cell has reported, the
cell's gradients go to the reporter together. MindSpore has no end-of-backward callback, so a cell some of
whose parameters got no gradient is reported with those it got when one of them reports again (the next
pass) or when capture stops. The hooks return None, so no gradient changes; the hooks are removed when
capture stops, never from inside one (MindSpore crashes when a hook removes itself).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from mindspore import nn
from msprobe.core.lifecycle.calls import CallReporter
from msprobe.core.lifecycle.naming import safe_module_parts
from msprobe.core.services.handles import Handle, HandleGroup, Removable


class _CellGrads:
    """One cell's trainable parameters and the gradients of the current pass that have arrived."""

    __slots__ = ("path", "cls", "expected", "ready")

    def __init__(self, path: str, cls: str, expected: int) -> None:
        self.path, self.cls, self.expected = path, cls, expected
        self.ready: dict[str, Any] = {}  # parameter name → its gradient, in the order they arrived


class ParameterGradHooks:
    """The gradient hooks of every named sub-cell's own trainable parameters."""

    def __init__(self, reporter: CallReporter, model: nn.Cell) -> None:
        self._reporter = reporter
        self._cells: list[tuple[_CellGrads, list[tuple[str, Any]]]] = []
        for path, cell in model.cells_and_names():
            params = [(name, p) for name, p in cell._params.items() if p is not None and p.requires_grad]
            if path and params:  # the root is not named (docs/dump_format.md#entry-names)
                safe_path, cls = safe_module_parts(path, type(cell).__name__)
                self._cells.append((_CellGrads(safe_path, cls, len(params)), params))

    def install(self) -> HandleGroup:
        """Register the hooks; the handle reports what is partial, then removes them."""
        return HandleGroup(self._register())

    def _register(self) -> Iterator[Removable]:
        for grads, params in self._cells:
            for name, param in params:
                yield param.register_hook(self._hook(grads, name))
        yield Handle(self._flush)  # removed first (the last added): capture is still on

    def _hook(self, grads: _CellGrads, name: str) -> Any:
        def arrived(grad: Any) -> None:
            if not self._reporter.sees_calls:
                return
            if name in grads.ready:  # a new pass while the last one left this cell partial
                self._report(grads)
            grads.ready[name] = grad
            if len(grads.ready) == grads.expected:
                self._report(grads)

        return arrived

    def _report(self, grads: _CellGrads) -> None:
        ready, grads.ready = grads.ready, {}
        self._reporter.parameters_grad("Cell", grads.path, grads.cls, ready)

    def _flush(self) -> None:
        for grads, _ in self._cells:
            if grads.ready:
                self._report(grads)
