"""The tasks msprobe ships, registered by what runs them: the debugger, the ``msprobe`` command and the
run_ut commands' config reader call :func:`load_builtin_tasks` before they read a config.json.

The configuration never imports a task module (a task module imports the configuration's fields and
rules), so it finds the tasks only in the registry (docs/architecture.md#tasks-and-kits).
"""

from __future__ import annotations

import importlib

# their order is that of task_names(), and so of every "allowed:" list a ConfigError gives
BUILTIN_MODULES = ("dump", "free_benchmark", "grad_probe", "overflow_check", "run_ut", "structure")


def load_builtin_tasks() -> None:
    """Register every built-in task; calling it again does nothing (a module registers when first imported)."""
    for name in BUILTIN_MODULES:
        importlib.import_module(f"{__package__}.{name}")
