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
from msprobe.core.grad_probe import GradMonitorBase, statistics_parts
from msprobe.core.services.log import logger
from msprobe.mindspore.rank import current_rank


class GradMonitor(GradMonitorBase):
    """Writes ``{dump_path}/rank{R}/grad_summary_{step}.csv`` (and sign arrays at L1/L2) per optimizer call."""

    rank_lookup = staticmethod(current_rank)

    def __init__(self, dump_path: str, grad_level: str, param_list: Sequence[str], bounds: Sequence[float],
                 steps: Sequence[int], ranks: Sequence[int]):
        super().__init__(dump_path, grad_level, param_list, bounds, steps, ranks)
        self._selected: list[tuple[int, str]] = []

    def monitor(self, optimizer: ms.nn.Optimizer) -> None:
        """Start recording the gradients ``optimizer`` receives at each call."""
        if not isinstance(optimizer, ms.nn.Optimizer):
            raise TypeError(f"optimizer: expected a mindspore.nn.Optimizer, got {type(optimizer).__name__}")
        if ms.get_context("mode") == ms.GRAPH_MODE:
            logger.warning("grad_probe: GRAPH_MODE compiles the optimizer call; its hooks (and this probe) "
                           "only run in PYNATIVE_MODE")
        names = [p.name for p in optimizer.parameters]
        self._selected = [(i, names[i]) for i in self._select(names, "optimizer")]
        self._hooks.add(optimizer.register_forward_pre_hook(self._before_step))
        self._hooks.add(optimizer.register_forward_hook(self._after_step))

    def _before_step(self, cell: ms.nn.Cell, inputs: tuple) -> None:
        self._step_begins(lambda: self._gradients(cell, inputs[0]))

    def _gradients(self, cell: ms.nn.Cell, grads: tuple) -> list[tuple[str, ms.Tensor]]:
        """The selected gradients of the update (its gradient tuple is aligned with ``cell.parameters``)."""
        if not self._selected:
            return []
        if len(grads) != len(cell.parameters):
            raise ValueError(f"grad_probe: the optimizer received {len(grads)} gradients for "
                             f"{len(cell.parameters)} parameters; cannot tell which is which")
        return [(n, grads[i]) for i, n in self._selected if grads[i].size]

    def _after_step(self, cell: ms.nn.Cell, inputs: tuple, outputs: object) -> None:
        self._step_done()

    def _reduce(self, grads: list[ms.Tensor], bounds: tuple[float, ...] | None, signs: bool,
                values: bool) -> tuple[ms.Tensor, ms.Tensor | None, ms.Tensor | None]:
        """max/min are exact in any dtype; the norm accumulates in float32 (float64 for float64 gradients)."""
        stats = []
        for grad in grads:
            norm = ops.norm(grad.astype(ms.float64 if grad.dtype == ms.float64 else ms.float32))
            stats.append(ops.stack([part.astype(ms.float64) for part in statistics_parts(grad, norm, bounds)]))
        flat = [g.reshape(-1) for g in grads]
        return (ops.stack(stats), ops.cat([f > 0 for f in flat]) if signs else None,
                ops.cat([f.astype(ms.float32) for f in flat]) if values else None)

    def _to_host(self, tensor: ms.Tensor) -> np.ndarray:
        return tensor.asnumpy()
