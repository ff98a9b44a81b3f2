"""What msprobe-mindspore publishes: the commands it adds to ``msprobe -f mindspore``, and its kit.

Registered through the ``msprobe.frameworks`` entry point; nothing here imports mindspore at module
import, so ``msprobe --help`` stays fast.
"""

from __future__ import annotations

from msprobe.core.compare.command import compare_command
from msprobe.core.config_check.command import config_check_command
from msprobe.core.graph.command import graph_command
from msprobe.core.services.plugin import Command, Framework
from msprobe.mindspore.run_ut.command import multi_run_ut_command, run_ut_command


def _numpy_loader():
    from msprobe.mindspore.compare import load_tensor  # .npy, and a PyTorch bench's .pt

    return load_tensor


def _mindspore_probe():
    from msprobe.mindspore.config_check import MindSporeProbe

    return MindSporeProbe()


def _mindspore_checkpoint_loader():
    from msprobe.mindspore.config_check import load_mindspore_checkpoint

    return load_mindspore_checkpoint


COMMANDS: dict[str, Command] = {
    "compare": compare_command(_numpy_loader),
    "graph": graph_command(_numpy_loader),
    "run_ut": run_ut_command(),
    "multi_run_ut": multi_run_ut_command(),
    "config_check": config_check_command(_mindspore_probe, _mindspore_checkpoint_loader),
}
# what this package publishes under the msprobe.frameworks entry point (pyproject.toml)
FRAMEWORK = Framework(commands=COMMANDS, kit="msprobe.mindspore.kit:MindSporeKit")
