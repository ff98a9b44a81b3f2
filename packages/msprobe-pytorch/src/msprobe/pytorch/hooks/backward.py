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

Every recorded call comes through here (``tools/bench/percall.py`` measures the cost), so a capture
keeps few objects: what it keeps lives from the forward to the backward, survives the garbage
collector's young generations and brings the collections of the older ones sooner. Its hooks are one
small object each, a consumer's edges a tuple of integers (which the collector stops tracking), and the
state of a backward pass is made when the pass's first gradient arrives.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from typing import Any

import torch
from torch._C._autograd import _get_sequence_nr

Emit = Callable[[Any, tuple, tuple], None]

_engine = torch.autograd.Variable._execution_engine
_graph_task = torch._C._current_graph_task_id
_serials = itertools.count()
_LEAF = -1  # the output slot of a leaf's edge: a leaf is matched by its accumulator's ``variable``
_AccumulateGrad = torch._C._functions.AccumulateGrad  # the node a leaf's gradient flows into


class EmitOrder:
    """The order in which finished captures are reported to ``emit(call, grad_input, grad_output)``: a
    call's entry after the entries of the calls made inside it (a module after its APIs, as msprobe
    1.1.1 lists them).

    A module's consumers can finish before an API inside it does (``F.linear``'s gradient for the weight
    is computed after the one for the input), so a finished capture that waited for its inputs'
    gradients waits too while a capture nested in it has received gradients in this pass and not
    finished. One whose inputs need no gradient is complete as soon as its outputs' gradients arrive, and
    is reported at once. At the end of each backward pass whatever is still waiting from that pass is
    reported with the gradients that arrived. Passes nest: a reentrant checkpoint runs a backward pass of
    its recomputed graph inside the outer one, whose captures go on waiting when the inner pass ends.
    """

    def __init__(self, emit: Emit) -> None:
        self._emit = emit
        self._running: list[BackwardCapture] = []  # received gradients in this pass, not yet reported
        self._flush_queued: set[int] = set()  # the backward passes (graph tasks) that will flush at their end

    def started(self, capture: BackwardCapture) -> None:
        self._running.append(capture)
        task = capture.task
        if task not in self._flush_queued:
            self._flush_queued.add(task)
            _engine.queue_callback(functools.partial(self._flush, task))

    def finished(self) -> None:
        self._drain(force=None)

    def _flush(self, task: int) -> None:
        self._flush_queued.discard(task)
        self._drain(force=task)

    def _drain(self, force: int | None) -> None:
        """Report, first in the running list first, each capture that may be (every one of pass ``force``);
        after each report look again from the start, since it may have been what held back an outer one."""
        running = self._running
        i = 0
        while i < len(running):
            capture = running[i]
            done = capture.complete or capture.task == force
            if done and not (capture.waits_for_inputs and capture.encloses_any(running)):
                del running[i]
                grad_input, grad_output = capture.take_grads()
                self._emit(capture.call, grad_input, grad_output)
                i = 0
            else:
                i += 1


class BackwardCapture:
    """Collects the gradients of ``call`` (what ``order`` hands back to its ``emit`` with them).

    ``grad_input``: one gradient per tensor output (``None`` when none flowed). ``grad_output``: one
    per tensor input in argument order, ``None`` where the input needs no gradient or got none from
    this call. A tensor passed twice gets, at each position, the whole gradient the call gave it.

    The entry is emitted when every consumer has run, or — when some never run (a branch the loss
    does not use) — at the end of that backward pass with what arrived.
    """

    __slots__ = (
        "call", "_order", "_serial", "_start", "_end", "_inputs", "_slots_of", "_input_count", "_outputs",
        "_hooked_outputs", "_consumers", "waits_for_inputs", "_started", "complete", "_output_grads",
        "_input_grads", "_fired_outputs", "_fired_consumers", "task",
    )

    def __init__(self, order: EmitOrder, call: Any, flat_inputs: list) -> None:
        self.call = call
        self._order = order
        self._serial = next(_serials)  # calls begin in this order; an outer call before those inside it
        self._start = _get_sequence_nr()  # every node the call creates has a number at least this
        self._end = self._start
        self._inputs, self._slots_of = _input_edges(flat_inputs)  # both until arm()
        self._input_count = len(self._inputs)
        self._outputs = self._hooked_outputs = self._consumers = 0
        self.waits_for_inputs = False
        self._started = self.complete = False
        self._output_grads = self._input_grads = None  # per backward pass, from its first gradient on
        self.task = -1  # the backward pass (graph task) its gradients arrive in

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
            consumers = self._find_consumers(roots)
            for node, pairs in consumers.items():
                node.register_hook(_ConsumerHook(self, tuple(pairs)))
            self._consumers = len(consumers)
            self.waits_for_inputs = self._consumers > 0
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

    # ---- backward side ------------------------------------------------------------------------
    def _arrived(self) -> bool:
        """The first gradient of this backward pass: start afresh and tell the order. False for a gradient
        that arrives after the capture was reported in this pass: an output that is an input passed through
        (T5's ``position_bias``) gets its gradient only once every use of that tensor, the call's own
        consumers included, has run; it is not reported again."""
        task = _graph_task()
        if task == self.task:
            return False
        self.task = task
        self._started = True
        self.complete = False
        self._output_grads = [None] * self._outputs
        self._input_grads = [None] * self._input_count
        self._fired_outputs = self._fired_consumers = 0
        self._order.started(self)
        return True

    def _output_arrived(self, index: int, grad: torch.Tensor) -> None:
        if not self._started and not self._arrived():
            return
        self._output_grads[index] = grad
        self._fired_outputs += 1
        if self._consumers == 0 and self._fired_outputs == self._hooked_outputs:
            self._finish()

    def _consumer_ran(self, pairs: tuple[tuple[int, int], ...], grad_inputs: tuple) -> None:
        if not self._started and not self._arrived():
            return
        input_grads = self._input_grads
        for index, slot in pairs:
            grad = grad_inputs[index]
            if grad is not None:
                previous = input_grads[slot]
                input_grads[slot] = grad if previous is None else _sum(previous, grad)
        self._fired_consumers += 1
        if self._fired_consumers == self._consumers:
            self._finish()

    def _finish(self) -> None:
        self.complete = True
        self._order.finished()

    def take_grads(self) -> tuple[tuple, tuple]:
        """``(grad_input, grad_output)`` of this pass; the next backward pass starts afresh."""
        grads = tuple(self._output_grads), tuple(self._input_grads)
        self._started = False
        self._output_grads = self._input_grads = None  # the gradients are not kept past their report
        return grads


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
        self._capture._output_arrived(self._index, grad)


class _ConsumerHook:
    """The post-hook on a consumer node: ``pairs`` are its (next-edge index, input slot) pairs."""

    __slots__ = ("_capture", "_pairs")

    def __init__(self, capture: BackwardCapture, pairs: tuple[tuple[int, int], ...]) -> None:
        self._capture = capture
        self._pairs = pairs

    def __call__(self, grad_inputs: tuple, _grad_outputs: tuple) -> None:
        self._capture._consumer_ran(self._pairs, grad_inputs)


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


def _sum(previous: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """Two gradients the call gave one input, summed outside autograd (a backward with
    ``create_graph=True`` records what hooks compute) and out of every function mode's sight (ours is on
    the stack during backward; a user's must not see our calls)."""
    with torch.no_grad(), torch._C.DisableTorchFunction():
        return previous + grad
