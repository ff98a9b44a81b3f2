"""FrozenHeap: objects older than a capture window are out of the collector's walks during it, and back
after it; a process that freezes objects itself is left alone."""

from __future__ import annotations

import gc
import weakref

import pytest

from msprobe.core.services.heap import FrozenHeap


@pytest.fixture(autouse=True)
def thawed():
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_window_freezes_what_existed_and_gives_it_back():
    before = [object() for _ in range(10)]  # noqa: F841 - alive across the window
    heap = FrozenHeap()
    heap.freeze()
    frozen = gc.get_freeze_count()
    assert frozen > 0
    heap.freeze()  # idempotent
    assert gc.get_freeze_count() == frozen
    heap.thaw()
    assert gc.get_freeze_count() == 0
    heap.thaw()
    assert gc.get_freeze_count() == 0


def test_cyclic_garbage_older_than_the_window_is_reclaimed_after_it():
    class Node:
        pass

    node = Node()
    node.me = node
    alive = weakref.ref(node)
    heap = FrozenHeap()
    heap.freeze()
    del node
    gc.collect()
    assert alive() is not None  # frozen: the window's collections do not walk it
    heap.thaw()
    gc.collect()
    assert alive() is None


def test_a_process_that_froze_objects_itself_is_left_alone():
    # Frozen objects still die by reference counting, so the count can only shrink by itself: a freeze of
    # ours would grow it, an unfreeze of ours would empty it.
    gc.freeze()
    own = gc.get_freeze_count()
    heap = FrozenHeap()
    heap.freeze()
    assert 0 < gc.get_freeze_count() <= own
    heap.thaw()
    assert 0 < gc.get_freeze_count() <= own


def test_disabled_collector_is_left_alone():
    gc.disable()
    try:
        heap = FrozenHeap()
        heap.freeze()
        assert gc.get_freeze_count() == 0
        heap.thaw()
    finally:
        gc.enable()
