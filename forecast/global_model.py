"""A model learned across series: gradient boosting on normalised lags and calendar features (issue 13).

One HistGradientBoostingRegressor sees every series of a pool at once, so a daily or weekly shape that many
series share is learned from all of their examples, not from one series' few weeks (how the strong M4 hourly
entries won). Each example is one (series, origin, step ahead): the window before the origin divided by its
level (the mean of its last week, so the trees see shapes, not levels), the step ahead, the target's hour of day
and day of week, and the target divided by the same level. A direct model: every lag is at or before the origin,
so one model serves every step of the horizon it was fitted for without feeding forecasts back in. NaN (a gap, or
a lag before the series' start) stays NaN: the trees route missing values themselves.

`GlobalBoosting` is the pooled learner (arrays in, point paths out); `GlobalForecaster` is one series' view of it
behind the forecaster contract (forecast/base.py): its `fit` learns from the pool cut at the history's last
timestamp, so in a backtest it never sees any series' data after the origin. Its quantiles are a PointModel's;
calibrated ones come from forecast/calibrate.py like every model's.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Self

import numpy as np
import pandas as pd

from forecast.calibrate import level
from forecast.history import clip_outliers
from forecast.models import DAY, WEEK, PointModel, TooShort


@dataclass(frozen=True)
class GlobalSettings:
    """Hyper-parameters. The defaults are bench/forecast_bench.py's pick on M4 hourly's even series only
    (docs/bench-forecast.md lists the grid and the scores)."""
    horizon: int = 48           # the longest step ahead it is fitted for
    recent_lags: int = 48       # the last hours before the origin
    same_hour_days: int = 7     # the target's hour on the last whole days before the origin
    weeks_back: int = 2         # the target's hour of the week, 1..weeks_back weeks earlier
    max_iter: int = 300
    learning_rate: float = 0.1
    max_leaf_nodes: int = 31
    origin_step: int = 24       # hours between the training origins of a series
    max_rows: int = 400_000     # at most this many rows (a random sample of origins) for 1,000 series and more
    calendar: bool = True       # hour of day and day of week of the target (by position when there are no dates)


def _lookback(settings: GlobalSettings) -> int:
    return max(settings.recent_lags, WEEK * settings.weeks_back, DAY * (settings.same_hour_days + 1), WEEK)


def _rows(values: np.ndarray, origins: np.ndarray, steps: np.ndarray, phase: np.ndarray,
          settings: GlobalSettings) -> tuple[np.ndarray, np.ndarray]:
    """Features for every (origin, step) pair (origin-major) and the level of each origin. `phase` gives each
    position's hour of the week."""
    pad = _lookback(settings)
    padded = np.concatenate([np.full(pad, np.nan), values, np.full(settings.horizon, np.nan)])
    levels = np.array([level(padded[pad + o - WEEK:pad + o]) for o in origins])
    o = np.repeat(origins, len(steps)) + pad  # padded position of each row's origin
    h = np.tile(steps, len(origins))
    target = o + h - 1
    scale = np.repeat(levels, len(steps))
    columns = [h.astype(float)]
    columns += [padded[o - lag] / scale for lag in range(1, settings.recent_lags + 1)]
    first_day = -(-h // DAY)  # the nearest whole day back that is at or before the origin
    columns += [padded[target - DAY * (first_day + k)] / scale for k in range(settings.same_hour_days)]
    columns += [padded[target - WEEK * w] / scale for w in range(1, settings.weeks_back + 1)]
    last_day = padded[o[:, None] - np.arange(1, DAY + 1)]
    count = np.isfinite(last_day).sum(axis=1)
    columns += [np.where(count > 0, np.nansum(last_day, axis=1) / np.maximum(count, 1), np.nan) / scale]
    if settings.calendar:
        hour_of_week = np.concatenate([np.zeros(pad), phase, phase[-1] + 1 + np.arange(settings.horizon)]) % WEEK
        columns += [hour_of_week[target] % DAY, hour_of_week[target] // DAY]
    return np.column_stack(columns), levels


def _phase(history: pd.Series | np.ndarray) -> np.ndarray:
    """Each position's hour of the week: from the timestamps when there are any, else the position itself."""
    if isinstance(history, pd.Series) and isinstance(history.index, pd.DatetimeIndex):
        return (history.index.day_of_week * DAY + history.index.hour).to_numpy()
    return np.arange(len(history))


class GlobalBoosting:
    """The pooled learner: `fit_many` on many series, `paths` for any of them (or new ones) from their histories."""

    def __init__(self, settings: GlobalSettings | None = None, seed: int = 0):
        self.settings = settings or GlobalSettings()
        self.seed = seed

    def fit_many(self, histories: Sequence[pd.Series | np.ndarray]) -> Self:
        """Fit on every origin `origin_step` apart with a week (a day on a shorter series) before it and a full horizon
        of actuals after it."""
        from sklearn.ensemble import HistGradientBoostingRegressor

        s = self.settings
        steps = np.arange(1, s.horizon + 1)
        series = [(history, np.asarray(history, dtype=float)) for history in histories]
        # From a week in where the series has one (rows with a week of lags: M4's even half, docs/bench-forecast.md)
        origins = [np.arange(len(v) - s.horizon, (WEEK if len(v) >= WEEK + s.horizon else DAY) - 1,
                             -s.origin_step)[::-1] for _, v in series]
        which = np.repeat(np.arange(len(series)), [len(o) for o in origins])
        if len(which) * s.horizon > s.max_rows:  # a random sample of origins, drawn before any row is built
            drawn = np.zeros(len(which), dtype=bool)
            drawn[np.random.default_rng(self.seed).choice(len(which), s.max_rows // s.horizon, replace=False)] = True
            origins = [o[drawn[which == i]] for i, o in enumerate(origins)]
        features, targets = [], []
        for (history, values), kept in zip(series, origins):
            if not len(kept):
                continue
            x, levels = _rows(values, kept, steps, _phase(history), s)
            features.append(x)
            targets.append(values[np.add.outer(kept, steps - 1).ravel()] / np.repeat(levels, len(steps)))
        if not features:
            raise TooShort(f"the global model needs a series of a day and a horizon ({DAY + s.horizon} points)")
        x, y = np.concatenate(features), np.concatenate(targets)
        keep = np.isfinite(y)
        x[:, ~np.isfinite(x).any(axis=0)] = 0.0  # a lag no series reaches back to (sklearn cannot bin all-NaN)
        calendar = [x.shape[1] - 2, x.shape[1] - 1] if s.calendar else []
        self.model_ = HistGradientBoostingRegressor(
            loss="absolute_error", max_iter=s.max_iter, learning_rate=s.learning_rate,
            max_leaf_nodes=s.max_leaf_nodes, categorical_features=calendar or None, random_state=self.seed)
        self.model_.fit(x[keep], y[keep])
        self.rows_ = int(keep.sum())
        return self

    def paths(self, histories: Sequence[pd.Series | np.ndarray], horizon: int) -> np.ndarray:
        """The median path of the next `horizon` steps after each history (rows = histories), never negative."""
        if horizon > self.settings.horizon:
            raise ValueError(f"fitted for a horizon of {self.settings.horizon}, asked for {horizon}")
        steps = np.arange(1, horizon + 1)
        out = np.empty((len(histories), horizon))
        for i, history in enumerate(histories):
            values = np.asarray(history, dtype=float)
            x, levels = _rows(values, np.array([len(values)]), steps, _phase(history), self.settings)
            out[i] = self.model_.predict(x) * levels[0]
        return np.clip(out, 0.0, None)


class GlobalPool:
    """The series trained together, and the pooled learner fitted on them up to each cut time (cached: every
    series' backtest fold at one origin shares one fit)."""

    def __init__(self, series: Mapping[str, pd.Series], settings: GlobalSettings | None = None,
                 outlier_factor: float | None = None):
        self.series = dict(series)
        self.settings = settings or GlobalSettings()
        self.outlier_factor = outlier_factor  # the series as read, each cut clipped by its own bound (None: not)
        self._fits: dict[pd.Timestamp, GlobalBoosting] = {}

    def __deepcopy__(self, memo: dict) -> GlobalPool:
        return self  # shared by every copy of a forecaster (calibrate copies the model per fold), so is its cache

    def learner(self, until: pd.Timestamp, extra: pd.Series | None = None) -> GlobalBoosting:
        """The learner fitted on every series' points up to `until` (and `extra`, a series not in the pool)."""
        if extra is None and until in self._fits:
            return self._fits[until]
        cut = [s.loc[:until] for s in self.series.values()]
        if self.outlier_factor is not None:  # as each series' own fit at `until` would be: no bound saw later hours
            cut = [clip_outliers(s, self.outlier_factor)[0] for s in cut]
        cut += [extra] if extra is not None else []
        fitted = GlobalBoosting(self.settings).fit_many(cut)
        if extra is None:
            self._fits[until] = fitted
        return fitted


class GlobalForecaster(PointModel):
    """One series' forecast from the pooled learner, behind the forecaster contract.

    `fit(history)` uses the pool's learner fitted up to the history's last timestamp (the history itself is the
    pool's series of that name, or added to the pool when it is not one); without a pool it learns from the history
    alone. No series of a day and a horizon: TooShort, and seasonal naive with that reason.
    """
    name = "global"
    calendar = True

    def __init__(self, pool: GlobalPool | None = None, series_name: str | None = None):
        self.pool = pool or GlobalPool({})
        self.series_name = series_name

    def _fit(self, values: np.ndarray) -> None:
        history = getattr(self, "history_", None)
        if not isinstance(history, pd.Series) or len(history) != len(values):  # bare values: no time to cut the pool at
            self.dated_ = None
            self.learner_ = GlobalBoosting(self.pool.settings).fit_many([values])
            return
        self.dated_ = pd.Series(values, index=history.index)  # gaps filled, as every model fits
        extra = None if self.series_name in self.pool.series else self.dated_
        self.learner_ = self.pool.learner(history.index[-1], extra)

    def _path(self, horizon: int) -> np.ndarray:
        return self.learner_.paths([self.values_ if self.dated_ is None else self.dated_], horizon)[0]
