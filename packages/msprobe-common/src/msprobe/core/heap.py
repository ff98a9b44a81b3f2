"""Keep the garbage collector's full collections off the user's heap while msprobe captures.

Every captured call allocates some Python objects (its call, records, hooks); enough of them surviving
young collections makes CPython run a full collection, which walks every object of the process — a
framework and a model are hundreds of thousands of them, 0.1–0.3 s per walk measured here. Those walks
are the tool's cost paid by the training step: on a model of tiny ops they were about a third of the
debugger's time per call.

While capture is on, :class:`FrozenHeap` moves the objects that existed before it to the collector's
permanent generation (:func:`gc.freeze`), so a collection walks only what was created since; at stop they
go back to the oldest generation (:func:`gc.unfreeze`), where the next full collection finds them as it
would have. What changes for the user's program: cyclic garbage among objects older than ``start()``
is reclaimed after ``stop()`` rather than during the step. Nothing is reclaimed that would not have
been, and no number of the run changes.

A process that uses :func:`gc.freeze` itself (a non-zero freeze count at start) or runs with the
collector disabled is left alone: unfreezing would undo its own freeze.
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
