"""msprobe for PyTorch: ``from msprobe.pytorch import PrecisionDebugger``."""

from msprobe.core.grad_probe import GradComparator
from msprobe.pytorch.compare import compare, compare_distributed
from msprobe.pytorch.debugger import PrecisionDebugger
from msprobe.pytorch.module_dump import module_dump, module_dump_end
from msprobe.pytorch.seed import seed_all

__all__ = [
    "GradComparator",
    "PrecisionDebugger",
    "compare",
    "compare_distributed",
    "module_dump",
    "module_dump_end",
    "seed_all",
]
