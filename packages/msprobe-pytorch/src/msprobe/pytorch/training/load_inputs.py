"""Module input replay on PyTorch, config key ``load`` (docs/config.md#load): torch's half of
:class:`msprobe.core.dump.input_replay.ModuleInputLoader` — ``named_modules``, a forward pre-hook put first
(a recomputation in backward is not a call the dump counts), tensor files read as torch tensors, and a loaded
tensor needing a gradient where the argument did, so the backward stops at the module (the upstream part gets
no gradient from it).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from msprobe.core.dump.input_replay import LoadMismatch, ModuleInputLoader
from msprobe.core.services.handles import Removable
from msprobe.pytorch.hooks.recorder import backward_pass_id

__all__ = ["LoadMismatch", "TorchInputLoader"]


class TorchInputLoader(ModuleInputLoader):
    """Feeds ``load.modules`` of a ``torch.nn.Module`` their recorded inputs."""

    def named_modules(self, model: Any) -> Iterable[tuple[str, Any]]:
        if not isinstance(model, torch.nn.Module):
            raise ValueError("load: start(model) needs the model whose modules load.modules names")
        return model.named_modules()

    def register(self, module: Any) -> Removable:
        return module.register_forward_pre_hook(self._pre_hook, with_kwargs=True, prepend=True)

    def _pre_hook(self, module: torch.nn.Module, args: tuple, kwargs: dict) -> Any:
        if backward_pass_id() != -1:  # a recomputation in backward: the dump does not count it either
            return None
        with torch._C.DisableTorchFunction():
            return self.replace_inputs(module, args, kwargs)

    def is_tensor(self, value: Any) -> bool:
        return isinstance(value, torch.Tensor)

    def read_tensor(self, file: Path, recorded: dict, like: Any) -> Any:
        """``.pt`` through ``torch.load(weights_only=True)``, ``.npy`` through numpy."""
        if file.suffix == ".npy":
            return torch.from_numpy(np.load(file, allow_pickle=False)).to(like.device)
        return torch.load(file, map_location=like.device, weights_only=True)

    def adopt(self, loaded: Any, like: Any) -> Any:
        return loaded.requires_grad_(like.requires_grad) if loaded.is_floating_point() else loaded
