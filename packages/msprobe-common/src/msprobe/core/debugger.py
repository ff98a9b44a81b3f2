"""What both frameworks' ``PrecisionDebugger`` share: construction, take-over and the lifecycle.

A framework subclass names its framework and builds, in :meth:`BaseDebugger._setup`, the session
(dump tasks) or the gradient monitor (grad_probe) from the validated configuration. The rules —
validate everything before training, one run per rank directory of a dump_path (a second job gets a
ConfigError naming the process that holds it), a second debugger with another configuration takes over,
the same configuration again returns the running one — are written once, here.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from msprobe.core.config import ConfigError, DebuggerConfig, Problem, load_debugger_config
from msprobe.core.fileio import UnsafePathError
from msprobe.core.free_benchmark import free_benchmark_collector
from msprobe.core.layout import DumpPathBusy, DumpPathHold, hold_dump_path, launcher_rank, rank_dir_name
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


def hold_for(config: DebuggerConfig, rank_lookup: Callable[[], int | None] | None) -> DumpPathHold:
    """The run's hold on its dump_path (one run per rank directory, :mod:`msprobe.core.layout`); a
    ConfigError naming the holder's pid when another process writes there, before training starts."""
    rank = rank_lookup() if rank_lookup is not None else None
    rank = launcher_rank() if rank is None else rank
    try:
        return hold_dump_path(config.dump_path, rank)
    except DumpPathBusy as busy:
        allowed = (
            f"a dump_path whose rank directory {rank_dir_name(rank)!r} no other running job writes, but "
            f"{busy.holder} holds {busy.filename}. Give this run another dump_path or let that one finish "
            f"(another rank of the same job must know its rank when PrecisionDebugger is built: from its "
            f"launcher, RANK or RANK_ID, or an initialised process group)"
        )
        raise ConfigError([Problem("dump_path", config.dump_path, allowed)]) from None
    except (OSError, UnsafePathError) as error:
        problem = Problem("dump_path", config.dump_path, f"a directory msprobe can create and write in ({error})")
        raise ConfigError([problem]) from None


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
        hold = hold_for(config, cls.rank_lookup)
        try:
            if running is not None:
                logger.info("a new PrecisionDebugger with a different configuration takes over from the running one")
                running.finish()
            debugger = super().__new__(cls)
            debugger.config = config
            debugger.model = model
            debugger._session = None
            debugger._grad_monitor = None
            debugger._hold = hold
            if config.enable_dataloader:
                logger.warning("enable_dataloader is deprecated: call start(), stop() and step() in the training loop")
            debugger._setup(config)
        except BaseException:
            hold.release()
            raise
        BaseDebugger._active = debugger
        return debugger

    config: DebuggerConfig
    _session: Session | None
    _grad_monitor: Any
    _hold: DumpPathHold | None
    # The framework's answer to "which rank is this process" (None: no process group yet); asked at
    # construction, before a launcher's environment (RANK, RANK_ID, ...), to pick the rank directory
    # this run locks in its dump_path.
    rank_lookup: Callable[[], int | None] | None = None

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

        def finished() -> None:
            on_finish()
            self._release_hold()

        self._session = Session(
            self.config, collector, lambda sink: interceptor_cls(sink, level=level), current_rank, finished
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
        """Write what is pending, remove every hook and leave the dump_path to the next run."""
        if self._session is not None and not self._session.finished:
            self._session.finish()
        self._release_hold()
        if BaseDebugger._active is self:
            BaseDebugger._active = None

    def _release_hold(self) -> None:
        hold, self._hold = self._hold, None
        if hold is not None:
            hold.release()
