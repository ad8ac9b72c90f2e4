"""The reference policies' forecasters: one level per hour, the same for every quantile, so the reservation is
that level plus the policy's margin (the baselines `headroom simulate` compares against; ReservationPolicy
`forecaster: seasonal-naive | reactive | static`)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Self

import numpy as np
import pandas as pd

from forecast.base import future_index

WEEK = 168


class _Level:
    name = "level"

    def fit(self, history: pd.Series) -> Self:
        self.history_ = history.astype(float)
        return self

    def levels(self, horizon: int) -> np.ndarray:
        raise NotImplementedError

    def predict(self, horizon: int, quantiles: Sequence[float]) -> pd.DataFrame:
        level = np.clip(self.levels(horizon), 0.0, None)  # NaN stays NaN: the planner falls back there
        return pd.DataFrame(np.repeat(level[:, None], len(quantiles), axis=1),
                            index=future_index(self.history_, horizon), columns=[float(q) for q in quantiles])


class SeasonalNaiveLevel(_Level):
    """The same hour last week."""
    name = "seasonal-naive"

    def levels(self, horizon: int) -> np.ndarray:
        values = self.history_.to_numpy()
        if len(values) < WEEK:
            return np.full(horizon, np.nan)
        return np.array([values[len(values) - WEEK + (h % WEEK)] for h in range(horizon)])


class ReactiveLevel(_Level):
    """The last complete hour, held: it reacts an hour late and knows nothing ahead."""
    name = "reactive"

    def levels(self, horizon: int) -> np.ndarray:
        seen = self.history_.dropna()
        return np.full(horizon, float(seen.iloc[-1]) if len(seen) else np.nan)


class StaticLevel(_Level):
    """The history's peak, all the time."""
    name = "static"

    def levels(self, horizon: int) -> np.ndarray:
        seen = self.history_.dropna()
        return np.full(horizon, float(seen.max()) if len(seen) else np.nan)


BASELINES = {"seasonal-naive": SeasonalNaiveLevel, "reactive": ReactiveLevel, "static": StaticLevel}
