"""Every model, and the calibrated and automatic wrappers, honour the forecaster contract."""
import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from forecast.backtest import AutoForecaster
from forecast.base import check_quantile_frame, future_index
from forecast.baselines import BASELINES, WEEK
from forecast.calibrate import Calibrated
from forecast.global_model import GlobalForecaster, GlobalPool, GlobalSettings
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


def flat_gauge(hours: int = 10 * 24, seed: int = 2) -> pd.Series:
    """A GPU-in-use gauge: a slow random walk around 60 with no daily cycle."""
    rng = np.random.default_rng(seed)
    values = 60 + np.cumsum(rng.normal(0, 0.3, hours))
    return pd.Series(values, index=pd.date_range("2026-01-05", periods=hours, freq="h", tz="UTC"))


def zero_stretches(hours: int = 14 * 24) -> pd.Series:
    """Token demand with whole stretches of zero (nights and a dead day), not gaps."""
    series = demand(hours, seed=3)
    series[(series.index.hour < 7)] = 0.0
    series.iloc[5 * 24:6 * 24 + 9] = 0.0
    return series


def level_shift(hours: int = 14 * 24) -> pd.Series:
    series = demand(hours, seed=4)
    series.iloc[-3 * 24:] *= 2.0  # demand doubles for the last three days
    return series


HISTORIES = {
    "three_weeks": demand(21 * 24),
    "seven_days": demand(7 * 24, seed=5),
    "seven_days_gappy": demand(7 * 24, seed=6, gaps=True),
    "flat_gauge": flat_gauge(),
    "zero_stretches": zero_stretches(),
    "level_shift": level_shift(),
    "seven_days_less_an_hour": demand(7 * 24 - 1, seed=8),  # snaive168's week, one hour short
    "last_hours_missing": demand(10 * 24, seed=9).pipe(lambda s: s.where(s.index < s.index[-5])),  # a late scrape
    "huge": demand(10 * 24, seed=10) * 1e7,  # a level of 1e9
    "tiny": demand(10 * 24, seed=11) * 1e-8,  # a level of 1e-6 (large units)
    "short": demand(30),
    "gaps": demand(21 * 24, gaps=True),
    "constant": pd.Series(7.0, index=pd.date_range("2026-01-05", periods=10 * 24, freq="h", tz="UTC")),
    "zero": pd.Series(0.0, index=pd.date_range("2026-01-05", periods=10 * 24, freq="h", tz="UTC")),
    # hourly timestamps read from a file carry no freq: the step is inferred (pandas 3 infers "h", no number)
    "no_freq": demand(10 * 24, seed=7).pipe(lambda s: s.set_axis(pd.DatetimeIndex(s.index.astype(str)))),
}
FACTORIES = {**MODELS,
             "calibrated": lambda: Calibrated(SeasonalProfile(), folds=3),
             "global": lambda: GlobalForecaster(GlobalPool({}, GlobalSettings(max_iter=30))),  # one series alone
             "auto_fast": lambda: AutoForecaster("fast", folds=3),
             "auto_full": lambda: AutoForecaster("full", folds=2, calibration_folds=3)}


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


@pytest.mark.parametrize("history", ["seven_days", "gaps", "zero_stretches", "tiny"], ids=str)
@pytest.mark.parametrize("model", FACTORIES, ids=str)
def test_a_quantile_is_the_same_whichever_others_are_asked(model, history):
    """The controller asks the policy's quantiles, the backtest its scored ones, the forecast store its own: q0.9 is
    one value whichever list it is in."""
    fitted = FACTORIES[model]().fit(HISTORIES[history])
    every = fitted.predict(24, QUANTILES)
    for q in QUANTILES:
        pd.testing.assert_series_equal(fitted.predict(24, [q])[q], every[q], check_exact=False, rtol=1e-12)


def test_a_history_without_a_regular_step_is_refused_by_name():
    irregular = demand(10 * 24).drop(demand(10 * 24).index[[5, 50, 51]])
    with pytest.raises(ValueError, match="no regular step"):
        future_index(irregular.set_axis(pd.DatetimeIndex(irregular.index.astype(str))), 24)


POINT_MODELS = [m for m in MODELS if m != "ensemble"]
# The models that know they cannot fit a given history, and why (anything else falling back is a bug).
EXPECTED_FALLBACKS = {("snaive168", "short"), ("snaive168", "seven_days_less_an_hour"), ("gbm", "short"),
                      ("mstl", "short"), ("ets", "short"), ("hw", "short")}


@pytest.mark.parametrize("history", HISTORIES, ids=str)
@pytest.mark.parametrize("model", POINT_MODELS, ids=str)
def test_a_model_falls_back_only_with_a_stated_reason_and_only_when_too_short(model, history):
    """Seven days, a flat gauge, zero stretches, level shifts and gaps are histories to model, not to give up on
    (issue 13: mstl raised UnboundLocalError on a week's early folds, gbm silently returned seasonal naive on
    every series under three weeks)."""
    fitted = MODELS[model]().fit(HISTORIES[history])
    fitted.predict(24, QUANTILES)
    reason = getattr(fitted, "fallback_reason", None)
    if (model, history) in EXPECTED_FALLBACKS:
        assert reason and reason.startswith("too short"), reason
    else:
        assert reason is None, f"{model} fell back on {history}: {reason}"


def test_gbm_learns_a_week_old_cycle_from_one_week():
    """On seven days of a clean daily cycle, gbm's forecast follows the cycle and differs from seasonal naive's
    copy of the last day (the noise is not repeated)."""
    series = demand(7 * 24, seed=7)
    gbm = MODELS["gbm"]().fit(series)
    path = gbm.predict(24, [0.5])[0.5].to_numpy()
    hours = future_index(series, 24).hour.to_numpy()
    weekday = future_index(series, 24).day_of_week < 5
    truth = 100 + 40 * np.sin(2 * np.pi * (np.arange(7 * 24, 8 * 24)) / 24) + 20 * weekday
    assert gbm.fallback_reason is None and gbm.lags(24) == (24, 48)
    assert np.corrcoef(path, truth)[0, 1] > 0.9 and len(set(hours)) == 24
    assert not np.allclose(path, series.iloc[-24:].to_numpy())


def test_mstl_on_the_early_folds_of_a_one_week_real_trace(shared_data):
    """A 7-day slice of a shared trace, backtested as the owner did (5 daily folds): MSTL fits every fold
    with more than two days (it used to raise UnboundLocalError where statsmodels drops every period), and
    says why at two days."""
    from forecast.history import load_history, prepare
    series, _ = prepare(load_history(shared_data / "traces" / "servegen_m_large_hourly.csv"), step="1h",
                        statistic="mean", outlier_factor=None)
    week = series.iloc[:7 * 24]
    for hours in (49, 72, 96, 120, 144, 168):
        fitted = MODELS["mstl"]().fit(week.iloc[:hours])
        check_quantile_frame(fitted.predict(24, QUANTILES), 24, QUANTILES)
        assert fitted.fallback_reason is None, (hours, fitted.fallback_reason)
    short = MODELS["mstl"]().fit(week.iloc[:48])
    assert "more than two daily cycles" in short.fallback_reason


@pytest.mark.parametrize("model", FACTORIES, ids=str)
def test_quantiles_asked_out_of_order_are_refused_not_mislabelled(model):
    """The values are sorted across the quantiles and labelled in the order asked: [0.5, 0.05] would have put the
    q0.05 value under 0.5."""
    fitted = FACTORIES[model]().fit(HISTORIES["gaps"])
    with pytest.raises(ValueError, match="non-decreasing order"):
        fitted.predict(24, [0.5, 0.05])
    frame = fitted.predict(24, [0.5, 0.5, 0.9])  # a target and a headroom quantile may be equal
    assert (frame[0.9].to_numpy() >= frame.iloc[:, 0].to_numpy()).all()


@given(st.integers(1, 400).flatmap(lambda n: st.lists(st.floats(0, 1e4) | st.just(float("nan")), min_size=n,
                                                     max_size=n)), st.integers(1, 400))  # a length, then values: a
# list strategy alone seldom draws one as long as a week
def test_the_reference_levels_are_last_weeks_hour_the_last_hour_seen_and_the_peak(values, horizon):
    """The baselines `simulate` compares against, each the same for every quantile: seasonal-naive the same hour a
    week before (none without a week), reactive the last hour seen, static the history's peak."""
    history = pd.Series(values, index=pd.date_range("2026-01-05", periods=len(values), freq="h", tz="UTC"))
    seen = history.dropna()
    week_ago = [values[len(values) - WEEK + h % WEEK] for h in range(horizon)] if len(values) >= WEEK else [np.nan]
    expected = {"seasonal-naive": week_ago, "reactive": [seen.iloc[-1] if len(seen) else np.nan],
                "static": [seen.max() if len(seen) else np.nan]}
    for name, levels in expected.items():
        frame = BASELINES[name]().fit(history).predict(horizon, [0.5, 0.99])
        assert frame.index.equals(future_index(history, horizon)), name
        for q in (0.5, 0.99):
            np.testing.assert_array_equal(frame[q].to_numpy(), np.broadcast_to(levels, horizon), err_msg=name)
