"""What one monitored step produced, framework-free: the rows every writer and the alert rules read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

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
    """One tensor's values of the configured ops. ``order`` is its place in the step's execution
    (forward hooks, then backward, then the optimizer's), which alerts use to name the first jump.
    (A named tuple: a step makes hundreds.)"""

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


@dataclass(frozen=True)
class StepMetrics:
    step: int
    rank: int
    ops: tuple[str, ...]
    rows: tuple[MetricRow, ...]
