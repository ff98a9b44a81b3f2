"""Whether a compare named an entry inside a given layer: shared by the PyTorch and MindSpore zoos."""

from __future__ import annotations


def in_layer(entry: str | None, layer: str, construct: dict, kind: str) -> bool:
    """``entry`` is the layer's own module or cell (``kind``: ``Module`` or ``Cell``; forward or backward),
    or nested inside it, following the parents of ``construct`` (a construct.json)."""
    seen = set()
    while entry and entry not in seen:
        seen.add(entry)
        if entry.startswith(f"{kind}.{layer}."):
            return True
        entry = construct.get(entry)
    return False
