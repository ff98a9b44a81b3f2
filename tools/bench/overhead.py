"""Overhead of the PyTorch debugger: a small transformer trained on CPU, bare and under each
task/level, in one process, alternating modes round by round so that machine noise hits all alike.

Prints the median step time of each mode, its ratio to the bare run and whether the target ratio is met
(:data:`TARGETS`: met when both the wall and the CPU ratio are within it).

    python tools/bench/overhead.py [--rounds 5] [--steps 10]
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from pathlib import Path

import torch
from torch import nn

from msprobe.pytorch import PrecisionDebugger

sys.path.insert(0, str(Path(__file__).parent))
from harness import PlainFiles, print_table, run_modes, tensor_file_sizes, time_steps  # noqa: E402

MODES = {
    "bare": None,
    "idle (loaded, step not selected)": dict(task="statistics", level="L1", step=[10**6]),
    "statistics L1": dict(task="statistics", level="L1"),
    "statistics mix": dict(task="statistics", level="mix"),
    "md5 L1": dict(task="statistics", level="L1", summary_mode="md5"),
    "tensor L1": dict(task="tensor", level="L1"),
    "overflow_check L1": dict(task="overflow_check", level="L1"),
    "free_benchmark add_noise (check)": dict(task="free_benchmark", level="L1", pert_mode="add_noise"),
}
DISK_ALONE = "bare + tensor L1's files, plain writes"

# The ratios issue 16 asks for (docs/performance.md#targets allows tensor 5×).
TARGETS = {
    "idle (loaded, step not selected)": 1.02, "statistics L1": 1.5, "statistics mix": 1.7, "md5 L1": 2.0,
    "tensor L1": 4.0,
}

VOCAB, WIDTH, BATCH, SEQUENCE = 1000, 128, 16, 64


class SmallTransformer(nn.Module):
    """2 encoder layers, width 128, 16 sequences of 64 tokens: about 0.6M parameters."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        layer = nn.TransformerEncoderLayer(WIDTH, 4, 4 * WIDTH, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(tokens)))


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, batch: tuple) -> None:
    tokens, targets = batch
    loss = nn.functional.cross_entropy(model(tokens).flatten(0, 1), targets.flatten())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    logging.getLogger("msprobe").setLevel(logging.ERROR)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = SmallTransformer()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = [
        (torch.randint(0, VOCAB, (BATCH, SEQUENCE)), torch.randint(0, VOCAB, (BATCH, SEQUENCE)))
        for _ in range(args.steps)
    ]

    def run(debugger: PrecisionDebugger | None, steps: list = batches) -> list:
        return time_steps(steps, lambda batch: train_step(model, optimizer, batch), debugger, model)

    with tempfile.TemporaryDirectory(prefix="msprobe-bench-") as scratch:
        sizes = tensor_file_sizes(PrecisionDebugger, MODES["tensor L1"], lambda d: run(d, batches[:1]), Path(scratch))
    modes = {**MODES, DISK_ALONE: PlainFiles(sizes)}
    samples = run_modes(modes, run, PrecisionDebugger, args.rounds)
    print_table(samples, TARGETS)
    print(f"({DISK_ALONE}: the bare step, then the {len(sizes)} files, {sum(sizes) / 1e6:.1f} MB, of one"
          " tensor L1 step written with open/write alone)")

if __name__ == "__main__":
    main()
