"""Multi-rank comparison: two step directories, ranks paired by number, compared in parallel (one unit
per rank pair on the chosen engine, :mod:`msprobe.core.engine`; a unit rewrites the same reports when
an engine re-runs it).

Each rank pair gets its own reports (``compare_result_rank{R}_{timestamp}``), written by the unit where it
runs; the unit hands back only the rank's :class:`RankSummary` (counts, first divergence, report paths), never
its rows, so the driver's memory does not grow with the ranks' rows (docs/scale.md, "1,000 ranks"). A summary
CSV then says, per rank, where it first diverged, and names the rank whose divergence comes earliest in
execution order — the usual suspect when one rank's bad data spreads to the others through collectives.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from pathlib import Path

from msprobe.core.compare.judge import CompareResult, Divergence
from msprobe.core.compare.pipeline import (
    CompareOptions,
    TensorLoader,
    check_workers,
    compare_dumps,
    compare_read,
    default_workers,
)
from msprobe.core.compare.read import (
    CompareError,
    DumpFile,
    Layout,
    process_dirs,
    read_dump,
    read_merged,
    read_stack,
)
from msprobe.core.compare.report import csv_row, printable
from msprobe.core.engine import open_engine
from msprobe.core.services.fileio import make_dir, write_csv
from msprobe.core.services.log import logger

SUMMARY_HEADER = ["Rank", "Rows", "Failing rows", "First divergence", "Row", "Inputs pass", "Report"]


@dataclass
class RankSummary:
    """What a multi-rank compare keeps of one rank: the rows are in its reports, written where its unit ran."""

    mode: str
    rows: int
    failing: int  # rows failing the 1.1.1 verdict
    not_compared: int  # rows whose tensor files are missing or unreadable
    first_divergence: Divergence | None  # with its entry's diverging rows and stack: a few KB at most
    reports: dict[str, Path]

    @classmethod
    def of(cls, result: CompareResult) -> RankSummary:
        return cls(result.mode, len(result.results), sum(1 for r in result.results if r.failed),
                   result.not_compared, result.first_divergence, result.reports)


@dataclass
class DistributedResult:
    """A multi-rank compare: each rank's summary, the rank that diverged first, the summary CSV."""

    ranks: dict[int, RankSummary]
    first_rank: int | None
    summary: Path

    @property
    def not_compared(self) -> int:
        """Rows of every rank whose tensor files are missing or unreadable."""
        return sum(r.not_compared for r in self.ranks.values())


def _compare_rank(job: tuple) -> tuple[int, RankSummary]:
    """One rank pair, on either engine: compare, write the rank's reports, return only its summary."""
    rank, npu_dir, bench_dir, out, loader, options, stem = job
    stack = npu_dir / "stack.json"
    return rank, RankSummary.of(compare_dumps(npu_dir / "dump.json", bench_dir / "dump.json", out, loader,
                                              stack if stack.is_file() else None, options, stem))


def compare_steps(
    npu_step: str | os.PathLike,
    bench_step: str | os.PathLike,
    output_dir: str | os.PathLike,
    loader: TensorLoader,
    options: CompareOptions | None = None,
) -> DistributedResult:
    options = options or CompareOptions()
    npu_ranks = process_dirs(Path(npu_step), "npu_path")
    bench_ranks = process_dirs(Path(bench_step), "bench_path")
    for rank in sorted(set(npu_ranks) ^ set(bench_ranks)):
        side = "npu_path" if rank in npu_ranks else "bench_path"
        logger.warning("rank %d exists only under %s; it is not compared", rank, side)
    common = sorted(set(npu_ranks) & set(bench_ranks))
    if not common:
        raise CompareError(f"npu_path {str(npu_step)!r} and bench_path {str(bench_step)!r} share no rank")
    out = make_dir(output_dir)
    stamp = time.strftime("%Y%m%d%H%M%S")
    workers = check_workers(options.workers) or default_workers()
    per_rank = replace(options, workers=1 if len(common) > 1 else workers, progress=len(common) == 1)
    jobs = [(r, npu_ranks[r], bench_ranks[r], out, loader, per_rank, f"compare_result_rank{r}_{stamp}") for r in common]
    with open_engine(options.engine) as engine:
        results = dict(engine.map(_compare_rank, jobs, min(workers, len(jobs)), chunksize=1, serial_below=2))
    first = _first_rank(results)
    summary = out / f"compare_summary_{stamp}.csv"
    write_csv(summary, SUMMARY_HEADER, [csv_row(_summary_row(rank, results[rank])) for rank in common])
    if first is None:
        logger.info("no rank diverged (%d ranks compared); summary: %s", len(common), printable(summary))
    else:
        logger.warning("rank %d diverged first, at %s; summary: %s", first,
                       printable(results[first].first_divergence.entry), printable(summary))  # type: ignore[union-attr]
    return DistributedResult(results, first, summary)


def _first_rank(results: dict[int, RankSummary]) -> int | None:
    diverged = [(r.first_divergence.position, rank) for rank, r in results.items() if r.first_divergence]
    return min(diverged)[1] if diverged else None


def _summary_row(rank: int, result: RankSummary) -> list:
    found = result.first_divergence
    return [rank, result.rows, result.failing, found.entry if found else "", found.position + 1 if found else "",
            found.inputs_pass if found else "", str(result.reports.get("xlsx", ""))]


def side_ranks(path: Path, what: str) -> dict[int, Path]:
    """Rank → directory of one side: a step directory's ranks, or a dump.json's own directory as rank 0."""
    return process_dirs(path, what) if path.is_dir() else {0: path.parent}


def needs_merge(npu: Path, bench: Path, layout: Layout) -> bool:
    """One side has several ranks and the other one (or a layout is stated): compare them merged."""
    counts = sorted(len(side_ranks(p, w)) for p, w in ((npu, "npu_path"), (bench, "bench_path")))
    return counts[0] == 1 and (counts[1] > 1 or layout.stated)


def read_merged_sides(npu: Path, bench: Path, layout: Layout) -> tuple[DumpFile, DumpFile]:
    """The two sides of a merged comparison, NPU first: the multi-rank side merged into one dump
    (compare.read.shards), the one-rank side as it is; each with its stack.json (the graph shows both sides' stacks)."""
    sides = {"npu_path": side_ranks(npu, "npu_path"), "bench_path": side_ranks(bench, "bench_path")}
    several = [what for what, ranks in sides.items() if len(ranks) > 1]
    if len(several) != 1 and not layout.stated:
        raise CompareError(f"npu_path {str(npu)!r} and bench_path {str(bench)!r}: a merged comparison needs one "
                           f"side on one rank and the other on several")
    merged_side = several[0] if several else "npu_path"
    single_side = "bench_path" if merged_side == "npu_path" else "npu_path"
    (single_dir,) = sides[single_side].values()
    single = read_dump(single_dir / "dump.json", single_side)
    if (single_dir / "stack.json").is_file():
        single.stacks = read_stack(single_dir / "stack.json")
    merged: DumpFile = read_merged(sides[merged_side], single, layout, merged_side)
    return (merged, single) if merged_side == "npu_path" else (single, merged)


def compare_merged(npu: Path, bench: Path, output_dir: str | os.PathLike, loader: TensorLoader,
                   options: CompareOptions, layout: Layout) -> CompareResult:
    """A multi-rank step against a one-rank dump: the ranks are merged into one dump (compare.read.shards) and
    compared as one; the rows say which ranks each merged value came from."""
    npu_dump, bench_dump = read_merged_sides(npu, bench, layout)
    return compare_read(npu_dump, bench_dump, output_dir, loader, options)
