"""Grad probe, framework-free half: settings, the per-step summary files, and run-to-run comparison.

The framework packages compute gradient statistics on their device and hand plain numpy arrays to
:func:`write_step`; :class:`GradComparator` reads two such outputs back and compares gradient signs.
"""

from __future__ import annotations

from msprobe.core.grad_probe.compare import (
    GradComparator,
    GradCompareError,
    GradCompareResult,
    compare_command,
)
from msprobe.core.grad_probe.summary import (
    GRAD_LEVELS,
    GradProbeSettings,
    interval_labels,
    stat_width,
    summary_header,
    write_step,
)

__all__ = [
    "GRAD_LEVELS",
    "GradCompareError",
    "GradCompareResult",
    "GradComparator",
    "GradProbeSettings",
    "compare_command",
    "interval_labels",
    "stat_width",
    "summary_header",
    "write_step",
]
