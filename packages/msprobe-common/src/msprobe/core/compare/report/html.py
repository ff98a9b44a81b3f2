"""compare_result_*.html: one self-contained file (no network) that starts with the answer.

The page runs from the first divergence (with the rule that chose it and, with ``--attribute``, the
suspects' attribution) to the full table, as docs/compare.md#reports describes. Rows are embedded as a
JavaScript literal (:func:`~.escape.script_literal`: NaN and Infinity survive, no name can end the script),
every other name is HTML-escaped, and the table (``HTML_MAX_ROWS``) and chart (``CHART_POINTS``) are capped
so a browser can open the report of any dump, keeping the rows that matter first.
"""

from __future__ import annotations

import functools
import html
import json
import math
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from msprobe.core.compare.judge import (
    BACKWARD_SLACK,
    CAUSES,
    CROSS_FRAMEWORK_SLACK,
    FORWARD_SLACK,
    PARTS,
    CompareResult,
    Divergence,
    ErrorShare,
    RowResult,
    describe,
    describe_unit,
    worst_rows,
)
from msprobe.core.compare.report.escape import script_literal
from msprobe.core.services.fileio import atomic_write_text

HTML_MAX_ROWS = 20_000
CHART_POINTS = 2_000


@functools.cache
def page_asset(name: str) -> str:
    """The page's stylesheet (``page.css``) or script (``page.js``): package data beside this module, kept out of
    Python strings so an editor and a linter see them as what they are."""
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def _e(value: Any) -> str:
    return html.escape(str(value))


EXCESS_COLUMN = "Rounding excess"


def _rule(result: CompareResult) -> str:
    wider = CROSS_FRAMEWORK_SLACK if result.cross_framework else 1.0
    why = f" ({wider:g} times the same-framework slacks: two implementations of each kernel)" if wider != 1 else ""
    return (f"A row differs beyond rounding when ‖NPU − bench‖ exceeds slack × u × its scale: u = "
            f"{_e(describe_unit(result.unit))}, the coarsest dtype of the two dumps; slack {FORWARD_SLACK * wider:g} "
            f"forward, {BACKWARD_SLACK * wider:g} backward{why} (statistics: each of Max/Min/Mean/Norm against the "
            f"tensor's scale), plus what the entry's passing inputs carry in: their relative deviation times the "
            f"larger of their scale and the output's; an input an earlier entry output has that output's excess.")


def _entry_rows(found: Divergence) -> str:
    rows = [e.row for e in found.entering] + found.failing_rows
    return "".join(f"<li>{_e(r.npu.name if r.npu else r.bench.name)}: {_excess_text(r.excess)} "
                   f"1.1.1 verdict {_e(r.verdict or 'none')}. {_e(' '.join(r.messages))}</li>"
                   for r in rows)


def _excess_text(excess: float | None) -> str:
    return "" if excess is None else f"{excess:.3g}× what rounding explains;"


def _divergence_section(result: CompareResult) -> str:
    found = result.first_divergence
    rule = f"<p>{_rule(result)}</p>"
    if not result.analyzed:
        return '<div class="box ok">First-divergence analysis was not asked for (-c).</div>'
    if found is None:
        return f'<div class="box ok"><b>No divergence found:</b> no forward or backward output differs beyond ' \
               f"rounding.{rule}</div>"
    how = _e(found.enters()) or ("its inputs pass, so the error was made here" if found.inputs_pass
                                       else "its inputs already diverge; no entry has diverging outputs with "
                                            "passing inputs")
    how = f"{_e(found.called_with())}; {how}" if found.arguments else how
    local = result.attribution.first_local if result.attribution is not None else None
    if local is not None and local.entry == found.entry:
        how = f"the earliest API the replays find made here — {_e(describe(local))}"
    stack = "".join(f"<pre>{_e(frame)}</pre>" for frame in found.stack) or "<p>No stack recorded.</p>"
    return (f'<div class="box"><b>First divergence: {_e(found.entry)}</b> (row {found.position + 1}; {how})'
            f"<ul>{_entry_rows(found)}</ul><b>Stack</b>{stack}{rule}</div>")


def _attribution_section(result: CompareResult) -> str:
    """--attribute: the suspects as a chain from the last back to where the error was made
    (inherited → ... → local), then each one's numbers, or the config that dumps their tensors."""
    found = result.attribution
    if found is None:
        return ""
    head = "<h2>Attribution</h2>"
    if not found.entries:
        return f"{head}<p>No forward API output differs beyond rounding: nothing to replay.</p>"
    if found.config is not None:
        return (f'{head}<div class="box"><b>The dumps hold statistics only:</b> attribution replays an API with '
                f"the bench's input tensors. Dump both runs again with this config (written to "
                f"{_e(found.config_path)}), then compare with --attribute again:<pre>"
                f"{_e(json.dumps(found.config, indent=2))}</pre></div>")
    chain = [e for e in found.entries if e.verdict]
    local = found.first_local
    if local is not None:
        chain = [e for e in chain if e.suspect.position >= local.suspect.position]
    links = " → ".join(f"{_e(e.entry)} <b>({_e(e.label)})</b>" for e in reversed(chain))
    rows = [[e.entry, e.label or "not replayed", *(c for p in PARTS for c in _share_text(e.worst(p))), e.reason]
            for e in found.entries]
    header = ["API", "verdict", *(f"{CAUSES[p]}: {m}" for p in PARTS for m in ("rel. norm err", "× rounding")),
              "why not replayed"]
    return (f"{head}<p>The first {len(found.entries)} diverging forward APIs (at most {found.limit}), each "
            f"{_e(found.method)}. Chain, last to first:</p><p>{links or 'none'}</p>"
            f"{_small_table(header, rows, [''] * len(rows))}")


def _share_text(share: ErrorShare | None) -> list[Any]:
    if share is None:
        return ["", ""]
    return ["None" if share.norm_rel is None else f"{share.norm_rel:.4g}",
            "None" if share.excess is None else f"{share.excess:.3g}"]


def _optimizer_section(result: CompareResult, limit: int = 50) -> str:
    if not result.optimizer:
        return ""
    shown = result.optimizer[:limit]
    more = f"<p>... and {len(result.optimizer) - limit} more.</p>" if len(result.optimizer) > limit else ""
    items = "".join(f"<li>{_e(d.entry)} (row {d.position + 1}): {_excess_text(d.excess)}</li>" for d in shown)
    return (f"<h2>Optimizer</h2><p>{len(result.optimizer)} entries called from optimizer code differ beyond "
            f"rounding. They are not taken as the first divergence: an optimizer step divides by the square root "
            f"of tiny second moments, so the rounding noise of a near-zero gradient becomes a full-size update.</p>"
            f"<ul>{items}</ul>{more}")


def _amplified_section(result: CompareResult) -> str:
    found = result.amplified
    if found is None:
        return ""
    return (f"<h2>Rounding amplified</h2><p>{found.rows} rows computed from {_e(found.origin)} differ beyond rounding "
            f"(at most {_excess_text(found.worst)}). They are not taken as divergences: an ill-conditioned op "
            f"amplifies rounding beyond any bound a compare could check, so a fault after it shows only where it "
            f"enters through a parameter. Their Rounding excess stays in the table.</p>")


def _small_table(header: list[str], rows: list[list[Any]], highlights: list[str]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join(
        f'<tr class="{h}">' + "".join(f"<td>{_e(v)}</td>" for v in cells) + "</tr>"
        for cells, h in zip(rows, highlights)
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _series(result: RowResult) -> tuple[float | None, float | None]:
    """(cosine, relative error) of one row for the chart."""
    if result.tensor is not None:
        rel = result.tensor.max_relative_err
        return result.tensor.cosine, rel if rel is not None and math.isfinite(rel) else None
    rels = [r for _, r in result.stat_diffs if r is not None and math.isfinite(r)]
    return None, max(rels) if rels else None


def _buckets(results: list[RowResult]) -> list[tuple[float | None, float | None]]:
    """At most CHART_POINTS (cosine, relative error) points: each the lowest cosine and highest error of its rows."""
    size = max(1, math.ceil(len(results) / CHART_POINTS))
    points = []
    for start in range(0, len(results), size):
        series = [_series(r) for r in results[start:start + size]]
        cos = [c for c, _ in series if c is not None]
        rel = [r for _, r in series if r is not None]
        points.append((min(cos) if cos else None, max(rel) if rel else None))
    return points


def _chart(results: list[RowResult], mark: int | None) -> str:
    """Inline SVG: Cosine (blue, 0..1 scale) and log10 relative error (orange) along execution order."""
    points = _buckets(results)
    width, height, n = 1000, 220, max(len(points), 1)
    scale = max(1, math.ceil(len(results) / CHART_POINTS))

    def x(i: int) -> float:
        return 40 + (width - 50) * i / max(n - 1, 1)

    def line(values: list[tuple[int, float]], colour: str) -> str:
        coords = " ".join(f"{x(i):.1f},{y:.1f}" for i, y in values)
        return f'<polyline fill="none" stroke="{colour}" stroke-width="1.2" points="{coords}"/>' if values else ""

    cos = [(i, 10 + (height - 30) * (1 - max(min(c, 1.0), 0.0))) for i, (c, _) in enumerate(points) if c is not None]
    rel = [(i, 10 + (height - 30) * (-max(min(math.log10(max(r, 1e-12)), 0.0), -12.0) / 12))
           for i, (_, r) in enumerate(points) if r is not None]
    marker = (f'<line x1="{x(mark // scale):.1f}" x2="{x(mark // scale):.1f}" y1="5" y2="{height - 20}" '
              f'stroke="red" stroke-dasharray="4"/>' if mark is not None else "")
    per_point = f" · {scale} rows per point, worst shown" if scale > 1 else ""
    return (f'<svg width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg">'
            f'<rect x="40" y="10" width="{width - 50}" height="{height - 30}" fill="#fafafa" stroke="#ccc"/>'
            f'<text x="2" y="18" font-size="10">1 / 1</text>'
            f'<text x="2" y="{height - 20}" font-size="10">0 / 1e-12</text>'
            f"{line(cos, '#1f5fbf')}{line(rel, '#e07b00')}{marker}"
            f'<text x="45" y="{height - 5}" font-size="11"><tspan fill="#1f5fbf">Cosine</tspan> · '
            f'<tspan fill="#e07b00">relative error (log10, 1 at top)</tspan> · rows in execution order'
            f"{per_point}{' · red: first divergence' if marker else ''}</text></svg>")


def embedded_rows(result: CompareResult, worst: list[RowResult], max_rows: int) -> list[int]:
    """Indices of the rows the page embeds, in execution order: all of them up to ``max_rows``; past it
    the first divergence's entry and the attributed suspects', the worst rows, highlighted rows, then the
    rest in order."""
    total = len(result.results)
    if total <= max_rows:
        return list(range(total))
    index_of = {id(r): i for i, r in enumerate(result.results)}
    chosen: dict[int, None] = {}
    suspects = [e.suspect for e in result.attribution.entries] if result.attribution is not None else []
    for found in (result.first_divergence, *suspects):
        if found is None:
            continue
        end = found.position
        while end < total and result.results[end].entry == found.entry:
            end += 1
        chosen.update(dict.fromkeys(range(found.position, end)))
    chosen.update(dict.fromkeys(index_of[id(r)] for r in worst))
    for highlighted_only in (True, False):
        for index, row in enumerate(result.results):
            if len(chosen) >= max_rows:
                return sorted(list(chosen)[:max_rows])
            if row.highlight or not highlighted_only:
                chosen.setdefault(index)
    return sorted(chosen)


def _table_note(shown: int, total: int, full_reports: list[Path]) -> str:
    where = " and ".join(_e(p.name) for p in full_reports) or "the xlsx/csv report"
    if shown == total:
        return f"<p>All {total} rows; also in {where}.</p>"
    return (f'<div class="box"><b>{shown} of {total} rows embedded</b> to keep this page usable: the first '
            f"divergence, the worst rows, highlighted rows, then rows in execution order (the Row column is the "
            f"row's number in the full table). <b>The full table is in {where}</b> next to this file.</div>")


def _not_compared(result: CompareResult) -> str:
    if not result.not_compared:
        return ""
    return (f'<div class="box"><b>{result.not_compared} rows could not be compared:</b> their tensor files are '
            f"missing or unreadable (filter the table by 'Dump file' for the reasons).</div>")


def _excess_cell(result: RowResult) -> float | str:
    return "None" if result.excess is None else result.excess


def write_html(path: Path, result: CompareResult, header: list[str], cells_of: Callable[[RowResult], list[Any]],
               full_reports: list[Path], max_rows: int = HTML_MAX_ROWS) -> int:
    """Write the page; returns how many table rows it embeds (at most ``max_rows``)."""
    worst = worst_rows(result.results)
    shown = embedded_rows(result, worst, max_rows)
    rows = [{"n": i + 1, "c": [*cells_of(result.results[i]), _excess_cell(result.results[i])],
             "h": result.results[i].highlight} for i in shown]
    literal = script_literal({"header": [*header, EXCESS_COLUMN], "rows": rows})
    worst_table = _small_table(header, [cells_of(r) for r in worst], [r.highlight for r in worst])
    mark = result.first_divergence.position if result.first_divergence else None
    page = (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>msprobe compare</title>"
        f"<style>\n{page_asset('page.css')}</style>"
        f"</head><body><h1>msprobe compare ({_e(result.mode)} mode)</h1>"
        f"<p>NPU: {_e(result.npu_path)}<br>Bench: {_e(result.bench_path)}</p>{_not_compared(result)}"
        f"<h2>First divergence</h2>{_divergence_section(result)}{_attribution_section(result)}"
        f"{_amplified_section(result)}{_optimizer_section(result)}"
        f"<h2>Worst rows</h2>{worst_table}"
        f"<h2>Along execution order</h2>{_chart(result.results, mark)}"
        f"<h2>All rows</h2>{_table_note(len(shown), len(result.results), full_reports)}"
        f"<p><input id='q' placeholder='filter (any column)' size='40'> "
        f"<label><input type='checkbox' id='bad'> highlighted rows only</label> <span id='n'></span></p>"
        f"<div id='wrap'><table><thead><tr id='th'></tr></thead><tbody id='tb'></tbody></table></div>"
        f"<script>const DATA = {literal};\n{page_asset('page.js')}</script></body></html>"
    )
    atomic_write_text(path, page)
    return len(shown)
