"""Grad probe, framework-free half: settings, the monitor's bookkeeping, the per-step summary files, and
run-to-run comparison.

A framework's gradient monitor subclasses :class:`GradMonitorBase` and adds its hooks and device-side
reductions; the base selects parameters, counts steps, keeps the pending step and writes it through
:func:`write_step`. :class:`GradComparator` reads two such outputs back and compares gradient signs.
"""

from __future__ import annotations

from msprobe.core.grad_probe.compare import (
    GradComparator,
    GradCompareError,
    GradCompareResult,
    compare_command,
)
from msprobe.core.grad_probe.monitor import GradMonitorBase
from msprobe.core.grad_probe.summary import (
    GRAD_LEVELS,
    GradProbeSettings,
    interval_labels,
    stat_width,
    statistics_parts,
    summary_header,
    write_step,
)

__all__ = [
    "GRAD_LEVELS",
    "GradCompareError",
    "GradCompareResult",
    "GradComparator",
    "GradMonitorBase",
    "GradProbeSettings",
    "compare_command",
    "interval_labels",
    "stat_width",
    "statistics_parts",
    "summary_header",
    "write_step",
]
