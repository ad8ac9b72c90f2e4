"""Forecast models. Each follows the contract in forecast/base.py.

Every model here forecasts a point path; `PointModel.predict` turns it into
quantiles with the spread of its own in-sample seasonal errors (a rough
interval). Honest, calibrated intervals come from forecast/calibrate.py, which
wraps any model with conformal quantiles from rolling backtest residuals.

SARIMAX is left out: a seasonal (period 24) SARIMAX fit costs seconds per
series, far over the ~0.1 s budget of automatic selection, and it cannot model
the weekly cycle at that cost; it was not benchmarked here.
"""
from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Sequence
from typing import Self

import numpy as np
import pandas as pd

from forecast.base import Forecaster, future_index, quantile_frame

log = logging.getLogger(__name__)
DAY, WEEK = 24, 168


def fill_gaps(values: np.ndarray) -> np.ndarray:
    """Fill NaN for fitting only: same hour a week (else a day) earlier, then interpolation."""
    values = np.asarray(values, dtype=float).copy()
    for lag in (WEEK, DAY):
        gaps = np.flatnonzero(np.isnan(values))
        gaps = gaps[gaps >= lag]
        values[gaps] = values[gaps - lag]  # in order, so long gaps chain back week by week
    if np.isnan(values).any():
        series = pd.Series(values).interpolate(limit_direction="both")
        values = series.fillna(0.0).to_numpy()
    return values


class TooShort(ValueError):
    """The history is shorter than the model needs: an expected fallback, not a failure."""


class PointModel:
    """Shared fit/predict plumbing: subclasses implement `_fit(values)` and `_path(horizon)`."""

    name = "point"
    calendar = False  # True when _fit reads timestamps (self.history_), so it needs the Series

    def fit(self, history: pd.Series) -> Self:
        self.history_ = history
        return self.fit_values(history.to_numpy(dtype=float))

    def fit_values(self, values: np.ndarray) -> Self:
        """Fit on bare values (no timestamps): enough for `point`, and cheap in inner backtests."""
        self.fallback_reason: str | None = None
        values = fill_gaps(values)
        self.values_ = values
        try:
            self._fit(values)
        except TooShort as exc:  # early inner-backtest folds hit this routinely: debug only (issue 12)
            self._fall_back(f"too short: {exc}", logging.DEBUG)
        except Exception as exc:  # a numerical failure must not leave us without a forecast
            self._fall_back(f"{type(exc).__name__}: {exc}")
        return self

    def _fall_back(self, reason: str, severity: int = logging.WARNING) -> None:
        log.log(severity, "%s failed to fit (%s); falling back to seasonal naive", self.name, reason)
        self.fallback_reason = reason
        self._fit_failed = True

    def point(self, horizon: int) -> np.ndarray:
        if getattr(self, "_fit_failed", False):
            return _repeat_last(self.values_, DAY, horizon)
        try:
            path = np.asarray(self._path(horizon), dtype=float)
            if path.shape != (horizon,) or not np.isfinite(path).all():
                raise ValueError("non-finite forecast")
            return np.clip(path, 0.0, None)
        except Exception as exc:
            self._fall_back(f"{type(exc).__name__}: {exc}")
            return _repeat_last(self.values_, DAY, horizon)

    def predict(self, horizon: int, quantiles: Sequence[float]) -> pd.DataFrame:
        path = self.point(horizon)
        errors = self.values_[DAY:] - self.values_[:-DAY]
        # Centred so the median is the path itself.
        spread = np.quantile(errors, quantiles) - np.median(errors) if len(errors) else np.zeros(len(quantiles))
        return quantile_frame(future_index(self.history_, horizon), path[:, None] + spread[None, :], quantiles)

    def _fit(self, values: np.ndarray) -> None:
        raise NotImplementedError

    def _path(self, horizon: int) -> np.ndarray:
        raise NotImplementedError


def _repeat_last(values: np.ndarray, season: int, horizon: int) -> np.ndarray:
    season = min(season, len(values))
    cycle = values[-season:]
    return np.resize(cycle, horizon) if horizon else cycle[:0]


class SeasonalNaive(PointModel):
    def __init__(self, season: int = DAY):
        self.season = season
        self.name = f"snaive{season}"

    def _fit(self, values):
        if len(values) < self.season:
            raise TooShort(f"needs {self.season} points, has {len(values)}")

    def _path(self, horizon):
        return _repeat_last(self.values_, self.season, horizon)


class SeasonalProfile(PointModel):
    """Median of the same hour of the week over recent weeks, rescaled to the latest day's level.

    Robust to one-off bursts (median) and to slow growth (the level ratio).
    """
    def __init__(self, cycles: int = 4, period: int = WEEK):
        self.cycles, self.period = cycles, period
        self.name = "profile" if period == WEEK else "profile24"

    def _fit(self, values):
        period = self.period if len(values) >= 2 * self.period else DAY
        n = min(self.cycles, len(values) // period)
        if n < 1:
            raise TooShort("shorter than one day")
        cycles = values[len(values) - n * period:].reshape(n, period)
        self.period_ = period
        self.profile_ = np.median(cycles, axis=0)
        recent, typical = values[-DAY:].sum(), self.profile_[-DAY:].sum() if period == WEEK else self.profile_.sum()
        self.level_ = float(np.clip(recent / typical, 0.5, 2.0)) if typical > 0 else 1.0

    def _path(self, horizon):
        return np.resize(self.profile_, horizon) * self.level_


class HoltWinters(PointModel):
    """Additive Holt-Winters (statsmodels ETS), daily season, damped trend."""
    name = "ets"

    def _fit(self, values):
        from statsmodels.tsa.holtwinters import ExponentialSmoothing

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.model_ = ExponentialSmoothing(values[-8 * WEEK:], trend="add", damped_trend=True,
                                               seasonal="add", seasonal_periods=DAY,
                                               initialization_method="estimated").fit()

    def _path(self, horizon):
        return self.model_.forecast(horizon)


class MSTLModel(PointModel):
    """statsmodels MSTL (daily + weekly seasonality); the deseasonalised part by damped Holt."""
    name = "mstl"

    def _fit(self, values):
        from statsmodels.tsa.holtwinters import ExponentialSmoothing
        from statsmodels.tsa.seasonal import MSTL

        values = values[-8 * WEEK:]
        periods = (DAY, WEEK) if len(values) >= 2 * WEEK else (DAY,)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit = MSTL(values, periods=periods, stl_kwargs={"robust": False}).fit()
            seasonal = np.asarray(fit.seasonal).reshape(len(values), -1)
            self.cycles_ = [seasonal[-p:, i] for i, p in enumerate(periods)]
            self.periods_ = periods
            adjusted = values - seasonal.sum(axis=1)
            self.trend_ = ExponentialSmoothing(adjusted, trend="add", damped_trend=True,
                                               initialization_method="estimated").fit()

    def _path(self, horizon):
        path = np.asarray(self.trend_.forecast(horizon), dtype=float)
        for cycle in self.cycles_:
            path = path + np.resize(cycle, horizon)
        return path


class GradientBoosting(PointModel):
    """scikit-learn gradient boosting on calendar features and week-old lags.

    Lags of a week or more are known for any horizon up to a week, so one
    direct model serves every step without feeding forecasts back in.
    """
    name = "gbm"
    calendar = True
    LAGS = (WEEK, 2 * WEEK, DAY * 8)

    def _features(self, values: np.ndarray, index: pd.DatetimeIndex, positions: np.ndarray) -> np.ndarray:
        columns = [index.hour.to_numpy(), index.day_of_week.to_numpy()]
        columns += [values[positions - lag] for lag in self.LAGS]
        return np.column_stack(columns).astype(float)

    def _fit(self, values):
        from sklearn.ensemble import HistGradientBoostingRegressor

        start = max(self.LAGS)
        if len(values) < start + WEEK:
            raise TooShort("needs three weeks of history")
        positions = np.arange(start, len(values))
        index = self.history_.index[positions]
        self.model_ = HistGradientBoostingRegressor(loss="absolute_error", max_iter=50, learning_rate=0.15,
                                                    categorical_features=[0, 1], random_state=0)
        self.model_.fit(self._features(values, index, positions), values[positions])

    def _path(self, horizon):
        if horizon > WEEK:
            raise ValueError("horizon longer than a week")
        values = np.concatenate([self.values_, np.full(horizon, np.nan)])
        positions = np.arange(len(self.values_), len(values))
        features = self._features(values, future_index(self.history_, horizon), positions)
        return self.model_.predict(features)


class Ensemble:
    """Mean of the members' point paths (AutoForecaster builds it from the top-k by backtest)."""

    def __init__(self, members: Sequence[str]):
        self.members = tuple(members)
        self.name = "mean(" + "+".join(self.members) + ")"

    def fit(self, history: pd.Series) -> Self:
        self.history_ = history
        self.fitted_ = [MODELS[m]().fit(history) for m in self.members]
        reasons = [f"{m.name}: {m.fallback_reason}" for m in self.fitted_ if getattr(m, "fallback_reason", None)]
        self.fallback_reason = "; ".join(reasons) or None
        return self

    def point(self, horizon: int) -> np.ndarray:
        return np.mean([m.point(horizon) for m in self.fitted_], axis=0)

    def predict(self, horizon: int, quantiles: Sequence[float]) -> pd.DataFrame:
        # Members' rough intervals, averaged per quantile, around the averaged path.
        frames = [m.predict(horizon, quantiles).to_numpy() for m in self.fitted_]
        return quantile_frame(future_index(self.history_, horizon), np.mean(frames, axis=0), quantiles)


MODELS: dict[str, Callable[[], Forecaster]] = {
    "snaive24": lambda: SeasonalNaive(DAY),
    "snaive168": lambda: SeasonalNaive(WEEK),
    "profile": SeasonalProfile,
    "profile24": lambda: SeasonalProfile(cycles=7, period=DAY),
    "ets": HoltWinters,
    "mstl": MSTLModel,
    "gbm": GradientBoosting,
    "ensemble": lambda: Ensemble(("profile", "mstl", "ets")),
}
