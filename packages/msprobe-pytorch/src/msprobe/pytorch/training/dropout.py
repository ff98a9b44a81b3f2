"""The dropout rule (docs/pytorch/dump.md#dropout): while dumping, dropout layers of the model use p = 0.

Two devices only compare when they compute the same function, and dropout masks come from device
random streams that differ between an NPU and a GPU. So while the tasks ``statistics`` and
``tensor`` run, every dropout module of the given model gets ``p = 0`` (logged once), and its own
``p`` comes back when the debugger finishes. Calls of ``torch.nn.functional.dropout`` made outside a
dropout module are left alone: their ``p`` is the caller's argument, not a setting we may change.
"""

from __future__ import annotations

import torch

from msprobe.core.services.handles import Handle, patch_attributes
from msprobe.core.services.log import logger

_DROPOUT_TYPES = (torch.nn.modules.dropout._DropoutNd,)


def zero_dropout(model: torch.nn.Module) -> Handle:
    """Set ``p = 0`` on ``model``'s dropout modules (those not at 0 already); the handle restores each ``p``."""
    changed = [m for m in model.modules() if isinstance(m, _DROPOUT_TYPES) and m.p]
    handle = patch_attributes([(module, "p", 0.0) for module in changed])
    if changed:
        logger.info(
            f"dropout probability set to 0 in {len(changed)} dropout module(s) while dumping, so that "
            "runs on two devices can be compared; it is restored when the debugger finishes"
        )
    return handle

