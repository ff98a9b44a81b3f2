"""A crash mid-step loses nothing already written; torchrun with two ranks writes rank0/rank1."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

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
