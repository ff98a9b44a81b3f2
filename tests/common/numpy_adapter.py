"""A framework made of numpy: the reference implementation of msprobe.core's contract, for the tests.

:class:`NumpyTensorAdapter` implements :class:`msprobe.core.contract.TensorAdapter` for ``numpy.ndarray``
and :class:`NumpyInterceptor` implements :class:`msprobe.core.contract.Interceptor` on top of
:class:`msprobe.core.lifecycle.calls.CallReporter`, the way the PyTorch and MindSpore interceptors do: an API call
is counted, named and handed to the sink before it runs and after it returns (only the outermost call is
seen: what runs inside it is not the user's), a module forward is a span that API calls and other
modules nest in, and a small tape replays the calls backwards to report each call's backward with the
gradients flowing into it and those it produced for its tensor inputs.

Nothing here imports a framework, so msprobe-common can be tested on its own.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import numpy as np

from msprobe.core.config.frameworks import Capabilities, register_framework
from msprobe.core.contract import NOT_HANDLED, Call, CallSink, TensorRecord, TensorStats
from msprobe.core.dump.host_stats import array_stats
from msprobe.core.dump.tensor_writer import FrozenTensor
from msprobe.core.dump.xor_checksum import PendingChecksum, xor_word
from msprobe.core.lifecycle.calls import CallReporter, Level
from msprobe.core.services.tree import tensors_in

# ---------------------------------------------------------------------------------------------- adapter


@dataclass
class StatsHandle:
    """Statistics "in flight". Host memory has no device to wait for, so they are ``computed`` at once (as
    both real adapters do for CPU tensors); the handle only lets the tests see how the collector batches
    its :meth:`NumpyTensorAdapter.fetch` calls. Like the real adapters' pending handles, its ``stats`` are
    ``None`` until fetched."""

    computed: TensorStats
    stats: TensorStats | None = None


class NumpyTensorAdapter:
    """What the collector needs to know about and do with a ``numpy.ndarray``."""

    type_name = "numpy.ndarray"
    tensor_suffix = ".npy"

    def __init__(self) -> None:
        self.fetch_sizes: list[int] = []  # the length of every fetch, in order

    def is_tensor(self, value: Any) -> bool:
        return isinstance(value, np.ndarray)  # numpy scalars are values: msprobe.core.dump.encode writes them

    def describe(self, tensor: np.ndarray) -> TensorRecord:
        return TensorRecord(type_name=self.type_name, dtype=str(tensor.dtype), shape=tuple(tensor.shape))

    def stats(self, tensor: np.ndarray) -> StatsHandle:
        return StatsHandle(array_stats(tensor))

    def capture(self, tensor: np.ndarray, remember: bool = False) -> tuple[TensorRecord, StatsHandle]:
        return self.describe(tensor), self.stats(tensor)

    def select_rows(self, tensor: np.ndarray, rows: Any) -> np.ndarray:
        index = rows.index(tensor.shape)
        return tensor if index is None else tensor[index]

    def forget(self) -> None:
        pass  # nothing is kept for reuse

    def fetch(self, handles: list[StatsHandle]) -> list[TensorStats]:
        self.fetch_sizes.append(len(handles))
        for handle in handles:
            handle.stats = handle.computed
        return [handle.stats for handle in handles]

    def checksum(self, tensor: np.ndarray, remember: bool = False) -> str:
        return f"{zlib.crc32(np.ascontiguousarray(tensor).tobytes()) & 0xFFFFFFFF:08x}"

    def xor_checksum(self, tensor: np.ndarray, remember: bool = False) -> PendingChecksum:
        """Left pending, as on an accelerator, so the tests see the batch's one transfer."""
        return PendingChecksum(xor_word(np.ascontiguousarray(tensor).reshape(-1).view(np.uint8)))

    def transfer_words(self, words: list[int]) -> list[int]:
        self.fetch_sizes.append(len(words))
        return list(words)

    def snapshot(self, tensor: np.ndarray) -> np.ndarray:
        return tensor.copy()

    def freeze(self, tensor: np.ndarray, *, reuse: bool = True, remember: bool = False) -> FrozenTensor:
        array = np.array(tensor, order="C", copy=True)
        return FrozenTensor(array, array.nbytes)

    def write_frozen(self, payload: np.ndarray, handle: BinaryIO) -> None:
        np.save(handle, payload, allow_pickle=False)

    def encode_other(self, value: Any) -> Any:
        if isinstance(value, np.dtype):
            return {"type": "numpy.dtype", "value": str(value)}
        return NOT_HANDLED


# ------------------------------------------------------------------------------------------ interceptor

# The gradients of a call's tensor inputs (in argument order) from the gradient of its output.
Vjp = Callable[[np.ndarray], tuple]


@dataclass
class _Node:
    """One step of the tape: an API call, or the start or end of a module span. ``call`` is None for an
    API the interceptor does not report (level L0): its gradient still flows, as autograd's would."""

    kind: str  # "api" | "module_start" | "module_end"
    call: Call | None
    wanted: bool  # the sink wants this call's backward
    inputs: list[np.ndarray] = field(default_factory=list)
    output: Any = None
    vjp: Vjp | None = None


class NumpyInterceptor:
    """:class:`msprobe.core.contract.Interceptor` for code that calls :meth:`api` and :meth:`module`."""

    def __init__(self, sink: CallSink, *, level: str) -> None:
        self.level = Level(level)
        self.reporter = CallReporter(sink)
        self.model: Any = None
        self.detached = False
        self._tape: list[_Node] = []

    # ------------------------------------------------------------------ Interceptor
    def attach(self, model: Any) -> None:
        self.model = model
        self.detached = False

    def enable(self) -> None:
        self.reporter.active = True

    def disable(self) -> None:
        self.reporter.active = False
        self._tape.clear()  # backward passes still pending are not reported

    def reset_counts(self) -> None:
        self.reporter.counter.reset()

    def detach(self) -> None:
        self.disable()
        self.model = None
        self.detached = True

    # ------------------------------------------------------------------ what the "framework" calls
    def api(self, prefix: str, name: str, func: Callable[..., Any], *args: Any, mutates: bool = False,
            vjp: Vjp | None = None, **kwargs: Any) -> Any:
        """Run ``func(*args, **kwargs)`` as the API ``{prefix}.{name}``; ``vjp`` makes it differentiable."""
        if not self.reporter.sees_calls:  # collection off, or a call inside a call: not the user's
            return func(*args, **kwargs)
        if not self.level.apis:  # not reported (L0), but its gradient flows all the same
            with self.reporter.pause():
                output = func(*args, **kwargs)
            self._tape.append(_Node("api", None, False, _arrays(args, kwargs), output, vjp))
            return output
        started = self.reporter.start_api(prefix, name, args, kwargs, mutates=mutates,
                                          rerun=self.reporter.unrecorded(func))
        with self.reporter.pause():  # only the outermost call is the user's
            output = func(*args, **kwargs)
        output = self.reporter.end(started, output)
        self._tape.append(_Node("api", started.call, started.wants_backward, _arrays(args, kwargs), output, vjp))
        return output

    def module(self, path: str, cls: str, forward: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``forward(*args, **kwargs)`` as the forward of module ``path`` of class ``cls``."""
        if not (self.level.modules and self.reporter.sees_calls):
            return forward(*args, **kwargs)
        started = self.reporter.start_module("Module", path, cls, args, kwargs)
        inputs = _arrays(args, kwargs)
        self._tape.append(_Node("module_start", started.call, started.wants_backward, inputs))
        output = forward(*args, **kwargs)  # API calls and submodules inside are the user's too
        self.reporter.end(started, output)
        self._tape.append(_Node("module_end", started.call, started.wants_backward, inputs, output))
        return output

    def backward(self, output: np.ndarray, seed: np.ndarray | None = None) -> dict[int, np.ndarray]:
        """Replay the tape backwards from ``output`` (gradient ``seed``, ones by default) and report the
        backward of every call whose backward the sink wanted, as autograd would run it: an API's when its
        gradients are computed, a module's when the gradients of its inputs are complete. Returns the
        gradients by ``id`` of the forward's arrays."""
        grads: dict[int, np.ndarray] = {id(output): np.ones_like(output) if seed is None else seed}
        spans: dict[int, tuple[np.ndarray | None, list]] = {}  # module call → (grad of its output, input grads before)
        for node in reversed(self._tape):
            if node.kind == "module_end":
                spans[id(node.call)] = (grads.get(id(node.output)), [grads.get(id(a)) for a in node.inputs])
            elif node.kind == "module_start":
                flowing_in, before = spans.pop(id(node.call))
                if node.wanted and flowing_in is not None:
                    produced = tuple(_minus(grads.get(id(a)), b) for a, b in zip(node.inputs, before))
                    self.reporter.backward(node.call, (flowing_in,), produced)
            else:
                flowing_in = grads.get(id(node.output))
                if flowing_in is None or node.vjp is None:
                    continue
                produced = tuple(node.vjp(flowing_in))
                for array, grad in zip(node.inputs, produced):
                    if grad is not None:
                        grads[id(array)] = grads[id(array)] + grad if id(array) in grads else grad
                if node.wanted:
                    self.reporter.backward(node.call, (flowing_in,), produced)
        self._tape.clear()
        return grads


def _minus(after: np.ndarray | None, before: np.ndarray | None) -> np.ndarray | None:
    """What a module span added to an input's gradient."""
    if after is None or before is None:
        return after
    return after - before


def _arrays(args: tuple, kwargs: dict) -> list[np.ndarray]:
    return tensors_in((args, kwargs), lambda value: isinstance(value, np.ndarray))


# A third framework, as a new framework package would declare itself: its configuration key, and what it
# supports (the configuration rules read these, never the name).
NUMPY = Capabilities(name="numpy", display="numpy", overflow_levels=("L0", "L1"))
register_framework(NUMPY)


class NumpyKit:
    """The framework kit of numpy (``msprobe.core.contract.FrameworkKit``): what a task builds from."""

    name = NUMPY.name
    capabilities = NUMPY

    def __init__(self) -> None:
        self.tensor_adapter = NumpyTensorAdapter()  # one per kit, so a test can read what it fetched

    def adapter(self) -> NumpyTensorAdapter:
        return self.tensor_adapter

    def interceptor(self, sink, level: str) -> NumpyInterceptor:
        return NumpyInterceptor(sink, level=level)

    def benchmark_ops(self):
        raise NotImplementedError("free benchmark has no numpy half")

    def gradient_monitor(self, config):
        raise NotImplementedError("grad probe has no numpy half")

    def current_rank(self) -> int | None:
        return None

    def kernel_dump(self, config, on_finish):
        raise NotImplementedError("numpy has no kernel dump (level L2)")

    def prepare_for_comparison(self, model) -> None:
        pass

    def restore(self) -> None:
        pass
