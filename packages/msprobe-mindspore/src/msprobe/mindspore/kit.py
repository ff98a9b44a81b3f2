"""MindSpore's :class:`~msprobe.core.kit.FrameworkKit`: the parts of msprobe.mindspore the tasks build from."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from msprobe.core.config import DebuggerConfig
from msprobe.core.events import CallSink
from msprobe.mindspore.adapter import MindSporeTensorAdapter
from msprobe.mindspore.grad_probe import GradMonitor
from msprobe.mindspore.hooks import Interceptor
from msprobe.mindspore.rank import current_rank
from msprobe.mindspore.tasks.free_benchmark import MindSporeBenchmarkOps


class MindSporeKit:
    name = "mindspore"

    def adapter(self) -> MindSporeTensorAdapter:
        return MindSporeTensorAdapter()

    def interceptor(self, sink: CallSink, level: str) -> Interceptor:
        return Interceptor(sink, level=level)

    def benchmark_ops(self) -> MindSporeBenchmarkOps:
        return MindSporeBenchmarkOps()

    def gradient_monitor(self, config: DebuggerConfig) -> GradMonitor:
        section = config.section
        return GradMonitor(config.dump_path, section.grad_level, section.param_list, section.bounds,
                           config.step, config.rank)

    def current_rank(self) -> int | None:
        return current_rank()

    def kernel_dump(self, config: DebuggerConfig, on_finish: Callable[[], None]) -> Any:
        """Static graph (GRAPH_MODE, ``jit``): MindSpore's own kernel dump (``graph_dump``)."""
        from msprobe.mindspore.graph_dump import GraphDumpSession

        return GraphDumpSession(config, current_rank)

    def prepare_for_comparison(self, model: Any) -> None:
        """Nothing yet: SPEC 4's dropout rule is applied on PyTorch only so far; MindSpore's dropout
        keeps the probability the user set."""

    def restore(self) -> None:
        pass
