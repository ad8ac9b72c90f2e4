"""The errors every layer raises, and what each means to the person who ran the command.

A `HeadroomError` carries the exit status the CLI returns for it: 2 when the request itself is wrong
(a bad flag, file or configuration: nothing was done), 1 when the work failed (a server down, data
that cannot be used).
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class HeadroomError(Exception):
    """The work failed; the message says what and why."""

    exit_status = 1


class BadRequest(HeadroomError):
    """The request cannot be done as given; nothing was done."""

    exit_status = 2


class ConfigError(BadRequest, ValueError):
    """The configuration is invalid; `errors` lists 'field.path: message' lines, `source` the file (or the flags)
    they are in: None where the raiser cannot know it (the embedded cluster, given its settings), the CLI names it."""

    def __init__(self, source: str | None, errors: list[str]):
        self.source, self.errors = source, errors
        super().__init__(f"invalid configuration ({source or 'the configuration'}):\n" +
                         "\n".join(f"  {e}" for e in errors))


def field_path(parts: Iterable[str | int]) -> str:
    """A field's path as every error names it: `run.policies[0].history_file`, `spec.trainingClusterQueues[1]` (a
    list's item by its index in brackets, as the docs and the controller's conditions write it)."""
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts).removeprefix(".") or "(top level)"


class ClusterError(HeadroomError):
    """The cluster refused a request, or could not be reached after retries."""

    def __init__(self, message: str, status: int = 0, reason: str = "", body: Any = None):
        super().__init__(message)
        self.status, self.reason, self.body = status, reason, body


class NotFound(ClusterError):
    pass


class NotInstalled(ClusterError):
    """The API server does not serve an API headroom needs (Kueue's, or headroom's own CRD): the message names what
    to install."""


class Unauthorized(ClusterError):
    """The API server does not accept this client's credentials (401): nothing it asks will be answered."""


class StaleCache(ClusterError):
    """A watch cache has heard nothing from the API server for longer than its bound (a halted host: no reset, the
    packets just stop) and could not list again: what it holds may be minutes old, so nothing is read from it."""


class Conflict(ClusterError):
    pass


class Invalid(ClusterError):
    """422: the object failed the server's (schema) validation."""


def interrupt_inside(exc: BaseException) -> BaseException | None:
    """The interrupt (Ctrl-C, or SIGTERM as `headroom train` raises it) that `exc` is or wraps, if any.

    A library may turn an exception raised inside it into its own error: numpy reports a KeyboardInterrupt
    that lands while it parses a buffer's format (scikit-learn's boosting has it do so on every fit) as
    ValueError "... is not a valid PEP 3118 buffer format string", the interrupt as its cause. Caught where a
    model's failure is caught, the stop would be lost and the work would go on: raise this instead.
    """
    seen: set[int] = set()
    inner: BaseException | None = exc
    while inner is not None and id(inner) not in seen:
        if not isinstance(inner, Exception):
            return inner
        seen.add(id(inner))
        inner = inner.__cause__ or inner.__context__
    return None


def raise_interrupt_inside(exc: BaseException) -> None:
    """Raise the interrupt that `exc` is or wraps, if any: where a failure of a model or a library is caught."""
    if (stop := interrupt_inside(exc)) is not None:
        raise stop from None
