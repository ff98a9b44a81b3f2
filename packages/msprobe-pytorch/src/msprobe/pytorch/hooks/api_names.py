"""Which torch callables are APIs msprobe records, and under which ``Prefix.api`` name.

``TorchFunctionMode`` hands us the callable object that was called (``torch.add``, ``F.relu``,
``TensorBase.add``...), so each object is mapped to its name once, by walking the namespaces users call:
``Torch`` (with ``linalg``, ``fft``, ``special``), ``Tensor`` (operator dunders included), ``Functional``
(wins over ``Torch`` for the same object, as modules call it and msprobe 1.1.1 names it), ``VF`` and, when
torch_npu imports, ``NPU``. Calls that only query metadata or wire up autograd are not APIs. What is
recorded and what is not: docs/pytorch/dump.md#tasks-and-levels.
"""

from __future__ import annotations

import importlib
import importlib.util
import types
from typing import Any

import torch
import torch.nn.functional as F

NOT_COMPUTE = frozenset(
    {
        # metadata queries
        "dim", "ndimension", "size", "stride", "numel", "nelement", "element_size", "data_ptr",
        "storage_offset", "untyped_storage", "storage", "get_device", "has_names", "is_contiguous",
        "is_floating_point", "is_complex", "is_signed", "is_inference", "is_pinned", "is_shared",
        "is_set_to", "is_same_size", "is_tensor", "is_storage", "result_type", "can_cast",
        "promote_types", "is_nonzero", "__len__", "__contains__", "__index__",
        # Python protocol and serialisation plumbing
        "__repr__", "__str__", "__format__", "__hash__", "__dir__", "__sizeof__", "__reduce__",
        "__reduce_ex__", "__getstate__", "__setstate__", "__deepcopy__", "__array__",
        "__array_wrap__", "__dlpack__", "__dlpack_device__", "__torch_function__", "__iter__",
        "__reversed__",
        # dtype shorthands: msprobe 1.1.1 does not record them either (``.to(dtype)`` is recorded)
        "float", "double", "half", "bfloat16", "int", "long", "short", "char", "byte", "bool",
        "cfloat", "cdouble",
        # autograd wiring (the backward pass itself is captured through our hooks)
        "backward", "register_hook", "register_post_accumulate_grad_hook", "retain_grad",
        "requires_grad_",
    }
)  # fmt: skip

# torch.Tensor operator dunders whose call reaches __torch_function__ as the plain method (``x + y``
# arrives as ``TensorBase.add``); api.py wraps them to keep the dunder name.
OPERATOR_DUNDERS = tuple(
    f"__{op}__"
    for base in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or",
                 "xor", "lshift", "rshift", "div")
    for op in (base, "r" + base, "i" + base)
) + ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__neg__", "__pos__", "__abs__",
     "__invert__")  # fmt: skip

RECURRENT_VF = (
    "rnn_tanh", "rnn_relu", "gru", "lstm", "rnn_tanh_cell", "rnn_relu_cell", "gru_cell", "lstm_cell"
)  # fmt: skip
INPLACE_DUNDERS = frozenset(d for d in OPERATOR_DUNDERS if d.startswith("__i")) | {"__setitem__"}

_CALLABLE_KINDS = (
    types.BuiltinFunctionType,
    types.FunctionType,
    types.MethodDescriptorType,
    types.WrapperDescriptorType,
)


def _public_callables(namespace: Any, keep_dunders: bool = False):
    for attr in dir(namespace):
        if attr in NOT_COMPUTE:
            continue
        is_dunder = attr.startswith("__") and attr.endswith("__")
        if attr.startswith("_") and not (keep_dunders and is_dunder):
            continue
        obj = getattr(namespace, attr, None)
        if isinstance(obj, _CALLABLE_KINDS):
            yield attr, obj


def _add(table: dict, prefix: str, api: str, obj: Any) -> None:
    """``obj`` and, when another tool wrapped it with ``functools.wraps`` before the table was built (config
    check's random-call tracking, a profiler), the function it wraps: ``__torch_function__`` sees the
    wrapped one when the wrapper calls it."""
    for each in (obj, getattr(obj, "__wrapped__", None)):
        if each is None:
            continue
        try:
            table[each] = (prefix, api)
        except TypeError:  # an unhashable callable cannot reach us as a dict key anyway
            pass


def build_api_table() -> dict[Any, tuple[str, str]]:
    """callable object → (prefix, api name). Later namespaces override earlier ones for shared objects."""
    table: dict[Any, tuple[str, str]] = {}
    for attr, obj in _public_callables(torch):
        _add(table, "Torch", attr, obj)
    for sub in ("linalg", "fft", "special"):
        for attr, obj in _public_callables(getattr(torch, sub)):
            _add(table, "Torch", f"{sub}.{attr}", obj)
    tensor_dunders = {*OPERATOR_DUNDERS, "__getitem__", "__setitem__", "__bool__", "__int__", "__float__"}
    for attr, obj in _public_callables(torch.Tensor, keep_dunders=True):
        if not attr.startswith("__") or attr in tensor_dunders:
            _add(table, "Tensor", attr, obj)
    for attr in RECURRENT_VF:
        _add(table, "VF", attr, getattr(torch._VF, attr))
    for attr, obj in _public_callables(F):
        if getattr(obj, "__module__", "") != "typing":
            _add(table, "Functional", attr, obj)
    npu = _torch_npu()
    if npu is not None:
        # Only on Ascend: torch_npu's fused kernels (npu_rms_norm, npu_fusion_attention...) reach
        # __torch_function__ like any torch builtin. Not exercised off an NPU.
        for attr, obj in _public_callables(npu):
            _add(table, "NPU", attr, obj)
    return table


def _torch_npu() -> Any | None:
    if importlib.util.find_spec("torch_npu") is None:
        return None
    try:
        return importlib.import_module("torch_npu")
    except ImportError:
        return None


def is_mutating(api: str, kwargs: dict) -> bool:
    """True when the call writes into one of its inputs (``add_``, ``x += y``, ``x[i] = v``, ``out=``,
    ``inplace=True``), so its inputs must be recorded before the call."""
    if api.endswith("_") and not api.endswith("__"):
        return True
    return api in INPLACE_DUNDERS or "out" in kwargs or kwargs.get("inplace") is True
