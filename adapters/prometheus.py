"""Prometheus as a history source: the only module that imports prometheus_api_client.

Range queries are split into chunks under the server's 11,000-points-per-series
limit, each chunk retried with back-off, and the chunks stitched into one
series. A chunk that returns no samples is a gap (NaN), never zero.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import numpy as np
import pandas as pd
import requests
from prometheus_api_client import PrometheusConnect
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from core.settings import PrometheusServer

MAX_POINTS = 11_000
# Connections a client keeps open for reuse: more than the controller's concurrent reads (the reconcile's 8 readers
# and the hourly work's one); beyond it a connection is opened and closed again
CONNECTIONS = 16


class PrometheusError(RuntimeError):
    """Prometheus is unreachable, refused the query, or returned something unusable."""


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


def parse_matrix(result: list[dict], query: str) -> pd.Series:
    """A range-query result (one series) -> float series on a UTC index."""
    if not result:
        return pd.Series([], index=pd.DatetimeIndex([], tz="UTC", name="timestamp"), dtype=float, name="value")
    if len(result) > 1:
        labels = [r.get("metric", {}) for r in result[:3]]
        raise PrometheusError(f"query {query!r} returned {len(result)} series (e.g. {labels}); "
                              "aggregate it to one, e.g. sum(...)")
    values = result[0].get("values", [])
    stamps = pd.to_datetime([float(ts) for ts, _ in values], unit="s", utc=True)
    # Prometheus encodes values as strings, including "NaN" and "+Inf".
    numbers = np.array([float(v) for _, v in values], dtype=float)
    numbers[~np.isfinite(numbers)] = np.nan
    return pd.Series(numbers, index=pd.DatetimeIndex(stamps, name="timestamp"), name="value")


def _bearer(token: Callable[[], str]) -> Callable[[requests.PreparedRequest], requests.PreparedRequest]:
    """Requests auth sending `token()` as the bearer token, read at each request (a mounted service-account token
    is rotated in place)."""
    def auth(request: requests.PreparedRequest) -> requests.PreparedRequest:
        request.headers["Authorization"] = f"Bearer {token()}"
        return request
    return auth


def connect(server: PrometheusServer) -> PrometheusConnect:
    """A client for `server` whose one session keeps up to CONNECTIONS connections open for reuse, each request
    retried with back-off on a refused connection or a server error, the bearer token file read at each request."""
    token_file = server.bearer_token_file
    retry = Retry(total=server.retries, backoff_factor=0.5, status_forcelist=(500, 502, 503, 504),
                  allowed_methods=("GET",))
    session = requests.Session()
    session.verify = False if server.insecure_skip_verify else (str(server.ca_file) if server.ca_file else True)
    client = PrometheusConnect(url=server.url, auth=_bearer(lambda: token_file.read_text().strip()) if token_file
                               else None, retry=retry, session=session, timeout=server.timeout_seconds)
    session.mount(server.url, HTTPAdapter(max_retries=retry, pool_maxsize=CONNECTIONS))  # replaces the client's (10)
    return client


def read_range(client: PrometheusConnect, query: str, start: datetime, end: datetime, step: str) -> pd.Series:
    """`query` over [start, end] at `step` on `client`'s server, in chunks under MAX_POINTS; steps without a sample
    are NaN."""
    step_delta = pd.Timedelta(step)
    parts = []
    for lo, hi in chunk_ranges(start, end, step_delta):
        try:
            result = client.custom_query_range(query, start_time=lo.to_pydatetime(), end_time=hi.to_pydatetime(),
                                               step=f"{int(step_delta.total_seconds())}s")
        except Exception as exc:  # the client raises requests, urllib3 and its own errors
            raise PrometheusError(f"Prometheus at {client.url} failed for {query!r} "
                                  f"[{lo.isoformat()} .. {hi.isoformat()}]: {exc}") from exc
        parts.append(parse_matrix(result, query))
    if len(parts) == 1:  # a reconcile's read: one chunk, its timestamps unique
        series = parts[0]
    else:
        series = pd.concat(parts) if parts else parse_matrix([], query)
        series = series[~series.index.duplicated(keep="last")]
    # Steps the server had no sample for are gaps: put them back as NaN.
    full = pd.date_range(pd.Timestamp(start), pd.Timestamp(end), freq=step_delta)
    return series.reindex(series.index.union(full)).rename("value")


@dataclass(frozen=True)
class PrometheusSource:
    """History from a PromQL expression over [start, end] on `server`, at its step."""
    server: PrometheusServer
    query: str
    start: datetime
    end: datetime

    def fetch(self) -> pd.Series:
        return read_range(connect(self.server), self.query, self.start, self.end, self.server.step)


class PrometheusDemand:
    """The controller's demand reader on a real cluster: each policy's query, from Prometheus, on one client whose
    connections every read reuses (a thousand policies are read every few minutes, 8 at a time; a client and a
    connection per read cost a quarter of a read's CPU). The reconcile's reader threads share it: urllib3's pool
    is thread-safe, and nothing else in the session changes after it is made."""

    def __init__(self, server: PrometheusServer):
        self.server = server
        self.client = connect(server)

    def read(self, key: str, query: str, start: pd.Timestamp, end: pd.Timestamp) -> pd.Series:
        raw = read_range(self.client, query, start.to_pydatetime(), end.to_pydatetime(), self.server.step)
        return raw[raw.index > start]
