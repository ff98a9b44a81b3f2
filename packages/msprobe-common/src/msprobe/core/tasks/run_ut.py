"""Task ``run_ut`` (docs/run_ut.md): its section configures the ``msprobe -f pytorch|mindspore run_ut`` commands
(online mode: PyTorch only); the debugger does not run it (no build)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from msprobe.core.config.errors import Problem
from msprobe.core.config.fields import FieldReader
from msprobe.core.config.frameworks import only_on
from msprobe.core.config.rules import RuleContext, online_problems
from msprobe.core.tasks.registry import Task, register


@dataclass(frozen=True)
class RunUtConfig:
    """Section ``run_ut``: read by the ``run_ut`` commands (``-config``), not by the debugger."""

    white_list: tuple[str, ...] = ()
    black_list: tuple[str, ...] = ()
    error_data_path: str = "./"
    is_online: bool = False
    nfs_path: str | None = None
    host: str | None = None
    port: int | None = None
    rank_list: tuple[int, ...] = (0,)
    tls_path: str = "./"


def parse_run_ut(reader: FieldReader) -> RunUtConfig:
    return RunUtConfig(
        white_list=reader.names("white_list"),
        black_list=reader.names("black_list"),
        error_data_path=reader.text("error_data_path", RunUtConfig.error_data_path, non_empty=True),
        is_online=reader.flag("is_online", False),
        nfs_path=reader.optional_text("nfs_path"),
        host=reader.optional_text("host"),
        port=reader.port("port"),
        rank_list=reader.indices("rank_list", RunUtConfig.rank_list),
        tls_path=reader.text("tls_path", RunUtConfig.tls_path),
    )


def run_ut_rules(ctx: RuleContext) -> Iterator[Problem]:
    assert isinstance(ctx.section, RunUtConfig)
    if ctx.section.is_online and not ctx.capabilities.online_run_ut:
        where = only_on(lambda c: c.online_run_ut)
        yield Problem(ctx.path("is_online"), True, f"false on {ctx.capabilities.display} (online run_ut is {where})")
        return
    yield from online_problems(ctx, ctx.section.is_online, ctx.section)


RUN_UT = register(Task("run_ut", RunUtConfig, parse_run_ut, (run_ut_rules,), build=None))
