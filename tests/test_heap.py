"""Full garbage collections between reconciles (controller/heap.py), made by the controller's loop."""
from __future__ import annotations

import gc
import weakref

import pytest

from controller import heap
from controller.loop import Loop


@pytest.fixture
def thresholds():
    saved = gc.get_threshold()
    yield
    gc.set_threshold(*saved)


class Counting:
    """A reconciler that notes, at each reconcile, how many full collections the process has made so far."""

    def __init__(self):
        self.seen: list[int] = []

    def reconcile(self, now, deadline=None) -> None:
        self.seen.append(gc.get_stats()[2]["collections"])

    def flush(self) -> None:
        pass

    def took_lead(self) -> None:
        pass

    def let_go(self) -> None:
        pass


class Leading:
    def try_acquire_or_renew(self) -> bool:
        return True

    def release(self) -> None:
        pass


class Node:
    pass


def test_the_loop_makes_the_full_collection_after_each_reconcile(thresholds):
    r = Counting()
    loop = Loop(r, Leading(), interval=0.0)  # type: ignore[arg-type]  # only reconcile, flush and took_lead are called
    loop.run(once=True)
    assert gc.get_threshold()[2] == heap.FULL_COLLECTION_EVERY  # the interpreter's own ones made rare
    assert gc.get_stats()[2]["collections"] == r.seen[0] + 1  # one, after the reconcile
    cycle = Node()
    cycle.me = cycle  # type: ignore[attr-defined]  # garbage only a collection frees
    alive = weakref.ref(cycle)
    del cycle
    took = heap.collect()
    assert alive() is None and 0.0 <= took < 60.0  # what it returns: how long it took, in seconds
