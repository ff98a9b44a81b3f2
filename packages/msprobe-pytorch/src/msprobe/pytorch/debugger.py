"""``PrecisionDebugger`` for PyTorch (docs/pytorch/dump.md#api): the shared debugger with torch's kit (``kit.py``), plus
what only PyTorch users call or configure (``monitor(model)``, the deprecated ``enable_dataloader``)."""

from __future__ import annotations

from typing import Any

import torch

from msprobe.core.config import DebuggerConfig, warn_unknown_ranks
from msprobe.core.lifecycle.debugger import BaseDebugger
from msprobe.core.services.handles import Handle
from msprobe.pytorch.kit import TorchKit
from msprobe.pytorch.rank import current_rank
from msprobe.pytorch.training.dataloader import install_dataloader_steps
from msprobe.pytorch.training.load_inputs import TorchInputLoader


class PrecisionDebugger(BaseDebugger):
    """``PrecisionDebugger(config_path=None, task=None, dump_path=None, level=None, model=None, step=None)``.

    Every problem of the configuration is reported here, at construction, in one ``ConfigError``.
    """

    kit_class = TorchKit
    input_loader_class = TorchInputLoader

    def _setup(self, config: DebuggerConfig) -> None:
        self._ranks_checked = False
        self._dataloader_steps = install_dataloader_steps(self) if config.enable_dataloader else Handle()

    def start(self, model: Any = None, *, scheduled_tokens: Any = None) -> None:
        if not self._ranks_checked and current_rank() is not None:
            warn_unknown_ranks(self.config, torch.distributed.get_world_size())
            self._ranks_checked = True
        super().start(model, scheduled_tokens=scheduled_tokens)

    def _finished(self) -> None:
        self._dataloader_steps.remove()
        super()._finished()

    def record_ddp_buckets(self, ddp_model: torch.nn.parallel.DistributedDataParallel) -> None:
        """Record DDP's gradient all-reduce, which runs in its C++ reducer where no hook sees it: each
        bucket before and after its reduction, as ``Distributed.ddp_bucket_all_reduce.{n}.forward``
        (docs/pytorch/distributed.md). Call once, before the first backward; tasks that intercept APIs."""
        if not isinstance(ddp_model, torch.nn.parallel.DistributedDataParallel):
            raise TypeError("record_ddp_buckets: expected a DistributedDataParallel model, "
                            f"got {type(ddp_model).__name__}")
        interceptor = self.interceptor
        if interceptor is None:
            raise ValueError(f"record_ddp_buckets: task {self.config.task!r} intercepts no calls "
                             "(or the debugger has finished)")
        interceptor.record_ddp_buckets(ddp_model)

    def monitor(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None) -> None:
        """task grad_probe: record each selected parameter's gradient after every optimizer step."""
        self._gradient_monitor().monitor(model, optimizer)
