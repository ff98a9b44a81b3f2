"""Cross-field rules: combinations of individually valid values that cannot work together.

The common rules live here; each task's own rules live in its module under ``msprobe.core.tasks``.
They come from the msprobe 1.1.1 reference (which framework supports what, which levels a task runs
at, the free-benchmark combinations). A rule is skipped when one of its keys was
already reported invalid, so a single typo does not produce a second, confusing problem.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from msprobe.core.config.errors import Problem
from msprobe.core.config.frameworks import Capabilities, only_on

API_FULL_NAME = re.compile(r"[A-Za-z]\w*\.\S+\.\d+\.(forward|backward)")
MODULE_FULL_NAME = re.compile(r"(Module|Cell)\.\S+\.(forward|backward)\.\d+")


@dataclass(frozen=True)
class RuleContext:
    """The values a rule looks at, and where the user wrote each one (for the problem's path)."""

    capabilities: Capabilities
    task: str
    level: str
    enable_dataloader: bool
    section: Any  # the task's section (a frozen dataclass of its module)
    paths: Mapping[str, str]
    invalid: frozenset[str]

    def path(self, key: str) -> str:
        return self.paths.get(key, f"{self.task}.{key}")

    def usable(self, *keys: str) -> bool:
        return not self.invalid.intersection(keys)

    @property
    def static_graph(self) -> bool:
        return self.capabilities.static_graph_l2 and self.level == "L2"


Rule = Callable[[RuleContext], Iterator[Problem]]


def _common(ctx: RuleContext, command_tasks: tuple[str, ...]) -> Iterator[Problem]:
    caps = ctx.capabilities
    if ctx.task in command_tasks and ctx.task not in caps.commands and ctx.usable("task"):
        where = only_on(lambda c: ctx.task in c.commands)
        yield Problem(
            ctx.path("task"), ctx.task, f"a task other than {ctx.task!r} on {caps.display} ({ctx.task} is {where})"
        )
    if ctx.enable_dataloader and not caps.dataloader_steps:
        where = only_on(lambda c: c.dataloader_steps)
        yield Problem(ctx.path("enable_dataloader"), True, f"false on {caps.display} (enable_dataloader is {where})")


def online_problems(ctx: RuleContext, online: bool, section: Any) -> Iterator[Problem]:
    """Online run_ut (section tensor or run_ut) needs a receiver: ``nfs_path``, or ``host`` and ``port``."""
    if not online or section.nfs_path is not None or not ctx.usable("host", "port"):
        return
    if section.host is None:
        yield Problem(ctx.path("host"), None, "the receiver's IP address (online mode without nfs_path)")
    if section.port is None:
        yield Problem(ctx.path("port"), None, "the receiver's port 1..65535 (online mode without nfs_path)")


def cross_field_problems(ctx: RuleContext, task_rules: Iterable[Rule], command_tasks: tuple[str, ...]) -> list[Problem]:
    """The common rules, then those of the task (its module's ``rules``). ``command_tasks``: the tasks
    that configure a command rather than the debugger."""
    problems = list(_common(ctx, command_tasks))
    for rule in task_rules:
        problems.extend(rule(ctx))
    return problems
