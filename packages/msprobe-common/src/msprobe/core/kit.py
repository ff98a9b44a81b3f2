"""What a framework package gives the tasks: one :class:`FrameworkKit` per framework.

A task builds what the debugger runs from the validated configuration and the kit of the framework
it runs on; it never imports a framework. The framework packages define their kit
(``msprobe.pytorch.kit.TorchKit``, ``msprobe.mindspore.kit.MindSporeKit``), hand it to the shared
:class:`~msprobe.core.lifecycle.debugger.BaseDebugger` as ``kit_class``, and publish it under the
``msprobe.frameworks`` entry point (:mod:`msprobe.core.services.plugin`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from msprobe.core.config.frameworks import Capabilities, register_framework
from msprobe.core.config.model import DebuggerConfig
from msprobe.core.contract import CallSink, Interceptor, TensorAdapter


class Runner(Protocol):
    """What a debugger runs for its task, driven by ``start``/``stop``/``step`` of the training loop."""

    finished: bool

    def start(self, model: Any = None) -> None: ...

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

    def start(self, model: Any = None) -> None:
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
