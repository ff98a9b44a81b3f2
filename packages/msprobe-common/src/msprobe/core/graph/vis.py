"""The ``.vis`` file: msprobe 1.1.1's graph document, which its TensorBoard plugin opens.

A build document is one graph: ``{"root", "dump_data_dir", "node": {id: node}, "MicroSteps"}``; a
compare document holds two, ``{"NPU": graph, "Bench": graph, "ToolTip", "Colors", "MicroSteps",
"task"}``. Every node has ``id``, ``node_type`` (0 module, 1 API, 9 API collection), ``input_data`` and
``output_data`` (argument name → fields, values as strings as 1.1.1 writes them), ``upnode`` (``"None"``
for the root), ``subnodes``, ``matched_node_link``, ``suggestions``, ``stack_info``, ``data``
(``precision_index``, ``rounding_excess``, md5 ``Result``, ``overflow_level``, ``merged_ranks``) and, for the
root's children, ``micro_step_id``. The colour bands per mode (``Colors``) are 1.1.1's, over
``precision_index``, which is what 1.1.1's plugin colours by; our HTML view colours by ``rounding_excess``
(:data:`EXCESS_BANDS`), the first divergence's rule. The descriptions are ours.
"""

from __future__ import annotations

import json
import math
from typing import Any

from msprobe.core.compare.read import SHARDS, SOURCE, flatten_entry, merge_note
from msprobe.core.graph.compare import MD5, SUMMARY, TENSOR
from msprobe.core.graph.tree import API, MODULE, Graph, Node

GREY = "#C7C7C7"
# (colour, [low, high)) per mode; md5 uses fixed values: 1 same, 0 different
BANDS = {
    SUMMARY: [("#FFFCF3", [0, 0.2]), ("#FFEDBE", [0.2, 0.4]), ("#FFDC7F", [0.4, 0.6]), ("#FFC62E", [0.6, 0.8]),
              ("#FF704D", [0.8, 1])],
    TENSOR: [("#FFFCF3", [0, 0.05]), ("#FFEDBE", [0.05, 0.1]), ("#FFDC7F", [0.1, 0.15]), ("#FFC62E", [0.15, 0.2]),
             ("#FF704D", [0.2, 1])],
    MD5: [("#FFFCF3", [1, 1]), ("#FF704D", [0, 0])],
}
DESCRIPTIONS = {
    SUMMARY: "largest relative error of the node's output statistics (Max, Min, Mean, Norm) against the bench, "
             "|(npu - bench) / bench|, capped at 1; higher is worse",
    TENSOR: "how much the smallest One Thousandth Err Ratio falls from the node's inputs to its outputs "
            "(0 to 1); higher is worse",
    MD5: "1: every argument's checksum equals the bench's; 0: some differ",
}
NOT_MATCHED = "the node has no match in the bench graph"
TASKS = {SUMMARY: "summary", MD5: "md5", TENSOR: "all"}  # the .vis "task" of each mode (1.1.1's dump modes)
TOOL_TIPS = {
    SUMMARY: {"Max diff": "NPU Max minus bench Max", "Min diff": "NPU Min minus bench Min",
              "Mean diff": "NPU Mean minus bench Mean", "L2norm diff": "NPU L2 norm minus bench L2 norm"},
    MD5: {"md5": "CRC-32 of the tensor's bytes: equal checksums mean identical data"},
    TENSOR: {"One Thousandth Err Ratio": "fraction of elements whose relative error is below 0.001 (1 is best)",
             "Five Thousandths Err Ratio": "fraction of elements whose relative error is below 0.005 (1 is best)",
             "Cosine": "cosine similarity of the two tensors (1 is best; below 0.99 is suspect)",
             "MaxAbsErr": "largest absolute difference of an element (0 is best)",
             "MaxRelativeErr": "largest relative difference of an element (0 is best)"},
}
SUGGESTIONS = {
    MODULE: "This module's precision looks wrong: dump its APIs (level mix or L1, list: [module name]) and compare "
            "them to find the API where it starts.",
    API: "This API's precision looks wrong: check it against a CPU reference with msprobe run_ut.",
}
_HIDDEN = ("requires_grad", SOURCE, SHARDS)  # not shown in a node: 1.1.1 does not; merge bookkeeping


# The view's colours by the first divergence's rule (compare.judge.rounding): (colour, [low, high)) of the node's
# rounding excess; red only beyond rounding. md5 has no rounding: its nodes keep the index bands.
EXCESS_BANDS = [("#FFFCF3", [0, 0.5]), ("#FFEDBE", [0.5, 1]), ("#FF704D", [1, math.inf])]
EXCESS_DESCRIPTION = ("the node's largest difference over what rounding in the two runs' dtypes explains (the "
                      "compare's Rounding excess, of its outputs and of inputs no recorded call produced); above 1: "
                      "beyond rounding, as the first divergence judges")


def rule_color(mode: str, node: Node) -> str:
    """The colour of a compared node: md5 by its index; otherwise by its rounding excess (grey: unmatched)."""
    if mode == MD5 or node.index is None:
        return color_of(mode, node.index)
    excess = 0.0 if node.excess is None or math.isnan(node.excess) else node.excess  # inf: where rounding allows none
    return next(color for color, (low, high) in EXCESS_BANDS if low <= excess < high or excess == high)


def finite_or_text(value: float | None) -> float | str | None:
    """A number for JSON: ``inf`` / ``nan`` as text (JSON has no such numbers)."""
    return value if value is None or math.isfinite(value) else text(value)


def color_of(mode: str, index: float | None) -> str:
    """The band colour of a precision index (grey when there is none)."""
    if index is None:
        return GREY
    for color, (low, high) in BANDS[mode]:
        if (low == high and index == low) or low <= index < high or (index == high == 1):
            return color
    return GREY


def colors(mode: str) -> dict:
    legend = {color: {"value": band, "description": DESCRIPTIONS[mode]} for color, band in BANDS[mode]}
    legend[GREY] = {"value": [], "description": NOT_MATCHED}
    return legend


def text(value: Any) -> str:
    """A number or value as 1.1.1 writes it in a node: a string, floats to 6 decimals or digits."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
        if value != 0 and (abs(value) < 1e-4 or abs(value) >= 1e15):
            return f"{value:.6e}"
        return str(round(value, 6))
    return str(value)


def arg_fields(value: Any) -> dict:
    """The fields of one argument leaf: a tensor's type, dtype, shape, statistics, data_name and what else
    dump.json records (md5, Max_except_inf_nan, ...; not requires_grad, as 1.1.1); a value merged from ranks
    says which in ``merged`` (compare's Err_message note), the members the merge adds are not shown;
    a scalar's type and value; ``{"value": "null"}`` for None."""
    if isinstance(value, dict) and "shape" in value and "dtype" in value:
        fields = {"type": value.get("type"), "dtype": value.get("dtype"), "shape": value.get("shape")}
        fields.update({k: value.get(k) for k in ("Max", "Min", "Mean", "Norm")})
        fields["data_name"] = value.get("data_name", "-1")
        fields.update({k: v for k, v in value.items() if k not in fields and k not in _HIDDEN})
        if SHARDS in value:
            fields["merged"] = merge_note(value)
        return {k: text(v) for k, v in fields.items()}
    if isinstance(value, dict) and "type" in value:
        fields = {k: text(v) for k, v in value.items()}
        fields.setdefault("value", "null")
        fields["data_name"] = "-1"
        if value["type"] in ("int", "float", "bool"):  # 1.1.1 shows a number in the statistics columns too
            fields.update(dict.fromkeys(("Max", "Min", "Mean", "Norm"), fields["value"]), dtype=value["type"],
                          shape="[]")
        return fields
    if value is None:
        return {"value": "null"}
    return {"type": type(value).__name__, "value": text(value), "data_name": "-1"}


def mark_merged(graph: Graph) -> None:
    """``data.merged_ranks`` ("0,1"): the ranks a node's values were merged from (compare.read.shards); nothing on
    the nodes of a dump that was not merged."""
    for node in graph.root.walk():
        rows = flatten_entry(node.id, node.entry) if node.entry is not None else []
        ranks = {r for row in rows if isinstance(row.value, dict) and isinstance(row.value.get(SHARDS), dict)
                 for r in row.value[SHARDS].get("ranks", ())}
        if ranks:
            node.data["merged_ranks"] = ",".join(map(str, sorted(ranks)))


def node_io(node: Node) -> tuple[dict, dict]:
    """input_data and output_data of a node: each argument row with its compare columns."""
    inputs: dict[str, dict] = {}
    outputs: dict[str, dict] = {}
    for row in flatten_entry(node.id, node.entry) if node.entry is not None else []:
        fields = arg_fields(row.value)
        fields.update({k: text(v) for k, v in node.row_fields.get(row.name, {}).items()})
        (outputs if row.part == "output" else inputs)[row.name] = fields
    return inputs, outputs


def node_dict(node: Node) -> dict:
    inputs, outputs = node_io(node)
    result = {
        "id": node.id,
        "node_type": node.kind,
        "output_data": outputs,
        "input_data": inputs,
        "upnode": node.upnode.id if node.upnode is not None else "None",
        "subnodes": [sub.id for sub in node.subnodes],
        "matched_node_link": node.matched,
        "suggestions": node.suggestions,
        "stack_info": node.stack,
    }
    if node.micro_step is not None:
        result["micro_step_id"] = node.micro_step
    result["data"] = node.data
    return result


def graph_dict(graph: Graph) -> dict:
    return {"root": graph.root.id, "dump_data_dir": graph.dump_data_dir,
            "node": {node.id: node_dict(node) for node in graph.root.walk()}}


def suspect(node: Node, mode: str) -> bool:
    """The node is beyond rounding (md5: differs): it gets a suggestion, and is red in the view."""
    if mode == MD5:
        return node.index == 0
    return node.excess is not None and node.excess > 1


def suggest(graph: Graph, mode: str) -> None:
    """1.1.1's suggestions on suspect nodes."""
    for node in graph.root.walk():
        if suspect(node, mode) and node.kind in SUGGESTIONS:
            node.suggestions = {"text": SUGGESTIONS[node.kind]}


def first_suspect(graph: Graph, entries: dict, mode: str) -> str | None:
    """The first suspect entry in execution order: what the HTML view opens when the compare names no first
    divergence (an optimizer entry is never a suspect)."""
    return next((name for name in entries if name in graph.nodes and suspect(graph.nodes[name], mode)), None)


def build_document(graph: Graph, micro_steps: int) -> dict:
    return {**graph_dict(graph), "MicroSteps": micro_steps}


def compare_document(npu: Graph, bench: Graph, mode: str, micro_steps: int) -> dict:
    return {"NPU": graph_dict(npu), "Bench": graph_dict(bench), "ToolTip": json.dumps(TOOL_TIPS[mode]),
            "Colors": colors(mode), "MicroSteps": micro_steps, "task": TASKS[mode]}
