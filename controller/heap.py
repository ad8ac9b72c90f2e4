"""Full garbage collections between reconciles, not inside them.

A controller of a thousand policies holds a large heap (watch caches of thousands of objects, weeks of samples per
policy, forecasts). A full collection walks all of it: 0.4-1.5 s on 2 cores at 1,000 policies
(docs/bench-controller.md). Left to the interpreter, one starts whenever enough objects have survived, which is
inside a reconcile as often as not, and the reconcile waits for it. So the process makes full collections rare on
its own (the young generations are collected as usual: they are small and quick) and the controller's loop makes one
after each reconcile, in the interval, where nothing waits for it. Garbage in reference cycles lives at most one
interval longer; everything else is freed by reference counting at once, as before.
"""
from __future__ import annotations

import gc
import time

# Automatic full collections after this many collections of the middle generation (Python's default: 10); with the
# collection after each reconcile they are a backstop for a reconcile that allocates far more than usual.
FULL_COLLECTION_EVERY = 1000


def full_collections_between_reconciles() -> None:
    """Make the interpreter's own full collections rare (process-wide; call once, at start-up)."""
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_COLLECTION_EVERY)


def collect() -> float:
    """A full collection now (after a reconcile); returns its seconds."""
    started = time.perf_counter()
    gc.collect()
    return time.perf_counter() - started
