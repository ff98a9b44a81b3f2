"""task grad_probe through PrecisionDebugger: config.json in, monitor(model), nothing else in the loop."""

from __future__ import annotations

import csv
import json

import numpy as np
import torch
from torch import nn
from torch_models import train_steps

from msprobe.core.lifecycle.debugger import BaseDebugger
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


def _config_only(tmp_path) -> str:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"task": "grad_probe", "dump_path": str(tmp_path / "grad"),
                                  "grad_probe": {"grad_level": "L1"}}))
    return str(config)


def _train(model: nn.Module, optimizer: torch.optim.Optimizer, debugger=None, steps: int = 3) -> None:
    train_steps(model, optimizer, lambda: torch.randn(3, 5), lambda m, x: m(x).pow(2).sum(), debugger, steps)


def _reminders(msprobe_log) -> list[str]:
    return [m for m in msprobe_log.messages if "debugger.monitor(model)" in m]


def test_grad_probe_without_monitor_says_what_to_call_once(tmp_path, msprobe_log):
    """Configured only through config.json, grad_probe used to write nothing and say nothing: the first
    step() of the loop warns, once, that monitor(model) is what records gradients."""
    model = nn.Linear(5, 2)
    debugger = PrecisionDebugger(config_path=_config_only(tmp_path))
    _train(model, torch.optim.SGD(model.parameters(), lr=0.1), debugger)
    assert len(_reminders(msprobe_log)) == 1
    assert list((tmp_path / "grad").rglob("*.csv")) == []


def test_grad_probe_without_monitor_warns_at_the_first_optimizer_step(tmp_path, msprobe_log):
    """A loop that never calls the debugger's start/step is reminded by the first optimizer step."""
    model = nn.Linear(5, 2)
    PrecisionDebugger(config_path=_config_only(tmp_path))
    _train(model, torch.optim.SGD(model.parameters(), lr=0.1))
    assert len(_reminders(msprobe_log)) == 1


def test_grad_probe_with_monitor_does_not_warn(tmp_path, msprobe_log):
    model = nn.Linear(5, 2)
    debugger = PrecisionDebugger(config_path=_config_only(tmp_path))
    debugger.start()  # start before monitor is fine: the reminder waits for the end of an iteration
    debugger.monitor(model)
    _train(model, torch.optim.SGD(model.parameters(), lr=0.1), debugger)
    assert _reminders(msprobe_log) == []
    assert sorted(p.name for p in (tmp_path / "grad" / "rank0").glob("grad_summary_*.csv")) == [
        "grad_summary_0.csv", "grad_summary_1.csv", "grad_summary_2.csv"]


def test_a_finished_grad_probe_debugger_leaves_no_reminder_behind(tmp_path, msprobe_log):
    model = nn.Linear(5, 2)
    PrecisionDebugger(config_path=_config_only(tmp_path)).finish()
    _train(model, torch.optim.SGD(model.parameters(), lr=0.1))
    assert _reminders(msprobe_log) == []
