"""Overhead of the MindSpore debugger (PyNative, CPU): a small MLP trained bare and under each
task/level in one process, alternating modes round by round; prints median step time and the ratio
to the bare run (same method as overhead.py for PyTorch).

    python tools/bench/overhead_mindspore.py [--rounds 3] [--steps 8]
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn, ops

from msprobe.mindspore import PrecisionDebugger

sys.path.insert(0, str(Path(__file__).parent))
from harness import print_table, run_modes, time_steps  # noqa: E402

MODES = {
    "bare": None,
    "idle (loaded, step not selected)": dict(task="statistics", level="L1", step=[10**6]),
    "statistics L1": dict(task="statistics", level="L1"),
    "statistics mix": dict(task="statistics", level="mix"),
    "tensor L1": dict(task="tensor", level="L1"),
}
WIDTH, BATCH = 512, 64


class Mlp(nn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.CellList([nn.Dense(WIDTH, WIDTH) for _ in range(4)])
        self.head = nn.Dense(WIDTH, 10)

    def construct(self, x):
        for layer in self.layers:
            x = ops.gelu(layer(x)) + x
        return self.head(x)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args()
    logging.getLogger("msprobe").setLevel(logging.ERROR)
    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.set_seed(0)
    net = Mlp()
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    optimizer = nn.SGD(net.trainable_params(), learning_rate=0.01)
    grad_fn = ms.value_and_grad(lambda x, y: loss_fn(net(x), y), None, optimizer.parameters)
    rng = np.random.default_rng(0)
    batches = [
        (
            Tensor(rng.standard_normal((BATCH, WIDTH)).astype(np.float32)),
            Tensor(rng.integers(0, 10, BATCH).astype(np.int32)),
        )
        for _ in range(args.steps)
    ]

    def train_step(batch: tuple) -> None:
        loss, grads = grad_fn(*batch)
        optimizer(grads)
        loss.asnumpy()  # wait for the step's kernels

    samples = run_modes(
        MODES, lambda debugger: time_steps(batches, train_step, debugger, net), PrecisionDebugger, args.rounds
    )
    print_table(samples, {"statistics L1": 1.5})

if __name__ == "__main__":
    main()
