"""One ``graph`` run: for each rank directory, read the dump, build the graph (and compare it), mark
overflows, and write the ``.vis`` document and its HTML view side by side. A merged job reads the ranks
of a step as one dump first (compare.read.shards, as compare does; docs/pytorch/distributed_compare.md)."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, replace
from pathlib import Path

from msprobe.core.compare.distributed import read_merged_sides, side_ranks
from msprobe.core.compare.pipeline import CompareOptions, TensorLoader
from msprobe.core.compare.read import (
    NO_LAYOUT,
    DumpFile,
    Layout,
    comparable_dumps,
    merge_constructs,
    process_rank,
    read_construct,
    read_dump,
    read_merged,
    read_stack,
)
from msprobe.core.dump.json_files import write_json_atomic
from msprobe.core.graph import html
from msprobe.core.graph.compare import compare_graphs
from msprobe.core.graph.inputs import Job, compare_path, jobs, read_input
from msprobe.core.graph.overflow import mark_overflow
from msprobe.core.graph.tree import MODULE, Graph, assign_micro_steps, build_graph
from msprobe.core.graph.vis import build_document, compare_document, first_suspect, mark_merged, suggest
from msprobe.core.graph.visdb import VisDb
from msprobe.core.services.fileio import atomic_write_text, make_dir
from msprobe.core.services.log import logger

_STEP_NAME = re.compile(r"step(\d+)")


@dataclass(frozen=True)
class Written:
    vis: Path
    html: Path


def _read(rank_dir: Path, what: str) -> DumpFile:
    dump = read_dump(rank_dir / "dump.json", f"{what} dump.json")
    stack_file = rank_dir / "stack.json"
    dump.stacks = read_stack(stack_file) if stack_file.is_file() else {}
    return dump


def _sides(job: Job, layout: Layout) -> tuple[DumpFile, DumpFile | None]:
    """The job's dumps, NPU first; a merged job's ranks merged into one (a merged build has no other run:
    its values merge by their recorded placements only)."""
    if not job.merged:
        return _read(job.npu, "npu_path"), _read(job.bench, "bench_path") if job.bench is not None else None
    if job.bench is not None:
        return read_merged_sides(compare_path(job.npu), compare_path(job.bench), layout)
    nothing = DumpFile(job.npu, "", "", {}, job.npu)
    return read_merged(side_ranks(compare_path(job.npu), "npu_path"), nothing, layout, "npu_path"), None


def _construct(side: Path, dump: DumpFile, merged: bool, layout: Layout) -> dict[str, str | None]:
    """construct.json of one side; a merged side's from its ranks' (compare.read.shards.merge_constructs)."""
    ranks = side_ranks(compare_path(side), str(side)) if merged else {}
    if len(ranks) < 2:
        return read_construct(dump)
    return merge_constructs({rank: read_construct(replace(dump, path=rank_dir / "dump.json"))
                             for rank, rank_dir in ranks.items()}, layout)


def _graph(dump: DumpFile, construct: dict[str, str | None], what: str) -> Graph:
    """The graph of one dump (a merged one has the tensor directory of its lowest rank)."""
    rank_dir = dump.path.parent
    graph = build_graph(dump.entries, construct, dump.stacks, _data_dir(dump.entries, rank_dir))
    mark_merged(graph)
    if graph.inferred:
        logger.warning("%s %s has no module entries (level L1): APIs are grouped by the forward/construct frames "
                       "of their stacks, which is approximate; dump at level mix for the real module tree",
                       what, rank_dir)
    elif not any(n.kind == MODULE for n in graph.root.subnodes) and dump.entries:
        logger.warning("%s %s has no module entries and no stacks: the APIs are shown in call order under the "
                       "root", what, rank_dir)
    return graph


def _data_dir(entries: dict, rank_dir: Path) -> str | None:
    tensor_dir = rank_dir / "dump_tensor_data"
    return str(tensor_dir.resolve()) if tensor_dir.is_dir() and entries else None


def graph_one(job: Job, output: Path, loader: TensorLoader, options: CompareOptions, overflow: bool,
              layout: Layout = NO_LAYOUT, database: VisDb | None = None) -> Written:
    npu_dump, bench_dump = _sides(job, layout)
    if bench_dump is not None:  # as compare reads them: 26.2.0's gradients at their tensors' places, as its rows
        npu_dump, bench_dump = comparable_dumps(npu_dump, bench_dump)
    npu_graph = _graph(npu_dump, _construct(job.npu, npu_dump, job.merged, layout), "npu_path")
    title = str(job.npu)
    if bench_dump is None:
        steps = assign_micro_steps(npu_graph)
        critical = mark_overflow(npu_graph) if overflow else []
        document = build_document(npu_graph, steps)
        view = html.View("build", npu_graph, None, None, critical[0] if critical else None, title)
    else:
        bench_graph = _graph(bench_dump, _construct(job.bench, bench_dump, job.merged, layout), "bench_path")
        npu_construct = {node.id: node.upnode.id for node in npu_graph.root.walk()
                         if node.entry is not None and node.upnode is not None}
        comparison = compare_graphs(npu_graph, bench_graph, npu_dump, bench_dump, loader, options, npu_dump.stacks,
                                    npu_construct)
        suggest(npu_graph, comparison.mode)
        steps = assign_micro_steps(npu_graph)
        _bench_micro_steps(bench_graph)
        critical = mark_overflow(npu_graph) if overflow else []
        if overflow:
            mark_overflow(bench_graph)
        document = compare_document(npu_graph, bench_graph, comparison.mode, steps)
        first = comparison.first_divergence.entry if comparison.first_divergence else None
        first = first if first in npu_graph.nodes else first_suspect(npu_graph, npu_dump.entries, comparison.mode)
        view = html.View(comparison.mode, npu_graph, bench_graph, first,
                         critical[0] if critical else None, f"{job.npu} vs {job.bench}")
    vis_path, html_path = output / f"{job.stem}.vis", output / f"{job.stem}.html"
    write_json_atomic(vis_path, document)
    atomic_write_text(html_path, html.render(view))
    if database is not None:
        database.add(document, *_step_and_rank(job.npu), overflow)
    return Written(vis_path, html_path)


def _step_and_rank(side: Path) -> tuple[int, int]:
    """The step and rank a job's directory names (``step3/rank1``: 3, 1; ``proc{pid}`` and ``rank``: rank 0);
    0 where a name says none (a bare rank directory)."""
    rank = process_rank(side.name)
    step = _STEP_NAME.fullmatch(side.parent.name if rank is not None else side.name)
    return (int(step.group(1)) if step else 0), (rank or 0)


def _bench_micro_steps(bench: Graph) -> None:
    """Bench root children take their match's micro step, the unmatched ones the step before them."""
    step = 0
    for node in bench.root.subnodes:
        if node.partner is not None and node.partner.micro_step is not None:
            step = node.partner.micro_step
        node.micro_step = step


def run_graph(input_path: str | Path, output: str | Path, loader: TensorLoader, options: CompareOptions,
              overflow: bool = False, layout: Layout = NO_LAYOUT, file_type: str = "vis") -> list[Written]:
    """Write every graph input.json names; ``layout`` (``--tp``/``--pp``) wins over input.json's ``tp``/``pp``;
    ``file_type`` ``db`` adds one ``.vis.db`` holding them all (:mod:`.visdb`)."""
    npu, bench, given = read_input(input_path)
    layout = Layout(layout.tp or given.tp, layout.pp or given.pp)
    stamp = time.strftime("%Y%m%d%H%M%S")
    todo = jobs(npu, bench, stamp, layout)
    out = make_dir(output)
    database = VisDb(out / f"{'compare' if bench else 'build'}_{stamp}.vis.db") if file_type == "db" else None
    written = []
    try:
        for job in todo:
            logger.info("graph: %s %s%s", "comparing" if job.bench else "building", job.npu,
                        " (its ranks merged)" if job.merged else "")
            written.append(graph_one(job, out, loader, options, overflow, layout, database))
            logger.info("graph written: %s (open %s in a browser)", written[-1].vis, written[-1].html.name)
    except BaseException:
        if database is not None:
            database.discard()
        raise
    if database is not None:
        logger.info("graph database written: %s (for the TensorBoard graph plugin)", database.close())
    return written
