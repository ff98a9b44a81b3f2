"""Commands that msprobe-pytorch adds to ``msprobe -f pytorch``.

Registered through the ``msprobe.frameworks`` entry point; nothing here imports torch at module
import, so ``msprobe --help`` stays fast.
"""

from __future__ import annotations

from msprobe.core.cli import Command

COMMANDS: dict[str, Command] = {}
