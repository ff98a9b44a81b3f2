"""Overhead of the MindSpore debugger (PyNative, CPU): the small transformer of overhead.py (PyTorch), built
from MindSpore's own layers, trained bare and under each task/level in one process, alternating modes round
by round; prints median step time and the ratio to the bare run (same method as overhead.py).

    python tools/bench/overhead_mindspore.py [--rounds 3] [--steps 8]
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn

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
VOCAB, WIDTH, BATCH, SEQUENCE = 1000, 128, 16, 64


class SmallTransformer(nn.Cell):
    """2 encoder layers, width 128, 16 sequences of 64 tokens: about 0.6M parameters (overhead.py's)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        layer = nn.TransformerEncoderLayer(WIDTH, 4, 4 * WIDTH, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2)
        self.head = nn.Dense(WIDTH, VOCAB)

    def construct(self, tokens):
        return self.head(self.encoder(self.embed(tokens)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args()
    logging.getLogger("msprobe").setLevel(logging.ERROR)
    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.set_seed(0)
    net = SmallTransformer()
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    optimizer = nn.SGD(net.trainable_params(), learning_rate=0.01)
    grad_fn = ms.value_and_grad(lambda x, y: loss_fn(net(x).reshape(-1, VOCAB), y.reshape(-1)), None,
                                optimizer.parameters)
    rng = np.random.default_rng(0)
    batches = [
        tuple(Tensor(rng.integers(0, VOCAB, (BATCH, SEQUENCE)).astype(np.int32)) for _ in range(2))
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
