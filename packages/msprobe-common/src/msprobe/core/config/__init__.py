"""msprobe configuration: load config.json, apply constructor overrides, validate everything at once.

Framework packages call :func:`load_debugger_config` when a ``PrecisionDebugger`` is built and
receive an immutable :class:`DebuggerConfig`; see docs/config.md for every key.
"""

from __future__ import annotations

from msprobe.core.config.errors import ConfigError, Problem
from msprobe.core.config.load import load_config, load_debugger_config
from msprobe.core.config.model import (
    LEVELS,
    TASKS,
    DebuggerConfig,
    FreeBenchmarkConfig,
    GradProbeConfig,
    OverflowCheckConfig,
    RunUtConfig,
    StatisticsConfig,
    TensorConfig,
)
from msprobe.core.config.ranges import expand_ranges, warn_unknown_ranks

__all__ = [
    "LEVELS",
    "TASKS",
    "ConfigError",
    "DebuggerConfig",
    "FreeBenchmarkConfig",
    "GradProbeConfig",
    "OverflowCheckConfig",
    "Problem",
    "RunUtConfig",
    "StatisticsConfig",
    "TensorConfig",
    "expand_ranges",
    "load_config",
    "load_debugger_config",
    "warn_unknown_ranks",
]
