"""``enable_dataloader`` (deprecated): let the DataLoader drive start/stop/step.

Each batch taken from any ``torch.utils.data.DataLoader`` closes the previous step
(``stop`` + ``step``) and starts the next one, so a script needs no debugger calls in its loop. It
is kept for configurations written for 1.1.1 and logs a deprecation warning: with several data
loaders, or in distributed jobs where ranks fetch batches at different times, explicit
``start``/``stop``/``step`` calls are the only reliable way. Unlike 1.1.1 we never exit the user's
process after the last selected step: the debugger finishes and training goes on.
"""

from __future__ import annotations

from typing import Any

from torch.utils.data import dataloader

from msprobe.core.services.handles import Handle, patch_attribute


def install_dataloader_steps(debugger: Any) -> Handle:
    """Patch ``_BaseDataLoaderIter.__next__`` so that each batch steps ``debugger``; the handle restores it."""
    original = dataloader._BaseDataLoaderIter.__next__
    started = False

    def advance() -> None:
        nonlocal started
        if started:
            debugger.stop()
            debugger.step()
        started = True
        debugger.start()

    def __next__(iterator: Any) -> Any:
        advance()
        return original(iterator)

    return patch_attribute(dataloader._BaseDataLoaderIter, "__next__", __next__)

