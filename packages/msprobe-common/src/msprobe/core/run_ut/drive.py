"""run_ut's driving loop, written once for every framework (docs/run_ut.md).

A framework's run_ut only knows how to replay one entry: its replayer (:class:`ApiReplayer`) turns a
forward entry and its backward entry into an :class:`~msprobe.core.run_ut.report.ApiRow`. Which entries
are checked (resumed rows, white/black lists, ``-f``, a part's rows), counting what was judged, the
report and the log lines are the same everywhere, so they live here.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from typing import Any, Protocol

from msprobe.core.run_ut.replay_common import select_apis
from msprobe.core.run_ut.report import NOT_APPLICABLE, ApiRow, Report
from msprobe.core.run_ut.standards import ERROR, SKIP, WARNING
from msprobe.core.services.log import logger


class ApiReplayer(Protocol):
    """One framework's replay of one API: ``entry_name`` (``Functional.linear.0.forward``), its dump.json
    entry, and its backward entry when the dump has one."""

    def check(self, entry_name: str, entry: dict, backward: dict | None) -> ApiRow: ...


def check_apis(replayer: ApiReplayer, entries: Mapping[str, Any], report: Report, *,
               white_list: Collection[str] = (), black_list: Collection[str] = (), filter_duplicates: bool = False,
               apis: Collection[str] | None = None) -> int:
    """Replay every selected forward entry of ``entries`` into ``report`` (rows it already holds are
    skipped); ``apis``: only these rows (``Functional.linear.0``), as a part of ``multi_run_ut`` gets.
    Returns how many APIs were judged (a forward or backward verdict other than SKIP)."""
    checked = 0
    wanted = None if apis is None else frozenset(apis)
    for name in select_apis(entries, report.done, white_list, black_list, filter_duplicates):
        row_name = name.removesuffix(".forward")
        if wanted is not None and row_name not in wanted:
            continue
        backward = entries.get(f"{row_name}.backward")
        row = replayer.check(name, entries[name], backward if isinstance(backward, dict) else None)
        if row.forward != SKIP or row.backward not in (SKIP, NOT_APPLICABLE):
            checked += 1
        report.add(row)
        # a finding or a missing input is worth a line as it happens; the rest is in the result CSV and the
        # final summary
        if row.input_error:
            logger.warning("run_ut: %s SKIP: %s", row.name, row.message)
        else:
            level = logging.INFO if {row.forward, row.backward} & {ERROR, WARNING} else logging.DEBUG
            logger.log(level, "run_ut: %s forward %s backward %s", row.name, row.forward, row.backward)
    return checked
