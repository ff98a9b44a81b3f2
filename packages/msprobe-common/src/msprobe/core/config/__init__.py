"""msprobe configuration: load config.json, apply constructor overrides, validate everything at once.

Framework packages call :func:`load_debugger_config` when a ``PrecisionDebugger`` is built and
receive an immutable :class:`DebuggerConfig`; see docs/config.md for every key. Each task's section
class lives in its module under :mod:`msprobe.core.tasks`; the configuration finds tasks in the
registry only.
"""

from __future__ import annotations

from msprobe.core.config.errors import ConfigError, Problem
from msprobe.core.config.load import load_config, load_debugger_config
from msprobe.core.config.model import LEVELS, DebuggerConfig
from msprobe.core.config.ranges import expand_ranges, warn_unknown_ranks

__all__ = [
    "LEVELS",
    "ConfigError",
    "DebuggerConfig",
    "Problem",
    "expand_ranges",
    "load_config",
    "load_debugger_config",
    "warn_unknown_ranks",
]
