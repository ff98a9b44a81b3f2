"""Compare two graphs: pair their nodes and give each NPU node its precision index (1.1.1's meaning).

Nothing is matched or measured here: the two dumps' entries are paired by the compare pipeline's aligner
and measured by its metrics (``compare.pipeline.build_results`` / ``judge_results``), and this module reads
those rows back onto the nodes: the match of each node, 1.1.1's ``precision_index`` and the
``rounding_excess`` the colours follow (:mod:`msprobe.core.compare.judge.rounding`). The rules:
docs/graph.md#compare-matching-and-the-precision-index.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from msprobe.core.compare.judge import (
    OPTIMIZER_KIND,
    PASS,
    Divergence,
    RowResult,
    differing_arguments,
    entry_kind,
    first_divergence,
    stat_diff,
    stat_of,
)
from msprobe.core.compare.pipeline import CompareOptions, TensorLoader, build_results, check_modes, judge_results
from msprobe.core.compare.read import STAT_KEYS, DumpFile
from msprobe.core.graph.tree import ROOT, Graph, Node
from msprobe.core.services.log import logger

SUMMARY, MD5, TENSOR = "summary", "md5", "tensor"
SMALL_VALUE = {"float32": 1e-6, "float16": 1e-3, "bfloat16": 1e-3}  # per dtype (torch.* and MindSpore names)
DIFF_KEYS = ("Max diff", "Min diff", "Mean diff", "L2norm diff")
RELATIVE_KEYS = ("MaxRelativeErr", "MinRelativeErr", "MeanRelativeErr", "NormRelativeErr")
TENSOR_KEYS = ("Cosine", "MaxAbsErr", "MaxRelativeErr", "One Thousandth Err Ratio", "Five Thousandths Err Ratio")


@dataclass
class GraphComparison:
    mode: str  # summary | md5 | tensor
    results: list[RowResult]
    first_divergence: Divergence | None


def compare_graphs(npu_graph: Graph, bench_graph: Graph, npu: DumpFile, bench: DumpFile, loader: TensorLoader,
                   options: CompareOptions, stacks: dict[str, list[str]],
                   construct: dict[str, str | None] | None = None) -> GraphComparison:
    """Match the nodes of ``npu_graph`` to ``bench_graph`` and set the NPU nodes' precision data."""
    mode = check_modes(npu, bench)
    results = build_results(npu, bench, options)
    judge_results(results, npu, bench, loader, options)
    missing = sum(1 for r in results if r.not_compared)
    if missing:
        logger.warning("graph: %d argument(s) could not be compared (tensor files missing or unreadable); their "
                       "nodes' indices leave them out — the compare report names each one", missing)
    rows_of: dict[str, list[RowResult]] = {}
    partner_of: dict[str, str] = {}
    for result in results:
        if result.npu is not None:
            rows_of.setdefault(result.npu.entry, []).append(result)
            if result.bench is not None:
                partner_of.setdefault(result.npu.entry, result.bench.entry)
    _match(npu_graph, bench_graph, partner_of)
    for node in npu_graph.root.walk():
        if node.partner is not None and node.entry is not None:
            node.index = _index(mode, rows_of.get(node.id, []))
            node.excess = None if entry_kind(node.id, stacks) == OPTIMIZER_KIND else _excess(rows_of.get(node.id, []))
            node.row_fields = {r.npu.name: _row_fields(mode, r) for r in rows_of.get(node.id, [])
                               if r.npu is not None and r.bench is not None}
            arguments = differing_arguments(rows_of.get(node.id, []))
            if arguments:  # the call itself differs: the node is an origin (docs/compare.md)
                node.data["arguments_differ"] = ", ".join(arguments)
            amplified = [r.amplified_by for r in rows_of.get(node.id, []) if r.amplified]
            if amplified:
                node.data["rounding_amplified_by"] = amplified[0]
    _aggregate(npu_graph.root, mode)
    _aggregate_excess(npu_graph.root)
    for node in npu_graph.root.walk():
        if node.excess is not None:
            node.data["rounding_excess"] = node.excess if math.isfinite(node.excess) else str(node.excess)
        if node.index is not None:
            node.data["precision_index"] = node.index
            if mode == MD5:
                node.data["Result"] = PASS if node.index == 1 else "Different"
    return GraphComparison(mode, results, first_divergence(results, stacks, construct))


def _match(npu_graph: Graph, bench_graph: Graph, partner_of: dict[str, str]) -> None:
    for node in npu_graph.root.walk():
        if node.id == ROOT:
            other = bench_graph.root
        elif node.entry is not None:
            other = bench_graph.nodes.get(partner_of.get(node.id, ""))
        else:
            candidate = bench_graph.nodes.get(node.id)
            up = node.upnode.partner if node.upnode is not None else None
            other = candidate if candidate is not None and up is not None and candidate.upnode is up else None
        if other is None or other.partner is not None:
            continue
        node.partner, other.partner = other, node
        node.matched = other.ancestors() + [other.id]
        other.matched = node.ancestors() + [node.id]


def _index(mode: str, rows: list[RowResult]) -> float:
    paired = [r for r in rows if r.npu is not None and r.bench is not None and not r.uninitialised]
    if mode == MD5:
        return 0.0 if any(r.failed for r in paired) else 1.0
    if mode == TENSOR:
        def lowest(part: str) -> float | None:
            ratios = [r.tensor.one_thousandth_ratio for r in paired if r.part == part and r.tensor is not None
                      and r.tensor.one_thousandth_ratio is not None]
            return min([1.0, *ratios]) if ratios else None

        low_in, low_out = lowest("input"), lowest("output")
        if low_in is None or low_out is None:
            return 0.0
        return min(1.0, max(0.0, low_in - low_out))
    worst = [_summary_error(r) for r in paired if r.part == "output"]
    return min(1.0, max([0.0, *worst]))


def _excess(rows: list[RowResult]) -> float | None:
    """The largest rounding excess of the outputs and of the inputs no recorded call produced; a row computed
    from an ill-conditioned op counts up to 1 at most, as the first divergence counts it (judge.conditioning)."""
    known = [1.0 if r.amplified else r.excess for r in rows if r.excess is not None
             and r.npu is not None and r.bench is not None and (r.part == "output" or r.entering)]
    return max(known, default=None)


def _aggregate_excess(node: Node) -> float | None:
    """Post-order: a node without an entry takes the largest excess below it."""
    below = [e for e in (_aggregate_excess(sub) for sub in node.subnodes) if e is not None]
    if node.entry is None and node.id != ROOT:
        node.excess = max(below, default=None)
    return node.excess


def _stat_diffs(result: RowResult) -> tuple:
    """The four statistics' (diff, relative) of a tensor row; a number argument counts as all four, as 1.1.1
    shows it."""
    if result.stat_diffs or result.npu is None or result.bench is None:
        return result.stat_diffs
    values = [row.value.get("value") if isinstance(row.value, dict) else None for row in (result.npu, result.bench)]
    if result.npu.is_tensor or not all(isinstance(v, (int, float)) for v in values):
        return ()
    return (stat_diff(float(values[0]), float(values[1])),) * len(STAT_KEYS)


def _small_bound(value: dict) -> float | None:
    dtype = str(value.get("dtype", "")).lower().replace("torch.", "")
    return SMALL_VALUE.get(dtype)


def _summary_error(result: RowResult) -> float:
    """The largest relative error of the row's four statistics, with 1.1.1's small-value rule."""
    assert result.npu is not None
    bound = _small_bound(result.npu.value) if isinstance(result.npu.value, dict) else None
    worst = 0.0
    for key, (diff, rel) in zip(STAT_KEYS, _stat_diffs(result)):
        if diff is None:
            continue
        npu_value = stat_of(result.npu.value, key)
        if bound is not None and npu_value is not None and math.isfinite(diff) and abs(npu_value) <= bound:
            error = 0.0 if abs(diff) <= bound else 1.0
        elif rel is None or math.isnan(rel):
            error = 0.0 if diff == 0 else 1.0
        else:
            error = rel
        worst = max(worst, error)
    return worst


def _row_fields(mode: str, result: RowResult) -> dict:
    """The compare columns of one argument, as 1.1.1's .vis names them."""
    if mode == MD5:
        return {"Result": result.verdict}
    if mode == TENSOR:
        metrics = result.tensor
        if metrics is None:
            return {}
        values = (metrics.cosine, metrics.max_abs_err, metrics.max_relative_err, metrics.one_thousandth_ratio,
                  metrics.five_thousandths_ratio)
        return dict(zip(TENSOR_KEYS, values))
    diffs = _stat_diffs(result)
    if not diffs:
        return {}
    fields: dict = dict(zip(DIFF_KEYS, (diff for diff, _ in diffs)))
    for key, (_, rel) in zip(RELATIVE_KEYS, diffs):
        fields[key] = None if rel is None else f"{_percent(rel)}%"
    return fields


def _percent(rel: float) -> str:
    if not math.isfinite(rel):
        return "inf" if rel > 0 else "nan"
    return f"{rel * 100:.6f}"


def _aggregate(node: Node, mode: str) -> float | None:
    """Post-order: a node without an entry takes the worst index of its subnodes (not the root)."""
    below = [_aggregate(sub, mode) for sub in node.subnodes]
    if node.entry is None and node.id != ROOT:
        node.index = _worst(mode, (i for i in below if i is not None))
    return node.index


def _worst(mode: str, indices: Iterable[float]) -> float | None:
    known = list(indices)
    if not known:
        return None
    return min(known) if mode == MD5 else max(known)
