"""The rows of the step being collected, framework-free: which queued reduction is which tensor's.

A framework's hooks hand named tensors to :class:`StepCollector`; its *buffer* (the framework's: it
reduces tensors where they live, see ``msprobe.pytorch.monitor.stats``) says where each tensor's
reductions will be in the step's single transfer. At the step's end :meth:`StepCollector.rows` makes that
transfer and builds the rows the writers and alert rules read, in execution order.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

import numpy as np

from msprobe.core.monitor.ops import finish
from msprobe.core.monitor.records import MetricRow

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


class StepCollector:
    """The rows of the step being collected; errors are logged once per source and that source left out."""

    def __init__(self, ops: tuple[str, ...], reductions: tuple[str, ...], buffer: ReductionBuffer,
                 failed: set[str]) -> None:
        self.ops, self.reductions = ops, reductions
        self.buffer = buffer
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

    def rows(self) -> tuple[MetricRow, ...]:
        """The step's rows on the host (the one transfer of the step); the collector is empty afterwards."""
        values = self.buffer.transfer()
        queued = self.queued
        indices = np.fromiter((q.place.index for q in queued), dtype=np.int64, count=len(queued))
        numel = np.fromiter((q.place.numel for q in queued), dtype=np.float64, count=len(queued))
        table = finish(self.ops, self.reductions, values[indices], numel).tolist()
        rows = tuple(
            MetricRow(q.group, q.name, q.micro_step, tuple(line), q.place.shape, q.place.dtype, order, q.vpp_stage)
            for order, (q, line) in enumerate(zip(queued, table))
        )
        self.queued, self.keys = [], set()
        return rows
