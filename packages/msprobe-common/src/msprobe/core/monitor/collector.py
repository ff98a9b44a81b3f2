"""The rows of the step being collected, framework-free: which queued reduction is which tensor's.

A framework's hooks hand named tensors to :class:`StepCollector`; its *buffer* (the framework's: it
reduces tensors where they live, see ``msprobe.pytorch.monitor.stats``) says where each tensor's
reductions will be in the step's single transfer. At the step's end :meth:`StepCollector.metrics` makes that
transfer and hands the writers and alert rules the step's values with its rows' layout, in execution order.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

import numpy as np

from msprobe.core.monitor.ops import finish
from msprobe.core.monitor.records import RowLayout, StepMetrics

logger = logging.getLogger("msprobe")


class Pending(NamedTuple):
    """Where a tensor's reductions will be in the step's transfer, and what the host needs to finish them.
    (A named tuple, like :class:`Queued`: hooks make one per tensor, and a frozen dataclass costs 3x as much.)"""

    index: int
    numel: int
    shape: tuple[int, ...]
    dtype: str


@functools.lru_cache(maxsize=65536)  # the same few names every step: built once, not per hook call
def labels(name: str, tag: str, count: int) -> tuple[str, ...]:
    """Upstream's names: ``fc1.input`` for one tensor, ``fc1.input_0``, ``fc1.input_1``... for several."""
    if count == 1:
        return (f"{name}.{tag}",)
    return tuple(f"{name}.{tag}_{index}" for index in range(count))


def labelled(name: str, tag: str, tensors: list[Any]) -> list[tuple[str, Any]]:
    """``tensors`` with their :func:`labels`."""
    return list(zip(labels(name, tag, len(tensors)), tensors))


class ReductionBuffer(Protocol):
    def add(self, tensors: Sequence[Any], reuse: bool = True) -> list[Pending]: ...

    def add_reduced(self, block: Any, shape: tuple[int, ...], dtype: str) -> list[Pending]: ...

    def transfer(self) -> np.ndarray: ...


class Queued(NamedTuple):
    group: str
    name: str
    micro_step: int | None
    place: Pending
    vpp_stage: int


class LayoutMemo:
    """The last collected step's queue and its :class:`RowLayout`: a run's collectors share one, so a step
    queued as the step before hands out the same layout, and the host reuses its index arrays."""

    def __init__(self) -> None:
        self.queued: list[Queued] = []
        self.layout: RowLayout | None = None
        self.indices = self.numel = np.empty(0)

    def of(self, queued: list[Queued]) -> tuple[RowLayout, np.ndarray, np.ndarray]:
        """The layout of ``queued`` with each row's place in the transfer and its tensor's numel."""
        if self.layout is None or queued != self.queued:
            places = [q.place for q in queued]
            self.layout = RowLayout(tuple(q.group for q in queued), tuple(q.name for q in queued),
                                    tuple(q.micro_step for q in queued), tuple(p.shape for p in places),
                                    tuple(p.dtype for p in places), tuple(q.vpp_stage for q in queued))
            self.indices = np.fromiter((p.index for p in places), dtype=np.int64, count=len(places))
            self.numel = np.fromiter((p.numel for p in places), dtype=np.float64, count=len(places))
            self.queued = queued
        return self.layout, self.indices, self.numel


class StepCollector:
    """The rows of the step being collected; errors are logged once per source and that source left out."""

    def __init__(self, ops: tuple[str, ...], reductions: tuple[str, ...], buffer: ReductionBuffer,
                 failed: set[str], layouts: LayoutMemo) -> None:
        self.ops, self.reductions = ops, reductions
        self.buffer, self.layouts = buffer, layouts
        self.queued: list[Queued] = []
        self.keys: set[tuple] = set()
        self.failed = failed  # the run's: a source that failed once stays out

    def add(self, group: str, named: list[tuple[str, Any]], micro_step: int | None, vpp: int = 0,
            reuse: bool = True) -> None:
        """Queue each named tensor once per step and micro-step: under activation checkpointing the inputs of a
        checkpointed region get gradient hooks twice (first pass and recomputation), and both fire. ``reuse``
        False: reduce the tensors again even if seen before (a collective writes its result in place without
        a new tensor version)."""
        keys, fresh = self.keys, []
        for name, tensor in named:
            key = (group, name, micro_step, vpp)
            if key not in keys:
                keys.add(key)
                fresh.append((name, tensor))
        if not fresh:
            return
        places = self.buffer.add([tensor for _, tensor in fresh], reuse)
        self.queued.extend(Queued(group, name, micro_step, place, vpp) for (name, _), place in zip(fresh, places))

    def add_reduced(self, group: str, names: list[str], block: Any, shape: tuple[int, ...], dtype: str,
                    micro_step: int | None, vpp: int = 0) -> None:
        """Queue rows whose reductions the framework computed itself, ``block[i]`` for ``names[i]`` (per-element
        values already divided: several rows drawn from one tensor, such as an MoE layer's experts)."""
        places = self.buffer.add_reduced(block, shape, dtype)
        self.queued.extend(Queued(group, name, micro_step, place, vpp) for name, place in zip(names, places))

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

    def metrics(self, step: int, rank: int) -> StepMetrics:
        """The step's rows on the host (the one transfer of the step); the collector is empty afterwards."""
        values = self.buffer.transfer()
        layout, indices, numel = self.layouts.of(self.queued)
        table = finish(self.ops, self.reductions, values[indices], numel)
        self.queued, self.keys = [], set()
        return StepMetrics(step, rank, self.ops, layout, table)
