"""End-to-end MindSpore (PyNative) dumps through PrecisionDebugger: real training, real files."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import mindspore as ms
import numpy as np
import pytest
from mindspore import Tensor, mint, nn, ops

from msprobe.mindspore import PrecisionDebugger

X = np.array([[1, 2, 3, 4], [-3, 0, 1, -2]], np.float32)


class Net(nn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Dense(4, 3)
        self.relu = nn.ReLU()

    def construct(self, x):
        y = ops.relu(self.fc(x)) + 1
        return self.relu(mint.abs(y)).sum()



def train(debugger=None, steps: int = 3):
    ms.set_seed(0)
    net = Net()
    rng = np.random.default_rng(1)
    for param in net.trainable_params():
        param.set_data(Tensor(rng.standard_normal(param.shape).astype(np.float32)))
    optimizer = nn.Momentum(net.trainable_params(), learning_rate=0.1, momentum=0.9)
    grad_fn = ms.value_and_grad(lambda a: net(a), None, optimizer.parameters)
    losses = []
    for step in range(steps):
        if debugger is not None:
            debugger.start(net)
        loss, grads = grad_fn(Tensor(X * (step + 1)))
        optimizer(grads)
        if debugger is not None:
            debugger.stop()
            debugger.step()
        losses.append(loss.asnumpy())
    return losses, [p.asnumpy() for p in net.trainable_params()], net


def load(root: Path, step: int = 0, name: str = "dump.json"):
    return json.loads((root / f"step{step}" / "rank" / name).read_text())


@pytest.mark.parametrize("task,level", [("statistics", "L1"), ("statistics", "mix"), ("tensor", "L0")])
def test_training_is_bit_identical_with_the_debugger(tmp_path, task, level):
    bare_losses, bare_weights, _ = train()
    debugger = PrecisionDebugger(dump_path=str(tmp_path / "dump"), task=task, level=level)
    losses, weights, _ = train(debugger)
    for a, b in zip(bare_losses + bare_weights, losses + weights):
        assert a.tobytes() == b.tobytes()
    for step in range(3):
        assert load(tmp_path / "dump", step)["data"]


def test_l1_dump_values_match_numpy(tmp_path):
    debugger = PrecisionDebugger(dump_path=str(tmp_path / "dump"), task="statistics", level="L1", step=[0])
    train(debugger, steps=1)
    dump = load(tmp_path / "dump")
    assert dump["task"] == "statistics" and dump["level"] == "L1"
    data = dump["data"]
    relu = data["Functional.relu.0.forward"]
    record = relu["output"][0]
    assert record["type"] == "mindspore.Tensor" and record["dtype"] == "Float32" and record["shape"] == [2, 3]
    assert "requires_grad" not in record
    assert "Mint.abs.0.forward" in data
    assert any(name.endswith(".backward") for name in data)
    rng = np.random.default_rng(1)  # the initial weights train() sets, in trainable_params order
    weight = rng.standard_normal((3, 4)).astype(np.float32)
    bias = rng.standard_normal(3).astype(np.float32)
    hidden = X.astype(np.float64) @ weight.T.astype(np.float64) + bias
    for stats, values in ((relu["input_args"][0], hidden), (record, np.maximum(hidden, 0))):
        assert stats["Max"] == pytest.approx(values.max(), rel=1e-5)
        assert stats["Min"] == pytest.approx(values.min(), rel=1e-5, abs=1e-6)
        assert stats["Mean"] == pytest.approx(values.mean(), rel=1e-5)
        assert stats["Norm"] == pytest.approx(np.sqrt((values**2).sum()), rel=1e-5)
    stack = load(tmp_path / "dump", name="stack.json")
    assert any("test_dump_mindspore.py" in frame for frame in stack["Functional.relu.0.forward"])


def test_mix_has_cells_with_parents_and_md5_is_crc32(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "task": "statistics", "dump_path": str(tmp_path / "dump"), "level": "mix", "step": [0],
        "statistics": {"summary_mode": "md5"},
    }))
    debugger = PrecisionDebugger(config_path=str(config))
    train(debugger, steps=1)
    data = load(tmp_path / "dump")["data"]
    construct = load(tmp_path / "dump", name="construct.json")
    assert "Cell.fc.Dense.forward.0" in data and "Cell.relu.ReLU.forward.0" in data
    inner = [name for name, parent in construct.items() if parent == "Cell.fc.Dense.forward.0"]
    assert inner, construct
    first_input = data["Cell.fc.Dense.forward.0"]["input_args"][0]
    assert first_input["md5"] == f"{zlib.crc32(X.tobytes()):08x}"
    assert first_input["Max"] == X.max() and first_input["Min"] == X.min()
    assert first_input["Mean"] == pytest.approx(X.astype(np.float64).mean())
    assert first_input["Norm"] == pytest.approx(np.sqrt((X.astype(np.float64) ** 2).sum()))


def test_tensor_task_writes_npy_files(tmp_path):
    debugger = PrecisionDebugger(dump_path=str(tmp_path / "dump"), task="tensor", level="L1", step=[0])
    train(debugger, steps=1)
    dump = load(tmp_path / "dump")
    tensor_dir = Path(dump["dump_data_dir"])
    record = dump["data"]["Functional.relu.0.forward"]["output"][0]
    saved = np.load(tensor_dir / record["data_name"], allow_pickle=False)
    assert record["data_name"].endswith(".npy")
    assert saved.max() == pytest.approx(record["Max"]) and saved.shape == (2, 3)


@pytest.mark.parametrize("task", ["statistics", "tensor"])
def test_an_operator_error_raised_at_our_read_reaches_the_user(tmp_path, task, msprobe_log):
    """MindSpore raises a failed operator's error at the first read of its result; when msprobe reads it
    first, the user gets it (it used to be logged as msprobe's and the user read garbage): at the call when
    msprobe reads at once (tensor files), at stop() at the latest when statistics are read in batches."""
    debugger = PrecisionDebugger(dump_path=str(tmp_path / "dump"), task=task, level="L1")
    x = Tensor(np.ones((3, 2), np.float32))
    debugger.start()
    with pytest.raises(RuntimeError, match="input_indices"):
        ops.gather(x, Tensor(np.array([10], np.int32)), 0)
        debugger.stop()
    debugger.start()  # and collection goes on
    y = ops.add(x, 1)
    debugger.stop()
    debugger.step()
    assert "could not record" not in msprobe_log.text()
    data = json.loads(next((tmp_path / "dump").rglob("dump.json")).read_text())["data"]
    assert data["Functional.add.0.forward"]["output"][0]["Max"] == 2.0 and float(y.asnumpy().max()) == 2.0
