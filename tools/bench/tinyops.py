"""Host cost per captured call on the same model of tiny functional ops in PyTorch and MindSpore, rounds of
both frameworks interleaved in one process.

``percall.py`` builds its model from each framework's layers (``nn.Linear`` against ``nn.Dense``, which
MindSpore runs as two captured calls, ``MatMul`` and ``BiasAdd``), so the two frameworks capture a different
number of calls for the same work. Here both run the very same functional ops on 4×8 tensors: per layer
``tanh(matmul(x, w) + b) * 0.5`` (four captured calls), ``LAYERS`` layers, a ``sum``, and the gradients of
the weights and biases (PyNative in MindSpore). Per mode: ``(t_mode − t_bare) / calls``, where ``calls`` is
the forward entries one statistics-L1 step writes in that framework (printed), from the median of the steps
(CPU and wall) and from the fastest ones, over two baselines: ``bare`` as the user runs it and ``bare
synchronous`` (``harness.SynchronousBare``: MindSpore's executor mode under capture, without capture). Each
round runs every mode of PyTorch, then every mode of MindSpore, so machine noise falls on both; MindSpore's
CPU time includes its executor threads, which spin while they wait for work, and the main thread's CPU time
(``main``) leaves them out: what msprobe's Python and the operators it runs cost. The verdict on MindSpore's
cost per call over PyTorch's is on host time over ``bare synchronous``: wall time and the main thread's CPU
time, both within the target. Process CPU is printed beside them: MindSpore's kernel pool busy-waits while the
main thread runs any Python between operators, msprobe's or the user's, so there every µs counts twice
(docs/performance.md#round-10-2026-12-06-what-host-cost-means-for-mindspore).

    python tools/bench/tinyops.py [--rounds 5] [--steps 8] [--layers 30] [--mindspore-threads 0] [--bare-first]
"""

from __future__ import annotations

import argparse
import logging
import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from harness import SynchronousBare, make_debugger, time_steps, verdict  # noqa: E402
from percall import MINDSPORE_RATIO_TARGET, count_forward_calls  # noqa: E402

from msprobe.core.lifecycle.debugger import BaseDebugger  # noqa: E402

WIDTH, BATCH = 8, 4
MODES = {"bare": None, "bare synchronous": SynchronousBare, "statistics L1": dict(task="statistics", level="L1"),
         "statistics mix": dict(task="statistics", level="mix")}


def torch_setup(layers: int) -> tuple[Any, Callable[[Any], None], Any, Any]:
    import numpy as np
    import torch

    from msprobe.pytorch import PrecisionDebugger

    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    params = [torch.tensor(rng.standard_normal(shape).astype(np.float32) * 0.3, requires_grad=True)
              for _ in range(layers) for shape in ((WIDTH, WIDTH), (WIDTH,))]

    def train_step(x: Any) -> None:
        for p in params:
            p.grad = None
        for i in range(layers):
            x = torch.mul(torch.tanh(torch.add(torch.matmul(x, params[2 * i]), params[2 * i + 1])), 0.5)
        torch.sum(x).backward()

    batch = torch.tensor(rng.standard_normal((BATCH, WIDTH)).astype(np.float32))
    return torch.nn.Module(), train_step, PrecisionDebugger, batch


def mindspore_setup(layers: int, threads: int = 0) -> tuple[Any, Callable[[Any], None], Any, Any]:
    """``threads``: MindSpore's CPU kernel threads (``mindspore.device_context.cpu.op_tuning.threads_num``,
    which MindSpore takes once, before its first operator); 0 leaves MindSpore's default pool, whose idle
    threads spin between operators (docs/performance.md#round-9-2026-12-06-the-main-threads-share)."""
    import mindspore as ms
    import numpy as np
    from mindspore import Parameter, Tensor, nn, ops

    from msprobe.mindspore import PrecisionDebugger

    ms.set_context(mode=ms.PYNATIVE_MODE)
    if threads:
        ms.device_context.cpu.op_tuning.threads_num(threads)
    rng = np.random.default_rng(0)
    params = [Parameter(Tensor(rng.standard_normal(shape).astype(np.float32) * 0.3), name=f"p{k}_{i}")
              for i in range(layers) for k, shape in enumerate(((WIDTH, WIDTH), (WIDTH,)))]

    def loss(x: Any) -> Any:
        for i in range(layers):
            x = ops.mul(ops.tanh(ops.add(ops.matmul(x, params[2 * i]), params[2 * i + 1])), 0.5)
        return ops.sum(x)

    grad_fn = ms.value_and_grad(loss, None, params)

    def train_step(x: Any) -> None:
        value, _ = grad_fn(x)
        value.asnumpy()  # wait for the step's kernels

    batch = Tensor(rng.standard_normal((BATCH, WIDTH)).astype(np.float32))
    return nn.Cell(), train_step, PrecisionDebugger, batch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--layers", type=int, default=30)
    parser.add_argument("--mindspore-threads", type=int, default=0,
                        help="MindSpore's CPU kernel threads (PyTorch runs on 1 here); 0: MindSpore's default")
    parser.add_argument("--bare-first", action="store_true",
                        help="the warm-up's bare steps before the calls are counted: the process's first MindSpore "
                             "operator runs asynchronously, as in a program that trains before it builds the debugger")
    args = parser.parse_args()
    logging.getLogger("msprobe").setLevel(logging.ERROR)
    setups = {"pytorch": torch_setup(args.layers), "mindspore": mindspore_setup(args.layers, args.mindspore_threads)}
    if args.bare_first:
        warm_up(setups)
    calls = {name: count_forward_calls(*setup) for name, setup in setups.items()}
    samples: dict[tuple[str, str], list[list]] = {(name, mode): [] for name in setups for mode in MODES}
    scratch = Path(tempfile.mkdtemp(prefix="msprobe-tinyops-"))
    try:
        if not args.bare_first:
            warm_up(setups)
        for _ in range(args.rounds):
            for name, (model, train_step, debugger_cls, batch) in setups.items():
                for mode, spec in MODES.items():
                    if name == "pytorch" and spec is SynchronousBare:
                        spec = None  # PyTorch has no such mode: its bare step again
                    debugger = make_debugger(debugger_cls, spec, scratch / "dump")
                    samples[(name, mode)].append(time_steps([batch] * args.steps, train_step, debugger, model))
                    if BaseDebugger._active is not None:
                        BaseDebugger._active.finish()
                    shutil.rmtree(scratch / "dump", ignore_errors=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    report(samples, calls)


def warm_up(setups: dict[str, tuple[Any, Callable[[Any], None], Any, Any]]) -> None:
    """Two bare steps of each framework. Which mode MindSpore's first operator runs in changes what its
    synchronous mode costs under capture afterwards (docs/performance.md#round-9-2026-12-06-the-main-threads-share):
    by default the calls are counted first, under capture, so the first operator runs synchronously."""
    for model, train_step, _, batch in setups.values():
        time_steps([batch] * 2, train_step, None, model)


def report(samples: dict[tuple[str, str], list[list]], calls: dict[str, int]) -> None:
    """Per framework and mode, µs per captured call over ``bare`` (what the user sees) and over ``bare
    synchronous`` (msprobe's own work); then MindSpore's figures over PyTorch's. A median figure is the median
    over rounds of each round's difference of medians (a mode against its baseline of the same round, so the
    machine's load, which moves between rounds, falls on both); a ``min`` figure, of the fastest steps."""
    def per_call(name: str, mode: str, base: str, pick: Callable[[list[float]], float], column: int) -> float:
        if pick is min:
            mine, bare = (min(s[column] for steps in samples[(name, m)] for s in steps) for m in (mode, base))
            return (mine - bare) / calls[name] * 1e6
        rounds = zip(samples[(name, mode)], samples[(name, base)])
        return statistics.median(statistics.median(s[column] for s in mine) - statistics.median(s[column] for s in bare)
                                 for mine, bare in rounds) / calls[name] * 1e6

    picks = ((statistics.median, 1), (min, 1), (statistics.median, 0), (statistics.median, 2))
    print(f"captured forward calls per step: {calls}")
    print(f"{'framework':10s} {'mode':17s} {'cpu ms/step':>11s} {'wall ms/step':>12s} {'main ms/step':>12s}   µs per "
          "call over bare: cpu, cpu (min), wall, main | over bare synchronous: cpu, cpu (min), wall, main")
    figures = {}
    for name, mode in samples:
        wall, cpu, main = (statistics.median(s[column] for steps in samples[(name, mode)] for s in steps) * 1e3
                           for column in range(3))
        line = f"{name:10s} {mode:17s} {cpu:11.2f} {wall:12.2f} {main:12.2f}"
        if mode.startswith("bare"):
            print(line)
            continue
        figures[(name, mode)] = [per_call(name, mode, base, pick, column) for base in ("bare", "bare synchronous")
                                 for pick, column in picks]
        print(line + "   " + " ".join(f"{v:8.1f}" for v in figures[(name, mode)][:4]) + " |"
              + " ".join(f"{v:8.1f}" for v in figures[(name, mode)][4:]))
    for mode in MODES:
        if not mode.startswith("bare"):
            ratios = [m / t if t > 0 else float("inf")
                      for m, t in zip(figures[("mindspore", mode)], figures[("pytorch", mode)])]
            print(f"MindSpore / PyTorch, {mode}: over bare cpu {ratios[0]:.2f} (min {ratios[1]:.2f}, wall "
                  f"{ratios[2]:.2f}, main {ratios[3]:.2f}); over bare synchronous cpu {ratios[4]:.2f} (min "
                  f"{ratios[5]:.2f}, wall {ratios[6]:.2f}, main {ratios[7]:.2f})  "
                  f"{verdict(MINDSPORE_RATIO_TARGET, ratios[6], ratios[7], unit='x')} (wall and main, synchronous)")


if __name__ == "__main__":
    main()
