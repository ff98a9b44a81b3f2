"""msprobe for MindSpore: ``from msprobe.mindspore import PrecisionDebugger``.

The public names are loaded on first use, so that the ``msprobe`` command does not import mindspore
just to print its help or compare dumps.
"""

from __future__ import annotations

from msprobe.core.services.lazy import lazy_exports

# Eager, and light (no mindspore import): the function must own the name `compare`, not the submodule of
# the same name, whichever of the two is imported first.
from msprobe.mindspore.compare import compare, compare_distributed

_PUBLIC = {
    "ConfigChecker": "msprobe.mindspore.config_check",
    "GradComparator": "msprobe.core.grad_probe",
    "PrecisionDebugger": "msprobe.mindspore.debugger",
    "TrainerMon": "msprobe.mindspore.monitor",
}
__all__ = [
    "ConfigChecker",
    "GradComparator",
    "PrecisionDebugger",
    "TrainerMon",
    "compare",
    "compare_distributed",
]

__getattr__, __dir__ = lazy_exports(__name__, _PUBLIC)
