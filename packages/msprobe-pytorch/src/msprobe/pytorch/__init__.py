"""msprobe for PyTorch: ``from msprobe.pytorch import PrecisionDebugger``.

The public names are loaded on first use, so that the ``msprobe`` command (which finds this package's
commands through an entry point) does not import torch just to print its help or compare dumps.
"""

from __future__ import annotations

from msprobe.core.services.lazy import lazy_exports

# Eager, and light (no torch import): the function must own the name `compare`, not the submodule of
# the same name, whichever of the two is imported first.
from msprobe.pytorch.compare import compare, compare_distributed

_PUBLIC = {
    "ConfigChecker": "msprobe.pytorch.config_check",
    "GradComparator": "msprobe.core.grad_probe",
    "PrecisionDebugger": "msprobe.pytorch.debugger",
    "TrainerMon": "msprobe.pytorch.monitor",
    "module_dump": "msprobe.pytorch.training.module_dump",
    "module_dump_end": "msprobe.pytorch.training.module_dump",
    "seed_all": "msprobe.pytorch.training.seed",
}
__all__ = [
    "ConfigChecker",
    "GradComparator",
    "PrecisionDebugger",
    "TrainerMon",
    "compare",
    "compare_distributed",
    "module_dump",
    "module_dump_end",
    "seed_all",
]

__getattr__, __dir__ = lazy_exports(__name__, _PUBLIC)
