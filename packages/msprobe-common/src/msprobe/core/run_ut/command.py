"""What every framework's ``run_ut`` and ``multi_run_ut`` command does around its run: bad input is one
logged error and exit 2, a finished run logs its summary and exits 0 or 1 (docs/run_ut.md, "Replay").

A framework's command gives :func:`run_command` its run (read the config, replay, return the summary and
the number of APIs judged) and how it words the summary line; the flags of ``multi_run_ut`` are its
``run_ut`` flags plus ``-n``, ``--engine`` and ``--ray-address`` (:func:`with_parts`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from msprobe.core.engine import EngineError
from msprobe.core.services.log import logger
from msprobe.core.run_ut.parallel import PartError, add_parts_option
from msprobe.core.run_ut.replay_common import RunUtError
from msprobe.core.run_ut.report import ReportError

Configure = Callable[[argparse.ArgumentParser], None]
# bad input (or an engine that cannot be reached): nothing or not all of it can be checked
REPLAY_ERRORS = (RunUtError, ReportError, PartError, EngineError)


def with_parts(configure: Configure) -> Configure:
    """The flags of a ``multi_run_ut``: ``configure``'s (its ``run_ut``'s), ``-n/--num_splits`` and the
    engine's."""

    def both(parser: argparse.ArgumentParser) -> None:
        configure(parser)
        add_parts_option(parser)

    return both


def run_command(command: str, run: Callable[[], tuple[dict, int] | int], line: Callable[[dict], str]) -> int:
    """Run a replay command: ``run()`` returns (summary, APIs judged), or an exit code when it reported
    itself (online run_ut); a bad config, dump, CSV or device (the errors of the run_ut core) is logged and
    gives 2. A finished run logs ``line(summary)`` and exits as :func:`exit_code` says."""
    from msprobe.core.config import ConfigError

    try:
        outcome = run()
    except (*REPLAY_ERRORS, ConfigError) as exc:
        logger.error("%s: %s", command, exc)
        return 2
    if isinstance(outcome, int):
        return outcome
    summary, checked = outcome
    logger.info("%s: %s", command, line(summary))
    return exit_code(command, summary, checked)


def exit_code(command: str, summary: dict, checked: int) -> int:
    """2 when an API's tensor file was missing or unreadable (the summary's ``input_errors``), else 1 when
    nothing was judged, else 0; the reason is logged."""
    errors = summary.get("input_errors") or []
    if errors:
        logger.error("%s: %d API(s) not checked, their recorded inputs cannot be read (SKIP rows in %s): %s",
                     command, len(errors), summary["result_csv"], "; ".join(e["message"] for e in errors[:3]))
        return 2
    if checked == 0:
        logger.error("%s: no API was checked (every API was skipped or filtered out)", command)
        return 1
    return 0
