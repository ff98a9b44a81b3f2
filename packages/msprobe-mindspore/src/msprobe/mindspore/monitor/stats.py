"""MindSpore's reductions for the monitor: each tensor's reductions computed where it lives and stacked, one
``asnumpy`` of all of them per step (the host side is ``msprobe.core.monitor.collector``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

import mindspore as ms
from mindspore import ops
from msprobe.core.monitor.collector import Pending

_FLOATS = (ms.float16, ms.bfloat16, ms.float32, ms.float64)


def measurable(value: object) -> bool:
    """A floating tensor with values (integer ids and masks carry no training state)."""
    return isinstance(value, ms.Tensor) and value.dtype in _FLOATS and value.size > 0


def tensors_in(value: object) -> list:
    """The measurable tensors of a hook argument: a tensor, or those directly inside a tuple or list."""
    items = value if isinstance(value, (tuple, list)) else (value,)
    return [item for item in items if measurable(item)]


class StepBuffer:
    """Reductions of a group of tensors stacked on the device; one ``asnumpy`` of all of them per step."""

    def __init__(self, reductions: Sequence[str], eps: float) -> None:
        self.reductions, self.eps = tuple(reductions), eps
        self.blocks: list = []
        self.count = 0

    def _row(self, tensor) -> ms.Tensor:
        value = tensor if tensor.dtype == ms.float64 else tensor.astype(ms.float32)
        parts = {
            "min": lambda: value.min(), "max": lambda: value.max(),
            "norm": lambda: ops.sqrt((value * value).sum()), "sum": lambda: value.sum(),
            "zeros": lambda: (ops.abs(value) < self.eps).astype(ms.float32).sum(),
            "nans": lambda: ops.isnan(value).astype(ms.float32).sum(),
        }
        return ops.stack([parts[name]().astype(ms.float64) for name in self.reductions])

    def add(self, tensors: Sequence, reuse: bool = True) -> list[Pending]:
        """Queue ``tensors``' reductions (no memo here: every tensor is reduced, ``reuse`` or not)."""
        self.blocks.append(ops.stack([self._row(t) for t in tensors]))
        places = [Pending(self.count + i, int(t.size), tuple(t.shape), str(t.dtype)) for i, t in enumerate(tensors)]
        self.count += len(tensors)
        return places

    def transfer(self) -> np.ndarray:
        blocks, self.blocks, self.count = self.blocks, [], 0
        return ops.cat(blocks).asnumpy() if blocks else np.empty((0, len(self.reductions)))
