"""The PyTorch bench of a MindSpore replay: the API's PyTorch counterpart on CPU, inputs upcast
(float16/bfloat16 → float32, float32 → float64).

Imported only when the bench is PyTorch (torch is the optional extra ``msprobe-mindspore[run_ut]``).
The counterpart comes from :func:`msprobe.core.compare.align.framework_map.torch_api_for` (``Mint.add`` →
``torch.add``, ``MintFunctional.relu`` → ``torch.nn.functional.relu``, ``Tensor.astype`` →
``torch.Tensor.to``), keyword arguments renamed by the same map (``axis`` → ``dim``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from msprobe.core.compare.align import torch_api_for, torch_suffix_for
from msprobe.core.run_ut.replay_common import Unreplayable
from msprobe.mindspore.run_ut.sides import Side
from msprobe.mindspore.run_ut.values import DtypeArg, Leaf

_ROOTS = {"Torch": torch, "Functional": torch.nn.functional, "Tensor": torch.Tensor}


def torch_callable(prefix: str, api: str) -> Callable[..., Any]:
    """The PyTorch counterpart of MindSpore API ``prefix.api``; :class:`Unreplayable` without one."""
    target = torch_api_for(f"{prefix}.{api}")
    if target is None:
        raise Unreplayable(f"{prefix}.{api} has no PyTorch counterpart")
    root, _, path = target.partition(".")
    obj: Any = _ROOTS.get(root)
    for part in path.split(".") if obj is not None else ():
        obj = getattr(obj, part, None)
    if obj is None or not callable(obj):
        raise Unreplayable(f"{prefix}.{api}: its PyTorch counterpart {target} is not in torch {torch.__version__}")
    return obj


def torch_kwargs(prefix: str, api: str, kwargs: dict) -> dict:
    """``kwargs`` with MindSpore keyword names turned into PyTorch's; :class:`Unreplayable` for one
    PyTorch does not take."""
    renamed = {}
    for key, value in kwargs.items():
        suffix = torch_suffix_for(f"{prefix}.{api}", f"input.{key}")
        if suffix is None:
            raise Unreplayable(f"keyword argument {key!r} has no PyTorch counterpart")
        renamed[suffix.removeprefix("input.")] = value
    return renamed


class TorchSide(Side):
    """PyTorch on CPU with floating inputs (and dtype arguments) upcast."""

    name = "torch"
    upcast = True
    tensor_type = torch.Tensor

    def tensor(self, leaf: Leaf) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(leaf.values)).to(getattr(torch, self.target(leaf.dtype)))

    def dtype(self, arg: DtypeArg) -> Any:
        return getattr(torch, self.target(arg.dtype))

    def cast(self, tensor: Any, dtype: Any) -> Any:
        return tensor.to(dtype)

    def host_numpy(self, tensor: Any) -> np.ndarray:
        tensor = tensor.detach().cpu()
        return (tensor.float() if tensor.dtype == torch.bfloat16 else tensor).resolve_conj().numpy()

    def forward(self, func: Callable[..., Any], args: tuple, kwargs: dict) -> tuple[list, tuple]:
        with torch.no_grad():
            return super().forward(func, args, kwargs)

    def vjp(self, func: Callable[..., tuple], inputs: list, grads: list) -> list:
        leaves = [t.detach().requires_grad_(True) for t in inputs]
        with torch.enable_grad():
            outputs = func(*leaves)
            found = torch.autograd.grad(outputs, leaves, grads, allow_unused=True)
        return list(found)
