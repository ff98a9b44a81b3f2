"""The PyTorch side of reporting a call: core's :class:`~msprobe.core.lifecycle.calls.CallReporter` plus the
arming of each call's backward capture.

API calls (``api.py``), module forwards (``module.py``) and collectives (``distributed.py``) differ
only in how they learn about a call; what happens to it is decided here and in core.

Calls made while a backward pass runs are autograd's, not the user's forward: they are neither counted
nor recorded (docs/pytorch/dump.md, "Activation checkpointing"). One kind of them is a replay: a
reentrant checkpoint runs its function under ``no_grad`` in the forward and again, with gradients on,
in its backward, then back-propagates through that second graph. :class:`Recomputation` pairs each
replayed call with the forward call it repeats, so the backward is captured under the forward's name.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from typing import Any

import torch
from torch._C._autograd import _get_sequence_nr

from msprobe.core.lifecycle.calls import CallReporter, Started
from msprobe.core.contract import Call, CallSink
from msprobe.core.services.log import logger
from msprobe.pytorch.hooks.backward import BackwardCapture, EmitOrder, ReplayCapture
from msprobe.pytorch.hooks.flat import call_leaves, leaves

backward_pass_id = torch._C._current_graph_task_id  # -1 outside a backward pass (one C call for the hooks)
_current_node = torch._C._current_autograd_node  # the node whose backward runs now, or None
_fwd_grad_enabled = torch._C._is_fwd_grad_enabled  # off only inside an autograd Function's forward
_FunctionNode = torch.autograd.function.BackwardCFunction  # the node of a Python autograd Function


class Pending:
    """A call between its start and its end, with the capture of its backward when one is wanted.
    ``started`` is None for a replay: the call is not reported again, only its backward is captured."""

    __slots__ = ("started", "capture")

    def __init__(self, started: Started | None, capture: BackwardCapture | None = None) -> None:
        self.started = started
        self.capture = capture


class Noted:
    """A call made inside an autograd Function's forward, which that Function's backward may replay.

    It stands in for the call's backward capture until the call returns (``arm``), to keep the outputs
    that were passed through with their gradient history (under ``no_grad`` no other output has one:
    ``hidden.to(torch.float32)`` of a float32 input returns the input). The replay's capture watches those
    very tensors (:class:`~msprobe.pytorch.hooks.backward.ReplayCapture`), and they are let go then.
    """

    __slots__ = ("key", "call", "passed")

    def __init__(self, key: tuple[str, ...], call: Call | None) -> None:
        self.key = key
        self.call = call  # None when its backward is not wanted
        self.passed: tuple[tuple[int, torch.Tensor], ...] = ()

    def arm(self, flat_outputs: list) -> None:
        if self.call is not None:
            self.passed = tuple((i, out) for i, out in enumerate(flat_outputs)
                                if isinstance(out, torch.Tensor) and out.grad_fn is not None)

    def hand_over(self) -> tuple[tuple[int, torch.Tensor], ...]:
        """The passed-through outputs, once: the replay's capture hooks them, nothing keeps them after."""
        passed, self.passed = self.passed, ()
        return passed


class Recomputation:
    """The calls made inside autograd Functions' forwards, and which of them a backward is replaying.

    PyTorch runs every ``autograd.Function.forward`` with gradients off, after creating the Function's
    node (whose autograd sequence number is lower than that of anything made in the forward). When that
    node's backward turns gradients on and makes calls — ``CheckpointFunction`` re-running its function
    — they replay the calls noted after the node's number, in the same order; each is checked against
    the noted key (an API or module), and the first that differs ends the replay.
    """

    def __init__(self) -> None:
        self._seqs: list[int] = []  # autograd's sequence number when each noted call started (ascending)
        self._calls: list[Noted] = []
        self._node: Any = None  # the Function node whose backward is calling now
        self._next = -1  # the index its next call replays; -1: the node replays nothing
        self._warned = False

    def note(self, key: tuple[str, ...], call: Call | None) -> Noted:
        noted = Noted(key, call)
        self._seqs.append(_get_sequence_nr())
        self._calls.append(noted)
        return noted

    def replayed(self, key: tuple[str, ...]) -> Noted | None:
        """A call seen during a backward pass: the noted call it replays, else None."""
        if not torch.is_grad_enabled() and _fwd_grad_enabled():  # a hook's call, or the Function's own
            return None  # (a replay runs with gradients on, or inside the forward of a Function nested in it)
        node = _current_node()
        if node is not self._node:
            if not isinstance(node, _FunctionNode):
                return None
            self._node, self._next = node, bisect_right(self._seqs, node._sequence_nr())
        index = self._next
        if index < 0 or index >= len(self._calls):
            return None
        noted = self._calls[index]
        if noted.key != key:
            if index > 0 and self._seqs[index - 1] > node._sequence_nr() and not self._warned:
                self._warned = True  # it had replayed calls already: the recomputation went another way
                logger.warning(f"a recomputation during backward called {'.'.join(key)} where its forward "
                               f"called {'.'.join(noted.key)}: its further backward entries are not recorded")
            self._next = -1
            return None
        self._next = index + 1
        return noted

    def clear(self) -> None:
        self._seqs.clear()
        self._calls.clear()
        self._node, self._next = None, -1


class Recorder(CallReporter):
    """Reports calls to the sink and watches the backward of those whose backward the sink wants."""

    def __init__(self, sink: CallSink) -> None:
        # Our own torch calls (the sink's, the capture's attribute reads and hooks) are hidden from every
        # TorchFunctionMode, the user's included: a user's mode must not see, count or alter them.
        super().__init__(sink, quiet=torch._C.DisableTorchFunction)
        self._order = EmitOrder(self.backward)
        self._recomputation = Recomputation()

    def new_step(self) -> None:
        """A step starts: counters from 0; the previous step's forward calls are replayed no more."""
        self.counter.reset()
        self._recomputation.clear()

    def begin_api(self, prefix: str, api: str, args: tuple, kwargs: dict, *, mutates: bool,
                  func: Callable[..., Any] | None = None, differentiable: bool = True) -> Pending:
        """``func``: the real API, offered to the sink as ``Call.rerun``."""
        grad = torch.is_grad_enabled()
        if not grad and api == "view_as" and _wraps_function_output(args):
            return _UNREPORTED
        rerun = None if func is None else self.unrecorded(func)
        started = self.start_api(prefix, api, args, kwargs, mutates=mutates, rerun=rerun)
        return self._watch(started, (prefix, api), args, kwargs, differentiable, True, grad)

    def begin_module(self, path: str, cls: str, args: tuple, kwargs: dict) -> Pending:
        started = self.start_module("Module", path, cls, args, kwargs)
        # A module's parameters can make its outputs need gradients even when no input does.
        return self._watch(started, ("Module", path, cls), args, kwargs, True, False, torch.is_grad_enabled())

    def begin_replay(self, key: tuple[str, ...], args: tuple, kwargs: dict, *, module: bool) -> Pending | None:
        """A call seen during a backward pass (``key``: ``(prefix, api)`` or ``("Module", path, class)``): a Pending
        that captures the backward of the forward call it replays, or None — run it unrecorded."""
        if key == _VIEW_AS and _wraps_function_output(args):
            return None
        noted = self._recomputation.replayed(key)
        if noted is None:
            return None
        if not torch.is_grad_enabled():  # as in the forward: no backward to capture
            if not _fwd_grad_enabled():  # a checkpoint nested in the replayed one: its own backward replays this
                return Pending(None, self._recomputation.note(key, noted.call))
            return _UNREPORTED
        if noted.call is None:
            return _UNREPORTED
        return Pending(None, self._capture(noted.call, args, kwargs, not module, noted.hand_over()))

    def finish(self, pending: Pending, output: Any) -> Any:
        """The call returned ``output``: tell the sink, then watch the backward of what the user gets."""
        if pending.started is not None:
            output = self.end(pending.started, output)
        capture = pending.capture
        if capture is not None:
            with self.pause(), torch._C.DisableTorchFunction():
                capture.arm(leaves(output))
        return output

    def _watch(self, started: Started, key: tuple[str, ...], args: tuple, kwargs: dict, differentiable: bool,
               needs_grad_input: bool, grad: bool) -> Pending:
        wanted = started.wants_backward and differentiable
        if not grad:
            if not _fwd_grad_enabled():  # inside an autograd Function's forward, which its backward may replay
                return Pending(started, self._recomputation.note(key, started.call if wanted else None))
            return Pending(started)
        if not wanted:
            return Pending(started)
        return Pending(started, self._capture(started.call, args, kwargs, needs_grad_input))

    def _capture(self, call: Call, args: tuple, kwargs: dict, needs_grad_input: bool,
                 passed: tuple[tuple[int, torch.Tensor], ...] = ()) -> BackwardCapture | None:
        with torch._C.DisableTorchFunction():
            flat = call_leaves(args, kwargs)
            if needs_grad_input and not any(isinstance(v, torch.Tensor) and v.requires_grad for v in flat):
                return None
            if passed:
                return ReplayCapture(self._order, call, flat, passed)
            return BackwardCapture(self._order, call, flat)


_VIEW_AS = ("Tensor", "view_as")
_UNREPORTED = Pending(None)  # a call neither reported nor watched (it holds nothing: one serves all)


def _wraps_function_output(args: tuple) -> bool:
    """``x.view_as(x)`` with gradients off inside an autograd Function: PyTorch's own call, made by
    ``Function.apply`` for each input the forward returned as it came (so that the output can carry the
    Function's node) — not a call of the user's forward (a checkpointed block returning T5's
    ``position_bias``)."""
    return len(args) == 2 and args[0] is args[1] and not _fwd_grad_enabled()
