"""Backward capture in PyNative mode, for API calls and cells alike: the gradients flowing into a call's
outputs and those it gives its inputs.

The capture only *watches* MindSpore's gradient graph; it never puts a node of its own into it. An
identity node between the user's tensors and the call (``ops.HookBackward`` around each call's inputs,
or ``Cell.register_backward_hook``, which wraps the cell's inputs and outputs in a ``CellBackwardHook``)
changes the order in which gradients are summed: a cell that reads its input twice (``RMSNorm``: ``x * x``
and ``x * ...``) while the input also feeds a residual add has its two contributions summed first inside
the identity node, then added to the residual one, ``a + (b + c)`` instead of ``(a + b) + c``: one ULP
of drift per Adam step.

MindSpore 2.10's PyNative graph is visible from Python, as PyTorch's is: a tensor's ``_grad_node`` (a
``BackwardNode``, with ``next_functions``, ``_sequence_nr()`` and read-only ``register_hook``) and its
``_output_index``. So the capture notes, when the call starts, each input's gradient edge (its node and
output slot); when the call returns it walks back from the outputs (and from inputs changed in place)
through the nodes created during the call; those with an edge to an input's edge are the call's
*consumers* of that input. A post-hook on each consumer sees exactly the gradient it sends to the input;
a hook on each output tensor sees the gradient flowing into the call. Hooks only read, so the numbers of
the run do not change.

MindSpore numbers nodes as it creates them but does not say which number is next, so "created during the
call" is "numbered after the newest node among the call's inputs": a tensor made after the call's inputs
and used inside the call without being passed to it (an attribute, a closure) is walked through as if the
call had made it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import mindspore
from mindspore import ops
from msprobe.core.events import Call
from msprobe.core.log import logger
from msprobe.mindspore.private_api import _pynative_executor

Emit = Callable[[Call, tuple, tuple], None]

_add = ops.add  # taken at import, before msprobe's own API patches can replace it
_GRAPH_VISIBLE = all(hasattr(mindspore.Tensor, name) for name in ("_grad_node", "_output_index"))
if not _GRAPH_VISIBLE:
    logger.warning("this MindSpore does not show its gradient graph (Tensor._grad_node, _output_index): "
                   "backward entries are not written; forward entries and the run's numbers are unaffected")


def grad_is_recording() -> bool:
    """True inside ``mindspore.grad`` / ``value_and_grad`` in PyNative mode (the only time a gradient
    graph is built to capture), where this MindSpore shows that graph. MindSpore exposes the former only
    on its private executor object."""
    return _GRAPH_VISIBLE and bool(_pynative_executor.requires_grad())


def grad_enabled() -> bool:
    """Whether ops are recorded for gradients now (``grad_recording_as`` restores this setting)."""
    return bool(_pynative_executor.enable_grad())


class grad_recording_as:
    """Gradient recording switched on or off for a block, and restored after it."""

    def __init__(self, enabled: bool) -> None:
        self._enabled = enabled

    def __enter__(self) -> None:
        self._previous = _pynative_executor.enable_grad()
        _pynative_executor.set_enable_grad(self._enabled)

    def __exit__(self, *exc: object) -> None:
        _pynative_executor.set_enable_grad(self._previous)


class grad_recording_off(grad_recording_as):
    """Keeps the sink's own ops (statistics, copies) out of the gradient graph: recording them there
    would make each of them an order of magnitude slower and grow the graph (``mindspore._no_grad``
    does the same through the same private executor)."""

    def __init__(self) -> None:
        super().__init__(False)


def _is_differentiable(value: Any) -> bool:
    return isinstance(value, mindspore.Tensor) and (value.is_floating_point() or value.is_complex())


class TensorSlots:
    """Where the differentiable tensors of an argument structure sit (a call's inputs and outputs in its
    backward entry; shared with the free benchmark, whose recomputed gradients must line up with the
    captured ones): top-level positions and one level of list/tuple (``ops.cat([a, b])``)."""

    def __init__(self, args: tuple, kwargs: dict) -> None:
        self.places: list[tuple] = []
        for i, value in enumerate(args):
            self._visit(("a", i), value)
        for key, value in kwargs.items():
            self._visit(("k", key), value)

    def _visit(self, place: tuple, value: Any) -> None:
        if _is_differentiable(value):
            self.places.append((place, None))
        elif isinstance(value, (list, tuple)):
            self.places.extend((place, j) for j, item in enumerate(value) if _is_differentiable(item))

    def get(self, args: tuple, kwargs: dict) -> list:
        return [self._read(args, kwargs, place, j) for place, j in self.places]

    @staticmethod
    def _read(args: tuple, kwargs: dict, place: tuple, j: int | None) -> Any:
        value = args[place[1]] if place[0] == "a" else kwargs[place[1]]
        return value if j is None else value[j]

    def put(self, args: tuple, kwargs: dict, tensors: list) -> tuple[tuple, dict]:
        new_args, new_kwargs = list(args), dict(kwargs)
        for ((kind, key), j), tensor in zip(self.places, tensors):
            holder = new_args if kind == "a" else new_kwargs
            if j is None:
                holder[key] = tensor
            else:
                items = list(holder[key])
                items[j] = tensor
                holder[key] = rebuild(holder[key], items)
        return tuple(new_args), new_kwargs


def rebuild(container: list | tuple, items: list) -> list | tuple:
    """``items`` in a container of the same type as ``container`` (namedtuples included)."""
    if isinstance(container, list):
        return items
    if hasattr(container, "_fields"):
        return type(container)(*items)
    return type(container)(items)


def differentiable_inputs(args: tuple, kwargs: dict) -> list:
    """The tensors a backward entry's ``output`` has one gradient for, in :class:`TensorSlots` order."""
    return TensorSlots(args, kwargs).get(args, kwargs)


def differentiable_outputs(output: Any) -> list:
    """The tensors a backward entry's ``input`` has one gradient for: the output itself, or the
    differentiable items of a tuple/list output."""
    if _is_differentiable(output):
        return [output]
    if isinstance(output, (tuple, list)):
        return differentiable_inputs(tuple(output), {})
    return []


class EmitOrder:
    """The order in which finished captures are reported to ``emit(call, grad_input, grad_output)``: a
    call's entry after the entries of the calls made inside it (a cell after its APIs, as msprobe 1.1.1
    lists them).

    A cell's consumers can finish before an API inside it does (a weight's transpose runs after the
    matmul that gave the cell's input its gradient), so a finished capture that waited for its inputs'
    gradients waits too while a capture started inside it has received gradients in this pass and not
    finished. One whose inputs need no gradient is complete as soon as its outputs' gradients arrive. At
    the end of each backward pass whatever is still waiting from that pass is reported with the gradients
    that arrived (a branch the loss does not use never runs its consumers).
    """

    def __init__(self, emit: Emit) -> None:
        self._emit = emit
        self.serial = 0  # captures made so far: a capture's number says when its call started
        self._running: list[BackwardCapture] = []  # received gradients in this pass, not yet reported
        self._flush_queued: set[int] = set()  # the backward passes that will flush at their end

    def started(self, capture: BackwardCapture) -> None:
        self._running.append(capture)
        task = capture.task
        if task not in self._flush_queued:
            self._flush_queued.add(task)
            _pynative_executor.queue_backward_final_callback(functools.partial(self._flush, task))

    def finished(self) -> None:
        self._drain(force=None)

    def forget(self) -> None:
        """Drop what a backward pass that never ended (an exception inside it) left waiting."""
        self._running.clear()
        self._flush_queued.clear()

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

    ``grad_input``: one gradient per differentiable output (:func:`differentiable_outputs`, ``None``
    where none flowed). ``grad_output``: one per differentiable input (:func:`differentiable_inputs`),
    ``None`` where the input needs no gradient or got none from this call. A tensor passed twice gets,
    at each position, the whole gradient the call gave it.
    """

    __slots__ = (
        "call", "_order", "_serial", "_last", "_start", "_inputs", "_slots_of", "_input_count", "_outputs",
        "_hooked_outputs", "_consumers", "waits_for_inputs", "_started", "complete", "_output_grads",
        "_input_grads", "_fired_outputs", "_fired_consumers", "task",
    )

    def __init__(self, order: EmitOrder, call: Call, inputs: list) -> None:
        self.call = call
        self._order = order
        self._serial = self._last = order.serial
        order.serial += 1
        self._inputs = inputs  # until arm()
        self._slots_of, self._start = _input_edges(inputs)
        self._input_count = len(inputs)
        self._outputs = self._hooked_outputs = self._consumers = 0
        self.waits_for_inputs = False
        self._started = self.complete = False
        self._output_grads = self._input_grads = None  # per backward pass, from its first gradient on
        self.task = -1  # the backward pass its gradients arrive in

    def arm(self, outputs: list) -> None:
        """The call returned ``outputs`` (:func:`differentiable_outputs`): hook them and the nodes the
        call created that consume its inputs."""
        self._last = self._order.serial
        self._outputs = len(outputs)
        roots = []
        for index, out in enumerate(outputs):
            node = out._grad_node
            if node is not None and not node.is_leaf():
                out.register_hook(_OutputHook(self, index))
                roots.append(node)
        self._hooked_outputs = len(roots)
        if self._slots_of:
            for value in self._inputs:  # an input changed in place has a new node the call created
                node = value._grad_node
                if node is not None and (node._unique_id(), value._output_index) not in self._slots_of:
                    roots.append(node)
            consumers = self._find_consumers(roots)
            for node, pairs in consumers.values():
                node.register_hook(_ConsumerHook(self, tuple(pairs)))
            self._consumers = len(consumers)
            self.waits_for_inputs = self._consumers > 0
        self._inputs = self._slots_of = None

    def _find_consumers(self, todo: list) -> dict[int, tuple[Any, list[tuple[int, int]]]]:
        """Nodes created during the call, walked back from ``todo`` → (node, [(index among its next edges,
        input slot)]) for every edge that leads to an input's edge as it was when the call started."""
        slots_of, start = self._slots_of, self._start
        consumers: dict[int, tuple[Any, list[tuple[int, int]]]] = {}
        seen: set[int] = set()
        while todo:
            node = todo.pop()
            uid = node._unique_id()
            if uid in seen or node._sequence_nr() <= start:
                continue
            seen.add(uid)
            for index, (next_node, slot) in enumerate(node.next_functions):
                if next_node is None:
                    continue
                edge = slots_of.get((next_node._unique_id(), slot))
                if edge is not None:
                    pairs = consumers.setdefault(uid, (node, []))[1]
                    pairs.extend((index, input_slot) for input_slot in edge)
                elif not next_node.is_leaf():
                    todo.append(next_node)
        return consumers

    def encloses_any(self, captures: list[BackwardCapture]) -> bool:
        """One of ``captures`` was made while this call ran (an API inside a cell)."""
        serial, last = self._serial, self._last
        return any(serial < other._serial < last for other in captures)

    # ---- backward side ------------------------------------------------------------------------
    def _arrived(self) -> bool:
        """The first gradient of this backward pass: start afresh and tell the order. False for a gradient
        that arrives after the capture was reported in this pass (an output that is an input passed
        through gets its gradient once every use of it, the call's own consumers included, has run)."""
        task = _pynative_executor.get_current_autodiff_engine_id()
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

    def _output_arrived(self, index: int, grad: mindspore.Tensor) -> None:
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
            grad = grad_inputs[index] if index < len(grad_inputs) else None
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


class _OutputHook:
    """The hook on output ``index`` of a call; it hands the gradient on unchanged (a MindSpore tensor
    hook must return one)."""

    __slots__ = ("_capture", "_index")

    def __init__(self, capture: BackwardCapture, index: int) -> None:
        self._capture = capture
        self._index = index

    def __call__(self, grad: mindspore.Tensor) -> mindspore.Tensor:
        self._capture._output_arrived(self._index, grad)
        return grad


class _ConsumerHook:
    """The post-hook on a consumer node: ``pairs`` are its (next-edge index, input slot) pairs."""

    __slots__ = ("_capture", "_pairs")

    def __init__(self, capture: BackwardCapture, pairs: tuple[tuple[int, int], ...]) -> None:
        self._capture = capture
        self._pairs = pairs

    def __call__(self, grad_inputs: tuple, _grad_outputs: tuple) -> None:
        self._capture._consumer_ran(self._pairs, grad_inputs)


def _input_edges(inputs: list) -> tuple[dict[tuple[int, int], list[int]], int]:
    """Where each input's gradient flows when the call starts, (node id, output slot) → the input slots
    whose gradient flows there; and the newest of those nodes' numbers (-1 when all are leaves), after
    which every node the call creates is numbered. An input without a node needs no gradient."""
    slots_of: dict[tuple[int, int], list[int]] = {}
    start = -1
    for slot, value in enumerate(inputs):
        node = value._grad_node
        if node is None:
            continue
        slots_of.setdefault((node._unique_id(), value._output_index), []).append(slot)
        if not node.is_leaf():
            start = max(start, node._sequence_nr())
    return slots_of, start


def _sum(previous: mindspore.Tensor, grad: mindspore.Tensor) -> mindspore.Tensor:
    """Two gradients the call gave one input, summed outside the gradient graph."""
    with grad_recording_off():
        return _add(previous, grad)
