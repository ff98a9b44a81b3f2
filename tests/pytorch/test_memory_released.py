"""Nothing msprobe allocates accumulates from step to step. That a step's activations are freed when the
step is over is a contract of both frameworks (``tests/contract/test_memory_released.py``)."""

from __future__ import annotations

import gc
import tracemalloc

import torch

from msprobe.pytorch import PrecisionDebugger


def test_nothing_accumulates_from_step_to_step(tmp_path):
    """What a step allocates is let go by a later one: after a warm-up of 100 steps (caches filling), no
    line of msprobe holds one more live allocation per step over each of the next two hundreds (``start()``
    once kept a handle per step to restore dropout's ``p``: three allocations a step, for the whole run).
    Both hundreds: tracemalloc counts a tuple parked on CPython's free list as live where it was made, so
    a line that allocates tuples each step moves by about a hundred either way from one snapshot to the
    next; a leak grows in every interval."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.1), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    debugger = PrecisionDebugger(dump_path=str(tmp_path / "dump"), task="statistics", level="mix")
    x = torch.randn(4, 8)
    snapshots = []
    tracemalloc.start()
    try:
        for step in range(300):
            debugger.start(model)
            model(x).sum().backward()
            debugger.stop()
            debugger.step()
            if step in (99, 199, 299):
                gc.collect()
                snapshots.append(tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(True, "*/msprobe/*")]))
    finally:
        tracemalloc.stop()
        debugger.finish()
    first, second, third = snapshots

    def grown(later, earlier) -> set:
        return {str(stat.traceback) for stat in later.compare_to(earlier, "lineno") if stat.count_diff >= 100}

    assert grown(second, first) & grown(third, second) == set()
