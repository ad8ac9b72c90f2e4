"""Conformal quantiles from rolling-origin backtest residuals.

A model's own intervals are rough guesses. Here we refit it at a few origins
inside the history (each fit sees only data before its origin), collect the
residuals actual - point of the next `horizon` hours, and use their empirical
quantiles as offsets around the final point forecast. Residuals are relative to
the forecast level (plus a floor of a fifth of the last week's mean), so they
transfer across growth and widen at the peaks where demand errs most.

Demand drifts (launches, quiet weeks), so older folds count less: each fold's
residuals weigh 0.5 ** (age / HALF_LIFE) (two weeks) in a weighted quantile
(the weighted split conformal of Barber et al., 2023, for non-exchangeable data).

The quantile level itself adapts too (adaptive conformal inference, Gibbs &
Candès 2021): replaying the folds oldest first, each fold's residuals are
checked against the quantiles of the folds before it, and every level moves by
ACI_GAMMA x (nominal - observed fraction below). Calm recent days narrow the
intervals, recent misses widen them, and on a stationary series the offset
stays near zero.

The median is the point forecast, and its error is a level error that persists
for days, not weeks: it is scaled by 1 + the recent mean residual (folds weigh
0.5 ** (age / BIAS_HALF_LIFE), two days; the top and bottom BIAS_TRIM of the
weight trimmed so one burst does not move the next day). A mean, not the
median: on traces with near-zero nights half the residuals are ~0 whatever the
daytime error, so their median says nothing. Scaling, not adding, keeps a
zero night at zero. The bounds keep their conformal quantiles, which coverage
needs weeks of residuals for.
"""
from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Self

import numpy as np
import pandas as pd

from forecast.base import Forecaster, future_index, quantile_frame
from forecast.models import PointModel

DAY, WEEK = 24, 168
HALF_LIFE = 2 * WEEK  # hours: a fold two weekly cycles older than the newest counts half
# Step of the ACI level update per fold (Gibbs & Candès' gamma). Folds are few (7-14), so the step is large:
# one fully missed 95% quantile moves it by 0.19. Chosen on the traces' and M4's inner folds, not per trace.
ACI_GAMMA = 0.2
# The median's level correction: half-life and trimmed weight per tail, one setting for every series. Chosen on the
# three traces and M4, where any 24-48 h half-life with 10-25 % trimming or clipping ranked the same against the
# peers (docs/bench-forecast.md says how).
BIAS_HALF_LIFE = 2 * DAY
BIAS_TRIM = 0.1


def origins(n: int, horizon: int, folds: int, step: int, min_train: int = 2 * DAY) -> list[int]:
    """The last `folds` origins `step` apart (oldest first) that leave `horizon` points to score."""
    last = n - horizon
    return [o for o in (last - step * k for k in range(folds - 1, -1, -1)) if o >= min_train]


def level(history: np.ndarray) -> float:
    """Scale for residuals: mean demand of the last week (1.0 for an all-zero or empty window)."""
    recent = history[-WEEK:]
    recent = recent[np.isfinite(recent)]
    value = float(recent.mean()) if len(recent) else 0.0
    return value if value > 0 else 1.0


def point_forecast(make: Callable[[], Forecaster], history: pd.Series, origin: int, horizon: int) -> np.ndarray:
    """Point path of a model fitted on history before `origin`."""
    model = make()
    if isinstance(model, PointModel) and not model.calendar:  # no Series slicing, no quantile frames: folds run often
        return model.fit_values(history.to_numpy(dtype=float)[:origin]).point(horizon)
    return model.fit(history.iloc[:origin]).predict(horizon, [0.5]).to_numpy()[:, 0]


def scaled_residuals(history: pd.Series, points: np.ndarray, fold_origins: Sequence[int]) -> np.ndarray:
    """(actual - point) / level per fold and step; NaN where the actual is missing."""
    values = history.to_numpy(dtype=float)
    horizon = points.shape[1] if points.ndim == 2 else 0
    return np.array([(values[o:o + horizon] - p) / _spread_scale(p, values[:o]) for o, p in zip(fold_origins, points)])


def _spread_scale(point: np.ndarray, history: np.ndarray) -> np.ndarray:
    # Demand errs in proportion to its level; the floor keeps near-zero night hours from blowing up.
    return np.clip(point, 0.0, None) + 0.2 * level(history)


def fold_weights(fold_origins: Sequence[int] | np.ndarray, half_life: float = HALF_LIFE) -> np.ndarray:
    """Weight of each calibration fold: 1 for the newest, halving every `half_life` hours of age."""
    fold_origins = np.asarray(fold_origins, dtype=float)
    return 0.5 ** ((fold_origins.max() - fold_origins) / half_life) if len(fold_origins) else fold_origins


def weighted_quantile(values: np.ndarray, weights: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """Quantiles of a weighted sample (linear between the weighted mid-ranks)."""
    order = np.argsort(values)
    values, weights = values[order], weights[order]
    ranks = (np.cumsum(weights) - weights / 2) / weights.sum()
    return np.interp(levels, ranks, values)


def split_levels(quantiles: Sequence[float] | np.ndarray, folds: int) -> np.ndarray:
    """Split-conformal levels: each tail widened by (n+1)/n, with n the number of folds.

    Errors within a fold move together, so a fold, not an hour, is the exchangeable unit.
    """
    return 0.5 + (np.asarray(quantiles, dtype=float) - 0.5) * (folds + 1) / max(folds, 1)


def aci_levels(residuals: np.ndarray, fold_origins: Sequence[int] | np.ndarray, quantiles: Sequence[float] | np.ndarray,
               gamma: float = ACI_GAMMA) -> np.ndarray:
    """Quantile levels after adaptive conformal inference over the folds (rows of `residuals`, oldest first).

    Fold j is scored against the weighted quantiles of folds < j at the current levels; each level then
    moves by gamma x (nominal - fraction of fold j's residuals below its quantile). The result is the
    split-conformal level for all folds plus that learned offset (it may leave [0, 1]; callers clip).
    The median keeps its split level: it is not a coverage bound (calibrated_predict replaces it by
    level_correction), and adapting it chased noise (worse MASE over nasa's 55 daily folds and on M4 hourly).
    """
    quantiles = np.asarray(quantiles, dtype=float)
    fold_origins = np.asarray(fold_origins)
    residuals = np.atleast_2d(residuals)  # a history too short for any fold gives an empty 1-d array
    finite = np.isfinite(residuals)
    offset = np.zeros(len(quantiles))
    for j in range(2, len(residuals)):  # two earlier folds before a quantile is worth checking
        earlier, new = finite[:j], residuals[j][finite[j]]
        if not len(new) or not earlier.any():
            continue
        weights = np.broadcast_to(fold_weights(fold_origins[:j])[:, None], earlier.shape)[earlier]
        levels = split_levels(quantiles, int(earlier.any(axis=1).sum())) + offset
        bounds = weighted_quantile(residuals[:j][earlier], weights, np.clip(levels, 0.0, 1.0))
        offset += gamma * (quantiles - (new[:, None] <= bounds[None, :]).mean(axis=0))
    offset[quantiles == 0.5] = 0.0
    return split_levels(quantiles, int(finite.any(axis=1).sum())) + offset


def level_correction(residuals: np.ndarray, fold_origins: Sequence[int]) -> float:
    """Recent trimmed mean of the scaled residuals (rows = folds, oldest first): the median is point x (1 + it).

    Above -1, as every scaled residual is: (actual - point) / (point + a floor) > -1 for actual >= 0."""
    finite = np.isfinite(residuals)
    if not finite.any():
        return 0.0
    weights = np.broadcast_to(fold_weights(fold_origins, BIAS_HALF_LIFE)[:, None], residuals.shape)[finite]
    values = residuals[finite]
    low, high = weighted_quantile(values, weights, np.array([BIAS_TRIM, 1.0 - BIAS_TRIM]))
    kept = (values >= low) & (values <= high)
    return float(np.average(values[kept], weights=weights[kept]))


def conformal_values(point: np.ndarray, residuals: np.ndarray, history: np.ndarray,
                     quantiles: Sequence[float], weights: np.ndarray | None = None,
                     levels: np.ndarray | None = None) -> np.ndarray:
    """Point plus the weighted residual quantiles, one column per quantile.

    `residuals` has one row per calibration fold; `weights` one weight per fold (None: all equal);
    `levels` the quantile level to read for each quantile (None: the split-conformal levels).
    """
    weights = np.ones(len(residuals)) if weights is None else np.asarray(weights, dtype=float)
    finite = np.isfinite(residuals)
    if not finite.any():
        return np.repeat(point[:, None], len(quantiles), axis=1)
    if levels is None:
        levels = split_levels(quantiles, int(finite.any(axis=1).sum()))
    per_value = np.broadcast_to(weights[:, None], residuals.shape)[finite]
    offsets = weighted_quantile(residuals[finite], per_value, np.clip(levels, 0.0, 1.0))
    return point[:, None] + _spread_scale(point, history)[:, None] * offsets[None, :]


class Calibrated:
    """Any model with conformal quantiles from `folds` inner rolling origins `step` hours apart."""

    def __init__(self, model: Forecaster, horizon: int = DAY, folds: int = 7, step: int = DAY):
        self.model, self.horizon, self.folds, self.step = model, horizon, folds, step
        self.name = f"cal({model.name})"

    def fit(self, history: pd.Series) -> Self:
        make = lambda: copy.deepcopy(self.model)  # noqa: E731 - a fresh unfitted copy per fold
        fold_origins = origins(len(history), self.horizon, self.folds, self.step)
        points = np.array([point_forecast(make, history, o, self.horizon) for o in fold_origins])
        self.residuals_ = scaled_residuals(history, points.reshape(len(fold_origins), self.horizon), fold_origins)
        self.origins_ = fold_origins
        self.history_ = history
        self.fitted_ = make().fit(history)
        self.fallback_reason = getattr(self.fitted_, "fallback_reason", None)
        return self

    def predict(self, horizon: int, quantiles: Sequence[float]) -> pd.DataFrame:
        return calibrated_predict(self.fitted_, self.residuals_, self.history_, horizon, quantiles, self.origins_)


def calibrated_predict(model, residuals: np.ndarray, history: pd.Series, horizon: int,
                       quantiles: Sequence[float], fold_origins: Sequence[int] | None = None,
                       level_correction: bool = True) -> pd.DataFrame:
    """The fitted model's path with conformal quantiles from its backtest residuals (one row per fold).

    With the folds' `fold_origins`: recency-weighted folds, adaptive levels (`aci_levels`) and the median's
    recent level correction (`level_correction`). Without: equal weights, split-conformal levels and the
    residuals' median, the plain method.
    """
    if not np.isfinite(residuals).any():  # too short to calibrate: the model's own intervals
        return model.predict(horizon, quantiles)
    point = model.predict(horizon, [0.5]).to_numpy()[:, 0]
    values = history.to_numpy(dtype=float)
    if fold_origins is None:
        return quantile_frame(future_index(history, horizon),
                              conformal_values(point, residuals, values, quantiles), quantiles)
    out = conformal_values(point, residuals, values, quantiles, fold_weights(fold_origins),
                           aci_levels(residuals, fold_origins, quantiles))
    median = np.asarray(quantiles, dtype=float) == 0.5
    correction = _level_correction(residuals, fold_origins) if level_correction else 0.0
    out[:, median] = (point * (1 + correction))[:, None]
    return quantile_frame(future_index(history, horizon), out, quantiles)


_level_correction = level_correction  # calibrated_predict's argument of the same name shadows it
