"""The cheap pool's models on the histories they exist for, and the one-pass backtest that keeps them cheap."""
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forecast.models import DAY, WEEK, DampedHoltWinters, SeasonalNaive, Theta, _daily_seasonal, fill_gaps


def daily_cycle(days: int, seed: int = 0, shift_at: int | None = None) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(days * DAY)
    values = 100 + 40 * np.sin(2 * np.pi * t / DAY) + rng.normal(0, 3, len(t))
    if shift_at is not None:
        values[shift_at:] += 80
    return values


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), days=st.integers(1, 40), gaps=st.lists(st.tuples(st.floats(0, 1),
       st.integers(1, 400)), max_size=3), origins=st.lists(st.floats(0, 1), min_size=1, max_size=8))
def test_one_pass_paths_equal_a_fit_at_every_origin(seed, days, gaps, origins):
    values = daily_cycle(days, seed)
    for where, length in gaps:
        start = int(where * len(values))
        values[start:start + length] = np.nan
    cuts = sorted({max(1, int(o * len(values))) for o in origins})
    one_pass = DampedHoltWinters().fold_paths(values, cuts, DAY)
    refits = np.array([DampedHoltWinters().fit_values(values[:o]).point(DAY) for o in cuts])
    np.testing.assert_array_equal(one_pass, refits)


def test_a_gap_longer_than_a_week_chains_back_week_by_week():
    values = daily_cycle(35)
    values[2 * WEEK:4 * WEEK] = np.nan
    np.testing.assert_array_equal(fill_gaps(values)[2 * WEEK:4 * WEEK], np.tile(values[WEEK:2 * WEEK], 2))


def test_holt_winters_follows_a_level_shift_six_hours_old_that_seasonal_naive_carries_for_a_day():
    values = daily_cycle(21, shift_at=21 * DAY - 6)
    model = DampedHoltWinters().fit_values(values)
    assert model.fallback_reason is None
    expected = daily_cycle(22, shift_at=21 * DAY - 6)[-DAY:]  # the same noise stream: the next day as it would be
    hw_error = np.abs(model.point(DAY) - expected).mean()
    naive_error = np.abs(SeasonalNaive(DAY).fit_values(values).point(DAY) - expected).mean()
    assert hw_error < naive_error / 3


def test_holt_winters_says_why_it_falls_back_on_a_single_day():
    model = DampedHoltWinters().fit_values(daily_cycle(1))
    assert "two daily cycles" in model.fallback_reason
    np.testing.assert_array_equal(model.point(DAY), daily_cycle(1))


def test_the_daily_cycle_is_assumed_where_the_m4_test_cannot_see_a_perfect_one():
    perfect = lambda days: 100 + 50 * np.sin(2 * np.pi * np.arange(days * DAY) / DAY)  # noqa: E731
    for days in (2, 3):  # the test's lag-24 autocorrelation is at most (n - 24) / n, under its limit
        assert _daily_seasonal(perfect(days)) is not None
    assert _daily_seasonal(perfect(1)) is None
    flat = 60 + np.cumsum(np.random.default_rng(2).normal(0, 0.3, 10 * DAY))
    assert _daily_seasonal(flat) is None  # from four days on, the test decides
    three_days = daily_cycle(3)
    path = Theta().fit_values(three_days).point(DAY)
    assert np.corrcoef(path, three_days[-DAY:])[0, 1] > 0.9  # a daily shape, not a flat line


def _interrupted_inside_numpy(frame, event, arg):
    """A trace function: Ctrl-C (or SIGTERM, which `headroom train` raises as KeyboardInterrupt) landing while
    numpy parses a buffer's format, as scikit-learn's boosting has it do on every fit."""
    if event == "call" and frame.f_code.co_name == "__dtype_from_pep3118":
        raise KeyboardInterrupt("SIGTERM")
    return None


class _BuffersLikeBoosting(SeasonalNaive):
    def _fit(self, values):
        records = np.zeros(4, dtype=[("sum_gradients", "f8"), ("sum_hessians", "f8"), ("count", "u4")])
        sys.settrace(_interrupted_inside_numpy)
        try:
            np.asarray(memoryview(records))
        finally:
            sys.settrace(None)
        super()._fit(values)


def test_numpy_reports_an_interrupt_inside_it_as_its_own_error():
    """Why the test below exists: numpy raises ValueError ("... not a valid PEP 3118 buffer format string") with
    the interrupt as its cause. Seen in CI: a SIGTERM to `headroom train` read as gbm failing, training went on."""
    records = np.zeros(2, dtype=[("sum_gradients", "f8"), ("count", "u4")])
    sys.settrace(_interrupted_inside_numpy)
    try:
        with pytest.raises(ValueError, match="PEP 3118") as caught:
            np.asarray(memoryview(records))
    finally:
        sys.settrace(None)
    assert isinstance(caught.value.__cause__, KeyboardInterrupt)


def test_an_interrupt_a_library_wraps_stops_a_fit_instead_of_a_fallback():
    history = np.tile(np.arange(DAY, dtype=float), 14)
    with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
        _BuffersLikeBoosting(DAY).fit_values(history)
