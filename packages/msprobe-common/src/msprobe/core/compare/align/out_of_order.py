"""Pairing the module entries that an order-keeping alignment left one-sided because the two dumps wrote them in
different orders.

A module's backward entry and its ``parameters_grad`` entry are written when hooks fire in the backward pass, and
two tools (or two frameworks) fire theirs in different orders: msprobe 26.2.0 writes a LayerNorm's
``parameters_grad`` before its backward entry, this msprobe after it. An alignment that keeps order pairs one of
the two and leaves the other one-sided on both sides; a module entry is known by its path, class, kind and call
count wherever it was written, so the leftovers are paired here by that key.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

EntryPairs = list[tuple[str | None, str | None]]


def pair_out_of_order(pairs: EntryPairs, key: Callable[[str, str], Hashable | None]) -> EntryPairs:
    """``pairs`` with each one-sided bench entry moved next to the first one-sided NPU entry of the same
    ``key(side, name)``; ``key`` returns None for an entry that may not be paired out of order (an API, whose
    name does not identify it across a shifted count). The pair takes the NPU entry's place."""
    waiting: dict[Hashable, list[int]] = {}
    for index, (npu_name, bench_name) in enumerate(pairs):
        if bench_name is None and npu_name is not None and (found := key("npu", npu_name)) is not None:
            waiting.setdefault(found, []).append(index)
    out: list[tuple[str | None, str | None] | None] = list(pairs)
    for index, (npu_name, bench_name) in enumerate(pairs):
        if npu_name is None and bench_name is not None and (found := key("bench", bench_name)) is not None:
            slots = waiting.get(found)
            if slots:
                slot = slots.pop(0)
                out[slot] = (pairs[slot][0], bench_name)
                out[index] = None
    return [pair for pair in out if pair is not None]
