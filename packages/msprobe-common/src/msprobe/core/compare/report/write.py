"""Write every report of one comparison (xlsx, csv, html) and tell the user, on the console, what it found and
where the reports are."""

from __future__ import annotations

import json
from pathlib import Path

from msprobe.core.compare.judge import Attribution, CompareResult, Divergence, RowResult, describe, user_frame
from msprobe.core.compare.report.escape import csv_row, printable
from msprobe.core.compare.report.html import write_html
from msprobe.core.compare.report.table import (
    PERCENT_COLUMNS,
    attribution_cells,
    attribution_columns,
    columns,
    row_cells,
)
from msprobe.core.compare.report.xlsx import write_xlsx
from msprobe.core.services.fileio import write_csv
from msprobe.core.services.log import logger


def write_reports(
    result: CompareResult, out: Path, stem: str, with_stack: bool, stacks: dict[str, list[str]]
) -> dict[str, Path]:
    header = columns(result.mode, with_stack) + attribution_columns(result.attribution)

    def cells(r: RowResult) -> list:
        return row_cells(r, with_stack, stacks) + attribution_cells(result.attribution, r)

    paths = {kind: out / f"{stem}.{kind}" for kind in ("xlsx", "csv", "html")}
    write_xlsx(  # inline strings: a spreadsheet never evaluates them, so no formula escaping is needed
        paths["xlsx"],
        header,
        ((cells(r), r.highlight) for r in result.results),
        PERCENT_COLUMNS.get(result.mode, set()),
    )
    write_csv(paths["csv"], header, (csv_row(cells(r)) for r in result.results))
    write_html(paths["html"], result, header, cells, [paths["xlsx"], paths["csv"]])
    announce(result, paths)
    return paths


def where(found: Divergence) -> str:
    """The entry's innermost user frame on one line (a frame holds 'File ..., line N, in f,\\n code')."""
    frame = user_frame(found.stack) or "no stack recorded"
    return printable(" ".join(frame.split()))


def announce(result: CompareResult, paths: dict[str, Path]) -> None:
    """Log the first divergence (with its innermost user frame), the optimizer's, the counts and the paths.
    Every name and frame is read from the dumps, so each goes through :func:`printable`."""
    found = result.first_divergence
    if result.attribution is not None:
        log_attribution(result.attribution)
    local = result.attribution.first_local if result.attribution is not None else None
    if found is not None and local is not None:
        logger.warning("first divergence: %s (the earliest API the replays find made here — %s) at %s",
                       printable(found.entry), printable(describe(local)), where(found))
    elif found is not None:
        how = found.how()
        logger.warning("first divergence: %s (%s; %d diverging output rows, %.3g times what rounding explains) at %s",
                       printable(found.entry), printable(how), len(found.failing_rows), found.excess or 0.0,
                       where(found))
        if result.mode == "summary" and found.inputs_pass and not found.enters() and not found.arguments:
            logger.info("first divergence from statistics: an input may carry element deviations that its "
                        "statistics average away (an ill-conditioned op before it, such as a BatchNorm over a few "
                        "values per channel); a tensor dump of %s and its inputs tells "
                        "(docs/compare.md#what-statistics-cannot-see)", printable(found.entry))
    if result.amplified is not None:
        logger.warning("rounding amplified: %d rows computed from %s differ beyond rounding (at most %.3g times), "
                       "not taken as divergences: no compare can bound rounding an ill-conditioned op amplifies; a "
                       "divergence entering through a parameter is still named (docs/compare.md#ill-conditioned-ops)",
                       result.amplified.rows, printable(result.amplified.origin), result.amplified.worst)
    if result.optimizer:
        first = result.optimizer[0]
        logger.warning("optimizer: %d entries differ beyond rounding, first %s at %s (not taken as the first "
                       "divergence: see the optimizer section of the html report)",
                       len(result.optimizer), printable(first.entry), where(first))
    failing = sum(1 for r in result.results if r.failed)
    beyond = sum(1 for r in result.results if r.excess is not None and r.excess > 1)
    logger.info("compare (%s mode): %d rows, %d failing the 1.1.1 verdict, %d beyond rounding", result.mode,
                len(result.results), failing, beyond)
    if found is None and result.analyzed:
        logger.info("first divergence: none, no forward or backward output differs beyond rounding%s",
                    " but the amplified rounding above" if result.amplified is not None else "")
    if result.not_compared:
        logger.error("%d rows could not be compared: their tensor files are missing or unreadable (see Err_message "
                     "in the reports)", result.not_compared)
    for kind, path in paths.items():
        logger.info("%s report: %s", kind, printable(path))


def log_attribution(attribution: Attribution) -> None:
    """One line per suspect, then (statistics dumps) the config that dumps their tensors."""
    if not attribution.entries:
        logger.info("attribution: no forward API output differs beyond rounding; nothing to replay")
        return
    if attribution.config is not None:
        logger.warning("attribution: the dumps hold statistics only; replaying the %d suspects needs their "
                       "tensors. Dump both runs again with this config (also written to %s):\n%s",
                       len(attribution.entries), printable(attribution.config_path),
                       json.dumps(attribution.config, indent=2))  # JSON escapes every control character
        return
    logger.info("attribution: the first %d diverging forward APIs %s", len(attribution.entries),
                printable(attribution.method))
    for entry in attribution.entries:
        logger.info("attribution: %s %s", printable(entry.entry), printable(describe(entry)))
    if attribution.first_local is None:
        logger.info("attribution: no replayed API is local; the first divergence stays the rule's choice")
