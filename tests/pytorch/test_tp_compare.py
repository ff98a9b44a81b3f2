"""A tensor-parallel run (2 ranks, torchrun, gloo on CPU) compared with the same model on one rank.

``scripts/tp_dump.py`` trains one pre-LN transformer block (ColwiseParallel q/k/v/fc1, RowwiseParallel
o/fc2): step 0 clean, step 1 with rank 1's shard of ``mlp.fc1.weight`` scaled by 1.05. The one-rank run's
step 0 is the bench. Compare merges the two ranks (compare.shards) and must find nothing on the clean pair
and name the fc1 layer on the faulted one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from msprobe.core import cli
from msprobe.core.compare.api import run_compare
from msprobe.core.compare.pipeline import CompareOptions
from msprobe.pytorch.tensor_files import load_pt

SCRIPT = Path(__file__).parent / "scripts" / "tp_dump.py"
FC1 = "Module.mlp.fc1.Linear.forward.0"


def _run(args: list[str]) -> None:
    result = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=240,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.fixture(scope="module")
def dumps(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tp")
    for task in ("tensor", "statistics"):
        _run([str(SCRIPT), str(root / f"single_{task}"), task, "mix", "1.05"])
        _run(["-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(SCRIPT),
              str(root / f"tp_{task}"), task, "mix", "1.05"])
    return {"root": root}


def _compare(root: Path, task: str, step: int, out: str):
    paths = {"npu_path": root / f"tp_{task}" / f"step{step}", "bench_path": root / f"single_{task}" / "step0",
             "stack_path": None}
    return run_compare(load_pt, paths, root / out, CompareOptions(workers=1, progress=False))


def _in_fc1(root: Path, task: str, entry: str) -> bool:
    parents = json.loads((root / f"tp_{task}" / "step1" / "rank0" / "construct.json").read_text())
    return entry == FC1 or parents.get(entry) == FC1


@pytest.mark.slow
def test_tensor_dumps_clean_pair_has_no_divergence_and_the_fault_is_named_at_fc1(dumps):
    root = dumps["root"]
    clean = _compare(root, "tensor", 0, "clean")
    assert clean.not_compared == 0
    assert clean.first_divergence is None, [r.npu.name for r in clean.results if r.diverges]
    merged = [r for r in clean.results if r.npu is not None and any(m.startswith("merged from ranks 0,1")
                                                                       for m in r.messages)]
    assert any("Shard(0) (recorded)" in " ".join(r.messages) for r in merged)  # fc1's weight
    fault = _compare(root, "tensor", 1, "fault")
    assert fault.first_divergence is not None and _in_fc1(root, "tensor", fault.first_divergence.entry)
    weight = next(r for r in fault.results if r.npu is not None and r.npu.entry == fault.first_divergence.entry
                  and r.npu.suffix == "input.1")
    assert weight.diverges and weight.npu.value["shape"] == [32, 16]  # the whole weight, merged from the shards


@pytest.mark.slow
def test_statistics_dumps_clean_pair_has_no_divergence_and_the_fault_is_named_at_fc1(dumps):
    root = dumps["root"]
    config = root / "compare.json"
    config.write_text(json.dumps({"npu_path": str(root / "tp_statistics" / "step0"),
                                  "bench_path": str(root / "single_statistics" / "step0" / "rank" / "dump.json"),
                                  "tp": 2}))
    assert cli.main(["-f", "pytorch", "compare", "-i", str(config), "-o", str(root / "cli")]) == 0
    clean = _compare(root, "statistics", 0, "clean_stats")
    assert clean.first_divergence is None, [r.npu.name for r in clean.results if r.diverges]
    fault = _compare(root, "statistics", 1, "fault_stats")
    assert fault.first_divergence is not None and _in_fc1(root, "statistics", fault.first_divergence.entry)
