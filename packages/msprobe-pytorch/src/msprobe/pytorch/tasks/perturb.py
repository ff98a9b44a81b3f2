"""The PyTorch perturbations of free benchmark (docs/free_benchmark.md), one function per ``pert_mode``.

Each returns a new tensor and leaves its input untouched; all are differentiable (the gradient of a
perturbation is the identity or a cast), so ``fix`` keeps the autograd graph and the backward stage can
differentiate a perturbed re-run. They apply to floating-point inputs (``to_cpu``: every tensor).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from msprobe.core.free_benchmark.compare import NOISE

_LOW_PRECISION = (torch.float16, torch.bfloat16)
_SAME_WIDTH_INT = {torch.float16: torch.int16, torch.bfloat16: torch.int16,
                   torch.float32: torch.int32, torch.float64: torch.int64}


def improve_precision(t: torch.Tensor) -> torch.Tensor | None:
    """fp16/bf16 → fp32; ``None`` for other dtypes (nothing to raise)."""
    return t.to(torch.float32) if t.dtype in _LOW_PRECISION else None


def add_noise(t: torch.Tensor) -> torch.Tensor | None:
    """Every element moved by one ulp of its dtype, relatively."""
    noise = NOISE.get(str(t.dtype).removeprefix("torch."))
    return None if noise is None else t * (1.0 + noise)


def bit_noise(t: torch.Tensor) -> torch.Tensor | None:
    """The lowest mantissa bit of every finite element flipped (inf/NaN stay as they are)."""
    int_dtype = _SAME_WIDTH_INT.get(t.dtype)
    if int_dtype is None:
        return None
    with torch.no_grad():
        flipped = (t.detach().contiguous().view(int_dtype) ^ 1).view(t.dtype)
        delta = torch.where(torch.isfinite(t), flipped - t, torch.zeros((), dtype=t.dtype, device=t.device))
    return t + delta


def no_change(t: torch.Tensor) -> torch.Tensor:
    """The same values again: differences come from the API itself (non-determinism)."""
    return t


def change_value(t: torch.Tensor) -> torch.Tensor | None:
    """First and last elements swapped (a deliberately large change, to test the pipeline)."""
    if t.numel() < 2:
        return None
    flat = t.flatten().clone()
    first, last = flat[0].clone(), flat[-1].clone()
    flat[0], flat[-1] = last, first
    return flat.view(t.shape)


def to_cpu(t: torch.Tensor) -> torch.Tensor:
    return t.to("cpu")


PERTURBATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor | None]] = {
    "improve_precision": improve_precision,
    "add_noise": add_noise,
    "bit_noise": bit_noise,
    "no_change": no_change,
    "change_value": change_value,
    "to_cpu": to_cpu,
}
