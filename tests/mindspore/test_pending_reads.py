"""MindSpore statistics on the CPU are read after the call, in batches (``msprobe.mindspore.reads``): whatever
changes a recorded tensor in place afterwards, the dump holds the values the call saw (checked against
float64 numpy of copies taken when the call ran)."""

from __future__ import annotations

import json
from pathlib import Path

import mindspore as ms
import numpy as np
import pytest
from mindspore import Parameter, Tensor, nn, ops

from msprobe.mindspore import PrecisionDebugger
from msprobe.mindspore.private_api import _pynative_executor

X = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]], np.float32)


def expected(values: np.ndarray) -> dict:
    wide = values.astype(np.float64)
    return {"Max": wide.max(), "Min": wide.min(), "Mean": wide.mean(), "Norm": np.sqrt((wide**2).sum())}


def assert_recorded(record: dict, values: np.ndarray) -> None:
    for key, value in expected(values).items():
        assert record[key] == pytest.approx(value, rel=1e-6), key


def dump_data(root: Path, step: int = 0) -> dict:
    return json.loads(next((root / f"step{step}").rglob("dump.json")).read_text())["data"]


def only(data: dict, part: str) -> dict:
    names = [name for name in data if part in name and "forward" in name]
    assert len(names) == 1, names
    return data[names[0]]


MUTATIONS = {
    "setitem": lambda y: y.__setitem__(0, 5.0),
    "ops.assign": lambda y: ops.assign(y, ops.zeros_like(y)),
    "assign_value": lambda y: y.assign_value(Tensor(np.full(y.shape, 7.0, np.float32))),
}


class ChangesItsChild(nn.Cell):
    """A cell that changes its child's output in place before returning it."""

    def __init__(self, mutate) -> None:
        super().__init__()
        self.act = nn.Tanh()
        self.mutate = mutate

    def construct(self, x):
        y = self.act(x)
        self.mutate(y)
        return y


@pytest.mark.parametrize("level", ["L0", "L1", "mix"])
@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_an_output_changed_in_place_after_its_call_is_recorded_as_the_call_returned_it(tmp_path, level, mutation):
    net = ChangesItsChild(MUTATIONS[mutation])
    debugger = PrecisionDebugger(dump_path=str(tmp_path / "dump"), task="statistics", level=level)
    debugger.start(net)
    y = net(Tensor(X))
    debugger.stop()
    debugger.step()
    after = y.asnumpy()
    assert not np.allclose(after, np.tanh(X)), "the mutation must change the output for this test to mean anything"
    data = dump_data(tmp_path / "dump")
    record = only(data, "Cell.act.Tanh" if level == "L0" else "Tanh.0")["output"][0]
    assert_recorded(record, np.tanh(X))


class Dense(nn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Dense(3, 2)
        self.norm = nn.BatchNorm1d(2)

    def construct(self, x):
        return self.norm(self.fc(x))


def _net() -> Dense:
    ms.set_seed(0)
    net = Dense()
    net.set_train(True)
    return net


OPTIMIZERS = {
    "Momentum": lambda params: nn.Momentum(params, learning_rate=0.5, momentum=0.9),
    "Adam": lambda params: nn.Adam(params, learning_rate=0.5),
}


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
@pytest.mark.parametrize("update", ["inside", "between stop and step"])
@pytest.mark.parametrize("level", ["L1", "mix"])
def test_parameters_and_moving_statistics_are_recorded_before_the_step_changes_them(tmp_path, optimizer, update, level):
    """The weight a MatMul read and the moving mean BatchNorm read (and updates itself, in place) are
    recorded as they were, though the optimizer changes them before the step's batch is read."""
    net = _net()
    opt = OPTIMIZERS[optimizer](net.trainable_params())
    grad_fn = ms.value_and_grad(lambda x: (net(x) ** 2).sum(), None, opt.parameters)
    debugger = PrecisionDebugger(dump_path=str(tmp_path / "dump"), task="statistics", level=level, step=[1])
    seen = {}
    for step in range(2):
        if step == 1:
            seen = {"weight": net.fc.weight.asnumpy().copy(), "moving_mean": net.norm.moving_mean.asnumpy().copy()}
        debugger.start(net)
        _, grads = grad_fn(Tensor(X))
        if update == "inside":
            opt(grads)
        debugger.stop()
        if update != "inside":
            opt(grads)
        debugger.step()
    assert not np.array_equal(seen["weight"], net.fc.weight.asnumpy())
    assert not np.array_equal(seen["moving_mean"], net.norm.moving_mean.asnumpy())
    data = dump_data(tmp_path / "dump", step=1)
    assert_recorded(only(data, "MatMul")["input_args"][1], seen["weight"])
    assert_recorded(only(data, "bn_train.BatchNorm")["input_args"][3], seen["moving_mean"])


def test_set_data_after_the_call_does_not_reach_the_record(tmp_path):
    weight = Parameter(Tensor(X), name="w")
    debugger = PrecisionDebugger(dump_path=str(tmp_path / "dump"), task="statistics", level="L1")
    debugger.start()
    ops.mul(weight, 2.0)
    weight.set_data(Tensor(np.zeros_like(X)))
    debugger.stop()
    debugger.step()
    assert_recorded(only(dump_data(tmp_path / "dump"), "Functional.mul")["input_args"][0], X)


def test_capture_on_the_cpu_runs_each_operator_at_its_call_and_gives_the_users_setting_back(tmp_path):
    """While capture is on, PyNative runs synchronously on the CPU, its front-end and gradient pipelines in the
    calling thread (msprobe.mindspore.reads): an operator's error comes at its own call in the user's code, the
    records before it hold their numbers, and the asynchronous executor the user had is back after stop()."""
    assert ms.get_context("pynative_synchronize") is False
    debugger = PrecisionDebugger(dump_path=str(tmp_path / "dump"), task="statistics", level="L1")
    debugger.start()
    assert ms.get_context("pynative_synchronize") is True
    assert _pynative_executor.disable_frontend_and_bprop_pipeline() is True  # off already: in the calling thread
    doubled = ops.mul(Tensor(X), 2.0)
    with pytest.raises(RuntimeError, match="Gather"):
        ops.gather(Tensor(X[0]), Tensor(np.array([5], np.int32)), 0)  # raised here, not at a later read
    ops.exp(doubled)
    debugger.stop()
    debugger.step()
    assert ms.get_context("pynative_synchronize") is False
    assert _pynative_executor.disable_frontend_and_bprop_pipeline() is False  # the pipelines are on again
    _pynative_executor.enable_frontend_and_bprop_pipeline()
    data = dump_data(tmp_path / "dump")
    record = only(data, "Functional.exp")["input_args"][0]
    assert record["Max"] == pytest.approx(float((X * 2).max())) and record["Min"] == pytest.approx(float((X * 2).min()))


def test_a_saved_tensors_hooks_block_open_across_stop_keeps_the_pipelines_it_needs(tmp_path):
    """Capture runs PyNative's pipelines in the calling thread (msprobe.mindspore.reads.synchronous_capture)
    and turns them back on at stop(), except while a saved_tensors_hooks block opened during capture is still
    open: its hooks need them in the calling thread, and its pack hook still sees every saved tensor."""
    packed = []
    debugger = PrecisionDebugger(dump_path=str(tmp_path / "dump"), task="statistics", level="L1")
    debugger.start()
    hooks = ms.saved_tensors_hooks(lambda t: packed.append(t) or t, lambda t: t)
    hooks.__enter__()
    debugger.stop()
    debugger.step()
    assert _pynative_executor.disable_frontend_and_bprop_pipeline() is True  # still in the calling thread
    weight = Parameter(Tensor(X), name="w")
    grads = ms.grad(lambda x: ops.sum(ops.mul(x, weight)), grad_position=None, weights=[weight])(Tensor(X))
    hooks.__exit__(None, None, None)
    np.testing.assert_array_equal(grads[0].asnumpy(), X)
    assert packed  # the pack hook ran
    _pynative_executor.enable_frontend_and_bprop_pipeline()
