"""The one forecaster contract every model follows.

A history is a pandas Series of float demand indexed by a regular, tz-aware
(UTC) DatetimeIndex at the forecast step; NaN marks a missing point (a gap),
never zero. A forecast is a *quantile frame*: one row per future step (the
`horizon` steps right after the history's last timestamp), one float column per
requested quantile, non-decreasing across quantiles and never negative.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, Self, runtime_checkable

import numpy as np
import pandas as pd
from pandas.tseries.frequencies import to_offset


@runtime_checkable
class Forecaster(Protocol):
    name: str

    def fit(self, history: pd.Series) -> Self: ...

    def predict(self, horizon: int, quantiles: Sequence[float]) -> pd.DataFrame: ...


class PointForecaster(Forecaster, Protocol):
    """A forecaster that also gives its bare point path (what an ensemble combines)."""
    @property
    def fallback_reason(self) -> str | None:
        """Why its fit, or its last forecast, fell back to seasonal naive (None: neither did)."""
        ...

    def point(self, horizon: int) -> np.ndarray: ...


class ForecastError(ValueError):
    """A forecast that breaks the contract (NaN, negative, crossing quantiles)."""


def future_index(history: pd.Series, horizon: int) -> pd.DatetimeIndex:
    """The `horizon` timestamps right after the history, at its step."""
    index = history.index
    if index.freq is not None:
        step = pd.Timedelta(to_offset(index.freq))
    else:  # read from a file: no freq, one step between every two timestamps (infer_freq's answer changes in pandas 4)
        steps = (index[1:] - index[:-1]).unique()
        if len(steps) != 1 or steps[0] <= pd.Timedelta(0):
            raise ValueError(f"the history's timestamps have no regular step ({index[0]} .. {index[-1]}, "
                             f"{len(history)} samples); resample it to one step first")
        step = pd.Timedelta(steps[0])
    return pd.date_range(index[-1] + step, periods=horizon, freq=step)


def quantile_frame(index: pd.DatetimeIndex, values: np.ndarray, quantiles: Sequence[float]) -> pd.DataFrame:
    """Build a contract-conforming frame: sorts across quantiles, clips at zero. The quantiles must be asked in
    non-decreasing order: the sorted values are labelled in that order, so [0.5, 0.05] would put q0.05 under 0.5."""
    if any(b < a for a, b in zip(quantiles, quantiles[1:])):
        raise ValueError(f"quantiles must be asked in non-decreasing order, got {list(quantiles)}")
    values = np.clip(np.sort(np.asarray(values, dtype=float), axis=1), 0.0, None)
    return pd.DataFrame(values, index=index, columns=[float(q) for q in quantiles])


def check_quantile_frame(frame: pd.DataFrame, horizon: int, quantiles: Sequence[float]) -> None:
    """Raise ForecastError unless `frame` satisfies the contract."""
    if frame.shape != (horizon, len(quantiles)):
        raise ForecastError(f"expected {horizon}x{len(quantiles)} forecast, got {frame.shape[0]}x{frame.shape[1]}")
    if list(frame.columns) != [float(q) for q in quantiles]:
        raise ForecastError(f"columns {list(frame.columns)} are not the quantiles {list(quantiles)}")
    values = frame.to_numpy(dtype=float)
    if not np.isfinite(values).all():
        raise ForecastError("forecast contains NaN or infinite values")
    if (values < 0).any():
        raise ForecastError("forecast contains negative values")
    if (np.diff(values, axis=1) < -1e-9).any():
        raise ForecastError("forecast quantiles cross (not non-decreasing in q)")
