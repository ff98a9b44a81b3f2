"""The MindSpore PyNative interceptor against real MindSpore runs on CPU.

Expected entry names come from msprobe 1.1.1's own dumps of the same network
(reference-outputs/mindspore: ms_stat_L1, ms_stat_L1_model, ms_stat_L0, ms_stat_mix), whose script
``run_ref.py`` is visible in their stack.json.
"""

from __future__ import annotations

import numpy as np
import pytest

ms = pytest.importorskip("mindspore")
from mindspore import Tensor, mint, nn, ops  # noqa: E402

from msprobe.core.contract import Call  # noqa: E402
from msprobe.core.lifecycle.naming import backward_name  # noqa: E402
from msprobe.mindspore.adapter import MindSporeTensorAdapter  # noqa: E402
from msprobe.mindspore.hooks import Interceptor  # noqa: E402

ms.set_context(mode=ms.PYNATIVE_MODE)


class RecordingSink:
    """Keeps entry names in the order 1.1.1 writes them (a forward when it ends) and the backward grads."""

    def __init__(self, wants_backward: bool = True) -> None:
        self.names: list[str] = []
        self.calls: dict[str, Call] = {}
        self.args: dict[str, tuple] = {}  # a call lets its arguments go when it returns
        self.grads: dict[str, tuple[tuple, tuple]] = {}
        self.wants_backward = wants_backward

    def forward_start(self, call: Call) -> bool:
        self.calls[call.name] = call
        self.args[call.name] = call.args
        return self.wants_backward

    def forward_end(self, call: Call, output: object) -> None:
        self.names.append(call.name)

    def backward(self, call: Call, grad_input: tuple, grad_output: tuple) -> None:
        name = backward_name(call.name)
        self.names.append(name)
        self.grads[name] = (grad_input, grad_output)


class Net(nn.Cell):
    """The network of the 1.1.1 reference dumps."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Dense(4, 3)
        self.relu = nn.ReLU()
        self.mul = ops.Mul()

    def construct(self, x):
        y = self.fc(x)
        y = self.mul(y, 2.0)
        y = ops.relu(y) + 1
        y = mint.abs(y)
        return self.relu(y).sum()


X = np.array([[1, 2, 3, 4], [-3, 0, 1, -2]], np.float32)


def record(level: str, attach_model: bool, wants_backward: bool = True) -> RecordingSink:
    net = Net()
    sink = RecordingSink(wants_backward)
    interceptor = Interceptor(sink, level=level)
    interceptor.attach(net if attach_model else None)
    interceptor.enable()
    try:
        ms.value_and_grad(lambda a: net(a), None, net.trainable_params())(Tensor(X))
    finally:
        interceptor.detach()
    return sink


L1_NAMES = ["Functional.relu.0.forward", "Tensor.__add__.0.forward", "Mint.abs.0.forward",
            "Tensor.sum.0.forward", "Tensor.sum.0.backward", "Mint.abs.0.backward",
            "Tensor.__add__.0.backward", "Functional.relu.0.backward"]


def test_l1_without_model_matches_reference_names():
    assert record("L1", attach_model=False).names == L1_NAMES


def test_l1_with_model_adds_primitive_entries_like_reference():
    assert record("L1", attach_model=True).names == [
        "Primitive.shape_op.Shape.0.forward", "Primitive.matmul.MatMul.0.forward",
        "Primitive.bias_add.BiasAdd.0.forward", "Primitive.mul.Mul.0.forward",
        "Functional.relu.0.forward", "Tensor.__add__.0.forward", "Mint.abs.0.forward",
        "Primitive.relu.ReLU.0.forward", "Tensor.sum.0.forward", "Tensor.sum.0.backward",
        "Primitive.relu.ReLU.0.backward", "Mint.abs.0.backward", "Tensor.__add__.0.backward",
        "Functional.relu.0.backward", "Primitive.mul.Mul.0.backward",
        "Primitive.bias_add.BiasAdd.0.backward", "Primitive.matmul.MatMul.0.backward"]


def test_l0_matches_reference_names():
    assert record("L0", attach_model=True).names == [
        "Cell.fc.Dense.forward.0", "Cell.relu.ReLU.forward.0",
        "Cell.relu.ReLU.backward.0", "Cell.fc.Dense.backward.0"]


def test_mix_matches_reference_names():
    assert record("mix", attach_model=True).names == [
        "Primitive.shape_op.Shape.0.forward", "Primitive.matmul.MatMul.0.forward",
        "Primitive.bias_add.BiasAdd.0.forward", "Cell.fc.Dense.forward.0", "Primitive.mul.Mul.0.forward",
        "Functional.relu.0.forward", "Tensor.__add__.0.forward", "Mint.abs.0.forward",
        "Primitive.relu.ReLU.0.forward", "Cell.relu.ReLU.forward.0", "Tensor.sum.0.forward",
        "Tensor.sum.0.backward", "Primitive.relu.ReLU.0.backward", "Cell.relu.ReLU.backward.0",
        "Mint.abs.0.backward", "Tensor.__add__.0.backward", "Functional.relu.0.backward",
        "Primitive.mul.Mul.0.backward", "Primitive.bias_add.BiasAdd.0.backward",
        "Primitive.matmul.MatMul.0.backward", "Cell.fc.Dense.backward.0"]


def test_no_backward_entries_when_sink_declines_them():
    assert record("L1", attach_model=False, wants_backward=False).names == [
        n for n in L1_NAMES if n.endswith("forward")]


def test_backward_grads_equal_mindspore_grad():
    x = np.array([0.5, -1.0, 2.0, -0.25], np.float32)
    w = np.array([1.5, 2.0, -3.0, 4.0], np.float32)

    def loss(a, b):
        y = ops.mul(a, b)
        z = ops.relu(y)
        return (z * z).sum()

    sink = RecordingSink()
    interceptor = Interceptor(sink, level="L1")
    interceptor.enable()
    try:
        _, grad_b = ms.grad(loss, grad_position=(0, 1))(Tensor(x), Tensor(w))
    finally:
        interceptor.detach()
    expected_grad_b = ms.grad(loss, grad_position=1)(Tensor(x), Tensor(w))
    y = (x.astype(np.float64) * w)
    z = np.maximum(y, 0)
    relu_in, relu_out = sink.grads["Functional.relu.0.backward"]
    np.testing.assert_allclose(relu_in[0].asnumpy(), 2 * z, rtol=1e-6)
    np.testing.assert_allclose(relu_out[0].asnumpy(), 2 * z * (y > 0), rtol=1e-6)
    _, mul_out = sink.grads["Functional.mul.0.backward"]
    np.testing.assert_array_equal(mul_out[1].asnumpy(), expected_grad_b.asnumpy())
    np.testing.assert_array_equal(grad_b.asnumpy(), expected_grad_b.asnumpy())
    np.testing.assert_allclose(mul_out[0].asnumpy(), 2 * z * (y > 0) * w, rtol=1e-6)


def test_cell_backward_grads():
    sink = record("L0", attach_model=True)
    grad_in, grad_out = sink.grads["Cell.relu.ReLU.backward.0"]
    relu_input = sink.args["Cell.relu.ReLU.forward.0"][0].asnumpy()
    np.testing.assert_array_equal(grad_in[0].asnumpy(), np.ones((2, 3), np.float32))
    np.testing.assert_array_equal(grad_out[0].asnumpy(), (relu_input > 0).astype(np.float32))


@ms.jit
def scaled_relu(x):
    return ops.relu(x) * 2


def test_jit_function_is_one_entry_with_backward():
    sink = RecordingSink()
    interceptor = Interceptor(sink, level="L1")
    interceptor.enable()
    try:
        x = Tensor(np.array([1.0, -2.0, 3.0], np.float32))
        grad = ms.grad(lambda a: scaled_relu(a).sum())(x)
        scaled_relu(x)
    finally:
        interceptor.detach()
    assert sink.names == ["Jit.scaled_relu.0.forward", "Tensor.sum.0.forward", "Tensor.sum.0.backward",
                          "Jit.scaled_relu.0.backward", "Jit.scaled_relu.1.forward"]
    np.testing.assert_array_equal(sink.grads["Jit.scaled_relu.0.backward"][1][0].asnumpy(), grad.asnumpy())


def test_nested_and_sink_calls_are_not_recorded():
    class SinkUsingOps(RecordingSink):
        def forward_end(self, call, output):
            super().forward_end(call, output)
            ops.relu(Tensor(np.ones(2, np.float32))).sum()  # the sink's own ops

    sink = SinkUsingOps(wants_backward=False)
    interceptor = Interceptor(sink, level="L1")
    interceptor.enable()
    try:
        ops.softmax(Tensor(np.ones((2, 2), np.float32)))  # calls other ops inside
        ops.relu(Tensor(np.ones(2, np.float32)))
    finally:
        interceptor.detach()
    assert sink.names == ["Functional.softmax.0.forward", "Functional.relu.0.forward"]


def test_disable_detach_restore_and_reset_counts():
    originals = (ops.relu, mint.abs, Tensor.__add__, Tensor.sum)
    sink = RecordingSink(wants_backward=False)
    interceptor = Interceptor(sink, level="L1")
    net = Net()
    interceptor.attach(net)
    x = Tensor(X)
    interceptor.enable()
    assert ops.relu is ops.relu and ops.relu is not originals[0]
    net(x)
    recorded = list(sink.names)
    interceptor.disable()
    assert (ops.relu, mint.abs, Tensor.__add__, Tensor.sum) == originals
    assert "mul" in vars(net) and vars(net)["mul"] is net._primitives["mul"]
    net(x)
    assert sink.names == recorded
    interceptor.enable()
    interceptor.reset_counts()
    net(x)
    assert sink.names[len(recorded):] == recorded
    interceptor.detach()
    assert (ops.relu, mint.abs, Tensor.__add__, Tensor.sum) == originals
    assert "__add__" not in vars(Tensor)
    net(x)
    assert len(sink.names) == 2 * len(recorded)


def test_bad_arguments_name_the_problem():
    with pytest.raises(ValueError, match="level 'L2'"):
        Interceptor(RecordingSink(), level="L2")
    with pytest.raises(ValueError, match="needs the model"):
        Interceptor(RecordingSink(), level="L0").attach(None)
    with pytest.raises(TypeError, match="nn.Cell"):
        Interceptor(RecordingSink(), level="mix").attach(object())


class StatsSink:
    """What a statistics dump does on the device: stats of every tensor in and out."""

    def __init__(self) -> None:
        self.adapter = MindSporeTensorAdapter()
        self.handles: list = []

    def _collect(self, values) -> None:
        for value in values:
            if isinstance(value, (tuple, list)):
                self._collect(value)
            elif self.adapter.is_tensor(value):
                self.handles.append(self.adapter.stats(value))

    def forward_start(self, call: Call) -> bool:
        self._collect(call.args)
        return True

    def forward_end(self, call: Call, output: object) -> None:
        self._collect([output])

    def backward(self, call: Call, grad_input: tuple, grad_output: tuple) -> None:
        self._collect([grad_input, grad_output])

    def flush(self) -> int:
        count = len(self.adapter.fetch(self.handles))
        self.handles.clear()
        return count


def train(level: str | None, steps: int = 3):
    ms.set_seed(0)
    net = Net()
    init = np.random.default_rng(1)
    for param in net.trainable_params():
        param.set_data(Tensor(init.standard_normal(param.shape).astype(np.float32)))
    optimizer = nn.Momentum(net.trainable_params(), learning_rate=0.1, momentum=0.9)
    grad_fn = ms.value_and_grad(lambda a: net(a), None, optimizer.parameters)
    sink = StatsSink()
    interceptor = Interceptor(sink, level=level) if level else None
    if interceptor:
        interceptor.attach(net)
    losses = []
    for step in range(steps):
        if interceptor:
            interceptor.enable()
        loss, grads = grad_fn(Tensor(X * (step + 1)))
        optimizer(grads)
        if interceptor:
            interceptor.disable()
            interceptor.reset_counts()
            assert sink.flush() > 0
        losses.append(loss.asnumpy())
    if interceptor:
        interceptor.detach()
    return losses, [p.asnumpy() for p in net.trainable_params()]


@pytest.mark.parametrize("level", ["L1", "mix"])
def test_training_is_bit_identical_with_interceptor(level):
    bare_losses, bare_weights = train(None)
    losses, weights = train(level)
    for a, b in zip(bare_losses + bare_weights, losses + weights):
        assert a.tobytes() == b.tobytes()


def test_mix_enable_disable_cycles_put_every_patch_back_exactly():
    from msprobe.mindspore.hooks.catalog import api_targets
    from msprobe.mindspore.private_api import _JitExecutor

    targets = api_targets()
    net = Net()

    def state() -> tuple:
        attrs = [vars(t.owner).get(t.attr) if isinstance(t.owner, type) else getattr(t.owner, t.attr)
                 for t in targets]
        cells = [(dict(vars(cell)).get("mul"), len(vars(cell).get("_lazy_forward_pre_hook") or ()),
                  len(vars(cell).get("_lazy_forward_hook") or ())) for _, cell in net.cells_and_names()]
        return attrs, vars(_JitExecutor)["__call__"], cells

    before = state()
    interceptor = Interceptor(RecordingSink(wants_backward=False), level="mix")
    interceptor.attach(net)
    for _ in range(2):
        interceptor.enable()
        interceptor.enable()
        assert state() != before
        net(Tensor(X))
        interceptor.disable()
        interceptor.disable()
        assert state() == before
    interceptor.enable()
    interceptor.detach()
    assert state() == before
