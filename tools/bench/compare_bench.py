"""Time ``msprobe compare`` and report peak RSS on generated tensor dumps of growing size.

    python tools/bench/compare_bench.py [--sizes 200 1000 5000] [--elements 4096] [--workers N]

Each size is the number of API calls per side (one input and one output tensor each, ``.npy``);
the NPU side carries float32 noise of about 1e-3. The comparison runs in a child process so that
its peak RSS (``ru_maxrss`` of the children, workers included) is measured on its own.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def make_dump(rank_dir: Path, calls: int, elements: int, noise: float, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    tensors = rank_dir / "dump_tensor_data"
    tensors.mkdir(parents=True)
    data = {}
    base = np.random.default_rng(0)
    for i in range(calls):
        entry = f"Functional.linear.{i}.forward"
        record: dict = {"input_args": [], "input_kwargs": {}, "output": []}
        for part, key in (("input", "input_args"), ("output", "output")):
            array = base.standard_normal(elements).astype(np.float32)
            array *= 1 + rng.normal(0, noise, elements).astype(np.float32)
            name = f"{entry}.{part}.0.npy"
            np.save(tensors / name, array)
            record[key].append({"type": "mindspore.Tensor", "dtype": "Float32", "shape": [elements],
                                "Max": float(array.max()), "Min": float(array.min()), "Mean": float(array.mean()),
                                "Norm": float(np.linalg.norm(array)), "data_name": name})
        data[entry] = record
    (rank_dir / "dump.json").write_text(json.dumps({"task": "tensor", "level": "L1", "data": data}))
    return rank_dir / "dump.json"


def run_one(npu: Path, bench: Path, out: Path, workers: int | None) -> float:
    code = (
        "import sys, numpy as np\n"
        "from msprobe.core.compare import CompareOptions, compare_dumps\n"
        f"compare_dumps({str(npu)!r}, {str(bench)!r}, {str(out)!r}, np.load, "
        f"options=CompareOptions(workers={workers!r}, progress=False))\n"
    )
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env={"MSPROBE_LOG_LEVEL": "2", "PATH": ""})
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[200, 1000, 3000])
    parser.add_argument("--elements", type=int, default=4096)
    parser.add_argument("--workers", type=int, default=None)
    args = parser.parse_args()
    print(f"{'calls':>7} {'rows':>7} {'MB/side':>8} {'seconds':>8} {'rows/s':>8} {'peak RSS MB':>12}")
    for calls in args.sizes:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            npu = make_dump(root / "npu", calls, args.elements, 1e-3, 1)
            bench = make_dump(root / "bench", calls, args.elements, 0.0, 2)
            before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
            seconds = run_one(npu, bench, root / "out", args.workers)
            peak = max(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, before) / 1024
            size = sum(p.stat().st_size for p in (root / "npu").rglob("*")) / 2**20
            print(f"{calls:>7} {2 * calls:>7} {size:>8.1f} {seconds:>8.2f} {2 * calls / seconds:>8.0f} {peak:>12.0f}")


if __name__ == "__main__":
    main()
