"""Progress of a long step on stderr: a tqdm bar on a terminal, a log line per quarter otherwise.

No bar is drawn when stderr is not a terminal (a log file or a CI job would fill with redraws), nor
where the caller disables it (``CompareOptions.progress``; a multi-rank comparison disables it in its
per-rank workers). Create the bar after forking worker processes: tqdm starts a monitor thread.
"""

from __future__ import annotations

import sys

from tqdm import tqdm

from msprobe.core.log import logger


class Progress:
    def __init__(self, total: int, label: str) -> None:
        self.total, self.label, self.done = total, label, 0
        self._bar = tqdm(total=total, desc=label, file=sys.stderr, dynamic_ncols=True) if sys.stderr.isatty() else None
        self._next_log = 0.0

    def advance(self, count: int = 1) -> None:
        self.done += count
        if self._bar is not None:
            self._bar.update(count)
            return
        fraction = self.done / self.total if self.total else 1.0
        if fraction >= self._next_log:
            logger.info("%s: %d/%d", self.label, self.done, self.total)
            self._next_log = fraction + 0.25

    def close(self) -> None:
        """End the bar's line (also when the step stopped early); idempotent."""
        if self._bar is not None:
            self._bar.close()
