"""The reports of ``config_check -c``: an xlsx (compare's writer), one self-contained HTML page and a console
summary, each section's differences under its name (docs/config_check.md#the-report).

Every value is written as text: a value such as ``=cmd|...`` is a string cell of the workbook, never a
formula, so nothing in a pack can stop (or exploit) the report.
"""

from __future__ import annotations

import html
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from msprobe.core.compare.judge import RED, YELLOW
from msprobe.core.compare.report.xlsx import write_xlsx
from msprobe.core.services.fileio import atomic_write_text, make_dir

CONSOLE_ROWS_PER_SECTION = 5


@dataclass(frozen=True)
class ReportRow:
    section: str
    cells: tuple[str, ...]  # under the report's header, after the section column
    changes_numbers: bool


def _html(title: str, header: Sequence[str], rows: Sequence[ReportRow], note: str) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in ["section", *header])
    body = []
    for row in rows:
        style = ' class="red"' if row.changes_numbers else ' class="yellow"'
        cells = "".join(f"<td>{html.escape(str(c))}</td>" for c in (row.section, *row.cells))
        body.append(f"<tr{style}>{cells}</tr>")
    table = f"<table><tr>{head}</tr>{''.join(body)}</table>" if rows else "<p class=ok>No difference.</p>"
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title><style>"
            "body{font-family:system-ui,sans-serif;margin:1.5em}table{border-collapse:collapse;font-size:12px}"
            "td,th{border:1px solid #ccc;padding:2px 6px;text-align:left;vertical-align:top}th{background:#eee}"
            "tr.red td{background:#ffb3b3}tr.yellow td{background:#fff3a0}.ok{color:#080}</style></head><body>"
            f"<h1>{html.escape(title)}</h1><p>{html.escape(note)}</p>{table}</body></html>\n")


def console_summary(title: str, sections: Sequence[str], rows: Sequence[ReportRow]) -> list[str]:
    """One line per section (its number of differences), then its first rows, numbers-changing first."""
    lines = [f"{title}: {len(rows)} difference(s)" if rows else f"{title}: no difference"]
    for section in sections:
        mine = [row for row in rows if row.section == section]
        if not mine:
            continue
        numbers = sum(row.changes_numbers for row in mine)
        lines.append(f"  {section}: {len(mine)} difference(s), {numbers} that change numbers")
        for row in mine[:CONSOLE_ROWS_PER_SECTION]:
            lines.append(f"    {'!' if row.changes_numbers else ' '} {' | '.join(str(c) for c in row.cells)}")
        if len(mine) > CONSOLE_ROWS_PER_SECTION:
            lines.append(f"      ... {len(mine) - CONSOLE_ROWS_PER_SECTION} more in the reports")
    return lines


def write_reports(output_dir: str | os.PathLike, stem: str, title: str, header: Sequence[str],
                  rows: Sequence[ReportRow], note: str) -> dict[str, Path]:
    """``{stem}.xlsx`` and ``{stem}.html`` in ``output_dir``; red rows change numbers, yellow may not."""
    directory = make_dir(output_dir)
    paths = {"xlsx": directory / f"{stem}.xlsx", "html": directory / f"{stem}.html"}
    write_xlsx(paths["xlsx"], ["section", *header],
               (([row.section, *row.cells], RED if row.changes_numbers else YELLOW) for row in rows))
    atomic_write_text(paths["html"], _html(title, header, rows, note))
    return paths
