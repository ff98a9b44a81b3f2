"""A small pre-LN transformer block, one training step dumped by msprobe: tensor parallel when run under
torchrun (ColwiseParallel q/k/v and fc1, RowwiseParallel o and fc2, gloo on CPU), else on one process.

Arguments: DUMP_PATH TASK LEVEL FAULT. Two steps on the same batch and weights (no optimizer): step 0 clean,
step 1 after FAULT scales the local shard of ``mlp.fc1.weight`` on the last rank (on one process: the whole
weight). Every rank builds the same weights and batch (seed 0).
"""

import os
import sys

import torch
import torch.nn.functional as F
from torch import nn

from msprobe.pytorch import PrecisionDebugger

WIDTH, HEAD_DIM, HIDDEN = 16, 4, 32


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(WIDTH, WIDTH) for _ in range(4))

    def forward(self, x):
        b, s, _ = x.shape
        heads = [t.view(b, s, -1, HEAD_DIM).transpose(1, 2) for t in (self.q(x), self.k(x), self.v(x))]
        out = F.scaled_dot_product_attention(*heads, is_causal=True)  # local heads: the shard's own
        return self.o(out.transpose(1, 2).reshape(b, s, -1))


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(WIDTH, HIDDEN), nn.Linear(HIDDEN, WIDTH)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm1, self.attn, self.norm2, self.mlp = nn.LayerNorm(WIDTH), Attention(), nn.LayerNorm(WIDTH), Mlp()

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


def parallelize(model: Block) -> None:
    """Megatron's plan on a 1-D mesh of every rank (the process group is up)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    parallelize_module(model, mesh, {"attn.q": ColwiseParallel(), "attn.k": ColwiseParallel(),
                                     "attn.v": ColwiseParallel(), "attn.o": RowwiseParallel(),
                                     "mlp.fc1": ColwiseParallel(), "mlp.fc2": RowwiseParallel()})


def shard(model: Block) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    parallelize(model)


def plant(model: Block, fault: float) -> None:
    """Scale this rank's part of fc1's weight: the last rank's shard under TP, the whole weight on one process."""
    weight = model.mlp.fc1.weight
    if "LOCAL_RANK" in os.environ:
        import torch.distributed as dist

        if dist.get_rank() != dist.get_world_size() - 1:
            return
        weight = weight.to_local()
    with torch.no_grad():
        weight.mul_(fault)


def main() -> None:
    dump_path, task, level, fault = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    torch.manual_seed(0)
    model = Block()
    x = torch.randn(2, 6, WIDTH)
    if "LOCAL_RANK" in os.environ:
        shard(model)
    debugger = PrecisionDebugger(dump_path=dump_path, task=task, level=level, step=[0, 1])
    for step in range(2):
        if step == 1:
            plant(model, fault)
        debugger.start(model)
        model(x).pow(2).mean().backward()
        debugger.stop()
        debugger.step()
        model.zero_grad()
    debugger.finish()
    if "LOCAL_RANK" in os.environ:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
