"""Framework-free records of what a call saw.

A framework adapter turns a tensor into a :class:`TensorRecord` at capture time (dtype, shape, no
host sync) and fills :attr:`TensorRecord.stats` later, when the statistics of a whole batch of
tensors come back from the device in one transfer. :meth:`TensorRecord.json_text` gives the
dump.json value (docs/dump_format.md#values) with the key order msprobe 1.1.1 writes.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, field


class _NotHandled:
    """Sentinel: an encoder hook does not know this value (distinct from ``None``, which encodes as null)."""

    _instance: _NotHandled | None = None

    def __new__(cls) -> _NotHandled:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NOT_HANDLED"


NOT_HANDLED = _NotHandled()


@dataclass
class TensorStats:
    """The four statistics of a tensor, exact for its dtype (docs/dump_format.md#values).

    ``max``/``min`` are bools for bool tensors; all four are ``None`` for empty tensors. The
    ``*_except_inf_nan`` values are the extremes over the finite elements, present only when the plain
    extreme is not finite (``None`` when no element is finite).
    """

    max: float | bool | None
    min: float | bool | None
    mean: float | None
    norm: float | None
    max_except_inf_nan: float | None = None
    min_except_inf_nan: float | None = None
    # The members' JSON text, made once: an unchanged tensor is seen again and again (one call's output
    # is the next call's input) and shares these statistics, and writing a float is most of an entry's cost.
    _members: tuple[str, str] | None = field(default=None, init=False, repr=False, compare=False)

    def is_finite(self) -> bool:
        """True when no statistic shows inf or NaN (bool and empty tensors are always finite)."""
        return all(
            v is None or isinstance(v, bool) or math.isfinite(v)
            for v in (self.max, self.min, self.mean, self.norm)
        )

    def json_members(self) -> tuple[str, str]:
        """(the ``Max``..``Norm`` members, the ``*_except_inf_nan`` members or "") as JSON object text."""
        if self._members is None:
            high, low, mean, norm = self.max, self.min, self.mean, self.norm
            if type(high) is float and type(low) is float and type(mean) is float and type(norm) is float \
                    and math.isfinite(high + low + mean + norm):  # the common case: four finite floats
                self._members = f'"Max": {high!r}, "Min": {low!r}, "Mean": {mean!r}, "Norm": {norm!r}', ""
                return self._members
            high, low, mean, norm = (_number(v) for v in (high, low, mean, norm))
            extremes = ""
            if not _finite_or_none(self.max):
                extremes += f', "Max_except_inf_nan": {_number(self.max_except_inf_nan)}'
            if not _finite_or_none(self.min):
                extremes += f', "Min_except_inf_nan": {_number(self.min_except_inf_nan)}'
            self._members = f'"Max": {high}, "Min": {low}, "Mean": {mean}, "Norm": {norm}', extremes
        return self._members


@dataclass
class TensorRecord:
    """One tensor argument or output as dump.json shows it."""

    type_name: str
    dtype: str
    shape: tuple[int, ...]
    requires_grad: bool | None = None
    stats: TensorStats | None = None
    md5: str | None = None
    data_name: str | None = None
    # A shard of a distributed tensor: its layout (placements, mesh, coordinate, global shape), written
    # as the member ``dtensor`` after 1.1.1's members, which its readers ignore (docs/pytorch/distributed.md).
    dtensor: dict | None = None

    def json_text(self) -> str:
        """The dump.json value: members in the order msprobe 1.1.1 writes them (``type``, ``dtype``,
        ``shape``, the statistics, ``requires_grad``, the finite extremes, ``md5``, ``data_name``), then
        our extension ``dtensor``."""
        if self.stats is WITHOUT_STATISTICS:  # summary_mode xor: the checksum alone
            text, extremes = _head(self.type_name, self.dtype, self.shape)[:-2], ""
        else:
            statistics, extremes = (self.stats or _NO_STATS).json_members()
            text = _head(self.type_name, self.dtype, self.shape) + statistics
        if self.requires_grad is not None:
            text += ', "requires_grad": true' if self.requires_grad else ', "requires_grad": false'
        text += extremes
        if self.md5 is not None:
            text += f', "md5": {json.dumps(self.md5)}'
        if self.data_name is not None:
            text += f', "data_name": {json.dumps(self.data_name)}'
        if self.dtensor is not None:
            text += f', "dtensor": {json.dumps(self.dtensor)}'
        return text + "}"


_NO_STATS = TensorStats(None, None, None, None)  # read only
# A record's ``stats`` when it is summarised by its XOR checksum alone: no Max..Norm members are written.
WITHOUT_STATISTICS = TensorStats(None, None, None, None)


def _finite_or_none(value: float | bool | None) -> bool:
    return value is None or isinstance(value, bool) or math.isfinite(value)


def _number(value: float | bool | None) -> str:
    """A statistic as json writes it (``float.__repr__``; NaN/Infinity tokens; true/false; null), without
    json's per-call setup: four of these per distinct tensor."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and math.isfinite(value):
        return float.__repr__(value)
    return json.dumps(value)


@functools.lru_cache(maxsize=4096)
def _head(type_name: str, dtype: str, shape: tuple[int, ...]) -> str:
    """``{"type": ..., "dtype": ..., "shape": [...], `` — the same few recur in every step."""
    shape_text = json.dumps([int(n) for n in shape])
    return f'{{"type": {json.dumps(type_name)}, "dtype": {json.dumps(dtype)}, "shape": {shape_text}, '
