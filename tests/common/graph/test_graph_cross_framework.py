"""``msprobe -f mindspore graph``: a MindSpore port against its PyTorch original (same weights, level mix).

The graph pairs nodes through the compare pipeline's cross-framework aligner, so cells meet their modules
(``Cell.fc1.Linear`` ↔ ``Module.fc1.Linear``) and the ported calls inside them meet the originals; a
changed layer in the port is the node the HTML view opens first.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from msprobe.core import cli
from msprobe.core.lifecycle.debugger import BaseDebugger

pytestmark = pytest.mark.frameworks("pytorch", "mindspore")
torch = pytest.importorskip("torch")
ms = pytest.importorskip("mindspore")


class TorchMLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(6, 8), torch.nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(torch.nn.functional.relu(self.fc1(x)))


def ms_mlp(torch_model: TorchMLP, fault: bool, names: tuple[str, str] = ("fc1", "fc2")):
    from mindspore import Tensor, mint
    from mindspore import nn as mnn

    class MsMLP(mnn.Cell):
        def __init__(self) -> None:
            super().__init__()
            setattr(self, names[0], mint.nn.Linear(6, 8))
            setattr(self, names[1], mint.nn.Linear(8, 3))

        def construct(self, x):
            first, second = (getattr(self, n) for n in names)
            return second(mint.nn.functional.relu(first(x)))

    model = MsMLP()
    state = torch_model.state_dict()
    for name, param in model.parameters_and_names():
        name = name.replace(names[0], "fc1").replace(names[1], "fc2")
        value = state[name].detach().numpy() * (1.2 if fault and name == "fc2.weight" else 1.0)
        param.set_data(Tensor(value.astype(np.float32)))
    return model


def dump_both(root: Path, fault: bool, names: tuple[str, str] = ("fc1", "fc2")) -> tuple[Path, Path]:
    from mindspore import Tensor

    from msprobe.mindspore import PrecisionDebugger as MsDebugger
    from msprobe.pytorch import PrecisionDebugger as TorchDebugger

    torch.manual_seed(0)
    torch_model = TorchMLP()
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(2, 6)
    debugger = TorchDebugger(dump_path=str(root / "pt"), task="statistics", level="mix", step=[0])
    debugger.start(torch_model)
    torch_model(torch.tensor(x, requires_grad=True)).sum().backward()
    debugger.stop()
    debugger.step()
    BaseDebugger._active.finish()
    model = ms_mlp(torch_model, fault, names)
    debugger = MsDebugger(dump_path=str(root / "ms"), task="statistics", level="mix", step=[0])
    debugger.start(model)
    ms.grad(lambda a: model(a).sum())(Tensor(x))
    debugger.stop()
    debugger.step()
    BaseDebugger._active.finish()
    return root / "ms" / "step0" / "rank", root / "pt" / "step0" / "rank"


def graph(tmp_path: Path, fault: bool) -> tuple[dict, dict]:
    npu, bench = dump_both(tmp_path / ("bad" if fault else "good"), fault)
    config = tmp_path / "input.json"
    config.write_text(json.dumps({"npu_path": str(npu), "bench_path": str(bench)}))
    out = tmp_path / ("out_bad" if fault else "out_good")
    assert cli.main(["-f", "mindspore", "graph", "-i", str(config), "-o", str(out)]) == 0
    page = next(out.glob("*.html")).read_text()
    return json.loads(next(out.glob("*.vis")).read_text()), json.loads(re.search(r"const DATA = (.*);\n", page)[1])


def test_port_nodes_meet_their_originals(tmp_path):
    vis, _ = graph(tmp_path, fault=False)
    nodes = vis["NPU"]["node"]
    for layer in ("fc1", "fc2"):
        cell = f"Cell.{layer}.Linear.forward.0"
        assert nodes[cell]["matched_node_link"][-1] == f"Module.{layer}.Linear.forward.0"
        assert nodes[cell]["data"]["precision_index"] < 1e-5  # same weights: float32 rounding at most
        inner = [n for n in nodes[cell]["subnodes"] if nodes[n]["matched_node_link"]]
        assert inner and all(nodes[n]["matched_node_link"][-2] == f"Module.{layer}.Linear.forward.0" for n in inner)
    matched = [n for n, v in nodes.items() if v["matched_node_link"] and n != "DefaultModel"]
    assert len(matched) >= 6


def test_changed_layer_is_opened_first(tmp_path):
    vis, page = graph(tmp_path, fault=True)
    nodes = vis["NPU"]["node"]
    fc2 = "Cell.fc2.Linear.forward.0"
    assert page["first"] in (fc2, *nodes[fc2]["subnodes"])
    assert nodes["Cell.fc1.Linear.forward.0"]["data"]["precision_index"] < 1e-5
    assert nodes[fc2]["data"]["precision_index"] > 0.05


def test_layer_mapping_pairs_renamed_cells(tmp_path):
    """-lm: the port renamed fc1/fc2 to dense1/dense2; 1.1.1's layer-mapping yaml says so (TopLayer: the model)."""
    npu, bench = dump_both(tmp_path, False, ("dense1", "dense2"))
    (tmp_path / "layers.yaml").write_text("TopLayer:\n  dense1: fc1\n  dense2: fc2\n")
    config = tmp_path / "input.json"
    config.write_text(json.dumps({"npu_path": str(npu), "bench_path": str(bench)}))
    out = tmp_path / "out"
    assert cli.main(["-f", "mindspore", "graph", "-i", str(config), "-o", str(out), "-lm",
                     str(tmp_path / "layers.yaml")]) == 0
    nodes = json.loads(next(out.glob("*.vis")).read_text())["NPU"]["node"]
    for ms_name, pt_name in (("dense1", "fc1"), ("dense2", "fc2")):
        for direction in ("forward", "backward"):
            node = nodes[f"Cell.{ms_name}.Linear.{direction}.0"]
            assert node["matched_node_link"][-1] == f"Module.{pt_name}.Linear.{direction}.0"
            assert node["data"]["precision_index"] < 1e-5
