"""What every overhead benchmark of tools/bench shares: debuggers from mode specs, the step timer,
the round-robin over modes in one process, and the result table.

Modes run round by round (every mode once per round) so that machine noise hits all of them alike;
each step is timed in wall time, in this process's CPU time (the steadier one on a shared machine) and in
the CPU time of the thread that runs it (the step's Python without a framework's worker threads, which
MindSpore's spin while they wait: docs/performance.md#round-9-2026-12-06-the-main-threads-share).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from msprobe.core.lifecycle.debugger import BaseDebugger

Sample = tuple[float, float, float]  # (wall seconds, CPU seconds, main-thread CPU seconds) of one step
ModeSpec = dict | Callable[[Path], Any] | None  # config keys, a stand-in's factory (PlainFiles), or bare


def make_debugger(debugger_cls: Any, spec: ModeSpec, dump_path: Path) -> Any:
    """A debugger for ``spec``: the common keys go to the top of config.json, the rest into the task's
    section. A callable ``spec`` (:class:`PlainFiles`) makes its own stand-in from the dump path."""
    if spec is None:
        return None
    if callable(spec):
        return spec(dump_path)
    spec = dict(spec)
    common = {key: spec.pop(key) for key in ("task", "level", "step") if key in spec}
    config = dump_path.parent / "bench_config.json"
    config.write_text(json.dumps({"dump_path": str(dump_path), **common, common["task"]: spec}))
    return debugger_cls(config_path=str(config))


class SynchronousBare:
    """A MindSpore mode that stands in for a debugger: no capture, but PyNative runs each operator at its call
    between start() and stop(), switched as capture switches it on the CPU (``reads.synchronous_capture``). A
    mode's cost over this row is msprobe's own work; over ``bare`` it is what the user sees, the executor's
    mode included (docs/performance.md#round-7-2026-12-05-the-same-tiny-ops-in-both-frameworks)."""

    def __init__(self, dump_path: Path | None = None) -> None:
        from msprobe.mindspore import reads

        self._switch = reads.synchronous_capture
        self._handle: Any = None

    def start(self, model: Any) -> None:
        self._handle = self._switch()

    def stop(self) -> None:
        self._handle.remove()

    def step(self) -> None:
        pass


def time_steps(batches: Iterable[Any], train_step: Callable[[Any], None], debugger: Any, model: Any) -> list[Sample]:
    """Run ``train_step`` on every batch inside start/stop/step of ``debugger`` (None: bare)."""
    samples = []
    for batch in batches:
        begin, begin_cpu, begin_thread = time.perf_counter(), time.process_time(), time.thread_time()
        if debugger is not None:
            debugger.start(model)
        train_step(batch)
        if debugger is not None:
            debugger.stop()
            debugger.step()
        samples.append((time.perf_counter() - begin, time.process_time() - begin_cpu,
                        time.thread_time() - begin_thread))
    return samples


def run_modes(modes: dict[str, ModeSpec], run: Callable[[Any], list[Sample]], debugger_cls: Any,
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


def tensor_file_sizes(debugger_cls: Any, spec: dict, run_one_step: Callable[[Any], object], scratch: Path) -> list[int]:
    """The sizes of the tensor files one step dumps under ``spec`` (a hard link, an unchanged tensor
    saved again, counts once: it costs the disk no bytes)."""
    dump = scratch / "sizes-dump"
    try:
        run_one_step(make_debugger(debugger_cls, spec, dump))
        if BaseDebugger._active is not None:
            BaseDebugger._active.finish()
        files = (path.stat() for path in dump.rglob("dump_tensor_data/*"))
        return list({(st.st_dev, st.st_ino): st.st_size for st in files}.values())
    finally:
        shutil.rmtree(dump, ignore_errors=True)


class PlainFiles:
    """A mode that stands in for a debugger: at each ``stop()`` it writes files of ``sizes`` (random
    bytes) with plain ``open``/``write`` into a new directory under the dump path, kept as a dump keeps
    its steps. Beside ``tensor L1`` in the same rounds it shows what the disk alone costs: the tensor
    mode cannot be faster than the bare step plus this."""

    def __init__(self, sizes: list[int]) -> None:
        self._payloads = [os.urandom(size) for size in sizes]
        self._dump_path: Path | None = None
        self._steps = 0

    def __call__(self, dump_path: Path) -> PlainFiles:
        self._dump_path, self._steps = dump_path, 0
        return self

    def start(self, _model: Any) -> None:
        pass

    def stop(self) -> None:
        directory = self._dump_path / f"step{self._steps}"
        directory.mkdir(parents=True)
        for index, payload in enumerate(self._payloads):
            with open(directory / f"{index}.bin", "wb") as handle:
                handle.write(payload)
        self._steps += 1

    def step(self) -> None:
        pass


def verdict(target: float | None, *measured: float, unit: str = "x") -> str:
    """``≤ target: met`` when every measured figure is within the target (``NOT met`` otherwise); "" when
    the mode has no target."""
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
