"""PyTorch's :class:`~msprobe.core.contract.FrameworkKit`: the parts of msprobe.pytorch the tasks build from."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from msprobe.core.config import DebuggerConfig
from msprobe.core.config.frameworks import PYTORCH
from msprobe.core.contract import PartsKit, Runner
from msprobe.core.services.handles import HandleGroup
from msprobe.pytorch.adapter import TorchTensorAdapter
from msprobe.pytorch.grad_probe import GradMonitor
from msprobe.pytorch.hooks import Interceptor
from msprobe.pytorch.rank import current_rank
from msprobe.pytorch.tasks.free_benchmark import TorchBenchmarkOps
from msprobe.pytorch.training.dropout import zero_dropout


class TorchKit(PartsKit):
    """One per debugger: it also holds what collection changes in the user's model (dropout's ``p``)."""

    capabilities = PYTORCH
    adapter_class = TorchTensorAdapter
    interceptor_class = Interceptor
    benchmark_ops_class = TorchBenchmarkOps
    monitor_class = GradMonitor
    rank = staticmethod(current_rank)

    def __init__(self) -> None:
        self._changed = HandleGroup()  # what collection changed in the user's model, undone by restore()

    def kernel_dump(self, config: DebuggerConfig, on_finish: Callable[[], None]) -> Runner:
        """Level L2: torch_npu's kernel dump of the listed API on an Ascend NPU, an aten-level dump of it
        everywhere else (``kernel_dump.py``)."""
        from msprobe.pytorch.kernel_dump import kernel_dump

        return kernel_dump(config, self, on_finish)

    def prepare_for_comparison(self, model: Any) -> None:
        """While dumping, dropout layers use p = 0 (docs/pytorch/dump.md#dropout, ``dropout.py``). Called at every
        ``start()``: only a call that changed something is kept until :meth:`restore`, or a long run
        would keep one handle per step."""
        changed = zero_dropout(model)
        if changed.active:
            self._changed.add(changed)

    def restore(self) -> None:
        self._changed.remove()

    def wire_tensor(self, name: str, snapshot: Any) -> Any:
        """Online run_ut's tensor bytes (``online/tensors.py``), called on the sender's thread."""
        from msprobe.pytorch.online.tensors import wire_tensor

        return wire_tensor(name, snapshot)
