"""The debugger lifecycle both frameworks share: start, stop, step, finish (SPEC 4).

A framework's ``PrecisionDebugger`` is a thin shell that builds a :class:`Session` with its
interceptor, tensor adapter and rank lookup; the rules of when to collect, when to write and when to
finish are written once, here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from msprobe.core.collector import DumpCollector
from msprobe.core.config import DebuggerConfig
from msprobe.core.events import CallSink, Interceptor, StepCollector
from msprobe.core.log import logger, set_rank
from msprobe.core.overflow import OverflowCollector
from msprobe.core.select import Selector

MODULE_LEVELS = ("L0", "mix")


def selector_for(config: DebuggerConfig) -> Selector:
    """The Selector a configuration asks for (sections without scope/list/data_mode select everything).

    In the free_benchmark section ``scope`` is a list of full API names to check, not a range (the
    seed's table; it excludes ``list``), so it selects by name there.
    """
    section = config.section
    scope, names = getattr(section, "scope", ()), getattr(section, "api_list", ())
    if config.task == "free_benchmark":
        scope, names = (), (*scope, *names)
    return Selector(
        steps=config.step,
        ranks=config.rank,
        scope=scope,
        names=names,
        data_mode=getattr(section, "data_mode", ("all",)),
    )


def dump_collector(config: DebuggerConfig, adapter: Any) -> DumpCollector:
    """The collector of tasks ``statistics`` and ``tensor``."""
    return DumpCollector(
        task=config.task,
        level=config.level,
        framework=config.framework,
        dump_path=config.dump_path,
        selector=selector_for(config),
        adapter=adapter,
        summary_mode=getattr(config.section, "summary_mode", "statistics"),
    )


def overflow_collector(config: DebuggerConfig, adapter: Any) -> OverflowCollector:
    """The collector of task ``overflow_check`` (levels L0 and L1)."""
    return OverflowCollector(
        level=config.level,
        framework=config.framework,
        dump_path=config.dump_path,
        selector=selector_for(config),
        adapter=adapter,
        overflow_nums=config.section.overflow_nums,
    )


class Session:
    """Step and rank bookkeeping around one interceptor and one collector."""

    def __init__(
        self,
        config: DebuggerConfig,
        collector: StepCollector,
        make_interceptor: Callable[[CallSink], Interceptor],
        current_rank: Callable[[], int | None],
        on_finish: Callable[[], None] = lambda: None,
    ) -> None:
        self.config = config
        self.collector = collector
        self.selector = collector.selector
        self.interceptor = make_interceptor(collector)
        self._current_rank = current_rank
        self._on_finish = on_finish
        self.current_step = 0
        self.model: Any = None
        self.started = False
        self.finished = False
        self._step_open = False

    def start(self, model: Any = None) -> None:
        if self.finished or self.started:
            return
        self._attach(model)
        rank = self._current_rank()
        set_rank(rank)
        if not (self.selector.selects_step(self.current_step) and self.selector.selects_rank(rank)):
            return
        if not self._step_open:
            self.collector.begin_step(self.current_step, rank)
            self._step_open = True
        self.interceptor.enable()
        self.started = True

    def stop(self) -> None:
        """Collection off; this step's files are complete on disk when this returns."""
        if self.started:
            self.interceptor.disable()
            self.started = False
        if self._step_open:
            self.collector.end_step()
            self._step_open = False

    def forward_backward_dump_end(self) -> None:
        """No more API collection in this step (e.g. the optimizer's)."""
        if self.started:
            self.interceptor.disable()
            self.started = False

    def step(self) -> None:
        self.stop()
        self.current_step += 1
        self.interceptor.reset_counts()
        last = self.selector.last_step()
        if self.finished:
            return
        if self.collector.exhausted:
            self.finish()
        elif last is not None and self.current_step > last:
            self.finish()

    def finish(self) -> None:
        """Remove every hook; the debugger does nothing from here on."""
        self.stop()
        self.interceptor.detach()
        self.finished = True
        self._on_finish()
        logger.info(f"msprobe has finished: the last selected step was written under {self.config.dump_path}")

    def _attach(self, model: Any) -> None:
        if model is not None and model is not self.model:
            self.model = model
            self.interceptor.attach(model)
        if self.model is None and self.config.level in MODULE_LEVELS:
            raise ValueError(
                f"level {self.config.level!r} collects modules, so the debugger needs the model: pass it to "
                "PrecisionDebugger(..., model=model) or to debugger.start(model)"
            )
