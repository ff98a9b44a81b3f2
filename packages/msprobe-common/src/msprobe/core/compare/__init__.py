"""Compare two dumps (docs/compare.md): ``compare_dumps`` for one rank, ``compare_steps`` for a step directory."""

from msprobe.core.compare.judge import CompareResult
from msprobe.core.compare.pipeline import CompareOptions, compare_dumps
from msprobe.core.compare.read import CompareError

__all__ = ["CompareError", "CompareOptions", "CompareResult", "compare_dumps"]
