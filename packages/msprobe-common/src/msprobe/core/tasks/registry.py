"""The table of tasks. A task is registered once, by its own module, and found here by name.

The configuration loader asks a task how to read its section and which cross-field rules apply; the
debugger asks it to build what runs. Neither names a task: adding one is a new module in this folder
and a line in ``__init__.py`` (docs/architecture.md, "Adding a task").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from msprobe.core.config.errors import Problem
from msprobe.core.config.fields import FieldReader

Build = Callable[[Any, Any, Callable[[], None]], Any]  # (config, kit, on_finish) → Runner


@dataclass(frozen=True)
class Task:
    """One task: its config section (a frozen dataclass), how to read it, its rules, and its build.

    ``build(config, kit, on_finish)`` returns the :class:`~msprobe.core.kit.Runner` the debugger drives;
    ``on_finish`` is called once when it has removed its hooks. ``build`` is ``None`` for a task that
    configures a command rather than the debugger (``run_ut``).
    """

    name: str
    section: type
    parse: Callable[[FieldReader], Any]
    rules: tuple[Callable[[Any], Iterator[Problem]], ...] = ()
    build: Build | None = None


_TASKS: dict[str, Task] = {}


def register(task: Task) -> Task:
    if task.name in _TASKS:
        raise ValueError(f"task {task.name!r} is registered twice")
    _TASKS[task.name] = task
    return task


def task_named(name: str) -> Task:
    return _TASKS[name]


def task_names() -> tuple[str, ...]:
    """Every task, in the order of registration (the order the docs and messages list them)."""
    return tuple(_TASKS)
