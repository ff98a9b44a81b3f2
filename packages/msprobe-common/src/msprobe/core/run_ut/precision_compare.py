"""``api_precision_compare``: stage 2 of the API pre-check, without a framework (docs/run_ut.md).

Stage 1 (``run_ut``) measured, per output, how far the device under test ("NPU") is from a
high-precision bench, and on another machine how far a trusted device ("GPU") is from the same bench.
Stage 2 reads both details CSVs and judges each NPU output by the standard of its API: binary
consistency, absolute threshold and thousandth on the NPU's own numbers; ULP and the benchmark
method on the NPU's numbers *relative to the GPU's* (an NPU error no larger than the GPU's is
acceptable). The details CSVs may be ours or msprobe 1.1.1's: both have 1.1.1's columns.

Outputs (UTF-8 with BOM), named as 1.1.1 names them:
``api_precision_compare_details_{ts}.csv`` (``COMPARE_DETAIL_COLUMNS``: 1.1.1's 28 columns, one row per
NPU output) and ``api_precision_compare_result_{ts}.csv`` (one row per API: forward and backward status;
a direction without rows, an API without backward, is ``' '`` as in 1.1.1's, which counts it as passing).
"""

from __future__ import annotations

import csv
import math
import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from msprobe.core.run_ut.report import BOM, EMPTY, split_output_name, timestamp
from msprobe.core.run_ut.standards import (
    ABSOLUTE,
    BENCHMARK,
    BINARY,
    ERROR,
    PASS,
    SKIP,
    THOUSANDTH,
    ULP,
    StandardsTable,
    api_status,
    grade,
    load_standards,
    normalise_dtype,
    worst,
)
from msprobe.core.services.log import logger

# the stage-1 details columns stage 2 reads (1.1.1's names)
NAME, DEVICE_DTYPE, MESSAGE = "API Name", "DEVICE Dtype", "Message"
SMALL, RMSE, MAX_REL, MEAN_REL, EB = "小值域错误占比", "均方根误差", "相对误差最大值", "相对误差平均值", "误差均衡性"
ERROR_RATE, INF_NAN, REL_RATIO, ABS_RATIO = "二进制一致错误率", "inf/nan错误率", "相对误差错误率", "绝对误差错误率"
MEAN_ULP, ULP_OVER, THOUSANDTH_RATIO = "ULP误差平均值", "ULP误差大于阈值占比", "双千指标"
REQUIRED_COLUMNS = (NAME, DEVICE_DTYPE, SMALL, RMSE, MAX_REL, MEAN_REL, EB, ERROR_RATE, INF_NAN, REL_RATIO,
                    ABS_RATIO, MEAN_ULP, ULP_OVER, THOUSANDTH_RATIO)
# the numbers each standard needs from the NPU row (and, for ULP and benchmark, from the GPU row)
NEEDS = {
    BINARY: (ERROR_RATE,), ABSOLUTE: (INF_NAN, REL_RATIO, ABS_RATIO), ULP: (MEAN_ULP, ULP_OVER),
    THOUSANDTH: (THOUSANDTH_RATIO,), BENCHMARK: (SMALL, RMSE, MAX_REL, MEAN_REL, EB),
}
# a 1.1.1 CSV fills the numbers of 1.1.1's choice of standard only: if ours is missing, the first of
# these the row has is used (the thousandth ratio is a first-stage number too, so it is not a sign)
FALLBACK = (BINARY, ABSOLUTE, ULP, BENCHMARK)
ALGORITHM_NAMES = {BINARY: "二进制一致法", ABSOLUTE: "绝对阈值法", ULP: "ULP误差比对法", THOUSANDTH: "双千指标法",
                   BENCHMARK: "标杆比对法"}
# benchmark metrics: (NPU/GPU column, ratio column, status column, peer_ratio key)
BENCHMARK_COLUMNS = (
    (SMALL, "小值域错误比值", "小值域判定结果", "small_value_err_ratio"),
    (RMSE, "均方根误差比值", "均方根误差判定结果", "rmse"),
    (MAX_REL, "相对误差最大值比值", "相对误差最大值判定结果", "max_rel_err"),
    (MEAN_REL, "相对误差平均值比值", "相对误差平均值判定结果", "mean_rel_err"),
    (EB, "误差均衡性比值", "误差均衡性判定结果", "eb"),
)
ABSOLUTE_COLUMNS = ((INF_NAN, "inf/nan判定结果"), (REL_RATIO, "相对误差判定结果"), (ABS_RATIO, "绝对误差判定结果"))
COMPARE_DETAIL_COLUMNS = (
    "API Name", *(c for _, ratio, status, _ in BENCHMARK_COLUMNS for c in (ratio, status)),
    *(c for pair in ABSOLUTE_COLUMNS for c in pair), ERROR_RATE, "二进制一致错误率判定结果",
    MEAN_ULP, ULP_OVER, "ULP误差大于阈值占比比值", "ULP误差判定结果", THOUSANDTH_RATIO, "双千指标判定结果",
    "比对结果", "比对算法", "Message",
)
COMPARE_RESULT_COLUMNS = ("API Name", "Forward Test Success", "Backward Test Success", "Message")
RESULT_PREFIX, DETAILS_PREFIX = "api_precision_compare_result_", "api_precision_compare_details_"
# float64 and complex outputs are not judged (as 1.1.1), nor dtypes without numbers (float8, scalars)
STAGE2_DTYPES = ("float16", "bfloat16", "float32", "int", "bool")


class PrecisionCompareError(ValueError):
    """A details CSV is missing, unreadable or lacks the columns stage 2 needs."""


@dataclass
class CompareRow:
    """One NPU output judged in stage 2: its status, standard, and the cells of the details CSV."""

    name: str
    api: str
    direction: str
    status: str
    standard: str = ""
    message: str = ""
    cells: dict[str, Any] = field(default_factory=dict)


def read_details(path: str | os.PathLike, label: str) -> dict[str, dict[str, str]]:
    """The rows of a stage-1 details CSV (ours or 1.1.1's) by output name, in file order."""
    path = Path(path)
    if not path.is_file():
        raise PrecisionCompareError(f"-{label} {str(path)!r}: no such file")
    try:
        with open(path, encoding="utf-8-sig", newline="") as handle:
            reader = csv.DictReader(handle)
            missing = [c for c in REQUIRED_COLUMNS if c not in (reader.fieldnames or ())]
            if missing:
                raise PrecisionCompareError(
                    f"-{label} {str(path)!r} is not an accuracy_checking_details CSV: missing column(s) "
                    f"{', '.join(missing)}")
            rows: dict[str, dict[str, str]] = {}
            for row in reader:
                name = (row.get(NAME) or "").strip()
                if name in rows:
                    raise PrecisionCompareError(f"-{label} {str(path)!r}: output {name!r} appears twice")
                if name:
                    rows[name] = row
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise PrecisionCompareError(f"-{label} {str(path)!r} cannot be read: {exc}") from None
    return rows


def number(row: Mapping[str, str], column: str) -> float | None:
    """A numeric cell: None when blank (1.1.1 writes ' '), NaN for 'nan'/'Nan', ±inf; ValueError otherwise."""
    text = (row.get(column) or "").strip()
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"column {column} holds {text!r}, not a number") from None


def ratio(npu: float, gpu: float) -> tuple[float, bool]:
    """(NPU / GPU, consistent). Both finite: |npu/gpu|, 1 when both are 0, inf when only the GPU's is 0.
    Otherwise the ratio is NaN and consistent only when both are NaN or the same infinity."""
    if math.isfinite(npu) and math.isfinite(gpu):
        if gpu == 0:
            return (1.0 if npu == 0 else math.inf), True
        return abs(npu / gpu), True
    same = (math.isnan(npu) and math.isnan(gpu)) or (math.isinf(npu) and npu == gpu)
    return math.nan, same


class Stage2:
    """Judges NPU outputs against GPU outputs with the standards table (``standards.json``)."""

    def __init__(self, table: StandardsTable | None = None) -> None:
        self.table = table or load_standards()

    def judge(self, name: str, npu: Mapping[str, str], gpu: Mapping[str, str] | None) -> CompareRow:
        parsed = split_output_name(name)
        if parsed is None:
            return CompareRow(name, name, "", SKIP, message=f"{name!r} is not an output name (API.N.forward.output.K)")
        api, direction = parsed
        row = CompareRow(name, api, direction, SKIP)
        dtype = (npu.get(DEVICE_DTYPE) or "").strip()
        if not dtype:
            row.message = (npu.get(MESSAGE) or "").strip() or "no device output"
            return row
        if gpu is None:
            row.message = "not in the GPU details CSV"
            return row
        if normalise_dtype(dtype) not in STAGE2_DTYPES:
            row.message = f"{dtype} outputs are not judged in stage 2"
            return row
        try:
            standard = self._standard(name, dtype, npu)
            if standard is None:
                row.message = "the NPU row holds the numbers of no standard"
                return row
            row.standard = standard
            judges = {BINARY: self._binary, ABSOLUTE: self._absolute, ULP: self._ulp, THOUSANDTH: self._thousandth,
                      BENCHMARK: self._benchmark}
            judges[row.standard](row, normalise_dtype(dtype), npu, gpu)
        except ValueError as exc:
            row.status, row.message = SKIP, str(exc)
        if row.standard:
            row.cells["比对算法"] = ALGORITHM_NAMES[row.standard]
        row.cells["比对结果"] = row.status
        return row

    def _standard(self, name: str, dtype: str, npu: Mapping[str, str]) -> str | None:
        ours = self.table.standard_for(name, dtype)
        for standard in (ours, *FALLBACK):
            if all(number(npu, c) is not None for c in NEEDS[standard]):
                return standard
        return None

    @staticmethod
    def _binary(row: CompareRow, _dtype: str, npu: Mapping[str, str], _gpu: Mapping[str, str]) -> None:
        rate = number(npu, ERROR_RATE)
        row.status = PASS if rate == 0 else ERROR
        row.cells.update({ERROR_RATE: rate, "二进制一致错误率判定结果": row.status})
        row.message = "" if row.status == PASS else f"binary consistency: {rate:.6g} of elements differ"

    @staticmethod
    def _absolute(row: CompareRow, _dtype: str, npu: Mapping[str, str], _gpu: Mapping[str, str]) -> None:
        failing = []
        for column, status_column in ABSOLUTE_COLUMNS:
            value = number(npu, column)
            status = PASS if value == 0 else ERROR
            row.cells.update({column: value, status_column: status})
            if status == ERROR:
                failing.append(f"{column} {value:.6g}")
        row.status = ERROR if failing else PASS
        row.message = f"absolute threshold: {', '.join(failing)}" if failing else ""

    def _thousandth(self, row: CompareRow, dtype: str, npu: Mapping[str, str], _gpu: Mapping[str, str]) -> None:
        value = number(npu, THOUSANDTH_RATIO)
        minimum = self.table.numbers(THOUSANDTH, dtype)["min_ratio"]
        row.status = PASS if value is not None and value >= minimum else ERROR
        row.cells.update({THOUSANDTH_RATIO: value, "双千指标判定结果": row.status})
        row.message = "" if row.status == PASS else f"thousandth: {value:.6g} of elements within 0.1 % < {minimum}"

    def _ulp(self, row: CompareRow, dtype: str, npu: Mapping[str, str], gpu: Mapping[str, str]) -> None:
        mean, over = number(npu, MEAN_ULP), number(npu, ULP_OVER)
        gpu_over = number(gpu, ULP_OVER)
        if gpu_over is None:
            raise ValueError(f"the GPU row has no {ULP_OVER}")
        over_ratio, consistent = ratio(over, gpu_over)
        numbers = self.table.numbers(ULP, dtype)
        mean_max = numbers.get("mean_ulp_max")
        ok = (over < numbers["max_over_fraction"] or (mean_max is not None and mean < mean_max)
              or over_ratio < 1)
        row.status = PASS if consistent and ok else ERROR
        row.cells.update({MEAN_ULP: mean, ULP_OVER: over, "ULP误差大于阈值占比比值": over_ratio,
                          "ULP误差判定结果": row.status})
        if row.status == ERROR:
            row.message = ("ULP: inf/nan of the NPU and GPU differ" if not consistent else
                           f"ULP: fraction over the limit {over:.6g} (GPU {gpu_over:.6g})")

    def _benchmark(self, row: CompareRow, _dtype: str, npu: Mapping[str, str], gpu: Mapping[str, str]) -> None:
        bounds = self.table.thresholds[BENCHMARK]["peer_ratio"]
        counted, failing = [], []
        for column, ratio_column, status_column, key in BENCHMARK_COLUMNS:
            theirs = number(gpu, column)
            if theirs is None:
                raise ValueError(f"the GPU row has no {column}")
            value, consistent = ratio(number(npu, column), theirs)
            status = grade(value, *bounds[key]) if consistent else ERROR
            row.cells.update({ratio_column: value, status_column: status})
            if key != "eb":  # EB of two unbiased runs is noise over noise: reported, not counted (as 1.1.1)
                counted.append(status)
            if status != PASS and key != "eb":
                failing.append(f"{key} ratio {value:.6g} {status}" if consistent else f"{key} inf/nan differ")
        row.status = worst(counted)
        row.message = f"benchmark: {', '.join(failing)}" if failing else ""


def _cell(value: Any) -> str:
    if value is None or value == "":
        return EMPTY
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else str(value)
    return str(value)


def _write(path: Path, header: tuple[str, ...], rows: list[list[str]]) -> None:
    temp = path.with_name(f".{path.name}.tmp")
    with open(temp, "w", encoding="utf-8", newline="") as handle:
        handle.write(BOM)
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    os.replace(temp, path)


@dataclass
class Stage2Result:
    """What a stage-2 run wrote and judged."""

    result_csv: Path
    details_csv: Path
    rows: list[CompareRow]
    apis: list[list[str]]

    @property
    def judged(self) -> int:
        return sum(r.status != SKIP for r in self.rows)


def api_precision_compare(npu_csv: str | os.PathLike, gpu_csv: str | os.PathLike,
                          output_dir: str | os.PathLike = ".", table: StandardsTable | None = None) -> Stage2Result:
    """Judge every output of ``npu_csv`` against the same output of ``gpu_csv`` and write the two
    files into ``output_dir``. Raises :class:`PrecisionCompareError` for unusable inputs."""
    npu_rows = read_details(npu_csv, "npu")
    gpu_rows = read_details(gpu_csv, "gpu")
    stage2 = Stage2(table)
    rows = [stage2.judge(name, row, gpu_rows.get(name)) for name, row in npu_rows.items()]
    by_api: dict[str, dict[str, list[CompareRow]]] = {}
    for r in rows:
        by_api.setdefault(r.api, {"forward": [], "backward": []}).setdefault(r.direction or "forward", []).append(r)
    apis = []
    for api, groups in by_api.items():
        statuses = [api_status([r.status for r in groups[d]]) if groups[d] else EMPTY
                    for d in ("forward", "backward")]
        messages = [f"{r.name}: {r.message}" for d in ("forward", "backward") for r in groups[d]
                    if r.status != PASS and r.message]
        apis.append([api, *statuses, "; ".join(messages)])
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    stamp = timestamp()
    result_csv, details_csv = out / f"{RESULT_PREFIX}{stamp}.csv", out / f"{DETAILS_PREFIX}{stamp}.csv"
    details = [[r.name, *(_cell(r.cells.get(c)) for c in COMPARE_DETAIL_COLUMNS[1:-1]), r.message or EMPTY]
               for r in rows]
    _write(details_csv, COMPARE_DETAIL_COLUMNS, details)
    _write(result_csv, COMPARE_RESULT_COLUMNS, apis)
    return Stage2Result(result_csv, details_csv, rows, apis)


def main(npu_csv: str, gpu_csv: str, output_dir: str) -> int:
    """The command: 0 at least one output judged, 1 none (a message says why), 2 bad input."""

    try:
        result = api_precision_compare(npu_csv, gpu_csv, output_dir)
    except PrecisionCompareError as exc:
        logger.error("api_precision_compare: %s", exc)
        return 2
    counts = dict(Counter(api[1] for api in result.apis))
    logger.info("api_precision_compare: %d APIs, forward %s; results in %s and %s", len(result.apis), counts,
                result.result_csv, result.details_csv)
    if result.judged == 0:
        reasons = sorted({r.message for r in result.rows if r.message})[:3]
        logger.error("api_precision_compare: no output was compared (%d NPU rows; e.g. %s)", len(result.rows),
                     "; ".join(reasons) or "the NPU details CSV has no rows")
        return 1
    return 0
