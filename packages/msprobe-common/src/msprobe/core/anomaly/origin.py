"""Which API first turned finite inputs into inf/NaN, across the ranks of one step.

Per rank, the first entry in execution order that holds inf/NaN is looked at
(docs/anomaly_origin.md#how-the-origin-is-found):

- its inputs are finite and its output is not, and it is a computation: that API is the origin;
- it is a collective whose local input is finite: the value arrived from another rank. The same
  collective on the other ranks (matched by name and occurrence within its process group; a ``recv``
  by its source's ``send``) shows which rank fed it inf/NaN, and that rank is searched the same way,
  up to the collective;
- its inputs already hold inf/NaN: nothing recorded made them (the data, a parameter, an unrecorded
  API); the entry is named as where they were first seen.

Module (cell) entries summarise the APIs inside them and are skipped unless the dump holds only modules.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from msprobe.core.anomaly.dumps import (
    COLLECTIVE_PREFIX,
    MODULE_PREFIXES,
    STAT_KEYS,
    AnomalyError,
    RankDump,
    holds_non_finite,
    tensor_values,
)

ORIGIN = "produced"  # finite inputs, inf/NaN output
ARRIVED = "arrived"  # inf/NaN output of a collective whose local input is finite, no sender found
INPUT = "input"  # inf/NaN inputs with nothing recorded that made them
_INPUT_KEYS = ("input_args", "input_kwargs", "input")
_P2P_PEER = {"send": "dst", "isend": "dst", "recv": "src", "irecv": "src"}
_P2P_PAIR = {"send": ("recv", "irecv"), "isend": ("recv", "irecv"), "recv": ("send", "isend"),
             "irecv": ("send", "isend")}


@dataclass(frozen=True)
class Origin:
    """Where inf/NaN first appears: the rank, the entry, how (``kind``), its stack and the path to it."""

    rank: int
    entry: str
    kind: str
    epoch: int  # collectives this rank ran before the entry: origins in an earlier epoch came first
    stack: tuple[str, ...] = ()
    via: tuple[str, ...] = ()  # "rank 0 Distributed.all_reduce.0.forward" hops that led here

    def as_json(self) -> dict:
        return {"rank": self.rank, "entry": self.entry, "kind": self.kind, "collectives_before": self.epoch,
                "stack_line": stack_line(self.stack), "stack": list(self.stack), "via": list(self.via)}


@dataclass
class _Step:
    rank: RankDump
    name: str
    index: int
    epoch: int
    inputs_bad: bool
    output_bad: bool
    api: str = ""
    key: tuple = field(default=())  # which instance of the collective, the same on every member rank


def stack_line(frames: tuple[str, ...] | list[str]) -> str:
    """The innermost frame outside installed packages (the user's line), else the innermost frame."""
    for frame in frames:
        if "site-packages" not in frame and "dist-packages" not in frame:
            return frame
    return frames[0] if frames else ""


def _api(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else name


def _group_of(entry: dict) -> tuple[int, ...]:
    for value in [*(entry.get("input_args") or []), *(entry.get("input_kwargs") or {}).values()]:
        if isinstance(value, dict) and isinstance(value.get("group_ranks"), list):
            return tuple(value["group_ranks"])
    return ()


def _peer_of(entry: dict, api: str) -> int | None:
    """The other rank of a point-to-point call: the second positional argument or the dst/src keyword."""
    keyword = _P2P_PEER[api]
    value = (entry.get("input_kwargs") or {}).get(keyword)
    args = entry.get("input_args") or []
    if value is None and len(args) > 1:
        value = args[1]
    value = value.get("value") if isinstance(value, dict) else value
    return value if isinstance(value, int) else None


class _Timeline:
    """One rank's entries as steps, and its collectives by the key that matches them across ranks."""

    def __init__(self, dump: RankDump, modules_only: bool) -> None:
        self.dump = dump
        self.steps: list[_Step] = []
        self.by_key: dict[tuple, _Step] = {}
        counts: dict[tuple, int] = {}
        epoch = 0
        for index, (name, entry) in enumerate(dump.entries.items()):
            if name.split(".", 1)[0] in MODULE_PREFIXES and not modules_only:
                continue
            inputs = [entry.get(key) for key in _INPUT_KEYS]
            step = _Step(dump, name, index, epoch, holds_non_finite(inputs), holds_non_finite(entry.get("output")))
            if name.startswith(COLLECTIVE_PREFIX + "."):
                step.api = _api(name)
                peer = _peer_of(entry, step.api) if step.api in _P2P_PEER else None
                base = (step.api, peer) if peer is not None else (step.api, _group_of(entry))
                counts[base] = counts.get(base, 0) + 1
                step.key = (*base, counts[base])
                self.by_key[step.key] = step
                epoch += 1
            self.steps.append(step)

    def first_bad(self, before: int) -> _Step | None:
        return next((s for s in self.steps if s.index < before and (s.inputs_bad or s.output_bad)), None)

    def partner(self, step: _Step, rank: int) -> _Step | None:
        """The same collective instance as ``step`` (a step of another rank) on this rank."""
        api, peer_or_group, count = step.key
        if step.api in _P2P_PAIR:  # the k-th recv from s on r is the k-th send to r on s
            if peer_or_group != self.dump.rank:
                return None
            return next((self.by_key[key] for api2 in _P2P_PAIR[step.api]
                         if (key := (api2, step.rank.rank, count)) in self.by_key), None)
        return self.by_key.get((api, peer_or_group, count))


class _Search:
    def __init__(self, dumps: list[RankDump]) -> None:
        modules_only = all(name.split(".", 1)[0] in MODULE_PREFIXES for d in dumps for name in d.entries)
        self.timelines = {d.rank: _Timeline(d, modules_only) for d in dumps}

    def trace(self, rank: int, before: int, via: tuple[str, ...], seen: set) -> list[Origin]:
        timeline = self.timelines[rank]
        step = timeline.first_bad(before)
        if step is None or (rank, step.index) in seen:
            return []
        seen.add((rank, step.index))
        if step.inputs_bad or not step.output_bad:
            return [self._origin(step, INPUT, via)]
        if not step.api:
            return [self._origin(step, ORIGIN, via)]
        hop = (*via, f"rank {rank} {step.name}")
        found = []
        for other_rank, other in self.timelines.items():
            partner = other.partner(step, other_rank) if other_rank != rank else None
            if partner is not None and partner.inputs_bad:
                found += self.trace(other_rank, partner.index + 1, hop, seen)
        return found or [self._origin(step, ARRIVED, via)]

    @staticmethod
    def _origin(step: _Step, kind: str, via: tuple[str, ...]) -> Origin:
        return Origin(step.rank.rank, step.name, kind, step.epoch,
                      tuple(step.rank.stacks.get(step.name, ())), via)


def _has_statistics(dumps: list[RankDump]) -> bool:
    return any(any(k in t for k in STAT_KEYS) for d in dumps for e in d.entries.values() for t in tensor_values(e))


def find_origins(dumps: list[RankDump]) -> list[Origin]:
    """Every distinct origin of inf/NaN in the step, the first one first; empty for a clean step."""
    if dumps and not _has_statistics(dumps):
        raise AnomalyError("the dump records no Max/Min/Mean/Norm statistics (summary_mode md5?): "
                           "anomaly_origin needs summary_mode statistics")
    search = _Search(dumps)
    origins: dict[tuple[int, str], Origin] = {}
    for rank, timeline in search.timelines.items():
        for origin in search.trace(rank, len(timeline.dump.entries), (), set()):
            known = origins.get((origin.rank, origin.entry))
            via = origin.via if known is None else (*known.via, *(h for h in origin.via if h not in known.via))
            origins[origin.rank, origin.entry] = replace(origin, via=via)
    rank_of_kind = {ORIGIN: 0, INPUT: 1, ARRIVED: 2}
    return sorted(origins.values(), key=lambda o: (o.epoch, rank_of_kind[o.kind], o.rank, o.entry))
