"""task overflow_check on MindSpore PyNative (docs/overflow_check.md#mindspore-pynative): origin named and saved,
inherited labelled, overflow_nums honoured."""

from __future__ import annotations

import json

import mindspore as ms
import numpy as np
from mindspore import nn, ops

from msprobe.mindspore import PrecisionDebugger


class ScaledNet(nn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Dense(4, 3)

    def construct(self, x):
        h = ops.relu(self.fc(x))
        h = h * 1e38
        return ops.tanh(h) + h


def _run(tmp_path, overflow_nums: int):
    ms.set_seed(0)
    net = ScaledNet()
    config = {"task": "overflow_check", "dump_path": str(tmp_path / "out"),
              "overflow_check": {"overflow_nums": overflow_nums}}
    (tmp_path / "c.json").write_text(json.dumps(config))
    debugger = PrecisionDebugger(config_path=str(tmp_path / "c.json"))
    x = ms.Tensor(np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32) * 10)
    debugger.start(net)
    net(x)
    debugger.stop()
    debugger.step()
    return tmp_path / "out" / "step0" / "rank"


def test_origin_then_inherited(tmp_path, msprobe_log):
    rank_dir = _run(tmp_path, overflow_nums=-1)
    kinds = json.loads((rank_dir / "overflow.json").read_text())
    first, *rest = kinds
    assert (first, kinds[first]) == ("Tensor.__mul__.0.forward", "origin")
    assert rest and all(kinds[name] == "inherited" for name in rest)
    assert "Tensor.__mul__.0.forward is the first origin" in msprobe_log.text()
    data = json.loads((rank_dir / "dump.json").read_text())["data"]
    assert list(data) == list(kinds)
    saved_in = np.load(rank_dir / "dump_tensor_data" / "Tensor.__mul__.0.forward.input.0.npy")
    saved_out = np.load(rank_dir / "dump_tensor_data" / "Tensor.__mul__.0.forward.output.0.npy")
    assert np.array_equal(np.isinf(saved_out), saved_in.astype(np.float64) * 1e38 > np.finfo(np.float32).max)


def test_overflow_nums_honoured(tmp_path, msprobe_log):
    rank_dir = _run(tmp_path, overflow_nums=1)
    assert list(json.loads((rank_dir / "dump.json").read_text())["data"]) == ["Tensor.__mul__.0.forward"]
    assert "overflow_nums=1 reached" in msprobe_log.text()
