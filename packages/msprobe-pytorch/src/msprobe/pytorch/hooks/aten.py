"""Level L2 on PyTorch: one listed API, and what runs inside it.

:class:`ListedApiInterceptor` is the L1 interceptor (same counting, same names) restricted to the one API of
``list``; around the listed call it opens a :class:`CaptureWindow`: off the NPU :class:`AtenCapture`, a
``TorchDispatchMode`` that reports every aten operator as an ``Aten.*`` entry, on an Ascend NPU torch_npu's
kernel dump (``msprobe.pytorch.kernel_dump``). A backward window is opened and closed by read-only hooks on
the nodes the call created, so the run's numbers do not change. Which operators are recorded
(``SKIPPED_OPS``) and why: docs/pytorch/kernel_dump.md#off-the-npu-cpu-gpu-the-aten-level-dump.
"""

from __future__ import annotations

import itertools
from typing import Any, Protocol

import torch
from torch._C._autograd import _get_sequence_nr
from torch.utils._python_dispatch import TorchDispatchMode

from msprobe.core.contract import Call, CallSink
from msprobe.core.dump.uninitialised import UNINITIALISED_APIS
from msprobe.core.lifecycle.naming import BACKWARD, FORWARD, CallCounter, api_name, parse_name
from msprobe.core.services.log import logger
from msprobe.pytorch.hooks.flat import flatten
from msprobe.pytorch.hooks.interceptor import Interceptor

ATEN = "Aten"
SKIPPED_OPS = frozenset({"detach", "alias", "lift_fresh", "lift_fresh_copy", *UNINITIALISED_APIS})

_engine = torch.autograd.Variable._execution_engine


class CaptureWindow(Protocol):
    """What runs while the listed API runs (its forward, or its backward)."""

    per_node: bool  # backward: one window per autograd node of the call (True) or one over all of them

    def open(self, api: str, direction: str) -> None:
        """The listed API (its full entry name ``api``) starts running in ``direction``."""

    def close(self) -> None:
        """It stopped running (the window always closes after it opened, also at ``disable``)."""

    def unsupported(self, api: str) -> None:
        """The listed API ran but there is nothing to capture (a backward with no autograd graph)."""


def op_name(func: Any) -> str:
    """``addmm.default`` for ``torch.ops.aten.addmm.default``."""
    return f"{func._schema.name.split('::')[-1]}.{func._overloadname}"


def _has_tensor(args: tuple, kwargs: dict) -> bool:
    return any(isinstance(v, torch.Tensor) for v in flatten((args, kwargs))[0])


class AtenCapture(TorchDispatchMode):
    """The window off the NPU: every aten operator run inside it reported to ``sink`` as an ``Aten`` entry.

    Counts are per operator and direction, from 0 in each step (:meth:`reset_counts`).
    """

    per_node = True

    def __init__(self, sink: CallSink) -> None:
        super().__init__()
        self._sink = sink
        self._counter = CallCounter()
        self._direction = FORWARD
        self._depth = 0

    def open(self, api: str, direction: str) -> None:
        self._direction = direction
        self._depth += 1
        self.__enter__()

    def close(self) -> None:
        if self._depth:
            self._depth -= 1
            self.__exit__(None, None, None)

    def close_all(self) -> None:
        while self._depth:
            self.close()

    def unsupported(self, api: str) -> None:

        logger.warning(f"{api}: the call built no autograd graph, so it has no backward operators to dump")

    def reset_counts(self) -> None:
        self._counter.reset()

    def __torch_dispatch__(self, func: Any, types: tuple, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        op = op_name(func)
        if op.split(".")[0] in SKIPPED_OPS or not _has_tensor(args, kwargs):
            return func(*args, **kwargs)
        direction = self._direction
        count = self._counter.next(f"{ATEN}.{op}.{direction}")
        call = Call(api_name(ATEN, op, count, direction), args, kwargs, mutates_inputs=func._schema.is_mutable)
        # This mode is off the stack while it handles a call: the sink's own operators are not seen.
        with torch._C.DisableTorchFunction():
            self._sink.forward_start(call)
        output = func(*args, **kwargs)
        with torch._C.DisableTorchFunction():
            self._sink.forward_end(call, output)
        return output


def _call_nodes(outputs: list, start: int, end: int) -> list:
    """The autograd nodes a call created: reachable from its outputs, numbered in ``[start, end)``."""
    nodes, seen = [], set()
    todo = [t.grad_fn for t in outputs if isinstance(t, torch.Tensor) and t.grad_fn is not None]
    while todo:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if not start <= node._sequence_nr() < end:
            continue
        nodes.append(node)
        todo.extend(next_node for next_node, _ in node.next_functions)
    return nodes


class _BackwardWindow:
    """Opens ``window`` around the autograd nodes of one call: around each (per-node windows) or from the
    first pre-hook to the last post-hook, and at the latest at the end of the backward pass."""

    _ids = itertools.count()

    def __init__(self, window: CaptureWindow, api: str, nodes: list) -> None:
        self._window, self._api, self._total = window, api, len(nodes)
        self._done = 0
        self._open = False
        for node in nodes:
            node.register_prehook(self._before)
            node.register_hook(self._after)

    def _before(self, grad_outputs: tuple) -> None:
        if self._window.per_node:
            self._window.open(self._api, BACKWARD)
        elif not self._open:
            self._open = True
            self._done = 0
            self._window.open(self._api, BACKWARD)
            _engine.queue_callback(self._end_of_pass)

    def _after(self, grad_inputs: tuple, grad_outputs: tuple) -> None:
        if self._window.per_node:
            self._window.close()
            return
        self._done += 1
        if self._done == self._total:
            self._end_of_pass()

    def _end_of_pass(self) -> None:
        if self._open:
            self._open = False
            self._window.close()


class _ListedOnly:
    """The sink the L1 interceptor reports to: passes on the listed API only and opens the window."""

    def __init__(self, sink: CallSink, listed: str, window: CaptureWindow) -> None:
        entry = parse_name(listed)
        self.sink, self.listed, self.window = sink, listed, window
        self.direction = entry.direction
        self.forward_name = entry.twin(FORWARD)
        self._start: dict[int, int] = {}  # id(call) → autograd sequence number when the listed call began
        self.open_forward = False

    def forward_start(self, call: Call) -> bool:
        if call.name != self.forward_name:
            return False
        if self.direction == BACKWARD:
            self._start[id(call)] = _get_sequence_nr()
            return True  # the recorder watches its backward: the listed entry itself
        self.sink.forward_start(call)
        self.open_forward = True
        self.window.open(self.listed, FORWARD)
        return False

    def forward_end(self, call: Call, output: Any) -> Any:
        if call.name != self.forward_name:
            return None
        if self.direction == FORWARD:
            self.close_forward()
            return self.sink.forward_end(call, output)
        start = self._start.pop(id(call), None)
        nodes = [] if start is None else _call_nodes(flatten(output)[0], start, _get_sequence_nr())
        if nodes:
            _BackwardWindow(self.window, self.listed, nodes)
        else:
            self.window.unsupported(self.listed)
        return None

    def close_forward(self) -> None:
        if self.open_forward:
            self.open_forward = False
            self.window.close()

    def backward(self, call: Call, grad_input: tuple, grad_output: tuple) -> None:
        if call.name == self.forward_name and self.direction == BACKWARD:
            self.sink.backward(call, grad_input, grad_output)


class ListedApiInterceptor:
    """Level L2's interceptor: the L1 interceptor restricted to ``listed``, with ``window`` around it."""

    def __init__(self, sink: CallSink, listed: str, window: CaptureWindow) -> None:
        self.window = window
        self._listed = _ListedOnly(sink, listed, window)
        self._l1 = Interceptor(self._listed, level="L1")

    def attach(self, model: Any) -> None:
        self._l1.attach(None)

    def enable(self) -> None:
        self._l1.enable()

    def disable(self) -> None:
        self._l1.disable()
        self._listed.close_forward()  # the listed forward raised: its window is still open
        close_all = getattr(self.window, "close_all", None)
        if close_all is not None:
            close_all()

    def reset_counts(self) -> None:
        self._l1.reset_counts()
        reset = getattr(self.window, "reset_counts", None)
        if reset is not None:
            reset()

    def detach(self) -> None:
        self.disable()
        self._l1.detach()
