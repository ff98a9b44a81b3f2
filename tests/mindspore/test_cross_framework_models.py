"""Cross-framework pairing on three models the other cross-framework tests do not hold, written in both
frameworks with MindSpore's own layers (``nn.LayerNorm``, ``nn.Dense``, ``nn.Conv2d``, ``nn.BatchNorm2d``,
pooling, ``nn.LSTM``: primitives underneath) and PyTorch's, with the same weights, dumped at L1 and mix, in
statistics and tensor mode.

What counts (see docs/cross_framework_compare.md, "What is paired and what is not"):

- a **right call pair** is a MindSpore call that stands for one PyTorch call, written down here from the
  model code (:data:`CALLS`: e.g. the ``LayerNorm`` primitive is ``F.layer_norm``; cells pair with the
  modules of the same path). A primitive that does part of a PyTorch call (``MatMul`` + ``BiasAdd`` of
  ``nn.Dense`` against ``F.linear``) stands for none;
- a MindSpore tensor row is **pairable** when its call has a right partner holding a row with the same
  shape and values (read from the tensor dumps, by value, not by name);
- a **wrong pair** is any paired row outside a right call pair, or whose two tensors differ (tensor dumps).

Done when ≥ 95 % of pairable rows (forward and backward) are paired and there is no wrong pair, in every
model × level × mode.
"""

from __future__ import annotations

import json
from pathlib import Path

import mindspore as ms
import numpy as np
import pytest
import torch
from mindspore import Tensor, ops
from mindspore import nn as mnn
from torch import nn as tnn

from msprobe.core.lifecycle.debugger import BaseDebugger
from msprobe.mindspore.compare import compare

# ---------------------------------------------------------------- a small transformer with LayerNorm


class TorchBlock(tnn.Module):
    def __init__(self, d: int = 8, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = tnn.LayerNorm(d), tnn.LayerNorm(d)
        self.q, self.k, self.v, self.o = (tnn.Linear(d, d) for _ in range(4))
        self.fc1, self.fc2 = tnn.Linear(d, 2 * d), tnn.Linear(2 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        y = self.ln1(x)
        q, k, v = (f(y).reshape(b, t, self.heads, d // self.heads).transpose(1, 2) for f in (self.q, self.k, self.v))
        a = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) / 2.0, dim=-1)
        x = x + self.o(torch.matmul(a, v).transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x))))


class TorchTransformer(tnn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = tnn.Embedding(11, 8)
        self.blocks = tnn.ModuleList([TorchBlock(), TorchBlock()])
        self.norm, self.head = tnn.LayerNorm(8), tnn.Linear(8, 4)

    def forward(self, ids):
        x = self.emb(ids)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


class MsBlock(mnn.Cell):
    def __init__(self, d: int = 8, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = mnn.LayerNorm((d,)), mnn.LayerNorm((d,))
        self.q, self.k, self.v, self.o = (mnn.Dense(d, d) for _ in range(4))
        self.fc1, self.fc2 = mnn.Dense(d, 2 * d), mnn.Dense(2 * d, d)

    def construct(self, x):
        b, t, d = x.shape
        y = self.ln1(x)
        q, k, v = (f(y).reshape(b, t, self.heads, d // self.heads).swapaxes(1, 2) for f in (self.q, self.k, self.v))
        a = ops.softmax(ops.matmul(q, k.swapaxes(-2, -1)) / 2.0, axis=-1)
        x = x + self.o(ops.matmul(a, v).swapaxes(1, 2).reshape(b, t, d))
        return x + self.fc2(ops.gelu(self.fc1(self.ln2(x)), approximate="none"))


class MsTransformer(mnn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.emb = mnn.Embedding(11, 8)
        self.blocks = mnn.CellList([MsBlock(), MsBlock()])
        self.norm, self.head = mnn.LayerNorm((8,)), mnn.Dense(8, 4)

    def construct(self, ids):
        x = self.emb(ids)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


# ---------------------------------------------------------------- a CNN with BatchNorm and pooling


class TorchCNN(tnn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.bn1 = tnn.Conv2d(3, 4, 3, padding=1), tnn.BatchNorm2d(4)
        self.relu, self.pool1 = tnn.ReLU(), tnn.MaxPool2d(2, 2)
        self.conv2, self.bn2 = tnn.Conv2d(4, 6, 3, padding=1, bias=False), tnn.BatchNorm2d(6)
        self.pool2, self.flat, self.fc = tnn.AvgPool2d(2, 2), tnn.Flatten(), tnn.Linear(24, 5)

    def forward(self, x):
        x = self.pool1(self.relu(self.bn1(self.conv1(x))))
        x = self.pool2(self.relu(self.bn2(self.conv2(x))))
        return self.fc(self.flat(x))


class MsCNN(mnn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = mnn.Conv2d(3, 4, 3, pad_mode="pad", padding=1, has_bias=True)
        self.bn1, self.relu, self.pool1 = mnn.BatchNorm2d(4), mnn.ReLU(), mnn.MaxPool2d(2, 2)
        self.conv2, self.bn2 = mnn.Conv2d(4, 6, 3, pad_mode="pad", padding=1), mnn.BatchNorm2d(6)
        self.pool2, self.flat, self.fc = mnn.AvgPool2d(2, 2), mnn.Flatten(), mnn.Dense(24, 5)

    def construct(self, x):
        x = self.pool1(self.relu(self.bn1(self.conv1(x))))
        x = self.pool2(self.relu(self.bn2(self.conv2(x))))
        return self.fc(self.flat(x))


# ---------------------------------------------------------------- an LSTM


class TorchLSTM(tnn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm, self.head = tnn.LSTM(5, 6, batch_first=True), tnn.Linear(6, 3)

    def forward(self, x):
        y, _ = self.lstm(x)
        return self.head(y[:, -1])


class MsLSTM(mnn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.lstm, self.head = mnn.LSTM(5, 6, batch_first=True), mnn.Dense(6, 3)

    def construct(self, x):
        y, _ = self.lstm(x)
        return self.head(y[:, -1])


# ---------------------------------------------------------------- which MindSpore call stands for which PyTorch call


def _numbered(ms_api: str, pt_api: str, count: int, ms_from: int = 0, pt_from: int = 0) -> list[tuple[str, str]]:
    return [(f"{ms_api}.{ms_from + i}", f"{pt_api}.{pt_from + i}") for i in range(count)]


CALLS = {  # (MindSpore API entry stem, PyTorch API entry stem); cells pair with modules by path (below)
    "transformer": [
        *_numbered("Primitive.layer_norm.LayerNorm", "Functional.layer_norm", 5),
        *_numbered("Tensor.reshape", "Tensor.reshape", 8), *_numbered("Tensor.swapaxes", "Tensor.transpose", 10),
        *_numbered("Functional.matmul", "Torch.matmul", 4), *_numbered("Tensor.__truediv__", "Tensor.__truediv__", 2),
        *_numbered("Functional.softmax", "Torch.softmax", 2), *_numbered("Functional.gelu", "Functional.gelu", 2),
        *_numbered("Tensor.__add__", "Tensor.__add__", 4), *_numbered("Tensor.__mul__", "Tensor.__mul__", 1),
        *_numbered("Tensor.sum", "Tensor.sum", 1),
    ],
    "cnn": [
        ("Primitive.conv2d.Conv2D.1", "Functional.conv2d.1"),  # conv2 has no bias: Conv2D is all of F.conv2d
        *_numbered("Primitive.bn_infer.BatchNorm", "Functional.batch_norm", 2),
        *_numbered("Primitive.relu.ReLU", "Functional.relu", 2),
        ("Primitive.max_pool.MaxPool.0", "Functional.max_pool2d.0"),
        ("Primitive.avg_pool.AvgPool.0", "Functional.avg_pool2d.0"), ("Functional.flatten.0", "Tensor.flatten.0"),
        *_numbered("Tensor.__mul__", "Tensor.__mul__", 1), *_numbered("Tensor.sum", "Tensor.sum", 1),
    ],
    "lstm": [
        *_numbered("Functional.zeros", "Torch.zeros", 2),
        ("Tensor.__getitem__.2", "Tensor.__getitem__.0"),  # y[:, -1]; MindSpore's LSTM indexes inside
        *_numbered("Tensor.__mul__", "Tensor.__mul__", 1), *_numbered("Tensor.sum", "Tensor.sum", 1),
    ],
}
CELL_RENAMES = {"MsBlock": "TorchBlock", "Dense": "Linear", "SequentialCell": "Sequential", "CellList": "ModuleList"}


def right_entry_pairs(model: str, ms_entries, pt_entries) -> dict[str, str]:
    """MindSpore entry → the PyTorch entry of the same call, forward and backward."""
    pairs = {}
    for ms_stem, pt_stem in CALLS[model]:
        for direction in ("forward", "backward"):
            pairs[f"{ms_stem}.{direction}"] = f"{pt_stem}.{direction}"
    modules = {}
    for name in pt_entries:
        if name.startswith("Module."):
            path_cls, direction, count = name[len("Module."):].rsplit(".", 2)
            modules[path_cls, direction, count] = name
    for name in ms_entries:
        if name.startswith("Cell."):
            path_cls, direction, count = name[len("Cell."):].rsplit(".", 2)
            path, _, cls = path_cls.rpartition(".")
            partner = modules.get((f"{path}.{CELL_RENAMES.get(cls, cls)}", direction, count))
            if partner:
                pairs[name] = partner
    return {ms_name: pt_name for ms_name, pt_name in pairs.items() if ms_name in ms_entries and pt_name in pt_entries}


# ---------------------------------------------------------------- the same weights, dumped both ways

LEAF_RENAMES = {"gamma": "weight", "beta": "bias", "moving_mean": "running_mean", "moving_variance": "running_var",
                "embedding_table": "weight"}
MODELS = {
    "transformer": (TorchTransformer, MsTransformer, lambda rng: rng.integers(0, 11, (2, 5))),
    "cnn": (TorchCNN, MsCNN, lambda rng: rng.standard_normal((2, 3, 8, 8)).astype(np.float32)),
    "lstm": (TorchLSTM, MsLSTM, lambda rng: rng.standard_normal((2, 4, 5)).astype(np.float32)),
}


def same_weights(torch_model: tnn.Module, ms_model: mnn.Cell) -> None:
    """Random weights of distinct statistics per tensor (a LayerNorm's weight and bias are not 1 and 0),
    copied to the MindSpore model by name."""
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, value in torch_model.state_dict().items():
            if value.is_floating_point():
                value.copy_(torch.randn(value.shape, generator=generator) * 0.5)
                if "running_var" in name:
                    value.abs_().add_(0.5)
    state = torch_model.state_dict()
    for name, param in ms_model.parameters_and_names():
        head, _, leaf = name.rpartition(".")
        param.set_data(Tensor(state[f"{head}.{LEAF_RENAMES.get(leaf, leaf)}"].numpy()))


def dump_both(root: Path, model: str, level: str, task: str) -> tuple[Path, Path]:
    from msprobe.mindspore import PrecisionDebugger as MsDebugger
    from msprobe.pytorch import PrecisionDebugger as TorchDebugger

    torch_cls, ms_cls, make_input = MODELS[model]
    torch_model, ms_model = torch_cls().eval(), ms_cls()
    ms_model.set_train(False)
    same_weights(torch_model, ms_model)
    x = make_input(np.random.default_rng(1))
    out_shape = tuple(torch_model(torch.tensor(x)).shape)
    weights = np.linspace(0.5, 1.5, int(np.prod(out_shape)), dtype=np.float32).reshape(out_shape)
    x_torch, w_torch = torch.tensor(x, requires_grad=x.dtype.kind == "f"), torch.tensor(weights)
    x_ms, w_ms = Tensor(x), Tensor(weights)
    debugger = TorchDebugger(dump_path=str(root / "pt"), task=task, level=level, step=[0])
    debugger.start(torch_model)
    (torch_model(x_torch) * w_torch).sum().backward()
    debugger.stop()
    debugger.step()
    BaseDebugger._active.finish()
    debugger = MsDebugger(dump_path=str(root / "ms"), task=task, level=level, step=[0])
    debugger.start(ms_model)
    if x.dtype.kind == "f":
        ms.grad(lambda a: (ms_model(a) * w_ms).sum())(x_ms)
    else:
        ms.grad(lambda: (ms_model(x_ms) * w_ms).sum(), None, ms_model.trainable_params())()
    debugger.stop()
    debugger.step()
    BaseDebugger._active.finish()
    return root / "ms" / "step0" / "rank" / "dump.json", root / "pt" / "step0" / "rank" / "dump.json"


@pytest.fixture(scope="module")
def dumps(tmp_path_factory) -> dict[tuple[str, str, str], tuple[Path, Path]]:
    out = {}
    for model in MODELS:
        for level in ("L1", "mix"):
            for task in ("tensor", "statistics"):
                out[model, level, task] = dump_both(tmp_path_factory.mktemp(f"{model}_{level}_{task}"), model, level,
                                                    task)
    return out


# ---------------------------------------------------------------- the values, from the tensor dumps


def tensor_values(dump_json: Path) -> dict[str, np.ndarray]:
    """Row name → the saved tensor (numpy for MindSpore's .npy, torch.load for PyTorch's .pt)."""
    from msprobe.core.compare.read.rows import flatten_entry

    data = json.loads(dump_json.read_text())["data"]
    out = {}
    for entry, record in data.items():
        for row in flatten_entry(entry, record):
            name = row.value.get("data_name") if row.is_tensor else None
            if name is None:
                continue
            path = dump_json.parent / "dump_tensor_data" / name
            if name.endswith(".npy"):
                out[row.name] = np.load(path).astype(np.float64).reshape(row.value["shape"])
            else:
                out[row.name] = torch.load(path, weights_only=True).double().numpy()
    return out


def same_tensor(a: np.ndarray, b: np.ndarray) -> bool:
    """One tensor computed twice in float32 (two implementations, same inputs)."""
    return a.shape == b.shape and np.allclose(a, b, rtol=1e-4, atol=1e-4 * max(np.abs(b).max(initial=0), 1e-3))


@pytest.mark.parametrize("task", ["statistics", "tensor"])
@pytest.mark.parametrize("level", ["L1", "mix"])
@pytest.mark.parametrize("model", list(MODELS))
def test_pairs_by_meaning_on_models_not_written_for_the_map(dumps, tmp_path, model, level, task):
    ms_json, pt_json = dumps[model, level, "tensor"]
    ms_values, pt_values = tensor_values(ms_json), tensor_values(pt_json)
    ms_data, pt_data = (json.loads(p.read_text())["data"] for p in (ms_json, pt_json))
    right = right_entry_pairs(model, ms_data, pt_data)
    assert len(right) >= len(CALLS[model])  # the list names calls the dumps hold
    pairable = set()
    for ms_row, values in ms_values.items():
        entry = ms_row[: ms_row.rfind(".input.")] if ".input." in ms_row else ms_row[: ms_row.rfind(".output.")]
        partner = right.get(entry)
        if partner and any(name.startswith(partner + ".") and same_tensor(values, other)
                           for name, other in pt_values.items()):
            pairable.add(ms_row)

    compared = dumps[model, level, task]
    if task == "statistics":  # the same calls as the tensor run, so the same names and the same oracle
        assert set(json.loads(compared[0].read_text())["data"]) == set(ms_data)
        assert set(json.loads(compared[1].read_text())["data"]) == set(pt_data)
    result = compare({"npu_path": str(compared[0]), "bench_path": str(compared[1])}, tmp_path, workers=1)
    paired, wrong = set(), []
    for row in result.results:
        if row.npu is None or row.bench is None or not row.npu.is_tensor:
            continue
        gradient_of_constant = row.bench.value is None and row.npu.entry.endswith(".backward")
        if right.get(row.npu.entry) != row.bench.entry:
            wrong.append((row.npu.name, row.bench.name, "calls"))
        elif not gradient_of_constant and not (row.npu.name in ms_values and row.bench.name in pt_values
                                               and same_tensor(ms_values[row.npu.name], pt_values[row.bench.name])):
            wrong.append((row.npu.name, row.bench.name, "values"))
        elif row.npu.name in pairable:
            paired.add(row.npu.name)
    assert not wrong, wrong
    missed = sorted(pairable - paired)
    assert len(paired) >= 0.95 * len(pairable), (len(paired), len(pairable), missed)
    # every row of both dumps is in the report once
    assert sorted(r.npu.name for r in result.results if r.npu) == sorted(
        {r.npu.name for r in result.results if r.npu})
    assert {r.bench.entry for r in result.results if r.bench} == set(pt_data)
