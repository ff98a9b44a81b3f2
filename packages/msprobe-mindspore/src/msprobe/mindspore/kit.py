"""MindSpore's :class:`~msprobe.core.contract.FrameworkKit`: the parts of msprobe.mindspore the tasks build from.

The dropout rule is applied on PyTorch only so far (docs/mindspore/dump.md#pynative-levels-l0-l1-and-mix):
MindSpore's dropout keeps the probability the user set (``prepare_for_comparison`` does nothing).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from msprobe.core.config import DebuggerConfig
from msprobe.core.config.frameworks import MINDSPORE
from msprobe.core.contract import PartsKit
from msprobe.mindspore.adapter import MindSporeTensorAdapter
from msprobe.mindspore.grad_probe import GradMonitor
from msprobe.mindspore.hooks import Interceptor
from msprobe.mindspore.rank import current_rank
from msprobe.mindspore.tasks.free_benchmark import MindSporeBenchmarkOps


class MindSporeKit(PartsKit):
    capabilities = MINDSPORE
    adapter_class = MindSporeTensorAdapter
    interceptor_class = Interceptor
    benchmark_ops_class = MindSporeBenchmarkOps
    monitor_class = GradMonitor
    rank = staticmethod(current_rank)

    def kernel_dump(self, config: DebuggerConfig, on_finish: Callable[[], None]) -> Any:
        """Static graph (GRAPH_MODE, ``jit``): MindSpore's own kernel dump (``graph_dump``)."""
        from msprobe.mindspore.graph_dump import GraphDumpSession

        return GraphDumpSession(config, current_rank)
