"""A deadline carried with the work, as a Go context carries one to every request made for it (client-go,
controller-runtime): whoever bounds the work sets it (the controller's loop, once per reconcile; the fence, once per
write or action), and the adapters that wait on the network (adapters.kube, adapters.prometheus) read it: no attempt
waits past it, none starts after it. It lives in a context variable, so the callers between the two need not pass it
along, and a thread sees only the deadline set in that thread."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

# a deadline (time.monotonic()), None (no bound), or its owner's function giving it when asked: a deadline its owner
# moves (the reconcile's, later by the time its fits took) is read where it is kept, never copied to be moved twice
Bound = float | Callable[[], float | None] | None
_BOUNDS: ContextVar[tuple[Bound, ...]] = ContextVar("deadline", default=())


def earliest(*deadlines: float | None) -> float | None:
    """The earliest of the deadlines given (None: no deadline)."""
    given = [d for d in deadlines if d is not None]
    return min(given) if given else None


def current() -> float | None:
    """The deadline of the work under way in this thread (time.monotonic()); None: none."""
    return earliest(*(b() if callable(b) else b for b in _BOUNDS.get()))


@contextmanager
def within(deadline: Bound) -> Iterator[None]:
    """Work in the block ends by `deadline` (time.monotonic(), or a function giving it as it is now; None: no new
    bound), and by any deadline already set around it: the earlier holds."""
    token = _BOUNDS.set((*_BOUNDS.get(), deadline))
    try:
        yield
    finally:
        _BOUNDS.reset(token)
