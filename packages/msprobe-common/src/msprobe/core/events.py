"""The contract between a framework's interception layer and the framework-free collector.

An interceptor (``msprobe.pytorch.hooks``, ``msprobe.mindspore.hooks``) sees calls; the collector in
``msprobe.core`` decides what to keep and writes it. They meet here, so that every task (dump,
overflow check, free benchmark) consumes the same calls through one mechanism per framework, and
so that hooks know nothing about files while writers know nothing about frameworks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Protocol

from msprobe.core.dump.records import TensorRecord, TensorStats


@dataclass
class Call:
    """One outermost API call or one module/cell forward, as the interceptor saw it.

    ``name`` is the full forward entry name (``Torch.add.0.forward``, ``Module.fc.Linear.forward.0``)
    built with :mod:`msprobe.core.naming`. ``args``/``kwargs`` are the real call arguments, handed to the
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

    selector: Any  # msprobe.core.select.Selector: step and rank decide when the session starts it

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
        handle is the :class:`~msprobe.core.dump.records.TensorStats` themselves when they are known at
        once, else a pending handle whose ``stats`` is ``None`` until :meth:`fetch` resolves it."""

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
        group), or ``records.NOT_HANDLED``."""


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
