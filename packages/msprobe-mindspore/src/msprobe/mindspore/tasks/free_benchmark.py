"""MindSpore's :class:`~msprobe.core.free_benchmark.BenchmarkOps` (PyNative mode): the MindSpore
operations under the framework-free :class:`~msprobe.core.free_benchmark.FrameworkBenchmarkOps`.

The perturbations mirror PyTorch's (``msprobe.pytorch.tasks.perturb``) minus ``to_cpu``; ``bit_noise``
on bfloat16 is skipped with a log line (no same-width integer view of bf16 here). A check-mode re-run
runs with gradient recording off and under the random state the original call started from, which is
restored afterwards (generator and seeded ops' counters), so the run's own numbers do not change.

Backward stage: the interceptor's backward tap hands over the gradient that reached the call's outputs
and the gradients the call produced for its inputs. The inputs were copied at the forward; they are
perturbed and the API re-run inside ``mindspore.vjp`` with that same output gradient as sensitivity
(nested inside the user's backward pass, which PyNative allows), under the call's random state. The
vjp builds its own graph, so the user's gradients are not touched.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import mindspore
from mindspore import ops
from msprobe.core.contract import Call
from msprobe.core.free_benchmark import FrameworkBenchmarkOps, Skip
from msprobe.core.free_benchmark.compare import NOISE
from msprobe.core.services.tree import map_tensors, tensors_in
from msprobe.mindspore.hooks.backward import TensorSlots, grad_recording_as, grad_recording_off, rebuild
from msprobe.mindspore.private_api import KERNEL_SEEDS

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


class MindSporeBenchmarkOps(FrameworkBenchmarkOps):
    modes = MODES
    tensor_type = mindspore.Tensor

    def perturb_tensor(self, mode: str, t: mindspore.Tensor) -> mindspore.Tensor | Skip | None:
        return _perturbation(mode, t) if t.is_floating_point() else None

    def random_state(self) -> tuple:
        """The generator state, and the per-kernel seed counters that the seeded random ops
        (``ops.dropout``, ``ops.uniform``...) draw from and advance on every call: restoring only the
        generator would let a re-run of ``dropout`` draw another mask and shift the user's later masks."""
        return mindspore.get_rng_state(), dict(KERNEL_SEEDS)

    def set_random_state(self, state: tuple) -> None:
        generator, kernel_seeds = state
        mindspore.set_rng_state(generator)
        KERNEL_SEEDS.clear()
        KERNEL_SEEDS.update(kernel_seeds)

    def no_grad(self) -> grad_recording_off:
        return grad_recording_off()

    def is_float(self, t: mindspore.Tensor) -> bool:
        return t.is_floating_point()

    def as_float64(self, tensor: mindspore.Tensor) -> np.ndarray:
        return tensor.astype(mindspore.float64).asnumpy()

    def dtype_key(self, tensor: mindspore.Tensor) -> str:
        return _dtype_key(tensor)

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

    def save_for_backward(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """Copies, so that an in-place change between forward and backward cannot reach them."""
        return map_tensors((args, kwargs), self.is_tensor, ops.deepcopy)

    def input_gradients(
        self, call: Call, saved: tuple[tuple, dict], mode: str, state: Any, grad_input: tuple
    ) -> list | Skip:
        """Gradients with respect to the perturbed inputs themselves (float32 under improve_precision),
        one per input the backward tap saw, in its order."""
        if all(grad is None for grad in grad_input):
            return Skip("no gradient reached its outputs")
        perturbed = self.perturb(mode, *saved)
        if isinstance(perturbed, Skip):
            return perturbed
        args, kwargs = perturbed
        slots = TensorSlots(args, kwargs)
        if not slots.places:
            return Skip("no input needs a gradient")

        def run_on(*leaves: mindspore.Tensor) -> Any:
            return self.rerun(call, *slots.put(args, kwargs, list(leaves)), state, differentiable=True)

        with grad_recording_as(True):  # the sink runs with recording off
            output, vjp_of = mindspore.vjp(run_on, *slots.get(args, kwargs))
            return list(vjp_of(_sensitivity(output, grad_input)))


def _sensitivity(output: Any, grad_input: tuple) -> Any:
    """The gradient that reached the original call's outputs, laid over the re-run's outputs in their
    dtypes (the tap saw the same differentiable slots); zeros wherever none reached."""
    outputs = tuple(output) if isinstance(output, (tuple, list)) else (output,)
    zeros = map_tensors(outputs, lambda value: isinstance(value, mindspore.Tensor), ops.zeros_like)
    slots = TensorSlots(zeros, {})
    zero_slots = slots.get(zeros, {})
    grads = [*grad_input, *[None] * (len(zero_slots) - len(grad_input))]
    sens = [zero if grad is None else grad.astype(zero.dtype) for zero, grad in zip(zero_slots, grads)]
    filled, _ = slots.put(zeros, {}, sens)
    return rebuild(output, list(filled)) if isinstance(output, (tuple, list)) else filled[0]
