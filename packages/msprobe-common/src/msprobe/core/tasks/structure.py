"""Task ``structure`` (docs/graph.md#structure-dumps): construct.json and stack.json of every call, no
tensor read, for ``msprobe graph``. Levels L0, L1 and mix; the section has no keys (``"structure": {}``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from msprobe.core.config.errors import Problem
from msprobe.core.config.fields import FieldReader, one_of
from msprobe.core.config.model import DebuggerConfig
from msprobe.core.config.rules import RuleContext
from msprobe.core.contract import FrameworkKit, Runner
from msprobe.core.dump.json_files import DumpIdentity
from msprobe.core.dump.structure import StructureCollector
from msprobe.core.lifecycle.select import selector_for
from msprobe.core.lifecycle.session import Session
from msprobe.core.tasks.registry import Task, register

LEVELS = ("L0", "L1", "mix")


@dataclass(frozen=True)
class StructureConfig:
    """Section ``structure``: no keys (every call of the selected steps and ranks is placed)."""


def parse_structure(reader: FieldReader) -> StructureConfig:
    return StructureConfig()


def structure_rules(ctx: RuleContext) -> Iterator[Problem]:
    if ctx.level not in LEVELS and ctx.usable("level"):
        yield Problem(ctx.path("level"), ctx.level, f"{one_of(LEVELS)} for task structure (it places calls "
                      "seen by msprobe's hooks; L2 is the framework's kernel dump)")


def build_structure(config: DebuggerConfig, kit: FrameworkKit, on_finish: Callable[[], None]) -> Runner:
    collector = StructureCollector(DumpIdentity.of(config, with_tensors=False), selector_for(config), kit.adapter())
    return Session.with_kit(config, collector, kit, on_finish)


STRUCTURE = register(Task("structure", StructureConfig, parse_structure, (structure_rules,), build_structure))
