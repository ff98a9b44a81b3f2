"""A MindSpore dump read in PyTorch's terms, so the alignment can pair it with a PyTorch dump.

Names cannot agree across frameworks (``Cell.fc.Dense`` against ``Module.fc.Linear``, ``Mint.add`` against
``Torch.add``), so each entry is read in PyTorch's terms — op kind after :mod:`.framework_map`, the module it
ran in (construct.json), the shapes of its tensors in PyTorch's argument order — and never paired on a name
alone. :func:`~.entries.align_entries` then runs the same alignment on these keys.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

from msprobe.core.compare.align.framework_map import FrameworkMap, builtin
from msprobe.core.compare.align.out_of_order import EntryPairs, pair_out_of_order
from msprobe.core.compare.read import TOP_LAYER, CompareError, DumpFile, Row, UserMaps, read_construct
from msprobe.core.lifecycle.naming import parse_name


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

    def npu_to_bench(self, mapping: dict[str, str]) -> dict[str, str]:
        """A ``-dm`` mapping (MindSpore name → PyTorch name, docs/cross_framework_compare.md) as the alignment
        reads every mapping, NPU name → bench name: turned round when the MindSpore dump is the bench."""
        return dict(mapping) if self.ms_side == "npu" else {pt: ms for ms, pt in mapping.items()}

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

    def pair_modules_out_of_order(self, pairs: EntryPairs) -> EntryPairs:
        """Pair one-sided module entries that an order-keeping alignment cannot: the two frameworks run
        module backward hooks in different orders (MindSpore reports a container's backward after its
        children's, PyTorch before). A module is identified by its path and class (in PyTorch's terms),
        direction and call order, which does not depend on where in the dump it was written."""
        def module_kind(side: str, name: str) -> tuple | None:
            kind = self.kind(side, name)
            return kind if kind[0] == "module" else None

        return pair_out_of_order(pairs, module_kind)


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
