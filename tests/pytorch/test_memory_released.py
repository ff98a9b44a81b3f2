"""A step's tensors are freed when the step is over, whether or not the debugger watched it.

A call's backward capture lives from its forward to its backward, hooked onto the autograd graph; had
it kept the call's arguments, two things would hold a step's activations past the step: a cycle through
autograd's C++ nodes, which Python's collector cannot see (a call whose output is its input — ``dropout``
with ``p=0`` — or that writes into its input — ``ReLU(inplace=True)`` — hooks the very tensor the call's
arguments hold), and a loss the user keeps after its backward (a log of losses). Either way memory grew
by the activations of every step (15 MB a step on the benchmark transformer) until the job ran out.
"""

from __future__ import annotations

import gc
import json
import tracemalloc
import weakref
from pathlib import Path

import pytest
import torch
from zoo import ZOO, ZooModel

from msprobe.pytorch import PrecisionDebugger

MODELS = {spec.name: spec for spec in ZOO if spec.name in ("gpt2", "inplace_resnet")}
MODES = [
    None,
    dict(task="statistics", level="L1"),
    dict(task="statistics", level="mix"),
    dict(task="statistics", level="L0"),
    dict(task="overflow_check", level="L1"),
    dict(task="free_benchmark", level="L1", fuzz_stage="backward"),
]


def _watch_outputs(model: torch.nn.Module, refs: list[weakref.ref]) -> None:
    """Keep a weak reference to every tensor any module returns."""

    def hook(_module, _args, output):
        if isinstance(output, dict):  # a transformers ModelOutput
            output = tuple(output.values())
        for value in output if isinstance(output, (tuple, list)) else (output,):
            if isinstance(value, torch.Tensor):
                refs.append(weakref.ref(value))

    for module in model.modules():
        module.register_forward_hook(hook)


def _debugger(config: dict, dump_path: Path) -> PrecisionDebugger:
    task_keys = {key: value for key, value in config.items() if key not in ("task", "level")}
    path = dump_path.parent / "config.json"
    path.write_text(json.dumps({"task": config["task"], "level": config["level"], "dump_path": str(dump_path),
                                config["task"]: task_keys}))
    return PrecisionDebugger(config_path=str(path))


def _steps(spec: ZooModel, config: dict | None, dump_path, keep_losses: bool) -> tuple[list, list]:
    torch.manual_seed(0)
    model = spec.build()
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    refs: list[weakref.ref] = []
    _watch_outputs(model, refs)
    debugger = None if config is None else _debugger(config, dump_path)
    gen = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(3):
        if debugger:
            debugger.start(model)
        loss = spec.loss(model, spec.batch(gen))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if debugger:
            debugger.stop()
            debugger.step()
        if keep_losses:
            losses.append(loss)
        del loss
    if debugger:
        debugger.finish()
    return refs, losses


@pytest.mark.parametrize("keep_losses", [False, True], ids=["losses dropped", "losses kept"])
@pytest.mark.parametrize("config", MODES, ids=lambda c: "bare" if c is None else "-".join(map(str, c.values())))
@pytest.mark.parametrize("name", MODELS)
def test_no_activation_outlives_its_step(name, config, keep_losses, tmp_path):
    refs, losses = _steps(MODELS[name], config, tmp_path / "dump", keep_losses)
    gc.collect()
    alive = [ref() for ref in refs if ref() is not None]
    assert len(refs) > 50
    # What a kept loss legitimately holds: itself (a module's output), nothing upstream.
    assert [t for t in alive if not any(t is loss for loss in losses)] == []


def test_nothing_accumulates_from_step_to_step(tmp_path):
    """What a step allocates is let go by a later one: after a warm-up of 100 steps (caches filling), no
    line of msprobe holds one more live allocation per step over each of the next two hundreds (``start()``
    once kept a handle per step to restore dropout's ``p``: three allocations a step, for the whole run).
    Both hundreds: tracemalloc counts a tuple parked on CPython's free list as live where it was made, so
    a line that allocates tuples each step moves by about a hundred either way from one snapshot to the
    next; a leak grows in every interval."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.1), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    debugger = _debugger(dict(task="statistics", level="mix"), tmp_path / "dump")
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
