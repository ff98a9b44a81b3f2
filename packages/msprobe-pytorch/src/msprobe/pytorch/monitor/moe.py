"""MoE layers: each expert's load and the statistics of the tokens routed to it, from one hook per layer.

transformers' MoE layers (Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE...) keep their experts in one module with
3-D weights, called as ``experts(hidden_states, top_k_index, top_k_weights)``: whichever kernel runs
inside (an eager loop, grouped matmuls), no per-expert module is called, so module hooks cannot see an
expert. A forward hook on that module reads the router's top-k output and the tokens instead, and
computes, on their device and for the whole layer at once (scatter reductions, no loop over experts):

- ``expert_load`` rows ``{experts}.expert_{e}``: the tokens routed to expert ``e`` in the micro-batch (a
  count: every op of a single number is that number; ``zeros`` is 1 for an expert that got no token);
- ``actv`` rows ``{experts}.expert_{e}.input``: the ops over the hidden states routed to expert ``e``
  (shape ``[-1, hidden]``: the number of tokens is the load row's, known only after the step's transfer).
  An expert that got no token has zeros there, not NaN (no value is no anomaly).

The router of such a layer (an integer ``num_experts`` and ``top_k``, a ``[num_experts, hidden]`` weight,
its logits the first tensor of its output) gets a hook too: ``router_entropy`` rows ``{router}`` hold the ops
over each token's routing entropy ``-sum(p log p)``, ``p`` the softmax of its logits in float32 (0 for a
token sent to one expert for sure, ``log(num_experts)`` for a router that cannot choose).

What an expert *outputs* is summed with the routing weights inside the fused module and is not measured.
"""

from __future__ import annotations

import torch

from msprobe.core.monitor.collector import StepCollector
from msprobe.core.monitor.records import ACTV, EXPERT_LOAD, ROUTER_ENTROPY
from msprobe.pytorch.monitor.collect import in_backward
from msprobe.pytorch.monitor.stats import measurable

_UPCAST = (torch.float16, torch.bfloat16)
_TOKEN_SUMS = {  # the per-token sums that, added over an expert's tokens, give its reductions
    "norm": lambda x, eps: (x * x).sum(-1),
    "sum": lambda x, eps: x.sum(-1),
    "zeros": lambda x, eps: (x.abs() < eps).sum(-1).to(x.dtype),
    "nans": lambda x, eps: torch.isnan(x).sum(-1).to(x.dtype),
}


def is_fused_experts(module: torch.nn.Module) -> bool:
    """A module holding ``num_experts`` experts as 3-D weights whose first dimension is the expert."""
    count = getattr(module, "num_experts", None)
    return isinstance(count, int) and count > 0 and any(
        p.dim() == 3 and p.shape[0] == count for p in module.parameters(recurse=False))


def is_router(module: torch.nn.Module) -> bool:
    """A module choosing ``top_k`` of ``num_experts`` experts with a ``[num_experts, hidden]`` weight."""
    count, top_k = getattr(module, "num_experts", None), getattr(module, "top_k", None)
    return isinstance(count, int) and count > 0 and isinstance(top_k, int) and top_k > 0 and any(
        p.dim() == 2 and p.shape[0] == count for p in module.parameters(recurse=False))


@torch.no_grad()
def routing_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Each token's entropy of the softmax of its router logits (last dimension: the experts), in float32."""
    log_p = torch.log_softmax(logits.detach().float(), dim=-1)
    return -(log_p.exp() * log_p).sum(-1).reshape(-1)


def _routing(args: tuple, kwargs: dict) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The hidden states and the top-k expert indices among the experts module's arguments."""
    tensors = [*args, *kwargs.values()]
    hidden = next((t for t in tensors if measurable(t)), None)
    index = next((t for t in tensors if isinstance(t, torch.Tensor) and not t.is_floating_point()
                  and t.dtype != torch.bool and t.dim() >= 1), None)
    return None if hidden is None or index is None else (hidden, index)


def _scatter_extreme(values: torch.Tensor, slot: torch.Tensor, experts: int, reduce: str) -> torch.Tensor:
    start = torch.full((experts + 1,), float("inf") if reduce == "amin" else float("-inf"), dtype=values.dtype,
                       device=values.device)
    return start.scatter_reduce_(0, slot, values, reduce, include_self=True)[:experts]


@torch.no_grad()
def expert_reductions(hidden: torch.Tensor, index: torch.Tensor, experts: int, reductions: tuple[str, ...],
                      eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(load, inputs)``, two ``[experts, len(reductions)]`` blocks: each expert's token count, as a number's
    reductions, and the reductions of the tokens routed to it (``sum`` and ``zeros`` divided by its numel)."""
    x = hidden.detach().reshape(-1, hidden.shape[-1])
    x = x.float() if x.dtype in _UPCAST else x
    tokens, width = x.shape
    picks = index.detach().reshape(tokens, -1)
    slot = torch.where((picks >= 0) & (picks < experts), picks, experts).reshape(-1).to(x.device)  # others: bin E
    token_of_pick = torch.arange(tokens, device=x.device).repeat_interleave(picks.shape[1])
    counts = torch.bincount(slot, minlength=experts + 1)[:experts].to(x.dtype)
    present, numel = counts > 0, (counts * width).clamp(min=1)
    zero = torch.zeros((), dtype=x.dtype, device=x.device)
    columns = {}
    for name in reductions:
        if name in ("min", "max"):
            per_token = x.amin(-1) if name == "min" else x.amax(-1)
            extreme = _scatter_extreme(per_token[token_of_pick], slot, experts, "a" + name)
            columns[name] = torch.where(present, extreme, zero)
        else:
            total = torch.zeros(experts + 1, dtype=x.dtype, device=x.device)
            total = total.index_add_(0, slot, _TOKEN_SUMS[name](x, eps)[token_of_pick])[:experts]
            columns[name] = total.sqrt() if name == "norm" else total / numel if name in ("sum", "zeros") else total
    inputs = torch.stack([columns[name] for name in reductions], dim=1)
    as_number = {"min": counts, "max": counts, "norm": counts, "sum": counts,
                 "zeros": (~present).to(x.dtype), "nans": torch.zeros_like(counts)}
    load = torch.stack([as_number[name] for name in reductions], dim=1)
    return load, inputs


class ExpertWatch:
    """Forward hooks on fused experts modules (expert load and per-expert inputs) and on their routers (routing
    entropy), once per micro-batch."""

    def __init__(self, mon, collector_of) -> None:
        self.mon, self.collector_of = mon, collector_of

    def hook(self, name: str, experts: int, vpp: int):
        def forward_hook(module, args, kwargs, output):
            collector = self.collector_of()
            if collector is None or not module.training or in_backward() != -1 or name in collector.failed:
                return  # a forward recomputed by activation checkpointing is not counted again
            try:
                self._observe(collector, name, experts, vpp, _routing(args, kwargs))
                if isinstance(output, torch.Tensor) and output.requires_grad:
                    output.register_hook(self._count_backward)  # micro-steps end with backward passes
            except Exception as error:  # the run goes on without this layer's expert metrics
                collector.guard(name, error)

        return forward_hook

    def router_hook(self, name: str, experts: int, vpp: int):
        def forward_hook(module, args, kwargs, output):
            collector = self.collector_of()
            if collector is None or not module.training or in_backward() != -1 or name in collector.failed:
                return
            try:
                items = output if isinstance(output, (tuple, list)) else (output,)
                logits = next((t for t in items if measurable(t) and t.shape[-1] == experts), None)
                if logits is not None:
                    collector.add(ROUTER_ENTROPY, [(name, routing_entropy(logits))], self.mon.micro_step, vpp)
            except Exception as error:  # the run goes on without this router's entropy
                collector.guard(name, error)

        return forward_hook

    def _count_backward(self, grad) -> None:
        """Reads nothing: tells TrainerMon a backward pass runs, whose end ends a micro-batch (with no other
        gradient hook installed, nothing else would)."""
        self.mon.note_backward()

    def _observe(self, collector: StepCollector, name: str, experts: int, vpp: int, routed) -> None:
        if routed is None:
            return
        hidden, index = routed
        reductions = collector.reductions
        load, inputs = expert_reductions(hidden, index, experts, reductions, self.mon.run.config.eps)
        micro = self.mon.micro_step
        names = [f"{name}.expert_{e}" for e in range(experts)]
        collector.add_reduced(EXPERT_LOAD, names, load, (), str(index.dtype), micro, vpp)
        collector.add_reduced(ACTV, [f"{n}.input" for n in names], inputs, (-1, hidden.shape[-1]),
                              str(hidden.dtype), micro, vpp)
