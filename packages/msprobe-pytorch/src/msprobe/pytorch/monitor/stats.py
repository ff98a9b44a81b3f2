"""Metrics computed where the tensors live, batched, with one host transfer per step.

:func:`group_reductions` turns a group of tensors (one hook's inputs and outputs, or every parameter's
gradient) into one ``[n, reductions]`` float64 tensor on their device, using fused multi-tensor kernels
where torch has them (``torch._foreach_norm``, ``torch._foreach_max``) and one-pass ones otherwise
(``torch.aminmax``). :class:`StepBuffer` keeps those blocks until the step ends and brings them all to the
host at once (one ``cat`` and one copy per device): no ``.item()`` and no sync per tensor. With the default
op alone (``norm``) a hook queues its tensors' ``torch._foreach_norm`` results as they come and the step's
norms are stacked once, at the transfer: one kernel launch per hook instead of four.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Sequence

import numpy as np
import torch

from msprobe.core.monitor.collector import Pending

_UPCAST = (torch.float16, torch.bfloat16)
NORM_ONLY = ("norm",)


def measurable(value: object) -> bool:
    """A floating tensor with values: integer ids and masks carry no training state, and empty tensors no value."""
    return isinstance(value, torch.Tensor) and value.is_floating_point() and value.numel() > 0


def _min_max(tensors: list[torch.Tensor], reductions: Sequence[str]) -> dict[str, torch.Tensor]:
    if "min" in reductions and "max" in reductions:
        pairs = [torch.aminmax(t) for t in tensors]
        return {"min": torch.stack([p.min for p in pairs]), "max": torch.stack([p.max for p in pairs])}
    if "max" in reductions:
        return {"max": torch.stack(torch._foreach_max(tensors))}
    if "min" in reductions:
        return {"min": torch.stack([t.min() for t in tensors])}
    return {}


def _nan_counts(values: list[torch.Tensor], norms: torch.Tensor | None) -> torch.Tensor:
    """How many NaNs each tensor holds. On the CPU, where reading a value back is no device sync, only the
    tensors whose norm is NaN are counted (a NaN anywhere makes the norm NaN; no NaN, no count to make):
    the count is the dearest of the reductions, and almost always zero."""
    if norms is None or norms.device.type != "cpu":
        return torch.stack([torch.count_nonzero(torch.isnan(t)) for t in values])
    flagged = torch.isnan(norms).tolist()
    zero = torch.zeros((), dtype=torch.int64)
    return torch.stack([torch.count_nonzero(torch.isnan(t)) if nan else zero for t, nan in zip(values, flagged)])


@functools.lru_cache(maxsize=64)
def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype)


def _values(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """The tensors as reduced: without autograd history (a gradient has none to drop), half precisions in float32."""
    return [t.detach().float() if t.dtype in _UPCAST else t.detach() if t.requires_grad else t for t in tensors]


@torch.no_grad()
def group_reductions(tensors: Sequence[torch.Tensor], reductions: Sequence[str], eps: float) -> torch.Tensor:
    """``[len(tensors), len(reductions)]`` float64: each tensor's reductions (see msprobe.core.monitor.ops)."""
    values = _values(tensors)
    columns = _min_max(values, reductions)
    if "norm" in reductions:
        columns["norm"] = torch.stack(torch._foreach_norm(values))
    if "sum" in reductions:
        columns["sum"] = torch.stack([t.sum() for t in values])
    if "zeros" in reductions:
        columns["zeros"] = torch.stack([torch.count_nonzero(t.abs() < eps) for t in values])
    if "nans" in reductions:
        columns["nans"] = _nan_counts(values, columns.get("norm"))
    if len(reductions) == 1:  # the default, norm only
        return columns[reductions[0]].to(torch.float64).unsqueeze(1)
    return torch.stack([columns[name].to(torch.float64) for name in reductions], dim=1)


class StepBuffer:
    """The step's device blocks, and a memo so a tensor seen twice (one module's output is the next one's
    input) is reduced once. The memo holds weak references: it never keeps an activation alive."""

    def __init__(self, reductions: Sequence[str], eps: float) -> None:
        self.reductions, self.eps = tuple(reductions), eps
        self.blocks: list[torch.Tensor] = []
        self.norms: list[torch.Tensor] = []  # norm only: 0-d norms after the blocks, stacked at the transfer
        self.count = 0
        self.seen: dict[int, tuple[weakref.ref, int, Pending]] = {}

    def add(self, tensors: Sequence[torch.Tensor], reuse: bool = True) -> list[Pending]:
        """Queue ``tensors`` (all measurable) for reduction; their places in the transfer, in order (``reuse``:
        a tensor already reduced this step, unchanged since, keeps its place; a tensor twice in ``tensors``
        always does). When the reduction raises, nothing is queued: the rows already queued keep their places."""
        first, seen = self.count, self.seen
        fresh: list[torch.Tensor] = []
        places: list[Pending] = []
        for tensor in tensors:
            entry = seen.get(id(tensor))
            if entry is not None and entry[0]() is tensor and entry[1] == tensor._version and (
                    reuse or entry[2].index >= first):
                places.append(entry[2])
                continue
            place = Pending(first + len(fresh), tensor.numel(), tuple(tensor.shape), _dtype_name(tensor.dtype))
            seen[id(tensor)] = (weakref.ref(tensor), tensor._version, place)
            fresh.append(tensor)
            places.append(place)
        if fresh:
            try:
                self._reduce(fresh)
            except Exception:
                for tensor in fresh:
                    seen.pop(id(tensor), None)
                raise
            self.count += len(fresh)
        return places

    def _reduce(self, tensors: list[torch.Tensor]) -> None:
        if self.reductions != NORM_ONLY:
            self.blocks.append(group_reductions(tensors, self.reductions, self.eps))
            return
        norms = torch._foreach_norm(_values(tensors))  # detached values: no graph to build
        if self.norms and self.norms[0].get_device() != norms[0].get_device():
            self._stack_norms()  # a block per device
        self.norms.extend(norms)

    def add_reduced(self, block: torch.Tensor, shape: tuple[int, ...], dtype: str) -> list[Pending]:
        """Queue a ``[n, reductions]`` block computed elsewhere (per-element values already divided: numel 1)."""
        places = [Pending(self.count + index, 1, shape, dtype) for index in range(block.shape[0])]
        self._stack_norms()
        self.blocks.append(block.to(torch.float64))
        self.count += block.shape[0]
        return places

    def _stack_norms(self) -> None:
        """The norms queued since the last block, as one ``[n, 1]`` float64 block (queue order kept)."""
        if self.norms:
            self.blocks.append(torch.stack(self.norms).to(torch.float64).unsqueeze(1))  # stack promotes dtypes
            self.norms = []

    def transfer(self) -> np.ndarray:
        """Every queued row on the host, ``[count, reductions]``: one copy per device, then the buffer is empty."""
        self._stack_norms()
        blocks = self.blocks
        self.blocks, self.count, self.seen = [], 0, {}
        if not blocks:
            return np.empty((0, len(self.reductions)))
        if len({block.device for block in blocks}) == 1:
            return torch.cat(blocks).cpu().numpy()
        return torch.cat([block.cpu() for block in blocks]).numpy()  # rows keep queue order across devices
