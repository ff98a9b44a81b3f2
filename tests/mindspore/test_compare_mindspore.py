"""Compare real MindSpore dumps: a tiny network run in float32 and in float16, dumped by our PrecisionDebugger.

The float16 run overflows in ``exp`` (its result passes 65504), which is where the comparison must say
the two runs first diverge; every other number is checked against float64 numpy on the saved .npy files.
"""

from __future__ import annotations

import json
from pathlib import Path

import mindspore as ms
import numpy as np
import openpyxl
import pytest
from mindspore import Tensor, nn, ops

from msprobe.core import cli
from msprobe.core.lifecycle.debugger import BaseDebugger
from msprobe.mindspore import PrecisionDebugger
from msprobe.mindspore.compare import compare


class Net(nn.Cell):
    def __init__(self, dtype: ms.dtype) -> None:
        super().__init__()
        self.fc = nn.Dense(8, 6, dtype=dtype)
        self.relu = nn.ReLU()

    def construct(self, x):
        return ops.exp(self.relu(self.fc(x)) * 4).sum()


def dump_run(root: Path, dtype: type, task: str) -> Path:
    """One forward pass dumped at level L1 (PyNative); the same values, stored in ``dtype``."""
    rng = np.random.default_rng(1)
    net = Net(ms.float16 if dtype == np.float16 else ms.float32)
    for param in net.trainable_params():
        param.set_data(Tensor(rng.standard_normal(param.shape).astype(dtype)))
    x = Tensor(rng.standard_normal((4, 8)).astype(dtype))
    debugger = PrecisionDebugger(dump_path=str(root), task=task, level="L1", step=[0])
    debugger.start(net)
    net(x)
    debugger.stop()
    debugger.step()
    if BaseDebugger._active is not None:  # leave no debugger running for the next dump or test
        BaseDebugger._active.finish()
    return root / "step0" / "rank" / "dump.json"


@pytest.fixture(scope="module")
def dumps(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    root = tmp_path_factory.mktemp("ms_dumps")
    return {task: (dump_run(root / f"fp16_{task}", np.float16, task), dump_run(root / f"fp32_{task}", np.float32, task))
            for task in ("tensor", "statistics")}


def saved(dump_json: Path, row) -> np.ndarray:
    return np.load(dump_json.parent / "dump_tensor_data" / row.value["data_name"]).astype(np.float64).ravel()


def test_tensor_rows_all_match_and_metrics_equal_numpy(dumps, tmp_path):
    npu, bench = dumps["tensor"]
    result = compare({"npu_json_path": str(npu), "bench_json_path": str(bench)}, tmp_path, workers=1)
    assert result.mode == "tensor" and len(result.results) >= 15
    assert all(r.npu and r.bench and r.npu.name == r.bench.name for r in result.results)
    checked = 0
    for row in result.results:
        if not row.npu.is_tensor:
            continue
        assert (row.npu.value["dtype"], row.bench.value["dtype"]) == ("Float16", "Float32")
        n, b = saved(npu, row.npu), saved(bench, row.bench)
        if not np.isfinite(n).all():
            assert row.verdict == "No" and row.tensor.nonfinite_mismatch == np.count_nonzero(~np.isfinite(n))
            continue
        assert row.tensor.max_abs_err == pytest.approx(np.abs(n - b).max(), rel=1e-12, abs=0)
        if n.size > 1:
            assert row.tensor.cosine == pytest.approx(n @ b / np.linalg.norm(n) / np.linalg.norm(b), rel=1e-12)
        assert row.tensor.npu.norm == pytest.approx(np.linalg.norm(n), rel=1e-12)
        checked += 1
    assert checked >= 10
    found = result.first_divergence
    assert found.entry == "Functional.exp.0.forward" and found.inputs_pass
    assert found.stack and "test_compare_mindspore.py" in " ".join(found.stack)


def test_statistics_through_the_mindspore_command(dumps, tmp_path, msprobe_log):
    npu, bench = dumps["statistics"]
    config = tmp_path / "compare.json"
    config.write_text(json.dumps({"npu_path": str(npu), "bench_path": str(bench), "is_print_compare_log": True}))
    assert cli.main(["-f", "mindspore", "compare", "-i", str(config), "-o", str(tmp_path / "out"), "-s"]) == 0
    [xlsx] = (tmp_path / "out").glob("compare_result_*.xlsx")
    sheet = list(openpyxl.load_workbook(xlsx).active.iter_rows(values_only=True))
    rows = [dict(zip(sheet[0], values)) for values in sheet[1:]]
    npu_data, bench_data = (json.loads(p.read_text())["data"] for p in (npu, bench))
    assert len(rows) >= 15 and all(r["NPU Name"] == r["Bench Name"] for r in rows)
    mul = next(r for r in rows if r["NPU Name"] == "Tensor.__mul__.0.forward.output.0")
    n, b = npu_data["Tensor.__mul__.0.forward"]["output"][0], bench_data["Tensor.__mul__.0.forward"]["output"][0]
    assert mul["Max diff"] == n["Max"] - b["Max"] and mul["Mean diff"] == n["Mean"] - b["Mean"]
    assert mul["MaxRelativeErr"] == pytest.approx(abs(n["Max"] - b["Max"]) / abs(b["Max"]), rel=1e-12)
    assert mul["Result"] != "Warning"
    assert "first divergence: Functional.exp.0.forward" in msprobe_log.text()
