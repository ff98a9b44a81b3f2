"""Module input replay, config key ``load`` (docs/config.md#load): the named modules get the inputs an earlier
tensor dump recorded for the same call, so upstream error is cut off and the module's own shows.

A forward pre-hook, put first on each named module's hook list at ``start()`` and taken off at ``stop()``,
counts the module's calls as the dump counts them (per module, from 0 each step, forward calls only) and
replaces every tensor of the arguments with the tensor file the dump at ``load.path`` recorded for
``Module.{path}.{Class}.forward.{n}`` of the same step and rank. The dump's own hooks run after it, so with
``dump_after_load`` they record the loaded inputs. A recorded tensor of another shape or dtype is refused
with one line naming the module, the argument and both; a loaded tensor needs a gradient where the
argument did, so the backward stops at the module (the upstream part gets no gradient from it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from msprobe.core.compare.read import read_dump, tensor_path
from msprobe.core.config.model import ModuleLoad
from msprobe.core.config.module_load import source_dirs
from msprobe.core.lifecycle.layout import rank_dir_name
from msprobe.core.lifecycle.naming import module_name, parse_name, safe_module_parts
from msprobe.core.services.handles import HandleGroup
from msprobe.core.services.log import logger
from msprobe.pytorch.hooks.recorder import backward_pass_id


class LoadMismatch(ValueError):
    """A recorded input that cannot stand in for the argument (shape or dtype differ)."""


class ModuleInputLoader:
    """Feeds ``load.modules`` their recorded inputs between ``start()`` and ``stop()``."""

    def __init__(self, load: ModuleLoad) -> None:
        self._load = load
        self._wanted = frozenset(load.modules)
        self._hooks = HandleGroup()
        self._counts: dict[str, int] = {}
        self._step = 0
        self._rank: int | None = None
        self._paths: dict[int, tuple[str, str]] = {}
        self._entries: dict[str, tuple[Any, dict]] | None = None  # this step's recorded entries, read once

    def start(self, model: torch.nn.Module | None, rank: int | None) -> None:
        if self._hooks.active or not self._selected(rank):
            return
        if not isinstance(model, torch.nn.Module):
            raise ValueError("load: start(model) needs the model whose modules load.modules names")
        found = self._modules(model)
        missing = sorted(self._wanted - set(found))
        if missing:
            raise ValueError(f"load.modules: {missing[0]!r} is not a module call of this model (its modules are "
                             "named as the dump names them: Module.{path}.{Class}.forward.{n})")
        self._rank = rank
        for module in {id(m): m for m in found.values()}.values():
            self._hooks.add(module.register_forward_pre_hook(self._pre_hook, with_kwargs=True, prepend=True))

    def stop(self) -> None:
        self._hooks.remove()

    def step(self) -> None:
        self._hooks.remove()
        self._step += 1
        self._counts.clear()
        self._entries = None

    def _selected(self, rank: int | None) -> bool:
        load = self._load
        return (not load.step or self._step in load.step) and (not load.rank or rank in load.rank)

    def _modules(self, model: torch.nn.Module) -> dict[str, torch.nn.Module]:
        """Wanted forward names → module, as the dump names modules (the root is not named)."""
        self._paths = {id(m): safe_module_parts(p, type(m).__name__) for p, m in model.named_modules() if p}
        modules = {id(m): m for _, m in model.named_modules()}
        by_path = {f"{path}.{cls}": modules[key] for key, (path, cls) in self._paths.items()}
        return {name: by_path[key] for name in self._wanted
                if (key := f"{parse_name(name).api}.{parse_name(name).cls}") in by_path}

    def _pre_hook(self, module: torch.nn.Module, args: tuple, kwargs: dict) -> Any:
        if backward_pass_id() != -1:  # a recomputation in backward: the dump does not count it either
            return None
        path, cls = self._paths[id(module)]
        key = f"{path}.{cls}"
        count = self._counts.get(key, 0)
        self._counts[key] = count + 1
        name = module_name("Module", path, cls, "forward", count)
        if name not in self._wanted:
            return None
        dump, entry = self._entry(name)
        with torch._C.DisableTorchFunction():
            new_args = tuple(self._replace(dump, name, f"input {i}", a, r)
                             for i, (a, r) in enumerate(zip(args, _listed(entry.get("input_args")))))
            new_args += args[len(new_args):]
            recorded_kwargs = entry.get("input_kwargs") or {}
            new_kwargs = {k: self._replace(dump, name, f"kwarg {k}", v, recorded_kwargs.get(k))
                          for k, v in kwargs.items()}
        logger.info(f"load: {name} runs on the inputs recorded in {dump.path.parent}")
        return new_args, new_kwargs

    def _entry(self, name: str) -> tuple[Any, dict]:
        if self._entries is None:
            dirs = self._source_dirs()
            dump = read_dump(dirs[0] / "dump.json", "load.path dump") if dirs else None
            self._entries = {} if dump is None else {
                n: (dump, e) for n, e in dump.entries.items() if n in self._wanted}
        found = self._entries.get(name)
        if found is None:
            raise ValueError(f"load: {name} is not recorded in step {self._step} of the dump at {self._load.path}")
        return found

    def _source_dirs(self) -> list[Path]:
        dirs = list(source_dirs(self._load.path, (self._step,)))
        mine = [d for d in dirs if d.name == rank_dir_name(self._rank)]
        return mine or dirs[:1]

    def _replace(self, dump: Any, name: str, where: str, value: Any, recorded: Any) -> Any:
        if isinstance(value, (list, tuple)) and isinstance(recorded, list):
            pairs = enumerate(zip(value, recorded))
            replaced = [self._replace(dump, name, f"{where}.{i}", v, r) for i, (v, r) in pairs]
            return type(value)(replaced + list(value[len(replaced):]))
        if not isinstance(value, torch.Tensor) or not isinstance(recorded, dict):
            return value
        file = tensor_path(dump, recorded)
        if file is None:
            raise ValueError(f"load: {name} {where}: the dump at {self._load.path} saved no tensor file for it")
        loaded = _read_tensor(file, value.device)
        if tuple(loaded.shape) != tuple(value.shape) or loaded.dtype != value.dtype:
            raise LoadMismatch(f"load: {name} {where}: recorded shape {list(loaded.shape)} dtype {loaded.dtype}, "
                               f"this run's shape {list(value.shape)} dtype {value.dtype}; not loaded")
        return loaded.requires_grad_(value.requires_grad) if loaded.is_floating_point() else loaded


def _listed(value: Any) -> list:
    return value if isinstance(value, list) else []


def _read_tensor(file: Path, device: torch.device) -> torch.Tensor:
    """A dumped tensor file as the tensor it was: ``.pt`` through ``torch.load(weights_only=True)``,
    ``.npy`` through numpy."""
    if file.suffix == ".npy":
        return torch.from_numpy(np.load(file, allow_pickle=False)).to(device)
    return torch.load(file, map_location=device, weights_only=True)
