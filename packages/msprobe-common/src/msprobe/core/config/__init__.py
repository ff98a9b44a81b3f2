"""msprobe configuration: load config.json, apply constructor overrides, validate everything at once.

Framework packages call :func:`load_debugger_config` when a ``PrecisionDebugger`` is built and
receive an immutable :class:`DebuggerConfig`; see docs/config.md for every key.
"""

from __future__ import annotations

from msprobe.core.config.errors import ConfigError, Problem
from msprobe.core.config.load import load_config, load_debugger_config
from msprobe.core.config.model import LEVELS, DebuggerConfig
from msprobe.core.config.ranges import expand_ranges, warn_unknown_ranks
from msprobe.core.tasks import task_names
from msprobe.core.tasks.dump import StatisticsConfig, TensorConfig
from msprobe.core.tasks.free_benchmark import FreeBenchmarkConfig
from msprobe.core.tasks.grad_probe import GradProbeConfig
from msprobe.core.tasks.overflow_check import OverflowCheckConfig
from msprobe.core.tasks.run_ut import RunUtConfig

TASKS = task_names()

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
