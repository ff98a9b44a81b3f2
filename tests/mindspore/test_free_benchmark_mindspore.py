"""task free_benchmark on MindSpore PyNative (docs/free_benchmark.md#mindspore-pynative): fp16 exp overflow
flagged (forward and backward stage), relu quiet, the backward stage leaves training bit-identical, every
MindSpore pert_mode runs, fix gives the fp32 result cast back, check leaves the output unchanged."""

from __future__ import annotations

import json

import mindspore as ms
import numpy as np
import pytest
from mindspore import nn, ops

from msprobe.core.free_benchmark import CSV_FILE, read_rows
from msprobe.mindspore import PrecisionDebugger


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
    rows = read_rows(tmp_path / "out" / CSV_FILE)
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


class GradOverflowNet(nn.Cell):
    """fp16 inputs whose ``exp`` fits in fp16 but whose gradient (``8 × exp``) does not: only the
    backward stage can see it. ``relu``'s gradient (a mask) is exact in any precision. The trained
    weight is float32, so the overflow does not end the run."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.v = ms.Parameter(ms.Tensor(np.ones(size, np.float32)), name="v")

    def construct(self, x, scale):
        exp, relu = ops.exp(x).astype(ms.float32), ops.relu(x).astype(ms.float32)
        kept = ops.dropout(relu, p=0.5, training=self.training)  # random: re-runs must not change the user's draws
        return (exp * scale * self.v).sum() + (kept * self.v).sum()


X = np.array([-3.0, 1.0, 5.0, 10.5, -0.5, 10.25], dtype=np.float64)
FP16_MAX = float(np.finfo(np.float16).max)


def _train(tmp_path, steps: int, **section):
    """``steps`` optimizer steps of GradOverflowNet, with the debugger when ``section`` is given; returns
    the losses, the input gradients, the final weight, the next random draw and the CSV rows."""
    ms.set_seed(0)
    net = GradOverflowNet(X.size)
    net.set_train(True)
    optimizer = nn.SGD(net.trainable_params(), learning_rate=1e-6)
    value_and_grad = ms.value_and_grad(net, 0, optimizer.parameters)
    x = ms.Tensor(X.astype(np.float16))
    scale = ms.Tensor(np.full(X.shape, 8.0, np.float32))
    debugger = None
    if section:
        config = {"task": "free_benchmark", "dump_path": str(tmp_path / "out"), "free_benchmark": section}
        (tmp_path / "c.json").write_text(json.dumps(config))
        debugger = PrecisionDebugger(config_path=str(tmp_path / "c.json"))
    losses, x_grads = [], []
    for _ in range(steps):
        if debugger is not None:
            debugger.start(net)
        loss, (x_grad, weight_grads) = value_and_grad(x, scale)
        optimizer(weight_grads)
        if debugger is not None:
            debugger.stop()
            debugger.step()
        losses.append(loss.asnumpy())
        x_grads.append(x_grad.asnumpy())
    next_draw = ops.rand((4,)).asnumpy()
    rows = read_rows(tmp_path / "out" / CSV_FILE)
    return losses, x_grads, net.v.asnumpy(), next_draw, rows


def test_backward_stage_flags_exp_gradient_and_not_relu(tmp_path):
    # independent reference: exp(10.5) fits fp16, its gradient 8 × exp(10.5) does not
    assert np.exp(X).max() < FP16_MAX < 8 * np.exp(X).max() < np.finfo(np.float32).max
    *_, rows = _train(tmp_path, 1, fuzz_stage="backward")
    assert [(r["api_name"], r["stage"], r["max_rel"], r["dtype"], r["shape"]) for r in rows] == [
        ("Functional.exp.0", "backward", "inf", "Float16", "(6,)")
    ]


def test_backward_stage_no_change_is_quiet(tmp_path):
    """The same inputs re-run through ``mindspore.vjp`` with the real output gradient give the real
    input gradients bit for bit: the recomputation itself adds no difference."""
    *_, rows = _train(tmp_path, 1, fuzz_stage="backward", pert_mode="no_change")
    assert rows == []


@pytest.mark.parametrize("mode", ["improve_precision", "add_noise"])
def test_backward_stage_leaves_training_bit_identical(tmp_path, mode):
    """Losses, gradients, weights and the next random draw are those of a run without msprobe, and the
    re-run of dropout draws the original mask (its gradient does not depend on its input, so a flagged
    dropout would mean another mask)."""
    plain = _train(tmp_path / "plain", 2)
    *checked, rows = _train(tmp_path, 2, fuzz_stage="backward", pert_mode=mode)
    assert {(r["step"], r["stage"], r["api_name"]) for r in rows} == {
        ("0", "backward", "Functional.exp.0"), ("1", "backward", "Functional.exp.0")}
    for theirs, ours in zip(plain[:-1], checked):  # losses, input gradients (inf included), weight, next draw
        np.testing.assert_array_equal(np.array(ours), np.array(theirs))


def test_jit_functions_are_never_rerun():
    """A jit function may update Parameters (an optimizer's construct): free benchmark must not run it
    twice, so its Call carries no rerun."""
    from msprobe.core.contract import Call as _Call
    from msprobe.mindspore.hooks import Interceptor

    class Sink:
        def __init__(self) -> None:
            self.calls: list[_Call] = []

        def forward_start(self, call):
            self.calls.append(call)
            return False

        def forward_end(self, call, output):
            return None

        def backward(self, call, grad_input, grad_output):
            pass

    @ms.jit
    def double(x):
        return x * 2

    sink = Sink()
    interceptor = Interceptor(sink, level="L1")
    interceptor.enable()
    try:
        double(ms.Tensor(np.ones(3, np.float32)))
        ops.relu(ms.Tensor(np.ones(3, np.float32)))
    finally:
        interceptor.detach()
    by_name = {call.name: call for call in sink.calls}
    assert by_name["Jit.double.0.forward"].rerun is None
    assert by_name["Functional.relu.0.forward"].rerun is not None
