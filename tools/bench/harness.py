"""What every overhead benchmark of tools/bench shares: debuggers from mode specs, the step timer,
the round-robin over modes in one process, and the result table.

Modes run round by round (every mode once per round) so that machine noise hits all of them alike;
each step is timed in wall time and in this process's CPU time (the steadier one on a shared machine).
"""

from __future__ import annotations

import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from msprobe.core.debugger import BaseDebugger

Sample = tuple[float, float]  # (wall seconds, CPU seconds) of one step


def make_debugger(debugger_cls: Any, spec: dict | None, dump_path: Path) -> Any:
    """A debugger for ``spec``: the common keys go to the top of config.json, the rest into the task's section."""
    if spec is None:
        return None
    spec = dict(spec)
    common = {key: spec.pop(key) for key in ("task", "level", "step") if key in spec}
    config = dump_path.parent / "bench_config.json"
    config.write_text(json.dumps({"dump_path": str(dump_path), **common, common["task"]: spec}))
    return debugger_cls(config_path=str(config))


def time_steps(batches: Iterable[Any], train_step: Callable[[Any], None], debugger: Any, model: Any) -> list[Sample]:
    """Run ``train_step`` on every batch inside start/stop/step of ``debugger`` (None: bare)."""
    samples = []
    for batch in batches:
        begin, begin_cpu = time.perf_counter(), time.process_time()
        if debugger is not None:
            debugger.start(model)
        train_step(batch)
        if debugger is not None:
            debugger.stop()
            debugger.step()
        samples.append((time.perf_counter() - begin, time.process_time() - begin_cpu))
    return samples


def run_modes(modes: dict[str, dict | None], run: Callable[[Any], list[Sample]], debugger_cls: Any,
              rounds: int) -> dict[str, list[Sample]]:
    """Every mode once per round; ``run(debugger)`` times the steps of one mode (``None``: bare)."""
    run(None)  # warm-up
    samples: dict[str, list[Sample]] = {mode: [] for mode in modes}
    scratch = Path(tempfile.mkdtemp(prefix="msprobe-bench-"))
    try:
        for _ in range(rounds):
            for mode, spec in modes.items():
                samples[mode] += run(make_debugger(debugger_cls, spec, scratch / "dump"))
                if BaseDebugger._active is not None:
                    BaseDebugger._active.finish()
                shutil.rmtree(scratch / "dump", ignore_errors=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return samples


def verdict(target: float | None, *measured: float, unit: str = "x") -> str:
    """``≤ target: met`` when every measured figure is within the target (``not met`` otherwise), or ""."""
    if target is None:
        return ""
    met = all(value <= target for value in measured)
    return f"≤ {target:g}{unit}: {'met' if met else 'NOT met'}"


def print_table(samples: dict[str, list[Sample]], targets: dict[str, float] | None = None) -> None:
    """Median wall and CPU time per step, their ratios to the bare run, and the verdict on each mode's
    target ratio (met when both ratios are within it)."""
    targets = targets or {}
    wall = {mode: statistics.median(t[0] for t in values) for mode, values in samples.items()}
    cpu = {mode: statistics.median(t[1] for t in values) for mode, values in samples.items()}
    print(f"{'mode':36s} {'wall ms':>9s} {'ratio':>7s} {'cpu ms':>9s} {'ratio':>7s}  target")
    for mode in samples:
        wall_ratio, cpu_ratio = wall[mode] / wall["bare"], cpu[mode] / cpu["bare"]
        print(
            f"{mode:36s} {wall[mode] * 1000:9.2f} {wall_ratio:6.2f}x"
            f" {cpu[mode] * 1000:9.2f} {cpu_ratio:6.2f}x  {verdict(targets.get(mode), wall_ratio, cpu_ratio)}"
        )
