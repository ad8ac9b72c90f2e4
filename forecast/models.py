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
from typing import Any, Self

import numpy as np
import pandas as pd

from core.errors import raise_interrupt_inside
from forecast.base import PointForecaster, future_index, quantile_frame

log = logging.getLogger(__name__)
DAY, WEEK = 24, 168


def fill_gaps(values: np.ndarray) -> np.ndarray:
    """Fill NaN for fitting only: same hour a week (else a day) earlier, then interpolation."""
    values = np.asarray(values, dtype=float).copy()
    for lag in (WEEK, DAY):
        while True:  # repeated, so a gap longer than the lag chains back lag by lag
            gaps = np.flatnonzero(np.isnan(values))
            gaps = gaps[gaps >= lag]
            fillable = gaps[~np.isnan(values[gaps - lag])]
            if not len(fillable):
                break
            values[fillable] = values[fillable - lag]
    if np.isnan(values).any():  # only where no earlier day has a value (an hour missing every night)
        values = pd.Series(values).interpolate(limit_direction="both").fillna(0.0).to_numpy()
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
        self._fit_failed = False  # a refit (calibrate.refit_errors) must not inherit an earlier fit's failure
        values = fill_gaps(values)
        self.values_ = values
        try:
            self._fit(values)
        except TooShort as exc:  # early inner-backtest folds hit this routinely: debug only (issue 12)
            self._fall_back(f"too short: {exc}", logging.DEBUG)
        except Exception as exc:  # a numerical failure must not leave us without a forecast
            raise_interrupt_inside(exc)
            self._fall_back(f"{type(exc).__name__}: {exc}")
        return self

    def _fall_back(self, reason: str, severity: int = logging.WARNING, fit: bool = True) -> None:
        """Seasonal naive's forecast instead, for `reason`: every forecast's when the fit failed, else (`fit` false)
        this one's alone (a horizon the fitted model cannot reach; it still serves the next forecast)."""
        log.log(severity, "%s failed to %s (%s); falling back to seasonal naive", self.name,
                "fit" if fit else "forecast", reason)
        self.fallback_reason = reason
        if fit:
            self._fit_failed = True

    def point(self, horizon: int) -> np.ndarray:
        if getattr(self, "_fit_failed", False):
            return _repeat_last(self.values_, DAY, horizon)
        self.fallback_reason = None  # says why the last forecast fell back, not an earlier (longer) one
        if len(self.values_) and np.ptp(self.values_) == 0:
            # a constant history's forecast is the constant: a model's own fit of it (ets, mstl) is that value plus
            # rounding noise, and the noise alone put it outside the zero-width band day-over-day errors give
            return np.full(horizon, self.values_[-1])
        try:
            with warnings.catch_warnings():  # a model's numeric warnings (log of a zero error): the path is checked
                warnings.simplefilter("ignore", RuntimeWarning)
                path = np.asarray(self._path(horizon), dtype=float)
            if path.shape != (horizon,) or not np.isfinite(path).all():
                raise ValueError("non-finite forecast")
            return np.clip(path, 0.0, None)
        except Exception as exc:
            raise_interrupt_inside(exc)
            self._fall_back(f"{type(exc).__name__}: {exc}", fit=False)
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
    """Median of the same hour of the week over recent weeks (of the day over recent days: profile24, or a history
    under two weeks), rescaled to the latest day's level.

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

        if len(values) < 2 * DAY:
            raise TooShort(f"ets needs two daily cycles ({2 * DAY} points) to start its season, has {len(values)}")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.model_ = ExponentialSmoothing(values[-8 * WEEK:], trend="add", damped_trend=True,
                                               seasonal="add", seasonal_periods=DAY,
                                               initialization_method="estimated").fit()

    def _path(self, horizon):
        return self.model_.forecast(horizon)


class DampedHoltWinters(PointModel):
    """Additive Holt-Winters with a damped trend and a daily season, fitted fast enough for the cheap pool.

    statsmodels' optimiser costs ~0.4 s a fit; here every point of a fixed grid over the usual admissible region
    (Hyndman & Athanasopoulos, FPP3 8.3: 0 <= beta <= alpha, 0 <= gamma <= 1 - alpha, damping 0.8-0.98) runs at
    once, one vectorised pass over the history in error-correction form, and the point with the least one-step
    squared error over the last four weeks wins. It follows a level that shifts or drifts while keeping a daily
    shape, which the seasonal-naive and profile candidates cannot. The pass records every inner fold's state on
    the way (`fold_paths`), so a backtest costs one fit, not one per fold.
    """
    name = "hw"
    _grid = np.meshgrid([0.05, 0.1, 0.2, 0.35, 0.5, 0.7, 0.9], [0.0, 0.02, 0.1], [0.02, 0.05, 0.1, 0.2, 0.4],
                        [0.8, 0.9, 0.98], indexing="ij")
    ALPHA = _grid[0].ravel()
    BETA = (_grid[0] * _grid[1]).ravel()  # a share of alpha
    GAMMA = (_grid[2] * (1.0 - _grid[0])).ravel()  # a share of 1 - alpha
    PHI = _grid[3].ravel()
    SCORED = 4 * WEEK

    def _fit(self, values):
        if len(values) < 2 * DAY:
            raise TooShort(f"hw needs two daily cycles ({2 * DAY} points) to start its season, has {len(values)}")
        self.state_ = self._states(values, [len(values)])[0]

    def _path(self, horizon):
        phi, level, trend, season, n = self.state_
        steps = np.arange(1, horizon + 1)
        return level + np.cumsum(phi ** steps) * trend + season[(n + steps - 1) % DAY]

    @classmethod
    def _states(cls, y: np.ndarray, ends: Sequence[int]) -> list[tuple]:
        """One pass of every grid point over y[:max(ends)]; for each end, the state of the point that erred least
        on the SCORED one-step errors before it. Each end's state depends on y[:end] alone."""
        first = y[:DAY]
        level = np.full(cls.ALPHA.shape, first.mean())
        trend = np.full(cls.ALPHA.shape, (y[DAY:2 * DAY].mean() - first.mean()) / DAY)
        season = np.tile(first - first.mean(), (len(cls.ALPHA), 1))
        total = np.zeros(cls.ALPHA.shape)  # running sum of squared one-step errors
        totals = {DAY: total}
        wanted = {max(e - cls.SCORED, DAY) for e in ends} | set(ends)
        states = {}
        for t in range(DAY, max(ends)):
            hour = t % DAY
            damped = cls.PHI * trend
            error = y[t] - (level + damped + season[:, hour])
            total = total + error * error
            level = level + damped + cls.ALPHA * error
            trend = damped + cls.BETA * error
            season[:, hour] += cls.GAMMA * error
            if t + 1 in wanted:
                totals[t + 1] = total
                states[t + 1] = (level, trend, season.copy())
        out = []
        for end in ends:
            best = int(np.argmin(totals[end] - totals[max(end - cls.SCORED, DAY)]))
            level, trend, season = states[end]
            out.append((cls.PHI[best], level[best], trend[best], season[best], end))
        return out

    def fold_paths(self, values: np.ndarray, fold_origins: Sequence[int], horizon: int) -> np.ndarray:
        """fit_values(values[:o]).point(horizon) for every origin o, from one pass."""
        filled = fill_gaps(values[:max(fold_origins, default=0)])
        # a gap open at an origin is interpolated in the whole history but carried in the prefix: refit there
        long_enough = [o for o in fold_origins if o >= 2 * DAY and np.array_equal(fill_gaps(values[:o]), filled[:o])]
        states = dict(zip(long_enough, self._states(filled, long_enough))) if long_enough else {}
        paths = []
        for o in fold_origins:
            if o not in states:
                paths.append(type(self)().fit_values(values[:o]).point(horizon))
                continue
            self.values_, self._fit_failed, self.state_ = filled[:o], False, states[o]
            paths.append(self.point(horizon))
        return np.array(paths).reshape(len(fold_origins), horizon)


class MSTLModel(PointModel):
    """statsmodels MSTL (daily + weekly seasonality); the deseasonalised part by damped Holt.

    statsmodels drops every period of at least half the series, and with none left it fails with an
    UnboundLocalError (issue 13): so only the periods with more than two full cycles in the window are
    passed, the weekly one from two weeks and an hour, the daily one from two days and an hour; a
    shorter history is TooShort, with that reason, and falls back to seasonal naive.
    """
    name = "mstl"

    def _fit(self, values):
        from statsmodels.tsa.holtwinters import ExponentialSmoothing
        from statsmodels.tsa.seasonal import MSTL

        values = values[-8 * WEEK:]
        periods = tuple(p for p in (DAY, WEEK) if len(values) > 2 * p)
        if not periods:
            raise TooShort(f"MSTL needs more than two daily cycles ({2 * DAY} points), has {len(values)}")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit = MSTL(values, periods=periods, stl_kwargs={"robust": False}).fit()
            seasonal = np.asarray(fit.seasonal).reshape(len(values), -1)
            if seasonal.shape[1] != len(periods):
                raise ValueError(f"MSTL kept {seasonal.shape[1]} of the periods {periods}")
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
    """scikit-learn gradient boosting on calendar features and lags at least a horizon old.

    A direct model: every lag is at least the horizon, so one model serves every step without feeding
    forecasts back in. From two weeks and two days of history (the longest lag and MIN_ROWS rows), for a horizon
    of up to a week, the lags are one week, eight days and two weeks; else the whole days from ceil(horizon / 24)
    days back (one and two days for a 24-hour horizon on a one-week history: issue 13, where it used to equal
    seasonal naive on every series under three weeks).
    Target and lags are divided by the last week's mean so the trees see shapes, not levels (a tree cannot
    extrapolate a level it has not seen). The model is fitted at `point`, when the horizon is known.
    Shorter than the lags plus two days of rows: TooShort, with that reason.
    """
    name = "gbm"
    calendar = True
    LAGS = (WEEK, DAY * 8, 2 * WEEK)
    MIN_ROWS = 2 * DAY

    def _fit(self, values):
        if len(values) < DAY + self.MIN_ROWS:
            raise TooShort(f"gbm needs a day of lags and two days of rows ({DAY + self.MIN_ROWS} points), "
                           f"has {len(values)}")
        self.models_: dict[tuple[int, ...], Any] = {}  # lags -> fitted HistGradientBoostingRegressor

    def lags(self, horizon: int) -> tuple[int, ...]:
        n = len(self.values_)
        if horizon <= WEEK and n >= max(self.LAGS) + self.MIN_ROWS:
            return self.LAGS
        days = -(-horizon // DAY)
        lags = tuple(d * DAY for d in (days, days + 1) if d * DAY + self.MIN_ROWS <= n)
        if not lags:
            raise TooShort(f"gbm at horizon {horizon} needs {days * DAY + self.MIN_ROWS} points, has {n}")
        return lags

    def _features(self, values: np.ndarray, index: pd.DatetimeIndex, positions: np.ndarray,
                  lags: tuple[int, ...], scale: float) -> np.ndarray:
        columns = [index.hour.to_numpy(), index.day_of_week.to_numpy()]
        columns += [values[positions - lag] / scale for lag in lags]
        return np.column_stack(columns).astype(float)

    def _path(self, horizon):
        from sklearn.ensemble import HistGradientBoostingRegressor

        try:
            lags = self.lags(horizon)
        except TooShort as exc:
            self._fall_back(f"too short: {exc}", logging.DEBUG, fit=False)
            return _repeat_last(self.values_, DAY, horizon)
        values = self.values_
        recent = values[-WEEK:]
        scale = float(np.mean(recent)) if np.mean(recent) > 0 else 1.0
        if lags not in self.models_:
            positions = np.arange(max(lags), len(values))
            index = self.history_.index[positions]
            model = HistGradientBoostingRegressor(loss="absolute_error", max_iter=50, learning_rate=0.15,
                                                  categorical_features=[0, 1], random_state=0)
            model.fit(self._features(values, index, positions, lags, scale), values[positions] / scale)
            self.models_[lags] = model
        extended = np.concatenate([values, np.full(horizon, np.nan)])
        positions = np.arange(len(values), len(extended))
        features = self._features(extended, future_index(self.history_, horizon), positions, lags, scale)
        return self.models_[lags].predict(features) * scale


class Naive(PointModel):
    """The last value, held: the model for a gauge that drifts with no cycle (a flat GPU-in-use gauge)."""
    name = "naive"

    def _fit(self, values):
        if not len(values):
            raise TooShort("empty history")

    def _path(self, horizon):
        return np.full(horizon, self.values_[-1])


def _daily_seasonal(values: np.ndarray) -> tuple[np.ndarray, bool] | None:
    """Daily seasonal indices of the last four weeks (aligned so index -1 is the last hour), and whether they
    are multiplicative; None when there is no daily cycle by the M4 autocorrelation test (90 %, lag 24).

    On fewer than four whole days the test cannot find even a perfect sine (its lag-24 autocorrelation is at most
    (n - 24) / n, under the limit), so there the daily cycle that hourly demand has is assumed, from two days on.
    """
    window = values[-4 * WEEK:]
    n = len(window) - len(window) % DAY
    if n < 2 * DAY:
        return None
    window = window[-n:]
    centred = window - window.mean()
    denom = float(np.sum(centred ** 2))
    if denom <= 0:
        return None
    acf = np.array([centred[k:] @ centred[:-k] for k in range(1, DAY + 1)]) / denom
    if n >= 4 * DAY and abs(acf[-1]) <= 1.645 * np.sqrt((1 + 2 * float(acf[:-1] @ acf[:-1])) / n):
        return None
    by_hour = window.reshape(-1, DAY)
    if window.min() > 0:
        daily = by_hour.mean(axis=1, keepdims=True)
        return np.mean(by_hour / daily, axis=0), True
    return np.mean(by_hour - by_hour.mean(axis=1, keepdims=True), axis=0), False


class Theta(PointModel):
    """The Theta method (Assimakopoulos & Nikolopoulos 2000; Hyndman & Billah's SES-with-drift form) on the
    daily-deseasonalised last four weeks: simple exponential smoothing, alpha chosen on in-sample one-step
    errors from a grid, plus half the linear trend. Seasonality by the M4 test, multiplicative when the
    series is positive, else additive. Handles a level that drifts or shifts, with or without a daily cycle.
    """
    name = "theta"
    ALPHAS = np.array([0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 1.0])

    def _fit(self, values):
        from scipy.signal import lfilter

        y = values[-4 * WEEK:]
        if len(y) < 4:
            raise TooShort(f"theta needs 4 points, has {len(y)}")
        season = _daily_seasonal(y)
        if season is None:
            self.season_, adjusted = None, y
        else:
            index, multiplicative = season
            cycle = np.resize(index, len(y) + DAY)  # element k of the index belongs to the k-th hour of a day
            phase = cycle[DAY - len(y) % DAY:][:len(y)] if len(y) % DAY else cycle[:len(y)]
            adjusted = y / phase if multiplicative else y - phase
            self.season_ = (index, multiplicative)
        best: tuple[float, float, float] | None = None
        for alpha in self.ALPHAS:
            level = lfilter([alpha], [1.0, alpha - 1.0], adjusted[1:], zi=[(1.0 - alpha) * adjusted[0]])[0]
            sse = float(np.sum((adjusted[2:] - level[:-1]) ** 2))
            if best is None or sse < best[0]:
                best = (sse, alpha, level[-1])
        if best is None:
            raise ValueError("theta: no smoothing constant to choose from")
        _, self.alpha_, self.level_ = best
        t = np.arange(len(adjusted)) - (len(adjusted) - 1) / 2
        self.slope_ = float(t @ (adjusted - adjusted.mean()) / (t @ t))  # least-squares slope
        self.n_ = len(adjusted)

    def _path(self, horizon):
        a, n = self.alpha_, self.n_
        h = np.arange(1, horizon + 1)
        path = self.level_ + 0.5 * self.slope_ * (h - 1 + 1 / a - (1 - a) ** n / a)
        if self.season_ is None:
            return path
        index, multiplicative = self.season_
        cycle = np.resize(index, horizon)  # index[0] is the hour one whole number of days after the window's start
        return path * cycle if multiplicative else path + cycle


class Ensemble:
    """A combination of the members' point paths: their mean, median, or a weighted mean (AutoForecaster builds
    it from the best few by inner backtest)."""

    def __init__(self, members: Sequence[str], how: str = "mean", weights: Sequence[float] | np.ndarray | None = None):
        self.members = tuple(members)
        self.how = how
        self.weights = None if weights is None else np.asarray(weights, dtype=float) / np.sum(weights)
        self.name = combination_name(self.members, how)

    def fit(self, history: pd.Series) -> Self:
        self.history_ = history
        self.fitted_ = [MODELS[m]().fit(history) for m in self.members]
        return self

    @property
    def fallback_reason(self) -> str | None:
        """Why a member's fit, or its last forecast, fell back to seasonal naive (None: none did)."""
        reasons = [f"{m.name}: {m.fallback_reason}" for m in self.fitted_ if getattr(m, "fallback_reason", None)]
        return "; ".join(reasons) or None

    def combine(self, paths: np.ndarray) -> np.ndarray:
        """Combine stacked paths (members first) the ensemble's way."""
        return combine(paths, self.how, self.weights)

    def point(self, horizon: int) -> np.ndarray:
        return self.combine(np.array([m.point(horizon) for m in self.fitted_]))

    def predict(self, horizon: int, quantiles: Sequence[float]) -> pd.DataFrame:
        # Members' rough intervals, combined per quantile, around the combined path.
        frames = np.array([m.predict(horizon, quantiles).to_numpy() for m in self.fitted_])
        return quantile_frame(future_index(self.history_, horizon), self.combine(frames), quantiles)


def combination_name(members: Sequence[str], how: str) -> str:
    """The combination's name, its members in one order whatever their rank: the controller's `model` label (a
    Prometheus series per value) stays one value while the same members serve, when refits only re-rank them."""
    return f"{how}(" + "+".join(sorted(members)) + ")"


def combine(paths: np.ndarray, how: str, weights: np.ndarray | None = None) -> np.ndarray:
    """The members' (first axis) median, weighted mean or mean. A mean lies between its members, which rounding alone
    broke: five equal paths of a constant 3e-6, weighted, came out a rounding under it, outside the band they give."""
    if how == "median":
        return np.median(paths, axis=0)
    if how == "weighted" and weights is not None:
        mixed = np.tensordot(weights, paths, axes=1)
    else:
        mixed = np.mean(paths, axis=0)
    return np.clip(mixed, paths.min(axis=0), paths.max(axis=0))


MODELS: dict[str, Callable[[], PointForecaster]] = {
    "snaive24": lambda: SeasonalNaive(DAY),
    "snaive168": lambda: SeasonalNaive(WEEK),
    "profile": SeasonalProfile,
    "profile24": lambda: SeasonalProfile(cycles=7, period=DAY),
    "ets": HoltWinters,
    "hw": DampedHoltWinters,
    "mstl": MSTLModel,
    "gbm": GradientBoosting,
    "naive": Naive,
    "theta": Theta,
    "ensemble": lambda: Ensemble(("profile", "mstl", "ets")),
}
