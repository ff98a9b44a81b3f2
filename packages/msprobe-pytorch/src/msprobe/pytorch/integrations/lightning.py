"""The debugger in a Lightning ``Trainer``: ``MsprobeCallback`` (docs/pytorch/trainers.md).

Lightning calls ``on_train_batch_start`` and ``on_train_batch_end`` around every micro-batch and
``on_before_optimizer_step`` only in the micro-batch whose backward completes an optimizer step
(``accumulate_grad_batches``, or the last batch of an epoch). So a step opens at the first
micro-batch after an optimizer step and closes at the end of the batch in which the optimizer ran —
before validation, which Lightning runs after ``on_train_batch_end``.
``lightning.pytorch`` is used when installed, else ``pytorch_lightning``.
"""

from __future__ import annotations

from typing import Any

try:
    from lightning.pytorch import Callback
except ImportError:
    from pytorch_lightning import Callback

from msprobe.pytorch.debugger import PrecisionDebugger
from msprobe.pytorch.integrations import OptimizerStepWindow, start_monitor
from msprobe.pytorch.monitor import TrainerMon


class MsprobeCallback(Callback):
    """Collects each optimizer step of a Lightning run that ``step`` selects, all its micro-batches included.

    ``MsprobeCallback(dump_path=..., task=..., level=..., step=[...])`` or ``config_path=...`` builds the
    debugger now (configuration errors are raised here); ``MsprobeCallback(debugger)`` uses yours. The
    model is the ``LightningModule`` being trained.
    """

    def __init__(self, debugger: PrecisionDebugger | None = None, **debugger_kwargs: Any) -> None:
        self.window = OptimizerStepWindow(debugger, debugger_kwargs)
        self._optimizer_ran = False

    @property
    def debugger(self) -> PrecisionDebugger:
        return self.window.debugger

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self.window.open(pl_module, trainer.global_step)

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        self._optimizer_ran = True

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self._optimizer_ran:
            self._optimizer_ran = False
            self.window.close()

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self.window.end()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self.window.end()


class MonitorCallback(Callback):
    """The training-state monitor in a Lightning run (docs/monitor.md): ``MonitorCallback("monitor.json")``
    checks the file now; when training starts the ``LightningModule`` and the first optimizer are hooked,
    with ``accumulate_grad_batches`` as micro-batches and the global step (after a resume) as the first step."""

    def __init__(self, config_file_path: str, **trainer_mon_kwargs: Any) -> None:
        self.monitor = TrainerMon(config_file_path, **{"params_have_main_grad": False, **trainer_mon_kwargs})

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        start_monitor(self.monitor, pl_module, trainer.optimizers[0], trainer.accumulate_grad_batches,
                      trainer.global_step)


__all__ = ["MonitorCallback", "MsprobeCallback"]
