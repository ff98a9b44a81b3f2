"""Reading a dump.json in tests: the tensor records of an entry, shared by both frameworks' tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def tensor_records(value: Any) -> Iterator[dict]:
    """Every tensor record under a dump.json entry (arguments, outputs, nested lists and dicts), in order."""
    if isinstance(value, dict):
        if str(value.get("type", "")).endswith(".Tensor"):
            yield value
        else:
            for item in value.values():
                yield from tensor_records(item)
    elif isinstance(value, list):
        for item in value:
            yield from tensor_records(item)
