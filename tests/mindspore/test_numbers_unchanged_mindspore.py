"""MindSpore PyNative: training with the debugger on must be bit-identical to training without it.

A cell that reads its input twice (RMSNorm's shape) while the input also feeds a residual add is where a
backward capture that puts identity nodes into the graph changes the order in which gradients are
summed. L1 (API taps) is exact. L0 and mix are not yet: MindSpore's ``Cell.register_backward_hook``,
which the cell-level capture uses, wraps the cell in such a node (one ULP after two Adam steps). The
strict xfail marks the known gap and fails the day it is fixed, so the marker gets removed then.
"""

from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
from mindspore import nn, ops

from msprobe.mindspore import PrecisionDebugger


class _ReadsTwice(nn.Cell):
    def construct(self, x):
        return x * ops.rsqrt(ops.mean(x * x, -1, keep_dims=True) + 1e-6)


class _Net(nn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.norm, self.b = nn.Dense(64, 64), _ReadsTwice(), nn.Dense(64, 64)

    def construct(self, x):
        h = self.a(x)
        return self.b(self.norm(h)) + h * 3.7


def _train(debugger=None) -> list[np.ndarray]:
    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.set_seed(0)
    net = _Net()
    optimizer = nn.Adam(net.trainable_params(), 1e-2)
    x = ms.Tensor(np.random.default_rng(0).standard_normal((16, 64)).astype(np.float32))
    grad_fn = ms.value_and_grad(lambda x: (net(x) ** 2).sum(), None, optimizer.parameters)
    for _ in range(2):
        if debugger is not None:
            debugger.start(net)
        _, grads = grad_fn(x)
        optimizer(grads)
        if debugger is not None:
            debugger.stop()
            debugger.step()
    return [p.asnumpy() for p in net.trainable_params()]


_CELL_HOOK_GAP = pytest.mark.xfail(strict=True, reason="cell backward hooks change the gradient summation order")


@pytest.mark.parametrize("level", ["L1", pytest.param("L0", marks=_CELL_HOOK_GAP),
                                   pytest.param("mix", marks=_CELL_HOOK_GAP)])
def test_two_adam_steps_are_bit_identical(tmp_path, level):
    plain = _train()
    observed = _train(PrecisionDebugger(dump_path=str(tmp_path / "dump"), task="statistics", level=level))
    assert all(np.array_equal(a, b) for a, b in zip(plain, observed))
