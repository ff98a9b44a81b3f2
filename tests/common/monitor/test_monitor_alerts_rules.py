"""The alert rules on the host: a jump beyond k× the moving mean, NaN, newly infinite values; the first
metric in execution order is the one named; anomalies.json is rewritten whole after each alert."""

from __future__ import annotations

import json
import math

import numpy as np

from msprobe.core.monitor.alerts import AlertTracker
from msprobe.core.monitor.config import DEFAULT_RULES
from msprobe.core.monitor.records import RowLayout, StepMetrics


def _step(step: int, norms: dict[str, float]) -> StepMetrics:
    """Rows in the dict's order (execution order), only the norm op."""
    count = len(norms)
    layout = RowLayout(("actv",) * count, tuple(norms), (0,) * count, ((2,),) * count, ("torch.float32",) * count,
                       (0,) * count)
    return StepMetrics(step, 3, ("norm",), layout, np.array([[value] for value in norms.values()], dtype=np.float64))


def test_jump_names_the_first_metric_in_execution_order(tmp_path):
    tracker = AlertTracker(DEFAULT_RULES, tmp_path)
    for step in range(4):
        assert tracker.check(_step(step, {"a.output": 1.0, "b.output": 2.0, "c.output": 3.0})) is None
    alert = tracker.check(_step(4, {"a.output": 1.0, "b.output": 25.0, "c.output": 40.0}))
    assert (alert.step, alert.rank, alert.first.name, alert.count) == (4, 3, "b.output", 2)
    assert alert.first.history_mean == 2.0 and alert.then == ("actv c.output norm",)
    assert json.loads((tmp_path / "anomalies.json").read_text())[0]["first"]["name"] == "b.output"


def test_no_alert_before_enough_history_or_within_k(tmp_path):
    tracker = AlertTracker(DEFAULT_RULES, tmp_path)
    assert tracker.check(_step(0, {"a": 1.0})) is None
    assert tracker.check(_step(1, {"a": 50.0})) is None  # two values of history only
    for step in range(2, 6):
        assert tracker.check(_step(step, {"a": 9.0})) is None  # never beyond 10× the moving mean
    assert not (tmp_path / "anomalies.json").exists()


def test_nan_always_infinity_only_where_it_was_finite(tmp_path):
    tracker = AlertTracker(DEFAULT_RULES, tmp_path)
    assert tracker.check(_step(0, {"mask": math.inf, "x": 1.0})) is None  # a float mask: -inf from the start
    assert tracker.check(_step(1, {"mask": math.inf, "x": math.nan})).first.name == "x"
    alert = tracker.check(_step(2, {"mask": math.inf, "x": 1.0, "y": 1.0}))
    assert alert is None
    assert tracker.check(_step(3, {"mask": math.inf, "x": math.inf})).first.rule == "AnomalyNan"
    assert [a["step"] for a in json.loads((tmp_path / "anomalies.json").read_text())] == [1, 3]
