"""Uninitialised memory is never a divergence (docs/compare.md#uninitialised-values): a model that takes a
buffer from ``empty_like`` / ``new_empty`` and fills it, run twice bit for bit, compares with no divergence
although the two dumps record whatever the allocator left in the buffer."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn
from torch_models import dump_one_step

from msprobe.core import cli
from msprobe.core.compare.read import read_plain_pt
from msprobe.pytorch.compare import compare


class ScratchBuffers(nn.Module):
    """Fills its scratch buffers before use, as kernels written in Python do (a preallocated output)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        staged = torch.empty_like(x)
        staged.copy_(x)
        hidden = torch.relu(self.fc1(staged))
        scale = hidden.new_empty((1, 32))
        scale.fill_(0.5)
        return self.fc2(hidden * scale)


def _run(root: Path, task: str, junk: float) -> tuple[Path, list[torch.Tensor]]:
    torch.manual_seed(0)
    model = ScratchBuffers()
    x = torch.randn(8, 16)
    litter = torch.full((8, 16), junk) + torch.full((1, 32), junk).sum()  # freed memory the buffers may reuse
    del litter
    out = dump_one_step(model, lambda m: m(x).square().mean(), root, task=task, level="L1")
    return out, [p.grad.clone() for p in model.parameters()]


def _outputs(run: Path, api: str) -> list[dict]:
    data = json.loads((run / "dump.json").read_text())["data"]
    return [value for name, entry in data.items() if f".{api}." in name and name.endswith("forward")
            for value in entry["output"]]


@pytest.mark.parametrize("task", ["statistics", "tensor"])
def test_bit_identical_runs_that_fill_empty_buffers_compare_without_a_divergence(task, tmp_path):
    (a, grads_a), (b, grads_b) = _run(tmp_path / "a", task, 3.0e30), _run(tmp_path / "b", task, -7.0)
    assert all(torch.equal(g, h) for g, h in zip(grads_a, grads_b))  # the two runs are the same run
    for api in ("empty_like", "new_empty"):
        for value in _outputs(a, api) + _outputs(b, api):
            assert value["uninitialised"] is True  # the dump says so: the member 1.1.1 readers ignore
    for api in ("copy_", "fill_"):  # their outputs hold what was written: defined
        assert all("uninitialised" not in value for value in _outputs(a, api))
    recorded = [_outputs(run, "empty_like")[0] for run in (a, b)]
    if task == "tensor":  # the buffers as saved, in float64
        saved = [read_plain_pt(run / "dump_tensor_data" / value["data_name"]).astype(np.float64)
                 for run, value in zip((a, b), recorded)]
        assert not np.array_equal(saved[0], saved[1], equal_nan=True), "the allocator left the same bytes twice"
    else:
        stats = [[v[key] for key in ("Max", "Min", "Mean", "Norm")] for v in recorded]
        # NaN statistics on both sides also differ for a naive compare (json.loads gives one NaN object, so lists of
        # them compare equal here)
        assert stats[0] != stats[1] or any(math.isnan(x) for x in stats[0]), "the allocator left the same bytes twice"

    result = compare({"npu_json_path": str(a / "dump.json"), "bench_json_path": str(b / "dump.json")},
                     tmp_path / "out")
    assert result.first_divergence is None
    assert [r for r in result.results if r.diverges] == []
    marked = {(r.entry.split(".")[1], r.part) for r in result.results if r.uninitialised}
    assert marked == {("empty_like", "output"), ("new_empty", "output"), ("copy_", "input"), ("fill_", "input")}
    for row in (r for r in result.results if r.uninitialised):
        assert row.verdict == ("" if task == "statistics" else "None") and row.highlight == ""
        assert row.excess is None and not row.entering
        assert "Uninitialised memory" in " ".join(row.messages)

    config = tmp_path / "graph.json"  # the graph's colours follow the same rule
    config.write_text(json.dumps({"npu_path": str(a), "bench_path": str(b)}))
    assert cli.main(["-f", "pytorch", "graph", "-i", str(config), "-o", str(tmp_path / "graph")]) == 0
    nodes = json.loads(next((tmp_path / "graph").glob("*.vis")).read_text())["NPU"]["node"]
    buffers = [n for n in nodes if ".empty_like." in n or ".new_empty." in n]
    assert len(buffers) == 2
    for name in buffers:
        assert float(nodes[name]["data"].get("rounding_excess", 0)) <= 1
        assert nodes[name]["data"]["precision_index"] == 0.0  # 0: no error (1.1.1's index)
