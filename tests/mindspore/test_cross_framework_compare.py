"""MindSpore port against its PyTorch original: real models in both frameworks, same weights, dumped at mix.

Each model is written twice, as a user porting it would: PyTorch ``nn`` layers, and MindSpore cells
built on ``mint``/``ops`` functions and ``mint.nn`` layers. The test knows, from the model code alone,
which MindSpore call stands for which PyTorch call (:func:`expected_pairs`); the comparison must pair
≥ 95 % of the MindSpore tensor rows exactly that way, pair no row any other way, and — when one layer of
the port is deliberately changed — name that layer's call as the first divergence. Whether a pair is
right is also checked on the numbers: a right pair of the fault-free run holds the same statistics up to
float32 rounding, which the test checks against the dumps themselves, not the comparison's metrics.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import mindspore as ms
import mindspore.mint.nn.functional as MF
import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from mindspore import Parameter, Tensor, mint, ops
from mindspore import nn as mnn
from torch import nn as tnn

from msprobe.core import cli
from msprobe.core.lifecycle.debugger import BaseDebugger
from msprobe.mindspore.compare import compare

# ---------------------------------------------------------------- the CNN, in PyTorch and as ported


class TorchCNN(tnn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = tnn.Sequential(tnn.Conv2d(3, 4, 3, padding=1), tnn.BatchNorm2d(4), tnn.ReLU(), tnn.MaxPool2d(2))
        self.head = tnn.Linear(4 * 4 * 4, 5)

    def forward(self, x):
        y = torch.flatten(self.features(x), 1)
        return TF.softmax(self.head(y), dim=-1)


class Conv2d(mnn.Cell):
    """mint's conv2d has no CPU kernel in MindSpore 2.10: the port calls ops.conv2d."""

    def __init__(self, cin: int, cout: int, k: int) -> None:
        super().__init__()
        self.weight = Parameter(Tensor(np.zeros((cout, cin, k, k), np.float32)), name="weight")
        self.bias = Parameter(Tensor(np.zeros(cout, np.float32)), name="bias")

    def construct(self, x):
        return ops.conv2d(x, self.weight, self.bias, 1, "pad", 1)


class BatchNorm2d(mnn.Cell):
    def __init__(self, n: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        for name in ("weight", "bias", "running_mean", "running_var"):
            setattr(self, name, Parameter(Tensor(np.zeros(n, np.float32)), name=name, requires_grad=name in
                                          ("weight", "bias")))

    def construct(self, x):
        return ops.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, False, 0.1, self.eps)


class MaxPool2d(mnn.Cell):
    def construct(self, x):
        return ops.max_pool2d(x, 2, 2)


class MsCNN(mnn.Cell):
    def __init__(self, fault: bool = False) -> None:
        super().__init__()
        # the deliberate porting error: BatchNorm's eps 1e-5 became 1e-1
        self.features = mnn.SequentialCell(Conv2d(3, 4, 3), BatchNorm2d(4, 1e-1 if fault else 1e-5), mint.nn.ReLU(),
                                           MaxPool2d())
        self.head = mint.nn.Linear(4 * 4 * 4, 5)

    def construct(self, x):
        y = mint.flatten(self.features(x), 1)
        return MF.softmax(self.head(y), dim=-1)


# ---------------------------------------------------------------- the transformer, in PyTorch and as ported

WIDTH = 8


class TorchRMSNorm(tnn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = tnn.Parameter(torch.ones(WIDTH))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class TorchAttention(tnn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv, self.proj = tnn.Linear(WIDTH, 3 * WIDTH), tnn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        q, k, v = torch.chunk(self.qkv(x), 3, dim=-1)
        scores = torch.matmul(q, k.transpose(-2, -1)) * (1 / math.sqrt(WIDTH))
        return self.proj(torch.matmul(TF.softmax(scores, dim=-1), v))


class TorchMLP(tnn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = tnn.Linear(WIDTH, 2 * WIDTH), tnn.Linear(2 * WIDTH, WIDTH)

    def forward(self, x):
        return self.fc2(TF.gelu(self.fc1(x)))


class TorchBlock(tnn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm1, self.attn, self.norm2, self.mlp = TorchRMSNorm(), TorchAttention(), TorchRMSNorm(), TorchMLP()

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TorchTransformer(tnn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = tnn.Linear(6, WIDTH)
        self.blocks = tnn.ModuleList([TorchBlock(), TorchBlock()])
        self.head = tnn.Linear(WIDTH, 3)

    def forward(self, x):
        x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


class RMSNorm(mnn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.weight = Parameter(Tensor(np.ones(WIDTH, np.float32)), name="weight")

    def construct(self, x):
        return x * mint.rsqrt(mint.mean(x.pow(2), -1, True) + 1e-6) * self.weight


class Attention(mnn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.qkv, self.proj = mint.nn.Linear(WIDTH, 3 * WIDTH), mint.nn.Linear(WIDTH, WIDTH)

    def construct(self, x):
        q, k, v = mint.chunk(self.qkv(x), 3, dim=-1)
        scores = mint.matmul(q, mint.transpose(k, -2, -1)) * (1 / math.sqrt(WIDTH))
        return self.proj(mint.matmul(MF.softmax(scores, dim=-1), v))


class MLP(mnn.Cell):
    def __init__(self, fault: bool = False) -> None:
        super().__init__()
        self.fc1, self.fc2 = mint.nn.Linear(WIDTH, 2 * WIDTH), mint.nn.Linear(2 * WIDTH, WIDTH)
        self.approximate = "tanh" if fault else "none"  # the deliberate porting error: GELU's tanh approximation

    def construct(self, x):
        return self.fc2(ops.gelu(self.fc1(x), approximate=self.approximate))


class Block(mnn.Cell):
    def __init__(self, fault: bool = False) -> None:
        super().__init__()
        self.norm1, self.attn, self.norm2, self.mlp = RMSNorm(), Attention(), RMSNorm(), MLP(fault)

    def construct(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class MsTransformer(mnn.Cell):
    def __init__(self, fault: bool = False) -> None:
        super().__init__()
        self.embed = mint.nn.Linear(6, WIDTH)
        self.blocks = mnn.CellList([Block(), Block(fault)])
        self.head = mint.nn.Linear(WIDTH, 3)

    def construct(self, x):
        x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


# ---------------------------------------------------------------- what pairs with what, from the model code

CNN_CALLS = [  # (MindSpore call, PyTorch call) per layer, in execution order; modules by (path, class)
    ("Functional.conv2d", "Functional.conv2d"), ("Cell:features.0.Conv2d", "Module:features.0.Conv2d"),
    ("Functional.batch_norm", "Functional.batch_norm"),
    ("Cell:features.1.BatchNorm2d", "Module:features.1.BatchNorm2d"),
    ("Primitive.relu.ReLU", "Functional.relu"), ("Cell:features.2.ReLU", "Module:features.2.ReLU"),
    ("Functional.max_pool2d", "Functional.max_pool2d"), ("Cell:features.3.MaxPool2d", "Module:features.3.MaxPool2d"),
    ("Cell:features.SequentialCell", "Module:features.Sequential"),
    ("Mint.flatten_ext", "Torch.flatten"),
    ("Primitive.dense.Dense", "Functional.linear"), ("Cell:head.Linear", "Module:head.Linear"),
    ("MintFunctional.softmax", "Functional.softmax"),
    ("Tensor.__mul__", "Tensor.__mul__"), ("Tensor.sum", "Tensor.sum"),  # the loss
]


def _linear(path: str) -> list[tuple[str, str]]:
    return [("Primitive.dense.Dense", "Functional.linear"), (f"Cell:{path}.Linear", f"Module:{path}.Linear")]


def _norm(path: str) -> list[tuple[str, str]]:
    return [("Tensor.pow", "Tensor.pow"), ("Mint.mean", "Tensor.mean"), ("Tensor.__add__", "Tensor.__add__"),
            ("Mint.rsqrt", "Torch.rsqrt"), ("Tensor.__mul__", "Tensor.__mul__"), ("Tensor.__mul__", "Tensor.__mul__"),
            (f"Cell:{path}.RMSNorm", f"Module:{path}.TorchRMSNorm")]


def _block(path: str) -> list[tuple[str, str]]:
    attn = [*_linear(f"{path}.attn.qkv"), ("Mint.chunk", "Torch.chunk"), ("Mint.transpose", "Tensor.transpose"),
            ("Mint.matmul", "Torch.matmul"), ("Tensor.__mul__", "Tensor.__mul__"),
            ("MintFunctional.softmax", "Functional.softmax"), ("Mint.matmul", "Torch.matmul"),
            *_linear(f"{path}.attn.proj"), (f"Cell:{path}.attn.Attention", f"Module:{path}.attn.TorchAttention")]
    mlp = [*_linear(f"{path}.mlp.fc1"), ("Functional.gelu", "Functional.gelu"), *_linear(f"{path}.mlp.fc2"),
           (f"Cell:{path}.mlp.MLP", f"Module:{path}.mlp.TorchMLP")]
    return [*_norm(f"{path}.norm1"), *attn, ("Tensor.__add__", "Tensor.__add__"), *_norm(f"{path}.norm2"), *mlp,
            ("Tensor.__add__", "Tensor.__add__"), (f"Cell:{path}.Block", f"Module:{path}.TorchBlock")]


TRANSFORMER_CALLS = [*_linear("embed"), *_block("blocks.0"), *_block("blocks.1"), *_linear("head"),
                     ("Tensor.__mul__", "Tensor.__mul__"), ("Tensor.sum", "Tensor.sum")]
CELL_CLASSES = {"RMSNorm": "TorchRMSNorm", "Attention": "TorchAttention", "MLP": "TorchMLP", "Block": "TorchBlock"}


def expected_pairs(calls: list[tuple[str, str]]) -> dict[str, str]:
    """MindSpore entry name → PyTorch entry name, forward and backward, counting calls per API as each
    framework's dump does (modules: one count per path)."""
    counts: dict[tuple[int, str], int] = Counter()
    pairs = {}
    for ms_call, pt_call in calls:
        names = []
        for side, call in enumerate((ms_call, pt_call)):
            count = counts[side, call]
            counts[side, call] += 1
            kind, _, body = call.partition(":")
            names.append((f"{kind}.{body}.{{}}.{count}", True) if body else (f"{call}.{count}.{{}}", False))
        for direction in ("forward", "backward"):
            pairs[names[0][0].format(direction)] = names[1][0].format(direction)
    return pairs


# ---------------------------------------------------------------- dumping both


def copy_weights(torch_model: tnn.Module, ms_model: mnn.Cell) -> None:
    """The same weights on both sides; MindSpore parameters are named like PyTorch's (state_dict keys)."""
    state = torch_model.state_dict()
    for name, param in ms_model.parameters_and_names():
        param.set_data(Tensor(state[name].detach().numpy()))
    assert {n for n, _ in ms_model.parameters_and_names()} == {k for k in state if "num_batches" not in k}


def dump(root: Path, models: tuple, x: np.ndarray, task: str) -> tuple[Path, Path]:
    from msprobe.mindspore import PrecisionDebugger as MsDebugger
    from msprobe.pytorch import PrecisionDebugger as TorchDebugger

    torch_model, ms_model = models
    weights = np.linspace(0.5, 1.5, int(np.prod(OUTPUT[type(torch_model)]))).astype(np.float32).reshape(
        OUTPUT[type(torch_model)])  # a loss whose gradient is not zero (a softmax's sum has none)
    debugger = TorchDebugger(dump_path=str(root / "pt"), task=task, level="mix", step=[0])
    debugger.start(torch_model)
    (torch_model(torch.tensor(x, requires_grad=True)) * torch.tensor(weights)).sum().backward()
    debugger.stop()
    debugger.step()
    BaseDebugger._active.finish()
    debugger = MsDebugger(dump_path=str(root / "ms"), task=task, level="mix", step=[0])
    debugger.start(ms_model)
    ms.grad(lambda a: (ms_model(a) * Tensor(weights)).sum())(Tensor(x))
    debugger.stop()
    debugger.step()
    BaseDebugger._active.finish()
    return root / "ms" / "step0" / "rank" / "dump.json", root / "pt" / "step0" / "rank" / "dump.json"


OUTPUT = {TorchCNN: (2, 5), TorchTransformer: (2, 5, 3)}
MODELS = {
    "cnn": (TorchCNN, MsCNN, (2, 3, 8, 8), CNN_CALLS),
    "transformer": (TorchTransformer, MsTransformer, (2, 5, 6), TRANSFORMER_CALLS),
}


@pytest.fixture(scope="module")
def dumps(tmp_path_factory) -> dict[tuple[str, bool, str], tuple[Path, Path]]:
    out = {}
    for name, (torch_cls, ms_cls, shape, _) in MODELS.items():
        torch.manual_seed(0)
        x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
        for fault in (False, True):
            torch_model = torch_cls().eval()
            ms_model = ms_cls(fault)
            ms_model.set_train(False)
            copy_weights(torch_model, ms_model)
            for task in ("statistics", "tensor") if not fault else ("statistics",):
                root = tmp_path_factory.mktemp(f"{name}_{'fault' if fault else 'same'}_{task}")
                out[name, fault, task] = dump(root, (torch_model, ms_model), x, task)
    return out


def close(row, ms_json: Path, pt_json: Path) -> bool:
    """Same numbers up to float32 rounding (both runs compute in float32 from the same weights): the
    statistics in dump.json, or the saved tensors themselves, read with numpy and torch.load."""
    a, b = row.npu.value, row.bench.value
    if "data_name" in a:
        # MindSpore saves a 0-d tensor as [1]: dump.json has the shape
        n = np.load(ms_json.parent / "dump_tensor_data" / a["data_name"]).astype(np.float64).reshape(a["shape"])
        t = torch.load(pt_json.parent / "dump_tensor_data" / b["data_name"], weights_only=True).double().numpy()
        if n.shape != t.shape or not np.allclose(n, t, rtol=1e-4, atol=1e-4 * max(np.abs(t).max(initial=0), 1e-3)):
            return False
        if n.size > 1 and np.linalg.norm(n) and np.linalg.norm(t):  # the report's numbers are numpy's
            assert row.tensor.cosine == pytest.approx(n.ravel() @ t.ravel() / np.linalg.norm(n) / np.linalg.norm(t),
                                                      rel=1e-9)
        assert row.tensor.max_abs_err == pytest.approx(np.abs(n - t).max(), rel=1e-9, abs=1e-30)
        return True
    scale = max(abs(b.get("Max") or 0), abs(b.get("Min") or 0), 1e-6)
    return all(abs(a[k] - b[k]) <= 1e-4 * scale + 1e-6 for k in ("Max", "Min", "Mean"))


def no_gradient(row) -> bool:
    """PyTorch records no gradient (null) for a tensor that needs none (BatchNorm's running statistics),
    where MindSpore records zeros: the right pair, with nothing to compare."""
    stats = [row.npu.value.get(k) for k in ("Max", "Min", "Mean")]
    return row.npu.entry.endswith(".backward") and row.bench.value is None and stats == [0, 0, 0]


@pytest.mark.parametrize("task", ["statistics", "tensor"])
@pytest.mark.parametrize("model", list(MODELS))
def test_port_pairs_the_right_rows_and_no_wrong_ones(dumps, tmp_path, model, task):
    ms_json, pt_json = dumps[model, False, task]
    expected = expected_pairs(MODELS[model][3])
    ms_data, pt_data = (json.loads(p.read_text())["data"] for p in (ms_json, pt_json))
    assert set(expected) == set(ms_data), "the test's expectation must cover exactly the MindSpore dump"
    assert set(expected.values()) <= set(pt_data)

    result = compare({"npu_json_path": str(ms_json), "bench_json_path": str(pt_json)}, tmp_path, workers=1,
                     cell_mapping=_cell_map(tmp_path, model))
    ms_tensor_rows = [r for r in result.results if r.npu is not None and r.npu.is_tensor]
    assert result.cross_framework and "slack 32 forward, 512 backward" in result.reports["html"].read_text()
    right = wrong = 0
    for row in result.results:
        if row.npu is None or row.bench is None:
            continue
        assert expected[row.npu.entry] == row.bench.entry, f"wrong pair {row.npu.name} ↔ {row.bench.name}"
        if row.npu.is_tensor:
            if row.bench.is_tensor and close(row, ms_json, pt_json) or no_gradient(row):
                right += 1
            else:
                wrong += 1
    assert wrong == 0
    assert right >= 0.95 * len(ms_tensor_rows), f"{right} of {len(ms_tensor_rows)} MindSpore tensor rows paired"
    # every row of both dumps is in the report, once
    reported_ms = Counter(r.npu.name for r in result.results if r.npu)
    reported_pt = Counter(r.bench.name for r in result.results if r.bench)
    assert all(v == 1 for v in (*reported_ms.values(), *reported_pt.values()))
    assert {r.bench.entry for r in result.results if r.bench} == set(pt_data)
    assert {r.npu.entry for r in result.results if r.npu} == set(ms_data)
    assert result.first_divergence is None, result.first_divergence


def _cell_map(tmp_path: Path, model: str) -> str | None:
    """The transformer's port named its cells without the ``Torch`` prefix: ``-cm`` says so (1.1.1's format)."""
    if model != "transformer":
        return None
    lines = [f"{path}.{ms}: {path}.{pt}" for ms, pt in CELL_CLASSES.items()
             for path in ("blocks.0.norm1", "blocks.0.norm2", "blocks.1.norm1", "blocks.1.norm2")
             if ms == "RMSNorm"]
    lines += [f"blocks.{i}.{attr}.{ms}: blocks.{i}.{attr}.{pt}" for i in (0, 1)
              for attr, ms, pt in (("attn", "Attention", "TorchAttention"), ("mlp", "MLP", "TorchMLP"))]
    lines += [f"blocks.{i}.Block: blocks.{i}.TorchBlock" for i in (0, 1)]
    path = tmp_path / "cell_mapping.yaml"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.mark.parametrize(("model", "changed"), [("cnn", "Cell.features.1.BatchNorm2d.forward.0"),
                                                ("transformer", "Cell.blocks.1.mlp.MLP.forward.0")])
def test_the_changed_layer_is_the_first_divergence(dumps, tmp_path, model, changed, msprobe_log):
    ms_json, pt_json = dumps[model, True, "statistics"]
    config = tmp_path / "compare.json"
    config.write_text(json.dumps({"npu_path": str(ms_json), "bench_path": str(pt_json)}))
    args = ["-f", "mindspore", "compare", "-i", str(config), "-o", str(tmp_path / "out"), "-am"]
    cell_map = _cell_map(tmp_path, model)
    if cell_map:
        args += ["-cm", cell_map]
    assert cli.main(args) == 0
    parents = json.loads((ms_json.parent / "construct.json").read_text())
    found = next(line for line in msprobe_log.messages if line.startswith("first divergence:"))
    entry = found.split()[2]
    assert entry == changed or parents.get(entry) == changed, found
    assert (tmp_path / "out").is_dir() and list((tmp_path / "out").glob("compare_result_*.xlsx"))
