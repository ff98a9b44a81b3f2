"""What both frameworks' ``PrecisionDebugger`` share: construction, take-over and the lifecycle.

A framework subclass names its framework and builds, in :meth:`BaseDebugger._setup`, the session
(dump tasks) or the gradient monitor (grad_probe) from the validated configuration. The rules —
validate everything before training, a second debugger with another configuration takes over, the
same configuration again returns the running one — are written once, here.
"""

from __future__ import annotations

import os
from typing import Any

from msprobe.core.config import DebuggerConfig, load_debugger_config
from msprobe.core.free_benchmark import free_benchmark_collector
from msprobe.core.log import logger, use_console
from msprobe.core.session import Session, dump_collector, overflow_collector

DUMP_TASKS = ("statistics", "tensor")
COLLECTING_TASKS = (*DUMP_TASKS, "overflow_check", "free_benchmark")


def collector_for(config: DebuggerConfig, adapter: Any, benchmark_ops: Any) -> tuple[Any, str]:
    """The call consumer a collecting task runs, and the interceptor level it needs (free benchmark
    re-runs APIs, so it always intercepts at L1)."""
    if config.task in DUMP_TASKS:
        return dump_collector(config, adapter), config.level
    if config.task == "overflow_check":
        return overflow_collector(config, adapter), config.level
    if config.task == "free_benchmark":
        return free_benchmark_collector(config, benchmark_ops), "L1"
    raise ValueError(f"task {config.task!r} does not collect calls; collecting tasks: {', '.join(COLLECTING_TASKS)}")


class BaseDebugger:
    framework: str = ""
    _active: BaseDebugger | None = None

    def __new__(
        cls,
        config_path: str | os.PathLike | None = None,
        task: str | None = None,
        dump_path: str | None = None,
        level: str | None = None,
        model: Any = None,
        step: list | None = None,
    ) -> BaseDebugger:
        use_console()
        config = load_debugger_config(
            config_path, framework=cls.framework, task=task, dump_path=dump_path, level=level, step=step
        )
        running = BaseDebugger._active
        if running is not None and type(running) is cls and running.config == config:
            return running
        if running is not None:
            logger.info("a new PrecisionDebugger with a different configuration takes over from the running one")
            running.finish()
        debugger = super().__new__(cls)
        debugger.config = config
        debugger.model = model
        debugger._session = None
        debugger._grad_monitor = None
        if config.enable_dataloader:
            logger.warning("enable_dataloader is deprecated: call start(), stop() and step() in the training loop")
        debugger._setup(config)
        BaseDebugger._active = debugger
        return debugger

    config: DebuggerConfig
    _session: Session | None
    _grad_monitor: Any

    def _setup(self, config: DebuggerConfig) -> None:
        raise NotImplementedError

    def _start_session(
        self,
        adapter: Any,
        benchmark_ops: Any,
        interceptor_cls: Any,
        current_rank: Any,
        on_finish: Any = lambda: None,
    ) -> None:
        """The session of a collecting task, with this framework's adapter and interceptor."""
        collector, level = collector_for(self.config, adapter, benchmark_ops)
        self._session = Session(
            self.config, collector, lambda sink: interceptor_cls(sink, level=level), current_rank, on_finish
        )

    def _start_grad_monitor(self, monitor_cls: Any) -> None:
        """task grad_probe: this framework's gradient monitor, built from the grad_probe section."""
        section, config = self.config.section, self.config
        self._grad_monitor = monitor_cls(
            config.dump_path, section.grad_level, section.param_list, section.bounds, config.step, config.rank
        )

    def _unsupported(self, what: str, supported: str) -> NotImplementedError:
        return NotImplementedError(f"{what} is not available in msprobe-{self.framework} yet; supported: {supported}")

    # ------------------------------------------------------------------ lifecycle
    def start(self, model: Any = None) -> None:
        """Turn collection on for the current step (when step and rank select it)."""
        if self._session is not None:
            self._session.start(model if model is not None else self.model)

    def stop(self) -> None:
        """Turn collection off; this step's files are complete on disk when this returns."""
        if self._session is not None:
            self._session.stop()

    def step(self) -> None:
        """Move to the next step: call counters restart at 0."""
        if self._session is not None:
            self._session.step()

    def forward_backward_dump_end(self) -> None:
        """Stop API collection for the rest of this step (the optimizer is not collected)."""
        if self._session is not None:
            self._session.forward_backward_dump_end()

    def _require_grad_monitor(self) -> Any:
        if self._grad_monitor is None:
            raise RuntimeError(f"monitor() is for task grad_probe; this debugger runs task {self.config.task!r}")
        return self._grad_monitor

    def finish(self) -> None:
        """Write what is pending and remove every hook."""
        if self._session is not None and not self._session.finished:
            self._session.finish()
        if BaseDebugger._active is self:
            BaseDebugger._active = None
