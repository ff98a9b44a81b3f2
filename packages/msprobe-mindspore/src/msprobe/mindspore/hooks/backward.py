"""Backward capture in PyNative mode, for API calls and cells alike: the gradients flowing into a call's
outputs and those it gives its inputs.

As on PyTorch, the capture only *watches* MindSpore's gradient graph (a tensor's ``_grad_node`` and
``_output_index``): it notes each input's gradient edge at the call's start, walks back from the outputs to
the nodes made during the call that feed an input, and hooks them read-only, so the run's numbers cannot
change. Why not ``ops.HookBackward`` or cell backward hooks, and what "made during the call" means without a
next sequence number: docs/mindspore/dump.md#backward-entries.
"""

from __future__ import annotations

from typing import Any

import mindspore
from mindspore import ops
from mindspore.common import dtype as mstype
from msprobe.core.contract import Call
from msprobe.core.lifecycle import gradients
from msprobe.core.lifecycle.gradients import Emit
from msprobe.core.services.log import logger
from msprobe.mindspore import reads
from msprobe.mindspore.private_api import _pynative_executor

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
    """Gradient recording switched on or off for a block, and restored after it (left alone where it is
    already so: the sink runs inside one of these three times per recorded call)."""

    __slots__ = ("_enabled", "_switched")

    def __init__(self, enabled: bool) -> None:
        self._enabled = enabled
        self._switched = False

    def __enter__(self) -> None:
        self._switched = bool(_pynative_executor.enable_grad()) != self._enabled
        if self._switched:
            _pynative_executor.set_enable_grad(self._enabled)

    def __exit__(self, *exc: object) -> None:
        if self._switched:
            _pynative_executor.set_enable_grad(not self._enabled)


class grad_recording_off(grad_recording_as):
    """Keeps the sink's own ops (statistics, copies) out of the gradient graph: recording them there
    would make each of them an order of magnitude slower and grow the graph (``mindspore._no_grad``
    does the same through the same private executor)."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(False)


# is_floating_point or is_complex, by name: comparing the names costs 20 ns, comparing MindSpore dtypes 250 ns
_DIFFERENTIABLE = frozenset(str(dtype) for dtype in mstype.float_type + mstype.complex_type)


def _is_differentiable(value: Any) -> bool:
    return isinstance(value, mindspore.Tensor) and reads.seen(value).dtype_name in _DIFFERENTIABLE


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


class EmitOrder(gradients.EmitOrder):
    """Core's order of reports (``msprobe.core.lifecycle.gradients``), flushed at the end of each of PyNative's
    backward passes."""

    def __init__(self, emit: Emit) -> None:
        super().__init__(emit, _pynative_executor.queue_backward_final_callback)


class BackwardCapture(gradients.GradientCapture):
    """Watches the gradient graph of ``call`` and counts its gradients in core's
    :class:`~msprobe.core.lifecycle.gradients.GradientCapture`: one per differentiable output
    (:func:`differentiable_outputs`), one per differentiable input (:func:`differentiable_inputs`)."""

    __slots__ = ("_last", "_start", "_inputs", "_slots_of")

    current_pass = staticmethod(_pynative_executor.get_current_autodiff_engine_id)

    def __init__(self, order: EmitOrder, call: Call, inputs: list) -> None:
        super().__init__(order, call, len(inputs))
        self._last = self._serial
        self._inputs = inputs  # until arm()
        self._slots_of, self._start = _input_edges(inputs)

    @staticmethod
    def add(previous: mindspore.Tensor, grad: mindspore.Tensor) -> mindspore.Tensor:
        """Summed outside the gradient graph."""
        with grad_recording_off():
            return _add(previous, grad)

    def arm(self, outputs: list) -> None:
        """The call returned ``outputs`` (:func:`differentiable_outputs`): hook them and the nodes the
        call created that consume its inputs."""
        self._last = self._order.serial
        self._outputs = len(outputs)
        roots = []
        for index, out in enumerate(outputs):
            node = out._grad_node
            if node is not None and not node.is_leaf():
                node.register_prehook(_OutputHook(self, index, out._output_index))
                roots.append(node)
        self._hooked_outputs = len(roots)
        if self._slots_of:
            for value in self._inputs:  # an input changed in place has a new node the call created
                node = value._grad_node
                if node is not None and (node._unique_id(), value._output_index) not in self._slots_of:
                    roots.append(node)
            self.hook_consumers(self._find_consumers(roots).values())
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


class _OutputHook:
    """The pre-hook, on the gradient node that made output ``index`` of a call, that takes the gradient
    flowing into that output (``slot`` among the node's outputs; None where none flowed) before the node
    runs, where a tensor hook would have had it. A node hook is a Python dict entry; a tensor hook
    (``Tensor.register_hook``) goes through PyNative's gradient pipeline and cost ≈ 0.4 ms per call on a
    loaded machine (docs/performance.md#round-8-2026-12-06-metadata-read-once-output-hooks-on-nodes). It
    returns None: the gradients flow on unchanged."""

    __slots__ = ("_capture", "_index", "_slot")

    def __init__(self, capture: BackwardCapture, index: int, slot: int) -> None:
        self._capture = capture
        self._index = index
        self._slot = slot

    def __call__(self, grad_outputs: tuple) -> None:
        grad = grad_outputs[self._slot] if self._slot < len(grad_outputs) else None
        if grad is not None:
            self._capture.output_arrived(self._index, grad)


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
