"""The dropout rule of SPEC 4: while dumping, dropout layers of the model use p = 0.

Two devices only compare when they compute the same function, and dropout masks come from device
random streams that differ between an NPU and a GPU. So while the tasks ``statistics`` and
``tensor`` run, every dropout module of the given model gets ``p = 0`` (logged once), and its own
``p`` comes back when the debugger finishes. Calls of ``torch.nn.functional.dropout`` made outside a
dropout module are left alone: their ``p`` is the caller's argument, not a setting we may change.
"""

from __future__ import annotations

import torch

from msprobe.core.log import logger

_DROPOUT_TYPES = (torch.nn.modules.dropout._DropoutNd,)


class DropoutOff:
    """Sets ``p = 0`` on a model's dropout modules and restores it later."""

    def __init__(self) -> None:
        self._saved: dict[torch.nn.Module, float] = {}

    def apply(self, model: torch.nn.Module) -> None:
        changed = [m for m in model.modules() if isinstance(m, _DROPOUT_TYPES) and m not in self._saved and m.p]
        for module in changed:
            self._saved[module] = module.p
            module.p = 0.0
        if changed:
            logger.info(
                f"dropout probability set to 0 in {len(changed)} dropout module(s) while dumping, so that "
                "runs on two devices can be compared; it is restored when the debugger finishes"
            )

    def restore(self) -> None:
        for module, p in self._saved.items():
            module.p = p
        self._saved.clear()
