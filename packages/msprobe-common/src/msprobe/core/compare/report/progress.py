"""Progress of the tensor comparison: a tqdm bar on stderr when it is a terminal, a log line per quarter otherwise.

No bar is drawn when stderr is not a terminal (a log file or a CI job would fill with redraws), nor
when the caller turns progress off (``CompareOptions.progress``; a multi-rank comparison does in its
per-rank workers). tqdm is imported only when a bar is drawn (its import takes about 20 ms), and the
bar should be created after worker processes are forked: tqdm starts a monitor thread.
"""

from __future__ import annotations

import math
import os
import sys
from typing import Any

from msprobe.core.services.log import logger


def _size(stream: Any) -> os.terminal_size | None:
    """The size of the terminal behind ``stream``, None when it cannot be asked."""
    try:
        return os.get_terminal_size(stream.fileno())
    except (AttributeError, OSError, ValueError):
        return None


class Progress:
    def __init__(self, total: int, label: str) -> None:
        self.total, self.label, self.done = total, label, 0
        self._bar: Any = None
        if sys.stderr.isatty():
            from tqdm import tqdm

            # a pty of unknown size (script, docker -t) says 0 x 0, which tqdm takes as no room for the bar
            size = _size(sys.stderr)
            fit = ({"ncols": size.columns or 80, "nrows": size.lines or 24} if size and 0 in size
                   else {"dynamic_ncols": True})
            self._bar = tqdm(total=total, desc=label, unit="pair", file=sys.stderr, **fit)
        self._next_log = 0.0

    def advance(self, count: int = 1) -> None:
        self.done += count
        if self._bar is not None:
            self._bar.update(count)
            return
        fraction = self.done / self.total if self.total else 1.0
        if fraction >= self._next_log:  # the first, one per quarter passed, and the last
            logger.info("%s: %d/%d", self.label, self.done, self.total)
            self._next_log = min(math.floor(fraction * 4) + 1, 4) / 4

    def close(self) -> None:
        """End the bar's line, also when the comparison stopped early; closing twice is harmless."""
        if self._bar is not None:
            self._bar.close()
