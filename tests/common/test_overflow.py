"""The framework-free half of overflow check: detection, classification, the overflow_nums budget, and
the overflow collector driven through the CallSink contract with numpy arrays as tensors."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

from msprobe.core.dump.host_stats import array_stats
from msprobe.core.dump.json_files import read_json, step_dir
from msprobe.core.contract import Call
from msprobe.core.dump.overflow import (
    INHERITED,
    ORIGIN,
    OVERFLOW_FILE,
    OverflowCollector,
    OverflowLog,
    classify,
    shows_overflow,
)
from msprobe.core.lifecycle.select import Selector
from msprobe.core.services.tree import map_tensors, tensors_in

sys.path.insert(0, str(Path(__file__).parent))  # the numpy "framework" next to this file (importlib mode)
from numpy_adapter import NumpyTensorAdapter  # noqa: E402


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


# ------------------------------------------------------------------------------------ OverflowCollector
def overflow(tmp_path, overflow_nums=-1, level="L1"):
    return OverflowCollector(level=level, framework="pytorch", dump_path=str(tmp_path), selector=Selector(),
                             adapter=NumpyTensorAdapter(), overflow_nums=overflow_nums)


def run(collector, name, inputs, output, *, is_module=False, mutates=False):
    call = Call(name, tuple(inputs), {}, is_module=is_module, mutates_inputs=mutates)
    collector.forward_start(call)
    collector.forward_end(call, output(*inputs) if callable(output) else output)
    return call


INF = np.array([1.0, np.inf])


def test_only_non_finite_calls_are_kept_and_classified(tmp_path, msprobe_log):
    collector = overflow(tmp_path)
    collector.begin_step(0, None)
    run(collector, "Torch.add.0.forward", [np.ones(2)], np.ones(2))
    run(collector, "Torch.exp.0.forward", [np.ones(2)], INF)
    run(collector, "Torch.mul.0.forward", [INF], INF)
    run(collector, "Torch.isfinite.0.forward", [INF], np.array([True, False]))
    collector.end_step()
    directory = step_dir(tmp_path, 0, None)
    assert read_json(directory / OVERFLOW_FILE) == {"Torch.exp.0.forward": ORIGIN, "Torch.mul.0.forward": INHERITED}
    dump = read_json(directory / "dump.json")
    assert dump["task"] == "overflow_check" and list(dump["data"]) == ["Torch.exp.0.forward", "Torch.mul.0.forward"]
    assert list(read_json(directory / "stack.json")) == ["Torch.exp.0.forward", "Torch.mul.0.forward"]
    assert sorted(p.name for p in (directory / "dump_tensor_data").iterdir()) == [
        "Torch.exp.0.forward.input.0.npy", "Torch.exp.0.forward.output.0.npy",
        "Torch.mul.0.forward.input.0.npy", "Torch.mul.0.forward.output.0.npy",
    ]
    assert "Torch.exp.0.forward is the first origin" in msprobe_log.text()


def test_a_step_without_overflow_writes_no_overflow_file(tmp_path):
    collector = overflow(tmp_path)
    collector.begin_step(0, None)
    run(collector, "Torch.add.0.forward", [np.ones(2)], np.ones(2))
    collector.end_step()
    directory = step_dir(tmp_path, 0, None)
    assert read_json(directory / "dump.json")["data"] == {} and not (directory / OVERFLOW_FILE).exists()


def test_in_place_inputs_are_judged_as_they_were(tmp_path):
    collector = overflow(tmp_path)
    collector.begin_step(0, None)

    def exp_(x):
        x[1] = np.inf
        return x

    run(collector, "Tensor.exp_.0.forward", [np.ones(2)], exp_, mutates=True)
    collector.end_step()
    directory = step_dir(tmp_path, 0, None)
    assert read_json(directory / OVERFLOW_FILE) == {"Tensor.exp_.0.forward": ORIGIN}
    assert read_json(directory / "dump.json")["data"]["Tensor.exp_.0.forward"]["input_args"][0]["Max"] == 1.0


def test_backward_hits_are_classified_by_the_gradients_flowing_in(tmp_path):
    collector = overflow(tmp_path, level="mix")
    collector.begin_step(0, None)
    net = Call("Module.net.Net.forward.0", (np.ones(2),), {}, is_module=True)
    assert collector.forward_start(net)
    relu = run(collector, "Torch.relu.0.forward", [np.ones(2)], np.ones(2))
    collector.forward_end(net, np.ones(2))
    collector.backward(relu, (INF,), (INF,))
    collector.backward(net, (np.ones(2),), (INF,))
    collector.end_step()
    directory = step_dir(tmp_path, 0, None)
    kinds = {"Torch.relu.0.backward": INHERITED, "Module.net.Net.backward.0": ORIGIN}
    assert read_json(directory / OVERFLOW_FILE) == kinds
    assert read_json(directory / "construct.json") == {
        "Torch.relu.0.backward": "Module.net.Net.backward.0", "Module.net.Net.backward.0": None}


def test_overflow_nums_ends_collection_for_the_run(tmp_path):
    collector = overflow(tmp_path, overflow_nums=1)
    collector.begin_step(0, None)
    run(collector, "Torch.exp.0.forward", [np.ones(2)], INF)
    assert collector.exhausted
    late = run(collector, "Torch.exp.1.forward", [np.ones(2)], INF)
    assert late.state == {}  # not even started
    collector.end_step()
    assert read_json(step_dir(tmp_path, 0, None) / OVERFLOW_FILE) == {"Torch.exp.0.forward": ORIGIN}


def test_abort_gives_up_the_step_and_its_classification(tmp_path):
    collector = overflow(tmp_path)
    collector.begin_step(0, None)
    run(collector, "Torch.exp.0.forward", [np.ones(2)], INF)
    collector.abort()
    collector.end_step()  # nothing left to write
    assert not collector.active
    directory = step_dir(tmp_path, 0, None)
    assert not (directory / OVERFLOW_FILE).exists() and not (directory / "dump.json").exists()
