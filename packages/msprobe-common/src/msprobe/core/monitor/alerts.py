"""Alert rules evaluated on the host after a step's single transfer, pointing at where a jump started.

Each rule watches some ops of every row (default: the norm). ``AnomalyTurbulence`` fires when |value|
exceeds (1 + threshold) × the mean |value| of the same metric over its last ``window`` monitored steps
(after ``min_history`` of them); ``AnomalyNan`` fires on a NaN, and on an infinite value where the same
metric was finite before (attention masks hold -inf from the first step on: that is no anomaly). A step whose rows
fire yields one :class:`Alert` naming the *first* row in execution order (forward hooks, then backward,
then the optimizer's tensors): a spike in one layer shows up in every layer after it, and the first one
is where to look. Alerts go to the log and to ``anomalies.json``, rewritten atomically after each step
that has one.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from msprobe.core.monitor.config import AlertRule
from msprobe.core.monitor.records import RowLayout, StepMetrics
from msprobe.core.services.fileio import atomic_write_text

logger = logging.getLogger("msprobe")
ANOMALIES_FILE = "anomalies.json"


@dataclass(frozen=True)
class Finding:
    group: str
    name: str
    micro_step: int | None
    op: str
    value: float
    history_mean: float | None
    rule: str


@dataclass(frozen=True)
class Alert:
    step: int
    rank: int
    first: Finding
    count: int  # how many metrics of the step fired
    then: tuple[str, ...]  # the next few that fired, in execution order

    def message(self) -> str:
        f = self.first
        where = f"{f.group} {f.name}" + ("" if f.micro_step is None else f" (micro-step {f.micro_step})")
        baseline = "" if f.history_mean is None else f", moving mean {f.history_mean:.6g}"
        return (
            f"monitor alert at step {self.step}, rank {self.rank}: first jump in {where}: {f.op} = {f.value:.6g}"
            f"{baseline} ({f.rule}); {self.count} metric(s) fired this step"
        )


class _Histories:
    """One rule's recent |values| of one op, for every metric at once: a ring of ``window`` values per metric
    (slot), so a step's rows are judged in a few numpy operations rather than a Python call per row."""

    def __init__(self, window: int) -> None:
        self.window = window
        self.slots: dict[tuple, int] = {}
        self.last: tuple[list[tuple], np.ndarray] = ([], np.zeros(0, dtype=np.int64))  # the last step's keys, slots
        self.values = np.zeros((0, window))
        self.count = np.zeros(0, dtype=np.int64)
        self.next = np.zeros(0, dtype=np.int64)

    def slots_of(self, keys: list[tuple]) -> np.ndarray:
        """Each key's slot (a new key gets one). A step usually has the rows of the step before: the same list."""
        if keys is self.last[0]:
            return self.last[1]
        slots = self.slots
        for key in keys:
            if key not in slots:
                slots[key] = len(slots)
        grow = len(slots) - len(self.count)
        if grow > 0:
            self.values = np.vstack([self.values, np.zeros((grow, self.window))])
            self.count = np.concatenate([self.count, np.zeros(grow, dtype=np.int64)])
            self.next = np.concatenate([self.next, np.zeros(grow, dtype=np.int64)])
        self.last = (keys, np.fromiter((slots[key] for key in keys), dtype=np.int64, count=len(keys)))
        return self.last[1]

    def record(self, slots: np.ndarray, values: np.ndarray) -> None:
        """Append |value| of the finite values (a metric appears once per step: its slots are distinct)."""
        keep = np.isfinite(values)
        slots = slots[keep]
        self.values[slots, self.next[slots]] = np.abs(values[keep])
        self.next[slots] = (self.next[slots] + 1) % self.window
        self.count[slots] = np.minimum(self.count[slots] + 1, self.window)


def _fired(rule: AlertRule, values: np.ndarray, count: np.ndarray, mean: np.ndarray | None) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        finite, magnitude = np.isfinite(values), np.abs(values)
        if rule.name == "AnomalyNan":  # an infinite value only where the metric was finite before (float masks)
            beyond = finite & (magnitude > rule.threshold) if rule.threshold is not None else False
            return np.isnan(values) | (np.isinf(values) & (count > 0)) | beyond
        return finite & (count >= rule.min_history) & (magnitude > mean * (1 + rule.threshold))


class AlertTracker:
    """Keeps each metric's recent values and the run's alerts; writes ``anomalies.json`` under ``directory``."""

    def __init__(self, rules: tuple[AlertRule, ...], directory: Path) -> None:
        self.rules = rules
        self.path = directory / ANOMALIES_FILE
        self.history: dict[tuple, _Histories] = {}  # (op, window) -> its histories
        self.layout: RowLayout | None = None  # the last step's rows, and their keys in the histories
        self.keys: list[tuple] = []
        self.alerts: list[Alert] = []

    def check(self, metrics: StepMetrics) -> Alert | None:
        layout, table = metrics.layout, metrics.values
        if not len(layout):
            return None
        if layout is not self.layout:
            self.layout = layout
            self.keys = list(zip(layout.groups, layout.names, layout.micro_steps, layout.vpp_stages))
        columns = {op: index for index, op in enumerate(metrics.ops)}
        fired: list[tuple[int, int, str, AlertRule, float | None]] = []  # (row, watch, op, rule, mean)
        watches = [(rule, op) for rule in self.rules for op in rule.ops if op in columns]
        judged: dict[tuple[str, int], list] = {}  # (op, window) -> [histories, slots, values, count, mean]
        for watch, (rule, op) in enumerate(watches):
            seen = judged.get((op, rule.window))
            if seen is None:  # rules watching the same op over the same window share its histories
                histories = self.history.setdefault((op, rule.window), _Histories(rule.window))
                slots = histories.slots_of(self.keys)
                seen = judged[op, rule.window] = [histories, slots, table[:, columns[op]], histories.count[slots], None]
            histories, slots, values, count, mean = seen
            turbulence = rule.name == "AnomalyTurbulence"
            if turbulence and mean is None:
                mean = seen[4] = histories.values[slots].sum(axis=1) / np.maximum(count, 1)
            for index in np.flatnonzero(_fired(rule, values, count, mean)):
                fired.append((int(index), watch, op, rule, float(mean[index]) if turbulence else None))
        for histories, slots, values, _, _ in judged.values():  # this step's values join them once all judged
            histories.record(slots, values)
        if not fired:
            return None
        findings = [Finding(layout.groups[i], layout.names[i], layout.micro_steps[i], op, float(table[i, columns[op]]),
                            mean, rule.name) for i, _, op, rule, mean in sorted(fired, key=lambda f: (f[0], f[1]))]
        alert = Alert(
            metrics.step, metrics.rank, findings[0], len(findings),
            tuple(f"{f.group} {f.name} {f.op}" for f in findings[1:6]),
        )
        self.alerts.append(alert)
        logger.warning(alert.message())
        atomic_write_text(self.path, json.dumps([asdict(a) for a in self.alerts], indent=1, allow_nan=True))
        return alert
