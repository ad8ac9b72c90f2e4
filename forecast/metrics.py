"""Forecast accuracy metrics, scored only on real (non-NaN) actuals.

Definitions follow the M4 competition: MASE is scaled by the mean absolute
seasonal difference of the fitting window, sMAPE is 200*|y-f|/(|y|+|f|).
Pinball losses use the same scale as MASE so they compare across series.
"""
from __future__ import annotations

import numpy as np


def _real(actual, *others):
    actual = np.asarray(actual, dtype=float)
    mask = np.isfinite(actual)
    return (actual[mask], *(np.asarray(o, dtype=float)[mask] for o in others))


# Seasonal changes this small relative to the window's largest value are rounding, not change: a load generator's
# exact daily repeat, read through float arithmetic (a rate, a mean), differs from day to day by ~1e-16 of its level
ROUNDING = 1e-9


def seasonal_scale(train, season: int = 24) -> float:
    """Mean absolute seasonal difference of the fitting window (NaN pairs skipped); NaN where it is 0 or rounding
    (ROUNDING): dividing by a rounding error scored a noise-free daily cycle's errors as MASEs of 1e15."""
    train = np.asarray(train, dtype=float)
    if len(train) <= season:
        diffs = np.diff(train)
    else:
        diffs = train[season:] - train[:-season]
    diffs = np.abs(diffs[np.isfinite(diffs)])
    scale = float(diffs.mean()) if len(diffs) else float("nan")
    return scale if scale > ROUNDING * float(np.nanmax(np.abs(train), initial=0.0)) else float("nan")


def mase(actual, point, scale: float) -> float:
    actual, point = _real(actual, point)
    return float(np.mean(np.abs(actual - point)) / scale) if len(actual) else float("nan")


def smape(actual, point) -> float:
    actual, point = _real(actual, point)
    denom = np.abs(actual) + np.abs(point)
    terms = np.where(denom > 0, 200.0 * np.abs(actual - point) / np.where(denom > 0, denom, 1.0), 0.0)
    return float(terms.mean()) if len(actual) else float("nan")


def pinball(actual, quantile_forecast, q: float, scale: float) -> float:
    actual, f = _real(actual, quantile_forecast)
    diff = actual - f
    loss = np.maximum(q * diff, (q - 1.0) * diff)
    return float(loss.mean() / scale) if len(actual) else float("nan")


def coverage(actual, lower, upper) -> float:
    actual, lower, upper = _real(actual, lower, upper)
    return float(np.mean((actual >= lower) & (actual <= upper))) if len(actual) else float("nan")


def finite_or_none(value: float) -> float | None:
    """A score as JSON and MLflow can hold it: the float, or None where it is NaN or infinite."""
    return float(value) if np.isfinite(value) else None
