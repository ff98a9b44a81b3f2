"""Machine-level tuning from environment variables, checked before any work starts.

Why the environment and not config.json: the config sections are msprobe 1.1.1's, key for key, and
these bounds belong to the machine rather than to the experiment (how much memory a queue may hold,
how many CPUs replay). A bad value is an error naming the variable, the value and what is allowed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass


class SettingError(ValueError):
    """A variable with a value outside what is allowed."""

    def __init__(self, name: str, value: str, allowed: str) -> None:
        super().__init__(f"{name}={value!r}: allowed {allowed}")
        self.name, self.value, self.allowed = name, value, allowed


@dataclass(frozen=True)
class IntSetting:
    """An integer variable: its default, its bounds and what it bounds (for the error message)."""

    name: str
    default: int
    low: int
    high: int
    meaning: str

    def read(self, environ: Mapping[str, str] | None = None) -> int:
        """The value set in ``environ`` (default: the process's), or the default when unset or empty."""
        raw = (os.environ if environ is None else environ).get(self.name, "").strip()
        if not raw:
            return self.default
        try:
            value = int(raw)
        except ValueError:
            value = self.low - 1
        if not self.low <= value <= self.high:
            raise SettingError(self.name, raw, f"an integer {self.low}..{self.high} ({self.meaning})")
        return value
