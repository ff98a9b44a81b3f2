"""Where it first went wrong: the first divergence and the worst rows of a comparison.

The first divergence is the earliest forward entry whose outputs fail while none of its inputs do:
the error was made there rather than carried in. When every failing entry already had failing
inputs, the earliest entry with a failing output is named instead, and the report says so; when no
forward output fails at all, backward entries are searched the same way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from msprobe.core.compare.verdict import DIFFERENT, RowResult
from msprobe.core.naming import BACKWARD, FORWARD, parse_name


@dataclass(frozen=True)
class Divergence:
    entry: str
    position: int  # index of the entry's first row in the report
    failing_rows: list[RowResult]
    inputs_pass: bool
    stack: list[str]


def _is_backward(name: str) -> bool:
    try:
        return parse_name(name).direction == BACKWARD
    except ValueError:
        return False


def group_by_entry(results: list[RowResult]) -> list[tuple[int, list[RowResult]]]:
    """Consecutive rows of the same entry, with the position of the group's first row."""
    groups: list[tuple[int, list[RowResult]]] = []
    for position, result in enumerate(results):
        if groups and groups[-1][1][0].entry == result.entry:
            groups[-1][1].append(result)
        else:
            groups.append((position, [result]))
    return groups


def first_divergence(results: list[RowResult], stacks: dict[str, list[str]]) -> Divergence | None:
    """Forward entries are searched first (SPEC 5); backward ones only when no forward output fails."""
    groups = group_by_entry(results)
    for backward in (False, True):
        fallback: Divergence | None = None
        for position, rows in groups:
            failing = [r for r in rows if r.part == "output" and r.failed]
            if not failing or _is_backward(rows[0].entry) != backward:
                continue
            inputs_pass = not any(r.failed for r in rows if r.part == "input")
            stack = stacks.get(rows[0].entry) or stacks.get(_forward_of(rows[0].entry), [])
            found = Divergence(rows[0].entry, position, failing, inputs_pass, stack)
            if inputs_pass:
                return found
            fallback = fallback or found
        if fallback is not None:
            return fallback
    return None


_LIBRARY_DIRS = ("site-packages", "dist-packages")


def user_frame(stack: list[str]) -> str | None:
    """The innermost frame outside installed libraries: for a layer call the frames start inside torch's
    or mindspore's own code, which says nothing about where the user's model made the call."""
    return next((frame for frame in stack if not any(d in frame for d in _LIBRARY_DIRS)), stack[0] if stack else None)


def _forward_of(name: str) -> str:
    try:
        return parse_name(name).twin(FORWARD)
    except ValueError:
        return name


def _badness(result: RowResult) -> tuple:
    if result.tensor is not None:
        cos = result.tensor.cosine
        rel = result.tensor.max_relative_err
        return (-1 if result.failed else 0, cos if cos is not None else 2.0, -(rel or 0.0))
    rels = [r for _, r in result.stat_diffs if r is not None and not math.isnan(r)]
    return (-1 if result.failed or result.verdict == DIFFERENT else 0, 0.0, -max(rels, default=0.0))


def _measured(result: RowResult) -> bool:
    """A row with a number to rank it by (or a failing verdict); non-tensor arguments compared by
    value have neither, and would only pad the list."""
    if result.failed or result.verdict == DIFFERENT:
        return True
    if result.tensor is not None:
        return result.tensor.cosine is not None or result.tensor.max_relative_err is not None
    return any(r is not None and not math.isnan(r) for _, r in result.stat_diffs)


def worst_rows(results: list[RowResult], limit: int = 20) -> list[RowResult]:
    """Failing rows first, then by lowest Cosine / highest relative error; only matched rows that
    have a measure."""
    matched = [r for r in results if r.npu is not None and r.bench is not None and _measured(r)]
    return sorted(matched, key=_badness)[:limit]
