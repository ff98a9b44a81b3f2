"""The one selector of what a step collects: step, rank, scope, list and data_mode.

Both frameworks and every task ask the same object, so a filter means the same thing everywhere. The
interceptor calls :meth:`Selector.begin` for every entry as it starts and :meth:`Selector.end` when a
module's forward finishes; scope ranges and module spans from ``list`` are states that those calls open and
close, in execution order. The rules (exact ``list`` matching, module spans, scope and list together, a
backward entry with its forward): docs/pytorch/dump.md#filters.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from msprobe.core.lifecycle.naming import BACKWARD, DIRECTIONS, FORWARD, EntryName, parse_name
from msprobe.core.lifecycle.risk import RiskFilter

DATA_MODES = ("all", "forward", "backward", "input", "output")
PARTS = ("input", "output")


class Selector:
    def __init__(
        self,
        *,
        steps: Sequence[int] = (),
        ranks: Sequence[int] = (),
        scope: Sequence[str] = (),
        names: Sequence[str] = (),
        data_mode: Sequence[str] = ("all",),
        risk: RiskFilter | None = None,
    ) -> None:
        self._steps = frozenset(_non_negative_ints("step", steps))
        self._ranks = frozenset(_non_negative_ints("rank", ranks))
        self._scope = _ScopeRange(scope) if scope else None
        self._list = _NameList(names) if names else None
        # risk_level decides only where neither scope nor list is given (docs/config.md#risk_level-and-tensor_list)
        self._risk = risk if risk is not None and risk.level != "ALL" and not (scope or names) else None
        self._directions, self._parts = _data_mode(data_mode)
        self._keeps_all = len(self._directions) == len(DIRECTIONS) and len(self._parts) == len(PARTS)
        self._selected_forwards: set[str] = set()
        # what scope and list let through in the whole run, for the empty-dump warning (lifecycle.empty_dump)
        self.selected_any = self.scope_opened = self.list_matched = False

    @property
    def filters(self) -> bool:
        """scope, list or a risk_level other than ALL selects."""
        return self._scope is not None or self._list is not None or self._risk is not None

    # ------------------------------------------------------------------ step and rank
    def selects_step(self, step: int) -> bool:
        return not self._steps or step in self._steps

    def selects_rank(self, rank: int | None) -> bool:
        """``None`` (no process group) counts as rank 0."""
        return not self._ranks or (0 if rank is None else rank) in self._ranks

    def last_step(self) -> int | None:
        return max(self._steps) if self._steps else None

    # ------------------------------------------------------------------ scope and list
    def begin(self, name: str) -> bool:
        """An entry starts; True when scope and list select it (or its forward was selected)."""
        if self._scope is None and self._list is None:
            if self._risk is None:
                return True
            kept = self._risk.keeps(parse_name(name))
            self.selected_any |= kept
            return kept
        entry = parse_name(name)
        in_scope = self._scope.begin(name, entry) if self._scope else True
        in_list = self._list.begin(name, entry) if self._list else True
        self.scope_opened |= bool(self._scope) and in_scope
        self.list_matched |= bool(self._list) and in_list
        self.selected_any |= in_scope and in_list
        if entry.direction == FORWARD:
            if in_scope and in_list:
                self._selected_forwards.add(name)
                return True
            return False
        return (in_scope and in_list) or entry.twin(FORWARD) in self._selected_forwards

    def end(self, name: str) -> None:
        """A module's forward finished: closes the scope range or list span it ends."""
        if self._scope:
            self._scope.end(name)
        if self._list:
            self._list.end(name)

    def reset(self) -> None:
        """A new step: forward selections and open ranges and spans are forgotten."""
        self._selected_forwards.clear()
        if self._scope:
            self._scope.reset()
        if self._list:
            self._list.reset()

    # ------------------------------------------------------------------ data_mode
    def wants(self, name: str, part: str | None = None) -> bool:
        """Whether data_mode keeps ``part`` ("input"/"output") of entry ``name``; ``None``: any part of it."""
        if part is not None and part not in PARTS:
            raise ValueError(f"part {part!r} is not one of {', '.join(PARTS)} (or None for the whole entry)")
        if self._keeps_all:
            return True
        if parse_name(name).direction not in self._directions:
            return False
        return part is None or part in self._parts


class _ScopeRange:
    """Inclusive range from the first name's start to the last name's end (a module forward ends at
    :meth:`end`, any other entry right after it starts)."""

    def __init__(self, scope: Sequence[str]) -> None:
        if isinstance(scope, str) or len(scope) != 2:
            raise ValueError(f"scope {scope!r}: give [] or exactly two full entry names (first and last)")
        for index, name in enumerate(scope):
            try:
                parse_name(name)
            except ValueError as error:
                raise ValueError(f"scope[{index}]: {error}") from None
        self._first, self._last = scope
        last = parse_name(self._last)
        self._last_ends_at_end = last.is_module and last.direction == FORWARD
        self.reset()

    def reset(self) -> None:
        self._opened = self._closed = False

    def begin(self, name: str, entry: EntryName) -> bool:
        if self._closed:
            return False
        if not self._opened and name == self._first:
            self._opened = True
        if self._opened and name == self._last and not self._last_ends_at_end:
            self._closed = True
            return True
        return self._opened

    def end(self, name: str) -> None:
        if self._opened and name == self._last:
            self._closed = True


class _NameList:
    """``list``: full names matched exactly, other items as kinds; a selected module forward opens a
    span that selects everything until its :meth:`end`."""

    def __init__(self, names: Sequence[str]) -> None:
        if isinstance(names, str):
            raise ValueError(f"list {names!r}: give a list of names, not one string")
        self._full: set[str] = set()
        self._kinds: set[str] = set()
        for index, name in enumerate(names):
            if not isinstance(name, str) or not name.strip():
                raise ValueError(f"list[{index}] {name!r}: give a full entry name or an API/module kind")
            try:
                parse_name(name)
                self._full.add(name)
            except ValueError:
                self._kinds.add(name)
        self._open_spans: set[str] = set()

    def reset(self) -> None:
        self._open_spans.clear()

    def begin(self, name: str, entry: EntryName) -> bool:
        matched = name in self._full or self._matches_kind(entry)
        if matched and entry.is_module and entry.direction == FORWARD:
            self._open_spans.add(name)
        return matched or bool(self._open_spans)

    def end(self, name: str) -> None:
        self._open_spans.discard(name)

    def _matches_kind(self, entry: EntryName) -> bool:
        if entry.is_module:
            return entry.cls in self._kinds
        return entry.api in self._kinds or f"{entry.prefix}.{entry.api}" in self._kinds


def _non_negative_ints(field: str, values: Sequence[int]) -> list[int]:
    bad = [v for v in values if isinstance(v, bool) or not isinstance(v, int) or v < 0]
    if bad or isinstance(values, (str, bytes)):
        raise ValueError(f"{field} {list(values)!r}: give non-negative integers (ranges already expanded)")
    return list(values)


def _data_mode(modes: Sequence[str]) -> tuple[frozenset[str], frozenset[str]]:
    """The directions and parts data_mode keeps: only parts given → both directions; only
    directions → all parts; ``["all"]`` → everything."""
    if isinstance(modes, str) or not modes or any(m not in DATA_MODES for m in modes):
        raise ValueError(
            f"data_mode {modes!r}: give a non-empty list of {', '.join(repr(m) for m in DATA_MODES)}"
        )
    if "all" in modes:
        if len(set(modes)) != 1:
            raise ValueError(f"data_mode {list(modes)!r}: 'all' must be alone")
        return frozenset(DIRECTIONS), frozenset(PARTS)
    directions = frozenset(m for m in modes if m in DIRECTIONS) or frozenset((FORWARD, BACKWARD))
    parts = frozenset(m for m in modes if m in PARTS) or frozenset(PARTS)
    return directions, parts



def selector_for(config: Any, *, scope_is_names: bool = False) -> Selector:
    """The Selector a validated configuration asks for (sections without scope/list/data_mode select
    everything). ``scope_is_names``: the section's ``scope`` lists full names to select, not a range
    (free benchmark's ``scope``, as the seed defines it)."""
    section = config.section
    scope, names = getattr(section, "scope", ()), getattr(section, "api_list", ())
    if scope_is_names:
        scope, names = (), (*scope, *names)
    return Selector(
        steps=config.step,
        ranks=config.rank,
        scope=scope,
        names=names,
        data_mode=getattr(section, "data_mode", ("all",)),
        risk=RiskFilter(config.risk_level, config.low_risk_apis),
    )


def named_by(names: Sequence[str]) -> Callable[[str], bool]:
    """Whether an entry is one ``names`` lists (statistics' ``tensor_list``): a full name (its backward too),
    or an API kind (``"linear"``, ``"Functional.linear"``) or module class, as ``list`` reads them."""
    full = {parse_name(n).twin(FORWARD) for n in names if _is_full_name(n)}
    kinds = {n for n in names if not _is_full_name(n)}

    def match(name: str) -> bool:
        entry = parse_name(name)
        if entry.is_module:
            return entry.twin(FORWARD) in full or entry.cls in kinds
        return entry.twin(FORWARD) in full or entry.api in kinds or f"{entry.prefix}.{entry.api}" in kinds

    return match


def _is_full_name(name: str) -> bool:
    try:
        parse_name(name)
    except ValueError:
        return False
    return True
