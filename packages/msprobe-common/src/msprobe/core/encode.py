"""The framework-free half of the dump.json value encoder (the value table of SPEC 4.4).

A framework hands :func:`encode_value` a ``leaf`` hook that knows its tensors, dtypes, devices and
process groups; everything Python itself defines is encoded here once, so both frameworks write
scalars, slices and containers identically. Values are written the way msprobe 1.1.1 writes them,
because its compare and analysis tools read these files:

======================  ==============================================================
Python value            dump.json value
======================  ==============================================================
bool / int / float/str  ``{"type": "bool"|"int"|"float"|"str", "value": v}``
numpy scalar            ``{"type": "float64"|"int64"|"bool_"|..., "value": v}`` (Python value)
slice                   ``{"type": "slice", "value": [start, stop, step]}`` (ints or null)
Ellipsis                ``{"type": "ellipsis", "value": "..."}``
None                    ``null``
list / tuple            list, element by element
dict                    object, key by key
anything else           ``null``, logged once per type
======================  ==============================================================
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from msprobe.core.log import logger
from msprobe.core.records import NOT_HANDLED, TensorRecord

Leaf = Callable[[Any, tuple], Any]

_SCALAR_TYPES = (bool, int, float, str)  # bool before int: a bool is also an int
_reported_types: set[str] = set()


def encode_value(value: Any, leaf: Leaf, path: tuple = ()) -> Any:
    """Encode ``value`` for dump.json. ``leaf(value, path)`` is asked first for every value (so a
    framework can claim a tuple subclass like ``torch.Size``); ``path`` is the index path of the value
    inside the argument list, used for tensor file names (``input.0.1``)."""
    claimed = leaf(value, path)
    if claimed is not NOT_HANDLED:
        return claimed
    if value is None:
        return None
    if isinstance(value, np.generic) and isinstance(value.item(), _SCALAR_TYPES):
        return {"type": type(value).__name__, "value": value.item()}
    for scalar_type in _SCALAR_TYPES:
        if isinstance(value, scalar_type):
            return {"type": scalar_type.__name__, "value": scalar_type(value)}
    if isinstance(value, slice):
        return {"type": "slice", "value": [_slice_bound(b) for b in (value.start, value.stop, value.step)]}
    if value is Ellipsis:
        return {"type": "ellipsis", "value": "..."}
    if isinstance(value, (list, tuple)):
        return [encode_value(item, leaf, (*path, index)) for index, item in enumerate(value)]
    if isinstance(value, dict):
        return {str(key): encode_value(item, leaf, (*path, key)) for key, item in value.items()}
    _report_once(value, "writing null for it")
    return None


def to_json_ready(encoded: Any) -> Any:
    """Replace every :class:`TensorRecord` in an encoded value by its dump.json dict."""
    if isinstance(encoded, TensorRecord):
        return encoded.to_json()
    if isinstance(encoded, (list, tuple)):
        return [to_json_ready(item) for item in encoded]
    if isinstance(encoded, dict):
        return {key: to_json_ready(item) for key, item in encoded.items()}
    return encoded


def _slice_bound(bound: Any) -> int | None:
    """A slice bound as an int; a 0-d tensor or numpy integer converts, anything else is null."""
    if bound is None or (isinstance(bound, int) and not isinstance(bound, bool)):
        return bound
    try:
        return int(bound)
    except (TypeError, ValueError):
        _report_once(bound, "writing null for this slice bound")
        return None


def _report_once(value: Any, consequence: str) -> None:
    type_name = f"{type(value).__module__}.{type(value).__qualname__}"
    if type_name not in _reported_types:
        _reported_types.add(type_name)
        logger.warning(f"dump.json cannot show values of type {type_name}; {consequence}")
