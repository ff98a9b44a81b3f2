"""Tuning of online run_ut, from environment variables (docs/run_ut_online.md, "Tuning"), read through
:mod:`msprobe.core.services.settings` (checked before any work starts)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from msprobe.core.services.settings import IntSetting, SettingError

__all__ = ["VARIABLES", "OnlineSettings", "SettingError", "online_settings"]

VARIABLES = (
    IntSetting("MSPROBE_ONLINE_QUEUE", 256, 1, 1 << 20, "records the sender's queue holds"),
    IntSetting("MSPROBE_ONLINE_QUEUE_MB", 1024, 1, 1 << 20, "MiB of tensors the sender's queue holds"),
    IntSetting("MSPROBE_ONLINE_MAX_WAIT_MS", 0, 0, 60_000,
               "milliseconds a training hook waits for room in a full queue"),
    IntSetting("MSPROBE_ONLINE_MAX_MESSAGE_MB", 1024, 1, 1 << 16, "MiB of the largest message sent or accepted"),
    IntSetting("MSPROBE_ONLINE_WORKERS", 0, 0, 1024, "replay processes of the receiver (0: one per CPU)"),
)


@dataclass(frozen=True)
class OnlineSettings:
    queue_size: int
    queue_mb: int
    max_wait_ms: int
    max_message_mb: int
    workers: int


def online_settings(environ: Mapping[str, str] | None = None) -> OnlineSettings:
    """The settings, or a :class:`SettingError` naming the variable, its value and what is allowed."""
    return OnlineSettings(*(variable.read(environ) for variable in VARIABLES))
