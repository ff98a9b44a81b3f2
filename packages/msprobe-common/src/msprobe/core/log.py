"""The one msprobe logger.

Every message goes through the logger named ``msprobe`` so that users can silence or redirect the tool
with the standard :mod:`logging` machinery. The level comes from ``MSPROBE_LOG_LEVEL`` (0 debug,
1 info — the default, 2 warning, 3 error, 4 silent), and each line carries the ``[msprobe]`` prefix,
the time, and the rank once a distributed framework has told us which rank this process is.
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

logger = logging.getLogger("msprobe")


class _RankFilter(logging.Filter):
    """Adds ``rank_tag`` to every record so the format string can show the rank when known."""

    rank: int | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        record.rank_tag = "" if self.rank is None else f" [rank {self.rank}]"
        return True


_rank_filter = _RankFilter()


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


def _configure() -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(
        logging.Formatter(
            "[msprobe] %(asctime)s%(rank_tag)s %(levelname)s: %(message)s", "%Y-%m-%d %H:%M:%S"
        )
    )
    handler.addFilter(_rank_filter)
    logger.addHandler(handler)
    logger.setLevel(level_from_env())
    logger.propagate = False


_configure()
