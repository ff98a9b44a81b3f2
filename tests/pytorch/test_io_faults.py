"""Never break the training run: a full disk, a bad dump_path, a re-used dump_path, odd module names.

The full disk is real: a 1 MiB tmpfs filled up mid-run (when this process may mount one), and, which
works for every user, a file-size limit (``RLIMIT_FSIZE``, SIGXFSZ ignored) that makes the kernel refuse
the dump's writes with EFBIG. Both run in a child process that trains a small model twice, without and
with the debugger, and prints both loss curves.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from msprobe.core.config import ConfigError
from msprobe.core.dump.tensor_writer import TensorWriter
from msprobe.pytorch import PrecisionDebugger
from msprobe.pytorch.adapter import TorchTensorAdapter

STEPS, FAILING_STEP = 5, 2

TRAIN = """
import json, os, resource, signal, sys
import torch
from msprobe.pytorch import PrecisionDebugger

dump_path, task, fault, steps, failing_step = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])

def fill_the_disk():
    if fault == "rlimit":  # the kernel refuses every write past 1 KiB of a file: EFBIG
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1024, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
        return
    fd = os.open(os.path.join(dump_path, "filler"), os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while os.write(fd, bytes(4096)):
            pass
    except OSError:  # ENOSPC: the tmpfs is full
        pass
    finally:
        os.close(fd)

def train(debugger):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    data = torch.randn(steps, 8, 16)
    losses = []
    for step in range(steps):
        if debugger is not None and step == failing_step:
            fill_the_disk()
        if debugger is not None:
            debugger.start(model)
        loss = model(data[step]).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        if debugger is not None:
            debugger.stop()
        optimizer.step()
        if debugger is not None:
            debugger.step()
        losses.append(loss.item())
    return losses

reference = train(None)
debugged = train(PrecisionDebugger(dump_path=dump_path, task=task, level="mix"))
print(json.dumps({"reference": reference, "debugged": debugged}))
"""


def _mount_tmpfs(directory: Path) -> bool:
    directory.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(directory)], capture_output=True)
    return done.returncode == 0


@pytest.fixture(params=["tmpfs", "rlimit"])
def full_disk(request, tmp_path):
    """``(fault, dump_path)``: where the child's dump goes, and how its disk fills up at FAILING_STEP."""
    if request.param == "rlimit":
        yield "rlimit", tmp_path / "dump"
        return
    disk = tmp_path / "disk"
    if not _mount_tmpfs(disk):
        pytest.skip("this process may not mount a tmpfs (needs root); the rlimit variant covers a full disk")
    try:
        yield "tmpfs", disk / "dump"
    finally:
        subprocess.run(["umount", str(disk)], check=True)


@pytest.mark.slow
@pytest.mark.parametrize("task", ["statistics", "tensor"])  # statistics fails in stop(); tensor in the
# writer thread, its error raised on the training thread by the next save (a hook) or at stop()
def test_a_full_disk_stops_dumping_and_training_goes_on_unchanged(full_disk, task, tmp_path):
    fault, dump_path = full_disk
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    result = subprocess.run(
        [sys.executable, str(script), str(dump_path), task, fault, str(STEPS), str(FAILING_STEP)],
        capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    losses = json.loads(result.stdout.splitlines()[-1])
    assert losses["debugged"] == losses["reference"]  # every step trained, bit for bit as without msprobe

    errors = [line for line in result.stderr.splitlines() if "msprobe could not write" in line]
    assert len(errors) == 1, result.stderr[-3000:]
    reason = "No space left on device" if fault == "tmpfs" else "File too large"
    assert reason in errors[0] and "more bytes were needed" in errors[0] and "Dumping stops" in errors[0]
    assert f"step {FAILING_STEP}" in errors[0] and str(dump_path) in errors[0]

    assert not [p for p in dump_path.rglob("*") if p.name.endswith(".tmp")]
    for step in range(FAILING_STEP):
        rank = dump_path / f"step{step}" / "rank"
        data = json.loads((rank / "dump.json").read_text())["data"]
        assert "Functional.linear.0.forward" in data and "Module.0.Linear.backward.0" in data
        json.loads((rank / "stack.json").read_text())
        json.loads((rank / "construct.json").read_text())
        if task == "tensor":
            saved = [record["data_name"] for record in data["Functional.linear.0.forward"]["input_args"]]
            assert all((rank / "dump_tensor_data" / name).is_file() for name in saved)
    for name in ("dump.json", "stack.json", "construct.json"):  # the failing step: absent or whole
        file = dump_path / f"step{FAILING_STEP}" / "rank" / name
        if file.exists():
            json.loads(file.read_text())
    assert not any((dump_path / f"step{step}").exists() for step in range(FAILING_STEP + 1, STEPS))


def test_a_dump_path_that_is_a_file_is_refused_at_construction(tmp_path):
    file = tmp_path / "dump"
    file.write_text("not a directory")
    with pytest.raises(ConfigError) as caught:
        PrecisionDebugger(dump_path=str(file), task="statistics")
    message = str(caught.value)
    assert f"dump_path (argument): got {str(file)!r}" in message and "is a regular file" in message

    with pytest.raises(ConfigError, match="is a regular file, not a directory"):
        PrecisionDebugger(dump_path=str(file / "below"), task="statistics")


def test_a_nul_byte_in_dump_path_is_refused_at_construction(tmp_path):
    with pytest.raises(ConfigError) as caught:
        PrecisionDebugger(dump_path=f"{tmp_path}/du\x00mp", task="statistics")
    assert "dump_path (argument): got" in str(caught.value) and "a path without NUL characters" in str(caught.value)


def _read_only_bind_mount(directory: Path) -> bool:
    if subprocess.run(["mount", "--bind", str(directory), str(directory)], capture_output=True).returncode:
        return False
    remount = subprocess.run(["mount", "-o", "remount,ro,bind", str(directory)], capture_output=True)
    if remount.returncode:
        subprocess.run(["umount", str(directory)], check=True)
        return False
    return True


def test_a_read_only_dump_path_is_refused_at_construction(tmp_path):
    """As root a 0o555 directory is writable (and os.access says yes even on a read-only mount), so a
    read-only bind mount is the real test there; other users get the chmod'ed directory."""
    read_only = tmp_path / "ro"
    read_only.mkdir()
    if os.geteuid() == 0:
        if not _read_only_bind_mount(read_only):
            pytest.skip("root, but this process may not make a read-only bind mount")
        expected = "Read-only file system"
    else:
        read_only.chmod(0o555)
        expected = "Permission denied"
    try:
        for dump_path in (read_only, read_only / "dump"):
            with pytest.raises(ConfigError) as caught:
                PrecisionDebugger(dump_path=str(dump_path), task="statistics")
            assert f"got {str(dump_path)!r}" in str(caught.value) and expected in str(caught.value)
    finally:
        if os.geteuid() == 0:
            subprocess.run(["umount", str(read_only)], check=True)
        else:
            read_only.chmod(0o755)
    assert list(read_only.iterdir()) == []  # the probe file is gone


def test_a_writable_dump_path_passes_and_the_probe_leaves_nothing(tmp_path):
    PrecisionDebugger(dump_path=str(tmp_path / "a" / "dump"), task="statistics").finish()
    assert [p.name for p in tmp_path.iterdir()] == ["a"]
    assert [p.name for p in (tmp_path / "a").iterdir()] == ["dump"]


def _run(debugger, model: nn.Module, steps: int) -> None:
    for _ in range(steps):
        debugger.start(model)
        model(torch.randn(2, 4)).sum().backward()
        debugger.stop()
        debugger.step()


def test_a_shorter_rerun_moves_every_step_of_the_earlier_run_aside(tmp_path, msprobe_log):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU())
    dump = tmp_path / "dump"
    first = PrecisionDebugger(dump_path=str(dump), task="statistics", level="L1")
    _run(first, model, 5)
    first.finish()
    assert not list(dump.glob(".msprobe-*.lock"))  # a finished run leaves the dump_path to the next

    second = PrecisionDebugger(dump_path=str(dump), task="statistics", level="L1")
    _run(second, model, 2)
    second.finish()
    moved = sorted(dump.glob("step*/rank.moved-*"))
    assert [p.parent.name for p in moved] == [f"step{n}" for n in (0, 1, 2, 3, 4)]  # all five, not only 0, 1
    assert len({p.name for p in moved}) == 1  # one suffix for the whole earlier run
    assert sorted(p.parent.name for p in dump.glob("step*/rank")) == ["step0", "step1"]
    for directory in moved:
        assert "Functional.linear.0.forward" in json.loads((directory / "dump.json").read_text())["data"]
    log = msprobe_log.text()
    assert "5 step directories of an earlier run" in log and str(moved[0]) in log and "steps 3-4" in log


def test_an_unchanged_tensor_is_linked_only_to_this_runs_own_file(tmp_path):
    writer = TensorWriter(TorchTensorAdapter())
    tensor = torch.arange(6.0)
    directory = tmp_path / "step0" / "rank" / "dump_tensor_data"
    directory.mkdir(parents=True)
    writer.save(tensor, directory / "a.pt", remember=True)  # a call's output ...
    writer.save(tensor, directory / "b.pt")  # ... unchanged as the next call's input: a second name
    writer.drain()
    assert os.path.samefile(directory / "a.pt", directory / "b.pt")
    writer.save(tensor, directory / "b2.pt")  # once the first file is written, linked from the saving thread
    assert os.path.samefile(directory / "a.pt", directory / "b2.pt")

    # The step directory is moved aside and another run writes its own a.pt where ours was.
    directory.parent.rename(directory.parent.with_name("rank.moved-x"))
    directory.mkdir(parents=True)
    torch.save(torch.full((6,), -1.0), directory / "a.pt")
    writer.save(tensor, directory / "c.pt", remember=True)
    writer.drain()
    assert not os.path.samefile(directory / "a.pt", directory / "c.pt")
    assert torch.equal(torch.load(directory / "c.pt", weights_only=True), tensor)
    assert torch.equal(torch.load(directory / "a.pt", weights_only=True), torch.full((6,), -1.0))

    other = tmp_path / "step1" / "rank" / "dump_tensor_data"  # never linked across step directories
    other.mkdir(parents=True)
    writer.save(tensor, other / "d.pt")
    writer.drain()
    assert os.stat(other / "d.pt").st_nlink == 1
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(".tmp")]


class _Odd(nn.Module):
    """A model with submodules registered under names that cannot be entry or file names as they are."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Sequential(nn.Linear(4, 4))
        setattr(self, "..", nn.Linear(4, 4))  # Module.__setattr__ does not check the name
        self.add_module("a/b", nn.Tanh())
        self.inner._modules["x\ny"] = nn.ReLU()

    def forward(self, x):
        return getattr(self, "a/b")(getattr(self, "..")(self.inner(x)))


@pytest.mark.parametrize("task", ["statistics", "tensor"])
def test_module_names_that_are_no_names_are_repaired_not_raised(tmp_path, task):
    torch.manual_seed(0)
    model = _Odd()
    x = torch.randn(3, 4)
    reference = model(x).sum()
    debugger = PrecisionDebugger(dump_path=str(tmp_path / "dump"), task=task, level="L0", model=model)
    debugger.start()
    loss = model(x).sum()
    loss.backward()
    debugger.stop()
    assert torch.equal(loss, reference)
    rank = tmp_path / "dump" / "step0" / "rank"
    data = json.loads((rank / "dump.json").read_text())["data"]
    repaired = {"Module._._._.Linear.forward.0", "Module.a_b.Tanh.forward.0", "Module.inner.x_y.ReLU.forward.0"}
    assert repaired <= set(data)
    if task == "tensor":
        assert {p.name for p in (rank / "dump_tensor_data").iterdir()} >= {
            "Module._._._.Linear.forward.0.input.0.pt", "Module.a_b.Tanh.forward.0.output.0.pt",
        }
