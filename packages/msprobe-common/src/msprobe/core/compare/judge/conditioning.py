"""Normalisations, the ops whose conditioning the rounding rule must know (docs/compare.md#ill-conditioned-ops).

A normalisation divides each group of its input by the group's spread, so the rounding its input carries,
relative to the input's values, comes out multiplied by the group's RMS over its spread: how far the group's
mean stands from zero. In a tensor compare that factor is measured on the bench's input
(:func:`amplification`) and widens what the input carries into the output (:mod:`.rounding`).

Over a few values per group the op is worse than amplifying: over 2 values it outputs ±1 per group, the sign
of their difference, which bf16 and fp32 choose differently where the two are closer than their rounding, so
whole elements swap while Max, Min, Mean and Norm stay as they were. Every value computed from such an output
may then differ beyond rounding with nothing wrong, and neither statistics nor tensors can tell that from a
fault (:func:`ill_conditioned`). With n values per group the chance that a group is that close falls as the
(n-1)th power of the rounding, so :data:`FEW_VALUES` stops at 3.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from msprobe.core.compare.judge.verdict import RowResult
from msprobe.core.lifecycle.naming import FORWARD, parse_name

FEW_VALUES = 3  # a normalisation over at most this many values per group is ill-conditioned
DEFAULT_EPS = 1e-5  # where the dump does not record it (MindSpore's BatchNorm primitive keeps it an attribute)
_BATCH_NORMS = ("batch_norm", "bn_train.BatchNorm")  # MindSpore's nn.BatchNorm*d calls its primitive bn_train
# The positions of ``training`` and ``eps`` in each API's signature (torch.nn.functional's, mindspore.ops' alike).
_TRAINING_ARG = 5
_EPS_ARG = {"batch_norm": 7, "instance_norm": 7, "group_norm": 4, "layer_norm": 4}


@dataclass(frozen=True)
class Normalisation:
    """How a normalisation groups its input (C order): ``groups`` groups, each one channel (axis 1) across the
    batch when ``by_channel``, else one of ``groups`` consecutive blocks of the flattened input."""

    groups: int
    by_channel: bool
    eps: float
    group: str  # what one group is, for messages: "channel", "group", ...


def normalisation(rows: list[RowResult]) -> Normalisation | None:
    """The normalisation a forward API entry computes from its ``input.0``: a training-mode batch_norm, an
    instance_norm, a group_norm or a layer_norm; None for anything else and where the dump does not say (a
    module entry, whose mode is not recorded; an unknown shape)."""
    try:
        name = parse_name(rows[0].entry)
    except ValueError:
        return None
    shape = _first_input_shape(rows)
    if name.is_module or name.direction != FORWARD or shape is None or len(shape) < 2 or 0 in shape:
        return None
    api = "batch_norm" if name.api in _BATCH_NORMS else name.api
    eps = _argument(rows, _EPS_ARG.get(api, -1), "eps")
    eps = float(eps) if isinstance(eps, (int, float)) and not isinstance(eps, bool) and eps >= 0 else DEFAULT_EPS
    if api == "batch_norm" and (name.api == "bn_train.BatchNorm" or _argument(rows, _TRAINING_ARG, "training") is True):
        return Normalisation(shape[1], True, eps, "channel")
    if api == "instance_norm":
        return Normalisation(shape[0] * shape[1], False, eps, "channel of each sample")
    if api == "group_norm" and isinstance(groups := _argument(rows, 1, "num_groups"), int) and groups > 0:
        return Normalisation(shape[0] * groups, False, eps, "group")
    if api == "layer_norm" and (trailing := _normalized_dims(rows)) and trailing <= len(shape):
        return Normalisation(math.prod(shape[:len(shape) - trailing]), False, eps, "normalised slice")
    return None


def ill_conditioned(rows: list[RowResult]) -> str | None:
    """``normalises 2 values per channel`` for a forward entry of a normalisation over at most
    :data:`FEW_VALUES` values per group; None otherwise."""
    norm = normalisation(rows)
    if norm is None:
        return None
    count = math.prod(_first_input_shape(rows) or []) // norm.groups
    return f"normalises {count} values per {norm.group}" if count <= FEW_VALUES else None


def amplification(values: np.ndarray, norm: Normalisation) -> float | None:
    """How much ``norm`` multiplies the relative rounding of ``values`` (its input): the RMS over the groups of
    each group's RMS over its spread, √(RMS² / (variance + eps)), in float64; 1 for zero-mean groups. None when
    the array does not split into ``norm``'s groups or holds inf/nan."""
    array = np.asarray(values, dtype=np.float64)
    if array.size == 0 or array.size % norm.groups or (norm.by_channel and array.shape[1] != norm.groups):
        return None
    grouped = np.moveaxis(array, 1, 0).reshape(norm.groups, -1) if norm.by_channel else array.reshape(norm.groups, -1)
    if not np.isfinite(grouped).all():
        return None
    squares = np.mean(grouped * grouped, axis=1)
    return float(np.sqrt(np.mean(squares / (np.var(grouped, axis=1) + norm.eps))))


def _first_input_shape(rows: list[RowResult]) -> list[int] | None:
    for result in rows:
        row = result.bench or result.npu
        if result.part == "input" and row is not None and row.is_tensor:
            shape = row.value.get("shape")
            valid = isinstance(shape, list) and all(isinstance(n, int) and not isinstance(n, bool) for n in shape)
            return shape if valid else None
    return None


def _argument(rows: list[RowResult], position: int, keyword: str) -> object:
    """A non-tensor argument's recorded value, by position (``input.K``) or keyword; None when absent."""
    for result in rows:
        row = result.bench or result.npu
        if result.part == "input" and row is not None and row.suffix in (f"input.{position}", f"input.{keyword}"):
            return row.value.get("value") if isinstance(row.value, dict) else row.value
    return None


def _normalized_dims(rows: list[RowResult]) -> int:
    """How many trailing axes layer_norm normalises: the length of its ``normalized_shape`` (``input.1``,
    recorded element by element as ``input.1.0``, ``input.1.1``, ... or as one int)."""
    suffixes = [(r.bench or r.npu).suffix for r in rows if r.part == "input" and (r.bench or r.npu) is not None]
    listed = [s for s in suffixes if s.startswith(("input.1.", "input.normalized_shape."))]
    if listed:
        return len(listed)
    return 1 if isinstance(_argument(rows, 1, "normalized_shape"), int) else 0
