"""The framework-free half of overflow check: detection, classification, the overflow_nums budget."""

from __future__ import annotations

import math

import numpy as np
import pytest

from msprobe.core.host_stats import array_stats
from msprobe.core.overflow import INHERITED, ORIGIN, OverflowLog, classify, shows_overflow
from msprobe.core.tree import map_tensors, tensors_in


@pytest.mark.parametrize(
    "values,expected",
    [([1.0, 2.0], False), ([1.0, np.inf], True), ([-np.inf, 0.0], True), ([np.nan, 1.0], True),
     ([3e38, 3e38], False), ([], False)],
)
def test_shows_overflow_matches_numpy_isfinite(values, expected):
    array = np.array(values, dtype=np.float32)
    assert shows_overflow(array_stats(array)) is expected
    assert expected == (not np.isfinite(array).all())


def test_bool_tensors_never_overflow():
    assert shows_overflow(array_stats(np.array([True, False]))) is False


def test_classify():
    assert classify(inputs_finite=True) == ORIGIN
    assert classify(inputs_finite=False) == INHERITED


def test_log_names_first_origin_and_stops(msprobe_log):
    log = OverflowLog(2)
    log.record("A.inherited.0.forward", INHERITED)
    assert log.first_origin is None and not log.exhausted
    log.record("B.x.0.forward", ORIGIN)
    assert log.first_origin == "B.x.0.forward" and log.exhausted
    assert "B.x.0.forward is the first origin" in msprobe_log.text()
    assert "overflow_nums=2 reached" in msprobe_log.text()


def test_never_stop():
    log = OverflowLog(-1)
    for i in range(50):
        log.record(f"Torch.exp.{i}.forward", ORIGIN)
    assert not log.exhausted and log.first_origin == "Torch.exp.0.forward"


@pytest.mark.parametrize("bad", [0, -2, 1.5, True, "3"])
def test_bad_overflow_nums(bad):
    with pytest.raises(ValueError, match="overflow_nums"):
        OverflowLog(bad)


def test_tree_helpers_keep_structure():
    is_array = lambda v: isinstance(v, np.ndarray)  # noqa: E731
    a, b = np.ones(2), np.zeros(3)
    value = ((a, 1, [b]), {"k": a, "s": "x"})
    assert [t.shape for t in tensors_in(value, is_array)] == [(2,), (3,), (2,)]
    doubled = map_tensors(value, is_array, lambda t: t * 2)
    assert doubled[0][1] == 1 and doubled[1]["s"] == "x" and isinstance(doubled[0][2], list)
    assert math.isclose(float(doubled[1]["k"].sum()), 4.0)
