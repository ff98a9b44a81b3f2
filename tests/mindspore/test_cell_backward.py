"""A cell's backward entry holds what docs/mindspore/dump.md promises, against values computed apart from
msprobe: ``input`` = the gradients flowing into the cell's outputs, ``output`` = the gradients the cell
itself gives its inputs (not a residual path's share), ``None`` where none flows.

The references are float64 numpy gradients of the same network written out by hand, and MindSpore's own
``grad`` of the whole run (which the capture must leave unchanged).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

ms = pytest.importorskip("mindspore")
from mindspore import Tensor, nn, ops  # noqa: E402

from msprobe.core.lifecycle.naming import backward_name  # noqa: E402
from msprobe.mindspore import PrecisionDebugger  # noqa: E402
from msprobe.mindspore.hooks import Interceptor  # noqa: E402

ms.set_context(mode=ms.PYNATIVE_MODE)
EPS = 1e-6
RESIDUAL = 3.7


class Sink:
    """The gradients of every backward entry, by name, and the order the entries came in."""

    def __init__(self) -> None:
        self.grads: dict[str, tuple[tuple, tuple]] = {}
        self.order: list[str] = []

    def forward_start(self, call) -> bool:
        return True

    def forward_end(self, call, output) -> None:
        pass

    def backward(self, call, grad_input: tuple, grad_output: tuple) -> None:
        name = backward_name(call.name)
        self.order.append(name)
        self.grads[name] = (_host(grad_input), _host(grad_output))


def _host(grads: tuple) -> tuple:
    return tuple(None if g is None else g.asnumpy() for g in grads)


def _record(net: nn.Cell, run, level: str = "L0") -> Sink:
    sink = Sink()
    interceptor = Interceptor(sink, level=level)
    interceptor.attach(net)
    interceptor.enable()
    try:
        run()
    finally:
        interceptor.detach()
    return sink


class ReadsTwice(nn.Cell):
    def construct(self, x):
        return x * ops.rsqrt(ops.mean(x * x, -1, keep_dims=True) + EPS)


class Net(nn.Cell):
    """RMSNorm's shape: the norm reads ``h`` twice while a residual reads it too."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.norm, self.b = nn.Dense(8, 8), ReadsTwice(), nn.Dense(8, 8)

    def construct(self, x):
        h = self.a(x)
        return self.b(self.norm(h)) + h * RESIDUAL


def _net() -> tuple[Net, np.ndarray]:
    ms.set_seed(0)
    return Net(), np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)


def _reference(net: Net, x: np.ndarray) -> dict[str, np.ndarray]:
    """Float64 gradients of ``loss = sum(net(x) ** 2)``, by hand."""
    wa, ba, wb, bb = (p.asnumpy().astype(np.float64) for p in net.trainable_params())
    x = x.astype(np.float64)
    h = x @ wa.T + ba
    r = 1 / np.sqrt((h * h).mean(-1, keepdims=True) + EPS)
    n = h * r
    y = n @ wb.T + bb + RESIDUAL * h
    dy = 2 * y
    dn = dy @ wb  # what b gives its input: what flows into the norm's output
    dh_norm = dn * r - h * r**3 * (dn * h).sum(-1, keepdims=True) / h.shape[-1]
    dh = dh_norm + RESIDUAL * dy
    return {"dy": dy, "dn": dn, "dh_norm": dh_norm, "dh": dh, "dx": dh @ wa}


def _close(got: np.ndarray, expected: np.ndarray) -> None:
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())


@pytest.mark.parametrize("level", ["L0", "mix"])
def test_entries_against_float64_and_the_runs_own_gradient(level):
    net, x = _net()
    grad_fn = ms.grad(lambda t: (net(t) ** 2).sum(), grad_position=0)
    plain = grad_fn(Tensor(x)).asnumpy()
    got: list = []
    sink = _record(net, lambda: got.append(grad_fn(Tensor(x)).asnumpy()), level)
    ref = _reference(net, x)

    b_in, b_out = sink.grads["Cell.b.Dense.backward.0"]
    norm_in, norm_out = sink.grads["Cell.norm.ReadsTwice.backward.0"]
    a_in, a_out = sink.grads["Cell.a.Dense.backward.0"]
    _close(b_in[0], ref["dy"])
    _close(b_out[0], ref["dn"])
    np.testing.assert_array_equal(norm_in[0], b_out[0])  # one tensor: what b gave, what reached the norm
    _close(norm_out[0], ref["dh_norm"])  # the norm's share only, not the residual's
    assert not np.allclose(norm_out[0], ref["dh"], rtol=1e-3)
    _close(a_in[0], ref["dh"])  # both uses of h, summed
    _close(a_out[0], ref["dx"])
    np.testing.assert_array_equal(a_out[0], plain)  # the run's own gradient for x ...
    np.testing.assert_array_equal(got[0], plain)  # ... unchanged by the capture
    assert sink.order.index("Cell.b.Dense.backward.0") < sink.order.index("Cell.norm.ReadsTwice.backward.0") \
        < sink.order.index("Cell.a.Dense.backward.0")


def test_an_input_that_needs_no_gradient_gets_none():
    net, x = _net()
    sink = _record(net, lambda: ms.value_and_grad(lambda t: (net(t) ** 2).sum(), None,
                                                  net.trainable_params())(Tensor(x)))
    a_in, a_out = sink.grads["Cell.a.Dense.backward.0"]
    _close(a_in[0], _reference(net, x)["dh"])
    assert a_out == (None,)


class Split(nn.Cell):
    def construct(self, x):
        return ops.split(x * 2, 2, -1)


class Product(nn.Cell):
    def construct(self, p, q):
        return p * q


class Pair(nn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.split, self.product = Split(), Product()

    def construct(self, x):
        a, _ = self.split(x)  # the second output is not used
        return (a * 3).sum() + self.product(a, a).sum()


def test_tuple_output_unused_output_and_a_tensor_passed_twice():
    x = np.arange(8, dtype=np.float64).reshape(2, 4) / 7
    net = Pair()
    sink = _record(net, lambda: ms.grad(net)(Tensor(x.astype(np.float32))))
    a = 2 * x[:, :2]
    product_in, product_out = sink.grads["Cell.product.Product.backward.0"]
    _close(product_in[0], np.ones_like(a))
    for grad in product_out:  # the whole gradient the cell gave ``a``, at each of its positions
        _close(grad, 2 * a)
    split_in, split_out = sink.grads["Cell.split.Split.backward.0"]
    assert split_in[1] is None
    _close(split_in[0], 3 + 2 * a)
    _close(split_out[0], np.concatenate([2 * (3 + 2 * a), np.zeros_like(a)], -1))


class Shared(nn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Dense(4, 4, has_bias=False)

    def construct(self, x):
        return self.fc(ops.tanh(self.fc(x)))


def test_a_cell_called_twice_gets_each_calls_gradients():
    ms.set_seed(1)
    net = Shared()
    x = np.random.default_rng(1).standard_normal((3, 4))
    sink = _record(net, lambda: ms.grad(lambda t: (net(t) ** 2).sum())(Tensor(x.astype(np.float32))))
    w = net.fc.weight.asnumpy().astype(np.float64)
    h = x @ w.T
    t = np.tanh(h)
    dy = 2 * (t @ w.T)
    dt = dy @ w
    dh = dt * (1 - t**2)
    first_in, first_out = sink.grads["Cell.fc.Dense.backward.0"]
    second_in, second_out = sink.grads["Cell.fc.Dense.backward.1"]
    _close(second_in[0], dy)
    _close(second_out[0], dt)
    _close(first_in[0], dh)
    _close(first_out[0], dh @ w)


def test_dump_json_statistics_are_those_of_the_float64_gradients(tmp_path):
    net, x = _net()
    ref = _reference(net, x)
    debugger = PrecisionDebugger(dump_path=str(tmp_path), task="statistics", level="L0")
    grad_fn = ms.value_and_grad(lambda t: (net(t) ** 2).sum(), None, net.trainable_params())
    debugger.start(net)
    grad_fn(Tensor(x))
    debugger.stop()
    data = json.loads((tmp_path / "step0" / "rank" / "dump.json").read_text())["data"]
    entry = data["Cell.norm.ReadsTwice.backward.0"]
    for (stats,), expected in ((entry["input"], ref["dn"]), (entry["output"], ref["dh_norm"])):
        for key, value in (("Max", expected.max()), ("Min", expected.min()), ("Mean", expected.mean()),
                           ("Norm", np.linalg.norm(expected))):
            np.testing.assert_allclose(stats[key], value, rtol=1e-5, atol=1e-6)
    assert data["Cell.a.Dense.backward.0"]["output"] == [None]


class TwoPaths(nn.Cell):
    def construct(self, x, y):
        return x * 2, y * 3


class OnePathUsed(nn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.paths = TwoPaths()

    def construct(self, x, y):
        used, _ = self.paths(x, y)
        return (used * used).sum()


def test_an_input_whose_path_the_loss_does_not_use_is_reported_at_the_end_of_the_pass():
    x, y = np.arange(3, dtype=np.float32), np.ones(3, np.float32)
    net = OnePathUsed()
    sink = _record(net, lambda: ms.grad(net, grad_position=(0, 1))(Tensor(x), Tensor(y)))
    grad_in, grad_out = sink.grads["Cell.paths.TwoPaths.backward.0"]
    assert grad_in[1] is None and grad_out[1] is None
    _close(grad_in[0], 2 * (2 * x.astype(np.float64)))
    _close(grad_out[0], 8 * x.astype(np.float64))
