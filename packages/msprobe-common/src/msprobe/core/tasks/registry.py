"""The table of tasks: a task is registered once, by its own module, and found here by name.

The configuration loader asks a task how to read its section and which cross-field rules apply; the
debugger asks it to build what runs. Neither names a task. This module imports nothing of msprobe at
run time (the configuration's types only for annotations), so the configuration can look tasks up
while the task modules import the configuration (docs/architecture.md#tasks-and-kits).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from msprobe.core.config.errors import Problem
    from msprobe.core.config.fields import FieldReader

Build = Callable[[Any, Any, Callable[[], None]], Any]  # (config, kit, on_finish) → Runner


@dataclass(frozen=True)
class Task:
    """One task: its config section (a frozen dataclass), how to read it, its rules, and its build.

    ``build(config, kit, on_finish)`` returns the :class:`~msprobe.core.contract.Runner` the debugger drives;
    ``on_finish`` is called once when it has removed its hooks. ``build`` is ``None`` for a task that
    configures a command rather than the debugger (``run_ut``). Level ``debug`` is valid only for a task
    that ``saves_variables``.
    """

    name: str
    section: type
    parse: Callable[[FieldReader], Any]
    rules: tuple[Callable[[Any], Iterator[Problem]], ...] = ()
    build: Build | None = None
    saves_variables: bool = False  # runs at level debug: PrecisionDebugger.save writes debug.json


_TASKS: dict[str, Task] = {}


def register(task: Task) -> Task:
    if task.name in _TASKS:
        raise ValueError(f"task {task.name!r} is registered twice")
    _TASKS[task.name] = task
    return task


def task_named(name: str) -> Task:
    """The task registered as ``name``; a LookupError says what is registered, and who registers the rest."""
    try:
        return _TASKS[name]
    except KeyError:
        raise LookupError(
            f"no task {name!r} is registered (registered: {', '.join(_TASKS) or 'none'}); the built-in tasks are "
            "registered by msprobe.core.tasks.builtin.load_builtin_tasks()"
        ) from None


def task_names() -> tuple[str, ...]:
    """Every task, in the order of registration (the order the docs and messages list them)."""
    return tuple(_TASKS)
