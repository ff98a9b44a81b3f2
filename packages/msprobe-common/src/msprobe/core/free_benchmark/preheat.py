"""Preheat: learn each API's normal ``max_rel`` over the first steps, then judge it against that.

Some APIs always move more than the dtype's threshold under a perturbation (long reductions, ill
conditioned functions) and would fill the CSV with rows that say nothing. During the first
``preheat_step`` steps every API kind (``Torch.matmul``) is checked on at most ``max_sample`` calls,
judged against the dtype threshold, and the largest finite ``max_rel`` seen is kept. From then on its
threshold is ``max(dtype threshold, MARGIN × that value)``: rows report what exceeds the API's own
normal behaviour. Non-finite results never calibrate (they stay reportable).
"""

from __future__ import annotations

import math

from msprobe.core.free_benchmark.compare import dtype_threshold

MARGIN = 2.0


class Thresholds:
    """Per-API thresholds, calibrated by preheat when it is on."""

    def __init__(self, *, if_preheat: bool = False, preheat_step: int = 15, max_sample: int = 20) -> None:
        for field, value in (("preheat_step", preheat_step), ("max_sample", max_sample)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{field} {value!r}: give an integer > 0")
        self.if_preheat = if_preheat
        self.preheat_step = preheat_step
        self.max_sample = max_sample
        self._samples: dict[str, int] = {}
        self._observed: dict[tuple[str, str], float] = {}

    def preheating(self, step: int) -> bool:
        return self.if_preheat and step < self.preheat_step

    def wants(self, kind: str, step: int) -> bool:
        """Whether this call of API ``kind`` is checked at all (preheat samples at most max_sample)."""
        if not self.preheating(step):
            return True
        taken = self._samples.get(kind, 0)
        if taken >= self.max_sample:
            return False
        self._samples[kind] = taken + 1
        return True

    def observe(self, kind: str, dtype: str, max_rel: float, step: int) -> None:
        if self.preheating(step) and math.isfinite(max_rel):
            key = (kind, dtype)
            self._observed[key] = max(self._observed.get(key, 0.0), max_rel)

    def threshold(self, kind: str, dtype: str, step: int) -> float:
        base = dtype_threshold(dtype)
        if self.preheating(step):
            return base
        return max(base, MARGIN * self._observed.get((kind, dtype), 0.0))
