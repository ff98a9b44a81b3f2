"""Commands that msprobe-pytorch adds to ``msprobe -f pytorch``.

Registered through the ``msprobe.frameworks`` entry point; nothing here imports torch at module
import (the loader is imported when a comparison runs), so ``msprobe --help`` stays fast.
"""

from __future__ import annotations

from msprobe.core.cli import Command
from msprobe.core.compare.command import compare_command


def _torch_loader():
    from msprobe.pytorch.compare import load_pt

    return load_pt


COMMANDS: dict[str, Command] = {"compare": compare_command(_torch_loader)}
