"""The dump collector: one framework-free consumer of calls for the tasks ``statistics`` and ``tensor``.

Data flows one way: an interceptor hands a :class:`~msprobe.core.events.Call` to this
:class:`~msprobe.core.events.CallSink`; the :class:`~msprobe.core.select.Selector` decides; tensors
become :class:`~msprobe.core.records.TensorRecord` s whose statistics are launched on the device at once
(inputs before the call runs, so in-place APIs are recorded as they were) but fetched to the host only
in batches; the :class:`~msprobe.core.writers.StepWriter` streams finished entries to disk.
"""

from __future__ import annotations

from typing import Any

from msprobe.core.encode import encode_value, to_json_ready
from msprobe.core.events import Call, TensorAdapter
from msprobe.core.naming import backward_name, tensor_file_name
from msprobe.core.records import TensorRecord
from msprobe.core.select import Selector
from msprobe.core.stack import user_stack
from msprobe.core.writers import StepWriter

# Entries held before their statistics are fetched in one transfer and streamed to the writer.
FETCH_BATCH = 512
_LEVELS_WITH_MODULES = ("L0", "mix")
TENSOR_TASKS = ("tensor", "overflow_check")  # tasks whose entries come with their tensor files


class DumpCollector:
    """Collects the selected entries of one step at a time and writes them (SPEC 4.3–4.5)."""

    def __init__(
        self,
        *,
        task: str,
        level: str,
        framework: str,
        dump_path: str,
        selector: Selector,
        adapter: TensorAdapter,
        summary_mode: str = "statistics",
    ) -> None:
        self.task, self.level, self.framework = task, level, framework
        self.dump_path = dump_path
        self.selector = selector
        self.adapter = adapter
        self.save_tensors = task in TENSOR_TASKS
        self.with_md5 = summary_mode == "md5"
        self._writer: StepWriter | None = None
        self._modules: list[str] = []  # forward module names currently running, innermost last
        self._parents: dict[str, str | None] = {}
        self._ready: list[tuple[str, dict]] = []  # (name, encoded entry) awaiting their statistics
        self._handles: list[tuple[TensorRecord, Any]] = []

    # ------------------------------------------------------------------ step lifecycle
    @property
    def active(self) -> bool:
        return self._writer is not None

    def begin_step(self, step: int, rank: int | None) -> None:
        self.end_step()
        self.selector.reset()
        self._modules.clear()
        self._parents.clear()
        self._writer = StepWriter(
            self.dump_path, step, rank, task=self.task, level=self.level,
            framework=self.framework, with_tensors=self.save_tensors,
        )

    def end_step(self) -> None:
        """Fetch what is pending and finish this step's files."""
        if self._writer is None:
            return
        self._drain()
        self._writer.close()
        self._writer = None

    def abort(self) -> None:
        """Give up the current step after a write error: pending entries are dropped and the writer
        removes its temporary files (files of earlier steps are untouched)."""
        writer, self._writer = self._writer, None
        self._ready.clear()
        self._handles.clear()
        self._modules.clear()
        if writer is not None:
            writer.abort()

    @property
    def exhausted(self) -> bool:
        """True when this collector wants nothing more in this run (the session then finishes)."""
        return False

    # ------------------------------------------------------------------ CallSink
    def forward_start(self, call: Call) -> bool:
        if not self._enter(call):
            return False
        entry: dict = {}
        if self.selector.wants(call.name):
            if self.selector.wants(call.name, "input"):
                entry["input_args"] = self._encode(call.args, call.name, "input")
                entry["input_kwargs"] = self._encode(call.kwargs, call.name, "kwargs")
            self._writer.add_stack(call.name, user_stack(2))
        call.extra["msprobe.entry"] = entry
        return self.selector.wants(backward_name(call.name))

    def forward_end(self, call: Call, output: Any) -> None:
        self._leave(call)
        entry = call.extra.pop("msprobe.entry", None)
        if entry is None or not self.selector.wants(call.name):
            return
        if self.selector.wants(call.name, "output"):
            entry["output"] = self._encode(output, call.name, "output", as_list=True)
        self._complete(call.name, entry, self._parents.get(call.name))

    def backward(self, call: Call, grad_input: tuple, grad_output: tuple) -> None:
        name = backward_name(call.name)
        if self._writer is None or not self.selector.begin(name) or not self.selector.wants(name):
            return
        entry: dict = {}
        if self.selector.wants(name, "input"):
            entry["input"] = self._encode(tuple(grad_input), name, "input")
        if self.selector.wants(name, "output"):
            entry["output"] = self._encode(tuple(grad_output), name, "output")
        parent = self._parents.get(call.name)
        self._complete(name, entry, backward_name(parent) if parent else None)

    # ------------------------------------------------------------------ internals
    def _enter(self, call: Call) -> bool:
        """A forward starts: track the module nesting (construct.json parents); True when selected."""
        selected = self.selector.begin(call.name)
        parent = self._modules[-1] if self._modules else None
        if call.is_module:
            self._modules.append(call.name)
        if selected:
            self._parents[call.name] = parent
        return selected

    def _leave(self, call: Call) -> None:
        """A forward ended: a module's span closes."""
        if call.is_module:
            if self._modules and self._modules[-1] == call.name:
                self._modules.pop()
            self.selector.end(call.name)

    def _encode(self, value: Any, entry: str, part: str, *, as_list: bool = False) -> Any:
        if as_list and not isinstance(value, (list, tuple)):
            value = (value,)

        def leaf(item: Any, path: tuple) -> Any:
            if not self.adapter.is_tensor(item):
                return self.adapter.encode_other(item)
            record = self.adapter.describe(item)
            self._handles.append((record, self.adapter.stats(item)))
            if self.with_md5:
                record.md5 = self.adapter.checksum(item)
            if self.save_tensors:
                file_name = tensor_file_name(entry, part, path, self.adapter.tensor_suffix)
                self.adapter.save(item, self._writer.tensor_dir / file_name)
                record.data_name = file_name
            return record

        return encode_value(value, leaf)

    def _complete(self, name: str, entry: dict, parent: str | None) -> None:
        self._ready.append((name, entry))
        if self.level in _LEVELS_WITH_MODULES:
            self._writer.add_construct(name, parent)
        if len(self._ready) >= FETCH_BATCH:
            self._drain()

    def _drain(self) -> None:
        """One host transfer for every pending statistic, then hand the entries to the writer."""
        if self._handles:
            records, handles = zip(*self._handles)
            for record, stats in zip(records, self.adapter.fetch(list(handles))):
                record.stats = stats
            self._handles.clear()
        for name, entry in self._ready:
            self._writer.add(name, to_json_ready(entry))
        self._ready.clear()
