"""Tasks as plugins (docs/architecture.md): each module of this folder is one task — its config
section, how that section is read, its cross-field rules, and what the debugger runs for it — and
registers itself in :mod:`.registry`. The configuration loader and the debugger find tasks here by
name and never name one themselves.

The built-in tasks are registered in the order the documentation lists them.
"""

from msprobe.core.tasks import dump, free_benchmark, grad_probe, overflow_check, run_ut  # noqa: F401
from msprobe.core.tasks.registry import Task, register, task_named, task_names

__all__ = ["Task", "register", "task_named", "task_names"]
