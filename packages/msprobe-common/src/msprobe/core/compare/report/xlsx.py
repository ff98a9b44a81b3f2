"""compare_result_*.xlsx: 1.1.1's columns, red/yellow row fills, and more sheets past Excel's row limit.

The workbook is written directly as its few XML parts inside a zip, streamed row by row: openpyxl
(without lxml) spent more time building one cell object per value than the whole tensor comparison
took, and XlsxWriter's constant-memory mode, measured against this writer, took 2.5 to 4.9 times as
long for the same memory (docs/dependencies.md has the figures). Strings are stored inline (no
shared-string table to hold in memory); numbers keep every digit (``repr``; XlsxWriter writes 16
significant digits, one short of what a double needs); inf and nan, which an xlsx number cannot
hold, are written as the text ``inf`` / ``-inf`` / ``nan``. A failure while writing leaves no file.
"""

from __future__ import annotations

import math
import re
import zipfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import IO, Any

from msprobe.core.compare.judge import RED, YELLOW

EXCEL_MAX_ROWS = 1_048_576
PERCENT_FORMAT = "0.0000%"
_MAIN = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
_REL = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
_PKG_REL = "http://schemas.openxmlformats.org/package/2006/relationships"
_XML = '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
# cellXfs indices of styles.xml: plain, bold header, then (fill) x (plain number, percentage)
_BOLD = 1
_STYLE = {("", False): 0, (RED, False): 2, (YELLOW, False): 3, ("", True): 4, (RED, True): 5, (YELLOW, True): 6}
_STYLES = f"""{_XML}<styleSheet xmlns="{_MAIN}">
<numFmts count="1"><numFmt numFmtId="164" formatCode="{PERCENT_FORMAT}"/></numFmts>
<fonts count="2"><font><sz val="11"/><name val="Calibri"/></font><font><b/><sz val="11"/><name val="Calibri"/>
</font></fonts><fills count="4"><fill><patternFill patternType="none"/></fill><fill><patternFill patternType="gray125"/>
</fill><fill><patternFill patternType="solid"><fgColor rgb="FFFF0000"/><bgColor rgb="FFFF0000"/></patternFill></fill>
<fill><patternFill patternType="solid"><fgColor rgb="FFFFFF00"/><bgColor rgb="FFFFFF00"/></patternFill></fill></fills>
<borders count="1"><border><left/><right/><top/><bottom/><diagonal/></border></borders><cellStyleXfs count="1">
<xf numFmtId="0" fontId="0" fillId="0" borderId="0"/></cellStyleXfs><cellXfs count="7">
<xf numFmtId="0" fontId="0" fillId="0" borderId="0" xfId="0"/>
<xf numFmtId="0" fontId="1" fillId="0" borderId="0" xfId="0" applyFont="1"/>
<xf numFmtId="0" fontId="0" fillId="2" borderId="0" xfId="0" applyFill="1"/>
<xf numFmtId="0" fontId="0" fillId="3" borderId="0" xfId="0" applyFill="1"/>
<xf numFmtId="164" fontId="0" fillId="0" borderId="0" xfId="0" applyNumberFormat="1"/>
<xf numFmtId="164" fontId="0" fillId="2" borderId="0" xfId="0" applyNumberFormat="1" applyFill="1"/>
<xf numFmtId="164" fontId="0" fillId="3" borderId="0" xfId="0" applyNumberFormat="1" applyFill="1"/>
</cellXfs><cellStyles count="1"><cellStyle name="Normal" xfId="0" builtinId="0"/></cellStyles></styleSheet>"""
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")  # control characters XML 1.0 forbids


def _column_letters(count: int) -> list[str]:
    letters = []
    for index in range(1, count + 1):
        name = ""
        while index:
            index, rest = divmod(index - 1, 26)
            name = chr(65 + rest) + name
        letters.append(name)
    return letters


def _text(value: str) -> str:
    value = _NOT_XML.sub("", value).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return f'<is><t xml:space="preserve">{value}</t></is>'


def _cell(ref: str, value: Any, style: int) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if math.isfinite(value):  # the base class's repr: numpy 2 writes a numpy float as 'np.float64(...)'
            number = int.__repr__(value) if isinstance(value, int) else float.__repr__(value)
            return f'<c r="{ref}" s="{style}"><v>{number}</v></c>'
        value = str(value)
    return f'<c r="{ref}" s="{style}" t="inlineStr">{_text(str(value))}</c>'


class _Sheet:
    """One worksheet part being streamed into the zip."""

    def __init__(self, book: zipfile.ZipFile, number: int, header: Sequence[str], letters: list[str]) -> None:
        self.handle: IO[bytes] = book.open(f"xl/worksheets/sheet{number}.xml", "w", force_zip64=True)
        self.letters, self.rows = letters, 0
        self.handle.write(f'{_XML}<worksheet xmlns="{_MAIN}"><sheetData>'.encode())
        self.append(header, lambda _: _BOLD)

    def append(self, cells: Sequence[Any], style_of: Any) -> None:
        self.rows += 1
        row = self.rows
        body = "".join(_cell(f"{self.letters[i]}{row}", value, style_of(i)) for i, value in enumerate(cells))
        self.handle.write(f'<row r="{row}">{body}</row>'.encode())

    def close(self) -> None:
        if self.handle.closed:
            return
        self.handle.write(b"</sheetData></worksheet>")
        self.handle.close()


def _package_parts(sheets: int) -> dict[str, str]:
    """Every part but the worksheets: content types, relationships, workbook (sheet names), styles."""
    names = ["Sheet" if n == 1 else f"Sheet{n}" for n in range(1, sheets + 1)]
    sheet_list = "".join(f'<sheet name="{name}" sheetId="{n}" r:id="rId{n}"/>' for n, name in enumerate(names, 1))
    sheet_rels = "".join(f'<Relationship Id="rId{n}" Type="{_REL}/worksheet" Target="worksheets/sheet{n}.xml"/>'
                         for n in range(1, sheets + 1))
    sheet_types = "".join(f'<Override PartName="/xl/worksheets/sheet{n}.xml" ContentType="application/vnd.'
                          f'openxmlformats-officedocument.spreadsheetml.worksheet+xml"/>' for n in range(1, sheets + 1))
    office = "application/vnd.openxmlformats-officedocument.spreadsheetml"
    return {
        "[Content_Types].xml": (
            f'{_XML}<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
            f'<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
            f'<Default Extension="xml" ContentType="application/xml"/>'
            f'<Override PartName="/xl/workbook.xml" ContentType="{office}.sheet.main+xml"/>'
            f'<Override PartName="/xl/styles.xml" ContentType="{office}.styles+xml"/>{sheet_types}</Types>'),
        "_rels/.rels": (f'{_XML}<Relationships xmlns="{_PKG_REL}"><Relationship Id="rId1" '
                        f'Type="{_REL}/officeDocument" Target="xl/workbook.xml"/></Relationships>'),
        "xl/workbook.xml": f'{_XML}<workbook xmlns="{_MAIN}" xmlns:r="{_REL}"><sheets>{sheet_list}</sheets></workbook>',
        "xl/_rels/workbook.xml.rels": (
            f'{_XML}<Relationships xmlns="{_PKG_REL}">{sheet_rels}<Relationship Id="rId{sheets + 1}" '
            f'Type="{_REL}/styles" Target="styles.xml"/></Relationships>'),
        "xl/styles.xml": _STYLES,
    }


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
    in ``percent_columns`` show their numbers as percentages.
    """
    percent_at = {i for i, name in enumerate(header) if name in percent_columns}
    letters = _column_letters(len(header))
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as book:
            sheet = _Sheet(book, 1, header, letters)
            sheets = 1
            try:
                for cells, highlight in rows:
                    if sheet.rows >= max_rows:
                        sheet.close()
                        sheets += 1
                        sheet = _Sheet(book, sheets, header, letters)
                    sheet.append(cells, lambda i, fill=highlight: _STYLE[fill, i in percent_at])
            finally:  # an open member would make closing the zip raise instead of the error itself
                sheet.close()
            for name, text in _package_parts(sheets).items():
                book.writestr(name, text)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    tmp.chmod(0o640)
    tmp.replace(path)
    return sheets
