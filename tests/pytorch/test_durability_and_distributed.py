"""A crash mid-step loses nothing already written; torchrun with two ranks writes rank0/rank1; two jobs
never share a rank directory of one dump_path."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from msprobe.core.config import ConfigError
from msprobe.pytorch import PrecisionDebugger

SCRIPTS = Path(__file__).parent / "scripts"


@pytest.mark.slow
def test_sigkill_mid_step_keeps_every_earlier_step(tmp_path):
    dump = tmp_path / "dump"
    process = subprocess.Popen(
        [sys.executable, str(SCRIPTS / "train_until_killed.py"), str(dump), "3"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        line = process.stdout.readline()
        assert line.strip() == "MID-STEP", process.stderr.read()
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.wait(timeout=60)
    for step in range(3):
        directory = dump / f"step{step}" / "rank"
        for name in ("dump.json", "stack.json", "construct.json"):
            json.loads((directory / name).read_text())
        assert "Functional.linear.0.forward" in json.loads((directory / "dump.json").read_text())["data"]
    crashed = dump / "step3" / "rank"
    for name in ("dump.json", "stack.json", "construct.json"):
        if (crashed / name).exists():
            json.loads((crashed / name).read_text())


def _torchrun(tmp_path: Path, ranks: list[int]) -> Path:
    dump = tmp_path / "dump"
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"task": "statistics", "level": "L1", "rank": ranks}))
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
         str(SCRIPTS / "distributed_dump.py"), str(dump), str(config)],
        capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return dump


@pytest.mark.slow
def test_torchrun_two_ranks_write_rank_directories_with_all_reduce(tmp_path):
    dump = _torchrun(tmp_path, [])
    for rank in (0, 1):
        data = json.loads((dump / "step0" / f"rank{rank}" / "dump.json").read_text())["data"]
        reduce = [name for name in data if name.startswith("Distributed.all_reduce.")]
        assert reduce == ["Distributed.all_reduce.0.forward", "Distributed.all_reduce.1.forward"]
        assert "Functional.linear.0.forward" in data
    assert not (dump / "step0" / "rank").exists()


@pytest.mark.slow
def test_torchrun_rank_filter_keeps_only_the_selected_rank(tmp_path):
    dump = _torchrun(tmp_path, [1])
    assert sorted(p.name for p in (dump / "step0").iterdir()) == ["rank1"]


HOLD_DUMP_PATH = """
import sys
from msprobe.pytorch import PrecisionDebugger
debugger = PrecisionDebugger(dump_path=sys.argv[1], task="statistics", level="L1")
print("HOLDING", flush=True)
sys.stdin.read()
"""


def _holder(dump_path: Path, **env: str) -> subprocess.Popen:
    process = subprocess.Popen(
        [sys.executable, "-c", HOLD_DUMP_PATH, str(dump_path)], env={**os.environ, **env},
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert process.stdout.readline().strip() == "HOLDING", process.stderr.read()
    return process


@pytest.mark.slow
def test_a_second_job_on_a_dump_path_gets_a_config_error_naming_the_holder(tmp_path, monkeypatch):
    dump = tmp_path / "dump"
    monkeypatch.delenv("RANK", raising=False)
    holder = _holder(dump)
    try:
        with pytest.raises(ConfigError) as caught:
            PrecisionDebugger(dump_path=str(dump), task="statistics", level="L1")
        message = str(caught.value)
        assert f"dump_path: got {str(dump)!r}" in message and f"pid {holder.pid} on host" in message
        assert ".msprobe-rank.lock" in message

        monkeypatch.setenv("RANK", "1")  # another rank of a launched job writes its own rank directory
        PrecisionDebugger(dump_path=str(dump), task="statistics", level="L1").finish()
        monkeypatch.delenv("RANK")
    finally:
        holder.send_signal(signal.SIGKILL)  # a crashed holder keeps no one out
        holder.wait(timeout=60)
    debugger = PrecisionDebugger(dump_path=str(dump), task="statistics", level="L1")
    assert (dump / ".msprobe-rank.lock").read_text().startswith(f"pid {os.getpid()} on host")
    debugger.finish()
    assert not (dump / ".msprobe-rank.lock").exists()


HOLD_RANK0 = """
import sys
from msprobe.core.dump.json_files import DumpIdentity, StepWriter
StepWriter(DumpIdentity(sys.argv[1], "statistics", "L1", "pytorch"), 0, 0)
print("HOLDING", flush=True)
sys.stdin.read()
"""


@pytest.mark.slow
def test_a_rank_learned_after_construction_that_another_job_holds_stops_dumping_not_training(
    tmp_path, monkeypatch, msprobe_log
):
    """The process group comes up after the debugger was built: the rank directory is locked at the
    first write, and when another job holds it the run logs that and trains on without dumping."""
    import torch
    import torch.distributed as dist

    dump = tmp_path / "dump"
    monkeypatch.delenv("RANK", raising=False)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_RANK0, str(dump)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "HOLDING", holder.stderr.read()
        debugger = PrecisionDebugger(dump_path=str(dump), task="statistics", level="L1")  # rank unknown yet
        dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
        try:
            torch.manual_seed(0)
            model = torch.nn.Linear(4, 2)
            for _ in range(2):
                debugger.start(model)
                model(torch.randn(3, 4)).sum().backward()
                debugger.stop()
                debugger.step()
        finally:
            dist.destroy_process_group()
    finally:
        holder.kill()
        holder.wait(timeout=60)
    errors = [m for m in msprobe_log.messages if m.startswith("msprobe could not write")]
    assert len(errors) == 1 and f"pid {holder.pid} on host" in errors[0] and ".msprobe-rank0.lock" in errors[0]
    assert not list(dump.glob("step*/rank0/*")) and not list(dump.glob("step*/rank/*"))
