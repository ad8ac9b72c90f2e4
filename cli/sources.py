"""The configured history: a file, or Prometheus over its lookback."""
from __future__ import annotations

import sys
from datetime import datetime

from cli.config import Config
from core.errors import BadRequest


def source(cfg: Config, now: datetime, argument: str):
    """Where the configured history comes from: a file, or Prometheus over its lookback up to `end` (or now), in
    whole hours. `argument` is the command's positional argument that gives the file, as its usage names it."""
    from forecast.history import FileSource, no_history_file

    h = cfg.history
    if h.prometheus is not None:
        import pandas as pd

        from adapters.prometheus import PrometheusSource
        from core.units import duration

        # the whole hours before `end`, as the controller fits on: the hour `end` falls in, partly read, was fitted
        # as a whole one (a sum scaled up from its first samples, a max of a few), and the forecast began after it;
        # and the whole hours in the lookback (`90m`: one), its first hour as partly read as that
        end = pd.Timestamp(h.prometheus.end or now).tz_convert("UTC").floor("h")
        return PrometheusSource(h.prometheus, h.prometheus.query, (end - duration(h.prometheus.lookback)).ceil("h"),
                                end)
    if h.file is not None:
        if why := no_history_file(h.file):  # a usage error, as a missing --jobs file is: nothing to read, nothing done
            raise BadRequest(f"history.file {h.file}: {why} (the {argument} argument, or history.file in --config)")
        return FileSource(h.file)
    raise BadRequest(f"no history: give a {argument} file, or history.file / history.prometheus in --config")


def history_name(cfg: Config) -> str:
    """The configured history as a user would name it: its file, or its Prometheus query."""
    h = cfg.history
    return str(h.file) if h.file is not None else \
        f"query {h.prometheus.query!r}" if h.prometheus is not None else "the history"


def fetched(cfg: Config, now: datetime, argument: str):
    """The configured history as read (`argument`: as source's); on stderr, Prometheus' warnings that its answer is
    partial and the infinite values it answered (read as gaps)."""
    raw = source(cfg, now, argument).fetch()
    if warnings := raw.attrs.get("warnings"):
        print(f"note: history {history_name(cfg)}: Prometheus warned the answer may be partial: {'; '.join(warnings)}",
              file=sys.stderr)
    if infinite := raw.attrs.get("infinite"):
        print(f"note: history {history_name(cfg)}: {infinite} infinite values (a division by zero?) read as gaps",
              file=sys.stderr)
    return raw


def say_repairs(cfg: Config, report) -> None:
    """What cleaning changed in the history (sorted, deduplicated, clipped, kept missing), on stderr: no command
    drops or changes a sample without a word (forecast and demo print the whole cleaning report instead)."""
    if repairs := report.repairs():
        print(f"note: history {history_name(cfg)}: {'; '.join(repairs)}", file=sys.stderr)


def load_series(cfg: Config, now: datetime, say: bool = True):
    """The configured history, cleaned and aggregated, with its cleaning report (its repairs said on stderr unless
    `say` is false: the caller prints the report)."""
    from forecast.history import prepare

    h = cfg.history
    # forecast and backtest read it, from their HISTORY argument (train and demo check their own files first)
    series, report = prepare(fetched(cfg, now, "HISTORY"), step=h.step, statistic=h.statistic, counter=h.counter,
                             outlier_factor=h.outlier_factor)
    if say:
        say_repairs(cfg, report)
    return series, report


def native_series(cfg: Config, now: datetime):
    """The history at its own step (the simulator replays every sample), gaps kept; its repairs said on stderr."""
    from forecast.history import at_own_step_reported

    # what simulate, tune and report replay, from their DEMAND argument
    series, report = at_own_step_reported(fetched(cfg, now, "DEMAND"), counter=cfg.history.counter)
    say_repairs(cfg, report)
    return series
