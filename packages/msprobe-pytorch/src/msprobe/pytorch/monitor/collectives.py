"""``cc_distribution`` on PyTorch: torch.distributed's collectives for the monitor's
:class:`~msprobe.core.monitor.collectives.CollectiveWatch` (the naming and filtering rules are there).

The functions wrapped are the dump's list (``COLLECTIVES`` of ``msprobe.pytorch.hooks.distributed``); they
write their results into their tensor arguments, so a call's ``post`` rows are those arguments after it. An
asynchronous call returns the dump's ``WaitedWork``: its ``post`` rows are measured when its ``wait()``
returns, the result being undefined before. Collectives issued from C++ (DDP's bucketed gradient
all-reduce) do not pass through these functions and are not seen.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from msprobe.core.monitor.collectives import call_tensors
from msprobe.pytorch.hooks.distributed import COLLECTIVES, WaitedWork
from msprobe.pytorch.monitor.stats import measurable


def _is_tensor(value: object) -> bool:
    return isinstance(value, torch.Tensor)


@torch.no_grad()
def _concat(tensors: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat([t.detach().reshape(-1) for t in tensors])


def _tensors(args: tuple, kwargs: dict) -> list[torch.Tensor]:
    """The measurable tensor arguments (core's walk: a list of tensors as one)."""
    return call_tensors((*args, *kwargs.values()), _is_tensor, _concat, measurable)


class TorchCollectives:
    files = (__file__,)

    def targets(self) -> list[tuple[Any, str]]:
        return [(dist, name) for name in COLLECTIVES if getattr(dist, name, None) is not None]

    def tensors(self, args: tuple, kwargs: dict) -> list[torch.Tensor]:
        return _tensors(args, kwargs)

    def after(self, result: Any, args: tuple, kwargs: dict, measure: Callable[[list], None]) -> Any:
        if isinstance(result, dist.Work):  # the result is defined when the user's wait() returns
            return WaitedWork(result, lambda: measure(_tensors(args, kwargs)))
        measure(_tensors(args, kwargs))
        return result
