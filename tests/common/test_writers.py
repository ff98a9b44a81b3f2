"""Step layout and the dump/stack/construct files: 1.1.1's exact format, modes, atomic and chunked writes,
runs that never mix, and refusal of symlinked paths."""

from __future__ import annotations

import errno
import json
import math
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from msprobe.core.dump import json_files
from msprobe.core.dump.json_files import StepWriter, read_json, step_dir, write_json_atomic
from msprobe.core.services.fileio import DumpWriteError, UnsafePathError
from msprobe.core.lifecycle.layout import DumpPathBusy

REFERENCE = str(Path(__file__).resolve().parents[1] / "data" / "reference-outputs") + "/pytorch"


@pytest.fixture(autouse=True)
def usual_umask():
    old = os.umask(0o022)
    yield
    os.umask(old)


def new_writer(dump_path, step=0, rank=None, *, with_tensors=False, task="statistics", level="mix"):
    return StepWriter(dump_path, step, rank, task=task, level=level, framework="pytorch", with_tensors=with_tensors)


def write_reference(run: str, dump_path, *, with_tensors: bool) -> tuple[StepWriter, dict]:
    ref = {name: read_json(f"{REFERENCE}/{run}/step0/rank/{name}") for name in writers_files()}
    writer = new_writer(
        dump_path, with_tensors=with_tensors, task=ref["dump.json"]["task"], level=ref["dump.json"]["level"]
    )
    for name, entry in ref["dump.json"]["data"].items():
        writer.add(name, entry)
    for name, frames in ref["stack.json"].items():
        writer.add_stack(name, frames)
    for name, parent in ref["construct.json"].items():
        writer.add_construct(name, parent)
    writer.close()
    return writer, ref


def writers_files() -> tuple[str, str, str]:
    return (json_files.DUMP_FILE, json_files.STACK_FILE, json_files.CONSTRUCT_FILE)


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_step_dir_layout(tmp_path):
    assert step_dir(tmp_path, 3, None) == tmp_path / "step3" / "rank"
    assert step_dir(str(tmp_path), 0, 7) == tmp_path / "step0" / "rank7"


def assert_one_entry_per_line(path, data: dict) -> None:
    """Each member of ``data`` is one line of the file (what keeps dump.json readable and fast)."""
    lines = path.read_text().splitlines()
    starts = [line.strip().split('": ', 1)[0] + '"' for line in lines if line.strip().startswith('"')]
    for name in data:
        assert json.dumps(name) in starts, name


def test_files_parse_to_what_1_1_1_wrote(tmp_path):
    run = "pt_statistics_mix_fp32"
    write_reference(run, tmp_path / "dump", with_tensors=False)
    for name in writers_files():
        ours = tmp_path / "dump" / "step0" / "rank" / name
        theirs = read_json(f"{REFERENCE}/{run}/step0/rank/{name}")
        assert read_json(ours) == theirs, name
        assert list(read_json(ours)) == list(theirs), name
    dump = tmp_path / "dump" / "step0" / "rank" / "dump.json"
    assert_one_entry_per_line(dump, read_json(dump)["data"])


def test_tensor_runs_name_the_absolute_tensor_directory(tmp_path):
    writer, ref = write_reference("pt_tensor_L1_fp32", tmp_path / "dump", with_tensors=True)
    written = read_json(writer.directory / "dump.json")
    assert written["dump_data_dir"] == str(tmp_path / "dump" / "step0" / "rank" / "dump_tensor_data")
    assert os.path.isabs(written["dump_data_dir"])
    assert written["data"] == ref["dump.json"]["data"]
    assert list(written) == ["task", "level", "dump_data_dir", "data"]
    assert_one_entry_per_line(writer.directory / "dump.json", written["data"])


def test_tensor_dir_is_created_on_first_use(tmp_path):
    writer = new_writer(tmp_path / "d", with_tensors=True)
    assert not (writer.directory / "dump_tensor_data").exists()
    tensor_dir = writer.tensor_dir
    assert tensor_dir == writer.directory / "dump_tensor_data" and tensor_dir.is_dir()
    assert mode(tensor_dir) == 0o750
    writer.close()


def test_empty_step_writes_valid_empty_files(tmp_path):
    writer = new_writer(tmp_path / "d", level="L1")
    writer.close()
    assert read_json(writer.directory / "dump.json") == {
        "task": "statistics",
        "level": "L1",
        "dump_data_dir": None,
        "data": {},
    }
    assert (writer.directory / "stack.json").read_text() == "{}"
    assert (writer.directory / "construct.json").read_text() == "{}"


def test_directories_0o750_and_files_0o640(tmp_path):
    dump_path = tmp_path / "a" / "b"
    writer = new_writer(dump_path, 2, 1)
    writer.add("Torch.add.0.forward", {"input_args": [], "input_kwargs": {}, "output": []})
    writer.close()
    for directory in (tmp_path / "a", dump_path, dump_path / "step2", dump_path / "step2" / "rank1"):
        assert mode(directory) == 0o750, directory
    for name in writers_files():
        assert mode(dump_path / "step2" / "rank1" / name) == 0o640, name


def test_non_finite_numbers_are_bare_tokens_that_json_load_reads_back(tmp_path):
    writer = new_writer(tmp_path / "d")
    entry = {"output": [{"Max": float("inf"), "Min": float("-inf"), "Mean": float("nan"), "Norm": 1.5}]}
    writer.add("Torch.mul.0.forward", entry)
    writer.close()
    text = (writer.directory / "dump.json").read_text()
    assert '"Max": Infinity' in text and '"Min": -Infinity' in text and '"Mean": NaN' in text
    back = read_json(writer.directory / "dump.json")["data"]["Torch.mul.0.forward"]["output"][0]
    assert back["Max"] == math.inf and back["Min"] == -math.inf and math.isnan(back["Mean"]) and back["Norm"] == 1.5


def test_files_appear_only_when_closed(tmp_path):
    writer = new_writer(tmp_path / "d")
    for i in range(2500):
        writer.add(f"Torch.add.{i}.forward", {"output": [{"type": "int", "value": i}]})
        writer.add_stack(f"Torch.add.{i}.forward", [f"File train.py, line {i}, in step, \n y = x + {i}"])
    writer.flush()
    temp = writer.directory / f".dump.json.{os.getpid()}.tmp"
    assert temp.exists() and temp.stat().st_size > 0
    with pytest.raises(json.JSONDecodeError):
        json.loads(temp.read_text())  # a crash now would leave only this hidden, unfinished file
    assert not any((writer.directory / name).exists() for name in writers_files())
    writer.close()
    assert not temp.exists()
    assert len(read_json(writer.directory / "dump.json")["data"]) == 2500
    assert len(read_json(writer.directory / "stack.json")) == 2500


def test_a_writer_that_is_never_closed_leaves_no_dump_json(tmp_path):
    writer = new_writer(tmp_path / "d")
    for i in range(1500):  # past one chunk: part of it is already in the temporary file
        writer.add(f"Tensor.view.{i}.forward", {"output": []})
    assert (writer.directory / f".dump.json.{os.getpid()}.tmp").exists()
    assert not (writer.directory / "dump.json").exists()


def test_5000_entries_stream_in_chunks_and_keep_execution_order(tmp_path):
    writer = new_writer(tmp_path / "d")
    temp = writer.directory / f".dump.json.{os.getpid()}.tmp"
    sizes = []
    names = [f"Functional.linear.{i}.{d}" for i in range(2500) for d in ("forward", "backward")]
    for index, name in enumerate(names):
        writer.add(name, {"input": [{"type": "float", "value": index / 3}], "output": [None]})
        writer.add_construct(name, f"Module.layers.{index % 7}.Linear.forward.0")
        if index % 1000 == 999:
            sizes.append(temp.stat().st_size if temp.exists() else 0)
    assert sizes == sorted(sizes) and sizes[0] > 0 and len(set(sizes)) == 5  # grew on every chunk
    writer.close()
    data = read_json(writer.directory / "dump.json")
    assert list(data["data"]) == names
    assert data["data"][names[4999]]["input"][0]["value"] == 4999 / 3
    assert_one_entry_per_line(writer.directory / "dump.json", data["data"])
    construct = read_json(writer.directory / "construct.json")
    assert list(construct) == names and construct[names[8]] == "Module.layers.1.Linear.forward.0"


def test_large_entries_are_streamed_by_size(tmp_path):
    writer = new_writer(tmp_path / "d")
    big = ["x" * 1000] * 1000  # about 1 MB of JSON per entry
    for i in range(json_files.CHUNK_BYTES // (1000 * 1000) + 1):
        writer.add(f"Torch.cat.{i}.forward", {"input_args": big})
    assert (writer.directory / f".dump.json.{os.getpid()}.tmp").stat().st_size >= json_files.CHUNK_BYTES
    writer.close()


def test_an_earlier_runs_step_dir_is_moved_aside_never_deleted(tmp_path, msprobe_log):
    old = step_dir(tmp_path, 0, None)
    old.mkdir(parents=True)
    (old / "dump.json").write_text('{"from": "earlier run"}')
    writer = new_writer(tmp_path)
    writer.add("Torch.add.0.forward", {"output": []})
    writer.close()
    moved = [p for p in (tmp_path / "step0").iterdir() if p.name.startswith("rank.moved-")]
    assert len(moved) == 1
    assert read_json(moved[0] / "dump.json") == {"from": "earlier run"}
    assert list(read_json(old / "dump.json")["data"]) == ["Torch.add.0.forward"]
    assert str(moved[0]) in msprobe_log.text()


def test_every_step_of_an_earlier_run_is_moved_aside_not_only_the_ones_rewritten(tmp_path, msprobe_log):
    for step in (0, 1, 7):
        old = step_dir(tmp_path, step, None)
        old.mkdir(parents=True)
        (old / "dump.json").write_text(f'{{"earlier": {step}}}')
    step_dir(tmp_path, 0, 3).mkdir()  # another rank's directory: not this run's business
    (step_dir(tmp_path, 0, 3) / "dump.json").write_text("{}")
    (tmp_path / "step2" / "rank").mkdir(parents=True)  # empty: nothing to keep, simply used later
    new_writer(tmp_path, 1).close()
    moved = sorted(tmp_path.glob("step*/rank.moved-*"))
    assert [p.parent.name for p in moved] == ["step0", "step1", "step7"] and len({p.name for p in moved}) == 1
    assert [read_json(p / "dump.json") for p in moved] == [{"earlier": 0}, {"earlier": 1}, {"earlier": 7}]
    assert sorted(p.parent.name for p in tmp_path.glob("step*/rank")) == ["step1", "step2"]
    assert (step_dir(tmp_path, 0, 3) / "dump.json").exists()
    assert "3 step directories of an earlier run" in msprobe_log.text()
    assert all(str(p) in msprobe_log.text() for p in moved)
    new_writer(tmp_path, 7).close()  # later steps of the same run: nothing more is moved
    assert len(list(tmp_path.glob("step*/rank.moved-*"))) == 3


HOLD_STEP_DIR = """
import sys
from msprobe.core.dump.json_files import StepWriter
StepWriter(sys.argv[1], 0, None, task="statistics", level="L1", framework="pytorch", with_tensors=False)
print("HOLDING", flush=True)
sys.stdin.read()
"""


def test_a_rank_directory_another_process_writes_is_refused_until_it_dies(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_STEP_DIR, str(tmp_path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "HOLDING", holder.stderr.read()
        with pytest.raises(DumpPathBusy) as caught:
            new_writer(tmp_path, 1)
        assert caught.value.errno == errno.EBUSY and f"pid {holder.pid} on host" in str(caught.value)
        assert not (tmp_path / "step1").exists()
        new_writer(tmp_path, 1, 3).close()  # another rank of the same job writes beside it
    finally:
        holder.kill()  # a crash: the kernel drops its lock
        holder.wait(timeout=60)
    new_writer(tmp_path, 1).close()
    assert read_json(step_dir(tmp_path, 1, None) / "dump.json")["data"] == {}




def _fill(writer: StepWriter, entries: int) -> None:
    for i in range(entries):
        writer.add(f"Torch.add.{i}.forward", {"output": [{"type": "int", "value": i}]})
        writer.add_stack(f"Torch.add.{i}.forward", [f"File train.py, line {i}, in step"])


def _temporary_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.name.endswith(".tmp")]


def test_a_disk_error_at_close_keeps_earlier_steps_and_leaves_no_temporary_file(tmp_path, file_size_limit):
    earlier = new_writer(tmp_path, 0)
    _fill(earlier, 10)
    earlier.close()
    failing = new_writer(tmp_path, 1)
    _fill(failing, 200)
    with file_size_limit(2048), pytest.raises(DumpWriteError) as caught:
        failing.close()
    assert caught.value.errno == errno.EFBIG and caught.value.filename == str(failing.directory / "dump.json")
    assert caught.value.needed > 0
    assert _temporary_files(tmp_path) == [] and list(failing.directory.iterdir()) == []
    assert len(read_json(earlier.directory / "dump.json")["data"]) == 10
    assert len(read_json(earlier.directory / "stack.json")) == 10


def test_a_disk_error_after_some_files_of_the_step_keeps_those_whole(tmp_path, file_size_limit):
    writer = new_writer(tmp_path, 0)
    writer.add("Torch.add.0.forward", {"output": []})
    writer.add_stack("Torch.add.0.forward", ["File train.py, line 1, in step" + " " * 10_000])
    with file_size_limit(4096), pytest.raises(DumpWriteError) as caught:
        writer.close()  # dump.json fits, stack.json does not
    assert caught.value.filename == str(writer.directory / "stack.json")
    assert list(read_json(writer.directory / "dump.json")["data"]) == ["Torch.add.0.forward"]
    assert sorted(p.name for p in writer.directory.iterdir()) == ["dump.json"]


def test_a_disk_error_while_streaming_is_raised_and_abort_cleans_up(tmp_path, file_size_limit):
    writer = new_writer(tmp_path, 0)
    with file_size_limit(4096), pytest.raises(DumpWriteError):
        _fill(writer, json_files.CHUNK_ENTRIES)  # a full chunk goes to the temporary file at once
    writer.abort()
    assert _temporary_files(tmp_path) == [] and list(writer.directory.iterdir()) == []
    with pytest.raises(RuntimeError, match="closed"):
        writer.add("Torch.add.0.forward", {})


def test_a_second_writer_of_this_run_continues_the_step(tmp_path, msprobe_log):
    first = new_writer(tmp_path, 1, 0)
    first.add("Module.fc.Linear.forward.0", {"output": []})
    first.add_stack("Module.fc.Linear.forward.0", ["frame a"])
    first.add_construct("Module.fc.Linear.forward.0", None)
    first.close()
    second = new_writer(tmp_path, 1, 0)
    second.add("Torch.relu.0.forward", {"output": []})
    second.add_construct("Torch.relu.0.forward", "Module.fc.Linear.forward.0")
    second.close()
    directory = step_dir(tmp_path, 1, 0)
    assert list(read_json(directory / "dump.json")["data"]) == ["Module.fc.Linear.forward.0", "Torch.relu.0.forward"]
    assert read_json(directory / "stack.json") == {"Module.fc.Linear.forward.0": ["frame a"]}
    assert read_json(directory / "construct.json") == {
        "Module.fc.Linear.forward.0": None,
        "Torch.relu.0.forward": "Module.fc.Linear.forward.0",
    }
    assert list((tmp_path / "step1").iterdir()) == [directory]
    assert "moved" not in msprobe_log.text()


def test_an_empty_leftover_directory_is_simply_used(tmp_path):
    step_dir(tmp_path, 0, 3).mkdir(parents=True)
    new_writer(tmp_path, 0, 3).close()
    assert [p.name for p in (tmp_path / "step0").iterdir()] == ["rank3"]


def test_symlinked_dump_path_is_refused(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(UnsafePathError, match="symlink"):
        new_writer(link)
    assert list(real.iterdir()) == []


def test_symlinked_step_directory_is_refused(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "dump").mkdir()
    (tmp_path / "dump" / "step0").symlink_to(elsewhere)
    with pytest.raises(UnsafePathError, match="symlink"):
        new_writer(tmp_path / "dump")
    assert list(elsewhere.iterdir()) == []


def test_duplicate_entry_keeps_the_first_and_warns(tmp_path, msprobe_log):
    writer = new_writer(tmp_path)
    writer.add("Torch.add.0.forward", {"output": [1]})
    writer.add("Torch.add.0.forward", {"output": [2]})
    writer.close()
    assert read_json(writer.directory / "dump.json")["data"] == {"Torch.add.0.forward": {"output": [1]}}
    assert "Torch.add.0.forward was already written" in msprobe_log.text()


def test_closed_writer_refuses_more_entries_and_closes_twice_harmlessly(tmp_path):
    writer = new_writer(tmp_path)
    writer.close()
    writer.close()
    with pytest.raises(RuntimeError, match="closed"):
        writer.add("Torch.add.0.forward", {})


def test_write_json_atomic_and_read_json(tmp_path):
    target = tmp_path / "kernel_config_0.json"
    obj = {"dump_path": "/x", "values": [1.0, float("inf")], "nested": {"a": None}}
    write_json_atomic(target, obj)
    assert target.read_text() == json.dumps(obj, indent=1)
    assert read_json(target)["values"][1] == math.inf
    assert mode(target) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["kernel_config_0.json"]
