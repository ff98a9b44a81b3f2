"""The framework-free half of backward capture: a call's gradients counted as they arrive, and the order
in which finished captures are reported (docs/pytorch/dump.md#backward-entries).

Each framework watches its own autograd graph (``msprobe.pytorch.hooks.backward``,
``msprobe.mindspore.hooks.backward``): it hooks a call's outputs and the nodes that give its inputs their
gradients, and hands what its hooks see to a :class:`GradientCapture`, which knows nothing of the
framework but which backward pass is running (``current_pass``) and how two gradients are added (``add``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

Emit = Callable[[Any, tuple, tuple], None]


class EmitOrder:
    """The order in which finished captures are reported to ``emit(call, grad_input, grad_output)``: a
    call's entry after the entries of the calls made inside it (a module or cell after its APIs, as
    msprobe 1.1.1 lists them).

    A module's consumers can finish before an API inside it does (``linear``'s gradient for the weight
    is computed after the one for the input), so a finished capture that waited for its inputs'
    gradients waits too while a capture nested in it has received gradients in this pass and not
    finished. One whose inputs need no gradient is complete as soon as its outputs' gradients arrive, and
    is reported at once. At the end of each backward pass (``at_pass_end`` queues a callback there)
    whatever is still waiting from that pass is reported with the gradients that arrived (a branch the
    loss does not use never runs its consumers). Passes nest: a reentrant checkpoint runs a backward
    pass of its recomputed graph inside the outer one, whose captures go on waiting when the inner pass
    ends.
    """

    def __init__(self, emit: Emit, at_pass_end: Callable[[Callable[[], None]], None]) -> None:
        self._emit = emit
        self._at_pass_end = at_pass_end
        self.serial = 0  # captures made so far: a capture's number says when its call started
        self._running: list[GradientCapture] = []  # received gradients in this pass, not yet reported
        self._flush_queued: set[int] = set()  # the backward passes that will flush at their end

    def started(self, capture: GradientCapture) -> None:
        self._running.append(capture)
        task = capture.task
        if task not in self._flush_queued:
            self._flush_queued.add(task)
            self._at_pass_end(functools.partial(self._flush, task))

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


class GradientCapture:
    """The gradients of one call (what ``order`` hands back to its ``emit`` with them), counted as the
    framework's hooks report them: ``output_arrived`` for the gradient flowing into output ``index``,
    ``consumer_ran`` for a node that gave inputs their gradients.

    ``grad_input``: one gradient per output (``None`` where none flowed). ``grad_output``: one per input
    in argument order, ``None`` where the input needs no gradient or got none from this call. A tensor
    passed twice gets, at each position, the whole gradient the call gave it. The entry is emitted when
    every consumer has run, or — when some never run — at the end of that backward pass with what arrived.

    A framework's subclass sets ``_outputs``, ``_hooked_outputs``, ``_consumers`` and
    ``waits_for_inputs`` when it arms its hooks, and gives :meth:`current_pass`, :meth:`add` and
    :meth:`encloses_any`.
    """

    __slots__ = (
        "call", "_order", "_serial", "_input_count", "_outputs", "_hooked_outputs", "_consumers",
        "waits_for_inputs", "_started", "complete", "_output_grads", "_input_grads", "_fired_outputs",
        "_fired_consumers", "task",
    )

    def __init__(self, order: EmitOrder, call: Any, input_count: int) -> None:
        self.call = call
        self._order = order
        self._serial = order.serial  # calls begin in this order; an outer call before those inside it
        order.serial += 1
        self._input_count = input_count
        self._outputs = self._hooked_outputs = self._consumers = 0
        self.waits_for_inputs = False
        self._started = self.complete = False
        self._output_grads = self._input_grads = None  # per backward pass, from its first gradient on
        self.task = -1  # the backward pass its gradients arrive in

    @staticmethod
    def current_pass() -> int:
        """The backward pass running now (the framework's engine id)."""
        raise NotImplementedError

    @staticmethod
    def add(previous: Any, grad: Any) -> Any:
        """Two gradients the call gave one input, summed outside the user's graph and modes."""
        raise NotImplementedError

    def hook_consumers(self, consumers: Iterable[tuple[Any, list[tuple[int, int]]]]) -> None:
        """End of ``arm``: a :class:`ConsumerHook` on each node the call created that consumes its inputs
        (``(node, [(index among its next edges, input slot)])``, found by the framework's walk of its
        gradient graph)."""
        count = 0
        for node, pairs in consumers:
            node.register_hook(ConsumerHook(self, tuple(pairs)))
            count += 1
        self._consumers = count
        self.waits_for_inputs = count > 0

    def encloses_any(self, captures: list[GradientCapture]) -> bool:
        """One of ``captures`` was made while this call ran (an API inside a module)."""
        raise NotImplementedError

    def _arrived(self) -> bool:
        """The first gradient of this backward pass: start afresh and tell the order. False for a gradient
        that arrives after the capture was reported in this pass: an output that is an input passed through
        (T5's ``position_bias``) gets its gradient only once every use of that tensor, the call's own
        consumers included, has run; it is not reported again."""
        task = self.current_pass()
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

    def output_arrived(self, index: int, grad: Any) -> None:
        if not self._started and not self._arrived():
            return
        self._output_grads[index] = grad
        self._fired_outputs += 1
        if self._consumers == 0 and self._fired_outputs == self._hooked_outputs:
            self._finish()

    def consumer_ran(self, pairs: tuple[tuple[int, int], ...], grad_inputs: tuple) -> None:
        """A consumer node ran: ``pairs`` are its (index among the gradients it gave, input slot) pairs."""
        if not self._started and not self._arrived():
            return
        input_grads = self._input_grads
        for index, slot in pairs:
            grad = grad_inputs[index] if index < len(grad_inputs) else None
            if grad is not None:
                previous = input_grads[slot]
                input_grads[slot] = grad if previous is None else self.add(previous, grad)
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


class ConsumerHook:
    """The post-hook on a consumer node (one object: a closure would be three): ``pairs`` are its
    (index among the gradients it gives, input slot) pairs."""

    __slots__ = ("_capture", "_pairs")

    def __init__(self, capture: GradientCapture, pairs: tuple[tuple[int, int], ...]) -> None:
        self._capture = capture
        self._pairs = pairs

    def __call__(self, grad_inputs: tuple, _grad_outputs: tuple) -> None:
        self._capture.consumer_ran(self._pairs, grad_inputs)
