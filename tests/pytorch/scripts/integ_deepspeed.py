"""One rank of a DeepSpeed ZeRO run on the CPU, twice: without msprobe and with it (docs/pytorch/trainers.md).

Usage: torchrun --nproc_per_node=2 integ_deepspeed.py OUT_DIR, for ZeRO stages 1, 2 and 3 in turn. The loop is the
documented pattern: ``start(engine.module)`` before every micro-batch, ``stop(); step()`` after the
engine's step that ended an optimizer step (``is_gradient_accumulation_boundary()`` asked before it).
Writes OUT_DIR/stage{S}.rank{R}.json: each run's micro-batch losses, the final parameters' sums and the
micro-batches' inputs; the dumps go to OUT_DIR/dump{S}.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import deepspeed
import torch

from msprobe.pytorch import PrecisionDebugger

ACCUMULATE, OPTIMIZER_STEPS, MICRO_BATCH = 2, 3, 2


def train(stage: int, debugger: PrecisionDebugger | None) -> dict:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    config = {
        "train_micro_batch_size_per_gpu": MICRO_BATCH, "gradient_accumulation_steps": ACCUMULATE,
        "optimizer": {"type": "AdamW", "params": {"lr": 0.05, "torch_adam": True}},
        "zero_optimization": {"stage": stage},
    }
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    generator = torch.Generator().manual_seed(1 + torch.distributed.get_rank())
    losses, inputs = [], []
    for _ in range(OPTIMIZER_STEPS * ACCUMULATE):
        x, y = torch.randn(MICRO_BATCH, 4, generator=generator), torch.randn(MICRO_BATCH, 1, generator=generator)
        if debugger is not None:
            debugger.start(engine.module)  # does nothing while the step is open
        inputs.append(x.tolist())
        loss = torch.nn.functional.mse_loss(engine(x), y)
        engine.backward(loss)
        boundary = engine.is_gradient_accumulation_boundary()  # asked before step(), which moves it on
        engine.step()
        losses.append(loss.item())
        if debugger is not None and boundary:
            debugger.stop()
            debugger.step()
    with deepspeed.zero.GatheredParameters(list(engine.module.parameters())):
        parameters = [p.detach().clone().double().sum().item() for p in engine.module.parameters()]
    return {"losses": losses, "parameters": parameters, "inputs": inputs}


def main() -> None:
    out_dir = Path(sys.argv[1])
    # No compiled DeepSpeed op: on the CPU it would JIT-build its shared-memory allreduce with the C++ compiler
    # (minutes); with none compatible, its collectives go through gloo, as on platforms without that op.
    deepspeed.ops.__compatible_ops__ = {}
    deepspeed.init_distributed(dist_backend="gloo")
    rank = torch.distributed.get_rank()
    for stage in (1, 2, 3):
        plain = train(stage, None)
        debugger = PrecisionDebugger(dump_path=str(out_dir / f"dump{stage}"), task="statistics", level="mix",
                                     step=[0, 2])
        debugged = train(stage, debugger)
        (out_dir / f"stage{stage}.rank{rank}.json").write_text(json.dumps({"plain": plain, "debugged": debugged}))


if __name__ == "__main__":
    main()
