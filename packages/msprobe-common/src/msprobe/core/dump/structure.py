"""Task ``structure``: the cheapest dump, for the graph view (docs/graph.md#structure-dumps).

Every selected call is placed in construct.json (its parent module, or null; at every level, so an L1
structure dump also lists its APIs) and its user stack in stack.json, and nothing is read of any tensor:
no statistics, no checksum, no host transfer. dump.json is written with empty ``data``, as msprobe 26.2.0
writes it, so every reader finds the step's files where a dump keeps them.
"""

from __future__ import annotations

from typing import Any

from msprobe.core.contract import Call, TensorAdapter
from msprobe.core.dump.collector import CallState, DumpCollector
from msprobe.core.dump.json_files import DumpIdentity
from msprobe.core.lifecycle.naming import backward_name
from msprobe.core.lifecycle.select import Selector


class StructureCollector(DumpCollector):
    """The dump collector's spans, stacks and construct.json, without its entries."""

    def __init__(self, identity: DumpIdentity, selector: Selector, adapter: TensorAdapter) -> None:
        super().__init__(identity, selector, adapter)
        self.parts.output.with_construct = True  # at L1 too: construct.json is what this task is for
        self._selected: CallState[bool] = CallState("structure call")

    def forward_start(self, call: Call) -> bool:
        if not self.parts.spans.enter(call):
            return False
        self.parts.output.add_stack(call.name)
        self._selected.put(call, True)
        return self.selector.wants(backward_name(call.name))

    def forward_end(self, call: Call, output: Any) -> None:
        self.parts.spans.leave(call)
        if self._selected.take(call):
            self.parts.output.add_construct(call.name, self.parts.spans.parent(call.name))

    def backward(self, call: Call, grad_input: tuple, grad_output: tuple) -> None:
        name = backward_name(call.name)
        if self.parts.output.active and self.selector.begin(name):
            self.parts.output.add_construct(name, self.parts.spans.backward_parent(call.name))

    def parameters_grad(self, name: str, grads: dict) -> None:
        """No entries, so no parameter gradients: nothing of a tensor is read."""
