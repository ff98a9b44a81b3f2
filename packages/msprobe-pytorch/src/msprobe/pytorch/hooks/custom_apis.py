"""Custom APIs for PyTorch: third-party operators (``custom_op_namespaces``) and the user's functions
(``register_custom_api``), recorded through the same function mode as every built-in API
(docs/pytorch/dump.md#custom-apis).

An operator of ``torch.ops.<ns>`` (``torch.library``, a C++ extension, torch_npu's ``_C_ascend``) reaches
``__torch_function__`` like a built-in, as its ``OpOverloadPacket`` or an ``OpOverload``: it only needs a
name, ``{ns}.{op}``, found when the call misses the table of built-ins (:func:`operator_entry`).

A Python function never reaches a function mode by itself, so while collecting its attribute holds a
wrapper that hands the call to the modes on the stack with ``handle_torch_function``, exactly as torch's own
Python functions (``F.gelu``...) do: our mode then records it like any API — counted, named, filtered,
its backward captured — and runs it with the mode taken off the stack, so the calls inside it are not
recorded separately (a built-in's insides are not either). With no mode on the stack the wrapper calls
the function directly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch._ops import OpOverload, OpOverloadPacket
from torch.overrides import handle_torch_function

from msprobe.core.lifecycle.custom_apis import CUSTOM_APIS
from msprobe.core.services.handles import Handle, patch_attributes

_OPERATOR_TYPES = (OpOverload, OpOverloadPacket)
_mode_on_stack = torch._C._is_torch_function_mode_enabled


def operator_entry(func: Any, namespaces: frozenset[str]) -> tuple[str, str] | None:
    """``(ns, op)`` when ``func`` is an operator of one of ``namespaces`` (any overload), else None."""
    if type(func) not in _OPERATOR_TYPES:
        return None
    namespace, _, op = func._qualified_op_name.partition("::") if type(func) is OpOverloadPacket else (
        func.namespace, "", func._opname)
    return (namespace, op) if namespace in namespaces else None


def install_custom_functions(table: dict[Any, tuple[str, str]]) -> Handle:
    """Put a wrapper on every registered function and add the wrappers to ``table`` (the function mode's
    names); the handle restores the attributes and forgets the wrappers."""
    wrapped = list(_wrappers())
    for _owner, _attr, wrapper, name in wrapped:
        table[wrapper] = name
    patched = patch_attributes([(owner, attr, wrapper) for owner, attr, wrapper, _ in wrapped])

    def undo() -> None:
        patched.remove()
        for _owner, _attr, wrapper, _ in wrapped:
            table.pop(wrapper, None)

    return Handle(undo)


def _wrappers() -> Iterator[tuple[Any, str, Callable[..., Any], tuple[str, str]]]:
    for api in CUSTOM_APIS.apis():
        current = getattr(api.owner, api.attr, None)
        if callable(current):
            yield api.owner, api.attr, _through_modes(current), (api.prefix, api.api)


def _through_modes(function: Callable[..., Any]) -> Callable[..., Any]:
    def custom_api(*args: Any, **kwargs: Any) -> Any:
        if _mode_on_stack():
            relevant = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
            return handle_torch_function(custom_api, relevant, *args, **kwargs)
        return function(*args, **kwargs)

    for attribute in ("__module__", "__name__", "__qualname__", "__doc__"):
        try:
            setattr(custom_api, attribute, getattr(function, attribute))
        except (AttributeError, TypeError):
            pass
    custom_api.__wrapped__ = function  # type: ignore[attr-defined]
    return custom_api
