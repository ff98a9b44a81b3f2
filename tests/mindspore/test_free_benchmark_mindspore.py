"""task free_benchmark on MindSpore PyNative (SPEC 7): fp16 exp overflow flagged, relu quiet, every
MindSpore pert_mode runs, fix gives the fp32 result cast back, check leaves the output unchanged."""

from __future__ import annotations

import csv
import json

import mindspore as ms
import numpy as np
import pytest
from mindspore import nn, ops

from msprobe.core.debugger import BaseDebugger
from msprobe.core.free_benchmark import CSV_COLUMNS
from msprobe.mindspore import PrecisionDebugger


@pytest.fixture(autouse=True)
def _finish_debugger():
    yield
    if BaseDebugger._active is not None:
        BaseDebugger._active.finish()


class HalfNet(nn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Dense(4, 4)

    def construct(self, x):
        h = self.fc(x).astype(ms.float16)
        return ops.exp(h * 4).astype(ms.float32).sum() + ops.relu(h).astype(ms.float32).sum()


def _run(tmp_path, **section):
    config = {"task": "free_benchmark", "dump_path": str(tmp_path / "out"), "free_benchmark": section}
    (tmp_path / "c.json").write_text(json.dumps(config))
    ms.set_seed(0)
    net = HalfNet()
    x = ms.Tensor(np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32) * 8)
    plain = net(x).asnumpy()
    debugger = PrecisionDebugger(config_path=str(tmp_path / "c.json"))
    debugger.start(net)
    out = net(x).asnumpy()
    debugger.stop()
    debugger.step()
    path = tmp_path / "out" / "free_benchmark.csv"
    rows = []
    if path.exists():
        with open(path, newline="") as handle:
            reader = csv.reader(handle)
            assert tuple(next(reader)) == CSV_COLUMNS
            rows = [dict(zip(CSV_COLUMNS, row)) for row in reader]
    return rows, plain, out


@pytest.mark.parametrize("mode", ["improve_precision", "add_noise", "bit_noise", "no_change", "change_value"])
def test_pert_modes(tmp_path, mode):
    rows, plain, out = _run(tmp_path, pert_mode=mode)
    names = [r["api_name"] for r in rows]
    assert "Functional.relu.0" not in names or mode == "change_value"
    np.testing.assert_array_equal(out, plain)  # check mode: the run's numbers do not change
    if mode == "improve_precision":
        assert [(r["api_name"], r["max_rel"], r["dtype"]) for r in rows] == [("Functional.exp.0", "inf", "Float16")]
    if mode == "no_change":
        assert rows == []


def test_fix_gives_fp32_result_cast_back(tmp_path):
    x = ms.Tensor(np.random.default_rng(1).random(4096).astype(np.float16))
    expected = ops.cumsum(x.astype(ms.float32), 0).astype(ms.float16).asnumpy()
    (tmp_path / "c.json").write_text(json.dumps({"task": "free_benchmark", "dump_path": str(tmp_path / "out"),
                                                 "free_benchmark": {"handler_type": "fix"}}))
    debugger = PrecisionDebugger(config_path=str(tmp_path / "c.json"))
    debugger.start()
    fixed = ops.cumsum(x, 0)
    debugger.stop()
    assert fixed.dtype == ms.float16
    np.testing.assert_array_equal(fixed.asnumpy(), expected)
