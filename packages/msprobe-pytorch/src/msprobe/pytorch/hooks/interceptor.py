"""The one object a task uses to see a PyTorch run: APIs, modules, collectives, and their backward.

Level ``L1`` records APIs (``torch.*``, ``Tensor`` methods, ``torch.nn.functional``, ``torch._VF``,
``torch.distributed`` collectives, ``torch_npu`` on Ascend), ``L0`` records modules, ``mix`` both.
Nothing is intercepted until :meth:`Interceptor.enable`; :meth:`Interceptor.disable` takes every hook
off again (the function mode leaves the stack, wrappers are restored, module hooks are removed: each
installation returns a :class:`~msprobe.core.services.handles.Handle` that the interceptor removes), so a run that
is attached but not collecting pays nothing.
"""

from __future__ import annotations

import torch

from msprobe.core.contract import CallSink
from msprobe.core.lifecycle.calls import Level
from msprobe.core.services.handles import Handle, HandleGroup
from msprobe.pytorch.hooks.api import ApiMode, install_operator_names, push_mode
from msprobe.pytorch.hooks.distributed import ddp_bucket_hook, install_collectives
from msprobe.pytorch.hooks.module import ModuleHooks
from msprobe.pytorch.hooks.param_grads import ParameterGradHooks
from msprobe.pytorch.hooks.recorder import Recorder


class Interceptor:
    def __init__(self, sink: CallSink, *, level: str) -> None:
        self.level = Level(level)
        self._recorder = Recorder(sink)
        self._api_mode = ApiMode(self._recorder) if self.level.apis else None
        self._api_hooks = HandleGroup()  # the function mode, operator-name wrappers, collectives, while enabled
        self._modules: ModuleHooks | None = None
        self._param_grads: ParameterGradHooks | None = None  # parameters_grad entries (L0, mix)
        self._module_hooks = Handle()  # the attached model's hooks, while enabled
        self._solo: Handle | None = None  # module_dump's module hooks, while its window is open
        self._resume_after_solo = False

    @property
    def enabled(self) -> bool:
        return self._recorder.active

    def attach(self, model: torch.nn.Module | None) -> None:
        """Watch ``model``'s submodules (L0/mix). ``None`` or an L1 interceptor: nothing to watch."""
        if model is not None and not isinstance(model, torch.nn.Module):
            raise TypeError(f"model must be a torch.nn.Module or None, got {type(model).__name__}")
        self._module_hooks.remove()
        watched = model is not None and self.level.modules
        self._modules = ModuleHooks(self._recorder, model) if watched else None
        self._param_grads = ParameterGradHooks(self._recorder, model) if watched else None
        if self.enabled and self._solo is None:  # in a module_dump window the hooks wait for its end
            self._install_module_hooks()

    def _install_module_hooks(self) -> None:
        if self._modules is not None and self._param_grads is not None:
            self._module_hooks = HandleGroup(part.install() for part in (self._modules, self._param_grads))

    def enable(self) -> None:
        """Start collecting. Idempotent."""
        if self.enabled:
            return
        try:
            if self._api_mode is not None:
                self._api_hooks.add(self._api_mode.install_custom())
                self._api_hooks.add(push_mode(self._api_mode))
                self._api_hooks.add(install_operator_names(self._api_mode))
                self._api_hooks.add(install_collectives(self._recorder))
            self._install_module_hooks()
        except BaseException:  # all or nothing
            self._api_hooks.remove()
            raise
        self._recorder.active = True

    def disable(self) -> None:
        """Stop collecting and take every hook off. Backward passes still pending are not reported."""
        if not self.enabled:
            return
        self._resume_after_solo = False  # stopped inside a module_dump window: close it, resume nothing
        self.end_module_dump()
        self._recorder.active = False
        self._module_hooks.remove()  # handles already removed (a module_dump window) do nothing
        self._api_hooks.remove()

    def dump_module(self, module: torch.nn.Module, name: str) -> Handle:
        """``module_dump``: until :meth:`end_module_dump` (or the returned handle's ``remove()``), collect
        only ``module``'s own calls, named ``Module.{name}.{Class}.{forward|backward}.{n}``; its children
        and the APIs inside it are not."""
        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"module_dump: module must be a torch.nn.Module, got {type(module).__name__}")
        self.end_module_dump()
        resume = self.enabled
        if resume:
            self.disable()
            self._recorder.active = True  # only the solo hooks below are installed
        self._resume_after_solo = resume
        solo = self._solo = ModuleHooks(self._recorder, module, as_name=name).install()

        def end_this_window() -> None:
            if self._solo is solo:
                self.end_module_dump()

        return Handle(end_this_window)

    def end_module_dump(self) -> None:
        """Close the ``module_dump`` window: collection goes back to what the level asks for."""
        solo, self._solo = self._solo, None
        if solo is None:
            return
        solo.remove()
        if self._resume_after_solo:
            self._recorder.active = False
            self.enable()

    def record_ddp_buckets(self, ddp_model: torch.nn.Module) -> None:
        """Register the comm hook that records each of ``ddp_model``'s gradient buckets around its
        all-reduce while collecting (``distributed.ddp_bucket_hook``); DDP takes one comm hook, once,
        before its first backward."""
        if not self.level.apis:
            raise ValueError(f"record_ddp_buckets: level {self.level.name!r} records no API calls; "
                             "the bucket entries need level L1 or mix")
        ddp_model.register_comm_hook(None, ddp_bucket_hook(self._recorder))

    def reset_counts(self) -> None:
        """A new step: every API and module counts from 0 again."""
        self._recorder.new_step()

    def detach(self) -> None:
        """Remove every hook and restore everything wrapped; the interceptor can be attached again."""
        self.end_module_dump()
        self.disable()
        self.attach(None)
