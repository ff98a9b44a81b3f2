"""rank/step lists and range strings; warnings about ranks a run does not have."""

from __future__ import annotations

import pytest

from msprobe.core.config import ConfigError, DebuggerConfig, expand_ranges, warn_unknown_ranks
from msprobe.core.tasks.dump import StatisticsConfig


def _reference(values: list) -> tuple[int, ...]:
    """Independent expansion of well-formed input: a set of inclusive ranges."""
    indices: set[int] = set()
    for value in values:
        low, _, high = str(value).strip().partition("-")
        indices.update(range(int(low), int(high or low) + 1))
    return tuple(sorted(indices))


@pytest.mark.parametrize(
    "values",
    [
        [0, "2-4", "7"],
        [5, "3-5", 1, 1],
        [],
        ["4-4"],
        [" 4 - 6 ", "10"],
        ["0-999", 1000, "998-1002"],
        [1_000_000],
    ],
)
def test_expand_ranges(values):
    assert expand_ranges(values, "step") == _reference(values)


def test_expand_ranges_example_from_the_reference():
    assert expand_ranges([0, 1, 2, "4-6"], "step") == (0, 1, 2, 4, 5, 6)


@pytest.mark.parametrize(
    "bad", [-1, "4-2", "-3", "a", 1.0, True, None, "1-2-3", "", [1], "1e3", 1_000_001, "0-1000001"]
)
def test_bad_element_is_named(bad):
    with pytest.raises(ConfigError) as excinfo:
        expand_ranges([0, bad], "rank")
    (problem,) = excinfo.value.problems
    assert (problem.path, problem.value) == ("rank[1]", bad)
    assert '"a-b" with a <= b' in problem.allowed


def test_every_bad_element_is_reported():
    with pytest.raises(ConfigError) as excinfo:
        expand_ranges(["x", 3, "5-1", -2], "step")
    assert [(p.path, p.value) for p in excinfo.value.problems] == [
        ("step[0]", "x"),
        ("step[2]", "5-1"),
        ("step[3]", -2),
    ]


def test_not_a_list():
    with pytest.raises(ConfigError) as excinfo:
        expand_ranges("0-3", "step")
    assert [(p.path, p.value) for p in excinfo.value.problems] == [("step", "0-3")]


def _config(rank: tuple[int, ...]) -> DebuggerConfig:
    return DebuggerConfig("pytorch", "statistics", "./d", rank, (), "L1", False, StatisticsConfig())


def test_warn_unknown_ranks_names_missing_ranks(msprobe_log):
    warn_unknown_ranks(_config((0, 3, 8, 9)), world_size=4)
    (message,) = msprobe_log.messages
    assert "[8, 9] do not exist in this run (world size 4, ranks 0..3); they will be skipped" in message


def test_warn_unknown_ranks_when_nothing_matches(msprobe_log):
    warn_unknown_ranks(_config((1,)), world_size=1)
    assert "nothing will be collected" in msprobe_log.text()


@pytest.mark.parametrize("rank", [(), (0, 1)])
def test_no_warning_when_all_ranks_exist(msprobe_log, rank):
    warn_unknown_ranks(_config(rank), world_size=2)
    assert msprobe_log.messages == []


@pytest.mark.parametrize("world_size", [0, True, 2.0])
def test_world_size_must_be_positive_int(world_size):
    with pytest.raises(ValueError, match="world_size"):
        warn_unknown_ranks(_config((0,)), world_size=world_size)
