"""compare_result_*.xlsx: 1.1.1's columns, red/yellow row fills, and more sheets past Excel's row limit.

Written by XlsxWriter in constant-memory mode: each row is flushed to a temporary file (next to the
report) as soon as the next one starts, and strings are stored inline rather than in a shared-string
table, so memory holds one row whatever the report's size. Numbers keep every digit (XlsxWriter
formats them with 16 significant digits, one short of what a double needs to read back unchanged, so
they are handed over as :class:`_Exact`, which formats as ``repr``); inf and nan, which an xlsx number
cannot hold, are written as the text ``inf`` / ``-inf`` / ``nan``. Text is written with
``write_string``, never evaluated as a formula or a URL.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import xlsxwriter

from msprobe.core.compare.verdict import RED, YELLOW

EXCEL_MAX_ROWS = 1_048_576
PERCENT_FORMAT = "0.0000%"
_FILL_COLOURS = {RED: "#FF0000", YELLOW: "#FFFF00"}
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")  # control characters XML 1.0 forbids


class _Exact(float):
    """A float that formats as ``repr`` (every digit) whatever format XlsxWriter asks of it."""

    __slots__ = ()

    def __format__(self, spec: str) -> str:
        return float.__repr__(self)


class _ExactInt(int):
    """An integer that formats with every digit (``%.16G`` would turn 2**60 into 1.152921504606847E+18)."""

    __slots__ = ()

    def __format__(self, spec: str) -> str:
        return int.__repr__(self)


def _number(value: Any) -> Any:
    """``value`` ready for ``write_number`` if it is a finite number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return _ExactInt(value) if isinstance(value, int) else _Exact(value)


def _add_sheet(book: xlsxwriter.Workbook, number: int, header: Sequence[str], bold: Any) -> Any:
    sheet = book.add_worksheet("Sheet" if number == 1 else f"Sheet{number}")
    for column, name in enumerate(header):
        sheet.write_string(0, column, name, bold)
    return sheet


def _write_rows(book: xlsxwriter.Workbook, header: Sequence[str], rows: Iterable[tuple[list[Any], str]],
                percent_columns: set[str], max_rows: int) -> int:
    bold = book.add_format({"bold": True})
    styles = {}  # highlight -> the format of each column
    for fill in ("", RED, YELLOW):
        colour = {"bg_color": _FILL_COLOURS[fill], "pattern": 1} if fill else {}
        plain = book.add_format(colour) if colour else None
        percent = book.add_format({**colour, "num_format": PERCENT_FORMAT})
        styles[fill] = [percent if name in percent_columns else plain for name in header]
    sheets, sheet, row = 1, _add_sheet(book, 1, header, bold), 1
    for cells, highlight in rows:
        if row >= max_rows:
            sheets += 1
            sheet, row = _add_sheet(book, sheets, header, bold), 1
        style = styles[highlight]
        for column, value in enumerate(cells):
            number = _number(value)
            if number is None:
                sheet.write_string(row, column, _NOT_XML.sub("", str(value)), style[column])
            else:
                sheet.write_number(row, column, number, style[column])
        row += 1
    return sheets


def write_xlsx(
    path: Path,
    header: Sequence[str],
    rows: Iterable[tuple[list[Any], str]],
    percent_columns: set[str] = frozenset(),  # type: ignore[assignment]
    max_rows: int = EXCEL_MAX_ROWS,
) -> int:
    """Write ``(cells, highlight)`` rows under ``header``; returns the number of sheets used.

    Each sheet holds ``max_rows`` rows including its header row; the first sheet is named ``Sheet``
    as 1.1.1's was, the next ``Sheet2``, ``Sheet3``... Fills mark whole rows red or yellow; columns
    in ``percent_columns`` show their numbers as percentages. The file appears complete or not at all.
    """
    tmp = path.with_name(f".{path.name}.tmp")
    book = xlsxwriter.Workbook(str(tmp), {"constant_memory": True, "tmpdir": str(path.parent), "use_zip64": True})
    try:
        sheets = _write_rows(book, header, rows, percent_columns, max_rows)
    except BaseException:
        with contextlib.suppress(Exception):
            book.close()  # removes the temporary row files
        tmp.unlink(missing_ok=True)
        raise
    book.close()
    tmp.chmod(0o640)
    tmp.replace(path)
    return sheets
