"""What the training contracts share: the debugger modes they run under and the loop they run, framed
as docs/pytorch/dump.md and docs/mindspore/dump.md show (``start``, the step, ``stop``, ``step``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MODES = {  # name → the debugger's settings: task, level, then the task's own section
    "statistics-L0": dict(task="statistics", level="L0"),
    "statistics-L1": dict(task="statistics", level="L1"),
    "statistics-mix": dict(task="statistics", level="mix"),
    "tensor-mix": dict(task="tensor", level="mix"),
    "md5-L1": dict(task="statistics", level="L1", summary_mode="md5"),
    "xor-mix": dict(task="statistics", level="mix", summary_mode="xor"),
    "overflow_check-L1": dict(task="overflow_check", level="L1"),
    "free_benchmark-backward": dict(task="free_benchmark", level="L1", fuzz_stage="backward"),
}


@dataclass
class Training:
    """A side's model being trained: ``step()`` runs one training step and returns its loss; ``state()``
    gives the last step's gradients and the parameters as numpy arrays."""

    model: Any
    step: Callable[[], Any]
    state: Callable[[], list]


def debugger(side, mode: str, dump_path: Path):
    """``side``'s PrecisionDebugger in ``mode``, from a config.json as a user writes it."""
    settings = dict(MODES[mode])
    task, level = settings.pop("task"), settings.pop("level")
    config = dump_path.parent / "config.json"
    config.write_text(json.dumps({"task": task, "level": level, "dump_path": str(dump_path), task: settings}))
    return side.PrecisionDebugger(config_path=str(config))


def run(training, debugger, steps: int) -> list:
    """``steps`` training steps of ``training`` (a side's), each inside the debugger when there is one;
    the losses."""
    losses = []
    for _ in range(steps):
        if debugger is not None:
            debugger.start(training.model)
        losses.append(training.step())
        if debugger is not None:
            debugger.stop()
            debugger.step()
    return losses
