"""Tuning of online run_ut, from environment variables (docs/run_ut_online.md, "Tuning").

Why the environment and not config.json: the ``tensor`` and ``run_ut`` sections are msprobe 1.1.1's,
key for key, and these bounds belong to the machine rather than to the experiment (how much memory
the queue may hold, how many CPUs replay). Every value is checked before any work starts; a bad one
is an error naming the variable, the value and what is allowed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

# variable → (default, lowest, highest, what it bounds)
VARIABLES = {
    "MSPROBE_ONLINE_QUEUE": (256, 1, 1 << 20, "records the sender's queue holds"),
    "MSPROBE_ONLINE_QUEUE_MB": (1024, 1, 1 << 20, "MiB of tensors the sender's queue holds"),
    "MSPROBE_ONLINE_MAX_WAIT_MS": (0, 0, 60_000, "milliseconds a training hook waits for room in a full queue"),
    "MSPROBE_ONLINE_MAX_MESSAGE_MB": (1024, 1, 1 << 16, "MiB of the largest message sent or accepted"),
    "MSPROBE_ONLINE_WORKERS": (0, 0, 1024, "replay processes of the receiver (0: one per CPU)"),
}


class SettingError(ValueError):
    """A variable with a value outside what is allowed."""

    def __init__(self, name: str, value: str, allowed: str) -> None:
        super().__init__(f"{name}={value!r}: allowed {allowed}")
        self.name, self.value, self.allowed = name, value, allowed


@dataclass(frozen=True)
class OnlineSettings:
    queue_size: int
    queue_mb: int
    max_wait_ms: int
    max_message_mb: int
    workers: int


def online_settings(environ: Mapping[str, str] | None = None) -> OnlineSettings:
    """The settings, or a :class:`SettingError` naming the variable, its value and what is allowed."""
    environ = os.environ if environ is None else environ
    values = []
    for name, (default, low, high, meaning) in VARIABLES.items():
        raw = environ.get(name, "").strip()
        if not raw:
            values.append(default)
            continue
        try:
            value = int(raw)
        except ValueError:
            value = low - 1
        if not low <= value <= high:
            raise SettingError(name, raw, f"an integer {low}..{high} ({meaning})")
        values.append(value)
    return OnlineSettings(*values)
