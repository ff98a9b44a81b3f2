"""PyTorch's :class:`~msprobe.core.free_benchmark.BenchmarkOps`: the torch operations under the
framework-free :class:`~msprobe.core.free_benchmark.FrameworkBenchmarkOps`.

A re-run must not change the user's run (docs/free_benchmark.md#handler_type): in ``check`` mode it runs
under ``no_grad``, so nothing joins the user's graph, and under the random state the original call started
from (CPU and CUDA generators), which the core puts back afterwards.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from msprobe.core.contract import Call
from msprobe.core.free_benchmark import FrameworkBenchmarkOps, Skip
from msprobe.core.services.tree import map_tensors, tensors_in
from msprobe.pytorch.tasks.perturb import PERTURBATIONS


class TorchBenchmarkOps(FrameworkBenchmarkOps):
    modes = tuple(PERTURBATIONS)
    tensor_type = torch.Tensor

    def perturb_tensor(self, mode: str, t: torch.Tensor) -> torch.Tensor | None:
        if mode != "to_cpu" and not t.is_floating_point():
            return None
        return PERTURBATIONS[mode](t)

    def random_state(self) -> tuple:
        """CPU generator state, and the CUDA generators' once CUDA is initialised."""
        cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
        return torch.get_rng_state(), cuda

    def set_random_state(self, state: tuple) -> None:
        cpu, cuda = state
        torch.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)

    def no_grad(self) -> torch.no_grad:
        return torch.no_grad()

    def is_float(self, t: torch.Tensor) -> bool:
        return t.is_floating_point()

    def as_float64(self, tensor: torch.Tensor) -> np.ndarray:
        return tensor.detach().to("cpu", torch.float64, copy=True).numpy()  # copy: numpy() pins the storage

    def dtype_key(self, tensor: torch.Tensor) -> str:
        return str(tensor.dtype).removeprefix("torch.")

    def fixed(self, output: Any, perturbed: Any) -> Any:
        """The perturbed result in the original's dtype and device; the original where the structures
        differ (nothing to match it with)."""
        originals, spec = tree_flatten(output)
        replacements, other_spec = tree_flatten(perturbed)
        if spec != other_spec:
            return None
        fixed = [
            new.to(device=old.device, dtype=old.dtype)
            if isinstance(old, torch.Tensor) and isinstance(new, torch.Tensor) and old.is_floating_point()
            else old
            for old, new in zip(originals, replacements)
        ]
        return tree_unflatten(fixed, spec)

    def save_for_backward(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        def keep(t: torch.Tensor) -> torch.Tensor:
            copy = t.detach().clone()
            return copy.requires_grad_() if t.requires_grad else copy

        return map_tensors((args, kwargs), self.is_tensor, keep)

    def input_gradients(
        self, call: Call, saved: tuple[tuple, dict], mode: str, state: tuple, grad_input: tuple
    ) -> list | Skip:
        """Gradients with respect to the perturbed inputs themselves, so that under improve_precision
        they stay in float32 instead of being cast back to the inputs' float16."""
        args, kwargs = saved
        needs_grad = [t.requires_grad for t in tensors_in((args, kwargs), self.is_tensor)]
        if not any(needs_grad):
            return Skip("no input needs a gradient")
        perturbed = self.perturb(mode, args, kwargs)
        if isinstance(perturbed, Skip):
            return perturbed
        flags = iter(needs_grad)
        perturbed = map_tensors(
            perturbed, self.is_tensor, lambda t: t.detach().requires_grad_() if next(flags) else t.detach()
        )
        leaves = [t for t in tensors_in(perturbed, self.is_tensor) if t.requires_grad]
        with torch.enable_grad():  # the backward pass runs with gradients off
            outputs, _ = tree_flatten(self.rerun(call, *perturbed, state, differentiable=True))
            pairs = [
                (out, grad) for out, grad in zip(outputs, grad_input)
                if isinstance(out, torch.Tensor) and out.requires_grad and grad is not None
            ]
            if not pairs:
                return Skip("no gradient reached its outputs")
            grads = iter(torch.autograd.grad(
                [out for out, _ in pairs], leaves, [grad.to(out.dtype) for out, grad in pairs], allow_unused=True
            ))
        return [next(grads) if flag else None for flag in needs_grad]
