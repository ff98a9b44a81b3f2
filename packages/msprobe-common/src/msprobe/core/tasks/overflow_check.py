"""Task ``overflow_check`` (docs/overflow_check.md): keep only calls whose outputs are not finite, and name
the origin."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from msprobe.core.config.errors import Problem
from msprobe.core.config.fields import FieldReader, one_of
from msprobe.core.config.frameworks import only_on
from msprobe.core.config.model import DebuggerConfig
from msprobe.core.config.rules import RuleContext
from msprobe.core.contract import FrameworkKit, Runner
from msprobe.core.services.log import logger
from msprobe.core.dump.overflow import OverflowCollector
from msprobe.core.lifecycle.session import Session
from msprobe.core.tasks.dump import collector_parts
from msprobe.core.tasks.registry import Task, register

CHECK_MODES = ("all", "aicore", "atomic")


@dataclass(frozen=True)
class OverflowCheckConfig:
    """Section ``overflow_check``: ``overflow_nums`` -1 means never stop."""

    overflow_nums: int = 1
    check_mode: str = "all"


def parse_overflow_check(reader: FieldReader) -> OverflowCheckConfig:
    return OverflowCheckConfig(
        overflow_nums=reader.integer(
            "overflow_nums", 1, lambda n: n >= 1 or n == -1, "an integer >= 1, or -1 (never stop)"
        ),
        check_mode=reader.choice("check_mode", CHECK_MODES, OverflowCheckConfig.check_mode),
    )


def overflow_rules(ctx: RuleContext) -> Iterator[Problem]:
    """The levels overflow check runs at; a MindSpore-only setting on PyTorch is only worth a warning."""
    assert isinstance(ctx.section, OverflowCheckConfig)
    caps = ctx.capabilities
    if ctx.usable("level") and ctx.level not in caps.overflow_levels:
        note = f" (L2: {caps.display} static graph)" if caps.static_graph_l2 else f" for {caps.display}"
        yield Problem(ctx.path("level"), ctx.level, f"{one_of(caps.overflow_levels)} for task overflow_check{note}")
    if not caps.overflow_check_modes and ctx.section.check_mode != "all":
        logger.warning(
            "%s = %r applies to %s; ignored on %s",
            ctx.path("check_mode"),
            ctx.section.check_mode,
            only_on(lambda c: c.overflow_check_modes),
            caps.display,
        )


def build_overflow_check(config: DebuggerConfig, kit: FrameworkKit, on_finish: Callable[[], None]) -> Runner:
    """The overflow collector in a session (L0, L1); at L2 the framework's kernel dump finds overflows."""
    if config.level == "L2":
        return kit.kernel_dump(config, on_finish)
    section = config.section_as(OverflowCheckConfig)
    collector = OverflowCollector(overflow_nums=section.overflow_nums, **collector_parts(config, kit))
    return Session.with_kit(config, collector, kit, on_finish)


OVERFLOW_CHECK = register(
    Task("overflow_check", OverflowCheckConfig, parse_overflow_check, (overflow_rules,), build_overflow_check)
)
