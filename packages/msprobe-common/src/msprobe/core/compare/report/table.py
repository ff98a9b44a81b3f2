"""The report table: 1.1.1's column names and order per mode, and each row's cell values.

Cells hold full-precision numbers (1.1.1 rounded to 12 decimals); relative errors in summary mode
are fractions (the xlsx shows them as percentages through a number format, 1.1.1 wrote strings
such as ``'0.29%'``). ``N/A`` marks what a side does not have, as in 1.1.1.
"""

from __future__ import annotations

from typing import Any

from msprobe.core.compare.judge import NEEDS_TENSORS, PARTS, Attribution, ErrorShare, RowResult, Stats
from msprobe.core.compare.read import STAT_KEYS, Row

NA = "N/A"
HEAD = ["NPU Name", "Bench Name", "NPU Dtype", "Bench Dtype", "NPU Tensor Shape", "Bench Tensor Shape"]
STATS = ["NPU max", "NPU min", "NPU mean", "NPU l2norm", "Bench max", "Bench min", "Bench mean", "Bench l2norm"]
TENSOR_METRICS = ["Cosine", "MaxAbsErr", "MaxRelativeErr", "One Thousandth Err Ratio", "Five Thousandths Err Ratio"]
SUMMARY_DIFFS = ["Max diff", "Min diff", "Mean diff", "L2norm diff"]
SUMMARY_RELS = ["MaxRelativeErr", "MinRelativeErr", "MeanRelativeErr", "NormRelativeErr"]
STACK = "NPU_Stack_Info"
PERCENT_COLUMNS = {"summary": set(SUMMARY_RELS)}
# --attribute: after 1.1.1's columns, so tools reading those by position still find them
SHARE_MEASURES = ["NormRelErr", "Cosine", "MaxAbsErr", "Excess"]
ATTRIBUTION = ["Attribution", *(f"{part.capitalize()} {m}" for part in PARTS for m in SHARE_MEASURES)]


def columns(mode: str, with_stack: bool) -> list[str]:
    """Column names in 1.1.1's order for ``mode`` (tensor, summary, md5)."""
    stack = [STACK] if with_stack else []
    if mode == "tensor":
        return [*HEAD, *TENSOR_METRICS, *STATS, "Accuracy Reached or Not", "Err_message", *stack, "Data_name"]
    if mode == "summary":
        return [*HEAD, *SUMMARY_DIFFS, *SUMMARY_RELS, *STATS, "Result", "Err_message", *stack]
    if mode == "md5":
        return [*HEAD, "NPU MD5", "BENCH MD5", "Result", *stack]
    raise ValueError(f"compare mode {mode!r} is not one of tensor, summary, md5")


def _dtype(row: Row | None) -> str:
    if row is None:
        return NA
    value = row.value
    if row.is_tensor:
        return str(value.get("dtype"))
    if isinstance(value, dict) and "type" in value:
        return f"<class '{value['type']}'>"
    return "None" if value is None else f"<class '{type(value).__name__}'>"


def _shape(row: Row | None) -> str:
    if row is None:
        return NA
    if row.is_tensor:
        return str(list(row.value.get("shape") or []))
    return "None" if row.value is None else "[]"


def _json_stats(row: Row | None) -> list[Any]:
    """A side's four statistics as dump.json recorded them (scalars repeat their value, like 1.1.1)."""
    if row is None:
        return [NA] * 4
    value = row.value
    if row.is_tensor:
        return [_cell(value.get(k)) for k in STAT_KEYS]
    scalar = value.get("value") if isinstance(value, dict) else value
    return [_cell(scalar)] * 4


def _stats_cells(stats: Stats) -> list[Any]:
    return [_cell(stats.max), _cell(stats.min), _cell(stats.mean), _cell(stats.norm)]


def _cell(value: Any) -> Any:
    if value is None:
        return "None"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, (int, float, str)):
        return value
    return str(value)


def _metric(value: float | None, unmatched: bool) -> Any:
    if unmatched:
        return NA
    return "None" if value is None else value


def row_cells(result: RowResult, with_stack: bool, stacks: dict[str, list[str]]) -> list[Any]:
    """The cells of one report row, aligned with :func:`columns`."""
    npu, bench = result.npu, result.bench
    one_sided = npu is None or bench is None
    cells: list[Any] = [npu.name if npu else NA, bench.name if bench else NA, _dtype(npu), _dtype(bench),
                        _shape(npu), _shape(bench)]
    message = " ".join(result.messages)
    if result.mode == "tensor":
        t = result.tensor
        cells += [_metric(getattr(t, name, None), one_sided or t is None) for name in
                  ("cosine", "max_abs_err", "max_relative_err", "one_thousandth_ratio", "five_thousandths_ratio")]
        cells += _stats_cells(t.npu) + _stats_cells(t.bench) if t else _json_stats(npu) + _json_stats(bench)
        cells += [result.verdict, message]
    elif result.mode == "summary":
        diffs = result.stat_diffs or ((None, None),) * 4
        cells += [_metric(d, one_sided or not result.stat_diffs) for d, _ in diffs]
        cells += [_metric(r, one_sided or not result.stat_diffs) for _, r in diffs]
        cells += _json_stats(npu) + _json_stats(bench) + [result.verdict, message]
    else:
        cells += [_md5(npu), _md5(bench), result.verdict]
    if with_stack:
        frames = stacks.get(npu.entry) if npu else None
        cells.append(str(frames) if frames and result.first_of_entry else "None")
    if result.mode == "tensor":
        cells.append((npu.value.get("data_name") if npu and isinstance(npu.value, dict) else None) or "-1")
    return cells


def _md5(row: Row | None) -> Any:
    if row is None:
        return NA
    if row.is_tensor:
        return row.value.get("md5", NA)
    return _cell(row.value.get("value") if isinstance(row.value, dict) else row.value)


def attribution_columns(attribution: Attribution | None) -> list[str]:
    return ATTRIBUTION if attribution is not None else []


def attribution_cells(attribution: Attribution | None, result: RowResult) -> list[Any]:
    """A row's attribution cells: blank outside the suspects; on a suspect's output rows the row's verdict
    and its three error shares (or why the API was not replayed); its input rows name only the entry's verdict."""
    if attribution is None:
        return []
    blank = [""] * (len(ATTRIBUTION) - 1)
    found = attribution.of_row(result)
    if found is None:
        return ["", *blank]
    entry, split = found
    if split is not None:
        verdict = f"{split.judged.label}, replayed on {attribution.device}"  # the kernel part is against its kernel
        return [verdict, *(cell for share in split.shares() for cell in _share_cells(share))]
    if not entry.verdict:
        text = NEEDS_TENSORS if attribution.config is not None else f"not replayed: {entry.reason}"
        return [text if result.part == "output" else "", *blank]
    return [f"API: {entry.label}" if result.part == "input" else "", *blank]


def _share_cells(share: ErrorShare) -> list[Any]:
    return [_cell(v) for v in (share.norm_rel, share.cosine, share.max_abs, share.excess)]
