"""The graph as one self-contained HTML page (beyond 1.1.1, which needs its TensorBoard plugin).

No server and no network: the page is ``view.html`` (inline CSS and JavaScript, next to this module)
with the graph embedded as JSON. It shows the module tree collapsible, each node coloured by its
rounding excess — the first divergence's rule (md5: by its index), opens the first divergent node (compare) or the first
critical overflow (build with ``-oc``), searches node names, and shows a clicked node's inputs and
outputs side by side (NPU beside bench in a compare) with its stack.
"""

from __future__ import annotations

import html as html_escape
import json
from dataclasses import dataclass
from pathlib import Path

from msprobe.core.graph.tree import Graph, Node
from msprobe.core.graph.vis import (
    BANDS,
    DESCRIPTIONS,
    EXCESS_BANDS,
    EXCESS_DESCRIPTION,
    GREY,
    MD5,
    NOT_MATCHED,
    finite_or_text,
    node_io,
    rule_color,
)

TEMPLATE = Path(__file__).with_name("view.html")
_PAYLOAD_MARK = "/*GRAPH_DATA*/null"
_TITLE_MARK = "<!--TITLE-->"


@dataclass(frozen=True)
class View:
    mode: str  # build, summary, md5, tensor
    npu: Graph
    bench: Graph | None
    first_divergence: str | None  # node id to open first (compare)
    first_overflow: str | None  # first critical overflow node (-oc)
    title: str


def _node_payload(node: Node, mode: str) -> dict:
    inputs, outputs = node_io(node)
    return {
        "kind": node.kind,
        "up": node.upnode.id if node.upnode is not None else None,
        "sub": [sub.id for sub in node.subnodes],
        "index": node.index,
        "color": None if mode == "build" or node.upnode is None else rule_color(mode, node),
        "excess": finite_or_text(node.excess),
        "overflow": node.data.get("overflow_level"),
        "ranks": node.data.get("merged_ranks"),
        "inputs": list(inputs.items()),
        "outputs": list(outputs.items()),
        "stack": node.stack,
        "match": node.partner.id if node.partner is not None else None,
    }


def _graph_payload(graph: Graph, mode: str) -> dict:
    return {"root": graph.root.id, "nodes": {node.id: _node_payload(node, mode) for node in graph.root.walk()}}


def payload(view: View) -> dict:
    bands = BANDS[view.mode] if view.mode == MD5 else EXCESS_BANDS
    legend = [] if view.mode == "build" else [
        {"color": color, "label": f"{band[0]}" if band[0] == band[1] else f"{band[0]} – {band[1]}".replace("inf", "∞")}
        for color, band in bands] + [{"color": GREY, "label": NOT_MATCHED}]
    return {
        "mode": view.mode,
        "title": view.title,
        "first": view.first_divergence or view.first_overflow,
        "legendText": DESCRIPTIONS.get(view.mode, "") if view.mode == MD5 else EXCESS_DESCRIPTION,
        "legend": legend,
        "npu": _graph_payload(view.npu, view.mode),
        "bench": _graph_payload(view.bench, view.mode) if view.bench is not None else None,
    }


def render(view: View) -> str:
    data = json.dumps(payload(view), allow_nan=False, default=str)
    # keep the embedded JSON from closing the <script> element or opening a comment
    data = data.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    page = TEMPLATE.read_text(encoding="utf-8")
    return page.replace(_TITLE_MARK, html_escape.escape(view.title)).replace(_PAYLOAD_MARK, data)
