"""The MindSpore side of the contract (``msprobe.mindspore.adapter``)."""

from __future__ import annotations

import mindspore as ms
import numpy as np

from msprobe.mindspore.adapter import MindSporeTensorAdapter, device_stats

NAME = "MindSpore"
adapter = MindSporeTensorAdapter
DEVICE_PATH = device_stats  # what GPU/Ascend tensors get; runs on the CPU too
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


def load(path) -> tuple[np.ndarray, str]:
    array = np.load(path, allow_pickle=False)
    return array, str(array.dtype)
