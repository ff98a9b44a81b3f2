"""Finding and replacing the tensors inside call arguments and outputs (lists, tuples, dicts).

Framework-free: the caller says what a tensor is. Tuple subclasses with fields (named tuples such as
``torch.return_types.max``) are rebuilt as their own type, so a mapped output looks like the original.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def tensors_in(value: Any, is_tensor: Callable[[Any], bool]) -> list:
    """Every tensor in ``value``, depth first, in argument order."""
    if is_tensor(value):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in tensors_in(item, is_tensor)]
    if isinstance(value, dict):
        return [t for item in value.values() for t in tensors_in(item, is_tensor)]
    return []


def map_tensors(value: Any, is_tensor: Callable[[Any], bool], fn: Callable[[Any], Any]) -> Any:
    """``value`` with every tensor ``t`` replaced by ``fn(t)``; everything else kept as it is."""
    if is_tensor(value):
        return fn(value)
    if isinstance(value, list):
        return [map_tensors(item, is_tensor, fn) for item in value]
    if isinstance(value, tuple):
        items = [map_tensors(item, is_tensor, fn) for item in value]
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
    if isinstance(value, dict):
        return {key: map_tensors(item, is_tensor, fn) for key, item in value.items()}
    return value
