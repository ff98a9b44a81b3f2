"""MindSpore's empty-like APIs are marked in the dump too (docs/compare.md#uninitialised-values): a cell that
fills a ``mint.empty_like`` / ``Tensor.new_empty`` buffer, run twice, compares with no divergence."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

ms = pytest.importorskip("mindspore")

from mindspore import Tensor, mint  # noqa: E402
from mindspore import nn as mnn  # noqa: E402

from msprobe.core.lifecycle.debugger import BaseDebugger  # noqa: E402
from msprobe.mindspore.compare import compare  # noqa: E402

X = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)


class ScratchBuffers(mnn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.fc = mnn.Dense(16, 4, weight_init="normal", bias_init="zeros")
        self.half = Tensor(np.full((1, 16), 0.5, np.float32))

    def construct(self, x):
        staged = mint.empty_like(x)
        staged.copy_(x)
        scale = x.new_empty((1, 16))
        scale.copy_(self.half)  # fill_ has no CPU kernel in MindSpore 2.10
        return self.fc(staged * scale)


def _run(root: Path, junk: float) -> tuple[Path, np.ndarray]:
    from msprobe.mindspore import PrecisionDebugger

    ms.set_seed(0)
    cell = ScratchBuffers()
    litter = Tensor(np.full((8, 16), junk, np.float32)) + Tensor(np.full((1, 16), junk, np.float32))  # freed memory
    del litter
    debugger = PrecisionDebugger(dump_path=str(root), task="statistics", level="L1", step=[0])
    debugger.start(cell)
    grads = ms.grad(lambda a: cell(a).square().mean(), grad_position=None, weights=cell.trainable_params())(
        Tensor(X))
    debugger.stop()
    debugger.step()
    BaseDebugger._active.finish()
    return root / "step0" / "rank" / "dump.json", np.concatenate([g.asnumpy().ravel() for g in grads])


def test_bit_identical_runs_that_fill_empty_buffers_compare_without_a_divergence(tmp_path):
    (a, grads_a), (b, grads_b) = _run(tmp_path / "a", 3.0e30), _run(tmp_path / "b", -7.0)
    assert np.array_equal(grads_a, grads_b)
    for path in (a, b):
        data = json.loads(path.read_text())["data"]
        buffers = [name for name in data if ".empty_like." in name or ".new_empty." in name]
        assert len(buffers) == 2 and all(data[n]["output"][0]["uninitialised"] is True for n in buffers)
    norms = [json.loads(path.read_text())["data"]["Mint.empty_like.0.forward"]["output"][0]["Norm"] for path in (a, b)]
    assert norms[0] != norms[1], "the allocator left the same bytes twice"
    result = compare({"npu_json_path": str(a), "bench_json_path": str(b)}, tmp_path / "out")
    assert result.first_divergence is None
    assert [r for r in result.results if r.diverges] == []
    assert {r.entry.split(".")[1] for r in result.results if r.uninitialised} >= {"empty_like", "new_empty"}
