"""The rows of two dumps in common terms where msprobe 26.2.0 and this msprobe (1.1.1's format) record the same
call differently by design (docs/dump_format.md#what-the-two-generations-record-differently).

- **Gradient lists.** A backward entry of ours (and 1.1.1's) holds one gradient per forward tensor, ``null``
  where none flowed: ``output`` one per tensor input (positional, then keyword), ``input`` one per output.
  26.2.0 hooks only the tensors that require a gradient, so its lists hold those alone, in order: an embedding's
  backward ``output`` is ``[]`` where ours is ``[null]``, and a module called as ``m(ids, x)`` has ``x``'s
  gradient at ``output.0`` where ours has it at ``output.1``. :func:`gradients_in_place` puts each of 26.2.0's
  gradients back at the position its tensor has in ours, read from the forward entry's ``requires_grad``, so
  rows pair by the argument they belong to; the nulls it leaves out are read as nulls by the matcher.
  :func:`comparable_dumps` does it once to both dumps of a comparison, before compare's pipeline or the graph
  reads them, so the rows, the graph's nodes and the records attribution replays all see the same lists.
- **A module's ``parameters``.** 26.2.0 records each parameter's statistics in the module's forward entry; 1.1.1
  and this msprobe do not. Where both dumps record them they are rows like any other; where one alone does,
  :func:`comparable_rows` leaves them out and says so in the log, since they have nothing to pair with.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from msprobe.core.compare.read.reader import DumpFile
from msprobe.core.compare.read.rows import Row, flatten_entry, is_tensor
from msprobe.core.lifecycle.naming import BACKWARD, FORWARD, parse_name
from msprobe.core.services.log import logger

PARAMETERS = "parameters"  # the member of a forward entry only 26.2.0 writes


def comparable_dumps(npu: DumpFile, bench: DumpFile) -> tuple[DumpFile, DumpFile]:
    """The two dumps of a comparison with their gradient lists in common terms (:func:`gradients_in_place`),
    NPU first; the one step that brings 26.2.0's dumps into ours, taken once before anything reads the entries."""
    npu, bench = (replace(dump, entries=gradients_in_place(dump.entries)) for dump in (npu, bench))
    return npu, bench


def comparable_rows(npu: DumpFile, bench: DumpFile) -> tuple[dict[str, list[Row]], dict[str, list[Row]]]:
    """Each side's rows per entry, in common terms (module docstring), from dumps already made comparable
    (:func:`comparable_dumps`)."""
    sides = {"npu": npu, "bench": bench}
    rows = {side: {name: flatten_entry(name, entry) for name, entry in dump.entries.items()}
            for side, dump in sides.items()}
    recorded = {side: any(PARAMETERS in entry for entry in dump.entries.values()) for side, dump in sides.items()}
    for side, other in (("npu", "bench"), ("bench", "npu")):
        if recorded[side] and not recorded[other]:
            left_out = 0
            for name, entry_rows in rows[side].items():
                kept = [row for row in entry_rows if row.part != PARAMETERS]
                left_out += len(entry_rows) - len(kept)
                rows[side][name] = kept
            logger.info("%s %r records each module's parameters in its forward entry (msprobe 26.2.0) and %s "
                        "does not: %d parameters rows of %s only, left out of the comparison", side + "_path",
                        str(sides[side].path), other + "_path", left_out, side)
    return rows["npu"], rows["bench"]


def gradients_in_place(entries: dict[str, dict]) -> dict[str, dict]:
    """``entries`` with each backward entry whose gradient list holds only the gradients of the forward tensors
    that require one (26.2.0's) spread to one place per forward tensor, ``null`` between; every other entry,
    ours and 1.1.1's among them, as it is."""
    out = dict(entries)
    for name, entry in entries.items():
        forward = entries.get(_forward_of(name) or "")
        if not isinstance(forward, dict):
            continue
        spread = {}
        for part, slots in (("output", _input_slots(forward)), ("input", _output_slots(forward))):
            grads = entry.get(part)
            if isinstance(grads, list) and (placed := _placed(grads, slots)) is not None:
                spread[part] = placed
        if spread:
            out[name] = {**entry, **spread}
    return out


def _forward_of(name: str) -> str | None:
    try:
        parsed = parse_name(name)
    except ValueError:
        return None
    return parsed.twin(FORWARD) if parsed.direction == BACKWARD else None


def _placed(grads: list, slots: list[bool]) -> list | None:
    """``grads`` at the places of the slots that need a gradient (``True``), None where they are already in
    place (one per slot, or nothing to spread) or do not fit (not one per gradient-needing slot)."""
    wanted = [index for index, needs in enumerate(slots) if needs]
    if len(grads) != len(wanted) or wanted == list(range(len(wanted))):
        return None
    placed: list[Any] = [None] * len(slots)
    for index, grad in zip(wanted, grads):
        placed[index] = grad
    return placed


def _input_slots(forward: dict) -> list[bool]:
    """One per tensor among the forward's inputs (positional, then keyword), as our backward ``output`` has:
    whether 26.2.0 hooked it (a positional tensor that requires a gradient; it never hooks keyword ones)."""
    slots: list[bool] = []
    for part, value in (("input_args", forward.get("input_args")), ("input_kwargs", forward.get("input_kwargs"))):
        hooked = part == "input_args"
        slots += [hooked and bool(leaf.get("requires_grad")) for leaf in _leaves(value) if is_tensor(leaf)]
    return slots


def _output_slots(forward: dict) -> list[bool]:
    """One per output value as our backward ``input`` has (a ``null`` member of a dict left out: the ``None``
    fields of a ``ModelOutput``, which torch's flattening skips): whether it is a tensor requiring a gradient."""
    return [is_tensor(leaf) and bool(leaf.get("requires_grad")) for leaf in _leaves(forward.get("output"), False)]


def _leaves(value: Any, null_members: bool = True) -> list:
    """The values of an encoded argument, depth first: tensors, scalars and nulls."""
    if isinstance(value, list):
        return [leaf for item in value for leaf in _leaves(item, null_members)]
    if isinstance(value, dict) and "type" not in value:
        return [leaf for item in value.values() if null_members or item is not None
                for leaf in _leaves(item, null_members)]
    return [value]
