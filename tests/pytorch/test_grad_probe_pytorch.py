"""Grad probe on PyTorch: real training on CPU, CSV values checked against float64 numpy."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from msprobe.pytorch.grad_probe import GradMonitor

sys.path.insert(0, str(Path(__file__).parents[1] / "common"))  # the shared numpy checks (importlib mode)
from grad_probe_checks import check_l0_step, check_l2_step  # noqa: E402
from grad_probe_checks import read_rows as _rows  # noqa: E402

BOUNDS = [-0.01, 0.0, 0.01]
PARAMS = ["conv.weight", "conv.bias", "fc.weight", "fc.bias"]


class ConvNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 2, 3)
        self.fc = torch.nn.Linear(32, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.conv(x)).flatten(1))


def _train(steps: int, monitor: GradMonitor | None, optimizer_cls=torch.optim.SGD, pass_optimizer=False,
           lr: float = 0.1, seed: int = 0):
    """Train ``steps`` steps; return (losses, final parameters, gradients seen at each step)."""
    torch.manual_seed(seed)
    model = ConvNet()
    optimizer = optimizer_cls(model.parameters(), lr=lr)
    if monitor is not None:
        monitor.monitor(model, optimizer if pass_optimizer else None)
    data = torch.Generator().manual_seed(123)
    losses, grads = [], []
    try:
        for _ in range(steps):
            x, y = torch.randn(8, 1, 6, 6, generator=data), torch.randint(0, 3, (8,), generator=data)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            grads.append({n: p.grad.detach().numpy().copy() for n, p in model.named_parameters()})
            optimizer.step()
            losses.append(loss.detach().clone())
    finally:
        if monitor is not None:
            monitor.close()
    return losses, {n: p.detach().clone() for n, p in model.named_parameters()}, grads


def test_l2_summary_and_signs_match_numpy_over_three_steps(tmp_path):
    _, _, grads = _train(3, GradMonitor(str(tmp_path), "L2", [], BOUNDS, [], []))
    rank_dir = tmp_path / "rank0"
    assert sorted(p.name for p in rank_dir.iterdir()) == [
        "grad_summary_0.csv", "grad_summary_1.csv", "grad_summary_2.csv", "step0", "step1", "step2"]
    for step, step_grads in enumerate(grads):
        header = check_l2_step(rank_dir, step, step_grads, BOUNDS)[0]
        assert header == ["param_name", "(-inf, -0.01]", "(-0.01, 0]", "(0, 0.01]", "(0.01, inf)", "=0",
                          "max", "min", "norm", "shape"]
        assert list(step_grads) == PARAMS
    # later steps see different gradients: the files are not copies of step 0
    assert _rows(rank_dir / "grad_summary_0.csv") != _rows(rank_dir / "grad_summary_2.csv")


def test_l0_writes_crc32_checksums_and_no_signs(tmp_path):
    _, _, grads = _train(1, GradMonitor(str(tmp_path), "L0", [], BOUNDS, [], []), pass_optimizer=True)
    check_l0_step(tmp_path / "rank0", 0, grads[0])


def test_l1_header(tmp_path):
    _train(1, GradMonitor(str(tmp_path), "L1", [], BOUNDS, [], []))
    header = _rows(tmp_path / "rank0" / "grad_summary_0.csv")[0]
    assert header == ["param_name", "max", "min", "norm", "shape"]
    saved = sorted(p.name for p in (tmp_path / "rank0" / "step0").iterdir())
    assert saved == sorted(f"{p}.npy" for p in PARAMS)


@pytest.mark.parametrize("optimizer_cls", [torch.optim.SGD, torch.optim.Adam])
def test_monitoring_does_not_change_training(tmp_path, optimizer_cls):
    losses_off, params_off, _ = _train(3, None, optimizer_cls)
    losses_on, params_on, _ = _train(3, GradMonitor(str(tmp_path), "L2", [], BOUNDS, [], []), optimizer_cls)
    assert all(torch.equal(a, b) for a, b in zip(losses_off, losses_on))
    assert all(torch.equal(params_off[n], params_on[n]) for n in PARAMS)
    assert (tmp_path / "rank0" / "grad_summary_2.csv").is_file()


def test_step_rank_and_param_filters(tmp_path):
    _train(3, GradMonitor(str(tmp_path / "steps"), "L1", [], BOUNDS, [1], []))
    assert sorted(p.name for p in (tmp_path / "steps" / "rank0").iterdir()) == ["grad_summary_1.csv", "step1"]

    _train(2, GradMonitor(str(tmp_path / "ranks"), "L1", [], BOUNDS, [], [1]))
    assert not (tmp_path / "ranks").exists() or not any((tmp_path / "ranks").iterdir())

    _train(1, GradMonitor(str(tmp_path / "params"), "L1", ["fc"], BOUNDS, [], []))
    assert [r[0] for r in _rows(tmp_path / "params" / "rank0" / "grad_summary_0.csv")[1:]] == ["fc.weight",
                                                                                                "fc.bias"]
    _train(1, GradMonitor(str(tmp_path / "exact"), "L1", ["conv.bias"], BOUNDS, [], []))
    assert [r[0] for r in _rows(tmp_path / "exact" / "rank0" / "grad_summary_0.csv")[1:]] == ["conv.bias"]


def test_unmatched_param_list_entry_is_reported(tmp_path, msprobe_log):
    _train(1, GradMonitor(str(tmp_path), "L1", ["fc.weight", "decoder"], BOUNDS, [], []))
    assert "param_list entry 'decoder' matches no parameter" in msprobe_log.text()


def test_other_optimizers_and_skipped_steps_are_not_counted(tmp_path):
    torch.manual_seed(0)
    model, other = ConvNet(), torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    other_optimizer = torch.optim.SGD(other.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**4)
    monitor = GradMonitor(str(tmp_path), "L1", [], BOUNDS, [], [])
    monitor.monitor(model)
    try:
        x, y = torch.randn(4, 1, 6, 6), torch.tensor([0, 1, 2, 0])
        for poison in (False, True, False):
            other(torch.ones(1, 2)).sum().backward()
            other_optimizer.step()  # a second optimizer: its steps are not the model's
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y) * (float("inf") if poison else 1.0)
            scaler.scale(loss).backward()
            scaler.step(optimizer)  # skipped (no optimizer.step()) when the gradients are not finite
            scaler.update()
    finally:
        monitor.close()
    assert monitor.step == 2
    assert sorted(p.name for p in (tmp_path / "rank0").glob("*.csv")) == ["grad_summary_0.csv",
                                                                          "grad_summary_1.csv"]
    assert all(np.isfinite(float(r[1])) for r in _rows(tmp_path / "rank0" / "grad_summary_1.csv")[1:])


def test_bad_arguments_raise_one_clear_error(tmp_path):
    with pytest.raises(ValueError, match=r"(?s)grad_level='L9'.*bounds=\[0, 0\]"):
        GradMonitor(str(tmp_path), "L9", [], [0, 0], [], [])


def test_compare_two_real_runs_finds_where_they_part(tmp_path):
    from msprobe.core.grad_probe import GradComparator

    _train(4, GradMonitor(str(tmp_path / "a"), "L2", [], BOUNDS, [], []), lr=0.1)
    _train(4, GradMonitor(str(tmp_path / "b"), "L2", [], BOUNDS, [], []), lr=2.0)
    results = GradComparator.compare_distributed(tmp_path / "a", tmp_path / "b", tmp_path / "out")
    result = results[0]
    # same initial weights and data: step 0's gradients are identical; the learning rate parts them later
    assert result.totals[0] == 1.0
    assert result.first_diverging_step == 1
    step = result.first_diverging_step
    a = {n: np.load(tmp_path / "a" / "rank0" / f"step{step}" / f"{n}.npy") for n in PARAMS}
    b = {n: np.load(tmp_path / "b" / "rank0" / f"step{step}" / f"{n}.npy") for n in PARAMS}
    agree = sum(int(np.sum(a[n] == b[n])) for n in PARAMS)
    assert result.totals[step] == pytest.approx(agree / sum(a[n].size for n in PARAMS), abs=1e-15)
    assert (tmp_path / "out" / "rank0" / "similarities_picture" / "fc.weight.png").is_file()
