"""Public names of a package loaded on first use (PEP 562 module ``__getattr__``).

The ``msprobe`` command finds each framework's commands through an entry point, which imports the
framework package; its public names (``PrecisionDebugger``...) must not pull torch or mindspore in
just for ``msprobe --help`` or a compare of files on disk.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, exports: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``, where ``exports`` maps name → defining module."""
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(exports[name]), name)
        namespace[name] = value  # later lookups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports})

    return __getattr__, __dir__
