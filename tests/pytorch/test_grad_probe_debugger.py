"""task grad_probe through PrecisionDebugger: config.json in, monitor(model), nothing else in the loop."""

from __future__ import annotations

import csv
import json

import numpy as np
import torch
from torch import nn

from msprobe.core.debugger import BaseDebugger
from msprobe.pytorch import PrecisionDebugger


def test_grad_probe_from_config_writes_summaries_checked_against_the_gradients(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "task": "grad_probe", "dump_path": str(tmp_path / "grad"), "rank": [], "step": [],
        "grad_probe": {"grad_level": "L2", "param_list": [], "bounds": [-0.01, 0, 0.01]},
    }))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 4), nn.Tanh(), nn.Linear(4, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    debugger = PrecisionDebugger(config_path=str(config))
    debugger.monitor(model)
    try:
        grads = []
        for _ in range(2):
            loss = model(torch.randn(3, 5)).pow(2).sum()
            optimizer.zero_grad()
            loss.backward()
            grads.append({name: p.grad.detach().double().numpy().copy() for name, p in model.named_parameters()})
            optimizer.step()
    finally:
        BaseDebugger._active.finish()
    for step in range(2):
        with open(tmp_path / "grad" / "rank0" / f"grad_summary_{step}.csv", newline="") as handle:
            rows = {row["param_name"]: row for row in csv.DictReader(handle)}
        assert set(rows) == set(grads[step])
        for name, grad in grads[step].items():
            row = rows[name]
            assert float(row["max"]) == np.float32(grad.max())
            assert float(row["min"]) == np.float32(grad.min())
            assert abs(float(row["norm"]) - np.sqrt((grad**2).sum())) < 1e-5 * max(1.0, np.sqrt((grad**2).sum()))
            assert abs(float(row["=0"]) - (grad == 0).mean()) < 1e-12
            assert abs(float(row["(0.01, inf)"]) - (grad > 0.01).mean()) < 1e-12
            signs = np.load(tmp_path / "grad" / "rank0" / f"step{step}" / f"{name}.npy")
            assert np.array_equal(signs, grad > 0)
