"""Commands that msprobe-mindspore adds to ``msprobe -f mindspore``.

Registered through the ``msprobe.frameworks`` entry point; nothing here imports mindspore at module
import, so ``msprobe --help`` stays fast.
"""

from __future__ import annotations

from msprobe.core.cli import Command

COMMANDS: dict[str, Command] = {}
