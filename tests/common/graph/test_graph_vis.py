"""``msprobe graph``: the .vis documents against msprobe 1.1.1's own (tests/data/graph_111), the precision
index against float64 numpy references, L1 stack grouping, backward placement, ``-oc``, directory rules.

The inputs are copies of 1.1.1's reference dumps (tests/data/reference-outputs); the fixtures are what
1.1.1's ``msprobe -f pytorch graph`` wrote for the same inputs (see tests/data/README.md).
"""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from msprobe.core import cli
from msprobe.core.compare.pipeline import CompareOptions
from msprobe.core.graph import run_graph

pytestmark = pytest.mark.frameworks("pytorch")  # the graph command comes with a framework

DATA = Path(__file__).parents[2] / "data"
REFERENCE = DATA / "reference-outputs"
WITH_TENSORS = DATA.parent / "pytorch" / "data" / "compare_ref"  # 1.1.1's tensor L1 dumps with their .pt files
FIXTURES = DATA / "graph_111"
MOVED = {"Functional.conv2d.0.backward"}  # 1.1.1 left it at the root: its backward-parent rule misses APIs


def no_loader(path, spec):
    raise AssertionError("a statistics/md5 graph compare must not load tensor files")


def dump_dir(tmp_path: Path, name: str, framework: str = "pytorch", source: Path = REFERENCE) -> Path:
    target = tmp_path / name
    if not target.exists():
        shutil.copytree(source / framework / name / "step0" / "rank", target)
    return target


def graph(tmp_path: Path, npu: Path, bench: Path | None = None, loader=no_loader, overflow: bool = False,
          out: str = "out") -> dict:
    param = {"npu_path": str(npu)} | ({"bench_path": str(bench)} if bench else {})
    config = tmp_path / f"input_{out}.json"
    config.write_text(json.dumps(param))
    written = run_graph(config, tmp_path / out, loader, CompareOptions(progress=False), overflow)
    assert len(written) == 1 and written[0].html.is_file()
    return json.loads(written[0].vis.read_text())


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.vis").read_text())


def graphs(document: dict) -> list[dict]:
    return [document["NPU"], document["Bench"]] if "NPU" in document else [document]


def assert_same_structure(ours: dict, ref: dict) -> None:
    """Same keys, node ids, node fields, nesting and argument names as 1.1.1's document."""
    assert ours.keys() == ref.keys()
    for mine, theirs in zip(graphs(ours), graphs(ref)):
        assert mine.keys() == theirs.keys()
        assert mine["root"] == theirs["root"] == "DefaultModel"
        assert mine["node"].keys() == theirs["node"].keys()
        for node_id, ref_node in theirs["node"].items():
            node = mine["node"][node_id]
            optional = {"micro_step_id"} if node_id in MOVED else set()
            assert set(node) - optional == set(ref_node) - optional, node_id
            assert node["node_type"] == ref_node["node_type"], node_id
            if node_id in MOVED:
                assert node["upnode"] == "Module.conv.Conv2d.backward.0"
            else:
                assert node["upnode"] == ref_node["upnode"], node_id
                assert [s for s in node["subnodes"] if s not in MOVED] == [s for s in ref_node["subnodes"]
                                                                           if s not in MOVED], node_id
            # a backward node shows its forward twin's stack (1.1.1: none)
            assert node["stack_info"] == ref_node["stack_info"] or not ref_node["stack_info"] and "backward" in node_id
            for part in ("input_data", "output_data"):
                assert list(node[part]) == list(ref_node[part]), (node_id, part)
                for arg, ref_fields in ref_node[part].items():
                    # 1.1.1 writes a placeholder md5 "00000000" for every tensor of a statistics dump; we do not
                    assert set(ref_fields) - {"md5", "format"} <= set(node[part][arg]) | {"value"}, (node_id, arg)
                    if ref_fields.get("dtype", "").startswith("torch."):
                        for key in ("type", "dtype", "shape", "data_name"):
                            assert node[part][arg][key] == ref_fields[key], (node_id, arg, key)
                        for key in ("Max", "Min", "Mean", "Norm"):
                            assert _number(node[part][arg][key]) == pytest.approx(_number(ref_fields[key]), abs=1e-6)


def _number(text: str) -> float | str:
    try:
        value = float(text)
    except ValueError:
        return text  # True / False of a bool tensor, null
    return "nan" if math.isnan(value) else value


@pytest.mark.parametrize("level", ["mix", "L0"])
def test_build_has_the_structure_of_111(tmp_path, level):
    ours = graph(tmp_path, dump_dir(tmp_path, f"pt_statistics_{level}_fp32"))
    assert_same_structure(ours, fixture(f"build_statistics_{level}_fp32"))
    assert ours["MicroSteps"] == 1
    assert all(ours["node"][n]["micro_step_id"] == 0 for n in ours["node"]["DefaultModel"]["subnodes"])


def test_compare_summary_matches_111_indices(tmp_path):
    ours = graph(tmp_path, dump_dir(tmp_path, "pt_statistics_mix_bf16"), dump_dir(tmp_path, "pt_statistics_mix_fp32"))
    ref = fixture("compare_statistics_mix")
    assert_same_structure(ours, ref)
    assert ours["task"] == ref["task"] == "summary"
    assert {c: v["value"] for c, v in ours["Colors"].items()} == {c: v["value"] for c, v in ref["Colors"].items()}
    assert json.loads(ours["ToolTip"]).keys() == json.loads(ref["ToolTip"]).keys()
    for node_id, ref_node in ref["NPU"]["node"].items():
        node = ours["NPU"]["node"][node_id]
        expected = ref_node["data"].get("precision_index")
        assert node["data"].get("precision_index") == (None if expected is None else pytest.approx(expected, abs=1e-12))
        if node_id not in MOVED:
            assert node["matched_node_link"] == ref_node["matched_node_link"]
        for part in ("input_data", "output_data"):
            for arg, fields in ref_node[part].items():
                if fields.get("dtype", "").startswith("torch."):  # tensors: the same compare columns
                    assert {k for k in fields if "diff" in k or "Err" in k} <= set(node[part][arg])
    assert ours["NPU"]["node"]["Functional.conv2d.0.backward"]["matched_node_link"] == [
        "DefaultModel", "Module.conv.Conv2d.backward.0", "Functional.conv2d.0.backward"]


def _stats(entry: dict, part: str) -> list[dict]:
    keys = ("input_args", "input_kwargs", "input") if part == "input" else ("output",)
    values = [v for k in keys for v in (entry.get(k) or [])]
    return [v for v in values if isinstance(v, dict) and "Max" in v]


def test_summary_index_against_numpy(tmp_path):
    npu, bench = dump_dir(tmp_path, "pt_statistics_mix_bf16"), dump_dir(tmp_path, "pt_statistics_mix_fp32")
    ours = graph(tmp_path, npu, bench)
    npu_data = json.loads((npu / "dump.json").read_text())["data"]
    bench_data = json.loads((bench / "dump.json").read_text())["data"]
    for name in ("Functional.linear.0.forward", "Module.fc.Linear.forward.0", "Functional.linear.0.backward"):
        n = np.array([[s[k] for k in ("Max", "Min", "Mean", "Norm")] for s in _stats(npu_data[name], "output")],
                     dtype=np.float64)
        b = np.array([[s[k] for k in ("Max", "Min", "Mean", "Norm")] for s in _stats(bench_data[name], "output")],
                     dtype=np.float64)
        small = np.abs(n) <= np.where([[s["dtype"] == "torch.float32"] * 4 for s in _stats(npu_data[name], "output")],
                                      1e-6, 1e-3)
        rel = np.where(small, (np.abs(n - b) > 1e-3).astype(np.float64), np.abs(n - b) / np.abs(b))
        assert ours["NPU"]["node"][name]["data"]["precision_index"] == pytest.approx(min(1.0, rel.max()), rel=1e-12)


def test_tensor_index_against_numpy(tmp_path):
    torch = pytest.importorskip("torch")
    from msprobe.pytorch.tensor_files import load_pt

    npu = dump_dir(tmp_path, "pt_tensor_L1_bf16", "", WITH_TENSORS)
    bench = dump_dir(tmp_path, "pt_tensor_L1_fp32", "", WITH_TENSORS)
    ours = graph(tmp_path, npu, bench, loader=load_pt)
    assert ours["task"] == "all"
    assert ours["Colors"].keys() == fixture("compare_tensor_mix")["Colors"].keys()
    npu_data = json.loads((npu / "dump.json").read_text())["data"]

    def ratio(entry_name: str, side: dict) -> float:
        n = torch.load(npu / "dump_tensor_data" / side["data_name"], weights_only=True).double().numpy()
        b = torch.load(bench / "dump_tensor_data" / side["data_name"], weights_only=True).double().numpy()
        with np.errstate(all="ignore"):
            rel = np.where(b == 0, np.where(n == 0, 0.0, np.inf), np.abs(n - b) / np.abs(b))
        return float(np.mean(rel < 0.001))

    name = "Functional.linear.0.forward"
    entry = npu_data[name]
    low_in = min([1.0] + [ratio(name, v) for v in _stats(entry, "input")])
    low_out = min([1.0] + [ratio(name, v) for v in _stats(entry, "output")])
    node = ours["NPU"]["node"][name]
    assert node["data"]["precision_index"] == pytest.approx(min(1.0, max(0.0, low_in - low_out)), abs=1e-12)
    assert set(fixture("compare_tensor_mix")["NPU"]["node"][name]["output_data"][f"{name}.output.0"]) - {"md5"} \
        == set(node["output_data"][f"{name}.output.0"])


def test_l1_is_grouped_by_stack_not_root_only(tmp_path, msprobe_log):
    npu, bench = dump_dir(tmp_path, "pt_md5_L1_bf16"), dump_dir(tmp_path, "pt_md5_L1_fp32")
    ours = graph(tmp_path, npu, bench)
    assert fixture("compare_md5_L1")["NPU"]["node"].keys() == {"DefaultModel"}  # what 1.1.1 draws for L1
    nodes = ours["NPU"]["node"]
    entries = json.loads((npu / "dump.json").read_text())["data"]
    assert set(entries) <= set(nodes)
    assert nodes["Functional.linear.0.forward"]["upnode"] == "Module.linear.forward.0"
    assert nodes["Module.linear.forward.0"]["upnode"] == "Module.mk_pt.forward.0"
    assert nodes["Functional.conv2d.0.forward"]["upnode"] == "Module.conv.forward.0"
    assert nodes["Functional.relu.0.forward"]["upnode"] == "Module.mk_pt.forward.0"
    assert nodes["Functional.linear.0.backward"]["upnode"] == "Module.linear.backward.0"
    assert nodes["Module.linear.backward.0"]["upnode"] == "Module.mk_pt.backward.0"
    assert "approximate" in msprobe_log.text()
    # md5 mode: index 1 exactly when every argument's checksum is the bench's
    bench_entries = json.loads((bench / "dump.json").read_text())["data"]

    def md5s(entry: dict) -> list:
        return re.findall(r'"md5": "([0-9a-f]{8})"', json.dumps(entry))

    for name, entry in entries.items():
        same = md5s(entry) == md5s(bench_entries[name])
        assert nodes[name]["data"]["precision_index"] == (1.0 if same else 0.0), name
        assert nodes[name]["data"]["Result"] == ("pass" if same else "Different")


def test_without_stack_apis_stay_in_call_order(tmp_path, msprobe_log):
    npu = dump_dir(tmp_path, "pt_statistics_L1_fp32")
    (npu / "stack.json").unlink()
    nodes = graph(tmp_path, npu)["node"]
    entries = list(json.loads((npu / "dump.json").read_text())["data"])
    assert nodes["DefaultModel"]["subnodes"] == ["Apis_Between_Modules.0"]
    assert nodes["Apis_Between_Modules.0"]["subnodes"] == entries
    assert "call order" in msprobe_log.text()


def _level(entry: dict, keys: tuple[str, ...]) -> str | None:
    def bad(part: str) -> bool:
        return any(not math.isfinite(float(s[k])) for s in _stats(entry, part) for k in keys if s.get(k) is not None)

    return {(False, True): "critical", (True, True): "high", (True, False): "medium"}.get((bad("input"),
                                                                                          bad("output")))


def test_overflow_levels(tmp_path):
    npu = dump_dir(tmp_path, "pt_overflow_check_L1_fp32")
    nodes = graph(tmp_path, npu, overflow=True)["node"]
    data = json.loads((npu / "dump.json").read_text())["data"]
    for name, entry in data.items():
        assert nodes[name]["data"].get("overflow_level") == _level(entry, ("Max", "Min")), name
    # its input holds no inf element (Max 7.2e37), only an overflowed Mean/Norm: this call made the inf
    assert nodes["Tensor.__mul__.1.forward"]["data"]["overflow_level"] == "critical"
    assert "overflow_level" not in graph(tmp_path, npu, out="plain")["node"]["Tensor.__mul__.1.forward"]["data"]


def test_overflow_levels_against_111(tmp_path):
    """A mix dump whose activations overflow, written by 1.1.1 (graph_111/overflow_mix), and 1.1.1's -oc graph
    of it. 1.1.1's levels follow from all four statistics of forward entries (it reads no inputs of backward
    ones); ours from Max and Min, so a Norm that overflowed on finite values does not make an origin."""
    npu = tmp_path / "ovf"
    shutil.copytree(FIXTURES / "overflow_mix", npu)
    ours = graph(tmp_path, npu, overflow=True)
    ref = fixture("build_overflow_mix")
    assert_same_structure(ours, ref)
    data = json.loads((npu / "dump.json").read_text())["data"]
    forward = [n for n in data if n.endswith(".forward") or ".forward." in n]
    for name in forward:
        assert ref["node"][name]["data"].get("overflow_level") == _level(data[name], ("Max", "Min", "Mean", "Norm"))
    for name in data:
        assert ours["node"][name]["data"].get("overflow_level") == _level(data[name], ("Max", "Min")), name
    assert ref["node"]["Tensor.__mul__.0.forward"]["data"]["overflow_level"] == "critical"  # its Norm overflowed
    assert ours["node"]["Tensor.__mul__.1.forward"]["data"]["overflow_level"] == "critical"  # its output holds inf


def _cli(tmp_path: Path, param: dict, framework: str = "pytorch", *extra: str) -> int:
    config = tmp_path / "input.json"
    config.write_text(json.dumps(param))
    return cli.main(["-f", framework, "graph", "-i", str(config), "-o", str(tmp_path / "cli_out"), *extra])


def test_step_and_rank_directories(tmp_path):
    for run in ("a", "b"):
        for step in (0, 1):
            for rank in (0, 1):
                shutil.copytree(REFERENCE / "pytorch" / "pt_statistics_L0_fp32" / "step0" / "rank",
                                tmp_path / run / f"step{step}" / f"rank{rank}")
    assert _cli(tmp_path, {"npu_path": str(tmp_path / "a")}) == 0
    names = sorted(re.sub(r"_\d{14}", "", p.name) for p in (tmp_path / "cli_out").glob("*.vis"))
    assert names == [f"build_step{s}_rank{r}.vis" for s in (0, 1) for r in (0, 1)]
    assert _cli(tmp_path, {"npu_path": str(tmp_path / "a" / "step1"), "bench_path": str(tmp_path / "b" / "step1")}) == 0
    assert len(list((tmp_path / "cli_out").glob("compare_rank*.vis"))) == 2
    (tmp_path / "b" / "step1" / "rank1").rename(tmp_path / "b" / "step1" / "rank2")  # (one rank: merged)
    assert _cli(tmp_path, {"npu_path": str(tmp_path / "a" / "step1"), "bench_path": str(tmp_path / "b" / "step1")}) == 2


@pytest.mark.parametrize(("param", "message"), [
    ({"npu_path": 3}, "'npu_path' is 3"),
    ({"npu_path": "/nonexistent/dir"}, "is not a directory"),
    ({"npu_dir": "x"}, "unknown key 'npu_dir'"),
])
def test_bad_input_is_named(tmp_path, msprobe_log, param, message):
    assert _cli(tmp_path, param) == 2
    assert message in msprobe_log.text()
    assert not list((tmp_path / "cli_out").glob("*")) if (tmp_path / "cli_out").exists() else True


@pytest.mark.frameworks("mindspore")
def test_mindspore_graph_command(tmp_path):
    npu = dump_dir(tmp_path, "ms_stat_mix", "mindspore")
    assert _cli(tmp_path, {"npu_path": str(npu), "bench_path": str(npu)}, "mindspore") == 0
    document = json.loads(next((tmp_path / "cli_out").glob("compare_*.vis")).read_text())
    nodes = document["NPU"]["node"]
    assert nodes["Primitive.matmul.MatMul.0.forward"]["upnode"] == "Cell.fc.Dense.forward.0"
    assert nodes["Primitive.matmul.MatMul.0.backward"]["upnode"] == "Cell.fc.Dense.backward.0"
    assert nodes["Primitive.relu.ReLU.0.backward"]["upnode"] == "Cell.relu.ReLU.backward.0"
    entries = json.loads((npu / "dump.json").read_text())["data"]
    assert all(nodes[name]["data"]["precision_index"] == 0 for name in entries)  # a dump against itself
    assert all(nodes[name]["matched_node_link"][-1] == name for name in entries)


def test_html_embeds_names_safely():
    from msprobe.core.graph import html
    from msprobe.core.graph.tree import build_graph

    name = "Tensor.x</script><script>alert(1)</script>.0.forward"
    graph = build_graph({name: {"input_args": [], "output": [None]}}, {}, {})
    page = html.render(html.View("build", graph, None, None, None, "<b>t</b>"))
    assert page.count("</script>") == 1 and "<script>alert" not in page and "<b>t</b>" not in page
    data = json.loads(re.search(r"const DATA = (.*);\n", page)[1])
    assert name in data["npu"]["nodes"]

