"""The numpy side of the contract (``tests/common/numpy_adapter.py``): host memory only."""

from __future__ import annotations

import numpy as np
import pytest
from numpy_adapter import NumpyTensorAdapter

NAME = "numpy"
adapter = NumpyTensorAdapter
DEVICE_PATH = None  # host memory has no device to keep statistics on
XOR_DEVICE_PATH = None  # the XOR checksum is folded on the host
DTYPE_NAMES = {"float32": "float32", "float16": "float16", "int64": "int64", "bool": "bool"}
FILE_DTYPES = {"float32": "float32"}  # what a tensor file holds, per dtype
NOT_TENSORS = (1.0, np.float32(1.0))  # numpy scalars are values (msprobe.core.dump.encode writes them)
ENCODED = ((np.dtype("float16"), {"type": "numpy.dtype", "value": "float16"}),)


def tensor(values: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bfloat16":
        pytest.skip("numpy has no bfloat16")
    return values.astype(dtype)


def host(array: np.ndarray) -> np.ndarray:
    return array


def transposed(array: np.ndarray) -> np.ndarray:
    return array.T


def trainable(array: np.ndarray) -> tuple[np.ndarray, None]:
    return array, None  # no autograd: no requires_grad to record


def change_in_place(array: np.ndarray) -> None:
    array[0] += 1


change_unseen = change_in_place  # nothing is kept, so no change goes unseen


def load(path) -> tuple[np.ndarray, str]:
    array = np.load(path, allow_pickle=False)
    return array, str(array.dtype)
