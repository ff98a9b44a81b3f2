"""The model's hierarchy from one dump: which node sits inside which.

Parents come from ``construct.json`` (L0, mix), a backward entry without one goes beside its forward twin's
place, an L1 dump is grouped by the ``forward``/``construct`` frames of its stacks (approximate), and runs of
APIs at the root become ``Apis_Between_Modules.{n}`` as in 1.1.1: docs/graph.md#how-the-tree-is-built.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import PurePath

from msprobe.core.compare.judge import stack_of
from msprobe.core.lifecycle.naming import BACKWARD, FORWARD, MODULE_KINDS, PARAMETERS_GRAD, direction_of, parse_name

ROOT = "DefaultModel"
APIS_BETWEEN_MODULES = "Apis_Between_Modules"
MODULE, API, API_COLLECTION = 0, 1, 9  # 1.1.1's node_type values
_FRAME = re.compile(r"^File (?P<file>.*?), line (?P<line>\d+), in (?P<func>[^,]+)")
_GROUP_METHODS = {"forward": "Module", "construct": "Cell"}


@dataclass(eq=False, repr=False)
class Node:
    """One node of the graph: an entry of the dump, a group inferred from stacks, or a collection."""

    id: str
    kind: int
    upnode: Node | None = None
    subnodes: list[Node] = field(default_factory=list)
    entry: dict | None = None  # the dump.json entry, None for groups and the root
    stack: list[str] = field(default_factory=list)
    micro_step: int | None = None
    # filled by the compare (graph.compare) and the overflow marking (graph.overflow)
    index: float | None = None  # precision index: 0 best, 1 worst (md5: 1 same, 0 different)
    excess: float | None = None  # the compare's rounding excess (compare.judge.rounding): above 1 beyond rounding
    data: dict = field(default_factory=dict)  # .vis "data": precision_index, Result, overflow_level
    row_fields: dict[str, dict] = field(default_factory=dict)  # row name -> its compare columns
    matched: list[str] = field(default_factory=list)  # the matched node's path in the other graph
    partner: Node | None = None
    suggestions: dict = field(default_factory=dict)

    def ancestors(self) -> list[str]:
        """Ids from the root down to this node's parent."""
        chain, node = [], self.upnode
        while node is not None:
            chain.append(node.id)
            node = node.upnode
        return chain[::-1]

    def walk(self):
        """This node and every node below it, parents before children."""
        yield self
        for sub in self.subnodes:
            yield from sub.walk()


@dataclass(eq=False)
class Graph:
    root: Node
    nodes: dict[str, Node]
    dump_data_dir: str | None
    inferred: bool = False  # groups come from stacks (L1), not from construct.json

    def add(self, node_id: str, kind: int, parent: Node | None) -> Node:
        node = self.nodes.get(node_id)
        if node is None:
            node = self.nodes[node_id] = Node(node_id, kind)
        if parent is not None and node.upnode is None and node is not self.root and parent is not node:
            node.upnode = parent
            parent.subnodes.append(node)
        return node


def kind_of(name: str) -> int:
    return MODULE if name.split(".", 1)[0] in MODULE_KINDS else API


def _twin(name: str, direction: str) -> str | None:
    try:
        return parse_name(name).twin(direction)
    except ValueError:
        return None


_PARAMETERS_GRAD = f".{PARAMETERS_GRAD}."


def build_graph(entries: dict[str, dict], construct: dict[str, str | None], stacks: dict[str, list[str]],
                dump_data_dir: str | None = None) -> Graph:
    """The graph of one dump: ``entries`` (dump.json ``data``), ``construct`` (construct.json) and
    ``stacks`` (stack.json)."""
    root = Node(ROOT, MODULE)
    graph = Graph(root, {ROOT: root}, dump_data_dir)
    names = list(entries) + [n for n in construct if n not in entries]
    if any(kind_of(n) == MODULE for n in names):
        parents = _construct_parents(names, construct)
    else:
        graph.inferred = any(stacks.get(n) for n in names)
        parents = _stack_parents(names, stacks)
    for name in names:
        _place(graph, name, parents)
    for node in graph.nodes.values():
        if node is not root:
            node.entry = entries.get(node.id)
            node.stack = stack_of(node.id, stacks)
    _collect_apis_between_modules(graph)
    return graph


def _place(graph: Graph, name: str, parents: dict[str, str | None], visiting: frozenset[str] = frozenset()) -> Node:
    """Create ``name`` and its ancestors, parents first, so siblings keep the order they started in.
    A parent chain that loops back (a damaged construct.json) is cut at the root."""
    if name in graph.nodes:
        return graph.nodes[name]
    parent_name = parents.get(name)
    if parent_name and parent_name not in visiting and parent_name != name:
        parent = _place(graph, parent_name, parents, visiting | {name})
    else:
        parent = graph.root
    return graph.add(name, kind_of(name), parent)


def _construct_parents(names: list[str], construct: dict[str, str | None]) -> dict[str, str | None]:
    """construct.json's parents, with a backward entry's missing parent taken from its forward twin's, and a
    module's ``parameters_grad`` entry (which construct.json does not list) under that module's backward node,
    where msprobe 26.2.0's graph puts it."""
    parents = {name: construct.get(name) for name in names}
    present = set(names)
    for name in names:
        module, grads, count = name.rpartition(_PARAMETERS_GRAD)
        if not parents[name] and grads and f"{module}.backward.{count}" in present:
            parents[name] = f"{module}.backward.{count}"
        if parents[name] or direction_of(name) != BACKWARD:
            continue
        forward = _twin(name, FORWARD)
        forward_parent = construct.get(forward) if forward else None
        parents[name] = _twin(forward_parent, BACKWARD) if forward_parent else None
    return parents


def _frame_key(frame: str) -> tuple[str, str] | None:
    """(file, method) of a module-method frame (``forward`` / ``construct``), else None."""
    match = _FRAME.match(frame)
    if match is None or match["func"].strip() not in _GROUP_METHODS:
        return None
    return match["file"], match["func"].strip()


def _stack_parents(names: list[str], stacks: dict[str, list[str]]) -> dict[str, str | None]:
    """Parents for a dump without modules: group nodes from the ``forward``/``construct`` frames."""
    parents: dict[str, str | None] = {}
    open_groups: list[tuple[tuple, str]] = []  # (identity of the call, group id), outermost first
    counts: dict[str, int] = {}
    group_of: dict[str, str | None] = {}
    for name in names:
        if direction_of(name) == BACKWARD:
            continue
        frames = list(reversed(stacks.get(name) or []))  # outermost first
        wanted: list[tuple[tuple, str, str]] = []
        for index, frame in enumerate(frames):
            key = _frame_key(frame)
            if key is not None:
                file, method = key
                identity = (tuple(frames[:index]), file, method)
                wanted.append((identity, _GROUP_METHODS[method], PurePath(file).stem or "model"))
        keep = 0
        while keep < min(len(open_groups), len(wanted)) and open_groups[keep][0] == wanted[keep][0]:
            keep += 1
        del open_groups[keep:]
        for identity, prefix, label in wanted[keep:]:
            base = f"{prefix}.{label}"
            counts[base] = counts.get(base, -1) + 1
            group = f"{base}.{FORWARD}.{counts[base]}"
            parents[group] = open_groups[-1][1] if open_groups else None
            open_groups.append((identity, group))
        parents[name] = group_of[name] = open_groups[-1][1] if open_groups else None
    for name in names:
        if direction_of(name) != BACKWARD:
            continue
        forward = _twin(name, FORWARD)
        group = group_of.get(forward) if forward else None
        parents[name] = _backward_group(group, parents) if group else None
    return parents


def _backward_group(group: str, parents: dict[str, str | None]) -> str:
    """The backward twin of an inferred forward group, registered with its own backward parents."""
    twin = group.replace(f".{FORWARD}.", f".{BACKWARD}.")
    if twin not in parents:
        up = parents.get(group)
        parents[twin] = _backward_group(up, parents) if up else None
    return twin


def _collect_apis_between_modules(graph: Graph) -> None:
    gathered: list[Node] = []
    run: list[Node] = []
    count = 0

    def flush() -> None:
        nonlocal count
        if len(run) >= 2:
            collection = Node(f"{APIS_BETWEEN_MODULES}.{count}", API_COLLECTION, graph.root, list(run))
            count += 1
            for node in run:
                node.upnode = collection
            graph.nodes[collection.id] = collection
            gathered.append(collection)
        else:
            gathered.extend(run)
        run.clear()

    for node in graph.root.subnodes:
        if node.kind == API:
            run.append(node)
            continue
        flush()
        gathered.append(node)
    flush()
    graph.root.subnodes = gathered


def assign_micro_steps(graph: Graph) -> int:
    """Number the root's children by micro step (a forward module after a backward one starts a new
    one, 1.1.1's rule); returns how many there are."""
    step, seen_backward = 0, False
    for node in graph.root.subnodes:
        if node.kind == MODULE:
            if f".{FORWARD}." in node.id:
                if seen_backward:
                    step, seen_backward = step + 1, False
            else:
                seen_backward = True
        node.micro_step = step
    return step + 1
