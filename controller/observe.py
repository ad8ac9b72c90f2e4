"""What the controller makes of a policy's demand samples, shared by `headroom run` and the simulator so both
see the same thing at the same moment: whether the data can be trusted, the hourly history a forecaster
fits on, when a forecast is refitted and how long a forecast is kept once the data stops.
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from core.cluster import FORECAST_BASIS, FORECAST_GENERATION, FORECAST_MODEL, FORECAST_SCALE
from core.errors import raise_interrupt_inside
from core.policy import PolicySpec
from core.settings import LOOKBACK, RunConfig
from core.units import duration
from forecast.base import Forecaster, ForecastError
from forecast.calibrate import MIN_FIT_HOURS
from forecast.clock import on_clock
from forecast.history import OUTLIER_FACTOR, prepare
from forecast.metrics import seasonal_scale

EXTRA_QUANTILES = (0.1, 0.5, 0.9)  # always forecast: realized error and the 80% interval need them


def default_forecaster() -> Forecaster:
    """`forecaster: auto` without a champion (and the training's default champion, `auto`): automatic selection
    among the cheap candidates. The one the controller serves and the simulator replays."""
    from forecast.backtest import AutoForecaster

    return AutoForecaster("fast", horizon=24)


_RUN = RunConfig()  # the controller's configuration holds the one definition of these defaults


@dataclass(frozen=True)
class DataSettings:
    stale_after_seconds: float = _RUN.stale_after_seconds      # demand older than this is stale
    keep_forecast_seconds: float = _RUN.keep_forecast_seconds  # a forecast is used this long after it was made
    horizon_hours: int = _RUN.horizon_hours
    lookback_seconds: float = duration(LOOKBACK).total_seconds()
    read_overlap: pd.Timedelta = pd.Timedelta(minutes=15)      # re-read before the newest sample: late ones fill in
    outlier_factor: float | None = OUTLIER_FACTOR               # the hours a refit fits on clipped so (history.*)

    @classmethod
    def of(cls, run: RunConfig, outlier_factor: float | None = OUTLIER_FACTOR) -> DataSettings:
        server = run.prometheus
        return cls(run.stale_after_seconds, run.keep_forecast_seconds, run.horizon_hours,
                   duration(server.lookback if server else LOOKBACK).total_seconds(),
                   3 * duration(server.step) if server else pd.Timedelta(minutes=15), outlier_factor)


def degraded_reason(newest: float | None, last_hour: int, last_hour_missing: int, now: float,
                    stale_after_seconds: float) -> str | None:
    """Why a policy's samples cannot be trusted, or None: `newest` is the newest real sample in the lookback
    (epoch seconds, None if none), `last_hour` the samples of the last hour and how many of them are missing.

    The text before ':' is the condition reason a status shows."""
    if newest is None:
        return "NoData: the query returned no samples"
    if now - newest > stale_after_seconds:
        return f"StaleData: newest sample {pd.Timestamp(newest, unit='s', tz='UTC')}"
    if last_hour and last_hour_missing / last_hour > 0.5:
        return f"PartialData: {last_hour_missing / last_hour:.0%} of the last hour's samples are missing"
    return None


def window_facts(times: np.ndarray, values: np.ndarray, now: float) -> tuple[float | None, int, int]:
    """degraded_reason's inputs from the lookback's samples (epoch seconds; NaN = missing)."""
    real = np.isfinite(values)
    newest = float(times[real][-1]) if real.any() else None
    last_hour = times > now - 3600
    return newest, int(last_hour.sum()), int((last_hour & ~real).sum())


def hourly_history(raw: pd.Series, statistic: str, now: pd.Timestamp,
                   outlier_factor: float | None = OUTLIER_FACTOR) -> pd.Series:
    """Complete hours before `now`, aggregated with the policy's statistic, their outliers clipped by their own bound
    (what a forecaster fits on; `outlier_factor` None: as read, for a training that clips each fold's hours)."""
    if raw.notna().sum() < 2:
        return raw.iloc[:0]
    hourly = prepare(raw, step="1h", statistic=statistic, outlier_factor=outlier_factor)[0]
    return hourly[hourly.index < now.floor("h")]


def quantiles_for(spec: PolicySpec) -> list[float]:
    return sorted({*EXTRA_QUANTILES, spec.target_quantile, spec.headroom_quantile})


@dataclass(frozen=True)
class IssuedForecast:
    frame: pd.DataFrame        # period starts x quantiles, demand units
    made_at: pd.Timestamp
    model: str
    generation: int            # the policy's metadata.generation it was made for
    scale: float               # seasonal-24 scale of the fitting window (realized error is divided by it)
    basis: str | None = None   # what it is a forecast of (basis(spec)); None: recorded before that was kept


def basis(spec: PolicySpec) -> str:
    """What a policy's forecast is a forecast of: its demand query, the statistic of its hours, its forecaster and the
    clock of its seasons. Its other fields (quantiles aside, which the planner checks) shape only the plan made on
    it."""
    text = json.dumps([spec.query, spec.statistic, spec.forecaster, spec.timezone])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def made_for(forecast: IssuedForecast, spec: PolicySpec, generation: int) -> bool:
    """Whether the policy may be planned on `forecast` now that its spec is `spec` at `generation`: made for the same
    basis, whatever generation (a change of minGpus or targetQuantile leaves the forecast what a refit would make
    now, so it serves until the refit lands instead of the fallback; a changed query or statistic makes it a forecast
    of something else, e.g. hourly means where peaks are asked); one recorded without its basis, for that generation
    only. Generations alone could not tell a policy deleted and created anew, its query changed, from the old one."""
    if forecast.basis is not None:
        return forecast.basis == basis(spec)
    return forecast.generation == generation


def due(cached: IssuedForecast | None, now: pd.Timestamp, generation: int) -> bool:
    """A forecast is refitted once an hour, and whenever the policy changes."""
    return cached is None or cached.made_at.floor("h") < now.floor("h") or cached.generation != generation


def usable(cached: IssuedForecast | None, now: pd.Timestamp, settings: DataSettings) -> IssuedForecast | None:
    """The forecast the planner may use: none once it is older than `keep_forecast_seconds`."""
    if cached is None or (now - cached.made_at).total_seconds() > settings.keep_forecast_seconds:
        return None
    return cached


def fit(model, name: str, hourly: pd.Series, now: pd.Timestamp, spec: PolicySpec, generation: int,
        horizon_hours: int) -> tuple[IssuedForecast | None, str | None]:
    """(forecast, why the model could not fit): no forecast and no fault under MIN_FIT_HOURS of complete hours (the
    planner's conservative fallback); a model that cannot fit gives no forecast and its error."""
    if hourly.notna().sum() < MIN_FIT_HOURS:
        return None, None
    try:
        return issue(model, name, hourly, now, spec, generation, horizon_hours), None
    except (ValueError, ArithmeticError, RuntimeError) as exc:
        raise_interrupt_inside(exc)  # a stop that numpy reported as its own error is a stop, not a failed fit
        return None, str(exc)


def fit_hourly(model, name: str, raw: pd.Series, now: pd.Timestamp, spec: PolicySpec, generation: int,
               horizon_hours: int, outlier_factor: float | None) -> tuple[pd.Series, IssuedForecast | None, str | None]:
    """`fit` on the complete hours of `raw`, which it returns too: the hourly work's computation, with no I/O and
    module-level, so that `headroom run` can run it in a process of its own."""
    hourly = hourly_history(raw, spec.statistic, now, outlier_factor)
    return (hourly, *fit(model, name, hourly, now, spec, generation, horizon_hours))


def issue(model, name: str, hourly: pd.Series, now: pd.Timestamp, spec: PolicySpec, generation: int,
          horizon_hours: int) -> IssuedForecast:
    """Fit `model` on the complete hours and forecast from the current hour over the horizon, on the wall-clock hours
    of the policy's timezone (forecast.clock: every forecaster the controller and the simulator serve passes here,
    and gets its seasonal clock here only). Raises ValueError (or ArithmeticError) for a model that cannot fit or a
    forecast of the wrong shape; NaN or negative values are left for the planner, which falls back in those periods."""
    quantiles = quantiles_for(spec)
    missing = max(int((now.floor("h") - hourly.index[-1]) / pd.Timedelta(hours=1)) - 1, 0)
    horizon = horizon_hours + missing
    frame = on_clock(model, spec.timezone).fit(hourly).predict(horizon, quantiles)
    if frame.shape != (horizon, len(quantiles)) or [float(c) for c in frame.columns] != quantiles:
        raise ForecastError(f"{name}: expected a {horizon} x {quantiles} forecast, "
                            f"got {frame.shape} {list(frame.columns)}")
    chosen = getattr(model, "chosen", None)  # automatic selection says what it picked
    scale = float(seasonal_scale(hourly.to_numpy()))
    scale = scale if math.isfinite(scale) else float("nan")
    frame.attrs[FORECAST_SCALE] = scale  # recorded with it: its realized error is divided by its own window's scale
    model = f"{name}: {chosen}" if chosen else name
    kind = basis(spec)
    frame.attrs.update({FORECAST_GENERATION: generation, FORECAST_MODEL: model, FORECAST_BASIS: kind})  # a new
    # leader's to take up
    return IssuedForecast(frame, now, model, generation, scale, kind)


def stored(issued_at: pd.Timestamp, frame: pd.DataFrame) -> IssuedForecast | None:
    """A forecast as the store holds it, or None where it does not say which policy generation and model it was made
    for (one recorded before they were kept, or a stored value not of its type); its basis where it says one."""
    generation, model = frame.attrs.get(FORECAST_GENERATION), frame.attrs.get(FORECAST_MODEL)
    if type(generation) is not int or not isinstance(model, str):  # not a bool either: JSON's true is no generation
        return None
    kind = frame.attrs.get(FORECAST_BASIS)
    return IssuedForecast(frame, issued_at, model, generation, float(frame.attrs.get(FORECAST_SCALE, math.nan)),
                          kind if isinstance(kind, str) else None)
