"""One comparison from two dump.json files to the reports: read → align → metrics → verdicts → write.

Tensor metrics are the only expensive part: each pair of tensor files is loaded, compared and
dropped inside a worker process, so memory holds a few tensors per worker whatever the dump size.
Tensor pairs go to the chosen engine (:mod:`msprobe.core.engine`: local processes or Ray tasks) as
paths; only their metrics come back. The loader (``.pt`` for PyTorch, ``.npy`` for MindSpore) comes from
the framework package, keeping this module framework-free; it must be a module-level function so workers
can receive it. It gets what dump.json records about the tensor (:class:`~.read.tensorfile.TensorSpec`) and
must refuse a file that does not match it before reading its data (see :mod:`.read.tensorfile`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from msprobe.core.compare.align import align_entries, cross_framework, entry_mapping, pair_rows
from msprobe.core.compare.judge import (
    NO,
    PASS,
    YES,
    CompareResult,
    Normalisation,
    Replay,
    RowResult,
    TensorMetrics,
    amplification,
    amplified_rows,
    attribute,
    compare_tensors,
    first_divergence,
    group_by_entry,
    highlight_entry,
    judge_entries,
    judge_md5,
    judge_not_compared,
    judge_summary,
    judge_tensor,
    judge_uninitialised,
    judge_unmatched,
    judge_values,
    mark_entering,
    normalisation,
    optimizer_divergences,
    run_unit,
)
from msprobe.core.compare.read import (
    CompareError,
    DumpFile,
    Source,
    SourceError,
    TensorSpec,
    UserMaps,
    comparable_dumps,
    comparable_rows,
    load_source,
    merge_note,
    read_construct,
    read_dump,
    read_stack,
    tensor_source,
)
from msprobe.core.compare.report import Progress, write_reports
from msprobe.core.engine import EngineChoice, open_engine
from msprobe.core.services.fileio import make_dir
from msprobe.core.services.log import logger

TensorLoader = Callable[[Path, TensorSpec], np.ndarray]
_IN_PROCESS_BELOW = 32  # tensor pairs; starting workers costs more than comparing this few


@dataclass
class CompareOptions:
    """What the command-line flags choose: ``-s``, ``-f``, ``-dm``, ``-c``, ``--attribute``, how many
    workers and where (``--engine``); plus the framework's replay that ``--attribute`` runs."""

    with_stack: bool = False
    fuzzy: bool = False
    mapping: dict[str, str] = field(default_factory=dict)
    workers: int | None = None
    auto_analyze: bool = True
    progress: bool = True
    attribute: int = 0  # --attribute N: replay the first N diverging APIs (compare.judge.attribution); 0: off
    replay: Replay | None = None  # the framework's replay for --attribute (None: it has none)
    maps: UserMaps | None = None  # -am / -cm / -lm (compare.read.mapfiles); a cross-framework pair needs none
    engine: EngineChoice = EngineChoice()  # --engine / --ray-address: where rank pairs and tensor pairs run


def check_modes(npu: DumpFile, bench: DumpFile) -> str:
    if npu.mode != bench.mode:
        raise CompareError(
            f"the dumps cannot be compared: npu_path {str(npu.path)!r} is a {npu.mode} dump (task "
            f"{npu.task!r}) but bench_path {str(bench.path)!r} is a {bench.mode} dump (task {bench.task!r}); "
            f"dump both sides with the same task and summary_mode"
        )
    return npu.mode


def build_results(npu: DumpFile, bench: DumpFile, options: CompareOptions) -> list[RowResult]:
    """Every row of both dumps (made comparable: compare.read.comparable_dumps), paired where the alignment pairs
    them, in execution order."""
    npu_rows, bench_rows = comparable_rows(npu, bench)
    mode = check_modes(npu, bench)
    cross = cross_framework(npu, bench, options.maps)
    results: list[RowResult] = []
    mapping = cross.npu_to_bench(options.mapping) if cross is not None else options.mapping
    for npu_name, bench_name in align_entries(npu_rows, bench_rows, options.fuzzy, entry_mapping(mapping), cross):
        pairs = pair_rows(npu_rows.get(npu_name, []) if npu_name else [],
                          bench_rows.get(bench_name, []) if bench_name else [], mapping, cross,
                          (npu_name, bench_name))
        renamed = cross is None and npu_name is not None and bench_name is not None and npu_name != bench_name
        for index, pair in enumerate(pairs):
            notes = [note for row in (pair.npu, pair.bench) if row and (note := merge_note(row.value))]
            notes += [pair.note] if pair.note else []
            if renamed and npu_name not in mapping:
                notes.append("Fuzzy matching data, the comparison accuracy may be affected.")
            results.append(RowResult(pair.npu, pair.bench, mode, messages=notes, first_of_entry=index == 0))
    return results


def _judge_cheap(results: list[RowResult]) -> list[int]:
    """Judge every row that needs no tensor file; return the indices of tensor pairs still to compare."""
    pending = []
    judge_uninitialised(results)
    for index, result in enumerate(results):
        if result.npu is None or result.bench is None:
            judge_unmatched(result)
        elif result.uninitialised:
            continue
        elif result.mode == "tensor":
            if not judge_values(result, YES, NO):
                pending.append(index)
        elif result.mode == "md5":
            if not judge_values(result, PASS, "Different"):
                judge_md5(result)
        elif not judge_values(result, "", "Warning"):
            judge_summary(result)
    return pending


def _tensor_job(job: tuple[TensorLoader, Source, Source, Normalisation | None]) -> TensorMetrics | str:
    """Worker: load one pair, compare, drop it. A string is the reason the pair could not be read. The input of
    a normalisation also gets how much the op amplifies its rounding, measured on the bench's values."""
    loader, npu, bench, norm = job
    try:
        arrays = [load_source(loader, source, side) for side, source in (("NPU", npu), ("bench", bench))]
    except SourceError as exc:
        return str(exc)
    metrics = compare_tensors(arrays[0], arrays[1])
    return metrics if norm is None else replace(metrics, amplification=amplification(arrays[1], norm))


def _run_jobs(jobs: list, workers: int, options: CompareOptions) -> Iterator[TensorMetrics | str]:
    with open_engine(options.engine) as engine:
        outcomes = engine.map(_tensor_job, jobs, workers, serial_below=_IN_PROCESS_BELOW)
        # after the engine has started the workers: a bar on a terminal runs a tqdm monitor thread
        progress = Progress(len(jobs), "Compare tensors") if options.progress and jobs else None
        try:
            for outcome in outcomes:
                if progress:
                    progress.advance()
                yield outcome
        finally:
            if progress:
                progress.close()


def default_workers() -> int:
    """One worker per CPU, at most 8: the parent only collects results while the workers compute."""
    return max(1, min(8, os.cpu_count() or 1))


def check_workers(workers: object) -> int | None:
    """``-j`` / ``workers=``: None (the default) or an integer from 1 to the number of CPUs; more processes
    than CPUs only compete for them, and an unbounded number forks until the machine stalls."""
    cpus = os.cpu_count() or 1
    if workers is None:
        return None
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= cpus:
        raise CompareError(f"workers (-j) is {workers!r}; allowed: an integer from 1 to {cpus} (the CPUs here)")
    return workers


def check_attribute(options: CompareOptions) -> None:
    """``--attribute`` / ``attribute=``: a positive integer, with the first-divergence analysis, on a
    framework that can replay."""
    n = options.attribute
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise CompareError(f"attribute (--attribute) is {n!r}; allowed: a positive integer (how many diverging "
                           f"APIs to replay), or 0 for none")
    if n and not options.auto_analyze:
        raise CompareError("attribute (--attribute) refines the first-divergence analysis, which -c / "
                           "auto_analyze=False turns off: give one or the other")
    if n and options.replay is None:
        raise CompareError("attribute (--attribute): this framework's compare cannot replay APIs")


def compute_tensor_rows(results: list[RowResult], groups: list[list[RowResult]], pending: list[int], npu: DumpFile,
                        bench: DumpFile, loader: TensorLoader, options: CompareOptions) -> None:
    normalised = {rows[0].entry: norm for rows in groups if (norm := normalisation(rows))}
    jobs = []
    for index in pending:
        result = results[index]
        norm = normalised.get(result.entry) if result.npu.suffix == "input.0" else None
        jobs.append((loader, tensor_source(npu, result.npu.value), tensor_source(bench, result.bench.value), norm))
    workers = check_workers(options.workers) or default_workers()
    for index, outcome in zip(pending, _run_jobs(jobs, workers, options)):
        if isinstance(outcome, str):
            judge_not_compared(results[index], outcome)
        else:
            judge_tensor(results[index], outcome)


def judge_results(results: list[RowResult], npu: DumpFile, bench: DumpFile, loader: TensorLoader,
                  options: CompareOptions) -> float:
    """Metrics, verdicts, highlights and rounding excess of every row (also used by the graph compare);
    returns the rounding unit of the run."""
    pending = _judge_cheap(results)
    groups = [rows for _, rows in group_by_entry(results)]
    if pending:
        compute_tensor_rows(results, groups, pending, npu, bench, loader, options)
    unit = run_unit(results)
    cross = is_cross_framework(npu, bench)
    for rows in groups:
        highlight_entry(rows)
    judge_entries(groups, unit, cross)
    return unit


def is_cross_framework(npu: DumpFile, bench: DumpFile) -> bool:
    """The two dumps come from different frameworks (MindSpore against PyTorch)."""
    return npu.framework != bench.framework and None not in (npu.framework, bench.framework)


def compare_dumps(
    npu_json: str | os.PathLike,
    bench_json: str | os.PathLike,
    output_dir: str | os.PathLike,
    loader: TensorLoader,
    stack_path: str | os.PathLike | None = None,
    options: CompareOptions | None = None,
    report_stem: str | None = None,
) -> CompareResult:
    """Compare two dump.json files and write ``compare_result_{timestamp}`` .xlsx, .csv and .html."""
    options = options or CompareOptions()
    check_workers(options.workers)
    check_attribute(options)
    npu, bench = read_dump(npu_json, "npu_path"), read_dump(bench_json, "bench_path")
    stack_file = Path(stack_path) if stack_path else npu.path.parent / "stack.json"
    npu.stacks = read_stack(stack_file) if stack_path or stack_file.is_file() else {}
    return compare_read(npu, bench, output_dir, loader, options, report_stem)


def compare_read(npu: DumpFile, bench: DumpFile, output_dir: str | os.PathLike, loader: TensorLoader,
                 options: CompareOptions, report_stem: str | None = None) -> CompareResult:
    """Compare two dumps already read (or merged from ranks: compare.read.shards); the NPU side's ``stacks``
    are its stack.json. The rows and attribution read the dumps in common terms (compare.read.comparable_dumps)."""
    npu, bench = comparable_dumps(npu, bench)
    stacks = npu.stacks
    started = time.monotonic()
    results = build_results(npu, bench, options)
    unit = judge_results(results, npu, bench, loader, options)
    divergence = first_divergence(results, stacks, read_construct(npu)) if options.auto_analyze else None
    optimizer = optimizer_divergences(results, stacks) if options.auto_analyze else []
    out = make_dir(output_dir)
    attributed = None
    if options.attribute and options.replay is not None:
        attributed = attribute(results, stacks, npu, bench, loader, options.replay, options.attribute, unit, out)
        divergence = attributed.first_local.suspect if attributed.first_local else divergence
    mark_entering(divergence)
    stem = report_stem or f"compare_result_{time.strftime('%Y%m%d%H%M%S')}"
    result = CompareResult(npu.mode, results, divergence, {}, npu.path, bench.path, unit, optimizer,
                           options.auto_analyze, attributed, is_cross_framework(npu, bench),
                           amplified_rows(results) if options.auto_analyze else None)
    result.reports = write_reports(result, out, stem, options.with_stack, stacks)
    logger.info("compared %d rows in %.1f s", len(results), time.monotonic() - started)
    return result
