"""The CSVs of the MindSpore checker as msprobe 1.1.1's MindSpore checker spelled them, then ours.

Result CSV: 1.1.1's header ``API Name, Forward Test Success, Backward Test Success, Message`` (the PyTorch
checker's says ``API name``), and an empty backward cell for an API whose dump has no backward (1.1.1 left
it empty; PyTorch's report writes ``N/A``). Details CSV: 1.1.1 wrote ``API Name, Bench Dtype, Tested Dtype,
Shape, Cosine, MaxAbsErr, MaxRelativeErr, Status, Message`` (dtypes as MindSpore names, ``Float32``; the
shape as a tuple, ``(2, 3)``). Those nine come first, with the same meanings; ``Status`` is our dtype-aware
verdict (:func:`msprobe.core.run_ut.judge_output`) instead of 1.1.1's cosine/max-abs-error rule. Appended:
the standard used, the first-stage status, every metric (JSON) and, for an ``error`` output, its worst
elements (JSON) — what the PyTorch details CSV holds too.
"""

from __future__ import annotations

import json
import math
from typing import Any

from msprobe.core.run_ut.report import DetailsLayout, OutputRow

COLUMNS_111 = ("API Name", "Bench Dtype", "Tested Dtype", "Shape", "Cosine", "MaxAbsErr", "MaxRelativeErr",
               "Status", "Message")
COLUMNS = (*COLUMNS_111, "Standard", "Stage1 Status", "Metrics", "Worst Elements")
RESULT_COLUMNS_111 = ("API Name", "Forward Test Success", "Backward Test Success", "Message")
NO_BACKWARD_111 = ""


def _number(value: float | None) -> str:
    if value is None:
        return ""
    return repr(float(value)) if math.isfinite(value) else str(value)


def _json_ready(value: Any) -> Any:
    return value if not isinstance(value, float) or math.isfinite(value) else str(value)


def cells(row: OutputRow) -> list[str]:
    verdict = row.verdict
    metrics = json.dumps({k: _json_ready(v) for k, v in verdict.metrics.items()}, sort_keys=True)
    return [row.name, row.bench_dtype, row.device_dtype, str(tuple(row.shape)), _number(row.cosine),
            _number(row.max_abs_err), _number(row.max_rel_err), verdict.status, verdict.message, verdict.standard,
            verdict.stage1 or "", metrics, json.dumps(row.worst) if row.worst else ""]


MINDSPORE_DETAILS = DetailsLayout(COLUMNS, cells, RESULT_COLUMNS_111, NO_BACKWARD_111)
