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
"""
from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Self

import numpy as np
import pandas as pd

from forecast.base import Forecaster, future_index, quantile_frame

DAY, WEEK = 24, 168
HALF_LIFE = 2 * WEEK  # hours: a fold two weekly cycles older than the newest counts half


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
    if getattr(model, "calendar", True) is False:  # skip Series slicing and quantile frames: inner folds run often
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


def fold_weights(fold_origins: Sequence[int], half_life: float = HALF_LIFE) -> np.ndarray:
    """Weight of each calibration fold: 1 for the newest, halving every `half_life` hours of age."""
    fold_origins = np.asarray(fold_origins, dtype=float)
    return 0.5 ** ((fold_origins.max() - fold_origins) / half_life) if len(fold_origins) else fold_origins


def weighted_quantile(values: np.ndarray, weights: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """Quantiles of a weighted sample (linear between the weighted mid-ranks)."""
    order = np.argsort(values)
    values, weights = values[order], weights[order]
    ranks = (np.cumsum(weights) - weights / 2) / weights.sum()
    return np.interp(levels, ranks, values)


def conformal_values(point: np.ndarray, residuals: np.ndarray, history: np.ndarray,
                     quantiles: Sequence[float], weights: np.ndarray | None = None) -> np.ndarray:
    """Point plus the weighted residual quantiles (finite-sample widened), one column per quantile.

    `residuals` has one row per calibration fold; `weights` one weight per fold (None: all equal).
    """
    weights = np.ones(len(residuals)) if weights is None else np.asarray(weights, dtype=float)
    finite = np.isfinite(residuals)
    if not finite.any():
        return np.repeat(point[:, None], len(quantiles), axis=1)
    # Split-conformal correction, widening each tail by (n+1)/n, with n the number of folds: errors
    # within a fold move together, so a fold, not an hour, is the exchangeable unit.
    folds = int(finite.any(axis=1).sum())
    levels = np.clip(0.5 + (np.asarray(quantiles, dtype=float) - 0.5) * (folds + 1) / folds, 0.0, 1.0)
    per_value = np.broadcast_to(weights[:, None], residuals.shape)[finite]
    offsets = weighted_quantile(residuals[finite], per_value, levels)
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
        self.weights_ = fold_weights(fold_origins)
        self.history_ = history
        self.fitted_ = make().fit(history)
        self.fallback_reason = getattr(self.fitted_, "fallback_reason", None)
        return self

    def predict(self, horizon: int, quantiles: Sequence[float]) -> pd.DataFrame:
        return calibrated_predict(self.fitted_, self.residuals_, self.history_, horizon, quantiles, self.weights_)


def calibrated_predict(model, residuals: np.ndarray, history: pd.Series, horizon: int,
                       quantiles: Sequence[float], weights: np.ndarray | None = None) -> pd.DataFrame:
    """The fitted model's median path with conformal quantiles from its backtest residuals (one row per fold)."""
    if not np.isfinite(residuals).any():  # too short to calibrate: the model's own intervals
        return model.predict(horizon, quantiles)
    point = model.predict(horizon, [0.5]).to_numpy()[:, 0]
    values = conformal_values(point, residuals, history.to_numpy(dtype=float), quantiles, weights)
    return quantile_frame(future_index(history, horizon), values, quantiles)
