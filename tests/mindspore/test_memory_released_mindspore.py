"""MindSpore PyNative: a step's tensors are freed when the step is over, with the debugger on as without
it (the PyTorch twin, ``tests/pytorch/test_memory_released.py``, says why this once failed there)."""

from __future__ import annotations

import gc
import weakref

import mindspore as ms
import numpy as np
import pytest
from mindspore import nn, ops

from msprobe.mindspore import PrecisionDebugger


class _Block(nn.Cell):
    """Dense, a dropout that passes its input through (p=0), ReLU, a residual add."""

    def __init__(self) -> None:
        super().__init__()
        self.dense, self.drop, self.act = nn.Dense(16, 16), nn.Dropout(p=0.0), nn.ReLU()

    def construct(self, x):
        return self.act(self.drop(self.dense(x))) + x


class _Net(nn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.CellList([_Block() for _ in range(3)])
        self.head = nn.Dense(16, 4)

    def construct(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def _steps(level: str | None, dump_path, keep_losses: bool) -> tuple[list, list]:
    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.set_seed(0)
    net = _Net()
    net.set_train(True)
    refs: list[weakref.ref] = []
    for _, cell in net.cells_and_names():
        cell.register_forward_hook(lambda _cell, _inputs, output: refs.append(weakref.ref(output)))
    optimizer = nn.SGD(net.trainable_params(), 1e-3)
    grad_fn = ms.value_and_grad(lambda x: ops.square(net(x)).sum(), None, optimizer.parameters)
    debugger = None if level is None else PrecisionDebugger(dump_path=str(dump_path), task="statistics", level=level)
    rng = np.random.default_rng(0)
    losses = []
    for _ in range(3):
        if debugger:
            debugger.start(net)
        loss, grads = grad_fn(ms.Tensor(rng.standard_normal((8, 16)).astype(np.float32)))
        optimizer(grads)
        if debugger:
            debugger.stop()
            debugger.step()
        if keep_losses:
            losses.append(loss)
        del loss, grads
    return refs, losses


@pytest.mark.parametrize("keep_losses", [False, True], ids=["losses dropped", "losses kept"])
@pytest.mark.parametrize("level", [None, "L1", "mix", "L0"], ids=lambda level: level or "bare")
def test_no_cell_output_outlives_its_step(level, keep_losses, tmp_path):
    refs, losses = _steps(level, tmp_path / "dump", keep_losses)
    gc.collect()
    assert len(refs) >= 3 * 13  # every cell's output of every step was seen
    assert [ref() for ref in refs if ref() is not None] == []
