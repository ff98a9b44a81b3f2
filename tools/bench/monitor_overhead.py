"""Overhead of the training-state monitor (TrainerMon, docs/monitor.md) on the transformer of overhead.py
(2 encoder layers, width 128, 16 sequences of 64 tokens, AdamW) on CPU, as ratios to the bare run in one
process; each mode trains its own copy of the model (same weights, same batches), modes alternating step
block by step block so that machine noise hits all alike.

Upstream's TrainerMon (mindstudio-probe 26.2.0) is measured the same way, by this file run with
``--upstream`` in its own venv (``--upstream-python``, default /work/venvs/up262/bin/python) as a
subprocess, when that venv is present; its ratios are printed beside ours.

    python tools/bench/monitor_overhead.py [--rounds 5] [--steps 10]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VOCAB, WIDTH, BATCH, SEQUENCE = 1000, 128, 16, 64
ALL_OPS = ["min", "max", "norm", "zeros", "nans", "mean"]
EVERYTHING = {"xy_distribution": True, "wg_distribution": True, "mv_distribution": True, "param_distribution": True}
MODES = {  # "ops" absent: the default op, norm (upstream's default too)
    "bare": None,
    "default: activations + weight gradients": {"xy_distribution": True, "wg_distribution": True},
    "everything: + moments, parameters": EVERYTHING,
    "step_interval 10 (default keys)": {"xy_distribution": True, "wg_distribution": True, "step_interval": 10},
    "everything, all 6 ops": {**EVERYTHING, "ops": ALL_OPS},  # no target: zeros/nans are elementwise passes
}
TARGETS = dict(zip(list(MODES)[1:4], (1.15, 1.5, 1.03)))
UPSTREAM_PYTHON = "/work/venvs/up262/bin/python"


def build(config: dict | None, scratch: Path):
    """A fresh model, optimizer and step function, monitored by ``config`` (None: bare)."""
    import torch
    from torch import nn

    from msprobe.pytorch import TrainerMon  # ours, or upstream's in its venv

    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Embedding(VOCAB, WIDTH),
        nn.TransformerEncoder(nn.TransformerEncoderLayer(WIDTH, 4, 4 * WIDTH, dropout=0.0, batch_first=True), 2,
                              enable_nested_tensor=False),
        nn.Linear(WIDTH, VOCAB),
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    if config is not None:
        path = scratch / f"monitor_{len(list(scratch.iterdir()))}.json"
        path.write_text(json.dumps(config))
        TrainerMon(str(path), params_have_main_grad=False).set_monitor(model, optimizer)

    def train_step(tokens, targets) -> None:
        loss = nn.functional.cross_entropy(model(tokens).flatten(0, 1), targets.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    return train_step


def measure(rounds: int, steps: int) -> dict[str, list[tuple[float, float]]]:
    """(wall, CPU) seconds of every step of every mode, modes alternating block by block."""
    import torch

    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    batches = [(torch.randint(0, VOCAB, (BATCH, SEQUENCE), generator=gen),
                torch.randint(0, VOCAB, (BATCH, SEQUENCE), generator=gen)) for _ in range(steps)]
    samples: dict[str, list] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory(prefix="msprobe-monitor-bench-") as scratch:
        os.environ["MONITOR_OUTPUT_DIR"] = str(Path(scratch) / "out")
        (Path(scratch) / "configs").mkdir()
        steps_of = {mode: build(config, Path(scratch) / "configs") for mode, config in MODES.items()}
        for train_step in steps_of.values():  # warm-up, and the first collected step
            train_step(*batches[0])
        for _ in range(rounds):
            for mode, train_step in steps_of.items():
                for batch in batches:
                    begin, begin_cpu = time.perf_counter(), time.process_time()
                    train_step(*batch)
                    samples[mode].append((time.perf_counter() - begin, time.process_time() - begin_cpu))
    return samples


def ratios(samples: dict[str, list[tuple[float, float]]]) -> dict[str, tuple[float, float, float]]:
    """mode -> (median wall ms, wall ratio, CPU ratio) against the bare mode."""
    wall = {mode: statistics.median(s[0] for s in values) for mode, values in samples.items()}
    cpu = {mode: statistics.median(s[1] for s in values) for mode, values in samples.items()}
    return {mode: (wall[mode] * 1000, wall[mode] / wall["bare"], cpu[mode] / cpu["bare"]) for mode in samples}


def upstream(python: str, rounds: int, steps: int) -> dict | str:
    if not Path(python).exists():
        return f"not measured: {python} does not exist"
    result = subprocess.run([python, __file__, "--upstream", "--rounds", str(rounds), "--steps", str(steps)],
                            capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ""})
    if result.returncode != 0:
        return "not measured: " + (result.stderr.strip().splitlines() or ["no output"])[-1]
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--upstream", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--upstream-python", default=UPSTREAM_PYTHON)
    args = parser.parse_args()
    logging.getLogger("msprobe").setLevel(logging.ERROR)
    logging.disable(logging.WARNING)  # upstream logs each alert and step at INFO/WARNING
    if args.upstream:
        print(json.dumps(ratios(measure(args.rounds, args.steps))))
        return
    load = os.getloadavg()
    ours = ratios(measure(args.rounds, args.steps))
    theirs = upstream(args.upstream_python, args.rounds, args.steps)
    sys.path.insert(0, str(Path(__file__).parent))
    from harness import verdict

    print(f"load average before: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; after: "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}; {os.cpu_count()} CPUs")
    print(f"{'mode':40s} {'wall ms':>8s} {'wall':>6s} {'cpu':>6s}  {'target':24s} {'upstream 26.2.0 wall / cpu':>26s}")
    for mode, (ms, wall, cpu) in ours.items():
        other = theirs.get(mode) if isinstance(theirs, dict) else None
        beside = f"{other[1]:6.2f}x / {other[2]:6.2f}x" if other else ""
        met = verdict(TARGETS.get(mode), wall, cpu)
        print(f"{mode:40s} {ms:8.1f} {wall:5.2f}x {cpu:5.2f}x  {met:24s} {beside:>26s}")
    if not isinstance(theirs, dict):
        print(f"upstream {theirs}")


if __name__ == "__main__":
    main()
