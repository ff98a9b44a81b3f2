"""Module input replay, config key ``load`` (docs/config.md#load): the named modules get the inputs an earlier
tensor dump recorded for the same call, so upstream error is cut off and the module's own shows.

This is the framework-free half: which steps and ranks load, counting each module's calls as the dump counts
them (per module, from 0 each step, forward calls only), reading the recorded entry of this step once, and
walking the call's arguments against the recorded ``input_args``/``input_kwargs``. A framework subclass adds
only what needs its tensors: its module tree, its forward pre-hook (put first, so the dump's own hooks run
after it and, with ``dump_after_load``, record the loaded inputs), its tensor test, a tensor file read as its
tensor, and the shape, dtype and gradient flag of a loaded tensor. A recorded tensor of another shape or
dtype is refused with one line naming the module, the argument and both.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from msprobe.core.compare.read import read_dump, tensor_path
from msprobe.core.config.model import ModuleLoad
from msprobe.core.config.module_load import source_dirs
from msprobe.core.lifecycle.layout import rank_dir_name
from msprobe.core.lifecycle.naming import module_name, parse_name, safe_module_parts
from msprobe.core.services.handles import HandleGroup, Removable
from msprobe.core.services.log import logger


class LoadMismatch(ValueError):
    """A recorded input that cannot stand in for the argument (shape or dtype differ)."""


class ModuleInputLoader:
    """Feeds ``load.modules`` their recorded inputs between ``start()`` and ``stop()``; a framework
    subclass implements the methods below that raise ``NotImplementedError``."""

    prefix = "Module"  # how the framework's dump names a module entry: Module.{path}.{Class}.forward.{n}

    def __init__(self, load: ModuleLoad) -> None:
        self._load = load
        self._wanted = frozenset(load.modules)
        self._hooks = HandleGroup()
        self._counts: dict[str, int] = {}
        self._step = 0
        self._rank: int | None = None
        self._paths: dict[int, tuple[str, str]] = {}
        self._entries: dict[str, tuple[Any, dict]] | None = None  # this step's recorded entries, read once

    # ------------------------------------------------------------------ the framework's half
    def named_modules(self, model: Any) -> Iterable[tuple[str, Any]]:
        """``(path, module)`` of every module of ``model``, the root with path ``""``; raises ValueError when
        ``model`` is not a model of the framework."""
        raise NotImplementedError

    def register(self, module: Any) -> Removable:
        """Put :meth:`replace_inputs` first on ``module``'s forward pre-hooks (with kwargs)."""
        raise NotImplementedError

    def is_tensor(self, value: Any) -> bool:
        raise NotImplementedError

    def read_tensor(self, file: Path, recorded: dict, like: Any) -> Any:
        """A dumped tensor file as the tensor ``recorded`` (its dump.json record) describes, where ``like`` is
        (its device)."""
        raise NotImplementedError

    def shape_dtype(self, tensor: Any) -> tuple[list[int], Any]:
        """What a loaded tensor must share with the argument it stands in for (a torch or MindSpore tensor has
        both as ``shape`` and ``dtype``)."""
        return list(tensor.shape), tensor.dtype

    def adopt(self, loaded: Any, like: Any) -> Any:
        """``loaded`` standing in for ``like``: needing a gradient where ``like`` did."""
        raise NotImplementedError

    # ------------------------------------------------------------------ the lifecycle
    def start(self, model: Any, rank: int | None) -> None:
        if self._hooks.active or not self._selected(rank):
            return
        found = self._modules(model)
        missing = sorted(self._wanted - set(found))
        if missing:
            raise ValueError(f"load.modules: {missing[0]!r} is not a module call of this model (its modules are "
                             f"named as the dump names them: {self.prefix}.{{path}}.{{Class}}.forward.{{n}})")
        self._rank = rank
        for module in {id(m): m for m in found.values()}.values():
            self._hooks.add(self.register(module))

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

    def _modules(self, model: Any) -> dict[str, Any]:
        """Wanted forward names → module, as the dump names modules (the root is not named)."""
        named = list(self.named_modules(model))
        self._paths = {id(m): safe_module_parts(p, type(m).__name__) for p, m in named if p}
        modules = {id(m): m for _, m in named}
        by_path = {f"{path}.{cls}": modules[key] for key, (path, cls) in self._paths.items()}
        return {name: by_path[key] for name in self._wanted
                if (key := f"{parse_name(name).api}.{parse_name(name).cls}") in by_path}

    # ------------------------------------------------------------------ one call
    def replace_inputs(self, module: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        """Count the call; for a named one, its arguments with every tensor replaced by the recorded one."""
        path, cls = self._paths[id(module)]
        key = f"{path}.{cls}"
        count = self._counts.get(key, 0)
        self._counts[key] = count + 1
        name = module_name(self.prefix, path, cls, "forward", count)
        if name not in self._wanted:
            return None
        dump, entry = self._entry(name)
        new_args = tuple(self._replace(dump, name, f"input {i}", a, r)
                         for i, (a, r) in enumerate(zip(args, _listed(entry.get("input_args")))))
        new_args += args[len(new_args):]
        recorded_kwargs = entry.get("input_kwargs") or {}
        new_kwargs = {k: self._replace(dump, name, f"kwarg {k}", v, recorded_kwargs.get(k)) for k, v in kwargs.items()}
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
        if not self.is_tensor(value) or not isinstance(recorded, dict):
            return value
        file = tensor_path(dump, recorded)
        if file is None:
            raise ValueError(f"load: {name} {where}: the dump at {self._load.path} saved no tensor file for it")
        loaded = self.read_tensor(file, recorded, value)
        (shape, dtype), (own_shape, own_dtype) = self.shape_dtype(loaded), self.shape_dtype(value)
        if shape != own_shape or dtype != own_dtype:
            raise LoadMismatch(f"load: {name} {where}: recorded shape {shape} dtype {dtype}, "
                               f"this run's shape {own_shape} dtype {own_dtype}; not loaded")
        return self.adopt(loaded, value)


def _listed(value: Any) -> list:
    return value if isinstance(value, list) else []
