"""Backward capture for one call: the gradients of its outputs and those it gives its inputs.

The capture only *watches* the autograd graph the call built; it never puts a node of its own into
it. An identity node between the user's tensors and the call (an alias ``autograd.Function``, or
PyTorch's full backward hooks) changes two things the user can see:

- the order in which gradients are summed: a module that reads its input twice (``RMSNorm``: ``x.pow``
  and ``x * ...``) while the input also feeds a residual ``add`` would have its two contributions
  summed first inside the identity node, then added to the residual one — ``a + (b + c)`` instead of
  ``(a + b) + c``, one ULP of drift per step;
- in-place modules: ``nn.ReLU(inplace=True)`` applied to an alias rewrites the alias's history, not
  the user's tensor's, so gradients would skip the ReLU.

So the capture notes, when the call starts, the autograd sequence number and each input's gradient
edge (the node and output slot its gradient flows into). When the call ends it walks back from the
outputs (and from inputs mutated in place) through the nodes created during the call; those with an
edge to an input's old edge are the call's *consumers* of that input. A post-hook on each consumer sees
exactly the gradient it sends to the input; a hook on each output tensor sees the gradient flowing
into the call. Hooks only read, so the numbers of the run do not change.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import torch
from torch._C._autograd import _get_sequence_nr

Emit = Callable[[tuple, tuple], None]

_engine = torch.autograd.Variable._execution_engine
_serials = itertools.count()
_LEAF = -1  # the output slot of a leaf's edge in :func:`_edge`: a leaf is matched by its accumulator's variable
_ACCUMULATE_GRAD = "AccumulateGrad"  # type name of the node a leaf's gradient flows into


def _edge(tensor: torch.Tensor) -> tuple[Any, int] | None:
    """Where ``tensor``'s gradient flows: its ``grad_fn`` and output slot, or ``(tensor, _LEAF)`` for a leaf
    (its gradient accumulator, found by :meth:`BackwardCapture._find_consumers` as the node whose
    ``variable`` is the tensor: asking for the accumulator itself, ``get_gradient_edge``, runs a
    ``view_as`` and cost ~15 µs per parameter per call)."""
    if not tensor.requires_grad:
        return None
    node = tensor.grad_fn
    if node is None:
        return tensor, _LEAF
    return node, tensor.output_nr


class EmitOrder:
    """The order in which finished captures are reported: a call's entry after the entries of the calls
    made inside it (a module after its APIs, as msprobe 1.1.1 lists them).

    A module's consumers can finish before an API inside it does (``F.linear``'s gradient for the weight
    is computed after the one for the input), so a finished capture that waited for its inputs'
    gradients waits too while a capture nested in it has received gradients in this pass and not
    finished. One whose inputs need no gradient is complete as soon as its outputs' gradients arrive, and
    is reported at once. At the end of each backward pass whatever is still waiting is reported with the
    gradients that arrived.
    """

    def __init__(self) -> None:
        self._running: list[BackwardCapture] = []  # received gradients in this pass, not yet reported
        self._flush_queued = False

    def started(self, capture: BackwardCapture) -> None:
        self._running.append(capture)
        if not self._flush_queued:
            self._flush_queued = True
            _engine.queue_callback(self._flush)

    def finished(self) -> None:
        self._drain(force=False)

    def _flush(self) -> None:
        self._flush_queued = False
        self._drain(force=True)

    def _drain(self, force: bool) -> None:
        progress = True
        while progress:
            progress = False
            for capture in self._running:
                if (force or capture.complete) and not (capture.waits_for_inputs and any(
                    other is not capture and other.nested_in(capture) for other in self._running
                )):
                    self._running.remove(capture)
                    capture.report()
                    progress = True
                    break


class BackwardCapture:
    """Collects one call's gradients and hands them to ``emit(grad_input, grad_output)``.

    ``grad_input``: one gradient per tensor output (``None`` when none flowed). ``grad_output``: one
    per tensor input in argument order, ``None`` where the input needs no gradient or got none from
    this call. A tensor passed twice gets, at each position, the whole gradient the call gave it.

    The entry is emitted when every consumer has run, or — when some never run (a branch the loss
    does not use) — at the end of that backward pass with what arrived.
    """

    def __init__(self, emit: Emit, order: EmitOrder, flat_inputs: list) -> None:
        self._emit = emit
        self._order = order
        self._serial = next(_serials)  # calls begin in this order; an outer call before those inside it
        self._start = _get_sequence_nr()  # every node the call creates has a number at least this
        self._end = self._start
        self._inputs = [v for v in flat_inputs if isinstance(v, torch.Tensor)]  # until arm()
        self._input_edges = [_edge(v) for v in self._inputs]
        self._consumers = 0
        self._outputs = 0
        self._reset_pass()

    def _reset_pass(self) -> None:
        self._output_grads: list[torch.Tensor | None] = [None] * self._outputs
        self._input_grads: list[torch.Tensor | None] = [None] * len(self._input_edges)
        self._fired_consumers = 0
        self._fired_outputs = 0
        self._started = False
        self.complete = False

    def arm(self, flat_outputs: list) -> None:
        """The call returned: hook its tensor outputs and the nodes it created that consume inputs."""
        self._end = _get_sequence_nr()
        self._outputs = len(flat_outputs)
        hooked: list[torch.Tensor] = []
        for i, out in enumerate(flat_outputs):
            if isinstance(out, torch.Tensor) and out.grad_fn is not None:
                out.register_hook(self._output_hook(i))
                hooked.append(out)
        self._hooked_outputs = len(hooked)
        if any(edge is not None for edge in self._input_edges):
            # inputs changed in place have a new grad_fn created by the call; it is a root of the walk too
            roots = hooked + [v for v in self._inputs if v.grad_fn is not None]
            for node, slots in self._find_consumers(roots).items():
                node.register_hook(self._consumer_hook(slots))
                self._consumers += 1
        self._inputs = []
        self._reset_pass()

    def _find_consumers(self, roots: list[torch.Tensor]) -> dict[Any, list[tuple[int, int]]]:
        """Nodes created during the call → [(index among their next edges, input slot)] for every edge
        that leads to an input's edge as it was when the call started."""
        slots_of: dict[tuple[int, int], list[int]] = {}
        for slot, edge in enumerate(self._input_edges):
            if edge is not None:
                slots_of.setdefault((id(edge[0]), edge[1]), []).append(slot)
        consumers: dict[Any, list[tuple[int, int]]] = {}
        seen: dict[int, Any] = {}  # holds the node objects, so that no id is reused during the walk
        todo = [t.grad_fn for t in roots]
        while todo:
            node = todo.pop()
            if node is None or id(node) in seen or node._sequence_nr() < self._start:
                continue
            seen[id(node)] = node
            for index, (next_node, output_nr) in enumerate(node.next_functions):
                if next_node is None:
                    continue
                if type(next_node).__name__ == _ACCUMULATE_GRAD:
                    slots = slots_of.get((id(next_node.variable), _LEAF))
                    if slots is not None:
                        consumers.setdefault(node, []).extend((index, slot) for slot in slots)
                    continue  # an accumulator ends the walk
                slots = slots_of.get((id(next_node), output_nr))
                if slots is not None:
                    consumers.setdefault(node, []).extend((index, slot) for slot in slots)
                else:
                    todo.append(next_node)
        return consumers

    @property
    def waits_for_inputs(self) -> bool:
        return self._consumers > 0

    def nested_in(self, outer: BackwardCapture) -> bool:
        """This call was made while ``outer`` ran (an API inside a module)."""
        return outer._serial < self._serial and self._end <= outer._end

    # ---- backward side ------------------------------------------------------------------------
    def _output_hook(self, index: int) -> Callable:
        def hook(grad: torch.Tensor) -> None:
            self._arrived()
            self._output_grads[index] = grad
            self._fired_outputs += 1
            if self._consumers == 0 and self._fired_outputs == self._hooked_outputs:
                self._finish()

        return hook

    def _consumer_hook(self, slots: list[tuple[int, int]]) -> Callable:
        def hook(grad_inputs: tuple, _grad_outputs: tuple) -> None:
            self._arrived()
            with torch.no_grad():
                for index, slot in slots:
                    grad = grad_inputs[index]
                    if grad is not None:
                        previous = self._input_grads[slot]
                        self._input_grads[slot] = grad if previous is None else previous + grad
            self._fired_consumers += 1
            if self._fired_consumers == self._consumers:
                self._finish()

        return hook

    def _arrived(self) -> None:
        if not self._started:
            self._started = True
            self._order.started(self)

    def _finish(self) -> None:
        self.complete = True
        self._order.finished()

    def report(self) -> None:
        """Hand what arrived in this pass to ``emit``; the next backward pass starts afresh."""
        grad_input, grad_output = tuple(self._output_grads), tuple(self._input_grads)
        self._reset_pass()
        self._emit(grad_input, grad_output)
