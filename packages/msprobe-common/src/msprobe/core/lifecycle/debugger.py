"""What both frameworks' ``PrecisionDebugger`` share: construction, take-over and the lifecycle.

The debugger registers the built-in tasks, loads the configuration, looks its task up in the registry
(:mod:`msprobe.core.tasks.registry`) and builds what the task runs from the framework's kit
(:mod:`msprobe.core.contract`); it never names a task. The rules — validate everything before training, one
run per rank directory of a dump_path (a second job gets a ConfigError naming the process that holds
it), a second debugger with another configuration takes over, the same configuration again returns the
running one — are written once, here.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from msprobe.core.config import ConfigError, DebuggerConfig, Problem, load_debugger_config
from msprobe.core.config.model import ModuleLoad
from msprobe.core.contract import FrameworkKit, Runner
from msprobe.core.lifecycle.custom_apis import CUSTOM_APIS
from msprobe.core.lifecycle.layout import DumpPathBusy, DumpPathHold, hold_dump_path, launcher_rank, rank_dir_name
from msprobe.core.services.fileio import UnsafePathError
from msprobe.core.services.log import logger, use_console
from msprobe.core.tasks.builtin import load_builtin_tasks
from msprobe.core.tasks.registry import task_named


def hold_for(config: DebuggerConfig, rank_lookup: Callable[[], int | None] | None) -> DumpPathHold:
    """The run's hold on its dump_path (one run per rank directory, :mod:`msprobe.core.lifecycle.layout`); a
    ConfigError naming the holder's pid when another process writes there, before training starts."""
    rank = rank_lookup() if rank_lookup is not None else None
    rank = launcher_rank() if rank is None else rank
    try:
        return hold_dump_path(config.dump_path, rank, config.dump_format)
    except DumpPathBusy as busy:
        allowed = (
            f"a dump_path whose rank directory {rank_dir_name(rank, config.dump_format)!r} no other running job "
            f"writes, but "
            f"{busy.holder} holds {busy.filename}. Give this run another dump_path or let that one finish "
            f"(another rank of the same job must know its rank when PrecisionDebugger is built: from its "
            f"launcher, RANK or RANK_ID, or an initialised process group)"
        )
        raise ConfigError([Problem("dump_path", config.dump_path, allowed)]) from None
    except (OSError, UnsafePathError) as error:
        problem = Problem("dump_path", config.dump_path, f"a directory msprobe can create and write in ({error})")
        raise ConfigError([problem]) from None


class BaseDebugger:
    """A framework subclass sets ``kit_class`` (its :class:`~msprobe.core.contract.FrameworkKit`) and adds
    what only its users call (``monitor``); with ``input_loader_class`` (its half of
    :class:`~msprobe.core.dump.input_replay.ModuleInputLoader`) it runs the ``load`` key."""

    kit_class: Callable[[], FrameworkKit]
    input_loader_class: Callable[[ModuleLoad], Any] | None = None  # frameworks with Capabilities.module_load
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
        load_builtin_tasks()
        kit = cls.kit_class()
        config = load_debugger_config(
            config_path, framework=kit.name, task=task, dump_path=dump_path, level=level, step=step
        )
        running = BaseDebugger._active
        if running is not None and type(running) is cls and running.config == config:
            return running
        hold = hold_for(config, kit.current_rank)
        try:
            if running is not None:
                logger.info("a new PrecisionDebugger with a different configuration takes over from the running one")
                running.finish()
            debugger = super().__new__(cls)
            debugger.config = config
            debugger.model = model
            debugger.kit = kit
            debugger._hold = hold
            CUSTOM_APIS.namespaces = config.custom_op_namespaces
            debugger._runner = task_named(config.task).build(config, kit, debugger._finished)
            debugger._loader = None if config.load is None else cls.input_loader_class(config.load)
            # load without dump_after_load only feeds inputs: nothing is collected (26.2.0's load-only mode)
            debugger._collects = config.load is None or config.load.dump_after_load
            debugger._setup(config)
        except BaseException:
            hold.release()
            raise
        BaseDebugger._active = debugger
        return debugger

    config: DebuggerConfig
    kit: FrameworkKit
    _runner: Runner
    _loader: Any  # the input_loader_class of the load key, or None
    _collects: bool
    _hold: DumpPathHold | None

    @classmethod
    def running(cls) -> BaseDebugger | None:
        """The debugger now collecting in this process, if any."""
        return BaseDebugger._active

    @classmethod
    def register_custom_api(cls, module: Any, api_name: str, prefix: str | None = None) -> None:
        """Record ``module.api_name`` — any function, a library's or the user's — as an API named
        ``{prefix}.{api_name}.{n}.forward`` from the next ``start()`` (``prefix`` defaults to the module's
        ``__name__``); docs/pytorch/dump.md#custom-apis. A bad argument is a ValueError naming it."""
        CUSTOM_APIS.register(module, api_name, prefix)

    @classmethod
    def restore_custom_api(cls, module: Any, api_name: str) -> None:
        """Stop recording ``module.api_name`` (from the next ``start()``)."""
        CUSTOM_APIS.restore(module, api_name)

    @property
    def finished(self) -> bool:
        """True once the last selected step is written and every hook removed."""
        return self._runner.finished

    @property
    def interceptor(self) -> Any:
        """The interceptor of a running collecting task (``module_dump`` steers it), else ``None``."""
        if self._runner.finished:
            return None
        return getattr(self._runner, "interceptor", None)

    def _setup(self, config: DebuggerConfig) -> None:
        """What a framework adds once the task is built (PyTorch: the deprecated DataLoader steps)."""

    def _finished(self) -> None:
        """The runner removed its hooks: undo what collection changed and leave the dump_path."""
        if self._loader is not None:
            self._loader.stop()
        self.kit.restore()
        self._release_hold()

    # ------------------------------------------------------------------ lifecycle
    def start(self, model: Any = None, *, scheduled_tokens: Mapping[str, int] | None = None) -> None:
        """Turn collection on for the current step (when step and rank select it). ``scheduled_tokens``: a
        serving batch's requests, each with the rows it holds along dim 0, in order (``{"req-7": 1, ...}``);
        with ``request_id`` configured, only that request's rows are dumped, and a batch without it is not
        (docs/pytorch/inference.md). Keyword-only: msprobe 26.2.0's second parameter is another one."""
        model = model if model is not None else self.model
        if self._loader is not None:
            self._loader.start(model, self.kit.current_rank())
        if self._collects:
            self._runner.start(model, scheduled_tokens=scheduled_tokens)

    @contextmanager
    def batch(self, model: Any = None, *, scheduled_tokens: Mapping[str, int] | None = None) -> Iterator[None]:
        """One step of a serving loop, which has no training step to count: ``start`` on entry, ``stop`` and
        ``step`` on exit (an exception inside leaves the step closed and propagates)."""
        self.start(model, scheduled_tokens=scheduled_tokens)
        try:
            yield
        finally:
            self.stop()
            self.step()

    def stop(self) -> None:
        """Turn collection off; this step's files are complete on disk when this returns."""
        if self._loader is not None:
            self._loader.stop()
        if self._collects:
            self._runner.stop()

    def step(self) -> None:
        """Move to the next step: call counters restart at 0."""
        if self._loader is not None:
            self._loader.step()
        if self._collects:
            self._runner.step()

    def forward_backward_dump_end(self) -> None:
        """Stop API collection for the rest of this step (the optimizer is not collected)."""
        self._runner.forward_backward_dump_end()

    def save(self, variable: Any, name: str, save_backward: bool = True) -> None:
        """Level debug: record ``variable`` (a tensor, or nested lists/tuples/dicts of tensors and scalars) as
        ``{name}.{n}.debug`` in this step's debug.json, and its gradient as ``{name}_grad.{n}.debug`` when
        ``save_backward`` and backward reaches it (docs/pytorch/dump.md#level-debug-save)."""
        save = getattr(self._runner, "save", None)
        if save is None:
            if not self._save_ignored:
                self._save_ignored = True
                logger.warning(f"PrecisionDebugger.save records at level 'debug' (tasks statistics and tensor); "
                               f"this debugger runs task {self.config.task!r} at level {self.config.level!r}, so "
                               "save() records nothing")
            return
        save(variable, name, save_backward)

    _save_ignored = False

    def _gradient_monitor(self) -> Any:
        monitor = getattr(self._runner, "monitor", None)
        if monitor is None:
            raise RuntimeError(f"monitor() is for task grad_probe; this debugger runs task {self.config.task!r}")
        return monitor

    def finish(self) -> None:
        """Write what is pending, remove every hook and leave the dump_path to the next run."""
        if not self._runner.finished:
            self._runner.finish()
        self._release_hold()
        if BaseDebugger._active is self:
            BaseDebugger._active = None

    def _release_hold(self) -> None:
        hold, self._hold = self._hold, None
        if hold is not None:
            hold.release()
