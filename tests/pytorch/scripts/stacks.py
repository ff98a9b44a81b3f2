"""Run under torchrun --nproc_per_node=2 (gloo, CPU): one scenario of the distributed stacks users train
with, each rank writing what it observed to OUT/rank{R}.json for the test to check.

Arguments: SCENARIO OUT, SCENARIO one of
- ``fsdp2``: a tiny LLaMA sharded with ``fully_shard`` trained two AdamW steps bare and under the
  debugger (statistics L0, L1, mix; tensor L1; md5 L1): losses and local parameter shards per run;
- ``collectives``: each collective the test checks, its values after the call next to the dump;
- ``tp``: the block of ``tp_dump.py`` under tensor parallelism, two AdamW steps bare and under the
  debugger (statistics L0, L1, mix): losses and local parameter shards per run;
- ``ddp``: DDP with ``record_ddp_buckets`` (L1) and without: the local gradients (no DDP), the
  reduced ones, losses and parameters of both runs.
"""

import hashlib
import json
import os
import sys

import torch
import torch.distributed as dist

from msprobe.pytorch import PrecisionDebugger

scenario, out = sys.argv[1], sys.argv[2]
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
observed: dict = {}


def digest(tensors) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def local_shards(model):
    return (p.to_local() if hasattr(p, "to_local") else p for p in model.parameters())


def train_two_steps(name: str, model, next_loss, **debug) -> None:
    """Two AdamW steps of ``model`` (``next_loss()`` draws a batch and returns its loss), under a debugger
    built from ``debug`` (none when empty): observed[name] = the losses and the local parameter shards."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    debugger = PrecisionDebugger(dump_path=os.path.join(out, name), **debug) if debug else None
    losses = []
    for _ in range(2):
        if debugger:
            debugger.start(model)
        loss = next_loss()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if debugger:
            debugger.stop()
            debugger.step()
        losses.append(loss.item())
    observed[name] = {"losses": losses, "params": digest(local_shards(model))}


def fsdp2() -> None:
    os.environ["HF_HUB_OFFLINE"] = "1"
    from torch.distributed.fsdp import fully_shard
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32)

    def train(name: str, **debug) -> None:
        torch.manual_seed(0)
        model = LlamaForCausalLM(config)
        for layer in model.model.layers:
            fully_shard(layer)
        fully_shard(model)
        torch.manual_seed(1 + rank)

        def next_loss():
            ids = torch.randint(0, 64, (2, 8))
            return model(input_ids=ids, labels=ids).loss

        train_two_steps(name, model, next_loss, **debug)

    train("bare")
    for level in ("L0", "L1", "mix"):
        train(f"statistics_{level}", task="statistics", level=level)
    train("tensor_L1", task="tensor", level="L1", step=[0])


def collectives() -> None:
    debugger = PrecisionDebugger(dump_path=os.path.join(out, "dump"), task="statistics", level="L1")
    debugger.start()
    after = {}

    def keep(name: str, value) -> None:  # what the collective left, read by the script itself
        with torch._C.DisableTorchFunction():
            values = value if isinstance(value, list) else [value]
            after[name] = [v.detach().clone().double().reshape(-1).tolist() for v in values]

    logged = torch.tensor([10.0 + rank])
    dist.all_reduce(logged)  # the usual way to log a loss: 10 + 11 on two ranks
    keep("Distributed.all_reduce.0.forward", logged)
    value = torch.full((3,), 100.0 + rank)
    dist.broadcast(value, src=1)
    keep("Distributed.broadcast.0.forward", value)
    gathered = [torch.zeros(2) for _ in range(world)]
    source = torch.arange(2.0) + 10 * rank
    dist.all_gather(gathered, source)
    keep("Distributed.all_gather.0.forward", [*gathered, source])
    into = torch.zeros(2 * world)
    dist.all_gather_into_tensor(into, source)
    keep("Distributed.all_gather_into_tensor.0.forward", [into, source])
    outputs = [torch.zeros(2) for _ in range(world)]
    inputs = [torch.full((2,), float(10 * rank + peer)) for peer in range(world)]
    dist.all_to_all(outputs, inputs)
    keep("Distributed.all_to_all.0.forward", [*outputs, *inputs])
    scattered = torch.zeros(2)
    pieces = [torch.full((2,), float(rank + peer)) for peer in range(world)]
    dist.reduce_scatter(scattered, pieces)
    keep("Distributed.reduce_scatter.0.forward", [scattered, *pieces])
    scattered_tensor, whole = torch.zeros(2), torch.arange(4.0) + rank
    dist.reduce_scatter_tensor(scattered_tensor, whole)
    keep("Distributed.reduce_scatter_tensor.0.forward", [scattered_tensor, whole])
    exchanged, sent = torch.zeros(4), torch.arange(4.0) + 10 * rank
    dist.all_to_all_single(exchanged, sent)
    keep("Distributed.all_to_all_single.0.forward", [exchanged, sent])
    reduced = torch.ones(2) * (rank + 1)
    dist.reduce(reduced, dst=0)
    keep("Distributed.reduce.0.forward", reduced)
    part, parts = torch.ones(2) * rank, [torch.zeros(2) for _ in range(world)] if rank == 0 else None
    dist.gather(part, parts, dst=0)
    keep("Distributed.gather.0.forward", [part, *(parts or [])])
    message = torch.full((2,), 7.0) if rank == 0 else torch.zeros(2)
    if rank == 0:
        dist.send(message, dst=1)
    else:
        dist.recv(message, src=0)
    keep(f"Distributed.{'send' if rank == 0 else 'recv'}.0.forward", message)
    pending = torch.tensor([1.0 + rank, 2.0])
    work = dist.all_reduce(pending, async_op=True)
    observed["work_is_dist_work"] = isinstance(work, dist.Work)
    work.wait()
    keep("Distributed.all_reduce.1.forward", pending)
    by_keyword = torch.tensor([3.0 * (rank + 1)])
    dist.all_reduce(tensor=by_keyword)
    keep("Distributed.all_reduce.2.forward", by_keyword)
    debugger.stop()
    debugger.step()
    observed["after"] = after


def ddp() -> None:
    from torch.nn.parallel import DistributedDataParallel

    def model_and_batch():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))
        torch.manual_seed(1 + rank)
        return model, torch.randn(4, 6)

    model, batch = model_and_batch()
    model(batch).square().mean().backward()
    observed["local_grads"] = torch.cat([p.grad.reshape(-1) for p in model.parameters()]).double().tolist()

    def train(name: str, debug: bool) -> None:
        model, batch = model_and_batch()
        wrapped = DistributedDataParallel(model)
        optimizer = torch.optim.SGD(wrapped.parameters(), lr=0.1)
        debugger = None
        if debug:
            debugger = PrecisionDebugger(dump_path=os.path.join(out, name), task="statistics", level="L1")
            debugger.record_ddp_buckets(wrapped)
            debugger.start(wrapped)
        loss = wrapped(batch).square().mean()
        loss.backward()
        grads = torch.cat([p.grad.reshape(-1) for p in model.parameters()]).double().tolist()
        optimizer.step()
        if debugger:
            debugger.stop()
            debugger.step()
        observed[name] = {"loss": loss.item(), "grads": grads, "params": digest(model.parameters())}

    train("bare", False)
    train("buckets", True)


def tp() -> None:
    from tp_dump import Block, parallelize

    def train(name: str, **debug) -> None:
        torch.manual_seed(0)
        model = Block()
        parallelize(model)
        torch.manual_seed(1)
        train_two_steps(name, model, lambda: model(torch.randn(2, 6, 16)).pow(2).mean(), **debug)

    train("bare")
    for level in ("L0", "L1", "mix"):
        train(f"statistics_{level}", task="statistics", level=level)


{"fsdp2": fsdp2, "collectives": collectives, "ddp": ddp, "tp": tp}[scenario]()
with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
    json.dump(observed, f)
dist.destroy_process_group()
