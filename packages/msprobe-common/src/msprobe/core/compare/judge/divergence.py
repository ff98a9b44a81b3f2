"""Where it first went wrong: the first divergence, the optimizer's divergences and the worst rows.

A row diverges when rounding does not explain its difference (:mod:`.rounding`). The first divergence is
the earliest forward entry whose diverging output its inputs do not explain, or one whose divergence enters
through an input no recorded call produced (a parameter named through :data:`PARAMETER_ARGS`); optimizer
entries are never chosen and get a section of their own. The rule and why:
docs/compare.md#first-divergence-beyond-rounding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from msprobe.core.compare.judge.verdict import DIFFERENT, RowResult, note_entering, scalar_value
from msprobe.core.lifecycle.naming import BACKWARD, FORWARD, parse_name

OPTIMIZER_DIRS = ("torch/optim/", "mindspore/nn/optim")
FORWARD_KIND, BACKWARD_KIND, OPTIMIZER_KIND = "forward", "backward", "optimizer"


# The tensor arguments after the first that are parameters or buffers, per API (torch.nn.functional's order).
_NORM_STATS = ("running_mean", "running_var", "weight", "bias")
PARAMETER_ARGS: dict[str, tuple[str | None, ...]] = {
    **{name: ("weight", "bias") for name in ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
                                              "conv_transpose2d", "conv_transpose3d", "addmm")},
    "batch_norm": _NORM_STATS, "instance_norm": _NORM_STATS, "layer_norm": (None, "weight", "bias"),
    "group_norm": (None, "weight", "bias"), "rms_norm": (None, "weight"), "embedding": ("weight",),
}
_PARAMETER_KEYWORDS = {"weight", "bias", "running_mean", "running_var"}


@dataclass(frozen=True)
class Entering:
    """A diverging input no recorded call produced: where the divergence enters the run."""

    row: RowResult
    parameter: str | None  # ``fc1.weight`` when construct.json and the API's signature tell

    @property
    def suffix(self) -> str:
        return (self.row.npu or self.row.bench).suffix  # type: ignore[union-attr]

    def describe(self) -> str:
        what = f"a parameter: {self.parameter}" if self.parameter else \
            "an input no recorded API produced: a parameter, buffer or the batch"
        return f"{self.suffix} ({what})"


@dataclass(frozen=True)
class Divergence:
    entry: str
    position: int  # index of the entry's first row in the report
    failing_rows: list[RowResult]  # its diverging output rows
    inputs_pass: bool
    stack: list[str]
    kind: str = FORWARD_KIND
    entering: list[Entering] = field(default_factory=list)  # diverging inputs no recorded call produced
    arguments: list[str] = field(default_factory=list)  # its own non-tensor arguments that differ: ``eps 0.5 vs 1e-05``

    @property
    def excess(self) -> float | None:
        known = [r.excess for r in self.failing_rows if r.excess is not None]
        return max(known) if known else None

    def called_with(self) -> str:
        """``called with different arguments: eps 0.5 vs 1e-05``; '' when the two runs' calls agree. The call itself
        is then where the runs part: the op is the origin, whatever its tensor inputs."""
        return f"called with different arguments: {', '.join(self.arguments)}" if self.arguments else ""

    def how(self) -> str:
        """Why the entry is chosen, for the console and the reports: its differing arguments, then where the
        divergence enters, else whether its tensor inputs pass."""
        said = "; ".join(text for text in (self.called_with(), self.enters()) if text)
        if said and not self.arguments:
            return said
        inputs = "its tensor inputs" if self.arguments else "its inputs"
        state = f"{inputs} pass" if self.inputs_pass else f"{inputs} already diverge"
        return f"{said}; {state}" if said else state

    def enters(self) -> str:
        """``enters through input.1 (a parameter: fc1.weight), 1.52 times what rounding explains``; '' when
        no input the divergence could enter through differs."""
        if not self.entering:
            return ""
        worst = max((e.row.excess for e in self.entering if e.row.excess is not None), default=0.0)
        return (f"enters through {', '.join(e.describe() for e in self.entering)}, {worst:.3g} times what "
                f"rounding explains")


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


def parameter_name(entry: str, suffix: str, construct: dict[str, str | None]) -> str | None:
    """``fc1.weight`` for ``Functional.linear.0.forward`` ``input.1`` run inside ``Module.fc1.Linear.forward.0``;
    ``weight`` without the module; None when the API's signature does not say what the argument is."""
    parts = suffix.split(".")
    try:
        api = parse_name(entry).api
    except ValueError:
        return None
    if len(parts) != 2 or parts[0] != "input":
        return None
    if parts[1].isdigit():
        roles = PARAMETER_ARGS.get(api, ())
        index = int(parts[1]) - 1
        name = roles[index] if 0 <= index < len(roles) else None
    else:
        name = parts[1] if parts[1] in _PARAMETER_KEYWORDS else None
    if name is None:
        return None
    try:
        parent = parse_name(construct.get(entry) or "")
    except ValueError:
        return name
    return f"{parent.api}.{name}" if parent.is_module else name


def _is_tensor(result: RowResult) -> bool:
    return any(row is not None and row.is_tensor for row in (result.npu, result.bench))


def differing_arguments(rows: list[RowResult]) -> list[str]:
    """The entry's non-tensor arguments that differ between the runs, each as :func:`argument_difference`."""
    return [argument_difference(r) for r in rows if r.part == "input" and r.diverges and not _is_tensor(r)]


def argument_difference(result: RowResult) -> str:
    """``eps 0.5 vs 1e-05`` (a keyword argument by its name, a positional one by its row suffix), NPU first."""
    side = result.npu or result.bench
    name = side.suffix[len("input."):] if side.suffix.startswith("input.") else side.suffix  # type: ignore[union-attr]
    name = name if not name.isdigit() else side.suffix  # type: ignore[union-attr]
    values = [scalar_value(row.value) if row is not None else "absent" for row in (result.npu, result.bench)]
    return f"{name} {values[0]!r} vs {values[1]!r}"


def diverging_entries(results: list[RowResult], stacks: dict[str, list[str]],
                      construct: dict[str, str | None] | None = None) -> list[Divergence]:
    """Every entry with a diverging output row, or (forward) a diverging input no recorded call produced, in
    execution order; ``inputs_pass`` is True also where its other diverging inputs are the first diverging
    values of the comparison (see the module docstring)."""
    found = []
    seen_divergence = False
    for position, rows in group_by_entry(results):
        entry = rows[0].entry
        kind = entry_kind(entry, stacks)
        failing = [r for r in rows if r.part == "output" and r.diverges]
        diverging_inputs = [r for r in rows if r.part == "input" and r.diverges and _is_tensor(r)]
        arguments = differing_arguments(rows)
        entering = [Entering(r, parameter_name(entry, (r.npu or r.bench).suffix, construct or {}))
                    for r in diverging_inputs if r.entering] if kind == FORWARD_KIND else []
        inherited = len(diverging_inputs) > len(entering)
        if failing or entering:
            found.append(Divergence(entry, position, failing, not inherited or not seen_divergence,
                                    stack_of(entry, stacks), kind, entering, arguments))
        seen_divergence = seen_divergence or bool(diverging_inputs) or bool(failing)
    return found


def first_divergence(results: list[RowResult], stacks: dict[str, list[str]],
                     construct: dict[str, str | None] | None = None) -> Divergence | None:
    """Forward entries first, then backward ones; never the optimizer's (see the module docstring)."""
    candidates = diverging_entries(results, stacks, construct)
    for kind in (FORWARD_KIND, BACKWARD_KIND):
        of_kind = [d for d in candidates if d.kind == kind]
        if of_kind:
            return next((d for d in of_kind if d.inputs_pass), of_kind[0])
    return None


def optimizer_divergences(results: list[RowResult], stacks: dict[str, list[str]]) -> list[Divergence]:
    return [d for d in diverging_entries(results, stacks) if d.kind == OPTIMIZER_KIND]


@dataclass(frozen=True)
class Amplified:
    """Rows beyond rounding computed from an ill-conditioned op: not divergences (compare.judge.conditioning)."""

    origin: str  # ``Primitive.bn_train.BatchNorm.6.forward (normalises 2 values per channel)``
    rows: int  # rows after it beyond rounding
    worst: float  # their largest excess


def amplified_rows(results: list[RowResult]) -> Amplified | None:
    """What the first divergence left out because an ill-conditioned op came before; None when nothing was."""
    beyond = [r for r in results if r.amplified]
    if not beyond:
        return None
    return Amplified(beyond[0].amplified_by, len(beyond), max(r.excess for r in beyond))  # type: ignore[arg-type]


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


def mark_entering(found: Divergence | None) -> None:
    """Each input the first divergence enters through says so in its Err_message."""
    for entering in found.entering if found is not None else []:
        note_entering(entering.row, entering.describe())
