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

API_FULL_NAME = re.compile(r"[A-Za-z]\w*\.\S+\.\d+\.(forward|backward)")
MODULE_FULL_NAME = re.compile(r"(Module|Cell)\.\S+\.(forward|backward)\.\d+")


@dataclass(frozen=True)
class RuleContext:
    """The values a rule looks at, and where the user wrote each one (for the problem's path)."""

    framework: str
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
        return self.framework == "mindspore" and self.level == "L2"


Rule = Callable[[RuleContext], Iterator[Problem]]


def _common(ctx: RuleContext) -> Iterator[Problem]:
    if ctx.framework == "mindspore" and ctx.task == "run_ut" and ctx.usable("task"):
        yield Problem(
            ctx.path("task"), "run_ut", "a task other than 'run_ut' on MindSpore (run_ut is PyTorch only)"
        )
    if ctx.framework == "mindspore" and ctx.enable_dataloader:
        yield Problem(
            ctx.path("enable_dataloader"), True, "false on MindSpore (enable_dataloader is PyTorch only)"
        )


def online_problems(ctx: RuleContext, online: bool, section: Any) -> Iterator[Problem]:
    """Online run_ut (section tensor or run_ut) needs a receiver: ``nfs_path``, or ``host`` and ``port``."""
    if not online or section.nfs_path is not None or not ctx.usable("host", "port"):
        return
    if section.host is None:
        yield Problem(ctx.path("host"), None, "the receiver's IP address (online mode without nfs_path)")
    if section.port is None:
        yield Problem(ctx.path("port"), None, "the receiver's port 1..65535 (online mode without nfs_path)")


def cross_field_problems(ctx: RuleContext, task_rules: Iterable[Rule]) -> list[Problem]:
    """The common rules, then those of the task (its module's ``rules``)."""
    problems = list(_common(ctx))
    for rule in task_rules:
        problems.extend(rule(ctx))
    return problems
