"""Grad probe on MindSpore (PyNative, CPU): real training, CSV values checked against float64 numpy."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ms = pytest.importorskip("mindspore")
from mindspore import nn  # noqa: E402

from msprobe.mindspore.grad_probe import GradMonitor  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1] / "common"))  # the shared numpy checks (importlib mode)
from grad_probe_checks import check_l0_step, check_l2_step  # noqa: E402
from grad_probe_checks import read_rows as _rows  # noqa: E402

BOUNDS = [-0.1, 0.0, 0.1]
PARAMS = ["hidden.weight", "hidden.bias", "out.weight", "out.bias"]


class MLP(nn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.hidden = nn.Dense(4, 5, activation="relu")
        self.out = nn.Dense(5, 3)

    def construct(self, x):
        return self.out(self.hidden(x))


@pytest.fixture(autouse=True)
def _pynative():
    ms.set_context(mode=ms.PYNATIVE_MODE)


def _train(steps: int, monitor: GradMonitor | None, momentum: bool = True):
    """Train ``steps`` steps; return (losses, final parameters, gradients the optimizer got per step)."""
    ms.set_seed(0)
    net = MLP()
    params = net.trainable_params()
    optimizer = nn.Momentum(params, 0.1, 0.9) if momentum else nn.SGD(params, learning_rate=0.1)
    if monitor is not None:
        monitor.monitor(optimizer)
    loss_fn = nn.MSELoss()
    grad_fn = ms.value_and_grad(lambda x, y: loss_fn(net(x), y), None, optimizer.parameters)
    rng = np.random.default_rng(7)
    losses, grads = [], []
    try:
        for _ in range(steps):
            x = ms.Tensor(rng.standard_normal((6, 4)).astype(np.float32))
            y = ms.Tensor(rng.standard_normal((6, 3)).astype(np.float32))
            loss, step_grads = grad_fn(x, y)
            grads.append({p.name: g.asnumpy() for p, g in zip(optimizer.parameters, step_grads)})
            optimizer(step_grads)
            losses.append(loss.asnumpy())
    finally:
        if monitor is not None:
            monitor.close()
    return losses, {p.name: p.asnumpy() for p in net.trainable_params()}, grads


def test_l2_summary_and_signs_match_numpy_over_three_steps(tmp_path):
    _, _, grads = _train(3, GradMonitor(str(tmp_path), "L2", [], BOUNDS, [], []))
    rank_dir = tmp_path / "rank0"
    assert sorted(p.name for p in rank_dir.glob("*.csv")) == [f"grad_summary_{s}.csv" for s in range(3)]
    for step, step_grads in enumerate(grads):
        assert list(step_grads) == PARAMS
        assert check_l2_step(rank_dir, step, step_grads, BOUNDS)[0] == [
            "param_name", "(-inf, -0.1]", "(-0.1, 0]", "(0, 0.1]", "(0.1, inf)", "=0", "max", "min", "norm", "shape"]


def test_l0_checksums(tmp_path):
    _, _, grads = _train(1, GradMonitor(str(tmp_path), "L0", [], BOUNDS, [], []), momentum=False)
    check_l0_step(tmp_path / "rank0", 0, grads[0])


def test_monitoring_does_not_change_training(tmp_path):
    losses_off, params_off, _ = _train(3, None)
    losses_on, params_on, _ = _train(3, GradMonitor(str(tmp_path), "L2", [], BOUNDS, [], []))
    assert all(np.array_equal(a, b) for a, b in zip(losses_off, losses_on))
    assert all(np.array_equal(params_off[n], params_on[n]) for n in PARAMS)


def test_step_rank_and_param_filters(tmp_path, msprobe_log):
    _train(3, GradMonitor(str(tmp_path / "steps"), "L1", [], BOUNDS, [0, 2], []))
    assert sorted(p.name for p in (tmp_path / "steps" / "rank0").iterdir()) == [
        "grad_summary_0.csv", "grad_summary_2.csv", "step0", "step2"]

    _train(1, GradMonitor(str(tmp_path / "ranks"), "L1", [], BOUNDS, [], [3]))
    assert not (tmp_path / "ranks" / "rank0").exists()

    _train(1, GradMonitor(str(tmp_path / "params"), "L1", ["out", "nothing"], BOUNDS, [], []))
    assert [r[0] for r in _rows(tmp_path / "params" / "rank0" / "grad_summary_0.csv")[1:]] == ["out.weight",
                                                                                                "out.bias"]
    assert "param_list entry 'nothing' matches no parameter" in msprobe_log.text()


def test_monitor_needs_an_optimizer(tmp_path):
    with pytest.raises(TypeError, match="mindspore.nn.Optimizer, got MLP"):
        GradMonitor(str(tmp_path), "L1", [], BOUNDS, [], []).monitor(MLP())
