"""A deadline carried with the work, as a Go context carries one to every request made for it (client-go,
controller-runtime): whoever bounds the work sets it (the controller's loop, once per reconcile; the fence, once per
write), and the one module that waits on the network (adapters.kube) reads it: no attempt waits past it, none starts
after it. It lives in a context variable, so the callers between the two need not pass it along, and a thread sees
only the deadline set in that thread."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_DEADLINE: ContextVar[float | None] = ContextVar("deadline", default=None)


def earliest(*deadlines: float | None) -> float | None:
    """The earliest of the deadlines given (None: no deadline)."""
    given = [d for d in deadlines if d is not None]
    return min(given) if given else None


def current() -> float | None:
    """The deadline of the work under way in this thread (time.monotonic()); None: none."""
    return _DEADLINE.get()


@contextmanager
def within(deadline: float | None) -> Iterator[None]:
    """Work in the block ends by `deadline` (time.monotonic(); None: no new bound), and by any deadline already set
    around it: the earlier holds."""
    token = _DEADLINE.set(earliest(_DEADLINE.get(), deadline))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def postpone(seconds: float) -> None:
    """The deadline of the work under way, `seconds` later (till the end of the `within` block that set it): for time
    it spent on what waits on no server, which is not the network's to lose (`headroom run --once` fits its forecasts
    within its one reconcile)."""
    deadline = _DEADLINE.get()
    if deadline is not None:
        _DEADLINE.set(deadline + seconds)
