"""Conformal quantiles from rolling-origin residuals.

Residuals are scaled by the forecast level, r = (y - f) / (f + c), with c a
tenth of the series' mean so near-zero night hours do not blow up: diurnal
demand errs in proportion to its level, so one scaled distribution fits both
the night floor and the business-hours peak. The level q of r comes with the
finite-sample conformal correction, so an 80% interval covers at least ~80%
when the future behaves like the recent past.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class ResidualCalibrator:
    def __init__(self, actuals: np.ndarray, points: np.ndarray, level_offset: float):
        """actuals/points: (folds, horizon) arrays from backtests that used only past data."""
        self.offset = max(float(level_offset), 1e-9)
        scaled = (actuals - points) / (np.clip(points, 0.0, None) + self.offset)
        self.scaled = scaled[np.isfinite(scaled)]

    def quantiles(self, point: np.ndarray, quantiles: Sequence[float]) -> np.ndarray:
        """(horizon, len(quantiles)) calibrated quantiles around the point path."""
        n = len(self.scaled)
        if n == 0:
            return np.repeat(point[:, None], len(quantiles), axis=1)
        # Conformal correction: widen each tail by the (n+1)/n factor.
        levels = np.clip(0.5 + (np.asarray(quantiles) - 0.5) * (n + 1) / n, 0.0, 1.0)
        offsets = np.quantile(self.scaled, levels)
        level = np.clip(point, 0.0, None) + self.offset
        return point[:, None] + offsets[None, :] * level[:, None]
