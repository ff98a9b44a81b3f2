"""The MindSpore side of the contract (``msprobe.mindspore.adapter``)."""

from __future__ import annotations

import weakref

import mindspore as ms
import numpy as np
import pytest
from mindspore import nn
from models_mindspore import MODELS
from training import Training

from msprobe.mindspore import PrecisionDebugger  # noqa: F401 - the side's debugger (training.debugger)
from msprobe.mindspore.adapter import MindSporeTensorAdapter, device_stats

NAME = "MindSpore"
adapter = MindSporeTensorAdapter
DEVICE_PATH = device_stats  # what GPU/Ascend tensors get; runs on the CPU too
XOR_DEVICE_PATH = None  # the XOR checksum is folded on the host
DTYPE_NAMES = {"float32": "Float32", "float16": "Float16", "int64": "Int64", "bool": "Bool", "bfloat16": "BFloat16"}
FILE_DTYPES = {"float32": "float32", "bfloat16": "float32"}  # .npy: numpy has no bfloat16, widened exactly
NOT_TENSORS = (1.0, np.ones(1))
ENCODED = ((ms.float16, {"type": "mindspore.dtype", "value": "Float16"}),)


def tensor(values: np.ndarray, dtype: str) -> ms.Tensor:
    if dtype == "bfloat16":
        return ms.Tensor(values.astype(np.float32)).astype(ms.bfloat16)
    return ms.Tensor(values.astype(dtype))


def host(t: ms.Tensor) -> np.ndarray:
    return (t.astype(ms.float32) if t.dtype == ms.bfloat16 else t).asnumpy()


def transposed(t: ms.Tensor) -> ms.Tensor:
    return t.T


def trainable(t: ms.Tensor) -> tuple[ms.Tensor, None]:
    return t, None  # gradients are taken by function (value_and_grad): a tensor has no requires_grad


def change_in_place(t: ms.Tensor) -> None:
    t[0] = t[0] + 1


change_unseen = change_in_place  # the adapter keeps nothing, so no change goes unseen


def load(path) -> tuple[np.ndarray, str]:
    array = np.load(path, allow_pickle=False)
    return array, str(array.dtype)


# ------------------------------------------------------------------------------------------- training


def training(name: str, observed: bool = True) -> Training:
    """Adam on ``MODELS[name]`` in PyNative mode, the step inside ``value_and_grad`` as
    docs/mindspore/dump.md shows; ``observed`` changes nothing (MindSpore's dropout keeps its probability
    while dumping: ``MindSporeKit.prepare_for_comparison`` does nothing)."""
    build, shape, library = MODELS[name]
    if library is not None:
        pytest.importorskip(library)
    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.set_seed(0)
    net = build()
    net.set_train(True)
    optimizer = nn.Adam(net.trainable_params(), 1e-2)
    grad_fn = ms.value_and_grad(lambda x: (net(x) ** 2).sum(), None, optimizer.parameters)
    rng = np.random.default_rng(0)
    last_grads: list = []

    def step() -> ms.Tensor:
        loss, grads = grad_fn(ms.Tensor(rng.standard_normal(shape).astype(np.float32)))
        optimizer(grads)
        last_grads[:] = grads
        return loss

    def state() -> list:
        return [host(t).copy() for t in (*last_grads, *net.trainable_params())]  # asnumpy() may share memory

    return Training(net, step, state)


def watch_outputs(net: nn.Cell, refs: list[weakref.ref]) -> int:
    """Keep a weak reference to every cell's output; the number of cells watched."""
    cells = [cell for _, cell in net.cells_and_names()]
    for cell in cells:
        cell.register_forward_hook(lambda _cell, _inputs, output: refs.append(weakref.ref(output)))
    return len(cells)
