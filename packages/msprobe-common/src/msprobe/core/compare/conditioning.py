"""Ops whose rounding a statistics compare cannot bound: normalisations over a few values per group.

A training-mode batch normalisation of 2 values per channel outputs ±1 per channel, the sign of their
difference: where the two values are closer than their rounding, bf16 and fp32 choose different signs, so
whole elements swap while Max, Min, Mean and Norm stay as they were. Every value computed from such an output
may then differ beyond rounding with nothing wrong, and neither its statistics nor its tensors can tell that
from a fault. With n values per group the chance that a group is that close falls as the (n-1)th power of the
rounding, so :data:`FEW_VALUES` stops at 3. The rule that uses this: docs/compare.md#ill-conditioned-ops.
"""

from __future__ import annotations

from msprobe.core.compare.verdict import RowResult
from msprobe.core.naming import FORWARD, parse_name

FEW_VALUES = 3  # a normalisation over at most this many values per group is ill-conditioned
_BATCH_NORMS = ("batch_norm", "bn_train.BatchNorm")  # MindSpore's nn.BatchNorm*d calls its primitive bn_train
_TRAINING_ARG = 5  # batch_norm(input, running_mean, running_var, weight, bias, training, ...): both frameworks


def ill_conditioned(rows: list[RowResult]) -> str | None:
    """``normalises 2 values per channel`` for a forward entry of an ill-conditioned normalisation (a
    training-mode batch_norm, an instance_norm or a group_norm over at most :data:`FEW_VALUES` values per
    group); None otherwise, and where the dump does not say (a module entry, an unknown shape)."""
    try:
        name = parse_name(rows[0].entry)
    except ValueError:
        return None
    if name.is_module or name.direction != FORWARD:
        return None
    shape = _first_input_shape(rows)
    if shape is None or len(shape) < 2 or 0 in shape:
        return None
    numel = _product(shape)
    if name.api in _BATCH_NORMS and _training(rows, name.api):
        count, group = numel // shape[1], "channel"
    elif name.api == "instance_norm":
        count, group = numel // (shape[0] * shape[1]), "channel of each sample"
    elif name.api == "group_norm" and (groups := _argument(rows, 1, "num_groups")) and isinstance(groups, int):
        count, group = numel // (shape[0] * groups), "group"
    else:
        return None
    return f"normalises {count} values per {group}" if count <= FEW_VALUES else None


def _first_input_shape(rows: list[RowResult]) -> list[int] | None:
    for result in rows:
        row = result.bench or result.npu
        if result.part == "input" and row is not None and row.is_tensor:
            shape = row.value.get("shape")
            valid = isinstance(shape, list) and all(isinstance(n, int) and not isinstance(n, bool) for n in shape)
            return shape if valid else None
    return None


def _product(shape: list[int]) -> int:
    count = 1
    for n in shape:
        count *= n
    return count


def _argument(rows: list[RowResult], position: int, keyword: str) -> object:
    """A non-tensor argument's recorded value, by position (``input.K``) or keyword; None when absent."""
    for result in rows:
        row = result.bench or result.npu
        if result.part == "input" and row is not None and row.suffix in (f"input.{position}", f"input.{keyword}"):
            return row.value.get("value") if isinstance(row.value, dict) else row.value
    return None


def _training(rows: list[RowResult], api: str) -> bool:
    return api == "bn_train.BatchNorm" or _argument(rows, _TRAINING_ARG, "training") is True
