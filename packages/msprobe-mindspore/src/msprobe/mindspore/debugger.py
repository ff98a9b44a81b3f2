"""``PrecisionDebugger`` for MindSpore PyNative (SPEC 4): the shared debugger with MindSpore's
interceptor, tensor adapter, rank lookup and gradient monitor."""

from __future__ import annotations

from typing import Any

from msprobe.core.config import DebuggerConfig
from msprobe.core.debugger import COLLECTING_TASKS, DUMP_TASKS, BaseDebugger
from msprobe.mindspore.adapter import MindSporeTensorAdapter
from msprobe.mindspore.grad_probe import GradMonitor
from msprobe.mindspore.hooks import Interceptor
from msprobe.mindspore.rank import current_rank
from msprobe.mindspore.tasks.free_benchmark import MindSporeBenchmarkOps


class PrecisionDebugger(BaseDebugger):
    """``PrecisionDebugger(config_path=None, task=None, dump_path=None, level=None, model=None, step=None)``;
    ``start(model)`` takes an ``nn.Cell``."""

    framework = "mindspore"
    rank_lookup = staticmethod(current_rank)

    def _setup(self, config: DebuggerConfig) -> None:
        if config.is_static_graph and config.task in (*DUMP_TASKS, "overflow_check"):
            from msprobe.mindspore.graph_dump import GraphDumpSession  # static graph: MindSpore's kernel dump

            self._session = GraphDumpSession(config, current_rank)  # type: ignore[assignment]
        elif config.task in COLLECTING_TASKS and config.level != "L2":
            self._start_session(MindSporeTensorAdapter(), MindSporeBenchmarkOps(), Interceptor, current_rank)
        elif config.task == "grad_probe":
            self._start_grad_monitor(GradMonitor)
        else:
            raise self._unsupported(
                f"task {config.task!r} at level {config.level!r}",
                "statistics and tensor at L0, L1 and mix (PyNative), overflow_check (L0, L1), free_benchmark, "
                "grad_probe",
            )

    def monitor(self, optimizer: Any) -> None:
        """task grad_probe: record each selected parameter's gradient at every optimizer step."""
        self._require_grad_monitor().monitor(optimizer)
