"""A dependency-free progress bar on stderr: redrawn in place on a terminal, a few log lines otherwise."""

from __future__ import annotations

import sys
import time

from msprobe.core.log import logger


class Progress:
    def __init__(self, total: int, label: str) -> None:
        self.total, self.label, self.done = total, label, 0
        self._tty = sys.stderr.isatty()
        self._start = time.monotonic()
        self._next_log = 0.0

    def advance(self, count: int = 1) -> None:
        self.done += count
        fraction = self.done / self.total if self.total else 1.0
        if self._tty:
            bar = "#" * int(30 * fraction)
            rate = self.done / max(time.monotonic() - self._start, 1e-9)
            sys.stderr.write(f"\r{self.label}: [{bar:<30}] {self.done}/{self.total} ({rate:.0f}/s)")
            if self.done >= self.total:
                sys.stderr.write("\n")
            sys.stderr.flush()
        elif fraction >= self._next_log:
            logger.info("%s: %d/%d", self.label, self.done, self.total)
            self._next_log = fraction + 0.25
