"""Backward capture for one call: the gradients of its outputs and those it gives its inputs.

The capture only *watches* the graph the call built: at the call's start it notes autograd's sequence
number and each input's gradient edge; at its end it walks back from the outputs to the nodes made during
the call that feed an input (its *consumers*) and puts read-only hooks on them and on the outputs, so the
run's numbers cannot change. Why not an identity node or full backward hooks, and what an entry holds:
docs/pytorch/dump.md#backward-entries. Every recorded call comes through here, so a capture keeps few,
small objects (``tools/bench/percall.py`` measures the cost): they live from the forward to the backward.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._C._autograd import _get_sequence_nr

from msprobe.core.lifecycle import gradients
from msprobe.core.lifecycle.gradients import Emit

_engine = torch.autograd.Variable._execution_engine
_LEAF = -1  # the output slot of a leaf's edge: a leaf is matched by its accumulator's ``variable``
_AccumulateGrad = torch._C._functions.AccumulateGrad  # the node a leaf's gradient flows into


class EmitOrder(gradients.EmitOrder):
    """Core's order of reports (``msprobe.core.lifecycle.gradients``), flushed at the end of each of autograd's
    backward passes (graph tasks)."""

    def __init__(self, emit: Emit) -> None:
        super().__init__(emit, _engine.queue_callback)


class BackwardCapture(gradients.GradientCapture):
    """Watches the autograd graph of ``call`` and counts its gradients in core's
    :class:`~msprobe.core.lifecycle.gradients.GradientCapture`: one per tensor output, one per tensor input."""

    __slots__ = ("_start", "_end", "_inputs", "_slots_of")

    current_pass = staticmethod(torch._C._current_graph_task_id)

    def __init__(self, order: EmitOrder, call: Any, flat_inputs: list) -> None:
        self._start = _get_sequence_nr()  # every node the call creates has a number at least this
        self._end = self._start
        self._inputs, self._slots_of = _input_edges(flat_inputs)  # both until arm()
        super().__init__(order, call, len(self._inputs))

    @staticmethod
    def add(previous: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
        """Summed outside autograd (a backward with ``create_graph=True`` records what hooks compute) and
        out of every function mode's sight (ours is on the stack during backward; a user's must not see
        our calls)."""
        with torch.no_grad(), torch._C.DisableTorchFunction():
            return previous + grad

    def arm(self, flat_outputs: list) -> None:
        """The call returned: hook its tensor outputs and the nodes it created that consume inputs."""
        self._end = _get_sequence_nr()
        self._outputs = len(flat_outputs)
        roots = []
        for index, out in enumerate(flat_outputs):
            if isinstance(out, torch.Tensor):
                node = out.grad_fn
                if node is not None:
                    out.register_hook(_OutputHook(self, index))
                    roots.append(node)
        self._hooked_outputs = len(roots)
        if self._slots_of:
            # inputs changed in place have a new grad_fn created by the call; it is a root of the walk too
            for v in self._inputs:
                node = v.grad_fn
                if node is not None:
                    roots.append(node)
            self.hook_consumers(self._find_consumers(roots).items())
        self._inputs = self._slots_of = None

    def _find_consumers(self, todo: list) -> dict[Any, list[tuple[int, int]]]:
        """Nodes created during the call, walked back from ``todo`` → [(index among their next edges,
        input slot)] for every edge that leads to an input's edge as it was when the call started."""
        slots_of = self._slots_of
        start = self._start
        consumers: dict[Any, list[tuple[int, int]]] = {}
        seen: dict[int, Any] = {}  # holds the node objects, so that no id is reused during the walk
        while todo:
            node = todo.pop()
            if id(node) in seen or node._sequence_nr() < start:
                continue
            seen[id(node)] = node
            pairs = None
            for index, (next_node, output_nr) in enumerate(node.next_functions):
                if next_node is None:
                    continue
                if type(next_node) is _AccumulateGrad:  # an accumulator ends the walk
                    edge = slots_of.get((id(next_node.variable), _LEAF))
                else:
                    edge = slots_of.get((id(next_node), output_nr))
                    if edge is None:
                        todo.append(next_node)
                        continue
                if edge is not None:
                    if pairs is None:
                        consumers[node] = pairs = []
                    for slot in edge[1]:
                        pairs.append((index, slot))
        return consumers

    def encloses_any(self, captures: list[BackwardCapture]) -> bool:
        """One of ``captures`` was made while this call ran (an API inside a module)."""
        serial, end = self._serial, self._end
        for other in captures:
            if serial < other._serial and other._end <= end:
                return True
        return False


class ReplayCapture(BackwardCapture):
    """The capture of a call replayed by a reentrant checkpoint's recomputation, reported once.

    ``passed``: the outputs that the forward's call passed through with their gradient history, as
    (index, the forward's tensor). In the recomputation they are the checkpoint's detached inputs; their
    gradient is watched on the forward's tensor instead, where a plain run watches it: it arrives in the
    outer backward pass, with every use of the tensor summed. A recomputed graph is back-propagated once,
    so a gradient that arrives after the report (such an output of a call that also has consumers) is not
    reported again.
    """

    __slots__ = ("_passed",)

    def __init__(self, order: EmitOrder, call: Any, flat_inputs: list,
                 passed: tuple[tuple[int, torch.Tensor], ...]) -> None:
        super().__init__(order, call, flat_inputs)
        self._passed = passed

    def arm(self, flat_outputs: list) -> None:
        passed, self._passed = self._passed, ()
        outputs = list(flat_outputs)
        for index, _ in passed:
            outputs[index] = None  # watched on the forward's tensor
        super().arm(outputs)
        for index, tensor in passed:
            tensor.register_hook(_OutputHook(self, index))
        self._hooked_outputs += len(passed)

    def _arrived(self) -> bool:
        return self.task == -1 and super()._arrived()


class _OutputHook:
    """The hook on output ``index`` of a call (one object: a closure would be three)."""

    __slots__ = ("_capture", "_index")

    def __init__(self, capture: BackwardCapture, index: int) -> None:
        self._capture = capture
        self._index = index

    def __call__(self, grad: torch.Tensor) -> None:
        self._capture.output_arrived(self._index, grad)


def _input_edges(flat_inputs: list) -> tuple[list[torch.Tensor], dict[tuple[int, int], tuple[Any, list[int]]]]:
    """The tensor inputs, and where each one's gradient flows when the call starts → (what holds that
    place, the slots of the inputs whose gradient flows there).

    An input's place is its ``grad_fn`` and output slot, or for a leaf the tensor itself with
    :data:`_LEAF` (its gradient accumulator is found by :meth:`BackwardCapture._find_consumers` as the
    node whose ``variable`` is the tensor: asking for the accumulator itself, ``get_gradient_edge``,
    runs a ``view_as`` and cost ~15 µs per parameter per call). Keys are ids; the values hold the
    objects, so that no id is reused until the walk is done.
    """
    inputs: list[torch.Tensor] = []
    slots_of: dict[tuple[int, int], tuple[Any, list[int]]] = {}
    for value in flat_inputs:
        if not isinstance(value, torch.Tensor):
            continue
        if value.requires_grad:
            node = value.grad_fn
            if node is None:
                holder, key = value, (id(value), _LEAF)
            else:
                holder, key = node, (id(node), value.output_nr)
            edge = slots_of.get(key)
            if edge is None:
                slots_of[key] = (holder, [len(inputs)])
            else:
                edge[1].append(len(inputs))
        inputs.append(value)
    return inputs, slots_of
