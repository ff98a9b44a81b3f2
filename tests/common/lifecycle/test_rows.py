"""``slice`` and ``request_id`` (docs/pytorch/inference.md): their one-line errors at construction, which
index a tensor's shape gets, and a serving batch's ``scheduled_tokens``."""

from __future__ import annotations

import json

import numpy as np
import pytest

from msprobe.core.config import ConfigError, load_config
from msprobe.core.lifecycle.rows import RowSelection, RowSlice
from msprobe.core.tasks.builtin import load_builtin_tasks

load_builtin_tasks()


def _load(tmp_path, section: dict, level: str = "L1", task: str = "statistics"):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"task": task, "level": level, "dump_path": str(tmp_path / "d"), task: section}))
    return load_config(str(path), framework="pytorch")


def test_slice_and_request_id_are_read_with_their_defaults(tmp_path):
    section = _load(tmp_path, {}).section
    assert section.slices == () and section.request_id is None
    section = _load(tmp_path, {"slice": [{"dim": 1, "begin": 2, "end": 5, "size": 7}], "request_id": "r1"},
                    task="tensor").section
    assert section.slices == (RowSlice(dim=1, begin=2, end=5, size=7),) and section.request_id == "r1"


@pytest.mark.parametrize(("section", "level", "line"), [
    ({"slice": {"dim": 0}}, "L1", "statistics.slice: got {'dim': 0}; allowed: a list of objects"),
    ({"slice": [{"dim": 0, "start": 1}]}, "L1", "statistics.slice[0]: got 'start'; allowed: a key among dim"),
    ({"slice": [{"dim": 0, "end": 2.5}]}, "L1", "statistics.slice[0]: got {'end': 2.5}; allowed: an integer end"),
    ({"slice": [{"dim": -1}]}, "L1", "statistics.slice[0]: got {'dim': -1}; allowed: dim and size ≥ 0"),
    ({"slice": [{"begin": 3, "end": 3}]}, "L1", "allowed: end greater than begin"),
    ({"slice": [{"begin": 4, "size": 4}]}, "L1", "allowed: begin below size 4"),
    ({"slice": [{"dim": 1}, {"dim": 1, "begin": 2}]}, "L1", "statistics.slice[1]: got {'dim': 1, 'begin': 2}; "
                                                           "allowed: at most one item per dim"),
    ({"request_id": 7}, "L1", "statistics.request_id: got 7; allowed: a non-empty string"),
    ({"request_id": "r", "slice": [{"begin": 1}]}, "L1",
     "statistics.slice[0]: got {'dim': 0, 'begin': 1, 'end': None, 'size': None}; allowed: a dim other than 0"),
    ({"slice": [{"dim": 1, "end": 2}]}, "L2", "statistics.slice: got [{'dim': 1, 'begin': 0, 'end': 2, 'size': "
                                             "None}]; allowed: [] at level L2"),
    ({"request_id": "r", "list": ["Functional.linear.0.forward"]}, "L2",
     "statistics.request_id: got 'r'; allowed: null at level L2"),
])
def test_a_bad_row_key_is_one_line_naming_field_value_and_allowed(tmp_path, section, level, line):
    with pytest.raises(ConfigError) as error:
        _load(tmp_path, section, level)
    assert any(line in str(problem) for problem in error.value.problems), str(error.value)


def test_request_id_is_refused_with_online_run_ut(tmp_path):
    section = {"request_id": "r", "online_run_ut": True, "nfs_path": str(tmp_path)}
    with pytest.raises(ConfigError, match=r"tensor.request_id: got 'r'; allowed: null with online_run_ut"):
        _load(tmp_path, section, task="tensor")


def test_a_slice_cuts_only_the_shapes_it_fits_and_python_slices_its_rows():
    rows = RowSelection((RowSlice(dim=1, begin=-3, end=None, size=8), RowSlice(dim=2, begin=1, end=3)))
    array = np.arange(4 * 8 * 5).reshape(4, 8, 5)
    assert np.array_equal(array[rows.index(array.shape)], array[:, -3:, 1:3])
    assert rows.index((4, 7, 5)) == (slice(None), slice(None), slice(1, 3))  # size 8 does not fit dim 1 of 7
    assert rows.index((4, 7)) is None and rows.index(()) is None  # no dim 2, and dim 1 is not 8: whole


def test_scheduled_tokens_give_the_requests_rows_of_the_batch():
    rows = RowSelection(request_id="b")
    assert rows.schedule({"a": 2, "b": 3, "c": 1}) and rows.active
    assert rows.index((6, 4)) == (slice(2, 5),) and rows.index((5, 4)) is None  # a tensor of another length
    assert not rows.schedule({"a": 2, "c": 1}) and not rows.active  # not in this batch: nothing is dumped
    assert RowSelection(request_id="b").schedule(None)  # no batch described: whole batches, with one warning
    assert RowSelection().schedule({"x": 1}) and not RowSelection().active  # no request_id: nothing to select
    for bad in ({"a": 0}, {"a": True}, {1: 2}, [("a", 1)]):
        with pytest.raises(ValueError, match=r"^scheduled_tokens: got .*; allowed: a dict of request id"):
            rows.schedule(bad)
