"""The one answer to "which rank is this process?" for every PyTorch part of msprobe."""

from __future__ import annotations

import torch


def current_rank() -> int | None:
    """The rank of this process when a process group is initialised, else ``None`` (a single process:
    dump directories are named ``rank``, as msprobe 1.1.1 names them)."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return None
