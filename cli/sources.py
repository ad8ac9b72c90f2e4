"""The configured history: a file, or Prometheus over its lookback."""
from __future__ import annotations

from datetime import datetime

from cli.config import Config
from core.errors import BadRequest


def source(cfg: Config, now: datetime):
    """Where the configured history comes from: a file, or Prometheus over its lookback up to `end` (or now)."""
    from forecast.history import FileSource

    h = cfg.history
    if h.prometheus is not None:
        from adapters.prometheus import PrometheusSource
        from core.units import duration

        end = h.prometheus.end or now
        return PrometheusSource(h.prometheus, h.prometheus.query, end - duration(h.prometheus.lookback), end)
    if h.file is not None:
        return FileSource(h.file)
    raise BadRequest("no history: give a HISTORY file, or history.file / history.prometheus in --config")


def load_series(cfg: Config, now: datetime):
    """The configured history, cleaned and aggregated, with its cleaning report."""
    from forecast.history import prepare

    h = cfg.history
    return prepare(source(cfg, now).fetch(), step=h.step, statistic=h.statistic, counter=h.counter,
                   outlier_factor=h.outlier_factor)
