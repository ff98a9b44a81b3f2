"""What one comparison produced: the rows, the first divergence and where the reports are.

A module of its own so that the engine, which builds it, and the report writers, which read it,
both import it instead of each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from msprobe.core.compare.judge.attribution import Attribution
from msprobe.core.compare.judge.divergence import Amplified, Divergence
from msprobe.core.compare.judge.verdict import RowResult


@dataclass
class CompareResult:
    mode: str
    results: list[RowResult]
    first_divergence: Divergence | None
    reports: dict[str, Path]
    npu_path: Path
    bench_path: Path
    unit: float = 0.0  # the rounding unit the first-divergence rule used (compare.judge.rounding)
    optimizer: list[Divergence] = field(default_factory=list)  # diverging optimizer entries
    analyzed: bool = True  # False with -c: no first-divergence analysis was asked for
    attribution: Attribution | None = None  # --attribute: the replayed suspects (compare.judge.attribution)
    cross_framework: bool = False  # MindSpore against PyTorch: the rounding slacks are wider (compare.judge.rounding)
    amplified: Amplified | None = None  # rows beyond rounding after an ill-conditioned op (compare.judge.conditioning)

    @property
    def not_compared(self) -> int:
        """Rows whose tensor files are missing or unreadable: the comparison is incomplete."""
        return sum(1 for r in self.results if r.not_compared)
