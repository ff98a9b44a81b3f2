"""Module-level interception (L0 and mix): forward pre/post hooks on every named submodule.

Backward entries use the same capture as APIs (``backward.py``) instead of
``register_full_backward_hook``: PyTorch's full backward hooks put identity nodes around the module,
which makes its outputs views created in a custom Function (a later ``self.fc(x).relu_()`` raises),
changes the order in which gradients are summed, and cannot serve in-place modules.

Hooks are registered by ``install`` and taken off by the handle it returns, so a model that is attached but not
collecting runs ``Module.__call__``'s hook-free fast path. Calls of one module nest (recursion, a
shared module called inside itself), so each module keeps a stack of pending calls.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from msprobe.core.services.handles import Handle, HandleGroup, Removable
from msprobe.core.lifecycle.naming import safe_module_parts
from msprobe.pytorch.hooks.api import outside_dynamo
from msprobe.pytorch.hooks.recorder import Pending, Recorder, backward_pass_id


def _inert(*_args: Any) -> None:
    """What our hooks become in a pickled or deep-copied model: the copy is not being collected."""


def _inert_hook() -> Any:
    return _inert


class _Hook:
    """A module hook that survives ``pickle``/``copy.deepcopy`` of the model (as :func:`_inert`),
    where a plain closure would make pickling the user's model fail."""

    def __init__(self, fn: Any) -> None:
        self._fn = fn

    def __call__(self, *args: Any) -> Any:
        if torch.compiler.is_compiling():  # Dynamo is tracing the model: run the hook eagerly, unseen
            return outside_dynamo(self._fn, *args)
        return self._fn(*args)

    def __reduce__(self) -> tuple:
        return _inert_hook, ()


class ModuleHooks:
    """Hooks on every named submodule of ``model`` — or, with ``as_name``, on ``model`` alone under that
    name (``module_dump``: the module is collected as one unit, its children are not)."""

    def __init__(self, recorder: Recorder, model: torch.nn.Module, *, as_name: str | None = None) -> None:
        self._recorder = recorder
        self._model = model
        self._as_name = as_name
        self._pending: dict[int, list[Pending | None]] = {}

    def _named_modules(self) -> list[tuple[str, torch.nn.Module]]:
        if self._as_name is not None:
            return [(self._as_name, self._model)]
        # the root model is not named (docs/dump_format.md#entry-names)
        return [(path, module) for path, module in self._model.named_modules() if path]

    def install(self) -> HandleGroup:
        """Register the hooks; the handle removes them and forgets the calls still pending."""
        return HandleGroup(self._register())

    def _register(self) -> Iterator[Removable]:
        yield Handle(self._pending.clear)
        for path, module in self._named_modules():
            # a module registered as ".." or "a/b" is named repaired rather than raising in the forward
            safe_path, cls = safe_module_parts(path, type(module).__name__)
            yield module.register_forward_pre_hook(_Hook(self._pre_hook(safe_path, cls)), with_kwargs=True)
            yield module.register_forward_hook(_Hook(self._post_hook()), with_kwargs=True)

    def _pre_hook(self, path: str, cls: str) -> Any:
        recorder = self._recorder

        key = ("Module", path, cls)

        def pre_hook(module: torch.nn.Module, args: tuple, kwargs: dict) -> Any:
            if not recorder.sees_calls:
                return None
            if backward_pass_id() != -1:  # a recomputation: never a new forward entry (None: not even a replay)
                pending = recorder.begin_replay(key, args, kwargs, module=True)
            else:
                pending = recorder.begin_module(path, cls, args, kwargs)
            self._pending.setdefault(id(module), []).append(pending)
            return None

        return pre_hook

    def _post_hook(self) -> Any:
        recorder = self._recorder

        def post_hook(module: torch.nn.Module, args: tuple, kwargs: dict, output: Any) -> Any:
            stack = self._pending.get(id(module))
            if not stack or recorder.paused:
                return None
            pending = stack.pop()
            if pending is not None:
                recorder.finish(pending, output)
            return None

        return post_hook
