"""Per-call backward capture in PyNative mode.

MindSpore has no ``autograd.Function`` pair to put around a call, but ``ops.HookBackward`` is the same
idea: an identity in the forward pass whose backward hands the gradient to a Python function. We tap
the call's floating-point tensor inputs with one ``HookBackward`` (its hook receives exactly the
gradients *this call* produced for them, because the tapped copies feed nothing else) and its outputs
with another (the gradients flowing into the call). Identity ops leave every number unchanged.

The output tap fires first in the backward pass and parks the incoming gradients; the input tap fires
after the call's own backward and completes the entry. A call without differentiable inputs is
completed by its output tap.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import mindspore
from mindspore import ops
from msprobe.core.events import Call
from msprobe.mindspore.private_api import _pynative_executor

BackwardReport = Callable[[Call, tuple, tuple], None]


def grad_is_recording() -> bool:
    """True inside ``mindspore.grad`` / ``value_and_grad`` in PyNative mode (the only time a tap can
    fire). MindSpore exposes this only on its private executor object."""
    return bool(_pynative_executor.requires_grad())


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
    """Where the differentiable tensors of an argument structure sit (shared with the free benchmark, whose
    recomputed gradients must line up with the tapped ones): top-level positions and one level
    of list/tuple (``ops.cat([a, b])``)."""

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


def _through_hook(tensors: list, hook: Callable[[tuple], None]) -> list:
    tapped = ops.HookBackward(hook)(*tensors)
    return [tapped] if len(tensors) == 1 else list(tapped)


class BackwardTap:
    """Taps one call's inputs and outputs; ``report(call, grad_input, grad_output)`` gets the entry."""

    def __init__(self, call: Call, report: BackwardReport) -> None:
        self._call = call
        self._report = report
        self._grad_input: tuple | None = None
        self._has_inputs = False

    def tap_inputs(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        slots = TensorSlots(args, kwargs)
        if not slots.places:
            return args, kwargs
        self._has_inputs = True
        return slots.put(args, kwargs, _through_hook(slots.get(args, kwargs), self._inputs_done))

    def tap_output(self, output: Any) -> Any:
        if _is_differentiable(output):
            return _through_hook([output], self._output_reached)[0]
        if isinstance(output, (tuple, list)):
            slots = TensorSlots(tuple(output), {})
            if slots.places:
                tensors = _through_hook(slots.get(tuple(output), {}), self._output_reached)
                tapped, _ = slots.put(tuple(output), {}, tensors)
                return rebuild(output, list(tapped))
        return output

    def _output_reached(self, grads: tuple) -> None:
        self._grad_input = tuple(grads)
        if not self._has_inputs:
            self._report(self._call, self._grad_input, ())

    def _inputs_done(self, grads: tuple) -> None:
        self._report(self._call, self._grad_input or (), tuple(grads))
