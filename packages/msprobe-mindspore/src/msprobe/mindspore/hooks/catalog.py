"""Which MindSpore APIs msprobe intercepts, and under which prefix (docs/dump_format.md#entry-names).

The list is derived from the installed MindSpore rather than kept by hand (as msprobe 1.1.1 did), so a new
MindSpore version is covered without editing it; short deny lists (:data:`_NOT_API_MODULES`,
:data:`_TENSOR_NOT_API`) leave out what is not a computation. The rule per namespace:
docs/mindspore/dump.md#pynative-levels-l0-l1-and-mix ("Which APIs").
"""

from __future__ import annotations

import inspect
import types
from dataclasses import dataclass
from typing import Any

import mindspore
import mindspore.communication.comm_func as comm_func
import mindspore.mint.distributed as mint_distributed
import mindspore.mint.nn.functional as mint_functional
import mindspore.ops.communication as ops_communication
from mindspore import mint, ops

_NOT_API_MODULES = (
    "mindspore.ops.function.grad",
    "mindspore.ops.function.vmap_func",
    "mindspore.ops.function.comm_func",
    "mindspore.ops.function.reshard_func",
    "mindspore.ops.function.parameter_func",
    "mindspore.ops.composite",
    "mindspore.ops.primitive",
    "mindspore.ops.op_info_register",
    "mindspore.ops.vm_impl_registry",
    "mindspore.ops.operations._ms_kernel",
)

_TENSOR_NOT_API = frozenset(
    """asnumpy numpy item itemset tolist get_bytes to_dlpack data_ptr data_sync value
    assign_value assign_value_cpp init_data set_init_flag is_init has_init set_const_arg set_dtype
    set_cast_dtype set_device_address flush_from_cache offload offload_file_path wait_pipeline
    pin_memory is_pinned is_shared storage untyped_storage storage_offset stride is_contiguous
    register_hook hooks requires_grad_ dim ndimension nelement numel element_size is_floating_point
    is_complex is_signed type to_coo to_csr""".split()
)

_TENSOR_OPERATORS = tuple(
    f"__{name}__"
    for name in """add radd sub rsub mul rmul truediv rtruediv floordiv rfloordiv mod rmod pow rpow
    matmul rmatmul and or xor neg pos abs invert eq ne lt le gt ge getitem setitem
    iadd isub imul itruediv ifloordiv imod""".split()
)

_SETUP_PREFIXES = ("init_", "get_", "is_", "new_", "destroy_", "set_")

# Where the collectives live, and the modules whose functions count as that namespace's: MindSpore 2.10 has
# two implementations (``mindspore.communication.comm_func`` and ``mindspore.ops.function.comm_func``), the
# second public as ``mindspore.ops.communication`` and bound in ``mindspore.ops`` itself (``ops.all_reduce``).
_OPS_COMM_FUNC = "mindspore.ops.function.comm_func"
_COLLECTIVE_NAMESPACES = (
    (comm_func, (comm_func.__name__, _OPS_COMM_FUNC)),
    (mint_distributed, (mint_distributed.__name__, _OPS_COMM_FUNC)),
    (ops_communication, (_OPS_COMM_FUNC,)),
    (ops, (_OPS_COMM_FUNC,)),
)

_INPLACE_OPERATORS = frozenset({"__setitem__", "__iadd__", "__isub__", "__imul__", "__itruediv__",
                                "__ifloordiv__", "__imod__"})
_INPLACE_FUNCTIONS = frozenset({"assign", "assign_add", "assign_sub"})


@dataclass(frozen=True)
class ApiTarget:
    """One attribute to replace: ``owner.attr`` is recorded as ``{prefix}.{attr}``."""

    prefix: str
    owner: Any
    attr: str
    mutates_inputs: bool


def _is_inplace(prefix: str, name: str) -> bool:
    """In-place APIs get their inputs recorded before the call (docs/dump_format.md#values); collectives write into
    their tensors too."""
    if prefix == "Distributed":
        return True
    if name in _INPLACE_OPERATORS or name in _INPLACE_FUNCTIONS:
        return True
    return name.endswith("_") and not name.startswith("_")


def _public_functions(namespace: Any) -> dict[str, Any]:
    found = {}
    for name in dir(namespace):
        if name.startswith("_"):
            continue
        value = getattr(namespace, name, None)
        if isinstance(value, (types.FunctionType, types.BuiltinFunctionType)):
            found[name] = value
    return found


def _namespace_targets(prefix: str, namespace: Any) -> list[ApiTarget]:
    targets = []
    for name, func in _public_functions(namespace).items():
        module = getattr(func, "__module__", "") or ""
        if not module.startswith(("mindspore.ops", "mindspore.mint")):
            continue
        if module.startswith(_NOT_API_MODULES):
            continue
        targets.append(ApiTarget(prefix, namespace, name, _is_inplace(prefix, name)))
    return targets


def _tensor_targets() -> list[ApiTarget]:
    targets = []
    for name in dir(mindspore.Tensor):
        if name.startswith("_") or name in _TENSOR_NOT_API:
            continue
        raw = inspect.getattr_static(mindspore.Tensor, name)
        if isinstance(raw, (property, staticmethod, classmethod)) or not callable(raw):
            continue
        targets.append(ApiTarget("Tensor", mindspore.Tensor, name, _is_inplace("Tensor", name)))
    for name in _TENSOR_OPERATORS:
        if hasattr(mindspore.Tensor, name):
            targets.append(ApiTarget("Tensor", mindspore.Tensor, name, _is_inplace("Tensor", name)))
    return targets


def distributed_targets() -> list[ApiTarget]:
    """The communication functions of ``comm_func``, ``mint.distributed`` and ``ops.communication`` (also as
    bound in ``ops``), not their set-up calls and settings."""
    targets = []
    for namespace, modules in _COLLECTIVE_NAMESPACES:
        for name, func in _public_functions(namespace).items():
            module = getattr(func, "__module__", "") or ""
            if module.startswith(modules) and not name.startswith(_SETUP_PREFIXES):
                targets.append(ApiTarget("Distributed", namespace, name, True))
    return targets


def api_targets() -> list[ApiTarget]:
    """Every API attribute msprobe replaces while it records, for the installed MindSpore."""
    return [
        *_namespace_targets("Functional", ops),
        *_tensor_targets(),
        *_namespace_targets("Mint", mint),
        *_namespace_targets("MintFunctional", mint_functional),
        *distributed_targets(),
    ]
