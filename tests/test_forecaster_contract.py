"""Every model, and the calibrated and automatic wrappers, honour the forecaster contract."""
import numpy as np
import pandas as pd
import pytest

from forecast.backtest import AutoForecaster
from forecast.base import check_quantile_frame, future_index
from forecast.calibrate import Calibrated
from forecast.models import MODELS, SeasonalProfile

QUANTILES = [0.1, 0.5, 0.9, 0.99]


def demand(hours: int, seed: int = 0, gaps: bool = False) -> pd.Series:
    """Daily and weekly cycle with noise; optional NaN gaps (one long, some scattered)."""
    rng = np.random.default_rng(seed)
    index = pd.date_range("2026-01-05", periods=hours, freq="h", tz="UTC")
    t = np.arange(hours)
    values = 100 + 40 * np.sin(2 * np.pi * t / 24) + 20 * (index.day_of_week < 5) + rng.normal(0, 5, hours)
    series = pd.Series(values, index=index)
    if gaps:
        series.iloc[hours // 2:hours // 2 + 30] = np.nan
        series.iloc[rng.choice(hours, hours // 20, replace=False)] = np.nan
    return series


HISTORIES = {
    "three_weeks": demand(21 * 24),
    "short": demand(30),
    "gaps": demand(21 * 24, gaps=True),
    "constant": pd.Series(7.0, index=pd.date_range("2026-01-05", periods=10 * 24, freq="h", tz="UTC")),
    "zero": pd.Series(0.0, index=pd.date_range("2026-01-05", periods=10 * 24, freq="h", tz="UTC")),
}
FACTORIES = {**MODELS,
             "calibrated": lambda: Calibrated(SeasonalProfile(), folds=3),
             "auto_fast": lambda: AutoForecaster("fast", folds=3),
             "auto_full": lambda: AutoForecaster("full", folds=2)}


@pytest.mark.parametrize("history", HISTORIES, ids=str)
@pytest.mark.parametrize("model", FACTORIES, ids=str)
def test_contract(model, history):
    series = HISTORIES[history]
    fitted = FACTORIES[model]().fit(series)
    frame = fitted.predict(48, QUANTILES)
    check_quantile_frame(frame, 48, QUANTILES)
    assert frame.index.equals(future_index(series, 48))
    assert isinstance(fitted.name, str) and fitted.name
    if history in ("constant", "zero"):
        assert np.allclose(frame[0.5], series.iloc[-1], atol=1e-6 + 0.01 * series.iloc[-1])
