"""What plain Python between MindSpore operators costs, with no msprobe on the call path: the reason MindSpore's
cost per captured call is judged on host time (wall and main thread), not on the process's CPU time.

The model is ``tinyops.py``'s (``tanh(matmul(x, w) + b) * 0.5`` per layer on 4×8 tensors, 30 layers, the
gradients of all weights by ``value_and_grad``), run as capture runs it on the CPU (``reads.synchronous_capture``:
each operator at its call), with ``--gaps`` units of plain Python (``json.dumps`` of a small dict; its own time,
measured alone, is printed) after every operator of the forward pass. Rounds of the gap sizes interleave in one
process. Per forward operator: the main thread's CPU time inside the operator call, and the step's main-thread
CPU, wall and process CPU time divided by the forward operators. Two things show: the process's CPU time is about twice
its wall time whatever runs between operators, since MindSpore's CPU kernel pool busy-waits meanwhile, and an
operator takes longer when Python ran before it
(docs/performance.md#round-10-2026-12-06-what-host-cost-means-for-mindspore).

    python tools/bench/mindspore_gaps.py [--gaps 0 1 3] [--rounds 3] [--steps 20] [--layers 30]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

LAYERS, WIDTH, BATCH = 30, 8, 4
_BLOB = {str(i): [i, str(i) * 3] for i in range(200)}


def build(layers: int, timed_ops: list[int], gap: list[int]):
    """A train step whose forward pass adds each operator's main-thread CPU time (ns) to ``timed_ops[0]`` and
    runs ``gap[0]`` units of plain Python after each operator."""
    import mindspore as ms
    from mindspore import Parameter, Tensor, ops

    rng = np.random.default_rng(0)
    params = [Parameter(Tensor(rng.standard_normal(shape).astype(np.float32) * 0.3), name=f"p{k}_{i}")
              for i in range(layers) for k, shape in enumerate(((WIDTH, WIDTH), (WIDTH,)))]

    def timed(op, *args):
        begin = time.thread_time_ns()
        out = op(*args)
        timed_ops[0] += time.thread_time_ns() - begin
        for _ in range(gap[0]):
            json.dumps(_BLOB)
        return out

    def loss(x):
        for i in range(layers):
            x = timed(ops.mul, timed(ops.tanh, timed(ops.add, timed(ops.matmul, x, params[2 * i]),
                                                     params[2 * i + 1])), 0.5)
        return ops.sum(x)

    grad_fn = ms.value_and_grad(loss, None, params)
    batch = Tensor(rng.standard_normal((BATCH, WIDTH)).astype(np.float32))
    return lambda: grad_fn(batch)[0].asnumpy()


def gap_unit_us() -> float:
    """One unit of the gap's Python, timed alone (main-thread CPU, median of 200)."""
    times = []
    for _ in range(200):
        begin = time.thread_time_ns()
        json.dumps(_BLOB)
        times.append(time.thread_time_ns() - begin)
    return statistics.median(times) / 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gaps", type=int, nargs="+", default=[0, 1, 3])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--layers", type=int, default=LAYERS)
    args = parser.parse_args()
    import mindspore as ms

    from msprobe.mindspore import reads

    ms.set_context(mode=ms.PYNATIVE_MODE)
    synchronous = reads.synchronous_capture()  # before the first operator, as tinyops.py's default run
    timed_ops, gap = [0], [0]
    step = build(args.layers, timed_ops, gap)
    ops_per_step = 4 * args.layers
    for _ in range(3):
        step()
    samples: dict[int, list[tuple[float, ...]]] = {g: [] for g in args.gaps}
    for _ in range(args.rounds):
        for g in args.gaps:
            gap[0] = g
            for _ in range(args.steps):
                timed_ops[0] = 0
                wall, cpu, main = time.perf_counter(), time.process_time(), time.thread_time()
                step()
                samples[g].append((timed_ops[0] / 1e3 / ops_per_step,
                                   (time.thread_time() - main) / ops_per_step * 1e6,
                                   (time.perf_counter() - wall) / ops_per_step * 1e6,
                                   (time.process_time() - cpu) / ops_per_step * 1e6))
    synchronous.remove()
    print(f"{ops_per_step} forward operators per step; µs per operator, medians of {args.rounds * args.steps} steps; "
          f"one gap unit alone: {gap_unit_us():.1f} µs")
    print(f"{'gap units':>9s} {'in operator':>12s} {'main':>8s} {'wall':>8s} {'process cpu':>12s} {'cpu / wall':>11s}")
    for g, rows in samples.items():
        op, main, wall, cpu = (statistics.median(row[i] for row in rows) for i in range(4))
        print(f"{g:9d} {op:12.1f} {main:8.1f} {wall:8.1f} {cpu:12.1f} {cpu / wall:11.2f}")


if __name__ == "__main__":
    main()
