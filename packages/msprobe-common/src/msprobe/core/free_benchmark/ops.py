"""What a framework supplies to the free benchmark, and the part of it that is the same everywhere.

:class:`BenchmarkOps` is the collector's contract. :class:`FrameworkBenchmarkOps` implements the
framework-free half of it once: walking the arguments to perturb every tensor a ``pert_mode`` can
change (and saying why a call cannot take it), re-running an API under the random state its original
call started from and putting back the state that call left, picking out the floating-point outputs.
A framework subclass keeps only tensor operations: how one tensor is perturbed, how the random state
is read and set, how gradient recording is turned off, and the conversions of its tensors.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any, Protocol

import numpy as np

from msprobe.core.contract import Call
from msprobe.core.services.tree import map_tensors, tensors_in


class Skip(str):
    """Why a call cannot be perturbed in this mode (returned by :meth:`BenchmarkOps.perturb`)."""


class BenchmarkOps(Protocol):
    """What a framework supplies to the free benchmark."""

    def is_tensor(self, value: Any) -> bool: ...

    def perturb(self, mode: str, args: tuple, kwargs: dict) -> tuple[tuple, dict] | Skip:
        """Perturbed copies of the arguments (the originals untouched), or why this call cannot take it."""

    def before_call(self) -> Any:
        """State to re-run under the same conditions as the original call (random number state)."""

    def rerun(self, call: Call, args: tuple, kwargs: dict, state: Any, *, differentiable: bool) -> Any:
        """``call.rerun`` under ``state``; the user's random streams are as before it afterwards.
        ``differentiable=False``: detached from autograd."""

    def float_outputs(self, output: Any) -> list[tuple[int, Any]]:
        """``(index among the output's tensors, tensor)`` for every floating-point tensor."""

    def as_float64(self, tensor: Any) -> np.ndarray: ...

    def dtype_key(self, tensor: Any) -> str:
        """``float16``, ``bfloat16``, ``float32``... (the threshold table's keys)."""

    def describe(self, tensor: Any) -> tuple[str, tuple[int, ...]]:
        """dtype as the dump writes it, and shape (the CSV's ``dtype`` and ``shape``)."""

    def fixed(self, output: Any, perturbed: Any) -> Any:
        """``perturbed`` cast back to the dtype and device of ``output``, same structure."""

    def save_for_backward(self, args: tuple, kwargs: dict) -> Any:
        """Inputs kept, detached, for recomputing gradients in the backward pass."""

    def input_gradients(self, call: Call, saved: Any, mode: str, state: Any, grad_input: tuple) -> list | Skip:
        """Gradients of the call's tensor inputs (argument order, ``None`` where none) when it runs on
        perturbed inputs and ``grad_input`` flows into its outputs."""


class FrameworkBenchmarkOps:
    """The framework-free half of :class:`BenchmarkOps`; a subclass supplies the tensor operations:

    - ``modes``: the ``pert_mode`` values it implements; ``tensor_type``: its tensor class;
    - ``perturb_tensor(mode, t)``: a perturbed copy of ``t``, ``None`` when this mode leaves ``t`` as it
      is (an integer tensor, nothing to raise), or a :class:`Skip` when the whole call cannot take it;
    - ``random_state()`` / ``set_random_state(state)``: every random stream an API may draw from;
    - ``no_grad()``: a context in which nothing is recorded for autograd;
    - ``is_float``, ``as_float64``, ``dtype_key``, ``fixed``, ``save_for_backward``, ``input_gradients``.
    """

    modes: tuple[str, ...] = ()
    tensor_type: type = object

    def is_tensor(self, value: Any) -> bool:
        return isinstance(value, self.tensor_type)

    def perturb(self, mode: str, args: tuple, kwargs: dict) -> tuple[tuple, dict] | Skip:
        if mode not in self.modes:
            raise ValueError(f"pert_mode {mode!r}: give one of {', '.join(self.modes)}")
        changed = False
        skip: Skip | None = None

        def one(tensor: Any) -> Any:
            nonlocal changed, skip
            new = self.perturb_tensor(mode, tensor)
            if isinstance(new, Skip):
                skip = new
                return tensor
            if new is None:
                return tensor
            changed = True
            return new

        perturbed = map_tensors((args, kwargs), self.is_tensor, one)
        if skip is not None:
            return skip
        return perturbed if changed else Skip("no input this pert_mode can change")

    def before_call(self) -> Any:
        return self.random_state()

    def rerun(self, call: Call, args: tuple, kwargs: dict, state: Any, *, differentiable: bool) -> Any:
        """The API again under the random state its original call started from (``dropout`` draws the
        same mask, so only the perturbation differs); then the state the original call left is put
        back, so the user's random streams go on as without msprobe."""
        after = self.random_state()
        self.set_random_state(state)
        try:
            with nullcontext() if differentiable else self.no_grad():
                return call.rerun(*args, **kwargs)
        finally:
            self.set_random_state(after)

    def float_outputs(self, output: Any) -> list[tuple[int, Any]]:
        tensors = tensors_in(output, self.is_tensor)
        return [(i, t) for i, t in enumerate(tensors) if self.is_float(t)]

    def describe(self, tensor: Any) -> tuple[str, tuple[int, ...]]:
        return str(tensor.dtype), tuple(tensor.shape)

    # ------------------------------------------------------------------ supplied by the framework
    def perturb_tensor(self, mode: str, tensor: Any) -> Any:
        raise NotImplementedError

    def random_state(self) -> Any:
        raise NotImplementedError

    def set_random_state(self, state: Any) -> None:
        raise NotImplementedError

    def no_grad(self) -> AbstractContextManager:
        raise NotImplementedError

    def is_float(self, tensor: Any) -> bool:
        raise NotImplementedError
