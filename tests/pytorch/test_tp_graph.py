"""``msprobe graph`` on a tensor-parallel run (2 ranks, torchrun, gloo on CPU) against the same model on one rank.

``scripts/tp_dump.py`` (as in test_tp_compare) dumps one pre-LN transformer block in task ``tensor``, level
mix: step 0 clean, step 1 with rank 1's shard of ``mlp.fc1.weight`` scaled by 1.05; the one-rank run's
step 0 is the bench. The graph merges the two ranks (compare.shards) into one graph of whole tensors: on
the clean pair no node is coloured by the layout, and the fault colours fc1's node, whose index is
recomputed here from the ranks' own tensor files.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from msprobe.core import cli
from msprobe.core.compare.api import run_compare
from msprobe.core.compare.pipeline import CompareOptions
from msprobe.core.graph import run_graph
from msprobe.core.graph.compare import TENSOR
from msprobe.core.graph.vis import BANDS, EXCESS_BANDS, GREY, color_of
from msprobe.pytorch.tensor_files import load_pt

SCRIPT = Path(__file__).parent / "scripts" / "tp_dump.py"
FC1 = "Module.mlp.fc1.Linear.forward.0"
LOWEST = BANDS[TENSOR][0][0]
RED = EXCESS_BANDS[-1][0]


def _run(args: list[str]) -> None:
    result = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=240,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tp_graph")
    _run([str(SCRIPT), str(root / "single"), "tensor", "mix", "1.05"])
    _run(["-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(SCRIPT), str(root / "tp"),
          "tensor", "mix", "1.05"])
    return root


def _read(out: Path) -> tuple[dict, dict]:
    """The one graph under ``out``: its .vis document and the HTML view's embedded data."""
    (vis,) = out.glob("compare_merged_*.vis")
    page = vis.with_suffix(".html").read_text()
    data = re.search(r"const DATA = (.*?);\nconst NPU", page, re.S)
    assert data is not None
    return json.loads(vis.read_text()), json.loads(data.group(1))


def _entries_below(nodes: dict, node_id: str) -> list[str]:
    """The dump entries a node's index comes from: its own, else those of the nodes below it."""
    node = nodes[node_id]
    if node["input_data"] or node["output_data"]:
        return [node_id]
    return [e for sub in node["subnodes"] for e in _entries_below(nodes, sub)]


def _tensor(path: Path) -> np.ndarray:
    return torch.load(path, weights_only=True).double().numpy()


def _thousandth(npu: np.ndarray, bench: np.ndarray) -> float:
    with np.errstate(all="ignore"):
        rel = np.where(bench == 0, np.where(npu == 0, 0.0, np.inf), np.abs(npu - bench) / np.abs(bench))
    return float(np.mean(rel < 0.001))


@pytest.mark.slow
def test_clean_pair_has_no_node_coloured_by_the_layout(root):
    config = root / "clean.json"
    config.write_text(json.dumps({"npu_path": str(root / "tp" / "step0"), "bench_path": str(root / "single" / "step0"),
                                  "tp": 2}))
    assert cli.main(["-f", "pytorch", "graph", "-i", str(config), "-o", str(root / "clean")]) == 0
    document, view = _read(root / "clean")
    nodes = document["NPU"]["node"]
    assert document["task"] == "all"
    assert nodes[FC1]["data"]["merged_ranks"] == view["npu"]["nodes"][FC1]["ranks"] == "0,1"
    assert nodes[FC1]["output_data"][f"{FC1}.output.0"]["shape"] == "[2, 6, 32]"  # both ranks' columns
    unmatched = {n for n, v in nodes.items() if n != "DefaultModel" and "precision_index" not in v["data"]}
    assert all(n.startswith("Tensor.view_as.") for n in unmatched)  # DTensor's own calls, where recorded
    coloured = [n for n, v in nodes.items() if color_of(TENSOR, v["data"].get("precision_index")) not in (LOWEST, GREY)]
    assert not [n for n in coloured if ".forward" in n]
    # the HTML view colours by the first divergence's rule: nothing is beyond rounding, nothing is red
    assert not [n for n, v in view["npu"]["nodes"].items() if v["color"] == RED]
    # 1.1.1's tensor index has no rounding rule: a value that is zero up to rounding (the gradient of k's bias,
    # which softmax makes zero) differs by summation order between layouts. Such a node may be coloured, but
    # the compare of the same pair must find every one of its values equal up to rounding.
    paths = {"npu_path": root / "tp" / "step0", "bench_path": root / "single" / "step0", "stack_path": None}
    compare = run_compare(load_pt, paths, root / "clean_compare", CompareOptions(workers=1, progress=False))
    assert compare.first_divergence is None and compare.not_compared == 0
    rows = {}
    for result in compare.results:
        if result.npu is not None:
            rows.setdefault(result.npu.entry, []).append(result)
    for node_id in coloured:
        entries = _entries_below(nodes, node_id)
        assert entries and not [r.npu.name for e in entries for r in rows[e] if r.diverges], node_id


@pytest.mark.slow
def test_fault_on_rank1_shard_colours_fc1(root):
    config = root / "fault.json"
    config.write_text(json.dumps({"npu_path": str(root / "tp" / "step1"),
                                  "bench_path": str(root / "single" / "step0" / "rank")}))
    run_graph(config, root / "fault", load_pt, CompareOptions(workers=1, progress=False))  # layout read from dump
    document, view = _read(root / "fault")
    nodes = document["NPU"]["node"]
    fc1 = nodes[FC1]
    assert fc1["data"]["merged_ranks"] == "0,1"
    ranks = [root / "tp" / "step1" / f"rank{r}" / "dump_tensor_data" for r in (0, 1)]
    bench = root / "single" / "step0" / "rank" / "dump_tensor_data"
    output = np.concatenate([_tensor(d / f"{FC1}.output.0.pt") for d in ranks], axis=-1)
    low_out = _thousandth(output, _tensor(bench / f"{FC1}.output.0.pt"))
    low_in = _thousandth(_tensor(ranks[0] / f"{FC1}.input.0.pt"), _tensor(bench / f"{FC1}.input.0.pt"))
    assert fc1["data"]["precision_index"] == pytest.approx(min(1.0, max(0.0, low_in - low_out)), abs=1e-12)
    assert color_of(TENSOR, fc1["data"]["precision_index"]) not in (LOWEST, GREY)
    order = list(json.loads((root / "tp" / "step1" / "rank0" / "dump.json").read_text())["data"])
    before = order[:order.index(FC1)]
    assert [n for n in before if color_of(TENSOR, nodes[n]["data"].get("precision_index")) not in (LOWEST, GREY)] == []
    first = view["first"]  # the HTML opens the compare's first divergence: fc1's linear, inside fc1's node
    assert first == FC1 or nodes[first]["upnode"] == FC1
    assert view["npu"]["nodes"][FC1]["ranks"] == "0,1"
    assert view["npu"]["nodes"][FC1]["color"] == RED and float(fc1["data"]["rounding_excess"]) > 1
