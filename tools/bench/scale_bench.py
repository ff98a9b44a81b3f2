"""Throughput of compare and multi_run_ut by worker count, on the local engine and on Ray (docs/scale.md).

    python tools/bench/scale_bench.py [--calls 400] [--elements 16384] [--layers 4] [--workers 1 2] [--json OUT]

compare: one rank pair of a generated tensor dump (``--calls`` forward calls per side, one float32 input
and output of ``--elements`` each, ``.npy``; the NPU side carries noise of about 1e-3), compared in this
process with ``-j W`` (local) or on a Ray of W CPUs (``ray.init(num_cpus=W)`` first, which the engine joins);
tensor pairs per second. run_ut: a tensor dump of one training step of a stack of ``--layers``
transformer encoder layers (their APIs at L1), replayed by ``multi_run_ut -n W`` on each engine; APIs per
second. Ray's own start is timed apart ("ray start"): a cluster is started once and serves many jobs.
Each figure is the best of ``--repeat`` runs.

online: the records of ``--online-steps`` training steps of a 12-layer MLP (as ``online_load.py``), streamed
through a shared directory and paired by the receiver's intake, then replayed by the receiver's pool of W
workers (local processes, or Ray actors that grow with the backlog up to W); records (a forward with its
backward counting once) checked per second, timed after the first record's replay (the pool's start and
torch's import in it are left out; a Ray actor added while the records queue is counted); and, as engine
``none``, the same replays called one after another in this process: the replay's own cost, without a pool.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np


def compare_dump(root: Path, calls: int, elements: int) -> tuple[Path, Path]:
    """npu/dump.json and bench/dump.json of ``calls`` forward calls with one tensor input and output each."""
    rng = np.random.default_rng(0)
    sides = {}
    for side in ("npu", "bench"):
        (root / side / "dump_tensor_data").mkdir(parents=True)
        sides[side] = {}
    for i in range(calls):
        entry = f"Torch.add.{i}.forward"
        arrays = [rng.standard_normal(elements).astype(np.float32) for _ in range(2)]
        for side, data in sides.items():
            record = {"input_args": [], "input_kwargs": {}, "output": []}
            for part, key, array in (("input", "input_args", arrays[0]), ("output", "output", arrays[1])):
                if side == "npu":
                    array = (array * (1 + 1e-3 * rng.standard_normal(elements))).astype(np.float32)
                name = f"{entry}.{part}.0.npy"
                np.save(root / side / "dump_tensor_data" / name, array)
                a = array.astype(np.float64)
                record[key].append({"type": "mindspore.Tensor", "dtype": "Float32", "shape": [elements],
                                    "Max": a.max(), "Min": a.min(), "Mean": a.mean(),
                                    "Norm": float(np.linalg.norm(a)), "data_name": name})
            data[entry] = record
    for side, data in sides.items():
        (root / side / "dump.json").write_text(json.dumps({"task": "tensor", "level": "L1", "data": data}))
    return root / "npu" / "dump.json", root / "bench" / "dump.json"


def run_ut_dump(root: Path, layers: int) -> Path:
    """dump.json (task tensor, L1) of one forward and backward of a stack of transformer encoder layers."""
    import torch

    from msprobe.pytorch import PrecisionDebugger

    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
    debugger = PrecisionDebugger(task="tensor", level="L1", dump_path=str(root))
    debugger.start(model)
    model(torch.randn(4, 16, 64)).sum().backward()
    debugger.stop()
    debugger.step()
    return next(root.rglob("dump.json"))


def compare_job(npu: Path, bench: Path, out: Path, engine: str, workers: int) -> None:
    from msprobe.core.compare import CompareOptions, compare_dumps
    from msprobe.core.compare.read.tensorfile import load_npy
    from msprobe.core.engine import EngineChoice

    compare_dumps(npu, bench, out, load_npy, options=CompareOptions(workers=workers, progress=False,
                                                                   engine=EngineChoice(engine)))


def run_ut_job(api_info: Path, out: Path, engine: str, workers: int) -> None:
    from msprobe.core.engine import EngineChoice
    from msprobe.pytorch.run_ut.multi import multi_run_ut

    multi_run_ut(api_info, out, parts=workers, engine=EngineChoice(engine))


def online_records(root: Path, steps: int) -> list[tuple[int, int, bytes, bytes | None]]:
    """(rank, step, forward frame, backward frame or None) of ``steps`` training steps, as the intake pairs them."""
    import os

    import torch

    from msprobe.core.online.directory import DirWatcher
    from msprobe.core.online.receiver import Intake
    from msprobe.core.online.wire import Limits
    from msprobe.pytorch import PrecisionDebugger

    os.environ["MSPROBE_ONLINE_MAX_WAIT_MS"] = "60000"  # the hooks wait for room: no record is dropped
    records: list[tuple[int, int, bytes, bytes | None]] = []
    intake = Intake({0}, lambda *record: records.append(record))
    watcher = DirWatcher(str(root / "nfs"), Limits.from_megabytes(1024), intake)
    config = root / "sender.json"
    config.write_text(json.dumps({"task": "tensor", "dump_path": str(root / "dump"), "level": "L1",
                                  "tensor": {"online_run_ut": True, "nfs_path": str(root / "nfs")}}))
    torch.manual_seed(0)
    layers = [layer for _ in range(12) for layer in (torch.nn.Linear(32, 32), torch.nn.ReLU())]
    model = torch.nn.Sequential(*layers)
    debugger = PrecisionDebugger(str(config))
    for _ in range(steps):
        debugger.start(model)
        model(torch.randn(16, 32)).pow(2).mean().backward()
        debugger.stop()
        debugger.step()
    debugger.finish()
    deadline = time.monotonic() + 120
    while not intake.done and time.monotonic() < deadline:
        time.sleep(0.05)
    watcher.close()
    return records


def online_job(records: list, engine: str, workers: int) -> float:
    """Seconds the receiver's pool takes to replay ``records`` after its first."""
    from msprobe.core.engine import EngineChoice
    from msprobe.core.online.receiver import ReplayPool
    from msprobe.pytorch.online.replay import replay_frames, warm_up

    pool = ReplayPool(workers, functools.partial(replay_frames, device="cpu", max_message_mb=1024),
                      initializer=warm_up, engine=EngineChoice(engine))
    try:
        pool.submit(*records[0])
        pool.results.get()[2].result()
        started = time.perf_counter()
        for record in records[1:]:
            pool.submit(*record)
        for _ in records[1:]:
            pool.results.get()[2].result()
        return time.perf_counter() - started
    finally:
        pool.close()


def online_inline(records: list) -> float:
    """Seconds the replays of ``records`` after the first take in this process, one after another."""
    import torch

    from msprobe.pytorch.online.replay import replay_frames

    torch.set_num_threads(1)  # as a pool's worker (warm_up)
    replay = functools.partial(replay_frames, device="cpu", max_message_mb=1024)
    replay(*records[0][2:])
    started = time.perf_counter()
    for record in records[1:]:
        replay(*record[2:])
    return time.perf_counter() - started


def online_best(repeat: int, records: list, engine: str, workers: int) -> float:
    if engine == "none":
        return min(online_inline(records) for _ in range(repeat))
    return min(online_job(records, engine, workers) for _ in range(repeat))


def runs(job: str, engines: list[str], workers: list[int]) -> list[tuple[str, int]]:
    """(engine, workers) of a job's runs; online first without a pool, in this process (engine ``none``)."""
    first = [("none", 0)] if job == "online" else []
    return first + [(engine, count) for engine in engines for count in workers]


def best(repeat: int, run: Callable[[], None]) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


def on_engine(engine: str, workers: int, measure: Callable[[], float]) -> tuple[float, float]:
    """(seconds of the job, seconds Ray took to start; 0 for local)."""
    if engine != "ray":
        return measure(), 0.0
    import ray

    started = time.perf_counter()
    ray.init(address="local", num_cpus=workers, include_dashboard=False, logging_level="WARNING")
    start = time.perf_counter() - started
    try:
        return measure(), start
    finally:
        ray.shutdown()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--elements", type=int, default=16384)
    parser.add_argument("--layers", type=int, default=4, help="transformer layers of the run_ut dump")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--engines", nargs="+", default=["local", "ray"], choices=["local", "ray"])
    parser.add_argument("--jobs", nargs="+", default=["compare", "run_ut", "online"],
                        choices=["compare", "run_ut", "online"])
    parser.add_argument("--online-steps", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    from msprobe.core.services.log import logger

    logger.setLevel("WARNING")
    figures = []
    with tempfile.TemporaryDirectory() as temp:
        root = Path(temp)
        npu, bench = compare_dump(root / "compare", args.calls, args.elements)
        pairs = 2 * args.calls
        api_info = run_ut_dump(root / "run_ut", args.layers) if "run_ut" in args.jobs else None
        records = online_records(root / "online", args.online_steps) if "online" in args.jobs else []
        for job in args.jobs:
            for engine, workers in runs(job, args.engines, args.workers):
                out = root / f"out_{job}_{engine}_{workers}"
                if job == "compare":
                    run = functools.partial(compare_job, npu, bench, out, engine, workers)
                    units, what = pairs, "tensor pairs"
                elif job == "run_ut":
                    run = functools.partial(run_ut_job, api_info, out, engine, workers)
                    units, what = None, "APIs"
                if job == "online":  # timed inside: the pool's start is left out
                    units, what = len(records) - 1, "records"
                    measure = functools.partial(online_best, args.repeat, records, engine, workers)
                else:
                    measure = functools.partial(best, args.repeat, run)
                seconds, start = on_engine(engine, workers, measure)
                if units is None:
                    units = json.loads(next(out.glob("accuracy_checking_summary_*.json")).read_text())["apis"]
                figures.append({"job": job, "engine": engine, "workers": workers, "units": units, "what": what,
                                "seconds": round(seconds, 2), "per_second": round(units / seconds, 1),
                                "ray_start_s": round(start, 2)})
                print(f"{job:8} {engine:5} workers={workers}: {units} {what} in {seconds:.2f} s = "
                      f"{units / seconds:.1f}/s" + (f" (ray start {start:.1f} s)" if start else ""), flush=True)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
