"""training.realized by hand-worked cases: the 80 % band's hit needs the actual inside both its ends, and drift is a
window's mean scaled error above the factor times the backtest's MASE, not merely above the MASE."""
import numpy as np
import pandas as pd
import pytest

from training.realized import detect_drift, realized_errors

HOURS = pd.date_range("2026-03-02", periods=3, freq="h", tz="UTC")


def test_the_80_percent_band_holds_an_actual_only_between_its_two_ends():
    frame = pd.DataFrame({0.1: [10.0] * 3, 0.5: [20.0] * 3, 0.9: [30.0] * 3}, index=HOURS)
    actuals = pd.Series([5.0, 20.0, 35.0], index=HOURS)  # under the band, inside it, over it
    errors = realized_errors({HOURS[0]: frame}, actuals, scale=5.0, horizons=(1, 2, 3))
    assert errors["inside_80"].tolist() == [0.0, 1.0, 0.0]
    assert errors["below_q0.9"].tolist() == [1.0, 1.0, 0.0] and errors["below_q0.1"].tolist() == [1.0, 0.0, 0.0]
    assert errors["scaled_error"].tolist() == [3.0, 0.0, 3.0]  # |actual - median| / scale


def test_drift_is_the_window_s_mean_above_factor_times_the_baseline():
    """Backtest MASE 1.0, factor 1.5, a window of 3: horizon 1's last three hours average 1.2 (worse than the
    backtest, not by the factor; the 10s before them are out of the window), horizon 6's average 1.6, horizon 24
    has two hours, fewer than the window."""
    targets = pd.date_range("2026-03-02", periods=5, freq="h", tz="UTC")
    rows = [(1, t, e) for t, e in zip(targets, [10.0, 10.0, 1.2, 1.2, 1.2])]
    rows += [(6, t, e) for t, e in zip(targets[2:], [1.5, 1.6, 1.7])]
    rows += [(24, t, 9.0) for t in targets[3:]]
    errors = pd.DataFrame(rows, columns=["horizon", "target", "scaled_error"]).sample(frac=1.0, random_state=1)
    (event,) = detect_drift("chat", errors, baseline=1.0, factor=1.5, window=3)
    assert (event.horizon, event.window, event.at) == (6, 3, targets[-1].isoformat())
    assert event.realized == pytest.approx(1.6) and (event.baseline, event.factor) == (1.0, 1.5)
    assert [e.horizon for e in detect_drift("chat", errors, baseline=1.0, factor=1.1, window=3)] == [1, 6]
    assert detect_drift("chat", errors, baseline=np.nan, factor=1.5, window=3) == []  # no backtest MASE: no baseline
