"""register_custom_api on MindSpore (docs/mindspore/dump.md#custom-apis): a Python function of a library module
is recorded as ``{prefix}.{api}`` like a built-in API — counted, its insides not recorded separately, its
statistics those of a float64 numpy reference — and training stays bit for bit that of a run without msprobe."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import mindspore as ms
import numpy as np
import pytest
from mindspore import nn, ops

sys.path.insert(0, str(Path(__file__).parents[1] / "common"))

from dump_json import step_data, write_config  # noqa: E402

from msprobe.mindspore import PrecisionDebugger  # noqa: E402

mslib = types.ModuleType("mslib")


def _gated(gate, up):
    return ops.tanh(gate) * up


mslib.gated = _gated


class GatedMlp(nn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.gate, self.up, self.down = nn.Dense(8, 16), nn.Dense(8, 16), nn.Dense(16, 4)

    def construct(self, x):
        hidden = mslib.gated(self.gate(x), self.up(x))
        return self.down(mslib.gated(hidden, hidden))


def _train(debugger=None, steps: int = 2):
    ms.set_seed(0)
    model = GatedMlp()
    optimizer = nn.SGD(model.trainable_params(), 0.1)
    x = ms.Tensor(np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32))
    grad_fn = ms.value_and_grad(lambda x: model(x).sum(), None, optimizer.parameters)
    for _ in range(steps):
        if debugger is not None:
            debugger.start(model)
        _loss, grads = grad_fn(x)
        optimizer(grads)
        if debugger is not None:
            debugger.stop()
            debugger.step()
    return [p.asnumpy() for p in model.trainable_params()]


@pytest.fixture
def debugger(tmp_path):
    debugger = PrecisionDebugger(config_path=str(write_config(tmp_path, "d", "tensor", "L1", {})))
    PrecisionDebugger.register_custom_api(mslib, "gated", "MsLib")
    yield debugger
    debugger.finish()
    PrecisionDebugger.restore_custom_api(mslib, "gated")


def test_a_registered_function_is_an_api(debugger, tmp_path):
    reference = _train()
    observed = _train(debugger)
    assert all(np.array_equal(a, b) for a, b in zip(reference, observed))
    assert mslib.gated is _gated
    data = step_data(tmp_path / "d", 0)
    assert [n for n in data if n.startswith("MsLib.") and n.endswith("forward")] == [
        "MsLib.gated.0.forward", "MsLib.gated.1.forward"]
    assert not any(".tanh." in name for name in data)  # its insides are not separate APIs
    entry = data["MsLib.gated.0.forward"]
    folder = tmp_path / "d" / "step0" / "rank" / "dump_tensor_data"
    gate, up = (np.load(folder / v["data_name"]).astype(np.float64) for v in entry["input_args"])
    expected = np.tanh(gate) * up  # float64 numpy reference
    for key, reduce in (("Max", np.max), ("Min", np.min), ("Mean", np.mean)):
        assert entry["output"][0][key] == pytest.approx(float(reduce(expected)), rel=1e-5, abs=1e-6)
