"""Framework-free records of what a call saw.

A framework adapter turns a tensor into a :class:`TensorRecord` at capture time (dtype, shape, no
host sync) and fills :attr:`TensorRecord.stats` later, when the statistics of a whole batch of
tensors come back from the device in one transfer. :meth:`TensorRecord.to_json` gives the dump.json
value of SPEC 4.4 with the key order msprobe 1.1.1 writes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


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
    """The four statistics of a tensor, exact for its dtype (SPEC 4.4).

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

    def is_finite(self) -> bool:
        """True when no statistic shows inf or NaN (bool and empty tensors are always finite)."""
        return all(
            v is None or isinstance(v, bool) or math.isfinite(v)
            for v in (self.max, self.min, self.mean, self.norm)
        )


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

    def to_json(self) -> dict:
        stats = self.stats or _NO_STATS
        # one dict display (this runs for every tensor of every entry; update() with keywords cost more)
        value: dict = {
            "type": self.type_name, "dtype": self.dtype, "shape": list(self.shape),
            "Max": stats.max, "Min": stats.min, "Mean": stats.mean, "Norm": stats.norm,
        }
        if self.requires_grad is not None:
            value["requires_grad"] = self.requires_grad
        if not _finite_or_none(stats.max):
            value["Max_except_inf_nan"] = stats.max_except_inf_nan
        if not _finite_or_none(stats.min):
            value["Min_except_inf_nan"] = stats.min_except_inf_nan
        if self.md5 is not None:
            value["md5"] = self.md5
        if self.data_name is not None:
            value["data_name"] = self.data_name
        return value


_NO_STATS = TensorStats(None, None, None, None)  # read only


def _finite_or_none(value: float | bool | None) -> bool:
    return value is None or isinstance(value, bool) or math.isfinite(value)
