"""What one monitored step produced, framework-free: the rows every writer and the alert rules read."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

# The metric groups, with upstream's file prefixes. Activation groups carry a micro-step.
ACTV, ACTV_GRAD = "actv", "actv_grad"
GRAD_UNREDUCED, GRAD_REDUCED = "grad_unreduced", "grad_reduced"
EXP_AVG, EXP_AVG_SQ = "exp_avg", "exp_avg_sq"
PARAM_ORIGIN, PARAM_UPDATED = "param_origin", "param_updated"
EXPERT_LOAD = "expert_load"  # tokens routed to each expert of an MoE layer (docs/monitor.md#moe-models)
ROUTER_ENTROPY = "router_entropy"  # the entropy of each token's routing distribution, per MoE router
CC = "cc"  # the tensors passed to torch.distributed's collectives
GROUPS = (ACTV, ACTV_GRAD, GRAD_UNREDUCED, GRAD_REDUCED, EXP_AVG, EXP_AVG_SQ, PARAM_ORIGIN, PARAM_UPDATED,
          EXPERT_LOAD, ROUTER_ENTROPY, CC)
MICRO_STEP_GROUPS = (ACTV, ACTV_GRAD, EXPERT_LOAD, ROUTER_ENTROPY)


class MetricRow(NamedTuple):
    """One tensor's values of the configured ops, as :attr:`StepMetrics.rows` hands them out. ``order`` is its
    place in the step's execution (forward hooks, then backward, then the optimizer's)."""

    group: str
    name: str
    micro_step: int | None
    values: tuple[float, ...]
    shape: tuple[int, ...]
    dtype: str
    order: int
    vpp_stage: int = 0

    @property
    def target(self) -> str:
        """The name with its micro-step (``layer.output:1``), as alert histories and the trend database key it."""
        return self.name if self.micro_step is None else f"{self.name}:{self.micro_step}"


@dataclass(frozen=True, eq=False)
class RowLayout:
    """Who each row of a step is, in execution order (row ``i`` of every field). A collector hands the same
    object step after step while its rows stay the same, so a writer or the alert rules derive their own
    tables from it once (keyed by identity), not once per row and step."""

    groups: tuple[str, ...]
    names: tuple[str, ...]
    micro_steps: tuple[int | None, ...]
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]
    vpp_stages: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.names)


@dataclass(frozen=True)
class StepMetrics:
    """One monitored step: ``values[i]`` (one column per op) is the row ``layout`` describes at ``i``."""

    step: int
    rank: int
    ops: tuple[str, ...]
    layout: RowLayout
    values: np.ndarray

    @functools.cached_property
    def rows(self) -> tuple[MetricRow, ...]:
        """The rows one by one (for the writers that take them so; the CSV writer and the alerts read columns)."""
        layout = self.layout
        return tuple(map(MetricRow, layout.groups, layout.names, layout.micro_steps, map(tuple, self.values.tolist()),
                         layout.shapes, layout.dtypes, range(len(layout)), layout.vpp_stages))
