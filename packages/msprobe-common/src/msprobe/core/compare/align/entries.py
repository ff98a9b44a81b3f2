"""Pair the entries of two dumps, then the rows of each pair.

msprobe 1.1.1 walked both dumps in lock step, so one extra API on either side shifted every later
row out of its match. Here the two entry sequences are aligned like a text diff (Myers' algorithm,
fast when the runs mostly agree) on names and argument structure (after the ``-dm`` mapping), then
inside each gap on looser keys (see :func:`align_entries`). Whatever stays unpaired is kept, so
every entry of both sides appears in the report. A module entry the alignment left one-sided because the two
dumps wrote it in different orders (a ``parameters_grad`` entry is written when the gradients are ready, which a
tensor-parallel run or another version reaches elsewhere among its calls) pairs by name afterwards
(:mod:`.out_of_order`).

A MindSpore dump against a PyTorch one goes through the same alignment with other keys
(:class:`~.cross_framework.CrossFramework`).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

from msprobe.core.compare.align.cross_framework import CrossFramework
from msprobe.core.compare.align.out_of_order import pair_out_of_order
from msprobe.core.compare.read import Row, structure
from msprobe.core.lifecycle.naming import BACKWARD, MODULE_KINDS, direction_of, parse_name

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
    passes that look at counts. Module entries (``parameters_grad`` too) still one-sided on both sides
    with the same name are then paired wherever each side wrote them (:mod:`.out_of_order`). A
    cross-framework pair (``cross``) uses :meth:`CrossFramework.keys` instead, which never look at counts;
    an NPU entry that ``mapping`` (``-dm``) names takes the keys of the bench entry it is mapped to.
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

    def module_entry(side: str, name: str) -> str | None:
        own = named(side, name)
        return own if own.split(".", 1)[0] in MODULE_KINDS else None

    return pair_out_of_order(_align(list(npu), list(bench), keys), module_entry)


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
              cross: CrossFramework | None = None, entries: tuple[str | None, str | None] = (None, None),
              ) -> list[RowPair]:
    """Rows of two paired entries (named ``entries``, NPU and bench), matched by argument path (``input.0``), in
    NPU order.

    ``mapping`` may map an NPU row name to a bench row name of the paired entry (``-dm``). In a
    cross-framework pair the MindSpore side's paths are first read in PyTorch's terms, and two rows
    that :func:`not_the_same` proves different stay unpaired, each with the reason (``note``). In a backward
    pair of one framework a gradient one side records as ``null`` and the other leaves out is no gradient on
    either side (:func:`absent_gradients`).
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
    return absent_gradients(pairs, entries) if cross is None else pairs


def absent_gradients(pairs: list[RowPair], entries: tuple[str | None, str | None]) -> list[RowPair]:
    """``pairs`` of two backward entries with each one-sided ``null`` row paired with a ``null`` of the other
    entry: msprobe 26.2.0 leaves out the gradients that did not flow, where ours and 1.1.1's write ``null``
    (docs/compare.md#matching)."""
    npu_entry, bench_entry = entries
    if npu_entry is None or bench_entry is None or direction_of(npu_entry) != BACKWARD:
        return pairs
    out = []
    for pair in pairs:
        row = pair.npu or pair.bench
        if (pair.npu is None or pair.bench is None) and row.value is None and pair.note is None:
            side = "bench" if pair.bench is None else "NPU"
            stand_in = Row(bench_entry if pair.bench is None else npu_entry, row.suffix, row.part, None)
            pair = RowPair(pair.npu or stand_in, pair.bench or stand_in,
                           f"no gradient: the {side} dump leaves it out (msprobe 26.2.0), read as null")
        out.append(pair)
    return out


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
