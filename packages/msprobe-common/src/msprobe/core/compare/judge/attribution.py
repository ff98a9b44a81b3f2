"""Replay attribution (``compare --attribute``): was a divergence made at this API, or carried in?

Replaying a suspect at the target's dtype on the bench's inputs (``rb``) and on the target's own (``rt``)
splits its output error exactly, ``t − b = (t − rt) + (rt − rb) + (rb − b)``: the target's kernel, what the
inputs carry in, what the dtype does. Each part is judged by the first-divergence rule (:mod:`.rounding`)
and the verdict is ``local``, ``inherited`` or ``mixed``:
docs/compare.md#attribution-made-here-or-inherited---attribute. Turning an entry back into a call is the
framework's :class:`Replay` (``msprobe.pytorch.run_ut.attribution``), so this module imports no framework;
statistics dumps get the suspects and :func:`dump_config` instead.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from msprobe.core.compare.judge.divergence import FORWARD_KIND, Divergence, diverging_entries
from msprobe.core.compare.judge.metrics import compare_tensors
from msprobe.core.compare.judge.rounding import FORWARD_SLACK
from msprobe.core.compare.judge.verdict import RowResult
from msprobe.core.compare.read import DumpFile, TensorSpec, flatten_entry, tensor_path
from msprobe.core.lifecycle.naming import parse_name
from msprobe.core.services.fileio import atomic_write_text

LOCAL, INHERITED, MIXED = "local", "inherited", "mixed"
KERNEL, DTYPE = "kernel", "dtype"
PARTS = (KERNEL, DTYPE, INHERITED)  # the three shares of an output's error, in the reports' column order
CAUSES = {KERNEL: "target's kernel", DTYPE: "dtype", INHERITED: "inherited"}
AMPLIFIED = "input rounding"  # the inherited part of an API whose inputs pass: rounding the op amplifies
DEFAULT_LIMIT = 10
NEEDS_TENSORS = "needs tensors"
CONFIG_NAME = "attribution_dump_config.json"
_STEP_DIR, _RANK_DIR = re.compile(r"step(\d+)"), re.compile(r"rank(\d+)")


@dataclass(frozen=True)
class ReplayRequest:
    """One API call to replay: the target's entry name and record (the dtypes to run at), and the record
    whose inputs to run it on — the bench's or the target's — with the directory of its tensor files,
    plus the loader of those files."""

    entry: str
    target_record: dict
    inputs_record: dict
    inputs_dir: Path
    loader: Callable[[Path, TensorSpec], np.ndarray]


class Replay(Protocol):
    """The framework's replay. Returns the call's tensor outputs in the order the dump lists them, or a
    string saying why it cannot replay the call (random, distributed, a missing file...)."""

    device: str

    def __call__(self, request: ReplayRequest) -> list[np.ndarray] | str: ...


@dataclass(frozen=True)
class ErrorShare:
    """One part of an output's error in the row's measures (None where the measure is undefined)."""

    norm_rel: float | None  # ‖part‖ / ‖bench output‖
    cosine: float | None
    max_abs: float | None
    excess: float | None  # ‖part‖ over what rounding explains, as the row's own excess


@dataclass(frozen=True)
class Verdict:
    """local / inherited / mixed, and the parts beyond rounding that make it (:data:`CAUSES` names)."""

    name: str
    causes: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """``local (target's kernel)``, ``inherited``, ``mixed (dtype, inherited)``."""
        if self.name == INHERITED:
            return self.name
        return f"{self.name} ({', '.join(self.causes) or 'no part alone beyond rounding'})"


@dataclass(frozen=True)
class OutputAttribution:
    """The split of one output row."""

    row: RowResult
    kernel: ErrorShare
    dtype: ErrorShare
    inherited: ErrorShare
    judged: Verdict

    @property
    def verdict(self) -> str:
        return self.judged.name

    def shares(self) -> list[ErrorShare]:
        return [getattr(self, part) for part in PARTS]


@dataclass
class EntryAttribution:
    """One suspect: its verdict and per-output split, or the reason it was not replayed."""

    suspect: Divergence
    judged: Verdict | None = None  # None when not replayed
    reason: str = ""  # why it was not replayed
    outputs: list[OutputAttribution] = field(default_factory=list)
    inputs_pass: bool = False  # no input row of the entry is beyond rounding

    @property
    def entry(self) -> str:
        return self.suspect.entry

    @property
    def verdict(self) -> str:
        """local / inherited / mixed; "" when not replayed."""
        return self.judged.name if self.judged else ""

    @property
    def label(self) -> str:
        return self.judged.label if self.judged else ""

    def worst(self, part: str) -> ErrorShare | None:
        """The output share (``kernel`` / ``dtype`` / ``inherited``) with the largest excess."""
        shares = [getattr(o, part) for o in self.outputs]
        return max(shares, key=lambda s: -1.0 if s.excess is None else s.excess, default=None)


@dataclass
class Attribution:
    """What ``--attribute`` found: the suspects in execution order; for dumps without tensors, the
    dump config that would save them (``config``) instead of replays."""

    limit: int
    device: str
    entries: list[EntryAttribution]
    config: dict | None = None  # statistics / md5 mode: the task-tensor config for the suspects
    config_path: Path | None = None

    @property
    def first_local(self) -> EntryAttribution | None:
        return next((e for e in self.entries if e.verdict == LOCAL), None)

    @property
    def method(self) -> str:
        """How the parts were measured, for the log and the reports."""
        return (f"replayed on {self.device} at the target's dtype, on the bench's inputs and on the target's own: "
                f"target's kernel = target output vs the replay on the target's inputs (measured against "
                f"{self.device}'s kernel), inherited = replay on the target's inputs vs on the bench's, "
                f"dtype = replay on the bench's inputs vs bench output")

    def of_row(self, row: RowResult) -> tuple[EntryAttribution, OutputAttribution | None] | None:
        """The suspect a report row belongs to and the row's own split (None for its input rows)."""
        for entry in self.entries:
            if entry.entry == row.entry:
                return entry, next((o for o in entry.outputs if o.row is row), None)
        return None


def verdict_of(kernel: float | None, dtype: float | None, inherited: float | None, inputs_pass: bool,
               arguments: tuple[str, ...] = ()) -> Verdict:
    """The verdict from the three excesses (see the module docstring). ``arguments``: the call's own non-tensor
    arguments that differ between the runs (``eps 0.5 vs 1e-05``); each run's replay runs with its own, so the
    replays' difference is made by this call, not carried in: local when the tensor inputs pass."""
    excess = {KERNEL: kernel or 0.0, DTYPE: dtype or 0.0, INHERITED: inherited or 0.0}
    made_here = tuple(CAUSES[p] for p in (KERNEL, DTYPE) if excess[p] > 1)
    carried = excess[INHERITED] > 1
    if arguments and carried:
        own = f"its own arguments: {', '.join(arguments)}"
        return Verdict(LOCAL, made_here + (own,)) if inputs_pass else \
            Verdict(MIXED, made_here + (own, CAUSES[INHERITED]))
    if inputs_pass:
        return Verdict(LOCAL, made_here + ((AMPLIFIED,) if carried else ()))
    if made_here and not carried:
        return Verdict(LOCAL, made_here)
    if carried and not made_here:
        return Verdict(INHERITED, (CAUSES[INHERITED],))
    return Verdict(MIXED, made_here + ((CAUSES[INHERITED],) if carried else ()))


def suspects(results: list[RowResult], stacks: dict[str, list[str]], limit: int) -> list[Divergence]:
    """The first ``limit`` forward API entries with a diverging output, in execution order."""
    found = []
    for divergence in diverging_entries(results, stacks):
        if divergence.kind != FORWARD_KIND or _is_module(divergence.entry):
            continue
        found.append(divergence)
        if len(found) == limit:
            break
    return found


def _is_module(entry: str) -> bool:
    try:
        return parse_name(entry).is_module
    except ValueError:
        return False


def attribute(results: list[RowResult], stacks: dict[str, list[str]], npu: DumpFile, bench: DumpFile,
              loader: Callable[[Path, TensorSpec], np.ndarray], replay: Replay, limit: int, unit: float,
              out: Path) -> Attribution:
    """Replay the suspects of a comparison (tensor mode) or, for other modes, say how to dump them."""
    chosen = suspects(results, stacks, limit)
    if npu.mode != "tensor":
        entries = [EntryAttribution(s, reason="attribution needs the tensors of this API: dump them with the "
                                              "config below") for s in chosen]
        if not chosen:
            return Attribution(limit, replay.device, entries)
        config = dump_config(chosen, npu.path)
        path = out / CONFIG_NAME
        atomic_write_text(path, json.dumps(config, indent=2) + "\n")
        return Attribution(limit, replay.device, entries, config, path)
    allowance = unit * FORWARD_SLACK
    entries = [_attribute_entry(s, results, npu, bench, loader, replay, allowance) for s in chosen]
    return Attribution(limit, replay.device, entries)


def _attribute_entry(suspect: Divergence, results: list[RowResult], npu: DumpFile, bench: DumpFile,
                     loader: Callable[[Path, TensorSpec], np.ndarray], replay: Replay,
                     allowance: float) -> EntryAttribution:
    rows = _entry_rows(results, suspect)
    inputs_pass = not any(r.diverges for r in rows if r.part == "input" and (r.npu or r.bench).is_tensor)  # type: ignore
    outputs = [r for r in rows if r.part == "output" and r.npu is not None and r.bench is not None
               and r.npu.is_tensor and r.bench.is_tensor and r.tensor is not None and not r.tensor.shape_mismatch]
    bench_entry = outputs[0].bench.entry if outputs else None  # type: ignore[union-attr]
    if bench_entry is None:
        return EntryAttribution(suspect, reason="no output tensor is compared on both sides")
    target_record, bench_record = npu.entries[suspect.entry], bench.entries[bench_entry]
    order = [row.suffix for row in flatten_entry(bench_entry, bench_record) if row.part == "output" and row.is_tensor]
    replays = _replay_both(suspect.entry, target_record, (bench_record, bench.tensor_dir),
                           (target_record, npu.tensor_dir), loader, replay, len(order))
    if isinstance(replays, str):
        return EntryAttribution(suspect, reason=replays)
    split = []
    for row in outputs:
        pair = _load_pair(row, npu, bench, loader)
        if isinstance(pair, str):
            return EntryAttribution(suspect, reason=pair)
        index = order.index(row.bench.suffix)  # type: ignore[union-attr]
        again = [replays[side][index] for side in ("bench", "target")]
        wrong = next((a for a in again if np.size(a) != np.size(pair[1])), None)
        if wrong is not None:
            return EntryAttribution(suspect, reason=f"the replay's {row.bench.suffix} has shape "  # type: ignore
                                                    f"{list(np.shape(wrong))}, the bench's {list(np.shape(pair[1]))}")
        split.append(split_output(row, *pair, *again, allowance, inputs_pass, tuple(suspect.arguments)))
    if all(s.excess is None for o in split for s in o.shares()):
        return EntryAttribution(suspect, reason="its outputs have no elements finite on both sides to measure")
    attributed = EntryAttribution(suspect, outputs=split, inputs_pass=inputs_pass)
    attributed.judged = verdict_of(*(_excess(attributed.worst(p)) for p in PARTS), inputs_pass,
                                   tuple(suspect.arguments))
    return attributed


def _replay_both(entry: str, target_record: dict, bench_inputs: tuple[dict, Path], target_inputs: tuple[dict, Path],
                 loader: Callable[[Path, TensorSpec], np.ndarray], replay: Replay,
                 outputs: int) -> dict[str, list[np.ndarray]] | str:
    """The replays on the bench's inputs and on the target's (each a record and its tensor folder), or why
    one of them cannot be had."""
    replays = {}
    for side, (record, tensor_dir) in (("bench", bench_inputs), ("target", target_inputs)):
        replayed = replay(ReplayRequest(entry, target_record, record, tensor_dir, loader))
        if isinstance(replayed, str):
            return replayed if side == "bench" else f"on the target's inputs: {replayed}"
        if len(replayed) != outputs:
            return f"the replay on the {side}'s inputs gave {len(replayed)} output tensors, the bench dump records " \
                   f"{outputs}"
        replays[side] = replayed
    return replays


def _excess(share: ErrorShare | None) -> float | None:
    return None if share is None else share.excess


def _entry_rows(results: list[RowResult], suspect: Divergence) -> list[RowResult]:
    rows = []
    for row in results[suspect.position:]:
        if row.entry != suspect.entry:
            break
        rows.append(row)
    return rows


def _load_pair(row: RowResult, npu: DumpFile, bench: DumpFile,
               loader: Callable[[Path, TensorSpec], np.ndarray]) -> tuple[np.ndarray, np.ndarray] | str:
    arrays = []
    for side, dump, value in (("NPU", npu, row.npu.value), ("bench", bench, row.bench.value)):  # type: ignore
        path = tensor_path(dump, value)
        if path is None or not path.is_file():
            return f"the {side} tensor file of {row.npu.name} is missing"  # type: ignore[union-attr]
        try:
            arrays.append(loader(path, TensorSpec.of(value)))
        except Exception as exc:  # reported on the suspect, as the comparison reports unreadable files
            return f"{path} cannot be read: {type(exc).__name__}: {exc}"
    return arrays[0], arrays[1]


def split_output(row: RowResult, target: np.ndarray, bench: np.ndarray, on_bench: np.ndarray,
                 on_target: np.ndarray, allowance: float, inputs_pass: bool,
                 arguments: tuple[str, ...] = ()) -> OutputAttribution:
    """kernel = target vs replay on the target's inputs, dtype = replay on the bench's inputs vs bench,
    inherited = the two replays' difference; in the row's measures and scale."""
    on_bench, on_target = (np.reshape(r, np.shape(bench)) if np.shape(r) != np.shape(bench) else r
                           for r in (on_bench, on_target))  # a 0-d result the dump saved as [1]
    scale = row.tensor.scale_norm if row.tensor is not None else None
    bench_norm = row.tensor.bench.norm if row.tensor is not None else None
    allowed = allowance * (scale or 0.0)
    kernel = _share(target, on_target, bench_norm, allowed)
    dtype = _share(on_bench, bench, bench_norm, allowed)
    inherited = _share(on_target, on_bench, bench_norm, allowed)
    return OutputAttribution(row, kernel, dtype, inherited,
                             verdict_of(kernel.excess, dtype.excess, inherited.excess, inputs_pass, arguments))


def _share(a: np.ndarray, b: np.ndarray, bench_norm: float | None, allowed: float) -> ErrorShare:
    metrics = compare_tensors(a, b)
    if metrics.shape_mismatch:
        return ErrorShare(None, None, None, None)
    if metrics.nonfinite_mismatch:
        return ErrorShare(math.inf, metrics.cosine, metrics.max_abs_err, math.inf)
    diff = metrics.diff_norm
    if diff is None:
        return ErrorShare(None, metrics.cosine, metrics.max_abs_err, None)
    norm_rel = diff / bench_norm if bench_norm else (0.0 if diff == 0 else math.inf)
    excess = 0.0 if diff == 0 else (diff / allowed if allowed > 0 else math.inf)
    return ErrorShare(norm_rel, metrics.cosine, metrics.max_abs_err, excess)


def dump_config(chosen: list[Divergence], npu_json: Path) -> dict[str, Any]:
    """A config.json that dumps the tensors of exactly the suspects (both sides' names), at the step and
    rank of ``npu_json`` when its folders say them (``step0/rank3/dump.json``)."""
    names: dict[str, None] = {}
    for suspect in chosen:
        names[suspect.entry] = None
        names.update(dict.fromkeys(r.bench.entry for r in suspect.failing_rows if r.bench is not None))
    config: dict[str, Any] = {"task": "tensor", "dump_path": "./dump_attribution", "level": "L1"}
    step = _STEP_DIR.fullmatch(npu_json.parent.parent.name)
    rank = _RANK_DIR.fullmatch(npu_json.parent.name)
    if step:
        config["step"] = [int(step.group(1))]
    if rank:
        config["rank"] = [int(rank.group(1))]
    config["tensor"] = {"scope": [], "list": list(names), "data_mode": ["all"]}
    return config


def describe(entry: EntryAttribution) -> str:
    """``local (target's kernel): relative to the bench output's norm, target's kernel 0.1 (2.9x rounding), dtype
    0 (0x rounding), inherited 0 (0x rounding); its inputs pass``, or why the entry was not replayed; names come
    from the dumps, so the caller escapes the line."""
    if not entry.judged:
        return f"not replayed: {entry.reason}"
    parts = ", ".join(f"{CAUSES[p]} {_numbers(entry.worst(p))}" for p in PARTS)
    passing = "; its inputs pass" if entry.inputs_pass else ""
    return f"{entry.label}: relative to the bench output's norm, {parts}{passing}"


def _numbers(share: ErrorShare | None) -> str:
    if share is None or share.norm_rel is None:
        return "n/a"
    if math.isinf(share.norm_rel):
        return "inf/nan where the other side is finite"
    excess = "n/a" if share.excess is None else f"{share.excess:.3g}x rounding"
    return f"{share.norm_rel:.3g} ({excess})"
