"""The PyTorch side of the contract (``msprobe.pytorch.adapter``)."""

from __future__ import annotations

import sys
import weakref
from pathlib import Path

import numpy as np
import torch
from training import Training

from msprobe.core.dump.xor_checksum import PendingChecksum
from msprobe.pytorch import PrecisionDebugger  # noqa: F401 - the side's debugger (training.debugger)
from msprobe.pytorch.adapter import TorchTensorAdapter, _device_stats, device_xor

sys.path.insert(0, str(Path(__file__).parents[1] / "pytorch"))  # the PyTorch tests' models (importlib mode)
from torch_models import ConvBN, GRUNet, TinyTransformer  # noqa: E402
from zoo import ZOO, ZooModel  # noqa: E402

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


def XOR_DEVICE_PATH(t: torch.Tensor):  # noqa: N802 - the contract's name for an adapter's accelerator path
    """What an accelerator tensor's XOR checksum is (a word folded on its device); runs on the CPU too."""
    return PendingChecksum(device_xor(t.detach()))


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
        t[0] += 1


def change_unseen(t: torch.Tensor) -> None:
    """A change the version counter does not count (as in-kernel writes and gloo's collectives do)."""
    t.data[0] += 1


def load(path) -> tuple[np.ndarray, str]:
    """As a user loads it (``weights_only``); the array keeps the saved tensor's strides."""
    loaded = torch.load(path, weights_only=True)
    widened = loaded.float() if loaded.dtype == torch.bfloat16 else loaded
    return widened.numpy(), str(loaded.dtype)  # numpy() refuses a tensor that requires grad


# ------------------------------------------------------------------------------------------- training


def _cross_entropy(model: torch.nn.Module, batch: tuple) -> torch.Tensor:
    x, y = batch
    return torch.nn.functional.cross_entropy(model(x), y)


MODELS = {spec.name: spec for spec in ZOO if spec.name in ("gpt2", "inplace_resnet")} | {
    cls.__name__: ZooModel(cls.__name__, cls, cls.batch, _cross_entropy) for cls in (ConvBN, GRUNet, TinyTransformer)
}


def training(name: str, observed: bool = True) -> Training:
    """SGD with momentum on ``MODELS[name]``; the reference run (not ``observed``) has dropout at 0, as
    the debugger sets it while dumping (docs/pytorch/dump.md#dropout)."""
    spec = MODELS[name]
    torch.manual_seed(0)
    model = spec.build()
    model.train()
    if not observed:
        for module in model.modules():
            if isinstance(module, torch.nn.Dropout):
                module.p = 0.0
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
    gen = torch.Generator().manual_seed(1)

    def step() -> torch.Tensor:
        loss = spec.loss(model, spec.batch(gen))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss

    def state() -> list:
        tensors = [p.grad for p in model.parameters() if p.grad is not None] + list(model.parameters())
        return [host(t).copy() for t in tensors]

    return Training(model, step, state)


def watch_outputs(model: torch.nn.Module, refs: list[weakref.ref]) -> int:
    """Keep a weak reference to every tensor any module returns; the number of modules watched."""

    def hook(_module, _args, output):
        if isinstance(output, dict):  # a transformers ModelOutput
            output = tuple(output.values())
        for value in output if isinstance(output, (tuple, list)) else (output,):
            if isinstance(value, torch.Tensor):
                refs.append(weakref.ref(value))

    modules = list(model.modules())
    for module in modules:
        module.register_forward_hook(hook)
    return len(modules)
