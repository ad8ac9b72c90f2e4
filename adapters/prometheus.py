"""Prometheus as a history source: the only module that imports prometheus_api_client.

Range queries are split into chunks under the server's 11,000-points-per-series
limit, each chunk retried with back-off, and the chunks stitched into one
series. A chunk that returns no samples is a gap (NaN), never zero.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import numpy as np
import pandas as pd

from core.settings import PrometheusServer

MAX_POINTS = 11_000


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


@dataclass(frozen=True)
class PrometheusSource:
    """History from a PromQL expression over [start, end] at `step`."""
    url: str
    query: str
    start: datetime
    end: datetime
    step: str = "5m"
    bearer_token: str | None = None
    ca_file: str | None = None
    insecure_skip_verify: bool = False
    timeout_seconds: float = 30.0
    retries: int = 3

    def _client(self):
        import requests
        from prometheus_api_client import PrometheusConnect
        from urllib3.util.retry import Retry

        headers = {"Authorization": f"Bearer {self.bearer_token}"} if self.bearer_token else None
        retry = Retry(total=self.retries, backoff_factor=0.5, status_forcelist=(500, 502, 503, 504),
                      allowed_methods=("GET",))
        session = requests.Session()
        session.verify = False if self.insecure_skip_verify else (self.ca_file or True)
        return PrometheusConnect(url=self.url, headers=headers, retry=retry, session=session,
                                 timeout=self.timeout_seconds)

    def fetch(self) -> pd.Series:
        client = self._client()
        step = pd.Timedelta(self.step)
        parts = []
        for lo, hi in chunk_ranges(self.start, self.end, step):
            try:
                result = client.custom_query_range(self.query, start_time=lo.to_pydatetime(),
                                                   end_time=hi.to_pydatetime(), step=f"{int(step.total_seconds())}s")
            except Exception as exc:  # the client raises requests, urllib3 and its own errors
                raise PrometheusError(f"Prometheus at {self.url} failed for {self.query!r} "
                                      f"[{lo.isoformat()} .. {hi.isoformat()}]: {exc}") from exc
            parts.append(parse_matrix(result, self.query))
        series = pd.concat(parts) if parts else parse_matrix([], self.query)
        series = series[~series.index.duplicated(keep="last")]
        # Steps the server had no sample for are gaps: put them back as NaN.
        full = pd.date_range(pd.Timestamp(self.start), pd.Timestamp(self.end), freq=step)
        return series.reindex(series.index.union(full)).rename("value")


def prometheus_source(server: PrometheusServer, query: str, start, end) -> PrometheusSource:
    """A source for `query` over [start, end] on `server`."""
    token = server.bearer_token_file.read_text().strip() if server.bearer_token_file else None
    return PrometheusSource(url=server.url, query=query, start=start, end=end, step=server.step, bearer_token=token,
                            ca_file=str(server.ca_file) if server.ca_file else None,
                            insecure_skip_verify=server.insecure_skip_verify,
                            timeout_seconds=server.timeout_seconds, retries=server.retries)


@dataclass
class PrometheusDemand:
    """The controller's demand reader on a real cluster: each policy's query, from Prometheus."""
    server: PrometheusServer

    def read(self, key: str, query: str, start: pd.Timestamp, end: pd.Timestamp) -> pd.Series:
        raw = prometheus_source(self.server, query, start.to_pydatetime(), end.to_pydatetime()).fetch()
        return raw[raw.index > start]
