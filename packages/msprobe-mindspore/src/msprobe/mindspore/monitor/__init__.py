"""The training-state monitor for MindSpore: ``from msprobe.mindspore import TrainerMon`` (docs/monitor.md)."""

from msprobe.mindspore.monitor.trainer_mon import TrainerMon

__all__ = ["TrainerMon"]
