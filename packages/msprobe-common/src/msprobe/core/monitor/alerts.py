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
import math
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path

from msprobe.core.monitor.config import AlertRule
from msprobe.core.monitor.records import MetricRow, StepMetrics
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


def _fires(rule: AlertRule, value: float, history: deque) -> tuple[bool, float | None]:
    if rule.name == "AnomalyNan":
        beyond = rule.threshold is not None and math.isfinite(value) and abs(value) > rule.threshold
        newly_infinite = math.isinf(value) and bool(history)  # a float mask holds -inf from the first step on
        return math.isnan(value) or newly_infinite or beyond, None
    if not math.isfinite(value) or len(history) < rule.min_history:
        return False, None
    mean = sum(history) / len(history)
    return abs(value) > mean * (1 + rule.threshold), mean


class AlertTracker:
    """Keeps each metric's recent values and the run's alerts; writes ``anomalies.json`` under ``directory``."""

    def __init__(self, rules: tuple[AlertRule, ...], directory: Path) -> None:
        self.rules = rules
        self.path = directory / ANOMALIES_FILE
        self.history: dict[tuple, deque] = {}
        self.alerts: list[Alert] = []

    def check(self, metrics: StepMetrics) -> Alert | None:
        columns = {op: index for index, op in enumerate(metrics.ops)}
        watched = [(number, rule, op, columns[op]) for number, rule in enumerate(self.rules)
                   for op in rule.ops if op in columns]
        findings = [finding for row in sorted(metrics.rows, key=lambda r: r.order)
                    for finding in self._check_row(row, watched)]
        if not findings:
            return None
        alert = Alert(
            metrics.step, metrics.rank, findings[0], len(findings),
            tuple(f"{f.group} {f.name} {f.op}" for f in findings[1:6]),
        )
        self.alerts.append(alert)
        logger.warning(alert.message())
        atomic_write_text(self.path, json.dumps([asdict(a) for a in self.alerts], indent=1, allow_nan=True))
        return alert

    def _check_row(self, row: MetricRow, watched: list) -> list[Finding]:
        found = []
        target = row.target
        for number, rule, op, column in watched:
            value = row.values[column]
            key = (number, row.group, target, op)
            history = self.history.get(key)
            if history is None:
                history = self.history[key] = deque(maxlen=rule.window)
            fired, mean = _fires(rule, value, history)
            if fired:
                found.append(Finding(row.group, row.name, row.micro_step, op, value, mean, rule.name))
            if math.isfinite(value):
                history.append(abs(value))
        return found
