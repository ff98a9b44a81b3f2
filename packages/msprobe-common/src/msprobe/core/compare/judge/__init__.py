"""Judging the paired rows: the numbers (:mod:`.metrics`), 1.1.1's verdict columns and highlights
(:mod:`.verdict`, the one module that writes a row's verdict fields), what rounding explains
(:mod:`.rounding`, :mod:`.conditioning`), where the runs first diverge (:mod:`.divergence`), replay
attribution (:mod:`.attribution`) and what one comparison produced (:mod:`.result`).

The third room of the pipeline: it imports :mod:`msprobe.core.compare.read`, never the reports.
"""

from msprobe.core.compare.judge.attribution import (
    CAUSES,
    DEFAULT_LIMIT,
    NEEDS_TENSORS,
    PARTS,
    Attribution,
    ErrorShare,
    Replay,
    ReplayRequest,
    attribute,
    describe,
)
from msprobe.core.compare.judge.conditioning import Normalisation, amplification, normalisation
from msprobe.core.compare.judge.divergence import (
    OPTIMIZER_KIND,
    Divergence,
    amplified_rows,
    differing_arguments,
    entry_kind,
    first_divergence,
    group_by_entry,
    mark_entering,
    optimizer_divergences,
    stack_of,
    user_frame,
    worst_rows,
)
from msprobe.core.compare.judge.metrics import (
    Stats,
    TensorMetrics,
    compare_tensors,
    cosine,
    relative_errors,
    stat_diff,
    stat_of,
)
from msprobe.core.compare.judge.result import CompareResult
from msprobe.core.compare.judge.rounding import (
    BACKWARD_SLACK,
    CROSS_FRAMEWORK_SLACK,
    FORWARD_SLACK,
    UNITS,
    describe_unit,
    judge_entries,
    run_unit,
)
from msprobe.core.compare.judge.verdict import (
    NO,
    PASS,
    RED,
    YELLOW,
    YES,
    RowResult,
    highlight_entry,
    judge_md5,
    judge_not_compared,
    judge_summary,
    judge_tensor,
    judge_uninitialised,
    judge_unmatched,
    judge_values,
)

__all__ = [
    "BACKWARD_SLACK", "CAUSES", "CROSS_FRAMEWORK_SLACK", "DEFAULT_LIMIT", "FORWARD_SLACK", "NEEDS_TENSORS", "NO",
    "OPTIMIZER_KIND", "PARTS", "PASS", "RED", "UNITS", "YELLOW", "YES", "Attribution", "CompareResult", "Divergence",
    "ErrorShare", "Normalisation", "Replay", "ReplayRequest", "RowResult", "Stats", "TensorMetrics",
    "amplification", "amplified_rows", "attribute", "compare_tensors", "cosine", "describe", "describe_unit",
    "differing_arguments", "entry_kind", "first_divergence", "group_by_entry", "highlight_entry", "judge_entries",
    "judge_md5", "judge_not_compared", "judge_summary", "judge_tensor", "judge_uninitialised", "judge_unmatched",
    "judge_values", "mark_entering", "normalisation", "optimizer_divergences", "relative_errors", "run_unit",
    "stack_of", "stat_diff", "stat_of",
    "user_frame", "worst_rows",
]
