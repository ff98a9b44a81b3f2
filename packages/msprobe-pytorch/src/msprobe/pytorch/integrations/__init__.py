"""Trainer integrations: the debugger driven by a training library's callbacks, one msprobe step per
optimizer step (docs/pytorch/trainers.md).

Each library has its own module (``.transformers``, ``.lightning``), which alone imports that library, so
``import msprobe.pytorch`` never imports transformers or lightning. What every callback does is written
once, here, in :class:`OptimizerStepWindow`: build or take the debugger, unwrap the trainer's model,
keep msprobe's step number equal to the trainer's optimizer step, and keep a problem inside msprobe
from stopping the training.
"""

from __future__ import annotations

from typing import Any

import torch

from msprobe.core.services.log import logger
from msprobe.pytorch.debugger import PrecisionDebugger

# Wrappers whose ``module`` is the user's model; DeepSpeed's engine is named, not imported.
_WRAPPERS = (torch.nn.DataParallel, torch.nn.parallel.DistributedDataParallel)
_WRAPPER_NAMES = ("DeepSpeedEngine",)


def unwrap_model(model: Any) -> Any:
    """The user's module inside data-parallel wrappers, so that module names are the model's own."""
    while isinstance(model, _WRAPPERS) or type(model).__name__ in _WRAPPER_NAMES:
        model = model.module
    return model


class OptimizerStepWindow:
    """One msprobe step per optimizer step: opened before the step's first micro-batch, closed after
    its optimizer update.

    ``open`` may be called before every micro-batch (the debugger's ``start`` does nothing while a step
    is open); ``close`` after the optimizer. msprobe's step number follows the trainer's count of
    optimizer steps, so ``step=[...]`` names the steps the trainer logs, also after a resume.
    """

    def __init__(self, debugger: PrecisionDebugger | None, debugger_kwargs: dict[str, Any]) -> None:
        if debugger is not None and debugger_kwargs:
            raise TypeError(
                f"pass either a PrecisionDebugger or its keyword arguments, not both "
                f"(got debugger and {sorted(debugger_kwargs)})"
            )
        # built here, at the callback's construction: a configuration error stops the script before training
        self.debugger = debugger if debugger is not None else PrecisionDebugger(**debugger_kwargs)
        self._owns_debugger = debugger is None
        self._steps_taken = 0  # debugger.step() calls: msprobe's current step number
        self._failed = False

    def open(self, model: Any, trainer_step: int) -> None:
        """Before a micro-batch of optimizer step ``trainer_step`` (0-based): collect it, if selected."""
        self._guard(lambda: self._open(unwrap_model(model), trainer_step))

    def close(self) -> None:
        """After the optimizer update: the step's files are complete, the next step begins."""
        self._guard(self._close)

    def end(self) -> None:
        """Training ended (or raised): the open step is written; a debugger built here is finished."""
        self._guard(self.debugger.finish if self._owns_debugger else self.debugger.stop)

    def _open(self, model: Any, trainer_step: int) -> None:
        while self._steps_taken < trainer_step:  # a resumed run: skip the steps trained before
            self._close()
        self.debugger.start(model)

    def _close(self) -> None:
        self.debugger.stop()
        self.debugger.step()
        self._steps_taken += 1

    def _guard(self, action: Any) -> None:
        """Run ``action``; the first error is logged, the debugger finished, and training goes on."""
        if self._failed:
            return
        try:
            action()
        except Exception:
            self._failed = True
            logger.exception("msprobe's trainer callback failed; dumping stops here and training goes on")
            try:
                self.debugger.finish()
            except Exception:
                logger.debug("finishing the debugger after the failure above failed too", exc_info=True)


def start_monitor(monitor: Any, model: Any, optimizer: Any, grad_acc_steps: int, start_iteration: int) -> None:
    """Hook a ``TrainerMon`` onto a trainer's model and optimizer when training begins: the user's model
    (its module names), the torch optimizer inside the trainer's wrapper, and the world as the
    data-parallel group when several ranks train (their gradients are reduced)."""
    dist = torch.distributed
    several = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
    monitor.set_monitor(unwrap_model(model), optimizer, grad_acc_steps=grad_acc_steps,
                        dp_group=dist.group.WORLD if several else None, start_iteration=start_iteration)


__all__ = ["OptimizerStepWindow", "start_monitor", "unwrap_model"]
