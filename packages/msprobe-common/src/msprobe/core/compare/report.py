"""Write every report of one comparison (xlsx, csv, html) and tell the user where they are."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from msprobe.core.compare.divergence import user_frame
from msprobe.core.compare.report_html import write_html
from msprobe.core.compare.report_xlsx import write_xlsx
from msprobe.core.compare.table import PERCENT_COLUMNS, columns, row_cells
from msprobe.core.fileio import write_csv
from msprobe.core.log import logger

if TYPE_CHECKING:
    from msprobe.core.compare.engine import CompareResult


def write_reports(
    result: CompareResult, out: Path, stem: str, with_stack: bool, stacks: dict[str, list[str]]
) -> dict[str, Path]:
    header = columns(result.mode, with_stack)
    paths = {kind: out / f"{stem}.{kind}" for kind in ("xlsx", "csv", "html")}
    write_xlsx(
        paths["xlsx"],
        header,
        ((row_cells(r, with_stack, stacks), r.highlight) for r in result.results),
        PERCENT_COLUMNS.get(result.mode, set()),
    )
    write_csv(paths["csv"], header, (row_cells(r, with_stack, stacks) for r in result.results))
    write_html(paths["html"], result, header, lambda r: row_cells(r, with_stack, stacks), [paths["xlsx"], paths["csv"]])
    announce(result, paths)
    return paths


def announce(result: CompareResult, paths: dict[str, Path]) -> None:
    """Print the first divergence (with its innermost user frame) and the report paths."""
    found = result.first_divergence
    failing = sum(1 for r in result.results if r.failed)
    if found is None:
        logger.info("compare (%s mode): %d rows, none failing", result.mode, len(result.results))
    else:
        where = user_frame(found.stack) or "no stack recorded"
        how = "its inputs pass" if found.inputs_pass else "its inputs already fail"
        logger.warning(
            "first divergence: %s (%s; %d failing output rows) at %s", found.entry, how,
            len(found.failing_rows), where.replace("\n", " "),
        )
        logger.info("compare (%s mode): %d rows, %d failing", result.mode, len(result.results), failing)
    for kind, path in paths.items():
        logger.info("%s report: %s", kind, path)
