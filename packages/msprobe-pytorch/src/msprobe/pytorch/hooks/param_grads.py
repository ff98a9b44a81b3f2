"""Levels L0 and mix: each module's parameter gradients of one backward pass as one entry,
``Module.{path}.{Class}.parameters_grad.{n}`` (docs/dump_format.md#parameters_grad).

A post-accumulate-grad hook on every parameter that requires a gradient reads ``param.grad`` once it holds
this pass's gradient (accumulated, as the optimizer will see it). When every such parameter of a module has
reported in the current backward pass, the module's gradients go to the recorder together; a module some of
whose parameters got no gradient in a pass is reported with those it got when the pass ends (a callback
queued on autograd's engine). The hooks return nothing, so no gradient changes, and the statistics are
launched where the gradient lives (the adapter's capture): no host sync per tensor.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from msprobe.core.lifecycle.naming import safe_module_parts
from msprobe.core.services.handles import Handle, HandleGroup, Removable
from msprobe.pytorch.hooks.module import _Hook
from msprobe.pytorch.hooks.recorder import Recorder, backward_pass_id


class _ModuleGrads:
    """One module's trainable parameters and the gradients of the current pass that have arrived."""

    __slots__ = ("path", "cls", "expected", "ready", "pass_id")

    def __init__(self, path: str, cls: str, expected: int) -> None:
        self.path, self.cls, self.expected = path, cls, expected
        self.ready: dict[str, torch.Tensor] = {}  # parameter name → its .grad, in the order they arrived
        self.pass_id = -1


class ParameterGradHooks:
    """The post-accumulate-grad hooks of every named submodule's own trainable parameters."""

    def __init__(self, recorder: Recorder, model: torch.nn.Module) -> None:
        self._recorder = recorder
        self._modules: list[tuple[_ModuleGrads, list[tuple[str, torch.nn.Parameter]]]] = []
        with torch._C.DisableTorchFunction():  # reading requires_grad is msprobe's, not the user's call
            for path, module in model.named_modules():
                params = [(name, p) for name, p in module.named_parameters(recurse=False) if p.requires_grad]
                if path and params:  # the root is not named (docs/dump_format.md#entry-names)
                    safe_path, cls = safe_module_parts(path, type(module).__name__)
                    self._modules.append((_ModuleGrads(safe_path, cls, len(params)), params))
        self._partial: list[_ModuleGrads] = []  # modules with some of this pass's gradients, in arrival order
        self._callback_pass = -1  # the pass whose end-of-pass callback is queued

    def install(self) -> HandleGroup:
        """Register the hooks; the handle removes them and forgets gradients not yet reported. A user's
        TorchFunctionMode sees none of it (as it sees none of msprobe's calls)."""
        with torch._C.DisableTorchFunction():
            return HandleGroup(self._register())

    def _register(self) -> Iterator[Removable]:
        yield Handle(self._forget)
        for grads, params in self._modules:
            for name, param in params:
                yield param.register_post_accumulate_grad_hook(_Hook(self._hook(grads, name)))

    def _hook(self, grads: _ModuleGrads, name: str) -> Any:
        def accumulated(param: torch.nn.Parameter) -> None:
            if not self._recorder.sees_calls:
                return
            with torch._C.DisableTorchFunction():  # reading .grad is msprobe's, not the user's call
                grad = param.grad
            if grad is None:
                return
            pass_id = backward_pass_id()
            if grads.pass_id != pass_id:  # a new pass: what an earlier one left was reported at its end
                grads.pass_id, grads.ready = pass_id, {}
            grads.ready[name] = grad
            if grads not in self._partial:
                self._partial.append(grads)
            if self._callback_pass != pass_id:
                self._callback_pass = pass_id
                torch.autograd.Variable._execution_engine.queue_callback(self._end_of_pass)
            if len(grads.ready) == grads.expected:
                self._report(grads)

        return accumulated

    def _report(self, grads: _ModuleGrads) -> None:
        ready, grads.ready = grads.ready, {}
        self._partial.remove(grads)
        self._recorder.parameters_grad("Module", grads.path, grads.cls, ready)

    def _end_of_pass(self) -> None:
        """The backward pass is over: modules with only some of their gradients are reported with those."""
        self._callback_pass = -1
        for grads in list(self._partial):
            self._report(grads)

    def _forget(self) -> None:
        for grads in self._partial:
            grads.ready = {}
        self._partial.clear()
