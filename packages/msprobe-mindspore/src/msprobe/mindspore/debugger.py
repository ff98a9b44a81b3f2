"""``PrecisionDebugger`` for MindSpore (docs/mindspore/dump.md): the shared debugger with MindSpore's kit (``kit.py``)
— PyNative hooks, or MindSpore's own kernel dump in static graph (level L2)."""

from __future__ import annotations

from typing import Any

from msprobe.core.lifecycle.debugger import BaseDebugger
from msprobe.mindspore.kit import MindSporeKit
from msprobe.mindspore.load_inputs import MindSporeInputLoader


class PrecisionDebugger(BaseDebugger):
    """``PrecisionDebugger(config_path=None, task=None, dump_path=None, level=None, model=None, step=None)``;
    ``start(model)`` takes an ``nn.Cell``."""

    kit_class = MindSporeKit
    input_loader_class = MindSporeInputLoader

    def monitor(self, optimizer: Any) -> None:
        """task grad_probe: record each selected parameter's gradient at every optimizer step."""
        self._gradient_monitor().monitor(optimizer)
