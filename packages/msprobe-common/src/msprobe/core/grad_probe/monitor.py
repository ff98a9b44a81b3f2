"""The gradient monitor's framework-free half: selection, step bookkeeping, the pending step and its flush.

A framework's ``GradMonitor`` subclasses :class:`GradMonitorBase` and adds only what needs its tensors
and hooks:

- hooks around the optimizer's update, registered into ``self._hooks`` (a
  :class:`~msprobe.core.services.handles.HandleGroup`, removed by :meth:`GradMonitorBase.close`). The hook before
  the update calls :meth:`~GradMonitorBase._step_begins` with the gradients it is about to use; the hook
  after it — which runs only when the update returned — calls :meth:`~GradMonitorBase._step_done`;
- :meth:`~GradMonitorBase._reduce`: the statistics matrix, signs and values of a list of gradients,
  computed on their device without a sync (:func:`~msprobe.core.grad_probe.summary.statistics_parts`
  gives one gradient's statistics in the file layout), and :meth:`~GradMonitorBase._to_host`;
- ``rank_lookup``: the framework's answer to "which rank is this process".

The device results of the hook before the update wait as a pending step; the hook after it fetches them
(one transfer per array), writes the step's files and counts the step. An update that never runs (a
skipped inf/NaN step) is therefore neither written nor counted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from msprobe.core.grad_probe.summary import GradProbeSettings, write_step
from msprobe.core.services.handles import HandleGroup
from msprobe.core.services.log import logger


@dataclass
class _PendingStep:
    """Device-side results of the hook before the update, waiting for the update to complete."""

    rank: int
    names: list[str]
    shapes: list[tuple[int, ...]]
    stats: Any
    signs: Any
    values: Any


class GradMonitorBase:
    """Writes ``{dump_path}/rank{R}/grad_summary_{step}.csv`` (and sign arrays at L1/L2) per step."""

    rank_lookup: Callable[[], int | None]
    """The framework's ``current_rank`` (``None``: no process group), set by the subclass as a staticmethod."""

    def __init__(self, dump_path: str, grad_level: str, param_list: Sequence[str], bounds: Sequence[float],
                 steps: Sequence[int], ranks: Sequence[int]) -> None:
        self._settings = GradProbeSettings.create(dump_path, grad_level, param_list, bounds, steps, ranks)
        self._hooks = HandleGroup()
        self._pending: _PendingStep | None = None
        self.step = 0
        """Optimizer steps completed so far; the number of the next step to be recorded."""

    def step_ended(self) -> None:
        """An iteration of the training loop has ended (the debugger's ``step()``); nothing to do here."""

    def close(self) -> None:
        """Remove the hooks; the files already written stay."""
        self._hooks.remove()
        self._pending = None

    # the framework's tensor operations ---------------------------------------------------------------

    def _reduce(self, grads: list[Any], bounds: tuple[float, ...] | None, signs: bool,
                values: bool) -> tuple[Any, Any, Any]:
        """On the device: the (gradients × ``stat_width``) float64 statistics (interval counts only when
        ``bounds`` is given), and when asked the concatenated flattened ``grad > 0`` and float32 values."""
        raise NotImplementedError

    def _to_host(self, tensor: Any) -> np.ndarray:
        raise NotImplementedError

    # what every framework does the same way ----------------------------------------------------------

    def _select(self, names: Sequence[str], owner: str) -> list[int]:
        """``monitor()``: the positions of the monitored parameters among ``names`` (of the ``owner``:
        model, optimizer), saying which ``param_list`` entries match nothing and when nothing is selected."""
        if self._hooks.active:
            raise RuntimeError("GradMonitor.monitor() was already called; call close() first")
        for entry in self._settings.unmatched_entries(names):
            logger.warning("grad_probe: param_list entry %r matches no parameter of the %s", entry, owner)
        selected = [i for i, name in enumerate(names) if self._settings.selects(name)]
        if not selected:
            logger.warning("grad_probe: no parameter selected; nothing will be written")
        logger.info("grad_probe: monitoring %d parameters at %s into %s", len(selected),
                    self._settings.grad_level, self._settings.dump_path)
        return selected

    def _step_begins(self, gradients: Callable[[], list[tuple[str, Any]]]) -> None:
        """The update is about to run: when this step and rank are recorded, reduce the ``(name,
        gradient)`` pairs that ``gradients()`` returns on their device and keep them pending."""
        self._pending = None
        rank = self.rank_lookup()
        rank = 0 if rank is None else rank  # grad probe numbers its rank directory always
        if not self._settings.records(self.step, rank):
            return
        chosen = gradients()
        if not chosen:
            return
        settings = self._settings
        grads = [grad for _, grad in chosen]
        bounds = settings.bounds if settings.grad_level == "L2" else None
        stats, signs, values = self._reduce(grads, bounds, settings.saves_signs, settings.grad_level == "L0")
        self._pending = _PendingStep(rank, [name for name, _ in chosen], [tuple(g.shape) for g in grads],
                                     stats, signs, values)

    def _step_done(self) -> None:
        """The update returned: fetch the pending step to the host, write its files and count the step."""
        pending, self._pending = self._pending, None
        if pending is not None:
            signs, values = (None if t is None else self._to_host(t) for t in (pending.signs, pending.values))
            write_step(self._settings, pending.rank, self.step, pending.names, pending.shapes,
                       self._to_host(pending.stats), signs, values)
        self.step += 1
