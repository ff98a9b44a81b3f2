"""Task ``grad_probe`` (docs/grad_probe.md): per-parameter gradient summaries after every optimizer step.

The framework's gradient monitor does the work; the debugger drives it through :class:`GradProbeRun`,
whose ``start``/``stop`` have nothing to do (the monitor hooks the optimizer, not the step).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from msprobe.core.config.fields import FieldReader
from msprobe.core.config.model import DebuggerConfig
from msprobe.core.contract import FrameworkKit, IdleRunner
from msprobe.core.tasks.registry import Task, register

GRAD_LEVELS = ("L0", "L1", "L2")


@dataclass(frozen=True)
class GradProbeConfig:
    """Section ``grad_probe``: ``bounds`` split gradient values into intervals at level L2."""

    grad_level: str = "L1"
    param_list: tuple[str, ...] = ()
    bounds: tuple[float, ...] = (-1.0, 0.0, 1.0)


def parse_grad_probe(reader: FieldReader) -> GradProbeConfig:
    return GradProbeConfig(
        grad_level=reader.choice("grad_level", GRAD_LEVELS, GradProbeConfig.grad_level),
        param_list=reader.names("param_list"),
        bounds=reader.increasing_numbers("bounds", GradProbeConfig.bounds),
    )


class GradProbeRun(IdleRunner):
    """The gradient monitor as the debugger's lifecycle sees it. ``monitor`` is what the user calls
    (``debugger.monitor(model)`` on PyTorch, ``debugger.monitor(optimizer)`` on MindSpore)."""

    def __init__(self, monitor: Any, on_finish: Callable[[], None]) -> None:
        super().__init__(on_finish)
        self.monitor = monitor

    def step(self) -> None:
        """An iteration has ended: a monitor never given its model says so now (once)."""
        self.monitor.step_ended()

    def finish(self) -> None:
        if not self.finished:
            self.monitor.close()
        super().finish()


def build_grad_probe(config: DebuggerConfig, kit: FrameworkKit, on_finish: Callable[[], None]) -> GradProbeRun:
    return GradProbeRun(kit.gradient_monitor(config), on_finish)


GRAD_PROBE = register(Task("grad_probe", GradProbeConfig, parse_grad_probe, (), build_grad_probe))
