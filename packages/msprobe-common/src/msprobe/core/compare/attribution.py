"""Replay attribution (``compare --attribute``): was a divergence made at this API, or carried in?

Once two runs drift apart every later output differs too, so "the first row beyond rounding" may be an
op that merely inherited the error. With tensor dumps of both runs the question can be answered by
experiment: replay the API on the current device, at the **target's** (NPU side's) dtype, on the
**bench** side's saved inputs. With ``t`` the target's output, ``b`` the bench's and ``r`` the replay,
the output error splits exactly into ``t − b = (r − b) + (t − r)``:

- **introduced** ``r − b``: what the target's op does to correct inputs (its kernel and dtype);
- **inherited** ``t − r``: the rest, which comes from the target's inputs differing from the bench's.

Each part gets the row's measures — relative error of norm ‖·‖/‖b‖, cosine, max abs — and an
``excess`` by the first-divergence rule (:mod:`.rounding`): its norm over slack · u · S with the row's
own u, slack and S, so the two excesses of a row bound its excess from above (triangle inequality).
Verdict: ``local`` when only the introduced part is beyond rounding, ``inherited`` when only the
inherited part is, ``mixed`` when both are, or when neither is alone but together they are.

The suspects are the first N forward API entries with a diverging output, in execution order (module
entries are containers, not replayable; backward entries are not replayed; optimizer calls are left out
as in the first-divergence rule). The earliest ``local`` suspect becomes the report's first divergence.
Statistics and md5 dumps have no inputs to replay: the result then names the suspects and the dump
config that saves exactly their tensors (:func:`dump_config`).

The framework half — turning an entry back into a call and running it — is a :class:`Replay` given by
the framework package (``msprobe.pytorch.attribution``), so this module never imports a framework.
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

from msprobe.core.compare.divergence import FORWARD_KIND, Divergence, diverging_entries
from msprobe.core.compare.escape import printable
from msprobe.core.compare.metrics import compare_tensors
from msprobe.core.compare.reader import DumpFile, tensor_path
from msprobe.core.compare.rounding import FORWARD_SLACK
from msprobe.core.compare.rows import flatten_entry
from msprobe.core.compare.tensorfile import TensorSpec
from msprobe.core.compare.verdict import RowResult
from msprobe.core.fileio import atomic_write_text
from msprobe.core.log import logger
from msprobe.core.naming import parse_name

LOCAL, INHERITED, MIXED = "local", "inherited", "mixed"
DEFAULT_LIMIT = 10
NEEDS_TENSORS = "needs tensors"
CONFIG_NAME = "attribution_dump_config.json"
_STEP_DIR, _RANK_DIR = re.compile(r"step(\d+)"), re.compile(r"rank(\d+)")


@dataclass(frozen=True)
class ReplayRequest:
    """One API call to replay: the target's entry name and record (its dtypes), and the bench's record
    with the directory of its tensor files (the inputs), plus the loader of those files."""

    entry: str
    target_record: dict
    bench_record: dict
    bench_tensor_dir: Path
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
class OutputAttribution:
    """The split of one output row."""

    row: RowResult
    introduced: ErrorShare
    inherited: ErrorShare
    verdict: str


@dataclass
class EntryAttribution:
    """One suspect: its verdict and per-output split, or the reason it was not replayed."""

    suspect: Divergence
    verdict: str = ""  # local / inherited / mixed; "" when not replayed
    reason: str = ""  # why it was not replayed
    outputs: list[OutputAttribution] = field(default_factory=list)

    @property
    def entry(self) -> str:
        return self.suspect.entry

    def worst(self, part: str) -> ErrorShare | None:
        """The output share (``introduced`` / ``inherited``) with the largest excess."""
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

    def of_row(self, row: RowResult) -> tuple[EntryAttribution, OutputAttribution | None] | None:
        """The suspect a report row belongs to and the row's own split (None for its input rows)."""
        for entry in self.entries:
            if entry.entry == row.entry:
                return entry, next((o for o in entry.outputs if o.row is row), None)
        return None


def verdict_of(introduced: float | None, inherited: float | None) -> str:
    """local / inherited / mixed from the two excesses (see the module docstring)."""
    local, carried = (introduced or 0.0) > 1, (inherited or 0.0) > 1
    if local != carried:
        return LOCAL if local else INHERITED
    return MIXED


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
    outputs = [r for r in rows if r.part == "output" and r.npu is not None and r.bench is not None
               and r.npu.is_tensor and r.bench.is_tensor and r.tensor is not None and not r.tensor.shape_mismatch]
    bench_entry = outputs[0].bench.entry if outputs else None  # type: ignore[union-attr]
    if bench_entry is None:
        return EntryAttribution(suspect, reason="no output tensor is compared on both sides")
    request = ReplayRequest(suspect.entry, npu.entries[suspect.entry], bench.entries[bench_entry],
                            bench.tensor_dir, loader)
    replayed = replay(request)
    if isinstance(replayed, str):
        return EntryAttribution(suspect, reason=replayed)
    order = [row.suffix for row in flatten_entry(bench_entry, request.bench_record)
             if row.part == "output" and row.is_tensor]
    if len(replayed) != len(order):
        return EntryAttribution(suspect, reason=f"the replay gave {len(replayed)} output tensors, the bench dump "
                                                f"records {len(order)}")
    split = []
    for row in outputs:
        pair = _load_pair(row, npu, bench, loader)
        if isinstance(pair, str):
            return EntryAttribution(suspect, reason=pair)
        again = replayed[order.index(row.bench.suffix)]  # type: ignore[union-attr]
        if np.size(again) != np.size(pair[1]):
            return EntryAttribution(suspect, reason=f"the replay's {row.bench.suffix} has shape "  # type: ignore
                                                    f"{list(np.shape(again))}, the bench's {list(np.shape(pair[1]))}")
        split.append(split_output(row, *pair, again, allowance))
    if all(o.introduced.excess is None and o.inherited.excess is None for o in split):
        return EntryAttribution(suspect, reason="its outputs have no elements finite on both sides to measure")
    attributed = EntryAttribution(suspect, outputs=split)
    attributed.verdict = verdict_of(*(_excess(attributed.worst(p)) for p in ("introduced", "inherited")))
    return attributed


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


def split_output(row: RowResult, target: np.ndarray, bench: np.ndarray, replayed: np.ndarray,
                 allowance: float) -> OutputAttribution:
    """introduced = replay vs bench, inherited = target vs replay, in the row's measures and scale."""
    if tuple(np.shape(replayed)) != tuple(np.shape(bench)) and np.size(replayed) == np.size(bench):
        replayed = np.reshape(replayed, np.shape(bench))  # a 0-d result the dump saved as [1]
    scale = row.tensor.scale_norm if row.tensor is not None else None
    bench_norm = row.tensor.bench.norm if row.tensor is not None else None
    introduced = _share(replayed, bench, bench_norm, allowance * (scale or 0.0))
    inherited = _share(target, replayed, bench_norm, allowance * (scale or 0.0))
    return OutputAttribution(row, introduced, inherited, verdict_of(introduced.excess, inherited.excess))


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
    """``local: introduced here 0.25 of the bench output's norm (32x rounding), inherited 0.004 (0.5x)``,
    or why the entry was not replayed; names come from the dumps, so the caller escapes the line."""
    if not entry.verdict:
        return f"not replayed: {entry.reason}"
    introduced, inherited = entry.worst("introduced"), entry.worst("inherited")
    return f"{entry.verdict}: introduced here {_numbers(introduced)}, inherited {_numbers(inherited)}"


def _numbers(share: ErrorShare | None) -> str:
    if share is None or share.norm_rel is None:
        return "n/a"
    if math.isinf(share.norm_rel):
        return "inf/nan where the other side is finite"
    excess = "n/a" if share.excess is None else f"{share.excess:.3g}x rounding"
    return f"{share.norm_rel:.3g} of the bench output's norm ({excess})"


def log_attribution(attribution: Attribution) -> None:
    """One line per suspect, then (statistics dumps) the config that dumps their tensors."""
    if not attribution.entries:
        logger.info("attribution: no forward API output differs beyond rounding; nothing to replay")
        return
    if attribution.config is not None:
        logger.warning("attribution: the dumps hold statistics only; replaying the %d suspects needs their "
                       "tensors. Dump both runs again with this config (also written to %s):\n%s",
                       len(attribution.entries), printable(attribution.config_path),
                       json.dumps(attribution.config, indent=2))  # JSON escapes every control character
        return
    logger.info("attribution: replayed the first %d diverging forward APIs on %s at the target's dtype with "
                "the bench's inputs", len(attribution.entries), attribution.device)
    for entry in attribution.entries:
        logger.info("attribution: %s %s", printable(entry.entry), printable(describe(entry)))
    if attribution.first_local is None:
        logger.info("attribution: no replayed API is local; the first divergence stays the rule's choice")
