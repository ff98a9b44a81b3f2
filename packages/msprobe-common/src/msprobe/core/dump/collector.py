"""The parts every dump-shaped collector is built from, and the dump collector itself.

Dump and overflow check keep different calls but write the same files the same way, so what they share is
four parts with one job each: :class:`~msprobe.core.dump.encode.EntryEncoder` (entries, statistics fetched
in batches), :class:`ModuleSpans` (construct.json parents and the selector's spans), :class:`TensorFiles`
and :class:`StepOutput` (the writer's life), wired once by :class:`Parts`. A keep-policy is a small
collector over them: :class:`DumpCollector` here, ``msprobe.core.dump.overflow.OverflowCollector`` for overflows.
Where this sits in the walk of a tensor: docs/architecture.md#the-walk-of-one-tensor-from-start-to-dumpjson.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, TypeVar

from msprobe.core.contract import Call, TensorAdapter
from msprobe.core.dump.encode import EntryEncoder, SaveTensor
from msprobe.core.dump.json_files import DumpIdentity, StepWriter
from msprobe.core.dump.tensor_writer import TensorWriter
from msprobe.core.dump.user_stack import user_stack
from msprobe.core.lifecycle.calls import MODULE_LEVELS
from msprobe.core.lifecycle.naming import BACKWARD, WHOLE, backward_name, tensor_file_name
from msprobe.core.lifecycle.rows import RowSelection
from msprobe.core.lifecycle.select import Selector, named_by

T = TypeVar("T")


class CallState(Generic[T]):
    """One collector's own state for one call, from its forward's start to its end.

    Kept on the call (``Call.state``) under this object as key, so it lives exactly as long as the call:
    a forward that raises takes its state with it (a table keyed by ``id(call)`` would keep it and could
    hand it to a later call at the same address), and two collectors never see each other's state.
    """

    __slots__ = ("what",)

    def __init__(self, what: str) -> None:
        self.what = what

    def __repr__(self) -> str:
        return f"CallState({self.what!r})"

    def put(self, call: Call, value: T) -> None:
        call.state[self] = value

    def take(self, call: Call) -> T | None:
        """The state ``put`` for this call (removed), or None when there is none."""
        return call.state.pop(self, None)


class ModuleSpans:
    """Which module (cell) each entry runs inside, for construct.json, and the selector's spans.

    Every forward passes through :meth:`enter` and :meth:`leave` whether or not it is kept: a module's
    forward opens the span its inner calls run in, and the selector's scope ranges and ``list`` spans
    open and close on the same events, so both are driven from here, in execution order.
    """

    def __init__(self, selector: Selector) -> None:
        self.selector = selector
        self._open: list[str] = []  # forward module names currently running, innermost last
        self._parents: dict[str, str | None] = {}

    def enter(self, call: Call) -> bool:
        """A forward starts; True when the selector selects it."""
        selected = self.selector.begin(call.name)
        parent = self._open[-1] if self._open else None
        if call.is_module:
            self._open.append(call.name)
        if selected:
            self._parents[call.name] = parent
        return selected

    def leave(self, call: Call) -> None:
        """A forward returned: a module's span closes."""
        if call.is_module:
            if self._open and self._open[-1] == call.name:
                self._open.pop()
            self.selector.end(call.name)

    def parent(self, name: str) -> str | None:
        """The module a selected forward ran in (None at the top)."""
        return self._parents.get(name)

    def backward_parent(self, forward: str) -> str | None:
        """The parent of ``forward``'s backward entry: the backward of its module."""
        parent = self._parents.get(forward)
        return backward_name(parent) if parent else None

    def new_step(self) -> None:
        """A step starts: no span is open, neither the selector's nor a module's."""
        self.selector.reset()
        self.clear()

    def clear(self) -> None:
        self._open.clear()
        self._parents.clear()


class StepOutput:
    """The writer's life: a :class:`StepWriter` per step, closed at the step's end, or aborted.

    Between :meth:`open` and :meth:`close` (or :meth:`abort`) the step's files are being written;
    :meth:`abort` after a write error removes their temporary files and leaves files of earlier steps
    as they were (the writer is let go first, so a second error while aborting changes nothing).
    """

    def __init__(self, identity: DumpIdentity) -> None:
        self.identity = identity
        self.with_construct = identity.level in MODULE_LEVELS
        self._writer: StepWriter | None = None

    @property
    def active(self) -> bool:
        return self._writer is not None

    @property
    def directory(self) -> Path:
        """``step{N}/rank{R}`` of the open step."""
        return self._open_writer().directory

    @property
    def tensor_dir(self) -> Path:
        return self._open_writer().tensor_dir

    def open(self, step: int, rank: int | None) -> None:
        self._writer = StepWriter(self.identity, step, rank)

    def add_entries(self, entries: list[tuple[str, str]]) -> None:
        """Entries as (name, dump.json text), in execution order."""
        writer = self._open_writer()
        for name, text in entries:
            writer.add_rendered(name, text)

    def add_stack(self, name: str) -> None:
        """The user's stack of the call being handled now."""
        self._open_writer().add_stack(name, user_stack(3))  # 3: past this frame and the policy's

    def add_construct(self, name: str, parent: str | None) -> None:
        if self.with_construct:
            self._open_writer().add_construct(name, parent)

    def close(self) -> None:
        """Finish the step's files. A write error leaves the writer here for :meth:`abort`."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def abort(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.abort()

    def _open_writer(self) -> StepWriter:
        if self._writer is None:
            raise RuntimeError("no step is open: begin_step first")
        return self._writer


class TensorFiles:
    """The tensor files of kept entries, in the open step's ``dump_tensor_data``, named after the entry
    (:func:`~msprobe.core.lifecycle.naming.tensor_file_name`); dump.json names each in ``data_name``. Written by a
    :class:`~msprobe.core.dump.tensor_writer.TensorWriter` thread; :meth:`drain` before the step's JSON
    files close."""

    def __init__(self, adapter: TensorAdapter, output: StepOutput) -> None:
        self.adapter = adapter
        self.output = output
        self.writer = TensorWriter(adapter)  # reads MSPROBE_TENSOR_QUEUE_MB now: a bad value fails at once

    def save(self, tensor: Any, entry: str, part: str, path: tuple) -> str:
        file_name = tensor_file_name(entry, part, path, self.adapter.tensor_suffix)
        self.writer.save(tensor, self.output.tensor_dir / file_name, remember=part == "output")
        return file_name

    def drain(self) -> None:
        self.writer.drain()

    def discard(self) -> None:
        self.writer.discard()


class Parts:
    """The four parts wired together, with the step lifecycle a collector delegates to them."""

    def __init__(self, identity: DumpIdentity, selector: Selector, adapter: TensorAdapter, *,
                 summary_mode: str = "statistics", tensors_of: Callable[[str], bool] | None = None,
                 rows: RowSelection | None = None) -> None:
        self.adapter = adapter
        self.output = StepOutput(identity)
        self.tensors = TensorFiles(adapter, self.output) if identity.with_tensors else None
        save = self.tensors.save if self.tensors is not None else None
        if save is not None and tensors_of is not None:  # statistics' tensor_list: files for the listed entries
            save = _only_for(tensors_of, save)
        self.entries = EntryEncoder(adapter, summary_mode=summary_mode, save=save, rows=rows)
        self.spans = ModuleSpans(selector)

    def begin_step(self, step: int, rank: int | None) -> None:
        self.end_step()
        self.adapter.forget()
        self.spans.new_step()
        self.output.open(step, rank)

    def end_step(self) -> None:
        """Fetch what is pending and finish this step's files."""
        if self.output.active:
            self.flush()
            if self.tensors is not None:
                self.tensors.drain()  # every tensor file on disk before dump.json names them
            self.output.close()

    def abort(self) -> None:
        """Give up the current step after a write error: pending entries are dropped and the writer
        removes its temporary files (files of earlier steps are untouched)."""
        self.entries.drop()
        self.spans.clear()
        if self.tensors is not None:
            self.tensors.discard()
        self.output.abort()

    def keep(self, name: str, entry: Any, parent: str | None, *, placed: bool = True) -> None:
        """A finished entry: written once its batch's statistics are fetched. ``placed``: it has a place in
        construct.json (a call's entry; not a parameters_grad or level debug entry)."""
        if placed:
            self.output.add_construct(name, parent)
        if self.entries.hold(name, entry):
            self.flush()

    def flush(self) -> None:
        """One host transfer for every pending statistic, then the entries go to the writer."""
        self.output.add_entries(self.entries.release())


def _only_for(wanted: Callable[[str], bool], save: SaveTensor) -> SaveTensor:
    def save_wanted(tensor: Any, entry: str, part: str, path: tuple) -> str | None:
        return save(tensor, entry, part, path) if wanted(entry) else None

    return save_wanted


class DumpCollector:
    """Tasks ``statistics`` and ``tensor``: keeps every selected entry (docs/dump_format.md);
    ``tensor`` adds the tensor files."""

    def __init__(self, identity: DumpIdentity, selector: Selector, adapter: TensorAdapter, *,
                 summary_mode: str = "statistics", tensor_list: tuple[str, ...] = (),
                 rows: RowSelection | None = None) -> None:
        self.selector = selector
        self.parts = Parts(identity, selector, adapter, summary_mode=summary_mode,
                           tensors_of=named_by(tensor_list) if tensor_list else None, rows=rows)
        self._entry: CallState[dict] = CallState("dump entry")
        self._selected_modules: set[str] = set()  # "Module.fc.Linear" of every module forward selected this step

    # ------------------------------------------------------------------ step lifecycle
    @property
    def active(self) -> bool:
        return self.parts.output.active

    @property
    def exhausted(self) -> bool:
        """A dump wants every selected step: never exhausted."""
        return False

    def begin_step(self, step: int, rank: int | None) -> None:
        self.parts.begin_step(step, rank)
        self._selected_modules.clear()

    def end_step(self) -> None:
        self.parts.end_step()

    def abort(self) -> None:
        self.parts.abort()

    # ------------------------------------------------------------------ CallSink
    def forward_start(self, call: Call) -> bool:
        parts, selector = self.parts, self.selector
        if not parts.spans.enter(call):
            return False
        if call.is_module:
            self._selected_modules.add(call.name.rsplit(".", 2)[0])
        entry: dict = {}
        if selector.wants(call.name):
            if selector.wants(call.name, "input"):
                entry["input_args"] = parts.entries.encode(call.args, call.name, "input")
                entry["input_kwargs"] = parts.entries.encode(call.kwargs, call.name, "kwargs")
            parts.output.add_stack(call.name)
        self._entry.put(call, entry)
        return selector.wants(backward_name(call.name))

    def forward_end(self, call: Call, output: Any) -> None:
        parts = self.parts
        parts.spans.leave(call)
        entry = self._entry.take(call)
        if entry is None or not self.selector.wants(call.name):
            return
        if self.selector.wants(call.name, "output"):
            entry["output"] = parts.entries.encode(output, call.name, "output", as_list=True)
        parts.keep(call.name, entry, parts.spans.parent(call.name))

    def backward(self, call: Call, grad_input: tuple, grad_output: tuple) -> None:
        name, parts, selector = backward_name(call.name), self.parts, self.selector
        if not parts.output.active or not selector.begin(name) or not selector.wants(name):
            return
        entry: dict = {}
        if selector.wants(name, "input"):
            entry["input"] = parts.entries.encode(tuple(grad_input), name, "input")
        if selector.wants(name, "output"):
            entry["output"] = parts.entries.encode(tuple(grad_output), name, "output")
        parts.keep(name, entry, parts.spans.backward_parent(call.name))

    def parameters_grad(self, name: str, grads: dict) -> None:
        """A module's parameter gradients of one backward pass (levels L0, mix), as upstream writes them:
        ``{"weight": [record], "bias": [record]}``. Kept when scope and list selected a forward of the module
        in this step and data_mode keeps backward entries; no place in construct.json
        (docs/dump_format.md#parameters_grad)."""
        module, parts = name.rsplit(".", 2)[0], self.parts
        if not parts.output.active or module not in self._selected_modules \
                or not self.selector.wants(f"{module}.{BACKWARD}.0"):
            return
        encoded = parts.entries.encode(grads, name, WHOLE)
        parts.keep(name, {key: [record] for key, record in encoded.items()}, None, placed=False)
