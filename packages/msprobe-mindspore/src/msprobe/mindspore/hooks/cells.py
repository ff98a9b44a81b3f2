"""Cell forward hooks for L0 and mix (``Cell.{path}.{Class}.{direction}.{count}``), and the capture of
each cell call's backward.

The hooks exist only while recording (registered by :meth:`CellHooks.install`, removed by the handle it
returns), so an idle model runs without them. The backward is captured as for an API call
(:class:`~msprobe.mindspore.hooks.backward.BackwardCapture`: read-only hooks on the gradient graph the
cell built), not with ``Cell.register_backward_hook``, whose identity node around the cell changes the
order in which its input's gradients are summed. A cell may run inside itself (recursion through a
shared sub-cell), so each cell keeps a stack of its calls still running.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from mindspore import nn
from msprobe.core.lifecycle.calls import Started
from msprobe.core.services.handles import Handle, HandleGroup, Removable
from msprobe.core.lifecycle.naming import safe_module_parts
from msprobe.mindspore.hooks.backward import (
    BackwardCapture,
    EmitOrder,
    differentiable_inputs,
    differentiable_outputs,
)

CellStart = Callable[[str, str, tuple], "Started | None"]
CellEnd = Callable[[Started, Any], None]
_Running = tuple["Started | None", "BackwardCapture | None"]


class CellHooks:
    """Hooks on every sub-cell of ``model`` (the root is not named, docs/dump_format.md#entry-names);
    backward entries go to ``order`` when ``wants_backward()`` says a gradient graph is being built."""

    def __init__(self, model: nn.Cell, start: CellStart, end: CellEnd, order: EmitOrder,
                 wants_backward: Callable[[], bool]) -> None:
        self._cells = [(path, cell) for path, cell in model.cells_and_names() if path]
        self._start, self._end, self._order = start, end, order
        self._wants_backward = wants_backward
        self._running: dict[int, list[_Running]] = {}

    def install(self) -> HandleGroup:
        """Register the hooks; the handle removes them and forgets the calls still running."""
        return HandleGroup(self._register())

    def _register(self) -> Iterator[Removable]:
        yield Handle(self.forget_pending)
        for path, cell in self._cells:
            yield cell.register_forward_pre_hook(self._pre_hook(path))
            yield cell.register_forward_hook(self._post_hook)

    def forget_pending(self) -> None:
        """Drop forwards that never returned (an exception inside a cell)."""
        self._running.clear()

    def _pre_hook(self, path: str) -> Callable:
        def pre(cell: nn.Cell, args: tuple) -> None:
            # a cell registered as "a/b" or "x\ny" is named repaired rather than raising in the forward
            started = self._start(*safe_module_parts(path, type(cell).__name__), args)
            capture = None
            if started is not None and started.wants_backward and self._wants_backward():
                capture = BackwardCapture(self._order, started.call, differentiable_inputs(args, {}))
            self._running.setdefault(id(cell), []).append((started, capture))

        return pre

    def _post_hook(self, cell: nn.Cell, args: tuple, output: Any) -> None:
        running = self._running.get(id(cell))
        started, capture = running.pop() if running else (None, None)
        if started is None:
            return
        self._end(started, output)
        if capture is not None:
            capture.arm(differentiable_outputs(output))
