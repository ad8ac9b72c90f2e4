"""Prometheus as a history source: the only module that imports prometheus_api_client.

Range queries are split into chunks under the server's 11,000-points-per-series
limit, each chunk retried with back-off, and the chunks stitched into one
series. A chunk that returns no samples is a gap (NaN), never zero. A read made
for work with a deadline (core.deadline: a reconcile's) ends by it: no attempt
waits past it, none starts after it, no back-off sleeps past it; a read cut
there fails whole (DeadlinePassed), never a partial series. The controller's
reader (PrometheusDemand) is cut so at once when the controller is asked to
stop, the reads under way too.
"""
from __future__ import annotations

import ast
import json
import logging
import re
import socket
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import TracebackType
from urllib.parse import urlsplit

import numpy as np
import pandas as pd
import requests
from prometheus_api_client import PrometheusApiClientException, PrometheusConnect
from requests.adapters import HTTPAdapter
from urllib3 import BaseHTTPResponse
from urllib3.connection import HTTPConnection
from urllib3.connectionpool import ConnectionPool, HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import ConnectTimeoutError, InsecureRequestWarning, MaxRetryError, ReadTimeoutError
from urllib3.util.retry import Retry
from urllib3.util.timeout import Timeout

from core.deadline import current as current_deadline
from core.objects import cut
from core.settings import PrometheusServer, shown_url
from forecast.history import MAX_POINTS as HISTORY_POINTS

log = logging.getLogger(__name__)

MAX_POINTS = 11_000
# Connections a client keeps open for reuse: more than the controller's concurrent reads (the reconcile's 8 readers
# and the hourly work's one); beyond it a connection is opened and closed again
CONNECTIONS = 16
# PromQL characters in one request of several policies' reads: its URL stays under the 8 KiB many proxies accept.
# And its points: a request of many series as large as one chunk (whole lookbacks are read one to a request)
BATCH_CHARACTERS = 6000
TAG = "headroom_read"  # the label that tells a batched request's series apart


class PrometheusError(RuntimeError):
    """Prometheus is unreachable, refused the query, or returned something unusable."""


CUT = "cut at its deadline: Prometheus answered too slowly, or not at all, in the time the reconcile had"
STOPPED = "cut: the controller is stopping"
QUOTED_CHARS = 200  # of a query quoted in an error, which an Event carries (the whole query is the policy's spec)


class DeadlinePassed(PrometheusError):
    """A read cut at the deadline of the work it was made for (core.deadline): Prometheus answered too slowly, or
    not at all, in the time that work had; or cut by the controller's stop (`why`). Not the query's fault: it is not
    marked too slow (read_together)."""

    def __init__(self, message: str, why: str = CUT):
        super().__init__(message)
        self.why = why


# `warnings`: those of this thread's last answer (_keep_warnings); `cut`: why its retries were stopped (CUT, STOPPED;
# None: they were not)
_answer = threading.local()


def _keep_warnings(response: requests.Response, *args: object, **kwargs: object) -> None:
    """Keep a 200 answer's `warnings`, which the client drops with all but the result: Prometheus' word that the
    answer is partial (a remote-read store, or a store behind Thanos, that failed)."""
    if response.status_code == 200 and b'"warnings"' in response.content:
        _answer.warnings = response.json().get("warnings") or []


def chunk_ranges(start: datetime, end: datetime, step: pd.Timedelta,
                 max_points: int = MAX_POINTS) -> list[tuple[pd.Timestamp, pd.Timestamp]]:
    """Split [start, end] into consecutive ranges of at most `max_points` steps each.

    Range bounds are inclusive on the server, so a chunk ends one step before
    the next begins: no sample is fetched twice or skipped.
    """
    start, end, step = pd.Timestamp(start), pd.Timestamp(end), pd.Timedelta(step)
    if end < start:
        raise ValueError(f"end {end} is before start {start}")
    span = step * (max_points - 1)
    ranges = []
    while start <= end:
        stop = min(start + span, end)
        ranges.append((start, stop))
        start = stop + step
    return ranges


def _many_series(result: list[dict], query: str) -> PrometheusError:
    """The query (its start: the whole is the policy's spec.query) and the fix first, then the labels its series
    differ in (what to aggregate away), a few series' each cut: an Event keeps 1 kB of this, after its reason and
    before the fallback it causes."""
    metrics = [r.get("metric", {}) for r in result]
    differ = sorted(k for k in {k for m in metrics for k in m} if len({m.get(k) for m in metrics}) > 1)
    shown = ", ".join(cut(str({k: m.get(k) for k in differ}), QUOTED_CHARS // 2) for m in metrics[:3])
    return PrometheusError(f"query {cut(repr(query), QUOTED_CHARS)} returned {len(result)} series: refused, "
                           "aggregate it to one, e.g. sum(...) (a series whose labels change, e.g. a restarted pod's, "
                           "is two)" + (f"; where they differ: {shown}" if differ else ""))


def parse_matrix(result: list[dict], query: str) -> pd.Series:
    """A range-query result (one series) -> float series on a UTC index."""
    if not result:
        return pd.Series([], index=pd.DatetimeIndex([], tz="UTC", name="timestamp"), dtype=float, name="value")
    if len(result) > 1:
        raise _many_series(result, query)
    values = result[0].get("values", [])
    stamps = pd.to_datetime([float(ts) for ts, _ in values], unit="s", utc=True)
    # Prometheus encodes values as strings, including "NaN" and "+Inf". An infinity (a division by zero) is no
    # demand: a gap, as NaN is, never a policy failed for one sample; counted, for the CLI to say
    numbers = np.array([float(v) for _, v in values], dtype=float)
    infinite = np.isinf(numbers)
    numbers[infinite] = np.nan
    series = pd.Series(numbers, index=pd.DatetimeIndex(stamps, name="timestamp"), name="value")
    series.attrs["infinite"] = int(infinite.sum())
    return series


class TokenFileError(RuntimeError):
    """The bearer token file cannot be read as a token (not a ValueError: that would read as an answer not JSON)."""


def read_token(path: Path) -> str:
    """The bearer token in `path`: one line of text (a binary file or several lines were sent, and failed as an
    answer that is not Prometheus' JSON)."""
    try:
        token = path.read_text(encoding="utf-8").strip()
    except UnicodeDecodeError as exc:
        raise TokenFileError(f"bearer_token_file {path}: not UTF-8 text (byte {exc.start}): a token is expected") \
            from None
    except OSError as exc:
        raise TokenFileError(f"bearer_token_file {path}: cannot read it: {exc.strerror or exc}") from None
    if not token or not token.isprintable() or " " in token:
        raise TokenFileError(f"bearer_token_file {path}: holds {len(token.splitlines())} line(s), with spaces or "
                             "control characters: a bearer token is one word" if token else
                             f"bearer_token_file {path}: is empty: a bearer token is expected")
    return token


def _bearer(token: Callable[[], str]) -> Callable[[requests.PreparedRequest], requests.PreparedRequest]:
    """Requests auth sending `token()` as the bearer token, read at each request (a mounted service-account token
    is rotated in place)."""
    def auth(request: requests.PreparedRequest) -> requests.PreparedRequest:
        request.headers["Authorization"] = f"Bearer {token()}"
        return request
    return auth


def _left(timeout: float | None, deadline: float) -> float:
    """`timeout`, shortened to the time left before `deadline` (at least a millisecond: 0 is no timeout at all to
    a socket)."""
    left = max(deadline - time.monotonic(), 0.001)
    return left if timeout is None else min(timeout, left)


class _Until(Timeout):
    """A request's timeout that ends each attempt by `deadline` too: urllib3 clones it for every attempt, retries
    included, and asks for the connect and read timeouts as each begins."""

    def __init__(self, timeout: float | None, deadline: float):
        super().__init__(connect=timeout, read=timeout)
        self.timeout, self.deadline = timeout, deadline

    def clone(self) -> _Until:
        return _Until(self.timeout, self.deadline)

    @property
    def connect_timeout(self) -> float:
        return _left(self.timeout, self.deadline)

    @property
    def read_timeout(self) -> float:
        return _left(self.timeout, self.deadline)


class _Adapter(HTTPAdapter):
    """Each request made for work with a deadline (core.deadline, read in the thread that asks) ends by it. Once
    `stopping` is set none is sent, and the connections are cut (cut_when_stopped): a read under way on a halted
    Prometheus ends at once, not at its timeout."""

    def __init__(self, stopping: threading.Event | None = None, **kwargs):
        self.stopping = stopping
        self.connections: weakref.WeakSet[HTTPConnection] = weakref.WeakSet()  # each one made (cut_when_stopped)
        super().__init__(**kwargs)

    def init_poolmanager(self, *args, **kwargs) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _kept(HTTPConnectionPool, self.connections),
                                                   "https": _kept(HTTPSConnectionPool, self.connections)}

    def cut_when_stopped(self) -> None:
        """Wait for `stopping`, then cut every connection: a read blocked on one ends (its retries are not made)."""
        assert self.stopping is not None
        self.stopping.wait()
        for connection in list(self.connections):
            sock = connection.sock  # once: another thread may close the connection meanwhile
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:  # closed meanwhile
                    pass

    def send(self, request, stream=False, timeout=None, verify=True, cert=None, proxies=None):
        if self.stopping is not None and self.stopping.is_set():
            _answer.cut = STOPPED
            raise requests.ConnectionError("not sent: the controller is stopping")
        deadline = current_deadline()
        if deadline is not None and not isinstance(timeout, tuple | Timeout):
            timeout = _Until(timeout, deadline)
        return super().send(request, stream=stream, timeout=timeout, verify=verify, cert=cert, proxies=proxies)


def _kept(pool: type[HTTPConnectionPool], connections: weakref.WeakSet) -> type[HTTPConnectionPool]:
    """`pool`, each connection it makes added to `connections`."""
    class Kept(pool):  # type: ignore[valid-type,misc]
        def _new_conn(self):
            connection = super()._new_conn()
            connections.add(connection)
            return connection
    Kept.__name__ = Kept.__qualname__ = pool.__name__  # urllib3's errors name the pool: "HTTPConnectionPool(host=..."
    return Kept


class _Retry(Retry):
    """Retry, but not a query that ran out of time: asked again, it would again, each time as long, on a server
    already too slow (the defaults' 3 retries of a 30 s read timeout: two minutes to fail a read). Out of time: the
    client's read timeout, or the server's --query.timeout, a 503 with a JSON error (a server not ready yet answers
    503 in plain text, and is asked again). Nor one whose back-off would end past the deadline of the work it is
    made for (core.deadline). Nor any once `stopping` is set."""

    def __init__(self, *args, stopping: threading.Event | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.stopping = stopping

    def new(self, **kwargs) -> _Retry:
        again = super().new(**kwargs)
        again.stopping = self.stopping
        return again

    def increment(self, method: str | None = None, url: str | None = None, response: BaseHTTPResponse | None = None,
                  error: Exception | None = None, _pool: ConnectionPool | None = None,
                  _stacktrace: TracebackType | None = None) -> _Retry:
        out_of_time = isinstance(error, ReadTimeoutError) or (
            response is not None and response.status == 503 and "json" in response.headers.get("Content-Type", ""))
        if out_of_time and _pool is not None:  # (urllib3 always gives the pool)
            raise MaxRetryError(_pool, url, error)  # with raise_on_status=False, a response comes back as it is
        if self.stopping is not None and self.stopping.is_set() and _pool is not None:
            _answer.cut = STOPPED
            raise MaxRetryError(_pool, url, error)
        again = super().increment(method, url, response, error, _pool, _stacktrace)
        deadline = current_deadline()
        if deadline is not None and _pool is not None:
            wait = (again.get_retry_after(response) if response is not None and again.respect_retry_after_header
                    else None) or again.get_backoff_time()
            if time.monotonic() + wait >= deadline:
                _answer.cut = CUT
                raise MaxRetryError(_pool, url, error)
        return again


def connect(server: PrometheusServer, stopping: threading.Event | None = None) -> PrometheusConnect:
    """A client for `server` whose one session keeps up to CONNECTIONS connections open for reuse, each request
    retried with back-off on a refused connection or a server error, the bearer token file read at each request,
    each request ending by the deadline of the work it is made for (core.deadline), if it has one. Once `stopping`
    is set, no request is sent or retried and those under way are cut."""
    token_file = server.bearer_token_file
    # raise_on_status=False: the last answer of a failing status comes back, so its error ("query timed out in
    # expression evaluation") is told, and a query too slow for the server is told from one that fails otherwise
    retry = _Retry(total=server.retries, backoff_factor=0.5, status_forcelist=(500, 502, 503, 504),
                  allowed_methods=("GET",), raise_on_status=False, stopping=stopping)
    session = requests.Session()
    session.verify = False if server.insecure_skip_verify else (str(server.ca_file) if server.ca_file else True)
    if server.insecure_skip_verify:  # chosen in the configuration: urllib3 warned at every request, for this host only
        warnings.filterwarnings("ignore", f"Unverified HTTPS request is being made to host "
                                f"'{re.escape(str(urlsplit(server.url).hostname))}'", InsecureRequestWarning)
    url = server.url.rstrip("/")  # the client appends "/api/v1/...": a doubled slash is a redirect each request
    client = PrometheusConnect(url=url, auth=_bearer(lambda: read_token(token_file)) if token_file
                               else None, retry=retry, session=session, timeout=server.timeout_seconds)
    adapter = _Adapter(stopping, max_retries=retry, pool_maxsize=CONNECTIONS)
    session.mount(url, adapter)  # replaces the client's (10)
    if stopping is not None:
        threading.Thread(target=adapter.cut_when_stopped, name="headroom-prometheus-cut", daemon=True).start()
    session.hooks["response"].append(_keep_warnings)
    return client


# What an answer every query gets alike means (the status is all a proxy's or the server's plain-text page says)
CREDENTIALS_REFUSED = "the server refused the credentials (bearer_token_file, or user:password in the URL)"
REFUSALS = {"401": CREDENTIALS_REFUSED, "403": CREDENTIALS_REFUSED,
            "404": "no Prometheus API under this URL: is the server's path prefix (--web.route-prefix) in it?"}
# a 200 answer that is no JSON ("Expecting value: line 1 column 1"): not Prometheus that answered
NOT_JSON = "the answer is not Prometheus' JSON: another service at this URL, or a proxy's login page?"
# no connection made (refused, a host name that does not resolve, a connect timeout): no server answered at all
UNREACHED = "nothing answered at this URL: is Prometheus running there, and reachable from here?"


def _failure(client: PrometheusConnect, query: str, lo: pd.Timestamp, hi: pd.Timestamp,
             exc: BaseException | None, why_cut: str | None = None) -> PrometheusError:
    """`why_cut`: why the read was cut (CUT, STOPPED: a DeadlinePassed); None: it failed. What it means before the
    client's error, whose URL repeats the query: an Event keeps 1 kB of this, after its reason."""
    status = str(exc).removeprefix("HTTP Status Code ")[:3] if isinstance(exc, PrometheusApiClientException) else ""
    meaning = why_cut or REFUSALS.get(status) or (NOT_JSON if isinstance(exc, ValueError) else "") or \
        (UNREACHED if _unreached(exc) else "")
    where = (f"Prometheus at {shown_url(client.url)} failed for {cut(repr(query), QUOTED_CHARS)} "
             f"[{lo.isoformat()} .. {hi.isoformat()}]" + (f" ({meaning})" if meaning else "") + f": {_said(exc)}")
    return DeadlinePassed(where, why_cut) if why_cut else PrometheusError(where)


# The client's error for an answer of a failing status: the status, then the answer's bytes as Python writes them
_STATUS = re.compile(r"HTTP Status Code (\d{3}) \((b'.*'|b\".*\")\)", re.DOTALL)


def _said(exc: BaseException | None) -> str:
    """The client's error, and of an answer with Prometheus' error JSON what it says: "HTTP Status Code 422,
    execution: query processing would load too many samples into memory", not the answer's bytes as Python writes
    them (b'{"status":"error",...\\"string\\"...}'), its quotes escaped twice."""
    match = _STATUS.fullmatch(str(exc))
    if match:
        try:
            answer = json.loads(ast.literal_eval(match[2]))
            return f"HTTP Status Code {match[1]}, {answer['errorType']}: {answer['error']}"
        except (ValueError, SyntaxError, TypeError, KeyError):  # not Prometheus' JSON (a proxy's page)
            pass
    return str(exc)


def _unreached(exc: BaseException | None) -> bool:
    """No connection was made: the retries' last error (requests wraps urllib3's MaxRetryError) is a connect error."""
    reason = getattr(exc.args[0], "reason", None) if isinstance(exc, requests.ConnectionError) and exc.args else None
    return isinstance(reason, ConnectTimeoutError)


def _query_range(client: PrometheusConnect, query: str, lo: pd.Timestamp, hi: pd.Timestamp,
                 step: pd.Timedelta) -> tuple[list[dict], list[str]]:
    """The answer's result and its warnings; DeadlinePassed if the deadline of the work it is made for
    (core.deadline) passed first, or had passed (not sent)."""
    _answer.warnings, _answer.cut = [], None
    deadline = current_deadline()
    try:
        if deadline is not None and time.monotonic() >= deadline:
            raise TimeoutError("not sent")
        result = client.custom_query_range(query, start_time=lo.to_pydatetime(), end_time=hi.to_pydatetime(),
                                           step=f"{int(step.total_seconds())}s")
    except Exception as exc:  # the client raises requests, urllib3 and its own errors
        cut = _answer.cut or (CUT if deadline is not None and time.monotonic() >= deadline else None)
        raise _failure(client, query, lo, hi, exc, cut) from exc
    return result, _answer.warnings


def _refused(exc: PrometheusError) -> bool:
    """The server answered that it cannot run the query: HTTP 400 (it does not parse) or 422 (it fails to evaluate,
    or loads more than --query.max-samples). Not 401, 403 or 404 (a wrong credential or path prefix), which every
    query gets alike: asking again for each half of a batch would only ask again."""
    cause = exc.__cause__
    return isinstance(cause, PrometheusApiClientException) and \
        str(cause).startswith(("HTTP Status Code 400", "HTTP Status Code 422"))


def _too_slow(exc: PrometheusError) -> bool:
    """The query ran out of time: the server's --query.timeout (503, errorType timeout) or the client's read
    timeout (not a read cut at its deadline, which says nothing of the query)."""
    cause = exc.__cause__
    if isinstance(exc, DeadlinePassed):
        return False
    if isinstance(cause, PrometheusApiClientException):
        return str(cause).startswith("HTTP Status Code 503") and '"errorType":"timeout"' in str(cause)
    return isinstance(cause, requests.ReadTimeout) or "Read timed out" in str(cause)


def on_step_grid(start: datetime, end: datetime, step: pd.Timedelta) -> tuple[pd.Timestamp, pd.Timestamp]:
    """[start, end] narrowed to whole multiples of `step` since the epoch. The server evaluates a range query at
    start, start + step, ...; the client sends whole seconds; a controller reads at wall-clock times with fractions
    of a second. On this grid every read's samples fall where every other read's do, and where the server put them
    (a grid laid from the unrounded start had an empty twin beside each sample: half the samples 'missing'). In UTC:
    a time given with an offset (+05:45) was rounded on its own wall clock, off the grid by the offset."""
    return pd.Timestamp(start).tz_convert("UTC").ceil(step), pd.Timestamp(end).tz_convert("UTC").floor(step)


def _on_grid(series: pd.Series, start: datetime, end: datetime, step: pd.Timedelta) -> pd.Series:
    """Steps the server had no sample for are gaps: put back as NaN."""
    full = pd.date_range(pd.Timestamp(start), pd.Timestamp(end), freq=step)
    return series.reindex(series.index.union(full)).rename("value")


def read_range(client: PrometheusConnect, query: str, start: datetime, end: datetime, step: str) -> pd.Series:
    """`query` over [start, end] at `step` on `client`'s server (on_step_grid), in chunks under MAX_POINTS; steps
    without a sample are NaN; the server's warnings that its answer is partial in attrs["warnings"], each once, and
    how many infinite values were read as NaN in attrs["infinite"]."""
    step_delta = pd.Timedelta(step)
    start, end = on_step_grid(start, end, step_delta)
    if end < start:  # no step of the grid inside: nothing to read
        return parse_matrix([], query)
    points = (end - start) / step_delta + 1
    if points > HISTORY_POINTS:  # a lookback typo (2000d for 20d): hours of requests, then a grid past memory
        raise PrometheusError(f"{query!r} over [{start.isoformat()} .. {end.isoformat()}] at step {step} is "
                              f"{points:.3g} points, over the {HISTORY_POINTS:g} a history may have: a shorter "
                              "lookback or a longer step")
    # each series' samples from every chunk joined before parse_matrix counts the series: a series in one chunk
    # and another in the next (a pod restarted under a new name) are two, as they are read in one request
    series: dict[tuple[tuple[str, str], ...], dict] = {}
    warned: dict[str, None] = {}  # each chunk's answer repeats a store's failure: said once
    for lo, hi in chunk_ranges(start, end, step_delta):  # consecutive, not overlapping: no sample twice
        result, said = _query_range(client, query, lo, hi, step_delta)
        warned.update(dict.fromkeys(said))
        for found in result:
            labels = found.get("metric", {})
            series.setdefault(tuple(sorted(labels.items())), {"metric": labels, "values": []})["values"] += \
                found.get("values", [])
        if len(series) > 1:  # refused now: the chunks after it (a thousand pods' series, each) would only add to it
            raise _many_series(list(series.values()), query)
    read = _on_grid(parse_matrix(list(series.values()), query), start, end, step_delta)
    read.attrs["warnings"] = list(warned)
    read.attrs["series"] = len(series)  # 0: the query matched nothing, which is not a series of missing samples
    return read


def _batches(queries: Sequence[str], points: int) -> list[list[int]]:
    """The queries' indices in runs of at most BATCH_CHARACTERS of PromQL and MAX_POINTS points, each query
    `points` long (a longer query, or a longer range, alone)."""
    out: list[list[int]] = []
    size, most = BATCH_CHARACTERS, max(MAX_POINTS // max(points, 1), 1)
    for i, q in enumerate(queries):
        cost = len(q) + 50  # the label_replace, the line breaks and "or" around it
        if size + cost > BATCH_CHARACTERS or len(out[-1]) >= most:
            out.append([])
            size = 0
        out[-1].append(i)
        size += cost
    return out


def read_together(client: PrometheusConnect, queries: Sequence[str], start: datetime, end: datetime,
                  step: str, slow: set[str] | None = None) -> list[pd.Series | PrometheusError]:
    """read_range of each of `queries` over one [start, end], several in a request: joined by `or`, each tagged by
    label_replace with its place, the result split by the tag (a thousand policies' reads a minute in tens of
    requests, not a thousand). A batch the server refuses (a query in it does not parse, or cannot be tagged) is
    halved until the query fails alone. A batch too slow for the server is halved, one request a half, down the
    half that is still too slow, so the query that is fails alone (when both halves are, the server is slow for
    every query: each fails); it is added to `slow`, whose queries are read alone. A batch that fails otherwise
    (the server unreachable or failing) fails each read as it would fail alone, without asking again; a range over
    MAX_POINTS is read alone, in chunks."""
    step_delta = pd.Timedelta(step)
    slow = set() if slow is None else slow
    out: list[pd.Series | PrometheusError] = [PrometheusError("not read")] * len(queries)
    lo, hi = on_step_grid(start, end, step_delta)  # one chunk: a batch holds at most MAX_POINTS (_batches)
    if hi < lo:  # no step of the grid inside: nothing to read
        return [parse_matrix([], q) for q in queries]

    def read(batch: list[int], after_slow: bool = False) -> bool:
        """Read `batch` into `out`; whether it was too slow. `after_slow`: its whole was, so a slow half is not
        asked again whole but narrowed, and two slow halves fail."""
        if len(batch) == 1:  # alone (a range over MAX_POINTS: in chunks)
            try:
                out[batch[0]] = read_range(client, queries[batch[0]], start, end, step)
            except PrometheusError as exc:
                out[batch[0]] = exc
                if _too_slow(exc):
                    slow.add(queries[batch[0]])
                    return True
            return False
        # each query on lines of its own: a comment in it (# to the end of the line) ends there
        joined = " or ".join(f'label_replace((\n{queries[i]}\n), "{TAG}", "{i}", "", "")' for i in batch)
        try:
            result, said = _query_range(client, joined, lo, hi, step_delta)
        except PrometheusError as exc:
            if _refused(exc):
                read(batch[:len(batch) // 2])
                read(batch[len(batch) // 2:])
                return False
            if _too_slow(exc) and not after_slow:
                narrow(batch)
                return True
            for i in batch:
                out[i] = _failure(client, queries[i], lo, hi, exc.__cause__,
                                  exc.why if isinstance(exc, DeadlinePassed) else None)
            return _too_slow(exc)
        tagged: dict[str, list[dict]] = {}
        for r in result:
            metric = dict(r.get("metric", {}))
            tagged.setdefault(metric.pop(TAG, ""), []).append({**r, "metric": metric})
        for i in batch:
            try:
                got = _on_grid(parse_matrix(tagged.get(str(i), []), queries[i]), lo, hi, step_delta)
                got.attrs["warnings"] = said  # the request's: which of its queries the failed store held is unsaid
                out[i] = got
            except PrometheusError as exc:
                out[i] = exc
        return False

    def narrow(batch: list[int]) -> None:
        """`batch` was too slow: read its halves, one request each, and narrow the one still too slow (both: the
        server is slow for all of them, and each has failed)."""
        if len(batch) > 1:
            halves = batch[:len(batch) // 2], batch[len(batch) // 2:]
            slow_halves = [half for half in halves if read(half, after_slow=True)]
            if len(slow_halves) == 1:
                narrow(slow_halves[0])

    alone = [[i] for i, q in enumerate(queries) if q in slow]
    together = [i for i, q in enumerate(queries) if q not in slow]
    for batch in alone + [[together[k] for k in b] for b in _batches([queries[i] for i in together],
                                                                       int((hi - lo) / step_delta) + 1)]:
        read(batch)
    return out


@dataclass(frozen=True)
class PrometheusSource:
    """History from a PromQL expression over [start, end) on `server`, at its step."""
    server: PrometheusServer
    query: str
    start: datetime
    end: datetime

    def fetch(self) -> pd.Series:
        # a range query's end is inclusive: the sample at `end` would begin an hour of its own, one sample long
        raw = read_range(connect(self.server), self.query, self.start, pd.Timestamp(self.end) - pd.Timedelta(1, "ns"),
                         self.server.step)
        # what prepare's errors name, as a file's path names a file (e.g. a query that returned no series)
        raw.attrs["source"] = (f"Prometheus at {shown_url(self.server.url)}, query {self.query!r} over "
                               f"[{pd.Timestamp(self.start).isoformat()} .. {pd.Timestamp(self.end).isoformat()})")
        if not raw.attrs["series"]:  # a typo in the metric reads as no series, not as a history of missing samples
            raise PrometheusError(f"{raw.attrs['source']}: the query matched no series (a misspelt metric or label, "
                                  "or a window the server holds no samples in)")
        return raw


class PrometheusDemand:
    """The controller's demand reader on a real cluster: each policy's query, from Prometheus, on one client whose
    connections every read reuses (a thousand policies are read every few minutes, 8 at a time; a client and a
    connection per read cost a quarter of a read's CPU). The reconcile's reader threads share it: urllib3's pool
    is thread-safe, and nothing else in the session changes after it is made."""

    def __init__(self, server: PrometheusServer, stopping: threading.Event | None = None):
        self.server = server
        self.client = connect(server, stopping)
        self.slow: set[str] = set()  # queries found too slow for the server: read alone, so they fail alone
        self.warned: set[tuple[str, str]] = set()  # (policy, warning) said: a failing store warns every read

    def _said(self, key: str, raw: pd.Series) -> pd.Series:
        """Log, once per policy, each warning Prometheus gave that its answer may be partial (a remote-read store,
        or one behind Thanos, that failed): the policy's forecast is fitted on what the answer held."""
        for text in raw.attrs.get("warnings", ()):
            if (key, text) not in self.warned:
                self.warned.add((key, text))
                log.warning("%s: Prometheus warned its answer may be partial: %s", key, text)
        return raw

    def read(self, key: str, query: str, start: pd.Timestamp, end: pd.Timestamp) -> pd.Series:
        raw = read_range(self.client, query, start.to_pydatetime(), end.to_pydatetime(), self.server.step)
        return self._said(key, raw[raw.index > start])

    def read_many(self, reads: Sequence[tuple[str, str, pd.Timestamp, pd.Timestamp]]
                  ) -> list[pd.Series | Exception]:
        """read() of each (key, query, start, end), the reads of one range in few requests (read_together); a
        read's error in its place."""
        out: list[pd.Series | Exception] = [PrometheusError("not read")] * len(reads)
        ranges: dict[tuple[pd.Timestamp, pd.Timestamp], list[int]] = {}
        for k, (_, _, start, end) in enumerate(reads):
            ranges.setdefault((start, end), []).append(k)
        for (start, end), places in ranges.items():
            got = read_together(self.client, [reads[k][1] for k in places], start.to_pydatetime(),
                                end.to_pydatetime(), self.server.step, self.slow)
            for k, raw in zip(places, got):
                out[k] = raw if isinstance(raw, Exception) else self._said(reads[k][0], raw[raw.index > start])
        return out
