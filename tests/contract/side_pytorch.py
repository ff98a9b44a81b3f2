"""The PyTorch side of the contract (``msprobe.pytorch.adapter``)."""

from __future__ import annotations

import numpy as np
import torch

from msprobe.pytorch.adapter import TorchTensorAdapter, _device_stats

NAME = "PyTorch"
adapter = TorchTensorAdapter
DTYPE_NAMES = {"float32": "torch.float32", "float16": "torch.float16", "int64": "torch.int64", "bool": "torch.bool",
               "bfloat16": "torch.bfloat16"}
FILE_DTYPES = {"float32": "torch.float32", "bfloat16": "torch.bfloat16"}  # .pt keeps bfloat16
NOT_TENSORS = (1.0, np.ones(1))
ENCODED = (
    (torch.float16, {"type": "torch.dtype", "value": "torch.float16"}),
    (torch.device("cpu"), {"type": "torch.device", "value": "cpu"}),
    (torch.Size([2, 3]), [{"type": "int", "value": 2}, {"type": "int", "value": 3}]),
    (torch.channels_last, {"type": "torch.memory_format", "format": "channels_last"}),
    (torch.Generator(), None),  # written as null, as msprobe 1.1.1 writes it
)


def DEVICE_PATH(t: torch.Tensor):  # noqa: N802 - the contract's name for an adapter's accelerator path
    """What an accelerator tensor gets (launched reductions, one fetch); runs on the CPU too."""
    return _device_stats(t.detach())


def tensor(values: np.ndarray, dtype: str) -> torch.Tensor:
    if dtype == "bfloat16":
        return torch.from_numpy(values.astype(np.float32)).to(torch.bfloat16)
    return torch.from_numpy(values.astype(dtype))


def host(t: torch.Tensor) -> np.ndarray:
    t = t.detach()
    return (t.float() if t.dtype == torch.bfloat16 else t).numpy()


def transposed(t: torch.Tensor) -> torch.Tensor:
    return t.t()


def trainable(t: torch.Tensor) -> tuple[torch.Tensor, bool]:
    return t.detach().clone().requires_grad_(), True


def change_in_place(t: torch.Tensor) -> None:
    with torch.no_grad():
        t.add_(1)


def load(path) -> tuple[np.ndarray, str]:
    """As a user loads it (``weights_only``); the array keeps the saved tensor's strides."""
    loaded = torch.load(path, weights_only=True)
    widened = loaded.float() if loaded.dtype == torch.bfloat16 else loaded
    return widened.numpy(), str(loaded.dtype)  # numpy() refuses a tensor that requires grad
