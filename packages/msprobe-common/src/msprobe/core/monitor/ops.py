"""The metric table: what each configured op needs computed where the tensor lives, and how the host
turns those reductions into the written value.

A framework computes, for a group of tensors, only the *reductions* the configured ops need (one column
each), in as few fused calls as it can; after the step's single transfer the host derives each op's
value (``mean`` = sum / numel, ``zeros`` = count / numel) with the numel it already knows. Reductions:

- ``min``, ``max``: the extreme values (NaN when any value is NaN);
- ``norm``: the L2 norm;
- ``sum``: the sum of the values;
- ``zeros``: how many values have ``|x| < eps``;
- ``nans``: how many values are NaN.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

REDUCTIONS = ("min", "max", "norm", "sum", "zeros", "nans")


@dataclass(frozen=True)
class Op:
    reduction: str
    finish: Callable[[np.ndarray, np.ndarray], np.ndarray]  # a column of reductions, the numels -> the values


def _same(values: np.ndarray, numel: np.ndarray) -> np.ndarray:
    return values


def _per_element(values: np.ndarray, numel: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(numel > 0, values / np.maximum(numel, 1), np.nan)


OPS = {
    "min": Op("min", _same),
    "max": Op("max", _same),
    "norm": Op("norm", _same),
    "mean": Op("sum", _per_element),
    "zeros": Op("zeros", _per_element),  # a fraction, as upstream writes it
    "nans": Op("nans", _same),  # a count
}
# Upstream lists these among its ops; both are columns of every CSV row here, so naming them adds nothing.
WRITTEN_ALWAYS = ("shape", "dtype")


def reductions_for(ops: Sequence[str]) -> tuple[str, ...]:
    """The reductions ``ops`` need, in :data:`REDUCTIONS` order (each computed once). Counting NaNs also
    computes the norm: a framework may count only where the norm is NaN."""
    needed = {OPS[op].reduction for op in ops} | ({"norm"} if "nans" in ops else set())
    return tuple(r for r in REDUCTIONS if r in needed)


def finish(ops: Sequence[str], reductions: Sequence[str], raw: np.ndarray, numel: np.ndarray) -> np.ndarray:
    """``[rows, ops]``: each op's value from the rows' reductions (``raw``, ``[rows, reductions]``), all rows at
    once (a monitored step has hundreds: a Python call per value cost a millisecond a step)."""
    column = {name: index for index, name in enumerate(reductions)}
    if not len(raw):
        return np.empty((0, len(ops)))
    return np.stack([OPS[op].finish(raw[:, column[OPS[op].reduction]], numel) for op in ops], axis=1)
