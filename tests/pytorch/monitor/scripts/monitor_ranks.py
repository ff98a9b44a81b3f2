"""Run under torchrun --nproc_per_node=2 (gloo, CPU): TrainerMon on one data-parallel stack, each rank
writing what it observed to OUT/rank{R}.json for tests/pytorch/monitor/test_monitor_distributed.py.

Arguments: SCENARIO OUT, SCENARIO one of ``ddp`` (DDP, one micro-batch a step), ``ddp_acc`` (DDP with
two micro-batches a step, the first under ``no_sync``), ``fsdp2`` (``fully_shard`` on each layer and
the model), ``ddp_cc`` (DDP, and collectives of the training loop's own: a loss all-reduce, an all-gather of a
weight, an asynchronous all-reduce waited on; each one's tensors before and after recorded at step 0).
Each trains a tiny LLaMA three AdamW steps bare and monitored (losses and parameters of both);
the monitored run also records, independently of the monitor, each rank's local gradient of
step 0 (a plain replica on the same micro-batches) and the gradient the optimizer saw.
"""

import copy
import hashlib
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).parents[1]))
from monitor_models import llama  # noqa: E402

from msprobe.pytorch import TrainerMon  # noqa: E402

scenario, out = sys.argv[1], Path(sys.argv[2])
dist.init_process_group("gloo")
rank = dist.get_rank()
MICRO = 2 if scenario == "ddp_acc" else 1
STEPS = 3


def local_batches():
    gen = torch.Generator().manual_seed(100 + rank)
    return [[torch.randint(0, 96, (2, 12), generator=gen) for _ in range(MICRO)] for _ in range(STEPS)]


def digest(model) -> str:
    h = hashlib.sha256()
    for p in model.parameters():
        p = p.to_local() if hasattr(p, "to_local") else p
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def wrap(model):
    if scenario == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        for layer in model.model.layers:
            fully_shard(layer)
        return fully_shard(model)
    return torch.nn.parallel.DistributedDataParallel(model)


def local_grads(model, micro_batches) -> dict:
    """The gradient of this rank's own micro-batches, by a replica no data-parallel wrapper touches."""
    replica = copy.deepcopy(model)
    for ids in micro_batches:
        (replica(input_ids=ids, labels=ids).loss / MICRO).backward()
    return {name: p.grad.double().flatten().tolist() for name, p in replica.named_parameters()}


def own_collectives(model, loss, seen: dict, record: bool) -> None:
    """The loop's collectives: what each tensor held before and after, by the names the monitor's rows have."""
    def keep(name, tensor):
        if record:
            seen[name] = tensor.double().flatten().tolist()

    logged = loss.detach().clone() * (rank + 1)
    keep("all_reduce.0.pre", logged)
    dist.all_reduce(logged)
    keep("all_reduce.0.post", logged)
    weight = model.lm_head.weight.detach().clone() + rank
    gathered = [torch.empty_like(weight) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, weight)
    keep("all_gather.0.post_0", torch.cat([g.flatten() for g in gathered]))
    keep("all_gather.0.post_1", weight)
    pending = model.model.norm.weight.detach().clone() * (rank + 2)
    keep("all_reduce.1.pre", pending)
    work = dist.all_reduce(pending, async_op=True)
    work.wait()
    keep("all_reduce.1.post", pending)


def train(monitored: bool) -> dict:
    model = llama()
    before = local_grads(model, local_batches()[0]) if monitored else None
    wrapped = wrap(model)
    optimizer = torch.optim.AdamW(wrapped.parameters(), lr=1e-2)
    seen = {}
    if monitored:
        mon = TrainerMon(str(out / "config.json"), params_have_main_grad=False)
        mon.set_monitor(wrapped, optimizer, grad_acc_steps=MICRO)
        names = {p: n for n, p in model.named_parameters()}

        def capture(*_):
            if not seen:
                for p, n in names.items():
                    grad = p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad
                    seen[n] = grad.double().flatten().tolist()

        optimizer.register_step_pre_hook(capture)
    losses, collectives = [], {}
    for micro_batches in local_batches():
        for index, ids in enumerate(micro_batches):
            last = index == len(micro_batches) - 1
            context = wrapped.no_sync() if scenario == "ddp_acc" and not last else torch.enable_grad()
            with context:
                loss = wrapped(input_ids=ids, labels=ids).loss / MICRO
                loss.backward()
            losses.append(loss.item())
        if scenario == "ddp_cc":
            own_collectives(model, loss, collectives, record=not collectives)
        optimizer.step()
        optimizer.zero_grad()
    return {"collectives": collectives, "losses": losses, "params": digest(model), "local_grads": before,
            "optimizer_grads": seen}


os.environ["MONITOR_OUTPUT_DIR"] = str(out / "monitor")
observed = {"bare": train(False), "monitored": train(True)}
(out / f"rank{rank}.json").write_text(json.dumps(observed))
dist.destroy_process_group()
