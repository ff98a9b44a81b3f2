"""Time ``msprobe -f pytorch compare`` and measure its peak memory on generated tensor dumps of growing size.

    python tools/bench/compare_bench.py [--sizes 200 1000 3000] [--elements 4096] [--workers N]
                                        [--msprobe-111 /path/to/venv/bin/msprobe]

Each size is the number of API calls per side (one input and one output float32 tensor each, saved
as ``.pt`` with a stack.json, so msprobe 1.1.1 accepts the same dumps); the NPU side carries noise
of about 1e-3. Both tools run as a user runs them, ``msprobe -f pytorch compare -i compare.json -o
OUT`` in a child process, so the wall time includes start-up (importing torch) and the reports.

Memory: the child and every process it starts (our workers) are sampled every 20 ms through
/proc, and the peak of their summed PSS is reported: the proportional set size counts pages that
forked workers share with their parent once, where summed RSS would count them in every process
(and ``ru_maxrss`` gives only the largest single process, hiding what a pool costs together).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

SAMPLE_SECONDS = 0.02


def make_dump(rank_dir: Path, calls: int, elements: int, noise: float, seed: int) -> Path:
    import torch

    rng = np.random.default_rng(seed)
    base = np.random.default_rng(0)
    tensors = rank_dir / "dump_tensor_data"
    tensors.mkdir(parents=True)
    data, stacks = {}, {}
    for i in range(calls):
        entry = f"Functional.linear.{i}.forward"
        record: dict = {"input_args": [], "input_kwargs": {}, "output": []}
        for part, key in (("input", "input_args"), ("output", "output")):
            array = base.standard_normal(elements).astype(np.float32)
            array *= 1 + rng.normal(0, noise, elements).astype(np.float32)
            name = f"{entry}.{part}.0.pt"
            torch.save(torch.from_numpy(array), tensors / name)
            record[key].append({"type": "torch.Tensor", "dtype": "torch.float32", "shape": [elements],
                                "Max": float(array.max()), "Min": float(array.min()), "Mean": float(array.mean()),
                                "Norm": float(np.linalg.norm(array)), "requires_grad": False, "data_name": name})
        data[entry] = record
        stacks[entry] = [f"File model.py, line {i}, in forward, \n y = F.linear(x, w)"]
    (rank_dir / "dump.json").write_text(json.dumps({"task": "tensor", "level": "L1",
                                                    "dump_data_dir": str(tensors), "data": data}))
    (rank_dir / "stack.json").write_text(json.dumps(stacks))
    return rank_dir / "dump.json"


def _tree_pss_kib(pid: int) -> int:
    """Summed PSS of ``pid`` and all its descendants (0 for processes that already ended)."""
    total, pending = 0, [pid]
    while pending:
        current = pending.pop()
        try:
            rollup = Path(f"/proc/{current}/smaps_rollup").read_text()
            total += next((int(line.split()[1]) for line in rollup.splitlines() if line.startswith("Pss:")), 0)
            for task in Path(f"/proc/{current}/task").iterdir():
                pending += [int(child) for child in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
    return total


def measure(command: list[str], cwd: Path) -> tuple[float, float]:
    """Run ``command``; return (seconds, peak summed PSS in MiB of it and its descendants)."""
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peak = 0

    def sample() -> None:
        nonlocal peak
        while process.poll() is None:
            peak = max(peak, _tree_pss_kib(process.pid))
            time.sleep(SAMPLE_SECONDS)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, errors = process.communicate()
    seconds = time.perf_counter() - start
    sampler.join()
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({process.returncode}):\n{errors[-3000:]}")
    return seconds, peak / 1024


def write_config(root: Path) -> Path:
    config = root / "compare.json"
    rank = root / "npu" / "step0" / "rank"
    config.write_text(json.dumps({"npu_path": str(rank / "dump.json"),
                                  "bench_path": str(root / "bench" / "step0" / "rank" / "dump.json"),
                                  "stack_path": str(rank / "stack.json"), "is_print_compare_log": False}))
    return config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[200, 1000, 3000])
    parser.add_argument("--elements", type=int, default=4096)
    parser.add_argument("--workers", type=int, default=None, help="our -j (default: ours decides)")
    parser.add_argument("--msprobe-111", dest="msprobe_111", help="msprobe 1.1.1's command, to time it as well")
    args = parser.parse_args()
    tools = {"ours": [sys.executable, "-m", "msprobe.core"]}
    if args.msprobe_111:
        tools["1.1.1"] = [args.msprobe_111]
    print(f"{'tool':>6} {'calls':>6} {'rows':>6} {'MB/side':>8} {'seconds':>8} {'rows/s':>7} "
          f"{'peak PSS MiB':>12}")
    for calls in args.sizes:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            make_dump(root / "npu" / "step0" / "rank", calls, args.elements, 1e-3, 1)
            make_dump(root / "bench" / "step0" / "rank", calls, args.elements, 0.0, 2)
            config = write_config(root)
            size = sum(p.stat().st_size for p in (root / "npu").rglob("*")) / 2**20
            for tool, prefix in tools.items():
                command = [*prefix, "-f", "pytorch", "compare", "-i", str(config), "-o", str(root / f"out_{tool}")]
                if tool == "ours" and args.workers is not None:
                    command += ["-j", str(args.workers)]
                seconds, peak = measure(command, root)
                print(f"{tool:>6} {calls:>6} {2 * calls:>6} {size:>8.1f} {seconds:>8.2f} {2 * calls / seconds:>7.0f} "
                      f"{peak:>12.0f}", flush=True)


if __name__ == "__main__":
    main()
