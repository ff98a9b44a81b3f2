"""The parts dump and overflow check are built from (msprobe.core.dump.collector), each on its own, and the
dump collector over them, driven through the CallSink contract with numpy arrays as tensors."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from msprobe.core.contract import Call, TensorStats
from msprobe.core.dump import encode
from msprobe.core.dump.collector import CallState, DumpCollector, ModuleSpans, Parts, StepOutput, TensorFiles
from msprobe.core.dump.encode import EntryEncoder
from msprobe.core.dump.host_stats import array_stats
from msprobe.core.dump.json_files import DumpIdentity, read_json, step_dir
from msprobe.core.dump.overflow import OverflowCollector
from msprobe.core.lifecycle.select import Selector

sys.path.insert(0, str(Path(__file__).parents[1]))  # the numpy "framework" in tests/common (importlib mode)
from numpy_adapter import NumpyTensorAdapter  # noqa: E402
from stats_reference import reference_xor  # noqa: E402


def api(name: str, *args, mutates: bool = False) -> Call:
    return Call(name, args, {}, mutates_inputs=mutates)


def module(name: str, *args) -> Call:
    return Call(name, args, {}, is_module=True)


# ---------------------------------------------------------------------------------------------- CallState
def test_call_state_lives_on_its_call_and_belongs_to_one_collector():
    first, second = CallState("first"), CallState("second")
    call, other = api("Torch.add.0.forward"), api("Torch.add.1.forward")
    first.put(call, {"a": 1})
    second.put(call, ("kept",))
    assert first.take(other) is None  # another call has none
    assert first.take(call) == {"a": 1} and first.take(call) is None  # taken once
    assert second.take(call) == ("kept",)
    assert call.state == {}


# ------------------------------------------------------------------------------------------ EntryEncoder
def test_statistics_of_a_batch_arrive_in_one_fetch_and_entries_in_order():
    adapter = NumpyTensorAdapter()
    entries = EntryEncoder(adapter, batch=3)
    for i in range(3):
        entry = {"output": entries.encode(np.full(2, float(i)), f"Torch.add.{i}.forward", "output", as_list=True)}
        full = entries.hold(f"Torch.add.{i}.forward", entry)
    assert full and adapter.fetch_sizes == []  # nothing reached the host yet
    released = entries.release()
    assert adapter.fetch_sizes == [3]
    assert [name for name, _ in released] == [f"Torch.add.{i}.forward" for i in range(3)]
    assert json.loads(released[2][1])["output"][0]["Max"] == 2.0  # rendered, statistics filled in
    assert entries.release() == [] and adapter.fetch_sizes == [3]  # nothing pending: no transfer


class HostStatsAdapter(NumpyTensorAdapter):
    """Statistics computed at once, as on a CPU run (no handle to fetch)."""

    def stats(self, tensor: np.ndarray) -> TensorStats:
        return array_stats(tensor)


def test_entries_with_host_statistics_are_rendered_when_held():
    adapter = HostStatsAdapter()
    entries = EntryEncoder(adapter)
    entry = {"output": entries.encode(np.array([1.0, -3.0]), "Torch.neg.0.forward", "output", as_list=True)}
    entries.hold("Torch.neg.0.forward", entry)
    entry["output"] = []  # the held entry is its text already: later changes cannot reach it
    ((name, text),) = entries.release()
    assert name == "Torch.neg.0.forward" and adapter.fetch_sizes == []
    (record,) = json.loads(text)["output"]
    values = np.array([1.0, -3.0], dtype=np.float64)
    assert (record["Max"], record["Min"], record["Mean"]) == (values.max(), values.min(), values.mean())
    assert record["Norm"] == pytest.approx(np.sqrt((values * values).sum()), rel=1e-15)


def test_md5_and_tensor_files_are_asked_per_tensor_with_its_place():
    saved = []

    def save(tensor, entry, part, path):
        saved.append((entry, part, path))
        return f"{entry}.{part}.{'.'.join(map(str, path))}.npy"

    entries = EntryEncoder(NumpyTensorAdapter(), summary_mode="md5", save=save)
    value = entries.encode((np.ones(2), [1, np.zeros(3)]), "Torch.cat.0.forward", "input")
    assert saved == [("Torch.cat.0.forward", "input", (0,)), ("Torch.cat.0.forward", "input", (1, 1))]
    entries.hold("Torch.cat.0.forward", {"input_args": value})
    (_, text), = entries.release()
    first, (number, second) = json.loads(text)["input_args"]
    assert number == {"type": "int", "value": 1}
    assert second["data_name"] == "Torch.cat.0.forward.input.1.1.npy" and len(second["md5"]) == 8
    assert "data_name" in first and "md5" in first


def test_xor_checksums_of_a_batch_arrive_in_one_transfer_instead_of_statistics():
    adapter = NumpyTensorAdapter()
    entries = EntryEncoder(adapter, summary_mode="xor")
    values = np.arange(5, dtype=np.float32)  # 20 bytes: two whole words and a padded one
    for i in range(3):
        entries.hold(f"Torch.add.{i}.forward", {"output": entries.encode(values + i, f"Torch.add.{i}.forward",
                                                                         "output", as_list=True)})
    assert adapter.fetch_sizes == []  # nothing reached the host yet
    released = entries.release()
    assert adapter.fetch_sizes == [3]  # the words, in one transfer; no statistics were asked for
    for i, (_, text) in enumerate(released):
        (record,) = json.loads(text)["output"]
        checksum = reference_xor((values + i).tobytes())
        assert record == {"type": "numpy.ndarray", "dtype": "float32", "shape": [5], "md5": checksum}


def test_dropped_entries_never_reach_the_host():
    adapter = NumpyTensorAdapter()
    entries = EntryEncoder(adapter)
    entries.hold("Torch.add.0.forward", {"output": entries.encode(np.ones(2), "Torch.add.0.forward", "output")})
    entries.drop()
    assert entries.release() == [] and adapter.fetch_sizes == []


def test_the_default_batch_is_shared_with_the_module():
    assert EntryEncoder(NumpyTensorAdapter()).batch == encode.FETCH_BATCH


# ------------------------------------------------------------------------------------------- ModuleSpans
def test_spans_give_each_entry_its_module_and_drive_the_selector():
    spans = ModuleSpans(Selector(scope=("Module.layer.Linear.forward.0", "Module.layer.Linear.forward.0")))
    outer, inner = module("Module.net.Net.forward.0"), module("Module.layer.Linear.forward.0")
    relu = api("Torch.relu.0.forward")
    assert spans.enter(outer) is False  # outside the scope
    assert spans.enter(inner) is True
    assert spans.enter(relu) is True
    spans.leave(relu)
    spans.leave(inner)  # closes the scope range
    after = api("Torch.add.0.forward")
    assert spans.enter(after) is False
    spans.leave(after)
    spans.leave(outer)
    assert spans.parent("Module.layer.Linear.forward.0") == "Module.net.Net.forward.0"
    assert spans.parent("Torch.relu.0.forward") == "Module.layer.Linear.forward.0"
    assert spans.parent("Module.net.Net.forward.0") is None  # not selected: not recorded
    assert spans.backward_parent("Torch.relu.0.forward") == "Module.layer.Linear.backward.0"
    assert spans.backward_parent("Module.net.Net.forward.0") is None
    spans.clear()
    assert spans.parent("Torch.relu.0.forward") is None


# ------------------------------------------------------------------------------ StepOutput, TensorFiles
def test_step_output_opens_a_writer_per_step_and_writes_construct_only_for_module_levels(tmp_path):
    for level, constructs in (("L1", {}), ("mix", {"Torch.add.0.forward": "Module.m.M.forward.0"})):
        output = StepOutput(DumpIdentity(str(tmp_path / level), "statistics", level, "pytorch"))
        assert not output.active
        with pytest.raises(RuntimeError, match="no step is open"):
            output.add_stack("Torch.add.0.forward")
        output.open(0, None)
        output.add_construct("Torch.add.0.forward", "Module.m.M.forward.0")
        output.add_entries([("Torch.add.0.forward", '{"output": [null]}')])
        output.add_stack("Torch.add.0.forward")
        directory = output.directory
        output.close()
        assert not output.active
        assert read_json(directory / "construct.json") == constructs
        assert read_json(directory / "dump.json")["data"] == {"Torch.add.0.forward": {"output": [None]}}
        assert read_json(directory / "stack.json")["Torch.add.0.forward"]  # the test's own frames


def test_abort_leaves_earlier_steps_and_no_temporary_files(tmp_path):
    output = StepOutput(DumpIdentity(str(tmp_path), "statistics", "L1", "pytorch"))
    output.open(0, None)
    output.add_entries([("Torch.add.0.forward", "{}")])
    output.close()
    output.open(1, None)
    output.add_entries([("Torch.add.0.forward", "{}")])
    output.abort()
    output.abort()  # twice is harmless
    assert not output.active
    assert (step_dir(tmp_path, 0, None) / "dump.json").exists()
    assert sorted(p.name for p in step_dir(tmp_path, 1, None).iterdir() if p.is_file()) == []


def test_tensor_files_go_to_the_open_step(tmp_path):
    adapter = NumpyTensorAdapter()
    output = StepOutput(DumpIdentity(str(tmp_path), "tensor", "L1", "pytorch", with_tensors=True))
    output.open(3, None)
    files = TensorFiles(adapter, output)
    array = np.arange(4.0)
    name = files.save(array, "Torch.add.0.forward", "output", (0,))
    array[:] = -1  # changed in place after the call: the file has what the call saw
    files.drain()
    assert name == "Torch.add.0.forward.output.0.npy"
    assert np.array_equal(np.load(step_dir(tmp_path, 3, None) / "dump_tensor_data" / name), np.arange(4.0))


# ------------------------------------------------------------------------------------------------ Parts
def test_parts_write_pending_entries_at_the_end_of_a_step(tmp_path):
    adapter = NumpyTensorAdapter()
    parts = Parts(DumpIdentity(str(tmp_path), "statistics", "L1", "pytorch"), Selector(), adapter)
    parts.begin_step(0, None)
    parts.keep("Torch.add.0.forward", {"output": parts.entries.encode(np.ones(2), "x", "output")}, None)
    assert adapter.fetch_sizes == []
    parts.begin_step(1, None)  # a new step ends the open one
    assert adapter.fetch_sizes == [1]
    assert list(read_json(step_dir(tmp_path, 0, None) / "dump.json")["data"]) == ["Torch.add.0.forward"]
    parts.abort()
    assert not parts.output.active and not (step_dir(tmp_path, 1, None) / "dump.json").exists()


# ---------------------------------------------------------------------------------------- DumpCollector
def dump(tmp_path, task="statistics", level="mix", **selector):
    adapter = NumpyTensorAdapter()
    identity = DumpIdentity(str(tmp_path), task, level, "pytorch", with_tensors=task == "tensor")
    collector = DumpCollector(identity, Selector(**selector), adapter)
    return collector, adapter


def run(sink, call: Call, output):
    wants_backward = sink.forward_start(call)
    sink.forward_end(call, output)
    return wants_backward


def test_dump_keeps_every_selected_entry_with_construct_and_backward(tmp_path):
    collector, adapter = dump(tmp_path)
    collector.begin_step(0, None)
    net = module("Module.net.Net.forward.0", np.ones(2))
    assert collector.forward_start(net)
    x = np.array([1.0, -1.0])
    assert run(collector, api("Torch.relu.0.forward", x), np.maximum(x, 0))
    collector.forward_end(net, np.ones(2))
    collector.backward(net, (np.ones(2),), (np.ones(2),))
    assert net.state == {}  # the per-call state went with the forward's end
    collector.end_step()
    directory = step_dir(tmp_path, 0, None)
    data = read_json(directory / "dump.json")
    assert data["task"] == "statistics" and data["dump_data_dir"] is None
    assert list(data["data"]) == ["Torch.relu.0.forward", "Module.net.Net.forward.0", "Module.net.Net.backward.0"]
    assert data["data"]["Torch.relu.0.forward"]["output"][0]["Min"] == 0.0
    assert read_json(directory / "construct.json") == {
        "Torch.relu.0.forward": "Module.net.Net.forward.0", "Module.net.Net.forward.0": None,
        "Module.net.Net.backward.0": None,
    }
    assert list(read_json(directory / "stack.json")) == ["Module.net.Net.forward.0", "Torch.relu.0.forward"]
    assert adapter.fetch_sizes == [6]  # one transfer for the six tensors of the step


def test_dump_inputs_are_recorded_before_an_in_place_call_changes_them(tmp_path):
    collector, _ = dump(tmp_path, task="tensor", level="L1")
    collector.begin_step(0, None)
    x = np.zeros(2)
    call = api("Tensor.add_.0.forward", x, mutates=True)
    collector.forward_start(call)
    x += 5
    collector.forward_end(call, x)
    collector.end_step()
    directory = step_dir(tmp_path, 0, None)
    entry = read_json(directory / "dump.json")["data"]["Tensor.add_.0.forward"]
    assert entry["input_args"][0]["Max"] == 0.0 and entry["output"][0]["Max"] == 5.0
    assert sorted(p.name for p in (directory / "dump_tensor_data").iterdir()) == [
        "Tensor.add_.0.forward.input.0.npy", "Tensor.add_.0.forward.output.0.npy"]


def test_dump_data_mode_and_unselected_calls(tmp_path):
    collector, _ = dump(tmp_path, level="L1", names=("relu",), data_mode=("forward", "output"))
    collector.begin_step(0, None)
    assert not run(collector, api("Torch.relu.0.forward", np.ones(2)), np.ones(2))  # no backward wanted
    assert not run(collector, api("Torch.add.0.forward", np.ones(2)), np.ones(2))
    collector.end_step()
    data = read_json(step_dir(tmp_path, 0, None) / "dump.json")["data"]
    assert list(data) == ["Torch.relu.0.forward"] and list(data["Torch.relu.0.forward"]) == ["output"]


def test_dump_fetches_a_full_batch_during_the_step(tmp_path):
    collector, adapter = dump(tmp_path, level="L1")
    collector.parts.entries.batch = 2
    collector.begin_step(0, None)
    for i in range(5):
        run(collector, api(f"Torch.neg.{i}.forward", np.ones(1)), np.ones(1))
    assert adapter.fetch_sizes == [4, 4]  # two entries of two tensors each per transfer
    collector.end_step()
    assert adapter.fetch_sizes == [4, 4, 2]
    assert len(read_json(step_dir(tmp_path, 0, None) / "dump.json")["data"]) == 5


def test_a_write_error_at_the_end_of_a_step_leaves_the_step_for_abort(tmp_path, monkeypatch):
    collector, _ = dump(tmp_path, level="L1")
    collector.begin_step(0, None)
    run(collector, api("Torch.neg.0.forward", np.ones(1)), np.ones(1))

    def full_disk(writer):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("msprobe.core.dump.json_files.StepWriter.close", full_disk)
    with pytest.raises(OSError):
        collector.end_step()
    assert collector.active  # the session's error handler aborts it
    collector.abort()
    assert not collector.active


# ------------------------------------------------------------------------------------------------ shape
def test_overflow_check_is_composed_not_derived():
    assert not issubclass(OverflowCollector, DumpCollector)
    identity = DumpIdentity("unused", "overflow_check", "L1", "pytorch", with_tensors=True)
    collector = OverflowCollector(identity, Selector(), NumpyTensorAdapter(), overflow_nums=1)
    call = api("Torch.exp.0.forward", np.ones(1))
    collector.forward_start(call)
    assert [type(key) for key in call.state] == [CallState]  # no string keys
