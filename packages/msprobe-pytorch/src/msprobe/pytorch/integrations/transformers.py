"""The debugger in a Hugging Face ``transformers.Trainer``: ``MsprobeCallback`` (docs/pytorch/trainers.md).

The Trainer calls ``on_step_begin`` before the first micro-batch of an optimizer step and
``on_step_end`` after the optimizer, the scheduler and ``zero_grad`` — before logging, evaluation and
checkpoints. Between the two run the forward and backward of every micro-batch of the step (gradient
accumulation), which is the window of one msprobe step.
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback

from msprobe.pytorch.debugger import PrecisionDebugger
from msprobe.pytorch.integrations import OptimizerStepWindow, start_monitor
from msprobe.pytorch.monitor import TrainerMon


class MsprobeCallback(TrainerCallback):
    """Collects each optimizer step of a Trainer that ``step`` selects, all its micro-batches included.

    ``MsprobeCallback(dump_path=..., task=..., level=..., step=[...])`` or ``config_path=...`` builds the
    debugger now (configuration errors are raised here); ``MsprobeCallback(debugger)`` uses yours. The
    model is the Trainer's, unwrapped from DistributedDataParallel/DeepSpeed.
    """

    def __init__(self, debugger: PrecisionDebugger | None = None, **debugger_kwargs: Any) -> None:
        self.window = OptimizerStepWindow(debugger, debugger_kwargs)

    @property
    def debugger(self) -> PrecisionDebugger:
        return self.window.debugger

    def on_step_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        self.window.open(model, state.global_step)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.window.close()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.window.end()


class MonitorCallback(TrainerCallback):
    """The training-state monitor in a Trainer (docs/monitor.md): ``MonitorCallback("monitor.json")`` checks
    the file now; when training begins the Trainer's model and optimizer are hooked, with its
    ``gradient_accumulation_steps`` as micro-batches and its step count (after a resume) as the first step."""

    def __init__(self, config_file_path: str, **trainer_mon_kwargs: Any) -> None:
        self.monitor = TrainerMon(config_file_path, **{"params_have_main_grad": False, **trainer_mon_kwargs})

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, optimizer: Any = None,
                       **kwargs: Any) -> None:
        start_monitor(self.monitor, model, optimizer, args.gradient_accumulation_steps, state.global_step)


__all__ = ["MonitorCallback", "MsprobeCallback"]
