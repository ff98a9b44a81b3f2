"""msprobe for MindSpore: ``from msprobe.mindspore import PrecisionDebugger``.

The public names are loaded on first use, so that the ``msprobe`` command does not import mindspore
just to print its help or compare dumps.
"""

from __future__ import annotations

import importlib
from typing import Any

# Eager, and light (no mindspore import): the function must own the name `compare`, not the submodule of
# the same name, whichever of the two is imported first.
from msprobe.mindspore.compare import compare, compare_distributed

_PUBLIC = {
    "GradComparator": "msprobe.core.grad_probe",
    "PrecisionDebugger": "msprobe.mindspore.debugger",
}
__all__ = [
    "GradComparator",
    "PrecisionDebugger",
    "compare",
    "compare_distributed",
]


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'msprobe.mindspore' has no attribute {name!r}")
    value = getattr(importlib.import_module(_PUBLIC[name]), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC})
