"""Merge the rank dumps of a sharded run (tensor or pipeline parallel) into one rank-like dump before alignment.

Each argument is rebuilt as the whole tensor it is a piece of, placed by its ``dtensor`` member (exact) or
by the shape rule against the other run's row, so reports, the first divergence and the graph all see whole
tensors. Statistics merge exactly for shards, replicas keep the lowest rank's, ``Partial`` statistics are
left out; tensor dumps rebuild the array when a worker loads it (a :data:`Source` tree). The rules:
docs/pytorch/distributed_compare.md#where-the-layout-comes-from and
docs/pytorch/distributed_compare.md#what-the-merged-numbers-are.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import reduce
from pathlib import Path
from typing import Any

import numpy as np

from msprobe.core.compare.read.reader import CompareError, DumpFile, read_dump, read_stack, tensor_path
from msprobe.core.compare.read.rows import STAT_KEYS, is_tensor
from msprobe.core.compare.read.tensorfile import TensorSpec
from msprobe.core.lifecycle.naming import FORWARD, api_name, parse_name
from msprobe.core.services.log import logger

# How to load a value's array: ["file", path or None, shape, dtype] | ["concat", axis, [sources]]
# | ["reduce", op, [sources]]. Plain lists, so a merged dump.json value stays JSON and picklable.
Source = list
SHARDS = "shards"  # member of a merged value: {"ranks": [...], "layout": "...", "note": "..."}
SOURCE = "source"
_PLACEMENT = re.compile(r"Shard\((\d+)\)|Replicate\(\)|Partial\((sum|avg|max|min)\)")
_REDUCE = {"sum": np.add, "max": np.maximum, "min": np.minimum}


@dataclass(frozen=True)
class Layout:
    """A stated layout (``--tp``/``--pp``, compare.json's ``tp``/``pp``) of the multi-rank side; None: not stated."""

    tp: int | None = None
    pp: int | None = None

    @classmethod
    def checked(cls, tp: Any = None, pp: Any = None, what: str = "compare input") -> Layout:
        for name, value in (("tp", tp), ("pp", pp)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise CompareError(f"{what}: {name!r} is {value!r}; allowed: a positive integer (the "
                                   f"{'tensor' if name == 'tp' else 'pipeline'}-parallel size of the multi-rank run)")
        return cls(tp, pp)

    @property
    def stated(self) -> bool:
        return self.tp is not None or self.pp is not None


NO_LAYOUT = Layout()


class SourceError(Exception):
    """A tensor file of a value cannot be loaded; the message goes on the row."""


def tensor_source(dump: DumpFile, value: dict) -> Source:
    """How to load ``value``'s array: its merged source, else its own file."""
    merged = value.get(SOURCE)
    if merged is not None:
        return merged
    path = tensor_path(dump, value)
    spec = TensorSpec.of(value)
    return ["file", None if path is None else str(path), spec.shape, spec.dtype]


def load_source(loader: Callable[[Path, TensorSpec], np.ndarray], source: Source, side: str) -> np.ndarray:
    """The array of ``source``; :class:`SourceError` naming the file that is missing or unreadable."""
    kind = source[0]
    if kind == "file":
        _, path, shape, dtype = source
        if path is None:
            raise SourceError(f"The {side} tensor has no data_name: was the dump made with task 'tensor'?")
        if not Path(path).is_file():
            raise SourceError(f"Dump file: {path} not found.")
        try:
            return loader(Path(path), TensorSpec(None if shape is None else tuple(shape), dtype))
        except Exception as exc:  # any loader failure is reported on its row, not fatal to the compare
            raise SourceError(f"Dump file: {path} cannot be read: {type(exc).__name__}: {exc}") from None
    arrays = [load_source(loader, part, side) for part in source[2]]
    if kind == "concat":
        return np.concatenate(arrays, axis=source[1])
    if source[1] == "avg":
        return reduce(np.add, arrays) / len(arrays)
    return reduce(_REDUCE[source[1]], arrays)


def merge_note(value: Any) -> str | None:
    """The row's note on where a merged value came from (its Err_message), None for an unmerged value."""
    info = value.get(SHARDS) if isinstance(value, dict) else None
    if not isinstance(info, dict):
        return None
    ranks = ",".join(str(r) for r in info.get("ranks", ()))
    note = info.get("note")
    return f"merged from ranks {ranks}: {info.get('layout')}" + (f"; {note}" if note else "")


# ---------------------------------------------------------------- one value


@dataclass
class _Piece:
    """A part of a whole tensor: its value (statistics, shape) and how to load it."""

    ranks: tuple[int, ...]
    value: dict
    source: Source
    notes: list[str] = field(default_factory=list)


def _count(shape: list[int]) -> int:
    return math.prod(shape)


def _stat(value: dict, key: str) -> float | None:
    raw = value.get(key)
    return float(raw) if isinstance(raw, (int, float)) else None


def _merged_stats(pieces: list[_Piece]) -> dict[str, Any]:
    """Max, Min, count-weighted Mean, root of summed squared Norms; a statistic absent on a piece stays absent."""
    stats: dict[str, Any] = {}
    columns = {key: [_stat(p.value, key) for p in pieces] for key in STAT_KEYS}
    counts = [_count(p.value["shape"]) for p in pieces]
    for key, values in columns.items():
        if any(v is None for v in values):
            stats[key] = None
        elif any(math.isnan(v) for v in values):  # type: ignore[arg-type]
            stats[key] = math.nan
        elif key == "Max":
            stats[key] = max(values)  # type: ignore[type-var]
        elif key == "Min":
            stats[key] = min(values)  # type: ignore[type-var]
        elif key == "Mean":
            total = sum(counts)
            stats[key] = math.fsum(v * c for v, c in zip(values, counts)) / total if total else math.nan  # type: ignore[operator]
        else:
            peak = max(abs(v) for v in values)  # type: ignore[arg-type]
            stats[key] = peak * math.sqrt(math.fsum((v / peak) ** 2 for v in values)) if 0 < peak < math.inf \
                else peak  # type: ignore[operator]
    if all(isinstance(p.value.get(k), bool) for p in pieces for k in ("Max", "Min")):  # bool tensors stay bool
        stats["Max"], stats["Min"] = bool(stats["Max"]), bool(stats["Min"])
    return stats


def _concat(pieces: list[_Piece], axis: int) -> _Piece:
    shape = list(pieces[0].value["shape"])
    shape[axis] = sum(p.value["shape"][axis] for p in pieces)
    value = {**pieces[0].value, "shape": shape, **_merged_stats(pieces)}
    return _Piece(sum((p.ranks for p in pieces), ()), value, ["concat", axis, [p.source for p in pieces]],
                  [n for p in pieces for n in p.notes])


def _same(a: Any, b: Any) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def _replicate(pieces: list[_Piece]) -> _Piece:
    first = pieces[0]
    notes = [n for p in pieces for n in p.notes]
    for other in pieces[1:]:
        differs = [k for k in (*STAT_KEYS, "md5") if not _same(first.value.get(k), other.value.get(k))]
        if differs:
            key = differs[0]
            notes.append(f"ranks disagree on this replicated value ({key} {first.value.get(key)!r} on rank "
                         f"{first.ranks[0]}, {other.value.get(key)!r} on rank {other.ranks[0]}): rank "
                         f"{first.ranks[0]}'s is compared")
            break
    return _Piece(sum((p.ranks for p in pieces), ()), first.value, first.source, notes)


def _partial(pieces: list[_Piece], op: str, tensor_mode: bool) -> _Piece:
    value = {**pieces[0].value, **{k: None for k in STAT_KEYS}}
    note = (f"the statistics of a Partial({op}) value cannot be computed from each rank's statistics: "
            f"not compared on them")
    notes = [n for p in pieces for n in p.notes] + ([] if tensor_mode else [note])
    return _Piece(sum((p.ranks for p in pieces), ()), value, ["reduce", op, [p.source for p in pieces]], notes)


def _placement(text: Any) -> tuple[str, Any]:
    match = _PLACEMENT.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"placement {text!r} is not Shard(d), Replicate() or Partial(sum|avg|max|min)")
    if match.group(1) is not None:
        return "shard", int(match.group(1))
    return ("partial", match.group(2)) if match.group(2) else ("replicate", None)


def _by_mesh(pieces: dict[int, _Piece], layout: dict, tensor_mode: bool) -> _Piece:
    """Merge the pieces of one DTensor along its mesh, innermost mesh dimension first (torch's nesting)."""
    placements = [_placement(p) for p in layout["placements"]]
    mesh_ranks, mesh_shape = list(layout["mesh_ranks"]), list(layout["mesh_shape"])
    if len(placements) != len(mesh_shape) or math.prod(mesh_shape) != len(mesh_ranks):
        raise ValueError(f"mesh_shape {mesh_shape} does not fit placements {layout['placements']} and "
                         f"mesh_ranks {mesh_ranks}")
    missing = [r for r in mesh_ranks if r not in pieces]
    if missing:
        raise ValueError(f"mesh rank(s) {missing} have no such value in the dumps")
    coords = np.unravel_index(np.arange(len(mesh_ranks)), mesh_shape)
    level = {tuple(int(c[i]) for c in coords): pieces[r] for i, r in enumerate(mesh_ranks)}
    for dim in reversed(range(len(mesh_shape))):
        kind, arg = placements[dim]
        groups: dict[tuple, list[_Piece]] = {}
        for coord in sorted(level):
            groups.setdefault(coord[:dim], []).append(level[coord])
        if kind == "shard":
            level = {k: _concat(g, arg) for k, g in groups.items()}
        elif kind == "replicate":
            level = {k: _replicate(g) for k, g in groups.items()}
        else:
            level = {k: _partial(g, arg, tensor_mode) for k, g in groups.items()}
    (whole,) = level.values()
    if list(whole.value["shape"]) != list(layout.get("global_shape", whole.value["shape"])):
        raise ValueError(f"the merged shape {whole.value['shape']} is not the recorded global_shape "
                         f"{layout.get('global_shape')}")
    return whole


def _by_shape(pieces: list[_Piece], other: Any) -> tuple[_Piece, str]:
    """The shape rule against the other run's value (see the module docstring)."""
    shapes = [list(p.value["shape"]) for p in pieces]
    target = other.get("shape") if is_tensor(other) else None
    first = pieces[0]
    if target is None:  # equal local shapes are replicas or shards alike: nothing to tell them apart
        return first, f"rank {first.ranks[0]}'s (no counterpart in the other run to merge by)"
    if all(s == shapes[0] for s in shapes) and list(target) == shapes[0]:
        return _replicate(pieces), "replicated (equal shapes)"
    if isinstance(target, list) and all(len(s) == len(target) for s in shapes):
        dims = {d for s in shapes for d, (n, t) in enumerate(zip(s, target)) if n != t}
        if len(dims) == 1:
            (axis,) = dims
            if sum(s[axis] for s in shapes) == target[axis]:
                return _concat(pieces, axis), f"concatenated along dim {axis} (by shape)"
    note = (f"local shapes {shapes} cannot be merged into the other run's {target}: rank {first.ranks[0]}'s "
            f"value is compared")
    return _Piece(first.ranks, first.value, first.source, first.notes + [note]), "not merged"


def _merge_value(values: list[dict], ranks: list[int], dumps: list[DumpFile], other: Any, tensor_mode: bool) -> dict:
    pieces = [_Piece((r,), v, tensor_source(d, v)) for r, v, d in zip(ranks, values, dumps)]
    layout = values[0].get("dtensor")
    if all(isinstance(v.get("dtensor"), dict) for v in values):
        try:
            whole = _by_mesh(dict(zip(ranks, pieces)), layout, tensor_mode)
            how = "/".join(layout["placements"]) + " (recorded)"
        except (ValueError, KeyError, TypeError) as exc:
            logger.debug("dtensor layout not used: %s", exc)
            whole, how = _by_shape(pieces, other)
            whole.notes.append(f"its recorded layout could not be used ({exc})")
    else:
        whole, how = _by_shape(pieces, other)
    merged = {k: v for k, v in whole.value.items() if k not in ("dtensor", "data_name", "md5")}
    merged[SOURCE] = whole.source
    merged[SHARDS] = {"ranks": list(whole.ranks), "layout": how, "note": "; ".join(whole.notes) or None}
    return merged


def _merge_tree(values: list, ranks: list[int], dumps: list[DumpFile], other: Any, tensor_mode: bool) -> Any:
    """Merge one argument structure (lists, kwargs dicts, tensor leaves) of the ranks, the other run's alongside."""
    first = values[0]
    if is_tensor(first):
        if all(is_tensor(v) and isinstance(v.get("shape"), list) for v in values):
            return _merge_value(values, ranks, dumps, other, tensor_mode)
        return first
    if isinstance(first, list) and all(isinstance(v, list) and len(v) == len(first) for v in values):
        others = other if isinstance(other, list) and len(other) == len(first) else [None] * len(first)
        return [_merge_tree([v[i] for v in values], ranks, dumps, others[i], tensor_mode) for i in range(len(first))]
    if isinstance(first, dict) and "type" not in first and all(isinstance(v, dict) and v.keys() == first.keys()
                                                                for v in values):
        others = other if isinstance(other, dict) else {}
        return {k: _merge_tree([v[k] for v in values], ranks, dumps, others.get(k), tensor_mode) for k in first}
    return first


# ---------------------------------------------------------------- whole dumps


def _stage_names(entries: dict[str, dict], offsets: dict[str, int]) -> dict[str, str]:
    """A pipeline stage's entry names as the one-rank run numbers them: API call counts continue from the
    stages before (``offsets``: API → calls seen so far); module names are kept (their paths tell them apart)."""
    names = {}
    for name in entries:
        try:
            parsed = parse_name(name)
        except ValueError:
            names[name] = name
            continue
        if parsed.is_module:
            names[name] = name
        else:
            key = f"{parsed.prefix}.{parsed.api}"
            names[name] = api_name(parsed.prefix, parsed.api, parsed.count + offsets.get(key, 0), parsed.direction)
    return names


def _advance(offsets: dict[str, int], names: dict[str, str]) -> None:
    for name in names.values():
        try:
            parsed = parse_name(name)
        except ValueError:
            continue
        if not parsed.is_module:
            key = f"{parsed.prefix}.{parsed.api}"
            offsets[key] = max(offsets.get(key, 0), parsed.count + 1)


def _is_forward(name: str) -> bool:
    try:
        return parse_name(name).direction == FORWARD
    except ValueError:
        return True


def _stages(ranks: list[int], layout: Layout) -> list[list[int]]:
    """The ranks of each pipeline stage (one tensor-parallel group of consecutive ranks), in stage order."""
    pp = layout.pp or 1
    tp = layout.tp or len(ranks) // pp
    if tp * pp != len(ranks):
        raise CompareError(f"the stated layout tp={tp} × pp={pp} = {tp * pp} ranks, but the step has {len(ranks)} "
                           f"({', '.join(map(str, ranks))}); state tp and pp so that they multiply to the rank count")
    return [ranks[stage * tp:(stage + 1) * tp] for stage in range(pp)]


def merge_constructs(constructs: dict[int, dict[str, str | None]], layout: Layout = NO_LAYOUT
                     ) -> dict[str, str | None]:
    """The construct.json (entry → parent module) of the merged dump, for the graph: each stage's lowest rank's,
    its API names renumbered as :func:`merge_dumps` renumbers the entries (parents are modules, whose names
    are kept). A stage's API counts are taken from its construct.json, which names every entry of a
    level L0 or mix dump."""
    stages = _stages(sorted(constructs), layout)
    merged: dict[str, str | None] = {}
    offsets: dict[str, int] = {}
    for group in stages:
        construct = constructs[group[0]]
        names = _stage_names(construct, offsets) if len(stages) > 1 else {n: n for n in construct}
        _advance(offsets, names)
        merged.update((names[name], parent) for name, parent in construct.items())
    return merged


def merge_dumps(dumps: dict[int, DumpFile], other: DumpFile, layout: Layout = NO_LAYOUT,
                stacks: dict[int, dict[str, list[str]]] | None = None) -> DumpFile:
    """One rank-like dump from the ranks of one step (``dumps``: rank → dump), merged as ``other`` (the
    run it is compared with) needs it. Ranks are split into ``pp`` stages of consecutive ranks, each stage
    into one tensor-parallel group of ``tp`` ranks (default: all ranks of the stage); the merged entries
    are every stage's forward entries in stage order, then the other entries in reverse stage order
    (where the one-rank run has them: backward runs from the last layer back)."""
    ranks = sorted(dumps)
    stages = _stages(ranks, layout)
    first = dumps[ranks[0]]
    for rank in ranks[1:]:
        if dumps[rank].mode != first.mode:
            raise CompareError(f"rank {rank}'s {str(dumps[rank].path)!r} is a {dumps[rank].mode} dump but rank "
                               f"{ranks[0]}'s is a {first.mode} dump")
    if first.mode == "md5":
        raise CompareError(f"{str(first.path.parent.parent)!r}: the md5 checksums of shards cannot be merged into "
                           f"the whole tensor's; dump with summary_mode 'statistics' or task 'tensor'")
    tensor_mode = first.mode == "tensor"
    forward: list[tuple[str, dict]] = []
    rest: list[list[tuple[str, dict]]] = []
    merged_stacks: dict[str, list[str]] = {}
    offsets: dict[str, int] = {}
    partial_entries = 0
    for group in stages:
        lead = dumps[group[0]]
        names = _stage_names(lead.entries, offsets) if len(stages) > 1 else {n: n for n in lead.entries}
        _advance(offsets, names)
        stage_rest = []
        for name, new in names.items():
            holders = [r for r in group if name in dumps[r].entries]
            partial_entries += len(holders) < len(group)
            entry = _merge_tree([dumps[r].entries[name] for r in holders], holders, [dumps[r] for r in holders],
                                other.entries.get(new), tensor_mode)
            (forward if _is_forward(new) else stage_rest).append((new, entry))
            frames = (stacks or {}).get(group[0], {}).get(name)
            if frames is not None:
                merged_stacks[new] = frames
        rest.append(stage_rest)
    if partial_entries:
        logger.warning("%d entries are not on every rank of their group: they are merged from the ranks that have "
                       "them", partial_entries)
    entries = dict(forward + [item for stage_rest in reversed(rest) for item in stage_rest])
    return DumpFile(first.path, first.task, first.level, entries, first.tensor_dir, merged_stacks,
                    first.recorded_framework)


def read_merged(rank_dirs: dict[int, Path], other: DumpFile, layout: Layout, what: str) -> DumpFile:
    """Read the rank directories of one step and merge them (:func:`merge_dumps`); stacks come from each
    stage's lowest rank."""
    dumps = {rank: read_dump(path / "dump.json", f"{what} rank {rank}") for rank, path in rank_dirs.items()}
    stacks = {rank: read_stack(path / "stack.json") for rank, path in rank_dirs.items()
              if (path / "stack.json").is_file()}
    merged = merge_dumps(dumps, other, layout, stacks)
    logger.info("%s: merged %d ranks (%s) into one dump of %d entries", what, len(dumps),
                ", ".join(map(str, sorted(dumps))), len(merged.entries))
    return merged
