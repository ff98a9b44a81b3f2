"""Level ``debug``: the variables ``PrecisionDebugger.save`` hands over, and their gradients.

Nothing is intercepted at this level: the user names what to record. Each ``save(variable, name)`` is one
entry ``{name}.{n}.debug`` (``n`` counts the saves of that name in the step, from 0 at every ``step()``),
encoded by the dump wing's :class:`~msprobe.core.dump.encode.EntryEncoder` and written by its
:class:`~msprobe.core.dump.collector.StepOutput` to ``debug.json`` (docs/dump_format.md#debugjson).
With ``save_backward`` every tensor of the variable that can have a gradient gets a read-only gradient hook
from the framework's adapter (``watch_gradient``); each gradient is encoded the moment backward reaches
it (its statistics launched then, fetched with their batch), and ``{name}_grad.{n}.debug`` is written
when the last one has arrived, or at the step's end with null for those that never came.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from msprobe.core.config import DebuggerConfig
from msprobe.core.contract import TensorAdapter
from msprobe.core.dump.collector import DumpCollector
from msprobe.core.dump.json_files import DumpIdentity
from msprobe.core.lifecycle.naming import WHOLE, CallCounter, debug_names
from msprobe.core.lifecycle.select import Selector, selector_for
from msprobe.core.lifecycle.session import Session
from msprobe.core.services.handles import Removable


class _Gradients:
    """The gradients of one saved variable, arriving one tensor at a time during backward."""

    def __init__(self, entry: str, variable: Any, is_tensor: Callable[[Any], bool]) -> None:
        self.entry = entry
        self.variable = variable
        self.is_tensor = is_tensor
        self.arrived: dict[tuple, Any] = {}  # index path in the variable → the gradient's encoded record
        self.handles: list[Removable] = []
        self.expected = 0

    def mirror(self, value: Any, path: tuple = ()) -> Any:
        """The variable's structure with each tensor's gradient record in its place, null elsewhere."""
        if isinstance(value, (list, tuple)):
            return [self.mirror(item, (*path, index)) for index, item in enumerate(value)]
        if isinstance(value, dict):
            return {str(key): self.mirror(item, (*path, key)) for key, item in value.items()}
        return self.arrived.get(path) if self.is_tensor(value) else None

    def release(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles.clear()
        self.variable = None
        self.arrived = {}


def tensor_leaves(value: Any, is_tensor: Callable[[Any], bool], path: tuple = ()) -> list[tuple[tuple, Any]]:
    """Every tensor of a nested list/tuple/dict with its index path (the path ``encode_value`` gives it)."""
    if isinstance(value, (list, tuple)):
        return [leaf for index, item in enumerate(value) for leaf in tensor_leaves(item, is_tensor, (*path, index))]
    if isinstance(value, dict):
        return [leaf for key, item in value.items() for leaf in tensor_leaves(item, is_tensor, (*path, key))]
    return [(path, value)] if is_tensor(value) else []


class SaveCollector(DumpCollector):
    """Level debug's collector: ``save`` entries and their gradients, in the step's ``debug.json``. The dump
    collector's parts and step lifecycle; no call ever reaches it (nothing is intercepted)."""

    def __init__(self, identity: DumpIdentity, selector: Selector, adapter: TensorAdapter, *,
                 summary_mode: str = "statistics") -> None:
        super().__init__(identity, selector, adapter, summary_mode=summary_mode)
        self.adapter = adapter
        self._counter = CallCounter()  # saves per name in this step
        self._waiting: list[_Gradients] = []  # gradients still expected
        self._hooked: list[_Gradients] = []  # every variable of this step with hooks: removed at its end
        self.guard: Callable[..., None] = lambda name, method, *args: method(*args)

    def begin_step(self, step: int, rank: int | None) -> None:
        super().begin_step(step, rank)
        self._counter.reset()

    def end_step(self) -> None:
        """Gradients that never came are null; then the step's file is complete."""
        if self.parts.output.active:
            for gradients in list(self._waiting):
                self._write_gradients(gradients)
        self._forget_waiting()
        super().end_step()

    def abort(self) -> None:
        self._forget_waiting()
        super().abort()

    def save(self, variable: Any, name: str, save_backward: bool) -> None:
        """One ``save(variable, name)``: its entry now, its gradient's when backward brings it."""
        entry, grad_entry = debug_names(name, self._counter.next(name))
        parts = self.parts
        parts.keep(entry, parts.entries.encode(variable, entry, WHOLE), None, placed=False)
        if not save_backward:
            return
        gradients = _Gradients(grad_entry, variable, self.adapter.is_tensor)
        # a framework without gradients (the numpy reference adapter) has no watch_gradient: null gradients
        watch = getattr(self.adapter, "watch_gradient", lambda tensor, on_grad: None)
        for path, tensor in tensor_leaves(variable, self.adapter.is_tensor):
            handle = watch(tensor, self._on_gradient(gradients, path))
            if handle is not None:
                gradients.handles.append(handle)
        gradients.expected = len(gradients.handles)
        if gradients.expected == 0:  # nothing of it can have a gradient
            parts.keep(grad_entry, None, None, placed=False)
            return
        self._waiting.append(gradients)
        self._hooked.append(gradients)

    def _on_gradient(self, gradients: _Gradients, path: tuple) -> Callable[[Any], None]:
        def arrived(grad: Any) -> None:
            self.guard(gradients.entry, self._arrived, gradients, path, grad)

        return arrived

    def _arrived(self, gradients: _Gradients, path: tuple, grad: Any) -> None:
        if gradients not in self._waiting or path in gradients.arrived or not self.parts.output.active:
            return  # the step ended, or this tensor's backward ran again (retain_graph)
        gradients.arrived[path] = self.parts.entries.encode(grad, gradients.entry, WHOLE, path=path)
        if len(gradients.arrived) == gradients.expected:
            self._write_gradients(gradients)

    def _write_gradients(self, gradients: _Gradients) -> None:
        """Its entry now; its hooks stay until the step's end (MindSpore cannot remove a hook from inside it)."""
        value = gradients.mirror(gradients.variable) if gradients.arrived else None
        self._waiting.remove(gradients)
        gradients.variable, gradients.arrived = None, {}
        self.parts.keep(gradients.entry, value, None, placed=False)

    def _forget_waiting(self) -> None:
        for gradients in self._hooked:
            gradients.release()
        self._hooked.clear()
        self._waiting.clear()


class _NoInterceptor:
    """Level debug intercepts nothing: the session's interceptor does nothing."""

    def attach(self, model: Any) -> None: ...

    def enable(self) -> None: ...

    def disable(self) -> None: ...

    def reset_counts(self) -> None: ...

    def detach(self) -> None: ...


class DebugSession(Session):
    """A session at level debug: step, rank and ``dump_enable`` select as for any dump; ``save`` opens the
    step itself when ``start`` was not called (``step()`` moves on and closes the step's debug.json)."""

    collector: SaveCollector

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.collector.guard = self.sink.record  # a gradient hook's error never reaches the user's backward

    def save(self, variable: Any, name: str, save_backward: bool = True) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"PrecisionDebugger.save: name {name!r} is not allowed; give a non-empty string")
        if not isinstance(save_backward, bool):
            raise ValueError(f"PrecisionDebugger.save: save_backward {save_backward!r} is not allowed; give "
                             "True or False")
        if self.finished:
            return
        if not self.started:
            self.start()
        if self.started:
            self.sink.record(name, self.collector.save, variable, name, save_backward)


def build_debug_save(config: DebuggerConfig, adapter: TensorAdapter, current_rank: Callable[[], int | None],
                     on_finish: Callable[[], None]) -> DebugSession:
    """Level debug of task statistics or tensor: a :class:`DebugSession` over a :class:`SaveCollector`."""
    identity = DumpIdentity.of(config, with_tensors=config.task == "tensor")
    collector = SaveCollector(identity, selector_for(config), adapter,
                              summary_mode=getattr(config.section, "summary_mode", "statistics"))
    return DebugSession(config, collector, lambda sink: _NoInterceptor(), current_rank, on_finish)
