"""Overhead of the MindSpore debugger (PyNative, CPU): a small MLP trained bare and under each
task/level in one process, alternating modes round by round; prints median step time and the ratio
to the bare run (same method as overhead.py for PyTorch).

    python tools/bench/overhead_mindspore.py [--rounds 3] [--steps 8]
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
import time
from pathlib import Path

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn, ops

from msprobe.core.debugger import BaseDebugger
from msprobe.mindspore import PrecisionDebugger

sys.path.insert(0, str(Path(__file__).parent))
from table import print_table  # noqa: E402

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

    def run(debugger) -> list[tuple[float, float]]:
        times = []
        for x, y in batches:
            begin, begin_cpu = time.perf_counter(), time.process_time()
            if debugger is not None:
                debugger.start(net)
            loss, grads = grad_fn(x, y)
            optimizer(grads)
            loss.asnumpy()
            if debugger is not None:
                debugger.stop()
                debugger.step()
            times.append((time.perf_counter() - begin, time.process_time() - begin_cpu))
        return times

    run(None)  # warm-up
    samples: dict[str, list[tuple[float, float]]] = {mode: [] for mode in MODES}
    scratch = Path(tempfile.mkdtemp(prefix="msprobe-bench-ms-"))
    try:
        for _ in range(args.rounds):
            for mode, spec in MODES.items():
                debugger = None if spec is None else PrecisionDebugger(dump_path=str(scratch / "dump"), **spec)
                samples[mode] += run(debugger)
                if BaseDebugger._active is not None:
                    BaseDebugger._active.finish()
                shutil.rmtree(scratch / "dump", ignore_errors=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print_table(samples)


if __name__ == "__main__":
    main()
