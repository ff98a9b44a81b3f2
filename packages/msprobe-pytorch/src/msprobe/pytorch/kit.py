"""PyTorch's :class:`~msprobe.core.kit.FrameworkKit`: the parts of msprobe.pytorch the tasks build from."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from msprobe.core.config import DebuggerConfig
from msprobe.core.events import CallSink
from msprobe.core.log import logger
from msprobe.pytorch.adapter import TorchTensorAdapter
from msprobe.pytorch.dropout import DropoutOff
from msprobe.pytorch.grad_probe import GradMonitor
from msprobe.pytorch.hooks import Interceptor
from msprobe.pytorch.rank import current_rank
from msprobe.pytorch.tasks.free_benchmark import TorchBenchmarkOps


class _NoKernelDump:
    """Level L2 off an Ascend NPU: torch_npu's kernel dump is not available, so nothing is collected."""

    finished = False

    def __init__(self, on_finish: Callable[[], None]) -> None:
        logger.error("level L2 (kernel dump) needs an Ascend NPU with torch_npu; this debugger collects nothing here")
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


class TorchKit:
    """One per debugger: it also holds what collection changes in the user's model (dropout's ``p``)."""

    name = "pytorch"

    def __init__(self) -> None:
        self._dropout = DropoutOff()

    def adapter(self) -> TorchTensorAdapter:
        return TorchTensorAdapter()

    def interceptor(self, sink: CallSink, level: str) -> Interceptor:
        return Interceptor(sink, level=level)

    def benchmark_ops(self) -> TorchBenchmarkOps:
        return TorchBenchmarkOps()

    def gradient_monitor(self, config: DebuggerConfig) -> GradMonitor:
        section = config.section
        return GradMonitor(config.dump_path, section.grad_level, section.param_list, section.bounds,
                           config.step, config.rank)

    def current_rank(self) -> int | None:
        return current_rank()

    def kernel_dump(self, config: DebuggerConfig, on_finish: Callable[[], None]) -> _NoKernelDump:
        return _NoKernelDump(on_finish)

    def prepare_for_comparison(self, model: Any) -> None:
        """While dumping, dropout layers use p = 0 (SPEC 4's dropout rule, ``dropout.py``)."""
        if model is not None:
            self._dropout.apply(model)

    def restore(self) -> None:
        self._dropout.restore()
