"""Keep the garbage collector's full collections off the user's heap while msprobe captures.

Objects a captured call allocates make CPython run full collections, each a walk of every object of the
process (0.1–0.3 s with a framework and a model loaded): the tool's cost paid by the training step. While
capture is on, :class:`FrozenHeap` moves the objects older than ``start()`` to the permanent generation
(:func:`gc.freeze`) and gives them back at stop (:func:`gc.unfreeze`), so cyclic garbage among them is
reclaimed after ``stop()`` rather than during the step, and no number changes. A process that froze objects
itself, or disabled the collector, is left alone. Measured:
docs/performance.md#round-2-2026-12-03-later-entries-as-text-old-objects-out-of-the-collectors-walks.
"""

from __future__ import annotations

import gc


class FrozenHeap:
    """:meth:`freeze` at the start of a capture window, :meth:`thaw` at its end (both idempotent)."""

    def __init__(self) -> None:
        self._frozen = False

    def freeze(self) -> None:
        if not self._frozen and gc.isenabled() and gc.get_freeze_count() == 0:
            gc.freeze()
            self._frozen = True

    def thaw(self) -> None:
        if self._frozen:
            self._frozen = False
            gc.unfreeze()
