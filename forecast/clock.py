"""The seasonal clock: a forecast made on a time zone's wall-clock hours, handed back on UTC hours.

Every forecaster counts its seasons in steps of the history (the same hour yesterday is 24 steps back), and the
history is on UTC hours. A team in a zone with daylight saving time keeps its business hours on the wall clock, so
on UTC hours its peak moves by an hour at each change and the seasonal models put it an hour early or late for
weeks. `on_clock(model, zone)` wraps any forecaster so that it fits and forecasts on wall-clock hours instead:

- the history is re-indexed on local wall-clock hours. The hour the clock skips (spring: 02:00 in Europe/Berlin)
  is a gap (NaN), filled as every model fills a gap; the hour the clock repeats (autumn: 02:00 twice) holds the
  mean of its two UTC hours;
- the model forecasts the wall-clock hours ahead, and each UTC hour of the forecast gets the forecast of its
  wall-clock hour (both UTC hours of a repeated hour get that hour's; a skipped hour has no UTC hour to serve).

UTC, the default, returns the model itself: today's forecasts, bit for bit.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Self
from zoneinfo import ZoneInfo

import pandas as pd

from core.units import UTC
from forecast.base import Forecaster, future_index

HOUR = pd.Timedelta(hours=1)


def wall_clock(index: pd.DatetimeIndex, zone: str) -> pd.DatetimeIndex:
    """The wall-clock hour in `zone` of each UTC timestamp, labelled as UTC: the models read a tz-aware UTC index
    (forecast.base), and those that take the hour of day or day of week from it then take the local ones. Floored to
    the hour, so that one grid of hours holds them on both sides of a change of half an hour (Australia/Lord_Howe)
    and in a zone a fraction of an hour off UTC (Asia/Kathmandu: 00:00 UTC is the 05:00 hour, 05:45)."""
    return index.tz_convert(ZoneInfo(zone)).tz_localize(None).floor("h").tz_localize(UTC)


def local_hours(history: pd.Series, zone: str) -> pd.Series:
    """`history` (hourly, UTC) on the wall-clock hours of `zone`, one value per wall-clock hour from its first to its
    last: a skipped hour is NaN (a gap); a repeated hour is the mean of its UTC hours that have a value. The
    history is a demand rate per hour (or an hour's peak, percentile, sum), and the repeated wall-clock hour is one
    hour of the day observed twice: the mean keeps the statistic's meaning for that hour (the sum of the two would
    read as a doubled hour's demand, the max as a burst that was not there), so the day's profile stays one day's.
    A repeated hour whose second UTC hour is still ahead is left out: it is forecast, not half-observed."""
    if zone == UTC or history.empty:
        return history
    wall = wall_clock(history.index, zone)
    by_hour = pd.Series(history.to_numpy(float), index=wall).groupby(level=0, sort=False).mean()
    if wall_clock(history.index[-1:] + HOUR, zone)[0] == wall[-1]:
        by_hour = by_hour.iloc[:-1]
    if by_hour.empty:  # one hour, the first of a repeated one
        return history.iloc[:0]
    return by_hour.reindex(pd.date_range(by_hour.index[0], by_hour.index[-1], freq="h")).rename(history.name)


def on_utc(local: pd.DataFrame, utc: pd.DatetimeIndex, zone: str) -> pd.DataFrame:
    """The rows of `local` (indexed by wall-clock hours, as local_hours gives them) for the UTC hours `utc`: each UTC
    hour takes its wall-clock hour's row (a UTC hour whose wall-clock hour `local` lacks gets NaN)."""
    out = local.reindex(wall_clock(utc, zone))
    out.index = utc
    return out


class OnClock:
    """A forecaster fitted and forecasting on `zone`'s wall-clock hours (module docstring); its forecast is on the
    UTC hours after the history, as every forecaster's."""

    def __init__(self, model: Forecaster, zone: str):
        self.model, self.zone, self.name = model, zone, model.name

    @property
    def chosen(self) -> str | None:  # what automatic selection picked (controller.observe.issue reports it)
        return getattr(self.model, "chosen", None)

    def fit(self, history: pd.Series) -> Self:
        self.history_ = history
        self.local_ = local_hours(history, self.zone)
        self.model.fit(self.local_)
        self.name = self.model.name  # automatic selection names its pick once fitted
        return self

    def predict(self, horizon: int, quantiles: Sequence[float]) -> pd.DataFrame:
        utc = future_index(self.history_, horizon)
        local_horizon = int((wall_clock(utc[-1:], self.zone)[0] - self.local_.index[-1]) / HOUR)
        return on_utc(self.model.predict(local_horizon, quantiles), utc, self.zone)


def on_clock(model: Forecaster, zone: str = UTC) -> Forecaster:
    """`model` forecasting on `zone`'s wall-clock hours; UTC: `model` itself."""
    return model if zone == UTC else OnClock(model, zone)
