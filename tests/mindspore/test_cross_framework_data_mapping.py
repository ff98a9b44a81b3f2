"""``-dm`` maps rows of APIs of different kinds (a MindSpore ``ops.matmul`` against a PyTorch ``nn.Linear``'s
``linear``), whichever side the MindSpore dump is on: the mapped rows are paired in the report, and a fault in
the matmul is the first divergence (docs/cross_framework_compare.md#111s-mapping-files)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ms = pytest.importorskip("mindspore")

from mindspore import Tensor, mint, ops  # noqa: E402
from mindspore import nn as mnn  # noqa: E402
from torch import nn as tnn  # noqa: E402

from msprobe.core.lifecycle.debugger import BaseDebugger  # noqa: E402
from msprobe.mindspore.compare import compare  # noqa: E402

pytestmark = pytest.mark.frameworks("mindspore", "pytorch")
WEIGHT = np.linspace(-1, 1, 24).astype(np.float32).reshape(3, 8)
X = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
MAPPING = {"Functional.matmul.0.forward.input.0": "Functional.linear.0.forward.input.0",
           "Functional.matmul.0.forward.output.0": "Functional.linear.0.forward.output.0"}


class TorchHead(tnn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = tnn.Linear(8, 3, bias=False)
        self.fc.weight.data = torch.tensor(WEIGHT)

    def forward(self, x):
        return torch.relu(self.fc(x))


class MsHead(mnn.Cell):
    """The port multiplies by the transposed weight itself; ``fault`` scales it by 1.05."""

    def __init__(self, fault: bool) -> None:
        super().__init__()
        self.w = ms.Parameter(Tensor(WEIGHT.T.copy() * (1.05 if fault else 1.0)))

    def construct(self, x):
        return mint.nn.functional.relu(ops.matmul(x, self.w))


@pytest.fixture(scope="module")
def dumps(tmp_path_factory) -> dict[str, Path]:
    from msprobe.mindspore import PrecisionDebugger as MsDebugger
    from msprobe.pytorch import PrecisionDebugger as TorchDebugger

    root = tmp_path_factory.mktemp("dm")
    debugger = TorchDebugger(dump_path=str(root / "pt"), task="statistics", level="mix", step=[0])
    model = TorchHead()
    debugger.start(model)
    model(torch.tensor(X, requires_grad=True)).sum().backward()
    debugger.stop()
    debugger.step()
    BaseDebugger._active.finish()
    out = {"pt": root / "pt" / "step0" / "rank" / "dump.json"}
    for name, fault in (("ms", False), ("ms_fault", True)):
        cell = MsHead(fault)
        debugger = MsDebugger(dump_path=str(root / name), task="statistics", level="mix", step=[0])
        debugger.start(cell)
        ms.grad(lambda a, cell=cell: cell(a).sum())(Tensor(X))
        debugger.stop()
        debugger.step()
        BaseDebugger._active.finish()
        out[name] = root / name / "step0" / "rank" / "dump.json"
    return out


def _compare(npu: Path, bench: Path, out: Path):
    return compare({"npu_json_path": str(npu), "bench_json_path": str(bench)}, out, data_mapping=MAPPING)


@pytest.mark.parametrize("ms_side", ["npu", "bench"])
def test_mapped_rows_of_different_kinds_are_paired_on_either_side(dumps, tmp_path, ms_side):
    sides = (dumps["ms"], dumps["pt"]) if ms_side == "npu" else (dumps["pt"], dumps["ms"])
    result = _compare(*sides, tmp_path)
    pairs = {(r.npu.name, r.bench.name) for r in result.results if r.npu is not None and r.bench is not None}
    for ms_row, pt_row in MAPPING.items():
        assert ((ms_row, pt_row) if ms_side == "npu" else (pt_row, ms_row)) in pairs
    expected = X.astype(np.float64) @ WEIGHT.T.astype(np.float64)  # both sides' output, in float64
    for path in sides:
        data = json.loads(path.read_text())["data"]
        name = "Functional.matmul.0.forward" if path == dumps["ms"] else "Functional.linear.0.forward"
        recorded = data[name]["output"][0]
        for key, value in (("Max", expected.max()), ("Min", expected.min()), ("Mean", expected.mean()),
                           ("Norm", np.linalg.norm(expected))):
            assert recorded[key] == pytest.approx(value, rel=1e-5, abs=1e-6)
    assert result.first_divergence is None


@pytest.mark.parametrize("ms_side", ["npu", "bench"])
def test_a_fault_in_the_mapped_matmul_is_the_first_divergence(dumps, tmp_path, ms_side):
    sides = (dumps["ms_fault"], dumps["pt"]) if ms_side == "npu" else (dumps["pt"], dumps["ms_fault"])
    found = _compare(*sides, tmp_path).first_divergence
    assert found is not None
    assert found.entry == ("Functional.matmul.0.forward" if ms_side == "npu" else "Functional.linear.0.forward")
