"""Grad probe for MindSpore (PyNative): per-parameter gradient statistics at every optimizer call.

How it hooks in: a MindSpore optimizer is a ``Cell`` called with the gradient tuple
(``optimizer(grads)``), aligned with ``optimizer.parameters``. ``monitor(optimizer)`` registers a
forward pre-hook on that cell, which sees exactly the gradients the update is about to use and
reduces them on the device, and a forward hook, which runs only when the update returned: it fetches
the stacked statistics and signs to the host (one transfer each), writes the files and advances the
step counter. A step the training loop skips (no optimizer call, e.g. loss-scale overflow) is not
counted. Cell hooks run in PyNative mode only: when the optimizer call is compiled (GRAPH_MODE or
inside ``@jit``) nothing is recorded, and ``monitor`` warns about GRAPH_MODE.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

import mindspore as ms
from mindspore import ops
from msprobe.core.grad_probe import GradProbeSettings, write_step
from msprobe.core.log import logger
from msprobe.mindspore.rank import current_rank


def _gradient_stats(grad: ms.Tensor, bounds: Sequence[float] | None) -> ms.Tensor:
    """One parameter's statistics vector (layout in ``msprobe.core.grad_probe.summary``), on the device.

    max/min are exact in any dtype; the norm accumulates in float32 (float64 for float64 gradients).
    """
    norm_dtype = ms.float64 if grad.dtype == ms.float64 else ms.float32
    parts = [grad.max(), grad.min(), ops.norm(grad.astype(norm_dtype))]
    if bounds is not None:
        parts += [(grad <= bound).sum() for bound in bounds]
        parts += [(grad > bounds[-1]).sum(), (grad == 0).sum()]
    return ops.stack([part.astype(ms.float64) for part in parts])


class _PendingStep:
    """Device-side results of the pre-hook, waiting for the update to complete."""

    def __init__(self, rank: int, names: list[str], grads: list[ms.Tensor], settings: GradProbeSettings):
        bounds = settings.bounds if settings.grad_level == "L2" else None
        self.rank = rank
        self.names = names
        self.shapes = [tuple(g.shape) for g in grads]
        self.stats = ops.stack([_gradient_stats(g, bounds) for g in grads])
        flat = [g.reshape(-1) for g in grads]
        self.signs = ops.cat([f > 0 for f in flat]) if settings.saves_signs else None
        self.values = ops.cat([f.astype(ms.float32) for f in flat]) if settings.grad_level == "L0" else None

    def write(self, settings: GradProbeSettings, step: int) -> None:
        """Fetch to the host (one transfer per array) and write the step's files."""
        write_step(settings, self.rank, step, self.names, self.shapes, self.stats.asnumpy(),
                   _host(self.signs), _host(self.values))


def _host(tensor: ms.Tensor | None) -> np.ndarray | None:
    return None if tensor is None else tensor.asnumpy()


class GradMonitor:
    """Writes ``{dump_path}/rank{R}/grad_summary_{step}.csv`` (and sign arrays at L1/L2) per step."""

    def __init__(self, dump_path: str, grad_level: str, param_list: Sequence[str], bounds: Sequence[float],
                 steps: Sequence[int], ranks: Sequence[int]):
        self._settings = GradProbeSettings.create(dump_path, grad_level, param_list, bounds, steps, ranks)
        self._selected: list[tuple[int, str]] = []
        self._handles: list[object] = []
        self._pending: _PendingStep | None = None
        self.step = 0
        """Optimizer calls completed so far; the number of the next step to be recorded."""

    def monitor(self, optimizer: ms.nn.Optimizer) -> None:
        """Start recording the gradients ``optimizer`` receives at each call."""
        if self._handles:
            raise RuntimeError("GradMonitor.monitor() was already called; call close() first")
        if not isinstance(optimizer, ms.nn.Optimizer):
            raise TypeError(f"optimizer: expected a mindspore.nn.Optimizer, got {type(optimizer).__name__}")
        if ms.get_context("mode") == ms.GRAPH_MODE:
            logger.warning("grad_probe: GRAPH_MODE compiles the optimizer call; its hooks (and this probe) "
                           "only run in PYNATIVE_MODE")
        names = [p.name for p in optimizer.parameters]
        for entry in self._settings.unmatched_entries(names):
            logger.warning("grad_probe: param_list entry %r matches no parameter of the optimizer", entry)
        self._selected = [(i, n) for i, n in enumerate(names) if self._settings.selects(n)]
        if not self._selected:
            logger.warning("grad_probe: no parameter selected; nothing will be written")
        self._handles = [optimizer.register_forward_pre_hook(self._before_step),
                         optimizer.register_forward_hook(self._after_step)]
        logger.info("grad_probe: monitoring %d parameters at %s into %s", len(self._selected),
                    self._settings.grad_level, self._settings.dump_path)

    def close(self) -> None:
        """Remove the hooks; the files already written stay."""
        for handle in self._handles:
            handle.remove()
        self._handles, self._pending = [], None

    def _before_step(self, cell: ms.nn.Cell, inputs: tuple) -> None:
        self._pending = None
        rank = current_rank()
        rank = 0 if rank is None else rank  # grad probe numbers its rank directory always
        if not self._selected or not self._settings.records(self.step, rank):
            return
        grads = inputs[0]
        if len(grads) != len(cell.parameters):
            raise ValueError(f"grad_probe: the optimizer received {len(grads)} gradients for "
                             f"{len(cell.parameters)} parameters; cannot tell which is which")
        chosen = [(n, grads[i]) for i, n in self._selected if grads[i].size]
        if chosen:
            self._pending = _PendingStep(rank, [n for n, _ in chosen], [g for _, g in chosen], self._settings)

    def _after_step(self, cell: ms.nn.Cell, inputs: tuple, outputs: object) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.write(self._settings, self.step)
        self.step += 1
