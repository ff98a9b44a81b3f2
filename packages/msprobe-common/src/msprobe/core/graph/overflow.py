"""``-oc``: mark the nodes whose arguments hold inf or NaN, with 1.1.1's three levels.

The levels say where a non-finite value started, the same split as the overflow check's origin and
inherited (``msprobe.core.dump.overflow``): **critical** the outputs hold inf/NaN and the inputs do not (this
call produced it: the origin), **high** both do (it was carried through), **medium** only the inputs
do (the call absorbed it). A value counts as non-finite when its recorded Max or Min is not finite: it
then holds an inf or NaN element. 1.1.1 also counts a Mean or Norm that is not finite, which happens to a
float32 tensor of huge but finite values when the reduction overflows; that marks the call before the
one that really produced the inf as the origin, so we do not follow it. For a backward entry
the inputs are the gradients flowing in (1.1.1 reads none there, so it calls every such hit critical).
1.1.1 also marks a jump of the output norm by 1e5 over the input norm as high; we leave that to the
compare, which judges it against the bench.
"""

from __future__ import annotations

import math

from msprobe.core.compare.judge import stat_of
from msprobe.core.compare.read import flatten_entry
from msprobe.core.graph.tree import Graph

CRITICAL, HIGH, MEDIUM = "critical", "high", "medium"
STATISTICS = ("Max", "Min")  # NaN reaches both reductions, an inf element one of them


def overflow_level(name: str, entry: dict) -> str | None:
    inputs = outputs = False
    for row in flatten_entry(name, entry):
        if row.is_tensor and any(not math.isfinite(v) for k in STATISTICS
                                 if (v := stat_of(row.value, k)) is not None):
            if row.part == "output":
                outputs = True
            else:
                inputs = True
    if outputs:
        return HIGH if inputs else CRITICAL
    return MEDIUM if inputs else None


def mark_overflow(graph: Graph) -> list[str]:
    """Set ``overflow_level`` on every entry node that has one; returns the critical nodes in order."""
    critical = []
    for node in graph.root.walk():
        level = overflow_level(node.id, node.entry) if node.entry is not None else None
        if level is not None:
            node.data["overflow_level"] = level
            if level == CRITICAL:
                critical.append(node.id)
    return critical
