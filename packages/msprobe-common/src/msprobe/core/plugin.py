"""What a framework package publishes, and how msprobe finds it: the ``msprobe.frameworks`` entry point.

Each framework package registers one :class:`Framework` under its name (``pytorch``, ``mindspore``):
its ``msprobe -f <name>`` commands, and where its :class:`~msprobe.core.contract.FrameworkKit` lives. The
commands are light to import (``msprobe --help`` loads them); the kit imports the framework itself, so
it is named here and imported only when asked for.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import Any

ENTRY_POINT_GROUP = "msprobe.frameworks"


@dataclass(frozen=True)
class Framework:
    commands: Mapping[str, Any]  # name → msprobe.core.cli.Command
    kit: str  # "module:Class" of the framework's kit

    def load_kit(self) -> Any:
        """The kit class (importing the framework)."""
        module, _, name = self.kit.partition(":")
        return getattr(importlib.import_module(module), name)


def installed_frameworks() -> dict[str, metadata.EntryPoint]:
    """Framework name → entry point, for every framework package installed."""
    return {ep.name: ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}


def framework_named(name: str) -> Framework | None:
    entry = installed_frameworks().get(name)
    return None if entry is None else entry.load()
