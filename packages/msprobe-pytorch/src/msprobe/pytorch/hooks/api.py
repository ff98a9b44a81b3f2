"""API interception through ``TorchFunctionMode``.

A function mode is PyTorch's own hook for every overridable call: nothing is patched (``F.gelu is F.gelu``
holds), an idle debugger costs nothing, and PyTorch takes the mode off the stack while it handles a call, so
only outermost calls are seen. The mode is put back around autograd's engine start (:func:`push_mode`) so a
checkpoint's recomputation is seen too (docs/pytorch/dump.md#activation-checkpointing), and thin wrappers on
``torch.Tensor``'s operator dunders leave a name hint, since ``x + y`` arrives as ``TensorBase.add``
(docs/pytorch/dump.md#tasks-and-levels).
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch.overrides import TorchFunctionMode, _get_current_function_mode_stack

from msprobe.core.lifecycle.custom_apis import CUSTOM_APIS
from msprobe.core.services.handles import Handle, HandleGroup, patch_attributes
from msprobe.pytorch.hooks.api_names import OPERATOR_DUNDERS, build_api_table, is_mutating
from msprobe.pytorch.hooks.custom_apis import install_custom_functions, operator_entry
from msprobe.pytorch.hooks.recorder import Recorder, backward_pass_id


@torch.compiler.disable
def outside_dynamo(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` run eagerly, out of Dynamo's sight.

    A TorchFunctionMode on the stack while ``torch.compile`` traces is traced into every call, and so was
    all of msprobe behind it (recorder, statistics, files): graph breaks on its Python, guards on its
    dicts, ``recompile_limit`` within a few steps. Hooks check ``torch.compiler.is_compiling()`` (free in
    eager code, where the disable wrapper would cost ~0.4 µs per call) and, while tracing, come here: Dynamo
    breaks the graph at the call, and the call runs — and is recorded — eagerly. ``fn`` must not check
    again: ``is_compiling()`` also holds for the eager code Dynamo itself runs while compiling.
    """
    return fn(*args, **kwargs)


class ApiMode(TorchFunctionMode):
    """Records each outermost call of a known API through the recorder."""

    def __init__(self, recorder: Recorder) -> None:
        super().__init__()
        self._recorder = recorder
        self._table = build_api_table()
        self._namespaces: frozenset[str] = frozenset()  # custom_op_namespaces, read at each install_custom
        self.hint: str | None = None  # operator dunder being called, set by the dunder wrappers

    def install_custom(self) -> Handle:
        """Custom APIs (``custom_apis.py``) for this collecting window: the registered functions' wrappers
        join the table, and operators of the configured namespaces are named when first called."""
        self._namespaces = frozenset(CUSTOM_APIS.namespaces)
        return install_custom_functions(self._table)

    def __torch_function__(
        self, func: Any, types: tuple, args: tuple = (), kwargs: dict | None = None
    ) -> Any:
        kwargs = kwargs or {}
        if torch.compiler.is_compiling():  # Dynamo is tracing a compiled function: see outside_dynamo
            return outside_dynamo(self._handle, func, args, kwargs)
        return self._handle(func, args, kwargs)

    def _handle(self, func: Any, args: tuple, kwargs: dict) -> Any:
        hint, self.hint = self.hint, None
        entry = None if self._recorder.paused else self._table.get(func)
        if entry is None:
            entry = operator_entry(func, self._namespaces) if self._namespaces else None
            if entry is None or self._recorder.paused:
                return func(*args, **kwargs)
        prefix, api = entry
        if hint is not None and prefix == "Tensor":
            api = hint
        return self._record(func, prefix, api, args, kwargs)

    def _record(self, func: Any, prefix: str, api: str, args: tuple, kwargs: dict) -> Any:
        recorder = self._recorder
        if backward_pass_id() != -1:  # autograd's call, or a recomputation's: never a new forward entry
            pending = recorder.begin_replay((prefix, api), args, kwargs, module=False)
            if pending is None:
                return func(*args, **kwargs)
        else:
            pending = recorder.begin_api(prefix, api, args, kwargs, mutates=is_mutating(api, kwargs), func=func)
        return recorder.finish(pending, func(*args, **kwargs))


def push_mode(mode: ApiMode) -> HandleGroup:
    """Put ``mode`` on the function-mode stack, and back on it for each backward pass the engine starts;
    the handle takes it off again."""
    mode.__enter__()
    handles = HandleGroup([Handle(lambda: mode.__exit__(None, None, None))])
    original = getattr(torch.autograd.graph, "_engine_run_backward", None)
    if original is not None:  # where PyTorch has it, so do its own wrappers (torch/compiler/__init__.py)
        run = _with_mode(mode, original)
        handles.add(patch_attributes([(torch.autograd.graph, "_engine_run_backward", run),
                                      (torch.autograd, "_engine_run_backward", run)]))
    return handles


def _with_mode(mode: ApiMode, engine_run_backward: Any) -> Any:
    @functools.wraps(engine_run_backward)
    def run_backward(*args: Any, **kwargs: Any) -> Any:
        if mode in _get_current_function_mode_stack():  # already there (never twice: calls would count twice)
            return engine_run_backward(*args, **kwargs)
        with mode:
            return engine_run_backward(*args, **kwargs)

    return run_backward


def install_operator_names(mode: ApiMode) -> Handle:
    """Put the name-hint wrappers on ``torch.Tensor``'s operator dunders; the handle restores the originals
    (deleting the attribute again where ``Tensor`` inherited it from ``TensorBase``)."""
    found = [(name, getattr(torch.Tensor, name, None)) for name in OPERATOR_DUNDERS]
    return patch_attributes([(torch.Tensor, name, _hinted(mode, name, original))
                             for name, original in found if original is not None])


def _hinted(mode: ApiMode, name: str, original: Any) -> Any:
    def hinted(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        mode.hint = name
        try:
            return original(self, *args, **kwargs)
        finally:
            mode.hint = None

    def operator(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if torch.compiler.is_compiling():  # see outside_dynamo
            return outside_dynamo(hinted, self, *args, **kwargs)
        return hinted(self, *args, **kwargs)

    operator.__name__ = operator.__qualname__ = name
    return operator
