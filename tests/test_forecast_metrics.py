"""forecast.metrics held to what defines each score, not to its own output: the pinball loss is the loss the
q-quantile minimises, sMAPE is symmetric and bounded by 200, and NaN actuals are not scored."""
from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from forecast.metrics import mase, pinball, smape

SAMPLES = st.lists(st.floats(0, 1e4), min_size=1, max_size=40)
QUANTILES = st.sampled_from([0.05, 0.1, 0.5, 0.9, 0.95, 0.99])


@given(SAMPLES, QUANTILES, st.floats(0.1, 100))
def test_the_pinball_loss_is_least_at_the_q_quantile(actual, q, scale):
    """A loss for quantile q is one the sample's q-quantile minimises among constant forecasts; a convex piecewise
    linear loss has its least at one of the sample's values, so those are every candidate to beat."""
    actual = np.array(actual)
    at_quantile = pinball(actual, np.full(len(actual), np.quantile(actual, q, method="inverted_cdf")), q, scale)
    for value in actual:
        assert at_quantile <= pinball(actual, np.full(len(actual), value), q, scale) * (1 + 1e-12) + 1e-12, value


@given(SAMPLES, st.floats(0, 1e4), st.floats(0.1, 100))
def test_pinball_weighs_a_forecast_below_by_q_and_one_above_by_1_minus_q(actual, forecast, scale):
    """Under every actual, a forecast above costs (1 - q) of the gap; over every one, a forecast below costs q; at
    q 0.5 it is half the absolute error MASE takes."""
    actual = np.array(actual)
    gap = np.abs(actual - forecast).mean() / scale
    for q in (0.1, 0.9):
        assert np.isclose(pinball(actual, np.full(len(actual), actual.max() + forecast), q, scale),
                          (1 - q) * (np.abs(actual - actual.max() - forecast).mean() / scale))
        assert np.isclose(pinball(actual, np.full(len(actual), actual.min() - forecast), q, scale),
                          q * (np.abs(actual - actual.min() + forecast).mean() / scale))
    assert np.isclose(pinball(actual, np.full(len(actual), forecast), 0.5, scale), gap / 2)
    assert np.isclose(mase(actual, np.full(len(actual), forecast), scale), gap)


@given(SAMPLES, st.lists(st.floats(0, 1e4), min_size=40, max_size=40))
def test_smape_is_symmetric_and_between_0_and_200(actual, forecast):
    actual, forecast = np.array(actual), np.array(forecast[:len(actual)])
    score = smape(actual, forecast)
    assert 0 <= score <= 200 * (1 + 1e-12) and np.isclose(score, smape(forecast, actual))  # 200 x / x: rounding
    assert smape(actual, actual) == 0
    assert smape(np.zeros(3), np.array([1.0, 5.0, 0.0])) == 200 * 2 / 3  # one side 0: the most; both 0: no error


@given(SAMPLES, st.lists(st.booleans(), min_size=40, max_size=40), QUANTILES)
def test_nan_actuals_are_not_scored(actual, missing, q):
    actual = np.array(actual)
    forecast = actual[::-1] + 1.0
    holed = np.where(missing[:len(actual)], np.nan, actual)
    kept = ~np.isnan(holed)
    for score in (lambda a, f: pinball(a, f, q, 2.0), lambda a, f: mase(a, f, 2.0), smape):
        if kept.any():
            assert score(holed, forecast) == score(actual[kept], forecast[kept])
        else:
            assert np.isnan(score(holed, forecast))
