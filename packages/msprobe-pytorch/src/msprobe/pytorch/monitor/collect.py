"""What TrainerMon collects during one step, and the hooks that feed it.

Data flows one way: a hook hands tensors to :class:`StepCollector`, which queues their reductions on the
device (:class:`~msprobe.pytorch.monitor.stats.StepBuffer`) and remembers, in execution order, which row
is which; at the step's end :meth:`StepCollector.rows` brings everything to the host once and builds the
framework-free rows that the writers and alert rules read.

Activations come from forward hooks; activation gradients from tensor hooks registered on those same
inputs and outputs (not ``register_full_backward_hook``, which rewires the graph and breaks in-place ops
after a hooked module). A forward run again by activation checkpointing during the backward pass is
not measured a second time (its outputs only get gradient hooks: under reentrant checkpointing they are
the ones the gradients flow through).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

import torch

from msprobe.core.monitor.ops import finish
from msprobe.core.monitor.records import ACTV, ACTV_GRAD, MetricRow
from msprobe.pytorch.monitor.stats import Pending, StepBuffer, measurable

logger = logging.getLogger("msprobe")
in_backward = torch._C._current_graph_task_id  # -1 outside a backward pass


def tensors_in(value: object) -> list[torch.Tensor]:
    """The measurable tensors of a hook argument: a tensor, or those directly inside a tuple, list or dict."""
    if isinstance(value, torch.Tensor):
        items: Iterable = (value,)
    elif isinstance(value, (tuple, list)):
        items = value
    elif isinstance(value, dict):
        items = value.values()
    else:
        return []
    return [item for item in items if measurable(item)]


def labelled(name: str, tag: str, tensors: list[torch.Tensor]) -> list[tuple[str, torch.Tensor]]:
    """Upstream's names: ``fc1.input`` for one tensor, ``fc1.input_0``, ``fc1.input_1``... for several."""
    if len(tensors) == 1:
        return [(f"{name}.{tag}", tensors[0])]
    return [(f"{name}.{tag}_{index}", tensor) for index, tensor in enumerate(tensors)]


@dataclass(frozen=True)
class Queued:
    group: str
    name: str
    micro_step: int | None
    place: Pending
    vpp_stage: int


class StepCollector:
    """The rows of the step being collected; errors are logged once per source and that source left out."""

    def __init__(self, ops: tuple[str, ...], reductions: tuple[str, ...], eps: float) -> None:
        self.ops, self.reductions = ops, reductions
        self.buffer = StepBuffer(reductions, eps)
        self.queued: list[Queued] = []
        self.keys: set[tuple] = set()
        self.failed: set[str] = set()

    def add(self, group: str, named: list[tuple[str, torch.Tensor]], micro_step: int | None, vpp: int = 0) -> None:
        """Queue each named tensor once per step and micro-step: under activation checkpointing the inputs of a
        checkpointed region get gradient hooks twice (first pass and recomputation), and both fire."""
        named = [(name, t) for name, t in named if (group, name, micro_step, vpp) not in self.keys]
        if not named:
            return
        self.keys.update((group, name, micro_step, vpp) for name, _ in named)
        places = self.buffer.add([tensor for _, tensor in named])
        self.queued.extend(Queued(group, name, micro_step, place, vpp) for (name, _), place in zip(named, places))

    def alias(self, group: str, source_group: str) -> None:
        """Rows of ``group`` with the values already queued for ``source_group`` (gradients that no reduce changed)."""
        sources = [q for q in self.queued if q.group == source_group]
        self.queued.extend(Queued(group, q.name, q.micro_step, q.place, q.vpp_stage) for q in sources)

    def guard(self, source: str, error: Exception) -> None:
        if source not in self.failed:
            self.failed.add(source)
            logger.warning(
                "monitor: %s left out of the metrics after an error: %s: %s", source, type(error).__name__, error
            )

    def rows(self) -> tuple[MetricRow, ...]:
        """The step's rows on the host (the one transfer of the step); the collector is empty afterwards."""
        values = self.buffer.transfer()
        rows = tuple(
            MetricRow(
                q.group, q.name, q.micro_step, finish(self.ops, self.reductions, values[q.place.index], q.place.numel),
                q.place.shape, q.place.dtype, order, q.vpp_stage,
            )
            for order, q in enumerate(self.queued)
        )
        self.queued, self.keys = [], set()
        return rows


class ModuleWatch:
    """Forward hooks on the watched modules: activations and, through tensor hooks, their gradients."""

    def __init__(self, mon, collector_of, forward: bool, backward: bool) -> None:
        self.mon, self.collector_of = mon, collector_of
        self.forward, self.backward = forward, backward

    def hook(self, name: str, vpp: int):
        def forward_hook(module, args, kwargs, output):
            collector = self.collector_of()
            if collector is None or not module.training or name in collector.failed:
                return
            try:
                self._observe(collector, name, vpp, tensors_in(args) + tensors_in(kwargs), tensors_in(output))
            except Exception as error:  # the run goes on without this module's metrics
                collector.guard(name, error)

        return forward_hook

    def _observe(self, collector: StepCollector, name: str, vpp: int, inputs: list, outputs: list) -> None:
        micro = self.mon.micro_step
        named = labelled(name, "input", inputs) + labelled(name, "output", outputs)
        if self.forward and in_backward() == -1:
            collector.add(ACTV, named, micro, vpp)
        if torch.is_grad_enabled():  # forward_only still counts micro-batches by the gradients' arrival
            for label, tensor in named:
                if tensor.requires_grad:
                    tensor.register_hook(self._grad_hook(label, micro, vpp))

    def _grad_hook(self, label: str, micro: int, vpp: int):
        def grad_hook(grad):
            collector = self.collector_of()
            if collector is None:
                return
            self.mon.note_backward()
            if not self.backward or not measurable(grad):
                return
            try:
                collector.add(ACTV_GRAD, [(label, grad)], micro, vpp)
            except Exception as error:
                collector.guard(label, error)

        return grad_hook
