"""The one msprobe logger, with library manners.

Every message goes through the logger named ``msprobe``, so users silence or redirect the tool with the
standard :mod:`logging` machinery. Importing msprobe adds only a ``NullHandler`` (as httpx and requests
do): where the output goes is the application's choice. The ``msprobe`` command and a
``PrecisionDebugger`` call :func:`use_console` to print the ``[msprobe]`` lines — and only when the
application has configured no logging of its own, so that an application with handlers gets our records
through them, formatted its way.

The level comes from ``MSPROBE_LOG_LEVEL`` (0 debug, 1 info — the default, 2 warning, 3 error,
4 silent). Every record carries ``rank_tag`` (`` [rank N]`` once a distributed framework has told us
the rank, else empty), so an application's format string may show it too.
"""

from __future__ import annotations

import logging
import os
import sys

_LEVELS = {
    "0": logging.DEBUG,
    "1": logging.INFO,
    "2": logging.WARNING,
    "3": logging.ERROR,
    "4": logging.CRITICAL + 10,
}

FORMAT = "[msprobe] %(asctime)s%(rank_tag)s %(levelname)s: %(message)s"
DATE_FORMAT = "%Y-%m-%d %H:%M:%S"

logger = logging.getLogger("msprobe")


class _RankFilter(logging.Filter):
    """Adds ``rank_tag`` to every record of the msprobe logger."""

    rank: int | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        record.rank_tag = "" if self.rank is None else f" [rank {self.rank}]"
        return True


_rank_filter = _RankFilter()
_console: logging.Handler | None = None


def level_from_env() -> int:
    """The logging level ``MSPROBE_LOG_LEVEL`` asks for; an unknown value falls back to info."""
    raw = os.environ.get("MSPROBE_LOG_LEVEL", "1").strip()
    if raw not in _LEVELS:
        sys.stderr.write(
            f"[msprobe] MSPROBE_LOG_LEVEL={raw!r} is not one of 0, 1, 2, 3, 4; using 1 (info)\n"
        )
        return logging.INFO
    return _LEVELS[raw]


def set_rank(rank: int | None) -> None:
    """Show ``rank`` on every following log line (``None`` hides it again)."""
    _rank_filter.rank = rank


def _application_configured_logging() -> bool:
    """Handlers on the root logger or on ours (other than the NullHandler) mean the application
    decided where log records go."""
    if logging.getLogger().handlers:
        return True
    return any(not isinstance(h, logging.NullHandler) and h is not _console for h in logger.handlers)


def use_console() -> None:
    """Print msprobe's records to stderr with the ``[msprobe]`` prefix — unless the application has
    configured logging itself. Idempotent."""
    global _console
    if _console is not None or _application_configured_logging():
        return
    _console = logging.StreamHandler()
    _console.setFormatter(logging.Formatter(FORMAT, DATE_FORMAT))
    logger.addHandler(_console)


logger.addHandler(logging.NullHandler())
logger.addFilter(_rank_filter)
logger.setLevel(level_from_env())
