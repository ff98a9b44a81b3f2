"""Backward capture for one call: the gradients of its outputs and those it gives its inputs.

Two pieces, chosen so that user code behaves exactly as without msprobe:

- Inputs go through :class:`_Enter`, an identity ``autograd.Function`` whose outputs are *detached
  aliases* of the inputs (same storage and version counter, but not autograd views). Its backward sees
  exactly the gradients this call produced for each input, in argument order. Aliases instead of the
  inputs themselves because a custom Function returning its inputs makes them views "created in a custom
  Function", and any later in-place op on them (``h = F.linear(x, w); h.relu_()``) would raise.
- Outputs are left untouched; a tensor hook on each output (``Tensor.register_hook``) sees the gradient
  flowing into the call. Tensor hooks keep working when the output is later modified in place (they
  see the gradient of the value before the modification), so no wrapper is needed there.

The gradients pass through unchanged, so the numbers of the run do not change. The caller never wraps
a tensor the call mutates (the mutation must reach the user's tensor and its autograd history); such an
input's gradient slot is reported as ``None``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

Emit = Callable[[tuple, tuple], None]


class _Enter(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, capture: BackwardCapture, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        ctx.capture = capture
        ctx.set_materialize_grads(False)
        return tuple(t.detach() for t in tensors)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor | None) -> tuple:
        ctx.capture.inputs_done(grads)
        return (None, *grads)


class BackwardCapture:
    """Collects one call's gradients and hands them to ``emit(grad_input, grad_output)`` once complete.

    ``grad_input``: one gradient per tensor output (``None`` when none flowed). ``grad_output``: one
    per tensor input in argument order, ``None`` where the input needs no gradient.
    """

    def __init__(self, emit: Emit) -> None:
        self._emit = emit
        self._input_slots: list[int | None] = []  # per tensor input: index among wrapped, or None
        self._wrapped = 0
        self._output_grads: list[torch.Tensor | None] = []
        self._hooked_outputs = 0
        self._fired_outputs = 0
        self._view_slot: int | None = None  # tensor-input index whose gradient a view node reports

    # ---- forward side -------------------------------------------------------------------------
    def wrap_inputs(self, flat: list, skip_ids: frozenset[int]) -> tuple[list, dict[int, torch.Tensor]]:
        """Route the tensors of ``flat`` that need a gradient through :class:`_Enter`.

        Returns the new flat list and a map ``id(alias) → original`` used to give the user back the
        original when the call returns an input unchanged.
        """
        unique: dict[int, int] = {}  # id(tensor) → its index among the wrapped tensors
        wrapped: list[torch.Tensor] = []
        for value in flat:
            if not isinstance(value, torch.Tensor):
                continue
            if value.requires_grad and id(value) not in skip_ids:
                # A tensor passed twice (``attn(x, x, x)``) is wrapped once: code that checks
                # ``query is key`` must take the same path as without msprobe, and the gradient
                # reported for each position is the one the call produced for that tensor.
                if id(value) not in unique:
                    unique[id(value)] = len(wrapped)
                    wrapped.append(value)
                self._input_slots.append(unique[id(value)])
            else:
                self._input_slots.append(None)
        if not wrapped:
            return flat, {}
        aliases = _Enter.apply(self, *wrapped)
        self._wrapped = len(wrapped)
        alias_of = {id(original): alias for original, alias in zip(wrapped, aliases)}
        originals = {id(alias): original for original, alias in zip(wrapped, aliases)}
        new_flat = [alias_of.get(id(v), v) if isinstance(v, torch.Tensor) else v for v in flat]
        return new_flat, originals

    def hook_outputs(self, outputs: list) -> None:
        """Watch the gradient of every tensor output that is part of the graph."""
        self._output_grads = [None] * len(outputs)
        for i, out in enumerate(outputs):
            if isinstance(out, torch.Tensor) and out.grad_fn is not None:
                out.register_hook(self._output_hook(i))
                self._hooked_outputs += 1

    def skip_inputs(self, flat: list) -> None:
        """Note the tensor inputs without wrapping any (their gradients are reported as ``None``)."""
        self._input_slots = [None for v in flat if isinstance(v, torch.Tensor)]

    def watch_view(self, output: torch.Tensor, flat_inputs: list) -> None:
        """For a view op run on the original input: its single autograd node reports the input's
        gradient (a view has exactly one differentiable input, the first tensor needing a gradient)."""
        tensors = [v for v in flat_inputs if isinstance(v, torch.Tensor)]
        slot = next((i for i, t in enumerate(tensors) if t.requires_grad), None)
        if slot is None or output.grad_fn is None:
            return
        self._view_slot = slot
        output.grad_fn.register_hook(self._view_hook)

    def _view_hook(self, grad_inputs: tuple, grad_outputs: tuple) -> None:
        grads = [None] * len(self._input_slots)
        grads[self._view_slot] = grad_inputs[0]
        self._finish(tuple(grads))

    @property
    def expects_backward(self) -> bool:
        return self._wrapped > 0 or self._hooked_outputs > 0

    # ---- backward side ------------------------------------------------------------------------
    def _output_hook(self, index: int) -> Callable:
        def hook(grad: torch.Tensor) -> None:
            self._output_grads[index] = grad
            self._fired_outputs += 1
            last = self._fired_outputs == self._hooked_outputs
            if self._wrapped == 0 and self._view_slot is None and last:
                self._finish((None,) * len(self._input_slots))

        return hook

    def inputs_done(self, wrapped_grads: tuple) -> None:
        self._finish(tuple(None if slot is None else wrapped_grads[slot] for slot in self._input_slots))

    def _finish(self, grad_output: tuple) -> None:
        grad_input = tuple(self._output_grads)
        self._output_grads = [None] * len(self._output_grads)
        self._fired_outputs = 0
        self._emit(grad_input, grad_output)
