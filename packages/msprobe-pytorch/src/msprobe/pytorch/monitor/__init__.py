"""The training-state monitor for PyTorch: ``from msprobe.pytorch import TrainerMon`` (docs/monitor.md)."""

from msprobe.pytorch.monitor.trainer_mon import TrainerMon

__all__ = ["TrainerMon"]
