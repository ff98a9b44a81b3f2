"""Online run_ut's sending side (docs/run_ut_online.md): its section, its rules and its build.

The training job streams every selected API call to a run_ut receiver instead of writing tensor files.
msprobe 1.1.1 configures it with keys of section ``tensor`` (``online_run_ut``, ``nfs_path``, ``host``,
``port``, ``tls_path``, ``online_run_ut_recompute``); the tensor task keeps reading them there, for
compatibility, and hands them over as an :class:`OnlineRunUtConfig` (``TensorConfig.online``). What runs
is built here, like every task's, and the online wing only supplies the collector and its transports.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from msprobe.core.config.errors import Problem
from msprobe.core.config.frameworks import only_on
from msprobe.core.config.model import DebuggerConfig
from msprobe.core.config.rules import RuleContext, online_problems
from msprobe.core.contract import FrameworkKit, Runner
from msprobe.core.lifecycle.select import selector_for
from msprobe.core.lifecycle.session import Session


@dataclass(frozen=True)
class OnlineRunUtConfig:
    """Where the records go: a shared directory (``nfs_path``), or a receiver at ``host``:``port`` over TCP,
    TLS with the files in ``tls_path`` (plain TCP only on a loopback address)."""

    nfs_path: str | None = None
    host: str | None = None
    port: int | None = None
    tls_path: str = "./"
    recompute: bool = False


def online_rules(ctx: RuleContext, section: OnlineRunUtConfig) -> Iterator[Problem]:
    """The framework streams API calls (a capability), a receiver is named, and the level is L1; the
    problems name the keys of section ``tensor``, where the user wrote them."""
    if not ctx.capabilities.online_run_ut:
        where = only_on(lambda c: c.online_run_ut)
        yield Problem(ctx.path("online_run_ut"), True,
                      f"false on {ctx.capabilities.display} (online run_ut is {where})")
    yield from online_problems(ctx, True, section)
    if ctx.level != "L1" and ctx.usable("level"):
        yield Problem(ctx.path("online_run_ut"), True,
                      f"false at level {ctx.level} (online run_ut streams API calls: level L1)")


def build_online_run_ut(config: DebuggerConfig, section: OnlineRunUtConfig, kit: FrameworkKit,
                        on_finish: Callable[[], None]) -> Runner:
    """The session of an online sender: its link and TLS files checked before the training starts."""
    from msprobe.core.online.collector import online_collector  # the transports load only when a run streams

    collector = online_collector(section, selector_for(config), kit.adapter(), kit.wire_tensor)

    def finished() -> None:
        collector.close()
        on_finish()

    return Session.with_kit(config, collector, kit, finished, prepare_model=kit.prepare_for_comparison)
