"""Distributed MindSpore on CPU: two ranks started by ``msrun``, communicating through MindSpore's own CPU
collective library (``mindspore.communication.init()``), each writing its own ``rank{R}`` directory.

One msrun per scenario (each trains in its own processes: MindSpore reads its dump configuration once per
process); both scenarios start together and the tests read what they left. Every expected number is one
the ranks themselves produced (their losses, written by the training script) or numpy's sum of them.
"""

from __future__ import annotations

import csv
import json
import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from msprobe.mindspore.graph_dump import alias

sys.path.insert(0, str(Path(__file__).parent))
import msrun  # noqa: E402

RANKS = (0, 1)

PYNATIVE_SCRIPT = """
import json, sys
import numpy as np
import mindspore as ms
from mindspore import mint, nn, ops
from mindspore.communication import get_rank, init
from mindspore.ops import communication
from msprobe.mindspore import PrecisionDebugger

out, dump_path = sys.argv[1:3]
init()  # MindSpore's CPU collective library, set up by msrun
rank = get_rank()
debugger = PrecisionDebugger(dump_path=dump_path, task="statistics", level="mix", step=[0])


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(4, 3)

    def construct(self, x):
        return mint.sum(mint.nn.functional.relu(self.fc(x)))


ms.set_seed(0)
net = Net()
x = ms.Tensor(np.full((2, 4), rank + 1.0, np.float32))  # another input per rank
debugger.start(net)
loss = net(x)
total = loss.copy()
mint.distributed.all_reduce(total)  # in place: the sum of both ranks' losses
others = [loss.copy(), loss.copy()]
communication.all_reduce(others[0])  # MindSpore's other collectives: mindspore.ops.communication,
ops.all_reduce(others[1])  # also bound in mindspore.ops
debugger.stop()
debugger.step()
with open(f"{out}/values_rank{rank}.json", "w") as f:
    json.dump({"loss": float(loss.asnumpy()), "total": float(total.asnumpy()),
               "others": [float(t.asnumpy()) for t in others]}, f)
"""

GRAPH_SCRIPT = """
import json, sys
import numpy as np
import mindspore as ms
from mindspore import nn, ops
from mindspore.communication import get_rank, init
from msprobe.mindspore import PrecisionDebugger

out, dump_path = sys.argv[1:3]
ms.set_context(mode=ms.GRAPH_MODE)
init()
rank = get_rank()
debugger = PrecisionDebugger(dump_path=dump_path, task="statistics", level="L2", step=[1])


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(4, 3)
        self.all_reduce = ops.AllReduce()

    def construct(self, x):
        return self.all_reduce(ops.relu(self.fc(x)).sum())


ms.set_seed(0)
net = Net()
x = ms.Tensor(np.full((2, 4), rank + 1.0, np.float32))
for step in range(2):
    debugger.start(net)
    total = net(x)
    debugger.stop()
    debugger.step()
with open(f"{out}/values_rank{rank}.json", "w") as f:
    json.dump({"total": float(total.asnumpy())}, f)
"""

SCENARIOS = {  # name → (script, dump_path under the scenario's folder: the L2 one is a path MindSpore rejects)
    "pynative": (PYNATIVE_SCRIPT, "dump"),
    "graph": (GRAPH_SCRIPT, "run.1/dump"),
}


@pytest.fixture(scope="module")
def jobs(tmp_path_factory) -> dict[str, tuple[Path, Path, str]]:
    """Run every scenario under ``msrun --worker_num=2`` at once; name → (folder, dump_path, worker logs)."""
    root = tmp_path_factory.mktemp("ms_distributed")
    started = {name: msrun.start(root / name, script, str(root / name), str(root / name / relative_dump))
               for name, (script, relative_dump) in SCENARIOS.items()}
    return {name: (root / name, root / name / SCENARIOS[name][1], msrun.finish(process, root / name))
            for name, process in started.items()}


def _values(folder: Path) -> dict[int, dict[str, float]]:
    return {rank: json.loads((folder / f"values_rank{rank}.json").read_text()) for rank in RANKS}


def test_pynative_mix_writes_one_directory_per_rank(jobs):
    folder, dump_path, logs = jobs["pynative"]
    values = _values(folder)
    assert sorted(p.name for p in (dump_path / "step0").iterdir()) == ["rank0", "rank1"]
    assert all(f"[rank {rank}]" in logs for rank in RANKS)  # each rank's log lines name it
    float32_sum = float(np.float32(values[0]["loss"]) + np.float32(values[1]["loss"]))
    for rank in RANKS:
        assert values[rank]["total"] == float32_sum  # the collective did run across the two processes
        rank_dir = dump_path / "step0" / f"rank{rank}"
        assert {"dump.json", "stack.json", "construct.json"} <= {p.name for p in rank_dir.iterdir()}
        data = json.loads((rank_dir / "dump.json").read_text())["data"]
        assert "Cell.fc.Dense.forward.0" in data  # mix: cells and APIs
        assert values[rank]["others"] == [float32_sum] * 2
        for call in range(3):  # mint.distributed's, ops.communication's, ops'
            (reduced,) = data[f"Distributed.all_reduce.{call}.forward"]["input_args"]
            assert reduced["Max"] == reduced["Min"] == values[rank]["loss"]  # this rank's own loss went in
        assert data["Mint.sum.0.forward"]["output"][0]["Max"] == values[rank]["loss"]
    assert values[0]["loss"] != values[1]["loss"]  # the ranks' files hold different numbers


def _statistic_rows(dump_path: Path, rank: int) -> list[dict[str, str]]:
    with open(dump_path / "step1" / f"rank{rank}" / "graph0" / "statistic.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def test_static_graph_l2_files_each_ranks_kernels_under_its_rank(jobs):
    folder, dump_path, logs = jobs["graph"]
    values = _values(folder)
    assert not (dump_path / "step0").exists()  # step [1] only
    assert sorted(p.name for p in (dump_path / "step1").iterdir()) == ["rank0", "rank1"]
    assert sorted(p.name for p in (dump_path / "mindspore_dump").iterdir()) == ["rank_0", "rank_1"]
    assert not list((dump_path / "mindspore_dump").rglob("*.npy"))  # every kernel file was filed
    given = json.loads((dump_path / "kernel_kbyk_dump.json").read_text())["common_dump_settings"]["path"]
    assert alias.accepted_by_mindspore(given) and not os.path.lexists(given)  # "run.1": through a link, gone
    links = set(re.findall(r"writes through the symlink (\S+) instead", logs))
    assert len(links) == 2 and given in links and not any(os.path.lexists(link) for link in links)  # one per rank
    reduced_inputs = {}
    for rank in RANKS:
        rows = [r for r in _statistic_rows(dump_path, rank) if r["Op Type"] == "AllReduce"]
        by_io = {r["IO"]: r for r in rows}
        assert set(by_io) == {"input", "output"}
        reduced_inputs[rank] = np.float32(by_io["input"]["Max Value"])
        assert float(by_io["output"]["Max Value"]) == values[rank]["total"]
    assert float(reduced_inputs[0] + reduced_inputs[1]) == values[0]["total"] == values[1]["total"]
    assert reduced_inputs[0] != reduced_inputs[1]
