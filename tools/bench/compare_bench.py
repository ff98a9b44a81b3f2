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

    python tools/bench/compare_bench.py --reports 2000 100000 [--baseline-rev REV]

instead times, in this process, the two parts that a library could write for us. The xlsx writer:
ours against XlsxWriter in constant-memory mode (``pip install XlsxWriter``; :func:`xlsxwriter_write`
gives it what ours writes: the same sheets, fills, percent format and every digit), seconds (best of
three, two past 10,000 rows) and the peak of Python allocations under tracemalloc (one more run), on
the rows of a real comparison — tensor mode: a 1,000-call comparison (2,000 rows) repeated to the
size asked; summary mode: a statistics comparison of that many rows. The progress bar: the tqdm bar
against the hand-written one of git revision REV (default ``8ff4e67``, the last that had it),
microseconds per advance on a terminal (a pty) and on a pipe, one advance per row.
"""

from __future__ import annotations

import argparse
import gc
import io
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path
from types import ModuleType
from typing import Any

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


def make_stat_dump(rank_dir: Path, calls: int, noise: float, seed: int) -> Path:
    """A statistics dump (task ``statistics``, summary mode): no tensor files, so any size is quick."""
    rng = np.random.default_rng(seed)
    base = np.random.default_rng(0).standard_normal((calls, 2, 4))
    rank_dir.mkdir(parents=True)
    data = {}
    for i in range(calls):
        stats = base[i] * (1 + rng.normal(0, noise, (2, 4)))
        data[f"Functional.linear.{i}.forward"] = {
            "input_args": [{"type": "torch.Tensor", "dtype": "torch.float32", "shape": [64, 32],
                            **dict(zip(("Max", "Min", "Mean", "Norm"), map(float, stats[0])))}],
            "input_kwargs": {},
            "output": [{"type": "torch.Tensor", "dtype": "torch.float32", "shape": [64, 16],
                        **dict(zip(("Max", "Min", "Mean", "Norm"), map(float, stats[1])))}]}
    (rank_dir / "dump.json").write_text(json.dumps({"task": "statistics", "level": "L1", "data": data}))
    return rank_dir / "dump.json"


def report_rows(root: Path, mode: str, rows: int) -> tuple[list[str], list[tuple[list[Any], str]], set[str]]:
    """(header, rows of (cells, highlight), percent columns) of a real comparison, as report.py passes them."""
    from msprobe.core.compare import CompareOptions, compare_dumps
    from msprobe.core.compare.report.table import PERCENT_COLUMNS, columns, row_cells
    from msprobe.pytorch.tensor_files import load_pt

    calls = 1000 if mode == "tensor" else rows // 2
    make = (lambda d, noise, seed: make_dump(d, calls, 64, noise, seed)) if mode == "tensor" else \
        (lambda d, noise, seed: make_stat_dump(d, calls, noise, seed))
    npu, bench = make(root / "npu" / mode, 1e-3, 1), make(root / "bench" / mode, 0.0, 2)
    result = compare_dumps(npu, bench, root / "out", load_pt, options=CompareOptions(workers=1, progress=False))
    cells = [(row_cells(r, False, {}), r.highlight) for r in result.results]
    cells = (cells * (rows // len(cells) + 1))[:rows]
    return columns(mode, False), cells, PERCENT_COLUMNS.get(mode, set())


def xlsxwriter_write(path: Path, header: list[str], rows: Any, percent_columns: set[str],
                     max_rows: int = 1_048_576) -> int:
    """What ``report.xlsx.write_xlsx`` writes, written by XlsxWriter in constant-memory mode. Numbers go
    through a float whose ``__format__`` is ``repr``: XlsxWriter writes ``%.16G``, one digit short."""
    import xlsxwriter

    from msprobe.core.compare.report.xlsx import _NOT_XML, PERCENT_FORMAT

    class Exact(float):
        def __format__(self, spec: str) -> str:
            return float.__repr__(self)

    book = xlsxwriter.Workbook(str(path), {"constant_memory": True, "tmpdir": str(path.parent), "use_zip64": True})
    bold = book.add_format({"bold": True})
    styles = {}
    for fill, colour in (("", None), ("red", "#FF0000"), ("yellow", "#FFFF00")):
        fill_format = {"bg_color": colour, "pattern": 1} if colour else {}
        plain = book.add_format(fill_format) if colour else None
        percent = book.add_format({**fill_format, "num_format": PERCENT_FORMAT})
        styles[fill] = [percent if name in percent_columns else plain for name in header]
    sheets, sheet, row = 0, None, max_rows
    for cells, highlight in rows:
        if row >= max_rows:
            sheets += 1
            sheet = book.add_worksheet("Sheet" if sheets == 1 else f"Sheet{sheets}")
            for column, name in enumerate(header):
                sheet.write_string(0, column, name, bold)
            row = 1
        style = styles[highlight]
        for column, value in enumerate(cells):
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                sheet.write_number(row, column, Exact(value), style[column])
            else:
                sheet.write_string(row, column, _NOT_XML.sub("", str(value)), style[column])
        row += 1
    book.close()
    return sheets


def baseline_module(rev: str, name: str) -> ModuleType:
    """The module ``msprobe/core/compare/<name>.py`` as git revision ``rev`` had it (``report/progress``)."""
    path = f"packages/msprobe-common/src/msprobe/core/compare/{name}.py"
    source = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=Path(__file__).resolve().parents[2], check=True,
                            capture_output=True, text=True).stdout
    module = ModuleType(f"baseline_{name}")
    exec(compile(source, f"{rev}:{path}", "exec"), module.__dict__)  # noqa: S102 - our own file from git history
    return module


def _timed(call: Any, repeats: int) -> tuple[float, float]:
    """(best wall seconds of ``repeats`` calls, peak MiB of Python allocations in one more call)."""
    best = float("inf")
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - start)
    gc.collect()
    tracemalloc.start()
    call()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return best, peak / 2**20


class _Terminal:
    """sys.stderr swapped for the slave side of a 120 x 24 pty (``isatty()`` is true), drained by a thread."""

    def __enter__(self) -> _Terminal:
        import fcntl
        import struct
        import termios

        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # 120 x 24, as a window
        self.master, self.stream = master, io.TextIOWrapper(io.FileIO(slave, "w"), write_through=True)
        self.drained = 0
        self.reader = threading.Thread(target=self._drain, daemon=True)
        self.reader.start()
        self.saved, sys.stderr = sys.stderr, self.stream
        return self

    def _drain(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:
                return
            if not chunk:
                return
            self.drained += len(chunk)

    def __exit__(self, *_: object) -> None:
        sys.stderr = self.saved
        self.stream.close()
        self.reader.join(timeout=2)
        os.close(self.master)


class _Pipe:
    """sys.stderr swapped for a file (not a terminal)."""

    def __enter__(self) -> _Pipe:
        self.saved, sys.stderr = sys.stderr, open(os.devnull, "w")  # noqa: SIM115
        return self

    def __exit__(self, *_: object) -> None:
        sys.stderr.close()
        sys.stderr = self.saved


def bench_progress(progress_class: Any, advances: int, where: Any) -> float:
    """Microseconds per ``advance()`` over ``advances`` of them, drawing to ``where`` (_Terminal or _Pipe)."""
    with where():
        start = time.perf_counter()
        bar = progress_class(advances, "Compare tensors")
        for _ in range(advances):
            bar.advance()
        getattr(bar, "close", lambda: None)()
        return (time.perf_counter() - start) / advances * 1e6


def bench_reports(sizes: list[int], rev: str) -> None:
    from msprobe.core.compare.report import progress, xlsx

    writers = {"ours": xlsx.write_xlsx, "XlsxWriter": xlsxwriter_write}
    try:
        import xlsxwriter  # noqa: F401
    except ImportError:
        print("XlsxWriter is not installed: timing ours alone")
        del writers["XlsxWriter"]
    bars = {f"ours@{rev}": baseline_module(rev, "report/progress").Progress, "tqdm": progress.Progress}
    print(f"{'part':>8} {'mode':>8} {'rows':>7} {'writer':>14} {'seconds':>8} {'peak MiB':>9} {'file MiB':>9}")
    for rows in sizes:
        for mode in ("tensor", "summary"):
            with tempfile.TemporaryDirectory() as tmp:
                root = Path(tmp)
                header, cells, percent = report_rows(root, mode, rows)
                for name, write in writers.items():
                    path = root / f"{name}.xlsx"

                    def run(write: Any = write, path: Path = path, header: list[str] = header,
                            cells: list = cells, percent: set[str] = percent) -> None:
                        write(path, header, iter(cells), percent)

                    seconds, peak = _timed(run, 3 if rows <= 10_000 else 2)
                    print(f"{'xlsx':>8} {mode:>8} {rows:>7} {name:>14} {seconds:>8.3f} {peak:>9.1f} "
                          f"{path.stat().st_size / 2**20:>9.2f}", flush=True)
    print(f"{'part':>8} {'stderr':>8} {'rows':>7} {'bar':>14} {'us/advance':>10} {'total s':>8}")
    for rows in sizes:
        for where in (_Terminal, _Pipe):
            for name, bar in bars.items():
                micro = min(bench_progress(bar, rows, where) for _ in range(3))
                print(f"{'progress':>8} {where.__name__.strip('_').lower():>8} {rows:>7} {name:>14} {micro:>10.2f} "
                      f"{micro * rows / 1e6:>8.3f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[200, 1000, 3000])
    parser.add_argument("--elements", type=int, default=4096)
    parser.add_argument("--workers", type=int, default=None, help="our -j (default: ours decides)")
    parser.add_argument("--msprobe-111", dest="msprobe_111", help="msprobe 1.1.1's command, to time it as well")
    parser.add_argument("--reports", type=int, nargs="+", metavar="ROWS",
                        help="time the xlsx writer and the progress bar instead, at these row counts")
    parser.add_argument("--baseline-rev", default="8ff4e67", help="git revision with the hand-written ones")
    args = parser.parse_args()
    if args.reports:
        bench_reports(args.reports, args.baseline_rev)
        return
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
