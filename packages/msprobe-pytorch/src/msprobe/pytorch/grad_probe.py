"""Grad probe for PyTorch: per-parameter gradient statistics after every optimizer step.

How it hooks in: ``monitor(model, optimizer)`` registers a step pre-hook and post-hook on
``optimizer``; without an optimizer it registers the global ``torch.optim`` step hooks and binds to
the first optimizer whose ``param_groups`` hold one of the model's monitored parameters. The pre-hook
reduces every monitored gradient on its device exactly as the optimizer is about to read it (no sync,
no copy to the host); the post-hook — which runs only when ``step()`` returned — fetches the
stacked statistics and signs to the host in one transfer each, writes the files and advances the step
counter. A step the optimizer never ran (``GradScaler`` skipping an inf/NaN step does not call
``step()``) is therefore neither written nor counted. Gradients are only read, never modified, so
training numbers are unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from msprobe.core.grad_probe import GradMonitorBase, statistics_parts
from msprobe.core.services.handles import Handle
from msprobe.core.services.log import logger
from msprobe.pytorch.rank import current_rank


def _gradient_stats(grad: torch.Tensor, bounds: Sequence[float] | None) -> torch.Tensor:
    """One parameter's statistics vector (layout in ``msprobe.core.grad_probe.summary``), on the device.

    max/min are exact in any dtype; the norm accumulates in float32 (float64 for float64 gradients).
    """
    norm = torch.linalg.vector_norm(grad, dtype=torch.float64 if grad.dtype == torch.float64 else torch.float32)
    return torch.stack([part.to(torch.float64) for part in statistics_parts(grad, norm, bounds)])


class GradMonitor(GradMonitorBase):
    """Writes ``{dump_path}/rank{R}/grad_summary_{step}.csv`` (and sign arrays at L1/L2) per step.

    Until :meth:`monitor` it reminds the user, once, that nothing is recorded (see :meth:`step_ended`).
    """

    rank_lookup = staticmethod(current_rank)

    def __init__(self, dump_path: str, grad_level: str, param_list: Sequence[str], bounds: Sequence[float],
                 steps: Sequence[int], ranks: Sequence[int]):
        super().__init__(dump_path, grad_level, param_list, bounds, steps, ranks)
        self._params: list[tuple[str, torch.nn.Parameter]] = []
        self._optimizer: torch.optim.Optimizer | None = None
        self._monitor_called = False
        self._warned_unmonitored = False
        # Also warn at the first optimizer step taken without monitor() (a loop that never calls the
        # debugger's start/step): a global step hook, inert once it has warned (it cannot remove itself
        # while torch iterates over the hooks) and removed by monitor, close or step_ended.
        self._reminder = Handle(register_optimizer_step_post_hook(self._remind).remove)

    def step_ended(self) -> None:
        """Say, once, that nothing is recorded yet: configured from a config file, grad_probe looks set up,
        but it sees gradients only through the optimizer hooks that :meth:`monitor` registers."""
        self._reminder.remove()
        self._remind()

    def _remind(self, *_hook_args: object) -> None:
        if self._monitor_called or self._warned_unmonitored:
            return
        self._warned_unmonitored = True
        logger.warning(
            "grad_probe records nothing until debugger.monitor(model) is called (or monitor(model, optimizer)), "
            "once, before the training loop; start(), stop() and step() do not record gradients"
        )

    def monitor(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None) -> None:
        """Start recording ``model``'s gradients at every step of ``optimizer`` (found at the first step)."""
        named = list(model.named_parameters())
        selected = self._select([name for name, _ in named], "model")
        self._monitor_called = True
        self._reminder.remove()
        self._params = [named[i] for i in selected]
        if optimizer is None:
            self._hooks.add(register_optimizer_step_pre_hook(self._before_step))
            self._hooks.add(register_optimizer_step_post_hook(self._after_step))
        else:
            self._optimizer = optimizer
            self._hooks.add(optimizer.register_step_pre_hook(self._before_step))
            self._hooks.add(optimizer.register_step_post_hook(self._after_step))

    def close(self) -> None:
        """Remove the hooks (the reminder too: no stray warning later); the files already written stay."""
        self._reminder.remove()
        super().close()

    def _owns(self, optimizer: torch.optim.Optimizer) -> bool:
        """Whether ``optimizer`` is the one this monitor follows (binding to it on first sight)."""
        if self._optimizer is None:
            monitored = {id(p) for _, p in self._params}
            if any(id(p) in monitored for group in optimizer.param_groups for p in group["params"]):
                self._optimizer = optimizer
                logger.info("grad_probe: following optimizer %s", type(optimizer).__name__)
        return optimizer is self._optimizer

    def _before_step(self, optimizer: torch.optim.Optimizer, args: object, kwargs: object) -> None:
        if self._owns(optimizer):
            self._step_begins(self._gradients)

    def _gradients(self) -> list[tuple[str, torch.Tensor]]:
        return [(n, p.grad.detach()) for n, p in self._params if p.grad is not None and p.numel()]

    def _after_step(self, optimizer: torch.optim.Optimizer, args: object, kwargs: object) -> None:
        if optimizer is self._optimizer:
            self._step_done()

    def _reduce(self, grads: list[torch.Tensor], bounds: tuple[float, ...] | None, signs: bool,
                values: bool) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        with torch.no_grad():
            flat = [g.reshape(-1) for g in grads]
            return (torch.stack([_gradient_stats(g, bounds) for g in grads]),
                    torch.cat([f > 0 for f in flat]) if signs else None,
                    torch.cat([f.float() for f in flat]) if values else None)

    def _to_host(self, tensor: torch.Tensor) -> np.ndarray:
        return tensor.cpu().numpy()
