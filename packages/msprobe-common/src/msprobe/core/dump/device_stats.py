"""Statistics left on an accelerator, and the fetch that brings a batch of them to the host.

On an accelerator both adapters leave the statistics on the device as one row of :data:`STAT_COUNT`
float64 numbers per tensor (a :class:`StatsHandle`), or copy a small tensor there to be reduced with its
group at the fetch (a :class:`DeviceCopy`), and bring many rows to the host in one transfer:
:meth:`StatsAdapterBase.fetch` keeps the order of a batch mixing such handles with host copies
(:mod:`msprobe.core.dump.host_stats`) and statistics already known, and :func:`stats_from_row` reads a row
back. Every pending handle has ``stats``: ``None`` until its batch is fetched, so the encoder asks a handle
whether it is resolved instead of knowing its type.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from msprobe.core.contract import TensorRecord, TensorStats
from msprobe.core.dump.host_stats import HostCopy, resolve_copies

# The row a device reduction leaves: max, min, mean, norm, max over finite elements, min over finite
# elements (for bool tensors: any, all, then zeros).
STAT_COUNT = 6


@dataclass
class StatsHandle:
    """Statistics in flight: ``values`` is a framework tensor of :data:`STAT_COUNT` float64 numbers
    still on its device; ``is_bool`` selects the any/all reading of max/min. ``stats`` is set when fetched
    (the device values are then let go), so a repeat of an unchanged tensor shares it."""

    values: Any
    is_bool: bool = False
    stats: TensorStats | None = field(default=None, init=False, compare=False)


def stats_from_row(row: Sequence[float], is_bool: bool = False) -> TensorStats:
    """The statistics of one fetched row; the finite extremes only where max/min are not finite and
    some element was (a finite extreme that stayed infinite means none was)."""
    if is_bool:
        return TensorStats(bool(row[0]), bool(row[1]), None, None)
    high, low, mean, norm, finite_high, finite_low = row
    return TensorStats(
        high,
        low,
        mean,
        norm,
        max_except_inf_nan=None if math.isfinite(high) or not math.isfinite(finite_high) else finite_high,
        min_except_inf_nan=None if math.isfinite(low) or not math.isfinite(finite_low) else finite_low,
    )


class DeviceCopy:
    """A small tensor's statistics on its device, not computed yet: a flat copy in its reduction dtype,
    taken at the call (one or two launches; it holds what the call saw, whatever changes the tensor
    afterwards), reduced at the fetch with every other copy of the same ``key`` (what the framework groups
    by: dtype and size, and device) by :meth:`StatsAdapterBase.reduce_copies`, its row coming to the host
    in the batch's one transfer. The device's counterpart of :class:`HostCopy`: about a dozen launches per
    group instead of a dozen per tensor, which was the host's work per call on an accelerator. ``stats``
    is set when fetched (the copy is then let go), so a repeat of an unchanged tensor shares it."""

    __slots__ = ("values", "key", "stats")

    def __init__(self, values: Any, key: tuple) -> None:
        self.values: Any = values
        self.key = key  # known at the call: asking a fresh copy would wait for the device
        self.stats: TensorStats | None = None


class StatsAdapterBase:
    """The framework-free half of a :class:`~msprobe.core.contract.TensorAdapter`: which values are the
    framework's tensors (``tensor_type``), and fetching a batch of statistics in one transfer. A
    framework adapter supplies :meth:`transfer` (its device values → rows of numbers) and, when it hands
    out :class:`DeviceCopy` handles, :meth:`reduce_copies`."""

    tensor_type: type = object

    def is_tensor(self, value: Any) -> bool:
        return isinstance(value, self.tensor_type)

    def select_rows(self, tensor: Any, rows: Any) -> Any:
        """The selected rows by the tensor's own indexing (a view on its device), or the tensor itself."""
        index = rows.index(tuple(tensor.shape))
        return tensor if index is None else tensor[index]

    def capture(self, tensor: Any, remember: bool = False) -> tuple[TensorRecord, StatsHandle | TensorStats]:
        """:meth:`describe` and :meth:`stats` of one tensor (a framework may do both under one guard, and
        keep results for tensors it is asked to ``remember``)."""
        return self.describe(tensor), self.stats(tensor)

    def forget(self) -> None:
        """A new step; nothing is kept here (a framework adapter that keeps results drops them)."""

    def fetch(self, handles: Sequence[StatsHandle | DeviceCopy | HostCopy | TensorStats]) -> list[TensorStats]:
        """The statistics of ``handles`` in their order: the :class:`HostCopy` arrays are reduced in
        stacks; the :class:`DeviceCopy` copies are reduced per group on their devices, and their rows go
        to the host with the :class:`StatsHandle` values in one :meth:`transfer`; statistics that were
        computed on the host already are kept as they are. A handle met twice is resolved once."""
        resolve_copies([h for h in handles if isinstance(h, HostCopy)])
        groups: dict[tuple, dict[int, DeviceCopy]] = {}  # unresolved copies by key, each once, in order
        rowed: dict[int, StatsHandle] = {}  # unresolved handles, each once, in order
        for h in handles:
            if isinstance(h, DeviceCopy) and h.stats is None:
                groups.setdefault(h.key, {})[id(h)] = h
            elif isinstance(h, StatsHandle) and h.stats is None:
                rowed[id(h)] = h
        values = [self.reduce_copies([copy.values for copy in group.values()], key) for key, group in groups.items()]
        values += [h.values for h in rowed.values()]
        rows = iter(self.transfer(values) if values else ())  # the copies' rows first, then the handles'
        for group in groups.values():
            for copy in group.values():
                copy.stats, copy.values = stats_from_row(next(rows)), None
        for h in rowed.values():
            h.stats, h.values = stats_from_row(next(rows), h.is_bool), None
        return [h if isinstance(h, TensorStats) else h.stats for h in handles]

    def transfer(self, values: list[Any]) -> Sequence[Sequence[float]]:
        """Device values of :data:`STAT_COUNT` numbers each, or of a multiple of it (a group's rows from
        :meth:`reduce_copies`), to the host in one transfer → their rows in order."""
        raise NotImplementedError

    def reduce_copies(self, copies: list[Any], key: tuple) -> Any:
        """The rows of one group's copies (their common ``key``), flat: one device value of
        :data:`STAT_COUNT` float64 numbers per copy, in order (max, min, mean, norm, finite max, finite
        min)."""
        raise NotImplementedError
