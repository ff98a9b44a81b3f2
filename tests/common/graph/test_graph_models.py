"""``msprobe graph`` on our own dumps of a real PyTorch model (CPU): mix nesting straight from construct.json,
L1 nesting from the stacks, and a compare against a run whose ``fc`` layer was changed, which the graph
colours and opens first."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from msprobe.core import cli

pytestmark = pytest.mark.frameworks("pytorch")
torch = pytest.importorskip("torch")
nn = torch.nn


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 3, 3, padding=1)
        self.block = nn.Sequential(nn.Linear(3 * 5 * 5, 16), nn.ReLU())
        self.fc = nn.Linear(16, 4)

    def forward(self, x):
        return self.fc(self.block(torch.relu(self.conv(x)).flatten(1)))


def dump(tmp_path: Path, name: str, level: str, fault: bool = False) -> Path:
    from msprobe.pytorch import PrecisionDebugger

    torch.manual_seed(0)
    model = Net()
    if fault:
        with torch.no_grad():
            model.fc.weight.mul_(1.5)
    x, y = torch.randn(2, 1, 5, 5, generator=torch.Generator().manual_seed(1)), torch.tensor([1, 3])
    debugger = PrecisionDebugger(dump_path=str(tmp_path / name), task="statistics", level=level, step=[0])
    debugger.start(model)
    nn.functional.cross_entropy(model(x), y).backward()
    debugger.stop()
    debugger.step()
    debugger.finish()
    return tmp_path / name / "step0" / "rank"


def run(tmp_path: Path, param: dict, out: str) -> tuple[dict, dict]:
    config = tmp_path / f"{out}.json"
    config.write_text(json.dumps(param))
    assert cli.main(["-f", "pytorch", "graph", "-i", str(config), "-o", str(tmp_path / out)]) == 0
    vis = json.loads(next((tmp_path / out).glob("*.vis")).read_text())
    page = next((tmp_path / out).glob("*.html")).read_text()
    data = json.loads(re.search(r"const DATA = (.*);\n", page).group(1))
    return vis, data


def test_mix_nesting_follows_construct_json(tmp_path):
    rank = dump(tmp_path, "mix", "mix")
    nodes = run(tmp_path, {"npu_path": str(rank)}, "out")[0]["node"]
    construct = json.loads((rank / "construct.json").read_text())
    entries = json.loads((rank / "dump.json").read_text())["data"]
    grads = [name for name in entries if ".parameters_grad." in name]
    assert grads and all(nodes[name]["upnode"] == name.replace(".parameters_grad.", ".backward.") for name in grads)
    for name in (n for n in entries if n not in grads):
        parent = construct.get(name)
        if parent:
            assert nodes[name]["upnode"] == parent, name
        else:
            assert nodes[name]["upnode"] in ("DefaultModel", *[n for n in nodes if n.startswith("Apis_Between")])
    linear = next(n for n in entries if n.startswith("Functional.linear.") and n.endswith(".forward"))
    assert nodes[linear]["upnode"] == "Module.block.0.Linear.forward.0"
    assert nodes["Module.block.0.Linear.forward.0"]["upnode"] == "Module.block.Sequential.forward.0"
    backward = linear.replace(".forward", ".backward")
    assert nodes[backward]["upnode"] == "Module.block.0.Linear.backward.0"


def test_l1_nesting_from_stacks(tmp_path):
    rank = dump(tmp_path, "l1", "L1")
    nodes = run(tmp_path, {"npu_path": str(rank)}, "out")[0]["node"]
    assert json.loads((rank / "construct.json").read_text()) == {}
    linears = [n for n in nodes if n.startswith("Functional.linear.") and n.endswith(".forward")]
    assert len(linears) == 2
    groups = [nodes[n]["upnode"] for n in linears]
    assert all(re.fullmatch(r"Module\.linear\.forward\.\d", g) for g in groups) and len(set(groups)) == 2
    sequential = nodes[groups[0]]["upnode"]  # block's Sequential.forward, from torch/nn/modules/container.py
    assert re.fullmatch(r"Module\.container\.forward\.\d", sequential)
    model = "Module.test_graph_models.forward.0"  # Net.forward, named after this file
    assert nodes[sequential]["upnode"] == nodes[groups[1]]["upnode"] == model
    assert nodes[model]["upnode"] == "DefaultModel"
    back = linears[1].replace(".forward", ".backward")
    assert nodes[back]["upnode"] == groups[1].replace(".forward.", ".backward.")


def test_compare_names_the_changed_layer(tmp_path):
    good, bad = dump(tmp_path, "good", "mix"), dump(tmp_path, "bad", "mix", fault=True)
    vis, page = run(tmp_path, {"npu_path": str(bad), "bench_path": str(good)}, "cmp")
    nodes = vis["NPU"]["node"]
    fc = "Module.fc.Linear.forward.0"
    assert page["first"] in (fc, *nodes[fc]["subnodes"])
    index = {n: v["data"].get("precision_index") for n, v in nodes.items()}
    before_fc = ["Module.conv.Conv2d.forward.0", "Module.block.Sequential.forward.0", "Module.block.0.Linear.forward.0"]
    assert all(index[n] == 0 for n in before_fc)
    assert index[fc] > 0.05
    assert page["npu"]["nodes"][fc]["color"] != "#FFFCF3"


def test_docs_example_runs(tmp_path, monkeypatch):
    """docs/graph.md: its Python block dumps the two runs, its msprobe lines draw and compare them."""
    import subprocess
    import sys

    doc = (Path(__file__).parents[3] / "docs" / "graph.md").read_text()
    code = re.findall(r"```python\n(.*?)```", doc, flags=re.S)[0]
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    monkeypatch.chdir(tmp_path)
    commands = re.findall(r"^msprobe (.*?)\s*(?:#.*)?$", re.findall(r"```bash\n(.*?)```", doc, flags=re.S)[0], re.M)
    assert len(commands) == 2
    for command in commands:
        assert cli.main(command.split()) == 0
    assert sorted(re.sub(r"_\d{14}", "", p.name) for p in (tmp_path / "graph_out").iterdir()) == [
        "build.html", "build.vis", "compare.html", "compare.vis"]
    nodes = json.loads(next((tmp_path / "graph_out").glob("compare_*.vis")).read_text())["NPU"]["node"]
    assert nodes["Module.head.0.Linear.forward.0"]["upnode"] == "Module.head.Sequential.forward.0"
    assert all("precision_index" in nodes[n]["data"] for n in nodes if n.startswith("Module."))
