"""Waiting in tests for what another thread or process does."""

from __future__ import annotations

import time
from collections.abc import Callable


def until(predicate: Callable[[], object], timeout: float) -> bool:
    """True once ``predicate()`` holds, polled every 10 ms; False when ``timeout`` seconds pass first."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True
