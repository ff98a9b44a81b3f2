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

from msprobe.core.grad_probe import GradProbeSettings, write_step
from msprobe.core.log import logger
from msprobe.pytorch.rank import current_rank


def _gradient_stats(grad: torch.Tensor, bounds: Sequence[float] | None) -> torch.Tensor:
    """One parameter's statistics vector (layout in ``msprobe.core.grad_probe.summary``), on the device.

    max/min are exact in any dtype; the norm accumulates in float32 (float64 for float64 gradients).
    """
    norm_dtype = torch.float64 if grad.dtype == torch.float64 else torch.float32
    parts = [grad.max(), grad.min(), torch.linalg.vector_norm(grad, dtype=norm_dtype)]
    if bounds is not None:
        parts += [(grad <= bound).sum() for bound in bounds]
        parts += [(grad > bounds[-1]).sum(), (grad == 0).sum()]
    return torch.stack([part.to(torch.float64) for part in parts])


class _PendingStep:
    """Device-side results of the pre-hook, waiting for the step to complete."""

    def __init__(self, rank: int, names: list[str], grads: list[torch.Tensor], settings: GradProbeSettings):
        bounds = settings.bounds if settings.grad_level == "L2" else None
        self.rank = rank
        self.names = names
        self.shapes = [tuple(g.shape) for g in grads]
        self.stats = torch.stack([_gradient_stats(g, bounds) for g in grads])
        flat = [g.reshape(-1) for g in grads]
        self.signs = torch.cat([f > 0 for f in flat]) if settings.saves_signs else None
        self.values = torch.cat([f.float() for f in flat]) if settings.grad_level == "L0" else None

    def write(self, settings: GradProbeSettings, step: int) -> None:
        """Fetch to the host (one transfer per array) and write the step's files."""
        write_step(settings, self.rank, step, self.names, self.shapes, self.stats.cpu().numpy(),
                   _host(self.signs), _host(self.values))


def _host(tensor: torch.Tensor | None) -> np.ndarray | None:
    return None if tensor is None else tensor.cpu().numpy()


class GradMonitor:
    """Writes ``{dump_path}/rank{R}/grad_summary_{step}.csv`` (and sign arrays at L1/L2) per step."""

    def __init__(self, dump_path: str, grad_level: str, param_list: Sequence[str], bounds: Sequence[float],
                 steps: Sequence[int], ranks: Sequence[int]):
        self._settings = GradProbeSettings.create(dump_path, grad_level, param_list, bounds, steps, ranks)
        self._params: list[tuple[str, torch.nn.Parameter]] = []
        self._optimizer: torch.optim.Optimizer | None = None
        self._handles: list[torch.utils.hooks.RemovableHandle] = []
        self._pending: _PendingStep | None = None
        self._monitor_called = False
        self._warned_unmonitored = False
        self._reminder: torch.utils.hooks.RemovableHandle | None = None
        self.step = 0
        """Optimizer steps completed so far; the number of the next step to be recorded."""

    def warn_if_unmonitored(self) -> None:
        """Say, once, that nothing is recorded yet: configured from a config file, grad_probe looks set up,
        but it sees gradients only through the optimizer hooks that :meth:`monitor` registers."""
        self.drop_reminder()
        self._remind()

    def _remind(self, *_hook_args: object) -> None:
        if self._monitor_called or self._warned_unmonitored:
            return
        self._warned_unmonitored = True
        logger.warning(
            "grad_probe records nothing until debugger.monitor(model) is called (or monitor(model, optimizer)), "
            "once, before the training loop; start(), stop() and step() do not record gradients"
        )

    def remind_at_first_step(self) -> None:
        """Also warn at the first optimizer step taken without :meth:`monitor` (a loop that never calls
        the debugger's start/step): a global step hook, inert once it has warned (it cannot remove itself
        while torch iterates over the hooks) and removed by monitor, close or the debugger's step."""
        if self._reminder is None and not self._monitor_called:
            self._reminder = register_optimizer_step_post_hook(self._remind)

    def drop_reminder(self) -> None:
        """Remove the first-step reminder hook (also when the debugger finishes: no stray warning later)."""
        if self._reminder is not None:
            self._reminder.remove()
            self._reminder = None

    def monitor(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None) -> None:
        """Start recording ``model``'s gradients at every step of ``optimizer`` (found at the first step)."""
        if self._handles:
            raise RuntimeError("GradMonitor.monitor() was already called; call close() first")
        self._monitor_called = True
        self.drop_reminder()
        names = [name for name, _ in model.named_parameters()]
        for entry in self._settings.unmatched_entries(names):
            logger.warning("grad_probe: param_list entry %r matches no parameter of the model", entry)
        self._params = [(n, p) for n, p in model.named_parameters() if self._settings.selects(n)]
        if not self._params:
            logger.warning("grad_probe: no parameter selected; nothing will be written")
        if optimizer is None:
            self._handles = [
                register_optimizer_step_pre_hook(self._before_step),
                register_optimizer_step_post_hook(self._after_step),
            ]
        else:
            self._optimizer = optimizer
            self._handles = [optimizer.register_step_pre_hook(self._before_step),
                             optimizer.register_step_post_hook(self._after_step)]
        logger.info("grad_probe: monitoring %d parameters at %s into %s", len(self._params),
                    self._settings.grad_level, self._settings.dump_path)

    def close(self) -> None:
        """Remove the hooks; the files already written stay."""
        self.drop_reminder()
        for handle in self._handles:
            handle.remove()
        self._handles, self._pending = [], None

    def _owns(self, optimizer: torch.optim.Optimizer) -> bool:
        """Whether ``optimizer`` is the one this monitor follows (binding to it on first sight)."""
        if self._optimizer is None:
            monitored = {id(p) for _, p in self._params}
            if any(id(p) in monitored for group in optimizer.param_groups for p in group["params"]):
                self._optimizer = optimizer
                logger.info("grad_probe: following optimizer %s", type(optimizer).__name__)
        return optimizer is self._optimizer

    def _before_step(self, optimizer: torch.optim.Optimizer, args: object, kwargs: object) -> None:
        if not self._owns(optimizer):
            return
        self._pending = None
        rank = current_rank()
        rank = 0 if rank is None else rank  # grad probe numbers its rank directory always
        if not self._settings.records(self.step, rank):
            return
        with_grads = [(n, p.grad.detach()) for n, p in self._params if p.grad is not None and p.numel()]
        if with_grads:
            with torch.no_grad():
                self._pending = _PendingStep(rank, [n for n, _ in with_grads], [g for _, g in with_grads],
                                             self._settings)

    def _after_step(self, optimizer: torch.optim.Optimizer, args: object, kwargs: object) -> None:
        if optimizer is not self._optimizer:
            return
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.write(self._settings, self.step)
        self.step += 1
