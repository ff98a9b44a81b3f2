"""msprobe for MindSpore: ``from msprobe.mindspore import PrecisionDebugger``."""

from msprobe.core.grad_probe import GradComparator
from msprobe.mindspore.compare import compare, compare_distributed
from msprobe.mindspore.debugger import PrecisionDebugger

__all__ = ["GradComparator", "PrecisionDebugger", "compare", "compare_distributed"]
