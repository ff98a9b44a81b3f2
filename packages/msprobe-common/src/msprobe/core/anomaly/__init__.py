"""Anomaly origin, offline: the first API whose finite inputs gave inf/NaN, over every rank's statistics
dump of one step (docs/anomaly_origin.md)."""

from msprobe.core.anomaly.dumps import AnomalyError, RankDump, read_step
from msprobe.core.anomaly.origin import Origin, find_origins

__all__ = ["AnomalyError", "Origin", "RankDump", "find_origins", "read_step"]
