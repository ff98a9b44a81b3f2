"""MindSpore's :class:`~msprobe.core.free_benchmark.BenchmarkOps` (PyNative mode).

The perturbations mirror PyTorch's (``msprobe.pytorch.tasks.perturb``) minus ``to_cpu``; ``bit_noise``
on bfloat16 is skipped with a log line (no same-width integer view of bf16 here). A check-mode re-run
runs with gradient recording off and under the random state the original call started from, which is
restored afterwards, so the run's own numbers do not change. The backward stage is PyTorch only so far:
calls are skipped with a log line.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import mindspore
from msprobe.core.events import Call
from msprobe.core.free_benchmark import Skip
from msprobe.core.free_benchmark.compare import NOISE
from msprobe.core.tree import map_tensors, tensors_in
from msprobe.mindspore.hooks.backward import grad_recording_off

_INT_OF = {mindspore.float16: mindspore.int16, mindspore.float32: mindspore.int32,
           mindspore.float64: mindspore.int64}
MODES = ("improve_precision", "add_noise", "bit_noise", "no_change", "change_value")


def _dtype_key(tensor: mindspore.Tensor) -> str:
    return str(tensor.dtype).lower()


def _perturbation(mode: str, t: mindspore.Tensor) -> mindspore.Tensor | Skip | None:
    if mode == "improve_precision":
        return t.astype(mindspore.float32) if t.dtype in (mindspore.float16, mindspore.bfloat16) else None
    if mode == "add_noise":
        noise = NOISE.get(_dtype_key(t))
        return None if noise is None else t * (1.0 + noise)
    if mode == "bit_noise":
        if t.dtype == mindspore.bfloat16:
            return Skip("bit_noise cannot flip bits of bfloat16 tensors in MindSpore")
        int_dtype = _INT_OF.get(t.dtype)
        if int_dtype is None:
            return None
        values = t.asnumpy().reshape(-1)
        flipped = (values.view(np.dtype(f"int{values.dtype.itemsize * 8}")) ^ 1).view(values.dtype)
        return mindspore.Tensor(np.where(np.isfinite(values), flipped, values).reshape(t.shape))
    if mode == "no_change":
        return t
    if mode == "change_value":
        if t.size < 2:
            return None
        flat = t.reshape(-1).copy()
        first, last = flat[0].copy(), flat[-1].copy()
        flat[0], flat[-1] = last, first
        return flat.reshape(t.shape)
    raise ValueError(f"pert_mode {mode!r}: give one of {', '.join(MODES)} (MindSpore)")


class MindSporeBenchmarkOps:
    def is_tensor(self, value: Any) -> bool:
        return isinstance(value, mindspore.Tensor)

    def perturb(self, mode: str, args: tuple, kwargs: dict) -> tuple[tuple, dict] | Skip:
        outcome: dict[str, Any] = {"changed": False, "skip": None}

        def one(t: mindspore.Tensor) -> mindspore.Tensor:
            if not t.is_floating_point():
                return t
            new = _perturbation(mode, t)
            if isinstance(new, Skip):
                outcome["skip"] = new
                return t
            if new is None:
                return t
            outcome["changed"] = True
            return new

        perturbed = map_tensors((args, kwargs), self.is_tensor, one)
        if outcome["skip"] is not None:
            return outcome["skip"]
        return perturbed if outcome["changed"] else Skip("no input this pert_mode can change")

    def before_call(self) -> Any:
        return mindspore.get_rng_state()

    def rerun(self, call: Call, args: tuple, kwargs: dict, state: Any, *, differentiable: bool) -> Any:
        after = mindspore.get_rng_state()
        mindspore.set_rng_state(state)
        try:
            if differentiable:
                return call.rerun(*args, **kwargs)
            with grad_recording_off():
                return call.rerun(*args, **kwargs)
        finally:
            mindspore.set_rng_state(after)

    def float_outputs(self, output: Any) -> list[tuple[int, mindspore.Tensor]]:
        tensors = tensors_in(output, self.is_tensor)
        return [(i, t) for i, t in enumerate(tensors) if t.is_floating_point()]

    def as_float64(self, tensor: mindspore.Tensor) -> np.ndarray:
        return tensor.astype(mindspore.float64).asnumpy()

    def dtype_key(self, tensor: mindspore.Tensor) -> str:
        return _dtype_key(tensor)

    def describe(self, tensor: mindspore.Tensor) -> tuple[str, tuple[int, ...]]:
        return str(tensor.dtype), tuple(tensor.shape)

    def fixed(self, output: Any, perturbed: Any) -> Any:
        originals = tensors_in(output, self.is_tensor)
        replacements = tensors_in(perturbed, self.is_tensor)
        if len(originals) != len(replacements):
            return None
        pairs = iter(replacements)
        return map_tensors(
            output, self.is_tensor,
            lambda old: (lambda new: new.astype(old.dtype) if old.is_floating_point() else old)(next(pairs)),
        )

    def save_for_backward(self, args: tuple, kwargs: dict) -> None:
        return None

    def input_gradients(self, call: Call, saved: Any, mode: str, state: Any, grad_input: tuple) -> Skip:
        return Skip("fuzz_stage backward is not available on MindSpore yet")
