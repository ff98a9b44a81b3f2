"""Module input replay on MindSpore PyNative, config key ``load`` (docs/config.md#load): MindSpore's half of
:class:`msprobe.core.dump.input_replay.ModuleInputLoader` — cells named as the dump names them
(``Cell.{path}.{Class}.forward.{n}``), a forward pre-hook put first, and the dump's ``.npy`` files read as
MindSpore tensors (a bfloat16 tensor, saved widened to float32 since numpy has none, is narrowed back: exact).
A loaded tensor is a constant of the gradient graph, so the backward stops at the cell
(the upstream part gets no gradient through it).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

import mindspore
from mindspore import Tensor, nn
from msprobe.core.dump.input_replay import ModuleInputLoader
from msprobe.core.services.handles import Removable


class MindSporeInputLoader(ModuleInputLoader):
    """Feeds ``load.modules`` of an ``nn.Cell`` their recorded inputs."""

    prefix = "Cell"

    def named_modules(self, model: Any) -> Iterable[tuple[str, Any]]:
        if not isinstance(model, nn.Cell):
            raise ValueError("load: start(model) needs the nn.Cell whose cells load.modules names")
        return model.cells_and_names()

    def register(self, module: Any) -> Removable:
        return module.register_forward_pre_hook(self.replace_inputs, with_kwargs=True, prepend=True)

    def is_tensor(self, value: Any) -> bool:
        return isinstance(value, Tensor)

    def read_tensor(self, file: Path, recorded: dict, like: Any) -> Any:
        tensor = Tensor(np.load(file, allow_pickle=False))
        if recorded.get("dtype") == str(mindspore.bfloat16) and tensor.dtype == mindspore.float32:
            return tensor.astype(mindspore.bfloat16)
        return tensor

    def adopt(self, loaded: Any, like: Any) -> Any:
        return loaded
