"""Where it first went wrong: the first divergence, the optimizer's divergences and the worst rows.

A row *diverges* when its difference is more than rounding explains (:mod:`.rounding`). The first
divergence is the earliest forward entry with a diverging output whose inputs do not diverge — the
error was made there rather than carried in — or whose diverging inputs are the first diverging
values of the whole comparison (a weight or batch that differs before any recorded call touched it).
When no entry qualifies, the earliest entry with a diverging output is named and the report says its
inputs already diverge. Backward entries are searched only when no forward output diverges.

Optimizer entries (calls made from ``torch/optim/`` or ``mindspore/nn/optim`` code, told by their
stack) are never chosen: an optimizer step divides by the square root of tiny second moments and
turns the rounding noise of a near-zero gradient into a full-size update of the opposite sign, so
bf16 against fp32 always "diverges" there. They are listed in a section of their own instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from msprobe.core.compare.verdict import DIFFERENT, RowResult
from msprobe.core.naming import BACKWARD, FORWARD, parse_name

OPTIMIZER_DIRS = ("torch/optim/", "mindspore/nn/optim")
FORWARD_KIND, BACKWARD_KIND, OPTIMIZER_KIND = "forward", "backward", "optimizer"


@dataclass(frozen=True)
class Divergence:
    entry: str
    position: int  # index of the entry's first row in the report
    failing_rows: list[RowResult]  # its diverging output rows
    inputs_pass: bool
    stack: list[str]
    kind: str = FORWARD_KIND

    @property
    def excess(self) -> float | None:
        known = [r.excess for r in self.failing_rows if r.excess is not None]
        return max(known) if known else None


def _is_backward(name: str) -> bool:
    try:
        return parse_name(name).direction == BACKWARD
    except ValueError:
        return False


def is_optimizer(stack: list[str]) -> bool:
    """A call made by optimizer code: some frame's file lies under torch/optim/ or mindspore/nn/optim."""
    return any(d in frame.replace("\\", "/") for frame in stack for d in OPTIMIZER_DIRS)


def group_by_entry(results: list[RowResult]) -> list[tuple[int, list[RowResult]]]:
    """Consecutive rows of the same entry, with the position of the group's first row."""
    groups: list[tuple[int, list[RowResult]]] = []
    for position, result in enumerate(results):
        if groups and groups[-1][1][0].entry == result.entry:
            groups[-1][1].append(result)
        else:
            groups.append((position, [result]))
    return groups


def stack_of(entry: str, stacks: dict[str, list[str]]) -> list[str]:
    """stack.json records forward entries; a backward entry has its forward twin's stack."""
    return stacks.get(entry) or stacks.get(_forward_of(entry), [])


def entry_kind(entry: str, stacks: dict[str, list[str]]) -> str:
    if is_optimizer(stack_of(entry, stacks)):
        return OPTIMIZER_KIND
    return BACKWARD_KIND if _is_backward(entry) else FORWARD_KIND


def diverging_entries(results: list[RowResult], stacks: dict[str, list[str]]) -> list[Divergence]:
    """Every entry with a diverging output row, in execution order; ``inputs_pass`` is True also where its
    diverging inputs are the first diverging values of the comparison (see the module docstring)."""
    found = []
    seen_divergence = False
    for position, rows in group_by_entry(results):
        failing = [r for r in rows if r.part == "output" and r.diverges]
        inputs_diverge = any(r.diverges for r in rows if r.part == "input")
        if failing:
            entry = rows[0].entry
            found.append(Divergence(entry, position, failing, not inputs_diverge or not seen_divergence,
                                    stack_of(entry, stacks), entry_kind(entry, stacks)))
        seen_divergence = seen_divergence or inputs_diverge or bool(failing)
    return found


def first_divergence(results: list[RowResult], stacks: dict[str, list[str]]) -> Divergence | None:
    """Forward entries first, then backward ones; never the optimizer's (see the module docstring)."""
    candidates = diverging_entries(results, stacks)
    for kind in (FORWARD_KIND, BACKWARD_KIND):
        of_kind = [d for d in candidates if d.kind == kind]
        if of_kind:
            return next((d for d in of_kind if d.inputs_pass), of_kind[0])
    return None


def optimizer_divergences(results: list[RowResult], stacks: dict[str, list[str]]) -> list[Divergence]:
    return [d for d in diverging_entries(results, stacks) if d.kind == OPTIMIZER_KIND]


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
