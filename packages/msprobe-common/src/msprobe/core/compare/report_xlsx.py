"""compare_result_*.xlsx: 1.1.1's columns, red/yellow row fills, and more sheets past Excel's row limit.

Written in openpyxl's write-only mode, which streams rows to disk instead of building the whole
workbook in memory.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from openpyxl import Workbook
from openpyxl.cell import WriteOnlyCell
from openpyxl.styles import Font, PatternFill

from msprobe.core.compare.verdict import RED, YELLOW

EXCEL_MAX_ROWS = 1_048_576
FILLS = {
    RED: PatternFill(start_color="FFFF0000", end_color="FFFF0000", fill_type="solid"),
    YELLOW: PatternFill(start_color="FFFFFF00", end_color="FFFFFF00", fill_type="solid"),
}
PERCENT_FORMAT = "0.0000%"


def write_xlsx(
    path: Path,
    header: Sequence[str],
    rows: Iterable[tuple[list[Any], str]],
    percent_columns: set[str] = frozenset(),  # type: ignore[assignment]
    max_rows: int = EXCEL_MAX_ROWS,
) -> int:
    """Write ``(cells, highlight)`` rows under ``header``; returns the number of sheets used.

    Each sheet holds ``max_rows`` rows including its header row; the first sheet is named ``Sheet``
    as 1.1.1's was, the next ``Sheet2``, ``Sheet3``...
    """
    workbook = Workbook(write_only=True)
    percent_at = {i for i, name in enumerate(header) if name in percent_columns}
    sheet, used, sheets = None, max_rows, 0
    for cells, highlight in rows:
        if used >= max_rows:
            sheets += 1
            sheet = workbook.create_sheet("Sheet" if sheets == 1 else f"Sheet{sheets}")
            sheet.append([_bold(sheet, name) for name in header])
            used = 1
        sheet.append([_cell(sheet, value, FILLS.get(highlight), i in percent_at) for i, value in enumerate(cells)])
        used += 1
    if sheet is None:
        sheet = workbook.create_sheet("Sheet")
        sheet.append([_bold(sheet, name) for name in header])
        sheets = 1
    tmp = path.with_name(f".{path.name}.tmp")
    workbook.save(tmp)
    tmp.chmod(0o640)
    tmp.replace(path)
    return sheets


def _bold(sheet: Any, name: str) -> WriteOnlyCell:
    cell = WriteOnlyCell(sheet, value=name)
    cell.font = Font(bold=True)
    return cell


def _cell(sheet: Any, value: Any, fill: PatternFill | None, percent: bool) -> WriteOnlyCell:
    cell = WriteOnlyCell(sheet, value=value)
    if fill is not None:
        cell.fill = fill
    if percent and isinstance(value, float):
        cell.number_format = PERCENT_FORMAT
    return cell
