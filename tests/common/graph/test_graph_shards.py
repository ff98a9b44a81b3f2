"""``msprobe graph`` on a tensor-parallel step: its ranks are merged into one dump (compare.shards) before the
graph is built, as compare merges them; on synthetic dumps whose numbers are checked against float64 numpy.

The dumps are test_compare_shards' Megatron MLP (colwise linear, relu, rowwise linear) on two ranks and on
one, with an optional fault in rank 1's weight shard; each node's statistics, shape, precision index and
merged ranks must be those of the whole arrays computed directly.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from msprobe.core import cli
from msprobe.core.compare.pipeline import CompareOptions
from msprobe.core.compare.read.reader import CompareError
from msprobe.core.compare.read.shards import NO_LAYOUT, Layout
from msprobe.core.compare.read.tensorfile import load_npy
from msprobe.core.graph import run_graph
from msprobe.core.graph.vis import text

sys.path.insert(0, str(Path(__file__).parents[1] / "compare"))  # test_compare_shards' synthetic runs (importlib mode)
from test_compare_shards import _mlp_run, _write, stats, value  # noqa: E402

LINEAR0, LINEAR1 = "Functional.linear.0.forward", "Functional.linear.1.forward"


def no_loader(path, spec):
    raise AssertionError("a statistics graph compare must not load tensor files")


def graph(tmp_path: Path, param: dict, out: str, loader=no_loader, layout: Layout = NO_LAYOUT) -> tuple[str, dict]:
    """Run the graph command on ``param`` (input.json); the one graph's stem (without its time) and .vis."""
    config = tmp_path / f"{out}.json"
    config.write_text(json.dumps({k: str(v) if isinstance(v, Path) else v for k, v in param.items()}))
    written = run_graph(config, tmp_path / out, loader, CompareOptions(progress=False), layout=layout)
    assert len(written) == 1 and written[0].html.is_file()
    return re.sub(r"_\d{14}$", "", written[0].vis.stem), json.loads(written[0].vis.read_text())


def whole_mlp(fault: float) -> dict[str, np.ndarray]:
    """The whole arrays of _mlp_run's values, from its own weights (the fault scales rank 1's half of w1)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 8)).astype(np.float32)
    w1 = (rng.standard_normal((16, 8)) / 3).astype(np.float32)
    w2 = (rng.standard_normal((8, 16)) / 4).astype(np.float32)
    if fault:
        w1[8:] = (w1[8:] * np.float32(fault)).astype(np.float32)
    h_pre = x @ w1.T
    return {"x": x, "w1": w1, "h_pre": h_pre, "h": np.maximum(h_pre, 0), "w2": w2}


def summary_index(npu: np.ndarray, bench: np.ndarray) -> float:
    """1.1.1's summary index of one output: the largest relative error of its four statistics, capped at 1."""
    n, b = stats(npu), stats(bench)
    assert all(abs(v) > 1e-3 for v in n.values())  # no small-value rule involved
    return min(1.0, max(abs(n[k] - b[k]) / abs(b[k]) for k in n))


def thousandth(npu: np.ndarray, bench: np.ndarray) -> float:
    n, b = npu.astype(np.float64), bench.astype(np.float64)
    with np.errstate(all="ignore"):
        rel = np.where(b == 0, np.where(n == 0, 0.0, np.inf), np.abs(n - b) / np.abs(b))
    return float(np.mean(rel < 0.001))


@pytest.mark.parametrize("task", ["statistics", "tensor"])
@pytest.mark.parametrize("fault", [0, 1.05])
def test_tp_step_against_one_rank_is_one_graph_of_whole_tensors(tmp_path, task, fault):
    _mlp_run(tmp_path / "single", task, 1, 0)
    _mlp_run(tmp_path / "tp", task, 2, fault)
    loader = load_npy if task == "tensor" else no_loader
    stem, document = graph(tmp_path, {"npu_path": tmp_path / "tp", "bench_path": tmp_path / "single" / "rank"},
                           "out", loader)
    assert stem == "compare_merged"
    npu, bench = whole_mlp(fault), whole_mlp(0)
    node = document["NPU"]["node"][LINEAR0]
    assert node["data"]["merged_ranks"] == "0,1"
    out = node["output_data"][f"{LINEAR0}.output.0"]
    assert out["shape"] == "[6, 16]" and out["merged"] == "merged from ranks 0,1: concatenated along dim 1 (by shape)"
    for key, want in stats(npu["h_pre"]).items():
        assert float(out[key]) == pytest.approx(float(text(want)), rel=1e-6)
    weight = node["input_data"][f"{LINEAR0}.input.1"]
    assert weight["shape"] == "[16, 8]" and weight["merged"] == "merged from ranks 0,1: Shard(0) (recorded)"
    assert "source" not in weight and "shards" not in weight and "dtensor" not in weight and weight["data_name"] == "-1"
    if task == "statistics":
        want = summary_index(npu["h_pre"], bench["h_pre"])
    else:
        low_in = min(thousandth(npu[k], bench[k]) for k in ("x", "w1"))
        want = max(0.0, low_in - thousandth(npu["h_pre"], bench["h_pre"]))
    assert node["data"]["precision_index"] == pytest.approx(want, abs=1e-9)
    assert (want > 0.01) == (task == "statistics" and fault != 0)  # the fault moves the statistics it made
    assert document["NPU"]["node"][LINEAR1]["data"]["merged_ranks"] == "0,1"
    assert "merged_ranks" not in document["Bench"]["node"][LINEAR0]["data"]  # the one-rank side is as dumped


def test_the_bench_side_may_be_the_merged_one_and_steps_are_paired(tmp_path):
    _mlp_run(tmp_path / "single" / "step0", "statistics", 1, 0)
    _mlp_run(tmp_path / "tp" / "step0", "statistics", 2, 0)
    stem, document = graph(tmp_path, {"npu_path": tmp_path / "single", "bench_path": tmp_path / "tp"}, "out")
    assert stem == "compare_step0_merged"
    assert "merged_ranks" not in document["NPU"]["node"][LINEAR0]["data"]
    assert document["Bench"]["node"][LINEAR0]["data"]["merged_ranks"] == "0,1"
    assert document["NPU"]["node"][LINEAR0]["data"]["precision_index"] == pytest.approx(0, abs=1e-6)


def test_a_stated_layout_merges_a_build_by_recorded_placements(tmp_path):
    _mlp_run(tmp_path / "tp", "statistics", 2, 0)
    stem, document = graph(tmp_path, {"npu_path": tmp_path / "tp", "tp": 2}, "out")
    assert stem == "build_merged"
    node = document["node"][LINEAR0]
    weight, out = node["input_data"][f"{LINEAR0}.input.1"], node["output_data"][f"{LINEAR0}.output.0"]
    assert weight["shape"] == "[16, 8]" and float(weight["Norm"]) == pytest.approx(
        float(text(stats(whole_mlp(0)["w1"])["Norm"])), rel=1e-6)
    assert out["shape"] == "[6, 8]" and out["merged"].startswith("merged from ranks 0: rank 0's")  # no other run


def _stage_run(rank_dir: Path, layers: list[int], arrays: list[np.ndarray]) -> None:
    """A level-mix statistics dump of ``layers`` (one Linear module, one linear call each) with its construct.json."""
    entries, parents, calls = {}, {}, 0
    for layer in layers:
        module, api = f"Module.layers{layer}.Linear.forward.0", f"Functional.linear.{calls}.forward"
        entries[module] = {"input_args": [value(arrays[layer])], "input_kwargs": {},
                           "output": [value(arrays[layer + 1])]}
        entries[api] = entries[module]
        parents.update({module: None, api: module})
        calls += 1
    _write(rank_dir, "statistics", entries, {})
    (rank_dir / "construct.json").write_text(json.dumps(parents))


def test_pipeline_stages_are_one_tree_with_the_one_rank_run_numbering(tmp_path):
    arrays = [np.random.default_rng(i).standard_normal((4, 8)).astype(np.float32) for i in range(3)]
    _stage_run(tmp_path / "single" / "rank", [0, 1], arrays)
    _stage_run(tmp_path / "pp" / "rank0", [0], arrays)
    _stage_run(tmp_path / "pp" / "rank1", [1], arrays)
    stem, document = graph(tmp_path, {"npu_path": tmp_path / "pp", "bench_path": tmp_path / "single", "pp": 2}, "out")
    assert stem == "compare_merged"
    nodes = document["NPU"]["node"]
    assert nodes["Functional.linear.1.forward"]["upnode"] == "Module.layers1.Linear.forward.0"  # stage 1's call 0
    assert nodes["Functional.linear.1.forward"]["data"] == {"merged_ranks": "1", "precision_index": 0.0,
                                                           "rounding_excess": 0.0}
    assert nodes["Functional.linear.0.forward"]["upnode"] == "Module.layers0.Linear.forward.0"
    assert nodes["Module.layers1.Linear.forward.0"]["matched_node_link"][-1] == "Module.layers1.Linear.forward.0"


@pytest.mark.frameworks("pytorch")  # the graph command comes with a framework
def test_flags_win_over_input_keys_and_bad_layouts_are_named(tmp_path):
    _mlp_run(tmp_path / "single", "statistics", 1, 0)
    _mlp_run(tmp_path / "tp", "statistics", 2, 0)
    param = {"npu_path": tmp_path / "tp", "bench_path": tmp_path / "single" / "rank", "tp": 3}
    with pytest.raises(CompareError, match=r"tp=3 × pp=1 = 3 ranks, but the step has 2"):
        graph(tmp_path, param, "three")
    assert graph(tmp_path, param, "flag", layout=Layout(tp=2))[0] == "compare_merged"
    with pytest.raises(CompareError, match=r"graph input file .*: 'tp' is 0; allowed: a positive integer"):
        graph(tmp_path, {**param, "tp": 0}, "zero")
    shutil.copytree(tmp_path / "tp", tmp_path / "tp_b")
    with pytest.raises(CompareError, match="tp / pp describe a multi-rank run compared with a one-rank run"):
        graph(tmp_path, {"npu_path": tmp_path / "tp", "bench_path": tmp_path / "tp_b", "tp": 2}, "both")
    config = tmp_path / "cli.json"
    config.write_text(json.dumps({"npu_path": str(tmp_path / "tp"), "bench_path": str(tmp_path / "single" / "rank")}))
    base = ["-f", "pytorch", "graph", "-i", str(config), "-o", str(tmp_path / "cli")]
    assert cli.main([*base, "--tp", "2"]) == 0
    assert [re.sub(r"_\d{14}", "", p.name) for p in (tmp_path / "cli").glob("*.vis")] == ["compare_merged.vis"]
    with pytest.raises(SystemExit) as exc:
        cli.main([*base, "--pp", "0"])
    assert exc.value.code == 2
