"""task overflow_check on PyTorch (docs/overflow_check.md#pytorch): only overflowing entries are written, the first
origin is named and saved, inherited overflows are labelled, overflow_nums is honoured."""

from __future__ import annotations

import json
import math

import numpy as np
import torch
from torch import nn

from msprobe.pytorch import PrecisionDebugger


class ScaledNet(nn.Module):
    """A conv net whose activations are scaled past float32's range after the convolution."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3, padding=1)
        self.fc = nn.Linear(2 * 4 * 4, 3)

    def forward(self, x):
        h = torch.relu(self.conv(x))
        h = h * 1e38  # fp32 max is 3.4e38: the elements above 3.4 become inf
        return self.fc(torch.tanh(h).flatten(1) + h.flatten(1))


def _run(tmp_path, overflow_nums: int, level: str = "L1", steps: int = 1):
    config = {"task": "overflow_check", "dump_path": str(tmp_path / "out"), "level": level,
              "overflow_check": {"overflow_nums": overflow_nums}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    torch.manual_seed(0)
    model = ScaledNet()
    debugger = PrecisionDebugger(config_path=str(tmp_path / "config.json"), model=model)
    x = torch.randn(2, 1, 4, 4) * 10
    for _ in range(steps):
        debugger.start()
        model(x).sum().backward()
        debugger.stop()
        debugger.step()
    return tmp_path / "out" / "step0" / "rank", x, model


def _read(rank_dir, name):
    return json.loads((rank_dir / name).read_text())


def test_first_origin_is_named_saved_and_alone(tmp_path, msprobe_log):
    rank_dir, x, model = _run(tmp_path, overflow_nums=1)
    data = _read(rank_dir, "dump.json")["data"]
    assert list(data) == ["Tensor.__mul__.0.forward"]
    assert _read(rank_dir, "overflow.json") == {"Tensor.__mul__.0.forward": "origin"}
    assert "Tensor.__mul__.0.forward" in _read(rank_dir, "stack.json")
    assert "Tensor.__mul__.0.forward is the first origin" in msprobe_log.text()
    assert "overflow_nums=1 reached" in msprobe_log.text()
    # the saved tensors are the real ones: input recomputed independently in float64, output = input * 1e38
    conv = torch.nn.functional.conv2d(x.double(), model.conv.weight.double(), model.conv.bias.double(), padding=1)
    relu_conv = np.maximum(conv.detach().numpy(), 0)
    saved_in = torch.load(rank_dir / "dump_tensor_data" / "Tensor.__mul__.0.forward.input.0.pt").numpy()
    np.testing.assert_allclose(saved_in, relu_conv, rtol=1e-5, atol=1e-5)
    saved_out = torch.load(rank_dir / "dump_tensor_data" / "Tensor.__mul__.0.forward.output.0.pt").numpy()
    beyond_fp32 = saved_in.astype(np.float64) * 1e38 > np.finfo(np.float32).max
    assert beyond_fp32.any() and np.array_equal(np.isinf(saved_out), beyond_fp32)
    out_record = data["Tensor.__mul__.0.forward"]["output"][0]
    assert out_record["Max"] == math.inf and out_record["data_name"] == "Tensor.__mul__.0.forward.output.0.pt"
    assert math.isfinite(out_record["Max_except_inf_nan"])


def test_inherited_overflows_are_labelled_and_backward_checked(tmp_path):
    rank_dir, _, _ = _run(tmp_path, overflow_nums=-1)
    kinds = _read(rank_dir, "overflow.json")
    assert kinds["Tensor.__mul__.0.forward"] == "origin"
    # every later forward received the inf: inherited, never origin
    later = [name for name in kinds if name.endswith("forward") and name != "Tensor.__mul__.0.forward"]
    assert later and all(kinds[name] == "inherited" for name in later)
    assert "Functional.linear.0.forward" in later and "Torch.relu.0.forward" not in kinds
    assert [n for n, k in kinds.items() if k == "origin" and n.endswith("forward")] == ["Tensor.__mul__.0.forward"]
    assert any(name.endswith("backward") for name in kinds)  # gradients through inf are NaN/inf as well
    data = _read(rank_dir, "dump.json")["data"]
    assert set(data) == set(kinds)


def test_overflow_nums_stops_collection_and_finishes(tmp_path, msprobe_log):
    rank_dir, _, _ = _run(tmp_path, overflow_nums=3, steps=2)
    assert len(_read(rank_dir, "dump.json")["data"]) == 3
    assert not (tmp_path / "out" / "step1").exists()
    assert "overflow_nums=3 reached" in msprobe_log.text()
    assert "msprobe has finished" in msprobe_log.text()


def test_module_level_l0(tmp_path):
    rank_dir, _, _ = _run(tmp_path, overflow_nums=-1, level="L0")
    kinds = _read(rank_dir, "overflow.json")
    # the Linear is the first module whose output overflows, but the inf came in with its input
    assert kinds["Module.fc.Linear.forward.0"] == "inherited"
    assert not any(name.startswith("Module.conv") and name.endswith("forward.0") for name in kinds)


def test_no_overflow_writes_no_entries(tmp_path):
    config_dir = tmp_path / "out"
    debugger = PrecisionDebugger(task="overflow_check", dump_path=str(config_dir))
    model = nn.Linear(3, 2)
    debugger.start(model)
    model(torch.ones(1, 3)).sum().backward()
    debugger.stop()
    assert _read(config_dir / "step0" / "rank", "dump.json")["data"] == {}
    assert not (config_dir / "step0" / "rank" / "overflow.json").exists()
