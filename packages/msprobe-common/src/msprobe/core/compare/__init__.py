"""Compare two dumps (docs/compare.md): ``compare_dumps`` for one rank, ``compare_steps`` for a step directory."""

from msprobe.core.compare.engine import CompareOptions, compare_dumps
from msprobe.core.compare.reader import CompareError
from msprobe.core.compare.result import CompareResult

__all__ = ["CompareError", "CompareOptions", "CompareResult", "compare_dumps"]
