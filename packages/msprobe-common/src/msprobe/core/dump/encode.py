"""The framework-free half of the dump.json value encoder, and the entries waiting for their statistics.

A framework hands :func:`encode_value` a ``leaf`` hook that knows its tensors, dtypes, devices and process
groups; everything Python itself defines (scalars, numpy scalars, slices, ``...``, ``None``, containers) is
encoded here once, so both frameworks write it identically, as msprobe 1.1.1 writes it: the value table of
docs/dump_format.md#values. :class:`EntryEncoder` applies it to a call's arguments and outputs and holds the
entries until one transfer brings a whole batch's statistics to the host.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

import numpy as np

from msprobe.core.contract import NOT_HANDLED, WITHOUT_STATISTICS, TensorAdapter, TensorRecord, TensorStats
from msprobe.core.dump.json_files import quoted
from msprobe.core.dump.uninitialised import outputs_uninitialised
from msprobe.core.dump.xor_checksum import resolve_checksums
from msprobe.core.lifecycle.rows import RowSelection
from msprobe.core.services.log import logger

Leaf = Callable[[Any, tuple], Any]
# Writes one tensor of an entry to its file: (tensor, entry name, part, index path) → the file's name, or
# None when the entry's tensors are not saved (statistics' tensor_list).
SaveTensor = Callable[[Any, str, str, tuple], "str | None"]
# Entries held before their statistics are fetched in one transfer and handed on.
FETCH_BATCH = 512

_SCALAR_TYPES = (bool, int, float, str)  # bool before int: a bool is also an int
_reported_types: set[str] = set()


def encode_value(value: Any, leaf: Leaf, path: tuple = ()) -> Any:
    """Encode ``value`` for dump.json. ``leaf(value, path)`` is asked first for every value that is not
    exactly one of Python's own types (so a framework can claim a tuple subclass like ``torch.Size``);
    ``path`` is the index path of the value inside the argument list, used for tensor file names
    (``input.0.1``)."""
    kind = type(value)
    if kind is tuple or kind is list:  # the argument lists themselves: most values of every entry
        return [encode_value(item, leaf, (*path, index)) for index, item in enumerate(value)]
    if value is None:
        return None
    if kind in _SCALAR_TYPES:
        return {"type": kind.__name__, "value": value}
    if kind is dict:
        return {str(key): encode_value(item, leaf, (*path, key)) for key, item in value.items()}
    claimed = leaf(value, path)
    if claimed is not NOT_HANDLED:
        return claimed
    if isinstance(value, np.generic) and isinstance(value.item(), _SCALAR_TYPES):
        return {"type": _numpy_type_name(value), "value": value.item()}
    for scalar_type in _SCALAR_TYPES:
        if isinstance(value, scalar_type):
            return {"type": scalar_type.__name__, "value": scalar_type(value)}
    if isinstance(value, slice):
        return {"type": "slice", "value": [_slice_bound(b) for b in (value.start, value.stop, value.step)]}
    if value is Ellipsis:
        return {"type": "ellipsis", "value": "..."}
    fields = _fields_of(value)
    if fields is not None:
        return {name: encode_value(getattr(value, name), leaf, (*path, name)) for name in fields}
    if isinstance(value, (list, tuple)):
        return [encode_value(item, leaf, (*path, index)) for index, item in enumerate(value)]
    if isinstance(value, dict):
        return {str(key): encode_value(item, leaf, (*path, key)) for key, item in value.items()}
    _report_once(value, "writing null for it")
    return None


def _fields_of(value: Any) -> tuple[str, ...] | None:
    """The fields of a named tuple or a dataclass instance (a transformers ``ModelOutput`` among them), which
    dump.json writes as an object of every field, a ``None`` one as ``null``, as msprobe 1.1.1 and 26.2.0 do
    (a ``ModelOutput`` is also a dict, but of its set fields only); None for any other value."""
    if isinstance(value, tuple):
        fields = getattr(value, "_fields", None)
        return tuple(fields) if isinstance(fields, tuple) else None
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return tuple(field.name for field in dataclasses.fields(value))
    return None


def render(encoded: Any) -> str:
    """An encoded value (an entry, its statistics known) as one line of dump.json text.

    The text json would write with each :class:`TensorRecord` as its dump.json dict, built directly: a
    record renders itself, and the statistics of an unchanged tensor seen again are written once
    (:meth:`~msprobe.core.contract.TensorStats.json_members`)."""
    if isinstance(encoded, TensorRecord):
        return encoded.json_text()
    if isinstance(encoded, (list, tuple)):
        return f"[{', '.join([render(item) for item in encoded])}]"
    if encoded is None:  # a gradient that did not flow, an absent bias: json.dumps would cost 2 µs
        return "null"
    if isinstance(encoded, dict) and not _is_scalar(encoded):
        return f"{{{', '.join([f'{quoted(key)}: {render(item)}' for key, item in encoded.items()])}}}"
    return json.dumps(encoded)


def _is_scalar(value: dict) -> bool:
    """An encoded Python value (``{"type": "int", "value": 3}``, no record inside): json writes it whole.
    (A keyword-argument dict never matches: its values are encoded, never a bare string.)"""
    return len(value) == 2 and isinstance(value.get("type"), str) and "value" in value \
        and not isinstance(value["value"], (list, dict, TensorRecord))


class EntryEncoder:
    """Encodes the values of kept entries; their statistics are launched at once, fetched in batches.

    Why batches: a tensor's statistics are reduced on its device the moment it is encoded (inputs before
    the call runs, so an in-place API is recorded as it was), but bringing them to the host waits for
    the device. Paying that wait once per :data:`FETCH_BATCH` entries instead of once per tensor is
    most of what keeps a dump cheap, so finished entries wait here (:meth:`hold`) until
    :meth:`release` fetches every pending statistic in one transfer.

    ``save`` (the tensor files part) is asked for each tensor when the entries come with their files;
    ``summary_mode`` ``md5`` adds each tensor's CRC-32 to its statistics, ``xor`` writes its XOR checksum
    instead of them (left on the device and fetched with the batch, as statistics are). With ``rows`` in force
    (``slice``, ``request_id``) every tensor is first narrowed to its selected rows on its device
    (:meth:`selected`), so the record's shape, statistics, checksum and file are the rows' alone.
    """

    def __init__(
        self, adapter: TensorAdapter, *, summary_mode: str = "statistics", save: SaveTensor | None = None,
        batch: int = FETCH_BATCH, rows: RowSelection | None = None,
    ) -> None:
        self.adapter = adapter
        self.summary_mode = summary_mode
        self.save = save
        self.batch = batch
        self.rows = rows  # slice / request_id: each tensor's selected rows are what is read
        self._held: list[tuple[str, dict | str]] = []  # (name, entry awaiting its statistics, or its text)
        self._handles: list[tuple[TensorRecord, Any]] = []
        self._checksums: list[tuple[TensorRecord, Any]] = []  # summary_mode xor: words still on the device

    def encode(self, value: Any, entry: str, part: str, *, as_list: bool = False, path: tuple = ()) -> Any:
        """``value`` (an argument list, kwargs or an output) with each tensor as a :class:`TensorRecord`
        whose statistics are on their way; ``as_list`` wraps a single output as 1.1.1 does. ``path``: where
        ``value`` sits inside the entry (one gradient of a saved variable), for its tensor file's name."""
        if as_list and not isinstance(value, (list, tuple)):
            value = (value,)
        adapter, handles, save = self.adapter, self._handles, self.save
        produced = part == "output"  # what the call made: reused if met again unchanged (next call's input)
        uninitialised = produced and outputs_uninitialised(entry)  # empty_like & co: whatever memory held
        if self.summary_mode == "xor":
            return encode_value(value, self._xor_leaf(entry, part, produced, uninitialised), path)

        def leaf(item: Any, path: tuple) -> Any:
            if not adapter.is_tensor(item):
                return adapter.encode_other(item)
            item, remember = self.selected(item, produced)
            record, stats = adapter.capture(item, remember)
            # statistics computed at once (a large host tensor), or a pending handle's once its batch was
            # fetched (an unchanged tensor seen again): nothing to wait for
            known = stats if isinstance(stats, TensorStats) else stats.stats
            if known is not None:
                record.stats = known
            else:
                handles.append((record, stats))
            if self.summary_mode == "md5":
                record.md5 = adapter.checksum(item, remember)
            if save is not None:
                record.data_name = save(item, entry, part, path)
            record.uninitialised = record.uninitialised or uninitialised
            return record

        return encode_value(value, leaf, path)

    def _xor_leaf(self, entry: str, part: str, produced: bool, uninitialised: bool) -> Leaf:
        """Each tensor as its record and XOR checksum, no statistics (summary_mode xor, task statistics)."""
        adapter, checksums = self.adapter, self._checksums

        def leaf(item: Any, path: tuple) -> Any:
            if not adapter.is_tensor(item):
                return adapter.encode_other(item)
            item, remember = self.selected(item, produced)
            record = adapter.describe(item)
            record.stats = WITHOUT_STATISTICS
            record.uninitialised = record.uninitialised or uninitialised
            if self.save is not None:
                record.data_name = self.save(item, entry, part, path)
            checksum = adapter.xor_checksum(item, remember)
            if isinstance(checksum, str):
                record.md5 = checksum
            else:
                checksums.append((record, checksum))
            return record

        return leaf

    def selected(self, tensor: Any, produced: bool) -> tuple[Any, bool]:
        """The tensor's selected rows (a view the adapter makes on its device; the tensor itself when no
        slice fits it), and whether the adapter may remember what it reads (a fresh view is never met
        again)."""
        rows = self.rows
        if rows is None or not rows.active:
            return tensor, produced
        view = self.adapter.select_rows(tensor, rows)
        return view, produced and view is tensor

    def hold(self, name: str, entry: dict) -> bool:
        """Keep a finished entry until its statistics arrive; True when a batch is full.

        When no statistic is pending (every one was computed at once: large host tensors, repeats of
        tensors whose batch was reduced) the entry is rendered to its dump.json text at once: a string
        is all that waits for the writer, not the dicts, lists and records of the entry, which the
        garbage collector would otherwise walk and promote until the end of the step (promotions bring
        full collections of the user's whole heap; docs/performance.md)."""
        self._held.append((name, entry if self._handles or self._checksums else render(entry)))
        return len(self._held) >= self.batch

    def release(self) -> list[tuple[str, str]]:
        """One host transfer for every pending statistic; the held entries as dump.json text, in order."""
        if self._handles:
            records, handles = zip(*self._handles)
            for record, stats in zip(records, self.adapter.fetch(list(handles))):
                record.stats = stats
            self._handles.clear()
        if self._checksums:
            records, checksums = zip(*self._checksums)
            for record, checksum in zip(records, resolve_checksums(checksums, self.adapter.transfer_words)):
                record.md5 = checksum
            self._checksums.clear()
        released = [(name, held if isinstance(held, str) else render(held)) for name, held in self._held]
        self._held.clear()
        return released

    def drop(self) -> None:
        """Forget every held entry and pending statistic (the step was given up)."""
        self._held.clear()
        self._handles.clear()
        self._checksums.clear()


def _numpy_type_name(value: np.generic) -> str:
    """The numpy scalar type as numpy 1 names it (``bool_``, what msprobe 1.1.1 writes): numpy 2 renamed
    ``np.bool_`` to ``np.bool``, and a dump must not depend on the numpy installed."""
    return "bool_" if isinstance(value, np.bool_) else type(value).__name__


def _slice_bound(bound: Any) -> int | None:
    """A slice bound as an int; a 0-d tensor or numpy integer converts, anything else is null."""
    if bound is None or (isinstance(bound, int) and not isinstance(bound, bool)):
        return bound
    try:
        return int(bound)
    except (TypeError, ValueError):
        _report_once(bound, "writing null for this slice bound")
        return None


def _report_once(value: Any, consequence: str) -> None:
    type_name = f"{type(value).__module__}.{type(value).__qualname__}"
    if type_name not in _reported_types:
        _reported_types.add(type_name)
        logger.warning(f"dump.json cannot show values of type {type_name}; {consequence}")
