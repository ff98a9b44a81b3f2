"""``PrecisionDebugger`` for PyTorch (SPEC 4): the shared debugger with torch's interceptor, tensor
adapter, rank lookup, dropout rule and gradient monitor."""

from __future__ import annotations

from typing import Any

import torch

from msprobe.core.config import DebuggerConfig, warn_unknown_ranks
from msprobe.core.debugger import COLLECTING_TASKS, DUMP_TASKS, BaseDebugger
from msprobe.core.log import logger
from msprobe.pytorch.adapter import TorchTensorAdapter
from msprobe.pytorch.dataloader import DataLoaderSteps
from msprobe.pytorch.dropout import DropoutOff
from msprobe.pytorch.grad_probe import GradMonitor
from msprobe.pytorch.hooks import Interceptor
from msprobe.pytorch.rank import current_rank
from msprobe.pytorch.tasks.free_benchmark import TorchBenchmarkOps


class PrecisionDebugger(BaseDebugger):
    """``PrecisionDebugger(config_path=None, task=None, dump_path=None, level=None, model=None, step=None)``.

    Every problem of the configuration is reported here, at construction, in one ``ConfigError``.
    """

    framework = "pytorch"
    rank_lookup = staticmethod(current_rank)

    def _setup(self, config: DebuggerConfig) -> None:
        self._dropout = DropoutOff()
        self._ranks_checked = False
        self._dataloader_steps: DataLoaderSteps | None = None
        if config.level == "L2":
            logger.error(
                "level L2 (kernel dump) needs an Ascend NPU with torch_npu; this debugger collects nothing here"
            )
        elif config.task in COLLECTING_TASKS:
            self._start_session(TorchTensorAdapter(), TorchBenchmarkOps(), Interceptor, current_rank, self._restore)
            if config.enable_dataloader:
                self._dataloader_steps = DataLoaderSteps(self)
        elif config.task == "grad_probe":
            self._start_grad_monitor(GradMonitor)
            self._grad_monitor.remind_at_first_step()  # until monitor(model): see warn_if_unmonitored
        else:
            raise self._unsupported(
                f"task {config.task!r}", "statistics, tensor, overflow_check, free_benchmark, grad_probe"
            )

    def start(self, model: Any = None) -> None:
        model = model if model is not None else self.model
        if self._session is not None and model is not None and self.config.task in DUMP_TASKS:
            self._dropout.apply(model)
        if not self._ranks_checked and current_rank() is not None:
            warn_unknown_ranks(self.config, torch.distributed.get_world_size())
            self._ranks_checked = True
        super().start(model)

    def step(self) -> None:
        if self._grad_monitor is not None:  # an iteration has ended: monitor() should have been called by now
            self._grad_monitor.warn_if_unmonitored()
        super().step()

    def finish(self) -> None:
        if self._grad_monitor is not None:
            self._grad_monitor.drop_reminder()
        super().finish()

    def _restore(self) -> None:
        """Undo what collection changed in the user's world (dropout p, the DataLoader patch)."""
        self._dropout.restore()
        if self._dataloader_steps is not None:
            self._dataloader_steps.remove()
            self._dataloader_steps = None

    def monitor(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None) -> None:
        """task grad_probe: record each selected parameter's gradient after every optimizer step."""
        self._require_grad_monitor().monitor(model, optimizer)
