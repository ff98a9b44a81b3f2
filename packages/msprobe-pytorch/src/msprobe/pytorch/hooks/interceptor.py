"""The one object a task uses to see a PyTorch run: APIs, modules, collectives, and their backward.

Level ``L1`` records APIs (``torch.*``, ``Tensor`` methods, ``torch.nn.functional``, ``torch._VF``,
``torch.distributed`` collectives, ``torch_npu`` on Ascend), ``L0`` records modules, ``mix`` both.
Nothing is intercepted until :meth:`Interceptor.enable`; :meth:`Interceptor.disable` takes every hook
off again (the function mode leaves the stack, wrappers are restored, module hooks are removed), so a
run that is attached but not collecting pays nothing.
"""

from __future__ import annotations

import torch

from msprobe.core.calls import Level
from msprobe.core.events import CallSink
from msprobe.pytorch.hooks.api import ApiMode, OperatorNames
from msprobe.pytorch.hooks.distributed import CollectiveWrappers
from msprobe.pytorch.hooks.module import ModuleHooks
from msprobe.pytorch.hooks.recorder import Recorder


class Interceptor:
    def __init__(self, sink: CallSink, *, level: str) -> None:
        self.level = Level(level)
        self._recorder = Recorder(sink)
        self._api_mode: ApiMode | None = None
        self._operators: OperatorNames | None = None
        self._collectives: CollectiveWrappers | None = None
        if self.level.apis:
            self._api_mode = ApiMode(self._recorder)
            self._operators = OperatorNames(self._api_mode)
            self._collectives = CollectiveWrappers(self._recorder)
        self._modules: ModuleHooks | None = None
        self._solo: ModuleHooks | None = None  # module_dump's module, while its window is open
        self._resume_after_solo = False

    @property
    def enabled(self) -> bool:
        return self._recorder.active

    def attach(self, model: torch.nn.Module | None) -> None:
        """Watch ``model``'s submodules (L0/mix). ``None`` or an L1 interceptor: nothing to watch."""
        if model is not None and not isinstance(model, torch.nn.Module):
            raise TypeError(f"model must be a torch.nn.Module or None, got {type(model).__name__}")
        if self._modules is not None:
            self._modules.remove()
            self._modules = None
        if model is not None and self.level.modules:
            self._modules = ModuleHooks(self._recorder, model)
            if self.enabled:
                self._modules.install()

    def enable(self) -> None:
        """Start collecting. Idempotent."""
        if self.enabled:
            return
        if self._api_mode is not None:
            self._api_mode.__enter__()
            self._operators.install()
            self._collectives.install()
        if self._modules is not None:
            self._modules.install()
        self._recorder.active = True

    def disable(self) -> None:
        """Stop collecting and take every hook off. Backward passes still pending are not reported."""
        if not self.enabled:
            return
        if self._solo is not None:  # stopped inside a module_dump window: only the solo hooks are on
            self._resume_after_solo = False
            self.end_module_dump()
            self._recorder.active = False
            return
        self._recorder.active = False
        if self._modules is not None:
            self._modules.remove()
        if self._api_mode is not None:
            self._collectives.remove()
            self._operators.remove()
            self._api_mode.__exit__(None, None, None)

    def dump_module(self, module: torch.nn.Module, name: str) -> None:
        """``module_dump``: until :meth:`end_module_dump`, collect only ``module``'s own calls, named
        ``Module.{name}.{Class}.{forward|backward}.{n}``; its children and the APIs inside it are not."""
        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"module_dump: module must be a torch.nn.Module, got {type(module).__name__}")
        self.end_module_dump()
        self._resume_after_solo = self.enabled
        if self.enabled:
            self.disable()
            self._recorder.active = True  # only the solo hooks below are installed
        self._solo = ModuleHooks(self._recorder, module, as_name=name)
        self._solo.install()

    def end_module_dump(self) -> None:
        """Close the ``module_dump`` window: collection goes back to what the level asks for."""
        if self._solo is None:
            return
        self._solo.remove()
        self._solo = None
        if self._resume_after_solo:
            self._recorder.active = False
            self.enable()

    def reset_counts(self) -> None:
        """A new step: every API and module counts from 0 again."""
        self._recorder.counter.reset()

    def detach(self) -> None:
        """Remove every hook and restore everything wrapped; the interceptor can be attached again."""
        self.end_module_dump()
        self.disable()
        self.attach(None)
