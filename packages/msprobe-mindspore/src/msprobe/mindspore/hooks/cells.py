"""Cell forward and backward hooks for L0 and mix (``Cell.{path}.{Class}.{direction}.{count}``).

The hooks exist only while recording (registered by :meth:`CellHooks.install`, removed by the handle it
returns), so an idle model runs without them. A cell may run several times in a step;
its backward hooks fire in the reverse order of its forwards, so each cell keeps a stack of the forward
calls still waiting for their backward.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from mindspore import nn
from msprobe.core.calls import Started
from msprobe.core.events import Call
from msprobe.core.handles import Handle, HandleGroup, Removable
from msprobe.core.naming import safe_module_parts

CellStart = Callable[[str, str, tuple], "Started | None"]
CellEnd = Callable[[Started, Any], None]
CellBackward = Callable[[Call, tuple, tuple], None]


class CellHooks:
    """Hooks on every sub-cell of ``model`` (the root is not named, SPEC 4.1)."""

    def __init__(self, model: nn.Cell, start: CellStart, end: CellEnd, backward: CellBackward,
                 wants_backward: Callable[[], bool]) -> None:
        self._cells = [(path, cell) for path, cell in model.cells_and_names() if path]
        self._start, self._end, self._backward = start, end, backward
        self._wants_backward = wants_backward
        self._running: dict[int, list[Started | None]] = {}
        self._awaiting_backward: dict[int, list[tuple[Call, int]]] = {}  # (call, its argument count)

    def install(self) -> HandleGroup:
        """Register the hooks; the handle removes them and forgets the calls still pending."""
        return HandleGroup(self._register())

    def _register(self) -> Iterator[Removable]:
        yield Handle(self.forget_pending)
        for path, cell in self._cells:
            yield cell.register_forward_pre_hook(self._pre_hook(path))
            yield cell.register_forward_hook(self._post_hook)
            yield cell.register_backward_hook(self._backward_hook)

    def forget_pending(self) -> None:
        """Drop forwards whose backward never came (a step without backward, an exception)."""
        self._running.clear()
        self._awaiting_backward.clear()

    def _pre_hook(self, path: str) -> Callable:
        def pre(cell: nn.Cell, args: tuple) -> None:
            # a cell registered as "a/b" or "x\ny" is named repaired rather than raising in the forward
            name_parts = safe_module_parts(path, type(cell).__name__)
            self._running.setdefault(id(cell), []).append(self._start(*name_parts, args))

        return pre

    def _post_hook(self, cell: nn.Cell, args: tuple, output: Any) -> None:
        running = self._running.get(id(cell))
        started = running.pop() if running else None
        if started is None:
            return
        self._end(started, output)
        if started.wants_backward and self._wants_backward():
            self._awaiting_backward.setdefault(id(cell), []).append((started.call, len(args)))

    def _backward_hook(self, cell: nn.Cell, grad_input: tuple, grad_output: tuple) -> None:
        # MindSpore passes the gradients of the cell's inputs first and those of its outputs second
        # (torch's convention); the sink wants them the other way round (events.CallSink.backward).
        waiting = self._awaiting_backward.get(id(cell))
        if not waiting:
            return
        call, arg_count = waiting.pop()
        produced = tuple(grad_input) if grad_input else (None,) * arg_count
        self._backward(call, tuple(grad_output), produced)
