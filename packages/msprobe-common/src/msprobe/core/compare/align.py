"""Pair the entries of two dumps, then the rows of each pair.

msprobe 1.1.1 walked both dumps in lock step, so one extra API on either side shifted every later
row out of its match. Here the two entry sequences are aligned like a text diff (Myers' algorithm,
fast when the runs mostly agree) on names and argument structure (after the ``-dm`` mapping), then
inside each gap on looser keys (see :func:`align_entries`). Whatever stays unpaired is kept, so
every entry of both sides appears in the report.

A MindSpore dump against a PyTorch one goes through the same alignment with other keys
(:class:`CrossFramework`): names cannot agree across frameworks (``Cell.fc.Dense`` against
``Module.fc.Linear``, ``Mint.add`` against ``Torch.add``), so each entry is read in PyTorch's terms —
op kind after :mod:`msprobe.core.framework_map`, the module it ran in (construct.json), the shapes of its
tensors in PyTorch's argument order — and never paired on a name alone.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

from msprobe.core.compare.mapfiles import TOP_LAYER, UserMaps
from msprobe.core.compare.reader import CompareError, DumpFile, read_construct
from msprobe.core.compare.rows import Row, structure
from msprobe.core.framework_map import FrameworkMap, builtin
from msprobe.core.lifecycle.naming import parse_name

_MAX_EDIT_DISTANCE = 4000  # beyond this the quadratic trace of Myers costs more than difflib


@dataclass(frozen=True)
class RowPair:
    npu: Row | None
    bench: Row | None
    note: str | None = None  # why two rows of the same argument were left unpaired (:func:`not_the_same`)


# A cell MindSpore puts around the user's cells keeps them as ``_backbone``: mixed precision
# (``amp.auto_mixed_precision`` wraps every cell; a black-listed one gets ``{path}._backbone``) and
# ``nn.WithLossCell``. An fp16 run's ``Cell._backbone.blocks.0.Block`` is the fp32 run's ``Cell.blocks.0.Block``.
_WRAPPED = "._backbone"


def without_wrappers(name: str) -> str:
    """A cell's entry name as it would be without MindSpore's wrapper cells (docs/compare.md); any other
    name as it is."""
    if not name.startswith("Cell.") or _WRAPPED not in name:
        return name
    return "Cell" + f".{name[5:]}".replace(_WRAPPED, "")


def count_free(name: str) -> str:
    """``Torch.add.3.forward`` → ``Torch.add.forward``; names that do not parse stay as they are."""
    try:
        entry = parse_name(name)
    except ValueError:
        return name
    middle = f"{entry.api}.{entry.cls}" if entry.is_module else entry.api
    return f"{entry.prefix}.{middle}.{entry.direction}"


def common_subsequence(a: Sequence[Hashable], b: Sequence[Hashable]) -> list[tuple[int, int]]:
    """Index pairs ``(i, j)`` with ``a[i] == b[j]`` of a longest common subsequence, in order."""
    start = 0
    while start < len(a) and start < len(b) and a[start] == b[start]:
        start += 1
    end_a, end_b = len(a), len(b)
    while end_a > start and end_b > start and a[end_a - 1] == b[end_b - 1]:
        end_a -= 1
        end_b -= 1
    middle = _myers(a[start:end_a], b[start:end_b])
    if middle is None:
        matcher = difflib.SequenceMatcher(None, list(a[start:end_a]), list(b[start:end_b]), autojunk=False)
        middle = [(blk.a + k, blk.b + k) for blk in matcher.get_matching_blocks() for k in range(blk.size)]
    head = [(i, i) for i in range(start)]
    tail = [(end_a + k, end_b + k) for k in range(len(a) - end_a)]
    return head + [(i + start, j + start) for i, j in middle] + tail


def _myers(a: Sequence[Hashable], b: Sequence[Hashable]) -> list[tuple[int, int]] | None:
    """Myers' O((N+M)·D) diff; None when the edit distance exceeds ``_MAX_EDIT_DISTANCE``."""
    n, m = len(a), len(b)
    frontier: dict[int, int] = {1: 0}
    trace: list[dict[int, int]] = []
    for d in range(min(n + m, _MAX_EDIT_DISTANCE) + 1):
        trace.append(dict(frontier))
        for k in range(-d, d + 1, 2):
            down = k == -d or (k != d and frontier[k - 1] < frontier[k + 1])
            x = frontier[k + 1] if down else frontier[k - 1] + 1
            y = x - k
            while x < n and y < m and a[x] == b[y]:
                x, y = x + 1, y + 1
            frontier[k] = x
            if x >= n and y >= m:
                return _backtrack(trace, n, m)
    return None


def _backtrack(trace: list[dict[int, int]], x: int, y: int) -> list[tuple[int, int]]:
    pairs: list[tuple[int, int]] = []
    for d in range(len(trace) - 1, -1, -1):
        frontier, k = trace[d], x - y
        prev_k = k + 1 if k == -d or (k != d and frontier[k - 1] < frontier[k + 1]) else k - 1
        prev_x = frontier[prev_k]
        prev_y = prev_x - prev_k
        while x > prev_x and y > prev_y:
            pairs.append((x - 1, y - 1))
            x, y = x - 1, y - 1
        x, y = prev_x, prev_y
    pairs.reverse()
    return pairs


@dataclass
class CrossFramework:
    """How a MindSpore dump reads in PyTorch's terms, for aligning it with a PyTorch dump.

    ``ms_side`` is ``"npu"`` or ``"bench"``: whichever holds the MindSpore dump. ``parents`` holds
    each side's construct.json (entry → the module entry it ran in). ``cells`` (``-cm``) maps
    ``path.Class`` of a cell to ``path.Class`` of a module; ``layers`` (``-lm``) maps attribute names
    per layer class (``TopLayer``: the model) or per containing attribute.
    """

    fmap: FrameworkMap
    ms_side: str
    parents: dict[str, dict[str, str | None]] = field(default_factory=dict)
    cells: dict[str, str] = field(default_factory=dict)
    layers: dict[str, dict[str, str]] = field(default_factory=dict)
    classes: dict[str, str] = field(default_factory=dict)  # MindSpore cell path → class, from its entries
    rows: dict[str, dict[str, list[Row]]] = field(default_factory=dict)  # side → entry → rows (backward rows)

    def learn_classes(self, ms_names: Sequence[str]) -> None:
        """Cell classes by path, which ``-lm`` rules are keyed by."""
        for name in ms_names:
            entry = _parsed(name)
            if entry is not None and entry.is_module:
                self.classes.setdefault(entry.api, entry.cls or "")

    def module(self, side: str, path: str, cls: str) -> tuple[str, str]:
        """A module's path and class in PyTorch's terms (``-cm``, then ``-lm`` and the class table)."""
        if side != self.ms_side:
            return path, cls
        mapped = self.cells.get(f"{path}.{cls}")
        if mapped is not None:
            pt_path, _, pt_cls = mapped.rpartition(".")
            return pt_path, pt_cls
        return self.layer_path(path), self.fmap.torch_class(cls)

    def layer_path(self, path: str) -> str:
        """``-lm``: rename each attribute by the rules of the layer (or attribute) that holds it; a dotted
        rule (``a.b: c``) replaces several attributes at once, the longest matching rule first."""
        if not self.layers:
            return path
        parts, out, index = path.split("."), [], 0
        holder_cls, holder_attr = TOP_LAYER, None
        while index < len(parts):
            rules = {**self.layers.get(holder_attr or "", {}), **self.layers.get(holder_cls, {})}
            for width in range(len(parts) - index, 0, -1):
                target = rules.get(".".join(parts[index:index + width]))
                if target is not None:
                    out.append(target)
                    break
            else:
                width = 1
                out.append(parts[index])
            index += width
            holder_cls, holder_attr = self.classes.get(".".join(parts[:index]), ""), parts[index - 1]
        return ".".join(out)

    def kind(self, side: str, name: str) -> tuple:
        """What an entry is in PyTorch's terms: ``("api", op kind, direction)`` or ``("module", path, class,
        direction)``; an API without a PyTorch counterpart gets a key that equals no other entry's."""
        entry = _parsed(name)
        if entry is None:
            return ("unpaired", side, name)
        if entry.is_module:
            return ("module", *self.module(side, entry.api, entry.cls or ""), entry.direction)
        api = f"{entry.prefix}.{entry.api}"
        op = self.fmap.ms_op_kind(api) if side == self.ms_side else self.fmap.op_kind(api)
        return ("api", op, entry.direction) if op else ("unpaired", side, name)

    def scope(self, side: str, name: str) -> str:
        """The PyTorch path of the module an entry ran in ("" at top level or without construct.json)."""
        parent = _parsed(self.parents.get(side, {}).get(name) or "")
        return self.module(side, parent.api, parent.cls or "")[0] if parent and parent.is_module else ""

    def suffix(self, side: str, entry_name: str, suffix: str) -> str | None:
        """A row's argument path in PyTorch's terms (argument-position and keyword maps); None: no partner.

        A backward entry's ``output.k`` is the gradient of the forward call's k-th tensor input (both
        frameworks number them so), so it takes that input's path: ``layer_norm(x, (8,), w, b)``'s
        ``output.1`` is ``w``'s gradient, and pairs with the gradient of MindSpore's ``gamma``."""
        entry = _parsed(entry_name)
        if entry is None or entry.is_module:
            return suffix
        if entry.direction == "backward" and suffix.startswith("output."):
            forward = self._forward_input(side, entry_name, suffix)
            if forward is not None:
                mapped = self.suffix(side, forward.entry, forward.suffix)
                return None if mapped is None else "output" + mapped[len("input"):]
        api = f"{entry.prefix}.{entry.api}"
        if side != self.ms_side:
            return self.fmap.positional(api, suffix)
        pt_api, mapped = self.fmap.torch_api(api), self.fmap.torch_suffix(api, suffix, entry.direction)
        return mapped if mapped is None or pt_api is None else self.fmap.positional(pt_api, mapped)

    def _forward_input(self, side: str, entry_name: str, suffix: str) -> Row | None:
        """The forward call's tensor input whose gradient a backward ``output.k`` row holds."""
        forward = self.rows.get(side, {}).get(entry_name[: -len("backward")] + "forward")
        index = suffix.split(".")[1]
        if forward is None or not index.isdigit():
            return None
        inputs = [row for row in forward if row.part == "input" and row.is_tensor]
        return inputs[int(index)] if int(index) < len(inputs) else None

    def tensor_paths(self, side: str, name: str, rows: list[Row]) -> frozenset:
        """The PyTorch argument paths of an entry's tensor inputs: a call that takes a tensor the other
        side's call has no parameter for (``Conv2D(x, w)`` against ``conv2d(x, w, b)``) computes another
        thing, and is never paired with it."""
        return frozenset(self.suffix(side, name, row.suffix) for row in rows if row.part == "input" and row.is_tensor)

    def shapes(self, side: str, name: str, rows: list[Row]) -> tuple:
        """Tensor shapes by PyTorch argument path, in argument order (dtypes left out, as in :func:`structure`)."""
        found = []
        for row in rows:
            target = self.suffix(side, name, row.suffix) if row.is_tensor else None
            if target is not None:
                found.append((_natural(target), tuple(row.value.get("shape") or ())))
        return tuple(sorted(found))

    def keys(self, npu: dict[str, list[Row]], bench: dict[str, list[Row]]) -> list[Callable[[str, str], Hashable]]:
        """The passes: module scope, kind and shapes; kind and shapes (the scope differs: an API called
        outside the module in one port); scope, kind and tensor arguments (shapes differ, reported as
        such), only where construct.json gives a scope (at L1 a shape-free pass pairs unrelated calls)."""
        rows = self.rows = {"npu": npu, "bench": bench}
        kinds = {(side, n): self.kind(side, n) for side in rows for n in rows[side]}
        scopes = {(side, n): self.scope(side, n) for side in rows for n in rows[side]}
        shapes = {(side, n): self.shapes(side, n, rows[side][n]) for side in rows for n in rows[side]}
        paths = {(side, n): self.tensor_paths(side, n, rows[side][n]) for side in rows for n in rows[side]}

        def loose(side: str, n: str) -> Hashable:
            scope = scopes[side, n]
            return (scope, kinds[side, n], paths[side, n]) if scope else ("unscoped", side, n)

        return [
            lambda side, n: (scopes[side, n], kinds[side, n], shapes[side, n]),
            lambda side, n: (kinds[side, n], shapes[side, n]),
            loose,
        ]

    def pair_backward_by_forward(self, pairs: list[tuple[str | None, str | None]]
                                 ) -> list[tuple[str | None, str | None]]:
        """An API's backward entry pairs with the backward of the call its forward entry paired with, and
        with nothing else: the gradients of two calls are the same tensors exactly when the calls are."""
        forward = {n: b for n, b in pairs if n and b and n.endswith(".forward") and b.endswith(".forward")}
        twin = {n[: -len("forward")] + "backward": b[: -len("forward")] + "backward" for n, b in forward.items()}
        twin = {n: b for n, b in twin.items() if n in self.rows["npu"] and b in self.rows["bench"]}
        taken = set(twin.values())
        out: list[tuple[str | None, str | None]] = []
        for npu_name, bench_name in pairs:
            if npu_name in twin:
                out.append((npu_name, twin[npu_name]))
                continue
            free_npu = npu_name is not None and not _has_forward(npu_name, self.rows["npu"])
            free_bench = bench_name is not None and not _has_forward(bench_name, self.rows["bench"])
            if free_npu and free_bench:
                out.append((npu_name, bench_name))
                continue
            if npu_name is not None:
                out.append((npu_name, None))
            if bench_name is not None and bench_name not in taken:
                out.append((None, bench_name))
        return out

    def pair_modules_out_of_order(self, pairs: list[tuple[str | None, str | None]]
                                  ) -> list[tuple[str | None, str | None]]:
        """Pair one-sided module entries that an order-keeping alignment cannot: the two frameworks run
        module backward hooks in different orders (MindSpore reports a container's backward after its
        children's, PyTorch before). A module is identified by its path and class (in PyTorch's terms),
        direction and call order, which does not depend on where in the dump it was written."""
        waiting: dict[tuple, list[int]] = {}
        for index, (npu_name, bench_name) in enumerate(pairs):
            if bench_name is None and npu_name is not None:
                kind = self.kind("npu", npu_name)
                if kind[0] == "module":
                    waiting.setdefault(kind, []).append(index)
        out: list[tuple[str | None, str | None] | None] = list(pairs)
        for index, (npu_name, bench_name) in enumerate(pairs):
            if npu_name is None and bench_name is not None:
                slots = waiting.get(self.kind("bench", bench_name))
                if slots:
                    slot = slots.pop(0)
                    out[slot] = (pairs[slot][0], bench_name)
                    out[index] = None
        return [pair for pair in out if pair is not None]


def cross_framework(npu: DumpFile, bench: DumpFile, maps: UserMaps | None = None) -> CrossFramework | None:
    """The cross-framework reading of a MindSpore/PyTorch pair (either way round), None for one framework.

    ``-am``/``-cm``/``-lm`` (``maps``) only make sense for such a pair, so they are an error otherwise
    rather than silently doing nothing."""
    maps = maps or UserMaps()
    frameworks = {"npu": npu.framework, "bench": bench.framework}
    if {frameworks["npu"], frameworks["bench"]} != {"mindspore", "pytorch"}:
        if maps.requested:
            raise CompareError(f"-am/-cm/-lm (api_mapping, cell_mapping, layer_mapping) compare a MindSpore dump "
                               f"with a PyTorch one, but npu_path {str(npu.path)!r} is "
                               f"{frameworks['npu'] or 'of unknown framework'} and bench_path {str(bench.path)!r} is "
                               f"{frameworks['bench'] or 'of unknown framework'}")
        return None
    fmap = builtin().extended(maps.apis, None, maps.arguments, maps.outputs)
    return CrossFramework(fmap, "npu" if frameworks["npu"] == "mindspore" else "bench",
                          {"npu": read_construct(npu), "bench": read_construct(bench)}, dict(maps.cells),
                          {k: dict(v) for k, v in maps.layers.items()})


def _has_forward(name: str, rows: dict[str, list[Row]]) -> bool:
    """An API backward entry whose forward entry is in the dump (its pairing follows that entry's)."""
    return name.endswith(".backward") and name[: -len("backward")] + "forward" in rows


def _parsed(name: str):
    try:
        return parse_name(name)
    except ValueError:
        return None


def _natural(suffix: str) -> tuple:
    """``input.10`` after ``input.9``; keyword arguments after positional ones."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in suffix.split("."))


def align_entries(
    npu: dict[str, list[Row]],
    bench: dict[str, list[Row]],
    fuzzy: bool = False,
    mapping: dict[str, str] | None = None,
    cross: CrossFramework | None = None,
) -> list[tuple[str | None, str | None]]:
    """Entry pairs in execution order; ``(name, None)`` / ``(None, name)`` for one-sided entries.

    Passes, each run only inside the gaps the previous one left: name and argument structure; API
    kind (count-free name) and structure, which re-pairs calls whose count shifted; name alone,
    which pairs same-named calls whose shapes differ so the report can say so. ``fuzzy`` drops the
    passes that look at counts. A cross-framework pair (``cross``) uses :meth:`CrossFramework.keys`
    instead, which never look at counts; an NPU entry that ``mapping`` (``-dm``) names takes the keys
    of the bench entry it is mapped to.
    """
    mapping = mapping or {}
    if cross is not None:
        cross.learn_classes(list(npu if cross.ms_side == "npu" else bench))
        passes = [_following(key, mapping, bench) for key in cross.keys(npu, bench)]
        aligned = _align(list(npu), list(bench), passes)
        return cross.pair_modules_out_of_order(cross.pair_backward_by_forward(aligned))
    shapes = {("npu", n): structure(rows) for n, rows in npu.items()}
    shapes.update({("bench", n): structure(rows) for n, rows in bench.items()})

    def named(side: str, name: str) -> str:
        return without_wrappers(mapping.get(name, name) if side == "npu" else name)

    keys = [
        lambda side, n: (named(side, n), shapes[side, n]),
        lambda side, n: (count_free(named(side, n)), shapes[side, n]),
        lambda side, n: named(side, n),
    ]
    if fuzzy:
        keys = [keys[1], lambda side, n: count_free(named(side, n))]
    return _align(list(npu), list(bench), keys)


def _following(key: Callable[[str, str], Hashable], mapping: dict[str, str],
               bench: dict[str, list[Row]]) -> Callable[[str, str], Hashable]:
    def mapped_key(side: str, name: str) -> Hashable:
        if side == "npu" and mapping.get(name) in bench:
            return key("bench", mapping[name])
        return key(side, name)

    return mapped_key


def _align(npu_names: list[str], bench_names: list[str], keys: list) -> list[tuple[str | None, str | None]]:
    if not keys or not npu_names or not bench_names:
        return [(n, None) for n in npu_names] + [(None, b) for b in bench_names]
    key = keys[0]
    anchors = common_subsequence([key("npu", n) for n in npu_names], [key("bench", b) for b in bench_names])
    pairs: list[tuple[str | None, str | None]] = []
    i = j = 0
    for ai, bj in [*anchors, (len(npu_names), len(bench_names))]:
        pairs.extend(_align(npu_names[i:ai], bench_names[j:bj], keys[1:]))
        if ai < len(npu_names):
            pairs.append((npu_names[ai], bench_names[bj]))
        i, j = ai + 1, bj + 1
    return pairs


def pair_rows(npu_rows: list[Row], bench_rows: list[Row], mapping: dict[str, str] | None = None,
              cross: CrossFramework | None = None) -> list[RowPair]:
    """Rows of two paired entries, matched by argument path (``input.0``), in NPU order.

    ``mapping`` may map an NPU row name to a bench row name of the paired entry (``-dm``). In a
    cross-framework pair the MindSpore side's paths are first read in PyTorch's terms, and two rows
    that :func:`not_the_same` proves different stay unpaired, each with the reason (``note``).
    """
    mapping = mapping or {}

    def path(side: str, row: Row) -> str | None:
        return cross.suffix(side, row.entry, row.suffix) if cross is not None else row.suffix

    by_suffix = {key: row for row in bench_rows if (key := path("bench", row)) is not None}
    by_name = {row.name: row for row in bench_rows}
    used: set[str] = set()
    notes: dict[str, str] = {}
    pairs: list[RowPair] = []
    for row in npu_rows:
        key = path("npu", row)
        partner = by_name.get(mapping[row.name]) if row.name in mapping else by_suffix.get(key) if key else None
        note = not_the_same(row, partner) if partner is not None and cross is not None else None
        if partner is not None and partner.suffix not in used and note is None:
            used.add(partner.suffix)
            pairs.append(RowPair(row, partner))
        else:
            pairs.append(RowPair(row, None, note and f"not paired with {partner.name}: {note}"))
            if note:
                notes[partner.suffix] = f"not paired with {row.name}: {note}"
    pairs.extend(RowPair(None, row, notes.get(row.suffix)) for row in bench_rows if row.suffix not in used)
    return pairs


_RANGE_MARGIN = 0.01  # of the largest magnitude: far above float32 rounding between two implementations


def not_the_same(npu: Row, bench: Row) -> str | None:
    """Why two rows of the same argument of two paired calls cannot hold the same tensor, or None.

    Used across frameworks only, where a wrong argument map would otherwise be reported as a difference.
    Proof is either of: the shapes differ (a tensor has one shape in both frameworks; ``[]`` and ``[1]``
    count as one, as MindSpore saves a 0-d tensor as ``[1]``); or both are float32 with finite statistics
    and their value ranges ``[Min, Max]`` do not overlap even widened by 1 % of the largest magnitude.
    A port error changes values, but one whose every value leaves the other's range is beyond what the
    same computation from the same inputs does; the row is kept, unpaired, with this reason."""
    if not (npu.is_tensor and bench.is_tensor):
        return None
    shapes = [tuple(row.value.get("shape") or ()) for row in (npu, bench)]
    if shapes[0] != shapes[1] and {shapes[0], shapes[1]} != {(), (1,)}:
        return f"shapes {list(shapes[0])} and {list(shapes[1])} differ: not the same tensor"
    if npu.part != "input" or npu.entry.endswith(".backward"):
        return None  # an output that differs is what the compare reports (softmax over the wrong dim)
    if {str(row.value.get("dtype")).lower().removeprefix("torch.") for row in (npu, bench)} != {"float32"}:
        return None
    bounds = [(row.value.get("Min"), row.value.get("Max")) for row in (npu, bench)]
    values = [v for pair in bounds for v in pair]
    if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in values):
        return None
    margin = _RANGE_MARGIN * max(abs(v) for v in values)
    (low_a, high_a), (low_b, high_b) = bounds
    if high_a + margin < low_b or high_b + margin < low_a:
        return (f"value ranges [{low_a:.6g}, {high_a:.6g}] and [{low_b:.6g}, {high_b:.6g}] do not overlap: "
                f"not the same tensor")
    return None


def entry_mapping(mapping: dict[str, str]) -> dict[str, str]:
    """Entry-level names implied by a ``-dm`` mapping whose keys may be row names."""
    out: dict[str, str] = {}
    for npu_name, bench_name in mapping.items():
        out[_entry_of(npu_name)] = _entry_of(bench_name)
    return out


def _entry_of(name: str) -> str:
    try:
        return parse_name(name).full
    except ValueError:
        pass
    tokens = name.split(".")
    for cut in range(len(tokens), 0, -1):
        if tokens[cut - 1] in ("input", "output", "kwargs"):
            return ".".join(tokens[: cut - 1])
    return name
