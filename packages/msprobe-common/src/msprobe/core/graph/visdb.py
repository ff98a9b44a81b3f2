"""The graphs of one ``msprobe graph`` run as one SQLite ``.vis.db`` (``--file_type db``, docs/graph.md#the-visdb-file).

msprobe 26.2.0's TensorBoard graph plugin (``tb-graph-ascend``) lists a directory's ``.vis.db`` and reads three
tables from it: ``tb_config`` (one row: build or compare, the task, tool tips, colours, the ranks and steps),
``tb_nodes`` (one row per node of each side, rank and step, in the tree's order, its arguments as JSON) and
``tb_stack`` (the distinct stacks, which nodes name by id). The plugin takes the first ``.vis.db`` of a directory
only, so every graph of the run (each rank and step, both sides of a compare) goes into one file. The rows are
made from the same ``.vis`` document as the ``.vis`` file (:mod:`.vis`), so both say the same, but for one naming
rule of 26.2.0's: a ``parameters_grad`` node's rows are named by parameter (``...parameters_grad.0.weight``), not
by the compare's row name (``...parameters_grad.0.weight.0``).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from msprobe.core.lifecycle.naming import PARAMETERS_GRAD
from msprobe.core.services.fileio import PendingFile

_TEXT_KEY, _TEXT_NN, _INT_NN, _TEXT, _INT = "TEXT PRIMARY KEY", "TEXT NOT NULL", "INTEGER NOT NULL", "TEXT", "INTEGER"
NODE_COLUMNS = {
    "id": _TEXT_KEY, "graph_id": _TEXT_NN, "node_order": _INT_NN, "node_name": _TEXT_NN, "node_type": _TEXT_NN,
    "up_node": _TEXT, "sub_nodes": _TEXT, "precision_index": _INT, "overflow_level": _TEXT,
    "micro_step_id": _INT_NN, "matched_node_link": _TEXT, "stack_id": _TEXT, "parallel_merge_info": _TEXT,
    "matched_distributed": _TEXT, "modified": _INT_NN, "input_data": _TEXT, "output_data": _TEXT,
    "data_source": _TEXT, "dump_data_dir": _TEXT, "step": _INT_NN, "rank": _INT_NN, "is_distributed": _INT,
}
CONFIG_COLUMNS = {
    "id": _TEXT_KEY, "graph_type": _TEXT_NN, "task": _TEXT, "tool_tip": _TEXT, "micro_steps": _INT,
    "overflow_check": _INT, "node_colors": _TEXT_NN, "rank_list": _TEXT_NN, "step_list": _TEXT_NN,
}
STACK_COLUMNS = {"id": _TEXT_KEY, "stack_info": _TEXT}
# the plugin's queries go by step, rank, side and parent or order
INDEXES = {
    "index1": ("step", "rank", "data_source", "up_node", "node_order"),
    "index2": ("step", "rank", "data_source", "node_name"),
    "index3": ("step", "rank", "data_source", "node_order"),
    "index4": ("step", "rank", "node_order"),
    "index5": ("step", "rank", "micro_step_id", "node_order"),
    "index6": ("step", "rank", "modified", "matched_node_link"),
    "index7": ("is_distributed",),
}
NPU, BENCH = "NPU", "Bench"


def _create(table: str, columns: dict[str, str]) -> str:
    return f"CREATE TABLE {table} ({', '.join(f'{name} {kind}' for name, kind in columns.items())})"


def _insert(table: str, columns: dict[str, str]) -> str:
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"


class VisDb:
    """One ``.vis.db`` being written: graphs are added one rank and step at a time (:meth:`add`), the config row
    and the indexes at :meth:`close`, and the file appears complete in one rename."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._pending = PendingFile(path)
        self._connection = sqlite3.connect(self._pending.temp)
        for table, columns in (("tb_nodes", NODE_COLUMNS), ("tb_config", CONFIG_COLUMNS), ("tb_stack", STACK_COLUMNS)):
            self._connection.execute(_create(table, columns))
        self._ranks: set[int] = set()
        self._steps: set[int] = set()
        self._config: dict = {}

    def add(self, document: dict, step: int, rank: int, overflow_check: bool) -> None:
        """One rank and step's ``.vis`` document (a build's one graph, or a compare's NPU and Bench)."""
        compare = "NPU" in document
        sides = {NPU: document["NPU"], BENCH: document["Bench"]} if compare else {NPU: document}
        for source, graph in sides.items():
            self._add_graph(graph, source, step, rank)
        self._ranks.add(rank)
        self._steps.add(step)
        self._config = {"graph_type": "compare" if compare else "build", "task": document.get("task", ""),
                        "tool_tip": document.get("ToolTip"), "micro_steps": document.get("MicroSteps", 1),
                        "overflow_check": int(overflow_check), "node_colors": json.dumps(document.get("Colors"))}

    def _add_graph(self, graph: dict, source: str, step: int, rank: int) -> None:
        graph_id = f"{source}_{step}_{rank}"
        stacks: dict[str, str] = {}
        rows = []
        for order, (name, node) in enumerate(graph["node"].items()):
            stack = json.dumps(node.get("stack_info") or [])
            stack_id = stacks.setdefault(stack, f"{graph_id}_{len(stacks)}")
            data = node.get("data") or {}
            rows.append((
                f"{graph_id}_{name}", graph_id, order, name, str(node["node_type"]),
                "" if node["upnode"] == "None" else node["upnode"],
                json.dumps(node["subnodes"]) if node["subnodes"] else "", data.get("precision_index"),
                data.get("overflow_level"), node.get("micro_step_id") or 0, json.dumps(node["matched_node_link"]),
                stack_id, "", "{}", 0, json.dumps(_rows_26(name, node["input_data"])), json.dumps(node["output_data"]),
                source,
                graph.get("dump_data_dir"), step, rank, int(name.startswith("Distributed")),
            ))
        self._connection.executemany(_insert("tb_nodes", NODE_COLUMNS), rows)
        self._connection.executemany(_insert("tb_stack", STACK_COLUMNS), [(i, s) for s, i in stacks.items()])

    def close(self) -> Path:
        config = {"id": "1", **self._config, "rank_list": json.dumps(sorted(self._ranks)),
                  "step_list": json.dumps(sorted(self._steps))}
        self._connection.execute(_insert("tb_config", CONFIG_COLUMNS), [config[c] for c in CONFIG_COLUMNS])
        for name, columns in INDEXES.items():
            self._connection.execute(f"CREATE INDEX {name} ON tb_nodes ({', '.join(columns)})")
        self._connection.commit()
        self._connection.close()
        self._pending.commit(sync=True)
        return self.path

    def discard(self) -> None:
        self._connection.close()
        self._pending.discard()


def _rows_26(name: str, rows: dict) -> dict:
    """A node's argument rows under 26.2.0's names: a ``parameters_grad`` entry's ``{parameter}.0`` (a
    parameter has one gradient) as ``{parameter}``; any other node's as they are."""
    if f".{PARAMETERS_GRAD}." not in name:
        return rows
    return {key.removesuffix(".0") if f"{key.removesuffix('.0')}.1" not in rows else key: value
            for key, value in rows.items()}
