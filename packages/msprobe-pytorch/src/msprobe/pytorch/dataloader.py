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


class DataLoaderSteps:
    """Patches ``_BaseDataLoaderIter.__next__`` while installed; :meth:`remove` restores it."""

    def __init__(self, debugger: Any) -> None:
        self._debugger = debugger
        self._original = dataloader._BaseDataLoaderIter.__next__
        self._started = False
        original, steps = self._original, self

        def __next__(iterator: Any) -> Any:
            steps.advance()
            return original(iterator)

        dataloader._BaseDataLoaderIter.__next__ = __next__

    def advance(self) -> None:
        if self._started:
            self._debugger.stop()
            self._debugger.step()
        self._started = True
        self._debugger.start()

    def remove(self) -> None:
        dataloader._BaseDataLoaderIter.__next__ = self._original
