"""The contract at the bottom of msprobe: what a framework package and the framework-free core agree on.

Three parts, each imported by both sides and importing nothing of msprobe but the configuration's model:

- the records an adapter returns (:class:`TensorRecord`, :class:`TensorStats`): a framework adapter
  turns a tensor into a record at capture time (dtype, shape, no host sync) and fills its statistics
  later, when a whole batch comes back from the device in one transfer; :meth:`TensorRecord.json_text`
  gives the dump.json value (docs/dump_format.md#values) with the key order msprobe 1.1.1 writes;
- the calls and the protocols between a framework's interception layer and the collectors
  (:class:`Call`, :class:`CallSink`, :class:`StepCollector`, :class:`TensorAdapter`, :class:`Interceptor`):
  every task consumes the same calls through one mechanism per framework, hooks know nothing about
  files and writers nothing about frameworks;
- the kit (:class:`FrameworkKit`, :class:`Runner`): what a framework package gives the tasks. A task
  builds what the debugger runs from the validated configuration and the kit; it never imports a
  framework. The framework packages define their kit (``msprobe.pytorch.kit.TorchKit``,
  ``msprobe.mindspore.kit.MindSporeKit``), hand it to
  :class:`~msprobe.core.lifecycle.debugger.BaseDebugger` as ``kit_class`` and publish it under the
  ``msprobe.frameworks`` entry point (:mod:`msprobe.core.services.plugin`).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Protocol

from msprobe.core.config.frameworks import Capabilities, register_framework
from msprobe.core.config.model import DebuggerConfig


class _NotHandled:
    """Sentinel: an encoder hook does not know this value (distinct from ``None``, which encodes as null)."""

    _instance: _NotHandled | None = None

    def __new__(cls) -> _NotHandled:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NOT_HANDLED"


NOT_HANDLED = _NotHandled()


@dataclass
class TensorStats:
    """The four statistics of a tensor, exact for its dtype (docs/dump_format.md#values).

    ``max``/``min`` are bools for bool tensors; all four are ``None`` for empty tensors. The
    ``*_except_inf_nan`` values are the extremes over the finite elements, present only when the plain
    extreme is not finite (``None`` when no element is finite).
    """

    max: float | bool | None
    min: float | bool | None
    mean: float | None
    norm: float | None
    max_except_inf_nan: float | None = None
    min_except_inf_nan: float | None = None
    # The members' JSON text, made once: an unchanged tensor is seen again and again (one call's output
    # is the next call's input) and shares these statistics, and writing a float is most of an entry's cost.
    _members: tuple[str, str] | None = field(default=None, init=False, repr=False, compare=False)

    def is_finite(self) -> bool:
        """True when no statistic shows inf or NaN (bool and empty tensors are always finite)."""
        return all(
            v is None or isinstance(v, bool) or math.isfinite(v)
            for v in (self.max, self.min, self.mean, self.norm)
        )

    def json_members(self) -> tuple[str, str]:
        """(the ``Max``..``Norm`` members, the ``*_except_inf_nan`` members or "") as JSON object text."""
        if self._members is None:
            high, low, mean, norm = self.max, self.min, self.mean, self.norm
            if type(high) is float and type(low) is float and type(mean) is float and type(norm) is float \
                    and math.isfinite(high + low + mean + norm):  # the common case: four finite floats
                self._members = f'"Max": {high!r}, "Min": {low!r}, "Mean": {mean!r}, "Norm": {norm!r}', ""
                return self._members
            high, low, mean, norm = (_number(v) for v in (high, low, mean, norm))
            extremes = ""
            if not _finite_or_none(self.max):
                extremes += f', "Max_except_inf_nan": {_number(self.max_except_inf_nan)}'
            if not _finite_or_none(self.min):
                extremes += f', "Min_except_inf_nan": {_number(self.min_except_inf_nan)}'
            self._members = f'"Max": {high}, "Min": {low}, "Mean": {mean}, "Norm": {norm}', extremes
        return self._members


@dataclass
class TensorRecord:
    """One tensor argument or output as dump.json shows it."""

    type_name: str
    dtype: str
    shape: tuple[int, ...]
    requires_grad: bool | None = None
    stats: TensorStats | None = None
    md5: str | None = None
    data_name: str | None = None
    # A shard of a distributed tensor: its layout (placements, mesh, coordinate, global shape), written
    # as the member ``dtensor`` after 1.1.1's members, which its readers ignore (docs/pytorch/distributed.md).
    dtensor: dict | None = None
    # The output of an API that returns uninitialised memory (msprobe.core.dump.uninitialised): the member
    # ``uninitialised``, also ignored by 1.1.1's readers (docs/compare.md#uninitialised-values).
    uninitialised: bool = False

    def json_text(self) -> str:
        """The dump.json value: members in the order msprobe 1.1.1 writes them (``type``, ``dtype``,
        ``shape``, the statistics, ``requires_grad``, the finite extremes, ``md5``, ``data_name``), then
        our extensions ``dtensor`` and ``uninitialised``."""
        if self.stats is WITHOUT_STATISTICS:  # summary_mode xor: the checksum alone
            text, extremes = _head(self.type_name, self.dtype, self.shape)[:-2], ""
        else:
            statistics, extremes = (self.stats or _NO_STATS).json_members()
            text = _head(self.type_name, self.dtype, self.shape) + statistics
        if self.requires_grad is not None:
            text += ', "requires_grad": true' if self.requires_grad else ', "requires_grad": false'
        text += extremes
        if self.md5 is not None:
            text += f', "md5": {json.dumps(self.md5)}'
        if self.data_name is not None:
            text += f', "data_name": {json.dumps(self.data_name)}'
        if self.dtensor is not None:
            text += f', "dtensor": {json.dumps(self.dtensor)}'
        if self.uninitialised:
            text += ', "uninitialised": true'
        return text + "}"


_NO_STATS = TensorStats(None, None, None, None)  # read only
# A record's ``stats`` when it is summarised by its XOR checksum alone: no Max..Norm members are written.
WITHOUT_STATISTICS = TensorStats(None, None, None, None)


def _finite_or_none(value: float | bool | None) -> bool:
    return value is None or isinstance(value, bool) or math.isfinite(value)


def _number(value: float | bool | None) -> str:
    """A statistic as json writes it (``float.__repr__``; NaN/Infinity tokens; true/false; null), without
    json's per-call setup: four of these per distinct tensor."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and math.isfinite(value):
        return float.__repr__(value)
    return json.dumps(value)


@functools.lru_cache(maxsize=4096)
def _head(type_name: str, dtype: str, shape: tuple[int, ...]) -> str:
    """``{"type": ..., "dtype": ..., "shape": [...], `` — the same few recur in every step."""
    shape_text = json.dumps([int(n) for n in shape])
    return f'{{"type": {json.dumps(type_name)}, "dtype": {json.dumps(dtype)}, "shape": {shape_text}, '


@dataclass
class Call:
    """One outermost API call or one module/cell forward, as the interceptor saw it.

    ``name`` is the full forward entry name (``Torch.add.0.forward``, ``Module.fc.Linear.forward.0``)
    built with :mod:`msprobe.core.lifecycle.naming`. ``args``/``kwargs`` are the real call arguments, handed to the
    sink *before* the call runs, so an in-place API's inputs can be recorded as they were; they are let
    go when the call returns (:meth:`release_arguments`), so a sink's ``backward`` finds them empty.

    ``rerun`` (API calls only, else ``None``) runs the real API again, unrecorded:
    ``call.rerun(*args, **kwargs)``. Free benchmark uses it to run an API on perturbed inputs.

    ``state`` holds the sinks' per-call state between ``forward_start`` and the call's end, keyed by
    their typed :class:`~msprobe.core.dump.collector.CallState` tokens (never by strings), so it lives exactly
    as long as the call.
    """

    name: str
    args: tuple
    kwargs: dict
    is_module: bool = False
    mutates_inputs: bool = False
    state: dict = field(default_factory=dict)
    rerun: Callable[..., Any] | None = None

    def release_arguments(self) -> None:
        """The call returned and every sink has seen its end: let its arguments go.

        A call waits for its backward in hooks on the autograd graph. Holding its arguments there kept a
        step's activations alive for as long as the user kept any output (a list of losses), and closed a
        cycle through autograd's C++ nodes, which Python's collector cannot see, whenever an output was
        an input itself (``dropout`` with ``p=0``) or written in place (``ReLU(inplace=True)``): every
        step's activations stayed in memory until the job ran out of it."""
        self.args, self.kwargs = (), {}


class UserComputationError(Exception):
    """An error of the user's own computation that surfaced while msprobe read one of its tensors: a
    framework that executes asynchronously (MindSpore) raises a failed operator's error at the first read
    of its result, and that read may be msprobe's. It belongs to the user: the sink hands ``original``
    on to the user's call instead of leaving the call out (and the user's own read then finding garbage)."""

    def __init__(self, original: BaseException) -> None:
        super().__init__(str(original))
        self.original = original


class CallSink(Protocol):
    """What a collector offers an interceptor. Every method is called with interception paused, so the
    sink's own framework calls are never seen as user calls."""

    def forward_start(self, call: Call) -> bool:
        """Before the real call. Return True when the sink wants this call's backward entry too."""

    def forward_end(self, call: Call, output: Any) -> Any:
        """After the real call returned ``output``. Return a replacement output for the user (free
        benchmark ``fix``), or ``None`` to keep ``output``; module forwards ignore the answer."""

    def backward(self, call: Call, grad_input: tuple, grad_output: tuple) -> None:
        """The backward of ``call`` ran: ``grad_input`` are the gradients flowing into it (one per forward
        output), ``grad_output`` those it produced for its tensor inputs, in forward argument order
        (``None`` where an input needs no gradient). ``call.args`` are gone by now: what a sink needs of
        them here it keeps at ``forward_end``."""


class StepCollector(CallSink, Protocol):
    """A sink the session drives step by step (dump, overflow check, free benchmark)."""

    selector: Any  # msprobe.core.lifecycle.select.Selector: step and rank decide when the session starts it

    @property
    def exhausted(self) -> bool:
        """True when the collector wants nothing more in this run; the session then finishes."""

    def begin_step(self, step: int, rank: int | None) -> None: ...

    def end_step(self) -> None:
        """Write what is pending for this step."""


class TensorAdapter(Protocol):
    """Framework tensor operations the collector needs; one implementation per framework."""

    type_name: str  # "torch.Tensor" / "mindspore.Tensor"
    tensor_suffix: str  # ".pt" / ".npy"

    def is_tensor(self, value: Any) -> bool: ...

    def describe(self, tensor: Any) -> TensorRecord:
        """dtype, shape, requires_grad — no statistics, no host synchronisation."""

    def stats(self, tensor: Any) -> Any:
        """Launch the statistics of ``tensor`` on its device and return a handle; must not sync. The
        handle is the :class:`~msprobe.core.contract.TensorStats` themselves when they are known at
        once, else a pending handle whose ``stats`` is ``None`` until :meth:`fetch` resolves it."""

    def select_rows(self, tensor: Any, rows: Any) -> Any:
        """The elements of ``tensor`` that ``rows`` (a :class:`~msprobe.core.lifecycle.rows.RowSelection`)
        selects for its shape, as a view made on the tensor's device (no host sync, nothing the user's run
        sees); ``tensor`` itself when no slice fits it."""

    def capture(self, tensor: Any, remember: bool = False) -> tuple[TensorRecord, Any]:
        """``(describe(tensor), stats(tensor))``: what the encoder asks for every tensor it keeps.
        ``remember``: the tensor is one a recorded call produced (an output); an adapter may keep what it
        computed for such a tensor and reuse it while the tensor is unchanged, until :meth:`forget`."""

    def forget(self) -> None:
        """A new step: drop whatever was kept for reuse (a tensor can change between steps in ways a
        framework does not count, e.g. batch_norm's running statistics or a write through ``.data``)."""

    def fetch(self, handles: list[Any]) -> list[TensorStats]:
        """Bring the statistics of many handles to the host in one transfer."""

    def checksum(self, tensor: Any, remember: bool = False) -> str:
        """CRC-32 of the tensor's bytes as 8 lowercase hex digits (summary_mode md5); ``remember`` as in
        :meth:`capture`."""

    def xor_checksum(self, tensor: Any, remember: bool = False) -> Any:
        """The 64-bit XOR checksum of the tensor's bytes (summary_mode xor,
        :mod:`msprobe.core.dump.xor_checksum`): its text when known at once, else a
        :class:`~msprobe.core.dump.xor_checksum.PendingChecksum` left where the tensor lives, whose batch
        :meth:`transfer_words` brings to the host; ``remember`` as in :meth:`capture`."""

    def transfer_words(self, words: list[Any]) -> list[int | None]:
        """Pending checksums' words (``PendingChecksum.word``) to the host in one transfer, as ints."""

    def snapshot(self, tensor: Any) -> Any:
        """A detached copy that later in-place changes cannot reach (for saving inputs of in-place APIs)."""

    def freeze(self, tensor: Any, *, reuse: bool = True, remember: bool = False) -> Any:
        """A :class:`~msprobe.core.dump.tensor_writer.FrozenTensor`: a contiguous host copy for its file;
        with ``reuse``, the same one again for the same unchanged tensor (where the framework can tell
        and the tensor was frozen with ``remember``, as in :meth:`capture`)."""

    def write_frozen(self, payload: Any, handle: BinaryIO) -> None:
        """Write a frozen copy's file content to ``handle`` (on the tensor writer's thread)."""

    def encode_other(self, value: Any) -> Any:
        """dump.json value for a framework object that is not a tensor (dtype, device, Size, process
        group), or ``NOT_HANDLED``."""


class Interceptor(Protocol):
    """A framework's interception layer, as the debugger session drives it."""

    def attach(self, model: Any) -> None:
        """Hook the model's modules/cells (L0, mix); ``None`` when only APIs are collected."""

    def enable(self) -> None:
        """Start handing calls to the sink."""

    def disable(self) -> None:
        """Stop handing calls to the sink; the cost of idle hooks must be near zero."""

    def reset_counts(self) -> None:
        """A new step: call counters start again from 0."""

    def detach(self) -> None:
        """Remove every hook and restore everything wrapped."""


class Runner(Protocol):
    """What a debugger runs for its task, driven by ``start``/``stop``/``step`` of the training loop."""

    finished: bool

    def start(self, model: Any = None, scheduled_tokens: Any = None) -> None:
        """Collection on for this step; ``scheduled_tokens`` (a serving batch's rows per request) matters to
        a dump with ``request_id`` only."""

    def stop(self) -> None: ...

    def step(self) -> None: ...

    def forward_backward_dump_end(self) -> None: ...

    def finish(self) -> None: ...


class FrameworkKit(Protocol):
    """A framework's parts, as the tasks use them."""

    name: str  # "pytorch" / "mindspore": the framework key of the configuration
    capabilities: Capabilities  # what it supports; the configuration rules read these

    def adapter(self) -> TensorAdapter:
        """Tensor operations for the collectors (statistics, checksums, files)."""

    def interceptor(self, sink: CallSink, level: str) -> Interceptor:
        """The one interception mechanism of the framework, reporting to ``sink`` at ``level``."""

    def benchmark_ops(self) -> Any:
        """Free benchmark's framework half (``msprobe.core.free_benchmark.BenchmarkOps``)."""

    def gradient_monitor(self, config: DebuggerConfig) -> Any:
        """Grad probe's framework half, built from the grad_probe section."""

    def current_rank(self) -> int | None:
        """This process's rank when a process group is initialised, else ``None``."""

    def kernel_dump(self, config: DebuggerConfig, on_finish: Callable[[], None]) -> Runner:
        """Level L2 of the dump tasks: the framework's own kernel-level dump (MindSpore static graph;
        on PyTorch, torch_npu's kernel dump of one API on an Ascend NPU, an aten-level dump of it elsewhere)."""

    def prepare_for_comparison(self, model: Any) -> None:
        """What the dump tasks change in the user's model so two devices compute the same function
        (PyTorch: dropout p = 0, docs/pytorch/dump.md#dropout); undone by :meth:`restore`."""

    def restore(self) -> None:
        """Undo :meth:`prepare_for_comparison`; called once when the run finishes."""

    def wire_tensor(self, name: str, snapshot: Any) -> Any:
        """Online run_ut: a tensor snapshot (``TensorAdapter.snapshot``) as raw host bytes, a
        ``msprobe.core.online.wire.WireTensor`` (frameworks with ``Capabilities.online_run_ut``)."""


class IdleRunner:
    """A runner with nothing to do in the step loop (grad probe's hooks are on the optimizer; a kernel
    dump the device cannot do); :meth:`finish` calls ``on_finish`` once."""

    def __init__(self, on_finish: Callable[[], None]) -> None:
        self.finished = False
        self._on_finish = on_finish

    def start(self, model: Any = None, scheduled_tokens: Any = None) -> None:
        pass

    def stop(self) -> None:
        pass

    def step(self) -> None:
        pass

    def forward_backward_dump_end(self) -> None:
        pass

    def finish(self) -> None:
        if not self.finished:
            self.finished = True
            self._on_finish()


class PartsKit:
    """A :class:`FrameworkKit` assembled from a framework's classes; a framework subclasses it for what
    differs (its kernel dump, what it changes in the model while dumping). Defining a subclass registers
    its capabilities for the configuration rules."""

    capabilities: Capabilities
    adapter_class: Callable[[], TensorAdapter]
    interceptor_class: Callable[..., Interceptor]
    benchmark_ops_class: Callable[[], Any]
    monitor_class: Callable[..., Any]
    rank: Callable[[], int | None]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        register_framework(cls.capabilities)

    @property
    def name(self) -> str:
        return self.capabilities.name

    def adapter(self) -> TensorAdapter:
        return self.adapter_class()

    def interceptor(self, sink: CallSink, level: str) -> Interceptor:
        return self.interceptor_class(sink, level=level)

    def benchmark_ops(self) -> Any:
        return self.benchmark_ops_class()

    def gradient_monitor(self, config: DebuggerConfig) -> Any:
        section = config.section
        return self.monitor_class(config.dump_path, section.grad_level, section.param_list, section.bounds,
                                  config.step, config.rank)

    def current_rank(self) -> int | None:
        return self.rank()

    def prepare_for_comparison(self, model: Any) -> None:
        pass

    def restore(self) -> None:
        pass
