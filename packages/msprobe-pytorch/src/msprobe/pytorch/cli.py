"""What msprobe-pytorch publishes: the commands it adds to ``msprobe -f pytorch``, and its kit.

Registered through the ``msprobe.frameworks`` entry point; nothing here imports torch at module
import (the loader is imported when a comparison runs), so ``msprobe --help`` stays fast.
"""

from __future__ import annotations

from typing import Any

from msprobe.core.compare.command import compare_command
from msprobe.core.config_check.command import config_check_command
from msprobe.core.graph.command import graph_command
from msprobe.core.services.plugin import Command, Framework
from msprobe.pytorch.run_ut.command import run_ut_command
from msprobe.pytorch.run_ut.multi import multi_run_ut_command


def _torch_loader():
    from msprobe.pytorch.tensor_files import load_pt

    return load_pt


def _online_receiver(config_path: str, out_path: str, devices: Any, engine: Any) -> int | None:
    from msprobe.pytorch.online.receive import receive_if_online

    return receive_if_online(config_path, out_path, devices, engine)


def _torch_probe():
    from msprobe.pytorch.config_check import TorchProbe

    return TorchProbe()


def _torch_checkpoint_loader():
    from msprobe.pytorch.config_check import load_torch_checkpoint

    return load_torch_checkpoint


def _torch_replay():
    from msprobe.pytorch.run_ut.attribution import TorchReplay

    return TorchReplay()


COMMANDS: dict[str, Command] = {
    "compare": compare_command(_torch_loader, _torch_replay),
    "graph": graph_command(_torch_loader),
    "run_ut": run_ut_command(_online_receiver),
    "multi_run_ut": multi_run_ut_command(),
    "config_check": config_check_command(_torch_probe, _torch_checkpoint_loader),
}
# what this package publishes under the msprobe.frameworks entry point (pyproject.toml)
FRAMEWORK = Framework(commands=COMMANDS, kit="msprobe.pytorch.kit:TorchKit")
