"""The files of the API pre-check (``msprobe -f <framework> run_ut``), without a framework.

- ``accuracy_checking_result_{YYYYmmddHHMMSS}.csv``: one row per API (``RESULT_COLUMNS``);
- ``accuracy_checking_details_{same time}.csv``: one row per compared output (``DETAIL_COLUMNS``);
- ``accuracy_checking_summary_{same time}.json``: counts per status, the seed, the inputs, and the worst
  elements of every failing output.

The CSVs are UTF-8 with a BOM (spreadsheet programs then read them as UTF-8). Statuses are ``pass``,
``Warning``, ``error`` and ``SKIP``; a blank backward cell (``' '``, as msprobe 1.1.1 writes it) means the
dump records no backward for the API (``N/A`` in memory and in the summary; earlier versions of ours
wrote ``N/A`` in the CSV too, and readers take both). A result CSV given back (``-csv_path``) resumes a
run: the APIs it lists are not checked again and new rows are appended to it and to its details CSV.
"""

from __future__ import annotations

import csv
import json
import math
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from msprobe.core.compare.judge import cosine
from msprobe.core.run_ut import metrics as m
from msprobe.core.run_ut.standards import ERROR, PASS, SKIP, OutputVerdict, all_metrics, api_status

NOT_APPLICABLE = "N/A"  # ApiRow.backward when the dump has no backward (the CSVs spell it per framework)
RESULT_COLUMNS = ("API name", "Forward Test Success", "Backward Test Success", "Message")
# msprobe 1.1.1's details columns, in its order and spelling (its stage 2 reads them by these names),
# each with the all_metrics key it holds; then ours.
DETAIL_METRICS_111 = (
    ("余弦相似度", "cosine"), ("最大绝对误差", "max_abs_err"), ("双百指标", "hundredth"), ("双千指标", "thousandth"),
    ("双万指标", "ten_thousandth"), ("二进制一致错误率", "error_ratio"), ("误差均衡性", "eb"), ("均方根误差", "rmse"),
    ("小值域错误占比", "small_value_err_ratio"), ("相对误差最大值", "max_rel_err"), ("相对误差平均值", "mean_rel_err"),
    ("inf/nan错误率", "inf_nan_err_ratio"), ("相对误差错误率", "rel_err_ratio"), ("绝对误差错误率", "abs_err_ratio"),
    ("ULP误差最大值", "max_ulp_err"), ("ULP误差平均值", "mean_ulp_err"), ("ULP误差大于阈值占比", "ulp_err_over_ratio"),
)
DETAIL_COLUMNS = (
    "API Name", "Bench Dtype", "DEVICE Dtype", "Shape", *(c for c, _ in DETAIL_METRICS_111), "Status", "Message",
    "Standard", "Stage1 Status", "Metrics", "Worst Elements",
)
RESULT_PREFIX, DETAILS_PREFIX, SUMMARY_PREFIX = (
    "accuracy_checking_result_", "accuracy_checking_details_", "accuracy_checking_summary_")
WORST_COUNT = 10
EMPTY = " "  # what 1.1.1 writes in a cell without a value (its stage 2 tests for it)
BOM = "\ufeff"


class ReportError(ValueError):
    """A result CSV to resume from is missing or not one of ours."""


@dataclass
class OutputRow:
    """One compared output: its name (``Functional.linear.0.forward.output.0``), dtypes, shape, verdict
    and the numbers of the details CSV (``metrics``: :func:`~msprobe.core.run_ut.standards.all_metrics`)."""

    name: str
    bench_dtype: str
    device_dtype: str
    shape: list[int]
    verdict: OutputVerdict
    cosine: float | None = None
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    worst: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class ApiRow:
    """One API of the result CSV (name without direction: ``Functional.linear.0``)."""

    name: str
    forward: str
    backward: str
    message: str = ""
    outputs: list[OutputRow] = field(default_factory=list)
    # a recorded input could not be read (a tensor file missing): the row is SKIP and the run ends non-zero
    input_error: bool = False


def api_row(name: str, forward: list[OutputRow], backward: tuple[str, list[OutputRow], str] | None) -> ApiRow:
    """An API's row from its judged outputs: the forward status is the worst of ``forward``'s; ``backward``
    is the replayed backward's (status, input-gradient rows, note), ``None`` when the dump has none; the
    message names every output that did not pass."""
    forward_status = api_status([o.verdict for o in forward])
    messages = ["forward: no comparable output"] if forward_status == SKIP else []
    outputs = list(forward)
    backward_status = NOT_APPLICABLE
    if backward is not None:
        backward_status, rows, note = backward
        outputs.extend(rows)
        if note:
            messages.append(f"backward: {note}")
    messages.extend(f"{o.name}: {o.verdict.message}" for o in outputs
                    if o.verdict.status not in (PASS, SKIP) and o.verdict.message)
    return ApiRow(name, forward_status, backward_status, "; ".join(messages), outputs)


def report_dir(output_dir: str | os.PathLike, resume_csv: str | os.PathLike | None) -> Path:
    """Where a run's reports go: next to the result CSV it resumes, else ``output_dir`` (``-o``)."""
    return Path(resume_csv).parent if resume_csv is not None else Path(output_dir)


def _finite(value: float) -> float | None:
    return float(value) if value is not None and math.isfinite(value) else None


def worst_elements(device: np.ndarray, bench: np.ndarray, count: int = WORST_COUNT) -> list[dict[str, Any]]:
    """The ``count`` elements with the largest absolute error (positions where exactly one side is inf/nan
    first): index (per dimension), device value, bench value, absolute error."""
    d, b = np.asarray(device), np.asarray(bench)
    if d.shape != b.shape or d.size == 0 or d.dtype.kind not in "biuf" or b.dtype.kind not in "biuf":
        return []
    df, bf = d.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    with np.errstate(invalid="ignore"):
        err = np.abs(df - bf)
    same_special = (np.isnan(df) & np.isnan(bf)) | (~np.isfinite(df) & (df == bf))
    err = np.where(same_special, 0.0, np.where(np.isnan(err), np.inf, err))
    order = np.argsort(-err, kind="stable")[:count]
    rows = []
    for flat in order:
        if err[flat] == 0:
            break
        rows.append({"index": [int(i) for i in np.unravel_index(int(flat), d.shape)] if d.ndim else [],
                     "device": _json_number(df[flat]), "bench": _json_number(bf[flat]),
                     "abs_err": _json_number(err[flat])})
    return rows


def _json_number(value: float) -> float | str:
    value = float(value)
    return value if math.isfinite(value) else str(value)


def output_row(name: str, bench_dtype: str, device_dtype: str, device: Any, bench: Any,
               verdict: OutputVerdict) -> OutputRow:
    """The details row of one output; ``device`` and ``bench`` as judged (float64 / integer arrays)."""
    d = None if device is None else np.asarray(device)
    b = None if bench is None else np.asarray(bench)
    row = OutputRow(name, bench_dtype, device_dtype, list(d.shape) if d is not None else [], verdict)
    row.metrics = all_metrics(name, device_dtype, d, b)
    if not row.metrics:  # not a judged output
        return row
    fd, fb, _ = m.finite_pairs(d.astype(np.float64), b.astype(np.float64))
    if fd.size:
        row.cosine, _ = cosine(fd, fb)
        row.max_abs_err = float(m.abs_errors(fd, fb).max())
        row.max_rel_err = _finite(float(m.rel_errors(fd, fb).max()))
    if verdict.status == ERROR:
        row.worst = worst_elements(d, b)
    return row


def _cell(value: Any) -> str:
    if value is None:
        return EMPTY
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else str(value)
    return str(value)


def _metrics_text(metrics: Mapping[str, Any]) -> str:
    return json.dumps({k: _json_number(v) if isinstance(v, float) else v for k, v in metrics.items()},
                      sort_keys=True)


def detail_cells(row: OutputRow) -> list[str]:
    """The PyTorch details row: 1.1.1's columns, then the standard, stage 1, the verdict's metrics and
    the worst elements."""
    v = row.verdict
    numbers = {**row.metrics, "cosine": row.cosine, "max_abs_err": row.max_abs_err}
    return [row.name, row.bench_dtype, row.device_dtype, str(tuple(row.shape)),
            *(_cell(numbers.get(key)) for _, key in DETAIL_METRICS_111),
            v.status, v.message or EMPTY, v.standard or EMPTY, v.stage1 or EMPTY, _metrics_text(v.metrics),
            json.dumps(row.worst) if row.worst else EMPTY]


@dataclass(frozen=True)
class DetailsLayout:
    """How a framework's report spells its CSVs: the details columns and how one output fills them, the
    result CSV's header and its backward cell for an API whose dump has no backward. The default is
    PyTorch's, as msprobe 1.1.1's PyTorch checker wrote them (:data:`DETAIL_COLUMNS` with
    :func:`detail_cells`, :data:`RESULT_COLUMNS`, ``' '``); a framework whose 1.1.1 checker wrote other
    ones (MindSpore: an empty cell) passes its own to :class:`Report`, :func:`merge_parts` and
    :func:`read_done`. ``ApiRow.backward`` stays ``N/A`` in memory and summaries."""

    columns: tuple[str, ...]
    cells: Callable[[OutputRow], list[str]]
    result_columns: tuple[str, ...] = RESULT_COLUMNS
    no_backward: str = EMPTY

    def result_cells(self, row: ApiRow) -> list[str]:
        backward = self.no_backward if row.backward == NOT_APPLICABLE else row.backward
        return [row.name, row.forward, backward, row.message]


def backward_status(cell: str) -> str:
    """A result CSV's backward cell as ``ApiRow.backward`` holds it: blank (1.1.1's ``' '``, MindSpore's
    empty cell) and our earlier ``N/A`` are all "no backward" (``N/A``), which 1.1.1 counts as a backward
    that did not fail."""
    return NOT_APPLICABLE if cell.strip() in ("", NOT_APPLICABLE) else cell


DEFAULT_DETAILS = DetailsLayout(DETAIL_COLUMNS, detail_cells)


def timestamp() -> str:
    return time.strftime("%Y%m%d%H%M%S", time.localtime())


def read_done(result_csv: str | os.PathLike, columns: tuple[str, ...] = RESULT_COLUMNS) -> set[str]:
    """The API names already in a result CSV headed ``columns`` (for resuming)."""
    path = Path(result_csv)
    if not path.is_file():
        raise ReportError(f"result CSV {str(path)!r} does not exist or is not a file")
    if not path.name.startswith(RESULT_PREFIX) or path.suffix != ".csv":
        raise ReportError(f"result CSV {str(path)!r}: expected a file named {RESULT_PREFIX}<time>.csv")
    try:
        with open(path, encoding="utf-8-sig", newline="") as handle:
            rows = list(csv.reader(handle))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ReportError(f"result CSV {str(path)!r} cannot be read: {exc}") from None
    if not rows or tuple(rows[0][: len(columns)]) != columns:
        raise ReportError(f"result CSV {str(path)!r} does not start with the header {', '.join(columns)}")
    return {r[0] for r in rows[1:] if r}


def split_output_name(name: str) -> tuple[str, str] | None:
    """A details row's name: ``Torch.linalg.norm.0.forward.output.1`` → (``Torch.linalg.norm.0``,
    ``forward``); None when it is not ``API.N.forward|backward.output.K``."""
    parts = name.split(".")
    if len(parts) < 5 or parts[-3] not in ("forward", "backward") or parts[-2] != "output":
        return None
    return ".".join(parts[:-3]), parts[-3]


def _trim_details(path: Path, done: set[str]) -> None:
    """Resuming: keep only the details rows of APIs the result CSV lists (an interrupted run, or a result
    CSV cut by hand, leaves rows of APIs that will be checked again); rewritten atomically."""
    with open(path, encoding="utf-8-sig", newline="") as handle:
        rows = list(csv.reader(handle))
    kept = rows[:1] + [r for r in rows[1:] if r and (split_output_name(r[0]) or ("",))[0] in done]
    if len(kept) == len(rows):
        return
    temp = path.with_name(f".{path.name}.tmp")
    with open(temp, "w", encoding="utf-8", newline="") as handle:
        handle.write(BOM)
        csv.writer(handle).writerows(kept)
    os.replace(temp, path)


class Report:
    """The three files of one run; rows are written as each API finishes (a crash loses nothing done)."""

    def __init__(self, output_dir: str | os.PathLike, resume_csv: str | os.PathLike | None = None,
                 details: DetailsLayout = DEFAULT_DETAILS) -> None:
        self.layout = details
        if resume_csv is not None:
            self.result_path = Path(resume_csv)
            stamp = self.result_path.name[len(RESULT_PREFIX): -len(".csv")]
            self.done = read_done(self.result_path, details.result_columns)
            self.details_path = self.result_path.with_name(f"{DETAILS_PREFIX}{stamp}.csv")
            self.summary_path = self.result_path.with_name(f"{SUMMARY_PREFIX}{stamp}.json")
            if self.details_path.is_file():
                _trim_details(self.details_path, self.done)
        else:
            out = Path(output_dir)
            out.mkdir(parents=True, exist_ok=True)
            stamp = timestamp()
            self.result_path = out / f"{RESULT_PREFIX}{stamp}.csv"
            self.details_path = out / f"{DETAILS_PREFIX}{stamp}.csv"
            self.summary_path = out / f"{SUMMARY_PREFIX}{stamp}.json"
            self.done = set()
        self._start(self.result_path, details.result_columns)
        self._start(self.details_path, details.columns)
        self.rows: list[ApiRow] = []

    @staticmethod
    def _start(path: Path, header: Iterable[str]) -> None:
        if path.exists() and path.stat().st_size > 0:
            return
        with open(path, "w", encoding="utf-8", newline="") as handle:
            handle.write(BOM)
            csv.writer(handle).writerow(header)

    def add(self, row: ApiRow) -> None:
        """Write the API's details rows, then its result row: an API is done once its result row is
        written (a crash in between leaves details that resuming trims)."""
        self.rows.append(row)
        if row.outputs:
            with open(self.details_path, "a", encoding="utf-8", newline="") as handle:
                writer = csv.writer(handle)
                for out in row.outputs:
                    writer.writerow(self.layout.cells(out))
        with open(self.result_path, "a", encoding="utf-8", newline="") as handle:
            csv.writer(handle).writerow(self.layout.result_cells(row))

    def summary(self, **info: Any) -> dict[str, Any]:
        """Counts of this run's rows (forward and backward statuses), ``info`` (seed, inputs...), the
        worst elements of every failing output and the APIs whose recorded inputs could not be read
        (``input_errors``); written to the summary JSON."""
        failures = [{"output": o.name, "status": o.verdict.status, "message": o.verdict.message, "worst": o.worst}
                    for r in self.rows for o in r.outputs if o.verdict.status == ERROR]
        data = {
            **info,
            "result_csv": str(self.result_path),
            "details_csv": str(self.details_path),
            "apis": len(self.rows),
            "forward": dict(Counter(r.forward for r in self.rows)),
            "backward": dict(Counter(r.backward for r in self.rows)),
            "failures": failures,
            "input_errors": [{"api": r.name, "message": r.message} for r in self.rows if r.input_error],
        }
        with open(self.summary_path, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=2, default=str)
        return data


def _data_rows(path: Path, header: tuple[str, ...]) -> list[list[str]]:
    with open(path, encoding="utf-8-sig", newline="") as handle:
        rows = list(csv.reader(handle))
    if not rows or tuple(rows[0][: len(header)]) != header:
        raise ReportError(f"{str(path)!r} does not start with the header {', '.join(header)}")
    return [r for r in rows[1:] if r]


def _only(folder: Path, prefix: str, suffix: str) -> Path:
    found = sorted(folder.glob(f"{prefix}*{suffix}"))
    if len(found) != 1:
        raise ReportError(f"{str(folder)!r}: expected one {prefix}*{suffix}, found {len(found)}")
    return found[0]


def merge_parts(part_dirs: Iterable[str | os.PathLike], output_dir: str | os.PathLike,
                resume_csv: str | os.PathLike | None = None, details: DetailsLayout = DEFAULT_DETAILS,
                **info: Any) -> dict[str, Any]:
    """Merge the reports of parts run separately (``multi_run_ut``) into one result CSV, one details
    CSV and one summary JSON: the rows of each part in the order of ``part_dirs`` (contiguous parts of
    the dump: the dump's order). New files in ``output_dir``, or with ``resume_csv`` the rows are
    appended to that result CSV and its details CSV. The summary counts the merged rows, joins the
    parts' failures and input errors, and holds the first part's run information, then ``info``."""
    report = Report(output_dir, resume_csv, details)
    results: list[list[str]] = []
    detail_rows: list[list[str]] = []
    failures: list[Any] = []
    input_errors: list[Any] = []
    first: dict[str, Any] = {}
    for folder in map(Path, part_dirs):
        results += _data_rows(_only(folder, RESULT_PREFIX, ".csv"), details.result_columns)
        detail_rows += _data_rows(_only(folder, DETAILS_PREFIX, ".csv"), details.columns)
        with open(_only(folder, SUMMARY_PREFIX, ".json"), encoding="utf-8") as handle:
            part = json.load(handle)
        failures += part.get("failures", [])
        input_errors += part.get("input_errors", [])
        first = first or part
    for path, rows in ((report.result_path, results), (report.details_path, detail_rows)):
        with open(path, "a", encoding="utf-8", newline="") as handle:
            csv.writer(handle).writerows(rows)
    counted = ("result_csv", "details_csv", "apis", "forward", "backward", "failures", "input_errors")
    data = {
        **{k: v for k, v in first.items() if k not in counted},
        **info,
        "result_csv": str(report.result_path),
        "details_csv": str(report.details_path),
        "apis": len(results),
        "forward": dict(Counter(r[1] for r in results)),
        "backward": dict(Counter(backward_status(r[2] if len(r) > 2 else "") for r in results)),
        "failures": failures,
        "input_errors": input_errors,
    }
    with open(report.summary_path, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=2, default=str)
    return data
