"""Which rows of a tensor a dump keeps: the ``slice`` and ``request_id`` keys of sections ``statistics`` and
``tensor`` (docs/pytorch/inference.md).

A serving engine runs many requests in one batch, so every activation holds the rows of all of them; to
debug one request, a dump keeps only that request's rows. :class:`RowSelection` holds the slices in force —
the configured ``slice`` items, plus the rows of ``request_id`` in the batch that ``debugger.start(...,
scheduled_tokens=...)`` described — and answers, from a tensor's shape alone, which index selects them
(:meth:`RowSelection.index`). The encoder asks a framework's adapter to apply that index on the tensor's
device before anything is read (``TensorAdapter.select_rows``), so statistics, checksums, tensor files and
the shape in dump.json all see the selected rows only. A tensor a slice does not fit (fewer dimensions than
its ``dim``, or a ``size`` other than the tensor's length there) is dumped whole, as msprobe 26.2.0 does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

from msprobe.core.config.errors import Problem
from msprobe.core.config.fields import FieldReader, is_int
from msprobe.core.services.log import logger

SLICE_KEYS = ("dim", "size", "begin", "end")


@dataclass(frozen=True)
class RowSlice:
    """One ``slice`` item: elements ``begin:end`` (Python's slice, ``end`` None: to the end) along ``dim`` of
    every tensor that has that dimension with length ``size`` (None: any length)."""

    dim: int = 0
    begin: int = 0
    end: int | None = None
    size: int | None = None

    def fits(self, shape: tuple[int, ...]) -> bool:
        return self.dim < len(shape) and (self.size is None or shape[self.dim] == self.size)


def read_slices(reader: FieldReader) -> tuple[RowSlice, ...]:
    """Key ``slice``: a list of objects with integer ``dim`` (≥ 0, default 0), ``size`` (≥ 0, optional),
    ``begin`` (default 0) and ``end`` (optional); each dim at most once; a problem per bad member."""
    value = reader.raw.get("slice")
    if value is None:
        return ()
    if not isinstance(value, list):
        reader.report("slice", value, 'a list of objects like {"dim": 0, "begin": 2, "end": 4}')
        return ()
    slices = []
    for index, item in enumerate(value):
        problem = _item_problem(item)
        if problem is None and item.get("dim", 0) in {s.dim for s in slices}:
            problem = (item, "at most one item per dim")
        if problem is not None:
            reader.report("slice", problem[0], problem[1], index)
        else:
            slices.append(RowSlice(item.get("dim", 0), item.get("begin", 0), item.get("end"), item.get("size")))
    return () if "slice" in reader.invalid else tuple(slices)


def _item_problem(item: object) -> tuple[object, str] | None:
    """(the bad value, what is allowed) for one ``slice`` item, or None."""
    if not isinstance(item, dict):
        return item, "an object with integer keys dim, size, begin, end"
    for key, member in item.items():
        if key not in SLICE_KEYS:
            return key, "a key among dim, size, begin, end"
        if not is_int(member):
            return {key: member}, f"an integer {key}"
    dim, size, begin, end = (item.get(key) for key in SLICE_KEYS)
    if (dim or 0) < 0 or (size is not None and size < 0):
        return item, "dim and size ≥ 0"
    begin = begin or 0
    if end is not None and begin >= 0 and end >= 0 and end <= begin:
        return item, "end greater than begin (an empty selection dumps nothing)"
    if size is not None and begin >= size:
        return item, f"begin below size {size}"
    return None


def read_request_id(reader: FieldReader) -> str | None:
    """Key ``request_id``: the request whose rows are kept, a non-empty string (absent: every request)."""
    return reader.text("request_id", "", non_empty=True) or None


def row_problems(path: str, slices: tuple[RowSlice, ...], request_id: str | None) -> list[Problem]:
    """The rule between the two keys: ``request_id`` selects rows along dim 0 itself."""
    return [Problem(f"{path}[{index}]", asdict(item), "a dim other than 0 when request_id is set (the request's "
                    "rows are dim 0's)") for index, item in enumerate(slices) if request_id and item.dim == 0]


class RowSelection:
    """The slices in force: the configured ones, and those of ``request_id`` in the current batch."""

    def __init__(self, slices: tuple[RowSlice, ...] = (), request_id: str | None = None) -> None:
        self.slices = slices
        self.request_id = request_id
        self._request: RowSlice | None = None  # the request's rows in the current batch
        self.request_seen = False  # some batch held the request
        self._warned_unscheduled = False

    @property
    def active(self) -> bool:
        return bool(self.slices) or self._request is not None

    def schedule(self, scheduled_tokens: Mapping[str, int] | None) -> bool:
        """A new batch (``debugger.start``): the rows each request holds along dim 0, in order. False when
        ``request_id`` is set and the batch does not hold it (the batch is not dumped). A ValueError names a
        malformed ``scheduled_tokens``."""
        self._request = None
        if self.request_id is None:
            return True
        if scheduled_tokens is None:
            if not self._warned_unscheduled:
                self._warned_unscheduled = True
                logger.warning(f"request_id {self.request_id!r} is set, but start() got no scheduled_tokens: "
                               "whole batches are dumped (docs/pytorch/inference.md)")
            return True
        _check_scheduled(scheduled_tokens)
        begin = 0
        for request, rows in scheduled_tokens.items():
            if request == self.request_id:
                total = sum(scheduled_tokens.values())
                self._request = RowSlice(0, begin, begin + rows, total)
                self.request_seen = True
                return True
            begin += rows
        return False

    def index(self, shape: tuple[int, ...]) -> tuple[slice, ...] | None:
        """The index that selects this shape's rows (one slice per dimension up to the last cut), or None
        when no slice fits the shape and the tensor is dumped whole."""
        cuts = [s for s in (*self.slices, self._request) if s is not None and s.fits(shape)]
        if not cuts:
            return None
        index = [slice(None)] * (max(s.dim for s in cuts) + 1)
        for cut in cuts:
            index[cut.dim] = slice(cut.begin, cut.end)
        return tuple(index)


def _check_scheduled(scheduled_tokens: object) -> None:
    allowed = "a dict of request id (str) → its rows along dim 0 (int ≥ 1), in batch order"
    if not isinstance(scheduled_tokens, Mapping) or not all(
        isinstance(key, str) and is_int(rows) and rows >= 1 for key, rows in scheduled_tokens.items()
    ):
        raise ValueError(f"scheduled_tokens: got {scheduled_tokens!r}; allowed: {allowed}")
