"""The forecaster contract on odd histories, drawn: the kinds an SRE meets (a nearly flat gauge, token traces with
zero stretches, level shifts, bursts every two hours, a nightly collection gap, a last day missing, integer counts,
constant, near-zero and huge levels), at lengths from a day to five weeks, on indexes with and without a freq or a
zone. tests/test_forecaster_contract.py holds the fixed examples; these draw what they miss."""
from __future__ import annotations

import json
import logging

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cli.main import main
from forecast.backtest import AutoForecaster
from forecast.base import check_quantile_frame, future_index
from forecast.calibrate import Calibrated
from forecast.models import DAY, MODELS, Ensemble, SeasonalProfile

QUANTILES = [0.05, 0.1, 0.5, 0.9, 0.95, 0.99]
KINDS = ("cycle", "flat", "constant", "zero", "counts", "bursts", "gauge")
LEVELS = (1e-9, 1e-3, 1.0, 100.0, 1e9)


@st.composite
def histories(draw, min_hours: int = DAY, max_hours: int = 35 * DAY, zoned: bool = False) -> pd.Series:
    """An hourly demand history of one of KINDS, with what real ones add: zero stretches, a level shift, a spike,
    gaps at the start, the middle, the end and every night."""
    hours = draw(st.integers(min_hours, max_hours))
    kind, level = draw(st.sampled_from(KINDS)), draw(st.sampled_from(LEVELS))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 16)))
    t = np.arange(hours)
    values = {"cycle": lambda: level * (1 + 0.5 * np.sin(2 * np.pi * t / DAY)) + rng.normal(0, 0.05 * level, hours),
              "flat": lambda: level + rng.normal(0, 1e-6 * level, hours),  # a GPU-in-use gauge that hardly moves
              "constant": lambda: np.full(hours, level),
              "zero": lambda: np.zeros(hours),
              "counts": lambda: rng.poisson(draw(st.sampled_from([0.05, 0.5, 3.0])), hours).astype(float),
              "bursts": lambda: np.where(t % 2 == 0, level, 0.0),  # a burst every two hours, on the hour
              "gauge": lambda: level + np.cumsum(rng.normal(0, 0.01 * level, hours))}[kind]()
    values = np.clip(values, 0.0, None)
    if kind not in ("constant", "zero"):
        for _ in range(draw(st.integers(0, 2))):
            start = draw(st.integers(0, hours - 1))
            values[start:start + draw(st.integers(1, 3 * DAY))] = 0.0
        if draw(st.booleans()):
            values[draw(st.integers(0, hours - 1)):] *= draw(st.sampled_from([0.0, 0.2, 3.0, 10.0]))
        if draw(st.booleans()):
            values[draw(st.integers(0, hours - 1))] = 1e3 * max(level, 1.0)
    for where, length in draw(st.lists(st.tuples(st.sampled_from(["start", "middle", "end", "night"]),
                                                 st.integers(1, 2 * DAY)), max_size=2)):
        if where == "start":
            values[:length] = np.nan
        elif where == "end":  # the last day(s) not collected yet
            values[-length:] = np.nan
        elif where == "night":  # a nightly collection gap
            values[t % DAY == 3] = np.nan
        else:
            start = draw(st.integers(0, hours - 1))
            values[start:start + length] = np.nan
    if np.isfinite(values).sum() < 2:
        values[-2:] = level
    index = pd.date_range("2026-01-05", periods=hours, freq="h", tz="UTC")
    shape = "zoned" if zoned else draw(st.sampled_from(["zoned", "no freq", "tz-naive"]))
    if shape == "no freq":  # as read from a file: the step is inferred
        index = pd.DatetimeIndex(list(index))
    elif shape == "tz-naive":
        index = index.tz_localize(None)
    return pd.Series(values, index=index, name="demand")


FACTORIES = {**MODELS,
             "calibrated": lambda: Calibrated(SeasonalProfile(), folds=3),
             "auto_fast": lambda: AutoForecaster("fast", folds=3),
             "auto_full": lambda: AutoForecaster("full", folds=2, calibration_folds=3)}
SLOW = {"ets", "mstl", "gbm", "ensemble", "auto_full"}  # statsmodels or sklearn fits: fewer examples


def examples(model: str) -> settings:
    return settings(max_examples=8 if model in SLOW else 25, deadline=None)


def fit_predict(model: str, history: pd.Series, horizon: int = DAY):
    fitted = FACTORIES[model]().fit(history)
    return fitted, fitted.predict(horizon, QUANTILES)


@pytest.mark.parametrize("model", FACTORIES, ids=str)
def test_every_forecaster_honours_the_contract_on_odd_histories(model):
    """Finite, non-negative, quantiles non-decreasing, on the future index, the same twice; a fallback says why."""
    @examples(model)
    @given(history=histories())
    def check(history):
        fitted, frame = fit_predict(model, history)
        check_quantile_frame(frame, DAY, QUANTILES)
        assert frame.index.equals(future_index(history, DAY))
        pd.testing.assert_frame_equal(frame, fit_predict(model, history)[1])
        if getattr(fitted, "_fit_failed", False):
            assert fitted.fallback_reason
        assert_fallbacks_are_stated(fitted)

    check()


def inner_models(fitted) -> list:
    """The fitted models a wrapper forecasts with: an ensemble's members, auto's pick (its members when an ensemble),
    calibrated's model; none for a model of its own."""
    if isinstance(fitted, Ensemble):
        return list(fitted.fitted_)
    if isinstance(fitted, AutoForecaster | Calibrated):
        inner = fitted.model_ if isinstance(fitted, AutoForecaster) else fitted.fitted_
        return inner_models(inner) if isinstance(inner, Ensemble) else [inner]
    return []


def assert_fallbacks_are_stated(fitted) -> None:
    """Every inner model that fell back is named in the wrapper's fallback_reason (auto, calibrated, an ensemble)."""
    for inner in inner_models(fitted):
        if inner.fallback_reason:
            assert fitted.fallback_reason and inner.fallback_reason in fitted.fallback_reason


@pytest.mark.parametrize("model", FACTORIES, ids=str)
@pytest.mark.parametrize("level", [0.0, 1e-9, 3e-6, 0.3, 7.0, 1e9])
@pytest.mark.parametrize("days", [3, 7, 17])
def test_the_band_of_a_constant_history_holds_the_constant(model, level, days):
    """ets and mstl fit a constant as the constant plus rounding noise (7 + 2e-15), outside the zero-width band the
    day-over-day errors give: `headroom backtest` reported ets covering 10 % of a constant history."""
    history = pd.Series(level, index=pd.date_range("2026-01-05", periods=days * DAY, freq="h", tz="UTC"))
    frame = fit_predict(model, history)[1]
    assert (frame[QUANTILES[0]] <= level).all() and (frame[QUANTILES[-1]] >= level).all(), frame.iloc[0].tolist()
    assert np.allclose(frame[0.5], level, rtol=1e-12, atol=0.0)


@settings(max_examples=25, deadline=None)
@given(history=histories(min_hours=2 * DAY))
def test_autos_name_candidates_and_model_are_what_it_predicts_with(history):
    """auto's name is its pick, the pick is made of its candidates, and its median is the pick's path (times the
    level correction, one factor for every hour)."""
    auto = AutoForecaster("fast", folds=3).fit(history)
    assert auto.name == f"auto({auto.chosen})" and auto.model_.name == auto.chosen
    members = auto.model_.members if isinstance(auto.model_, Ensemble) else (auto.chosen,)
    assert set(members) <= set(auto.candidates)
    if isinstance(auto.model_, Ensemble) and auto.model_.weights is not None:
        assert (auto.model_.weights > 0).all()  # a member named is a member that counts
    point = auto.model_.point(DAY)
    median = auto.predict(DAY, [0.5])[0.5].to_numpy()
    busy = point > 1e-9 * max(point.max(), 1e-300)
    if busy.any():
        ratio = median[busy] / point[busy]
        assert np.allclose(ratio, ratio[0], rtol=1e-9)
    assert np.all(median[~busy] <= 1e-9 * max(point.max(), 1e-300) * 2)


def write_csv(history: pd.Series, path) -> None:
    pd.DataFrame({"timestamp": history.index.strftime("%Y-%m-%dT%H:%M:%SZ"), "value": history.to_numpy()}) \
        .to_csv(path, index=False)


def _answer_or_why(command: list[str], history: pd.Series, tmp_path, capsys) -> dict | None:
    """`headroom COMMAND HISTORY.csv FLAGS --json` on `history`: its JSON, or None when it refused with exit 1 or 2
    naming the file; never a traceback."""
    name, *flags = command
    path = tmp_path / "history.csv"
    write_csv(history, path)
    logging.disable(logging.WARNING)  # models' own fallbacks log; the command's output is what is checked
    try:
        status = main([name, str(path), *flags])
    finally:
        logging.disable(logging.NOTSET)
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    if status != 0:
        assert status in (1, 2) and str(path) in captured.err, captured.err
        return None
    return json.loads(captured.out)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=histories(min_hours=2 * DAY, max_hours=10 * DAY, zoned=True))
def test_the_forecast_command_answers_an_odd_history_or_says_why(history, tmp_path, capsys):
    out = _answer_or_why(["forecast", "--horizon", "24", "--json"], history, tmp_path, capsys)
    if out is None:
        return
    assert {"model", "cleaning", "notes", "forecast"} <= set(out) and out["model"].startswith("auto(")
    rows = [[row[f"q{q:g}"] for q in (0.5, 0.9, 0.99)] for row in out["forecast"]]
    assert len(rows) == 24 and np.isfinite(rows).all() and (np.diff(rows, axis=1) >= 0).all()
    assert (np.asarray(rows) >= 0).all()


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=histories(min_hours=3 * DAY, max_hours=9 * DAY, zoned=True))
def test_the_backtest_command_answers_an_odd_history_or_says_why(history, tmp_path, capsys):
    out = _answer_or_why(["backtest", "--horizon", "24", "--folds", "7", "--step", "24", "--json"], history, tmp_path,
                         capsys)
    if out is None:
        return
    assert {"history", "horizon", "folds", "selected", "models", "timezone", "notes"} <= set(out)
    assert set(out["models"]) == {*MODELS, "auto"}
    for scores in out["models"].values():
        assert all(v is None or np.isfinite(v) for v in scores.values())
        if scores["mase"] is None:  # a null with its reason
            assert any(n.startswith(("mase and pinball_* are null", "every score is null")) for n in out["notes"])


def test_the_commands_say_which_model_fell_back_and_why_a_score_is_null(tmp_path, capsys):
    """Three days of a constant gauge: the weekly seasonal naive is seasonal naive there, mstl and gbm are in the
    first fold, and MASE has no scale. `forecast` named auto's pick as if it all fit and `backtest` printed null
    scores and fallen-back models under their own names, with no word of either."""
    path = tmp_path / "gauge.csv"
    write_csv(pd.Series(7.0, index=pd.date_range("2026-01-05", periods=3 * DAY, freq="h", tz="UTC")), path)
    assert main(["forecast", str(path), "--horizon", "24", "--json"]) == 0
    captured = capsys.readouterr()
    said = [n for n in json.loads(captured.out)["notes"] if "fallback to seasonal naive" in n]
    assert len(said) == 1 and "snaive168: too short: needs 168 points, has 72" in said[0] and said[0] in captured.err
    assert main(["backtest", str(path), "--horizon", "24", "--json"]) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert out["models"]["snaive24"]["mase"] is None and out["models"]["snaive24"]["coverage_90"] == 1.0
    assert any(n.startswith("mase and pinball_* are null") for n in out["notes"])
    fell_back = {n.split(":")[0] for n in out["notes"] if "fallback to seasonal naive" in n}
    assert fell_back == {"snaive168", "mstl", "gbm", "ensemble", "auto"}
    assert all(n in captured.err for n in out["notes"])


@pytest.mark.parametrize("output", ["--json", "--csv"])
def test_the_forecast_of_demand_in_large_units_is_not_printed_as_zero(output, tmp_path, capsys):
    """Demand counted in large units (1e-6 of one per hour) printed as 0.0 to four decimals: a band that holds
    nothing of a constant history, and a zero forecast for a planner reading it."""
    path = tmp_path / "tiny.csv"
    write_csv(pd.Series(3e-6, index=pd.date_range("2026-01-05", periods=7 * DAY, freq="h", tz="UTC")), path)
    assert main(["forecast", str(path), "--horizon", "3", output]) == 0
    out = capsys.readouterr().out
    rows = ([[row[k] for k in ("q0.5", "q0.9", "q0.99")] for row in json.loads(out)["forecast"]] if output == "--json"
            else [[float(v) for v in line.split(",")[2:]] for line in out.splitlines()[1:]])
    assert rows == [[3e-6] * 3] * 3


def test_a_forecast_too_long_for_the_history_leaves_the_next_one_as_it_was():
    """gbm's lags at 300 h ahead need more than ten days: that forecast falls back, with its reason. It also marked
    the fitted model failed, so every later forecast, 24 h ahead as before, was seasonal naive's."""
    history = pd.Series(100 + 40 * np.sin(2 * np.pi * np.arange(10 * DAY) / DAY),
                        index=pd.date_range("2026-01-05", periods=10 * DAY, freq="h", tz="UTC"))
    model = MODELS["gbm"]().fit(history)
    before = model.predict(DAY, QUANTILES)
    assert model.fallback_reason is None
    model.predict(300, QUANTILES)
    assert model.fallback_reason == "too short: gbm at horizon 300 needs 360 points, has 240"
    pd.testing.assert_frame_equal(model.predict(DAY, QUANTILES), before)
    assert model.fallback_reason is None


def test_a_short_historys_capped_quantiles_are_said_to_come_from_its_refits(tmp_path, capsys):
    """Under five daily folds the bands come from refits every 6 h, but the note credited "the largest error 4
    calibration folds showed" (0 folds on three days)."""
    path = tmp_path / "week.csv"
    write_csv(pd.Series(7.0, index=pd.date_range("2026-01-05", periods=7 * DAY, freq="h", tz="UTC")), path)
    assert main(["forecast", str(path), "--horizon", "24", "--json"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert len(notes) == 1 and "the largest error shown by the model's refits every 6 h (a history with 4 daily " \
        "calibration folds, under 5, has its bands from them)" in notes[0]


def test_bands_a_two_day_history_cannot_calibrate_are_said_to_be_the_models_own(tmp_path, capsys):
    """Two days with forecast's default 48 h horizon leave no refit with a whole horizon after the first day, so the
    bands are the candidates' own, uncalibrated, and nothing said so; with --horizon 24 one refit calibrates them."""
    hours = np.arange(2 * DAY)
    path = tmp_path / "two-days.csv"
    write_csv(pd.Series(100 + 40 * np.sin(2 * np.pi * hours / DAY) + 7 * np.cos(hours * 1.3),
                        index=pd.date_range("2026-01-05", periods=2 * DAY, freq="h", tz="UTC")), path)
    assert main(["forecast", str(path), "--json"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert any(n.startswith("the bands are the models' own, not calibrated: 48 h of history leave no refit with a "
                            "whole 48 h horizon") for n in notes), notes
    assert main(["forecast", str(path), "--horizon", "24", "--json"]) == 0
    assert not any("not calibrated" in n for n in json.loads(capsys.readouterr().out)["notes"])


def test_a_noise_free_daily_cycle_scores_null_with_its_reason_not_a_mase_of_1e15():
    """A load generator's exact daily cycle differs from one day to the next only by rounding (1e-14): MASE divided
    by that, and the last value held scored 1.5e15, auto 1.6e14, promoted by `headroom train` as a real score."""
    from forecast.backtest import backtest

    history = pd.Series(100 + 40 * np.sin(2 * np.pi * np.arange(7 * DAY) / DAY),
                        index=pd.date_range("2026-01-05", periods=7 * DAY, freq="h", tz="UTC"))
    result = backtest(history, folds=3, models=["snaive24", "naive"])
    assert all(np.isnan(result.models[m]["mase"]) for m in ("snaive24", "naive", "auto"))
    assert np.isfinite(result.models["naive"]["smape"]) and result.notes[0].startswith("mase and pinball_* are null")


def test_a_quantile_does_not_depend_on_which_others_are_asked():
    """Each quantile's adaptive conformal level moved on its own, so two levels could cross; quantile_frame then sorted
    the values among the quantiles asked. Here q0.05 asked alone was 0.55 higher, in 11 hours, than asked with q0.1."""
    hours = np.arange(276)
    history = pd.Series(np.where(hours % DAY > 12, 2.0, 1.0),
                        index=pd.date_range("2026-01-05", periods=len(hours), freq="h", tz="UTC"))
    history.iloc[:68] = np.nan  # collection started three days late
    auto = AutoForecaster().fit(history)
    every = auto.predict(DAY, QUANTILES)
    for q in QUANTILES:
        pd.testing.assert_series_equal(auto.predict(DAY, [q])[q], every[q])


# Quantiles off the level grid (every hundredth) too, and ones a policy could ask beyond its ends.
ASKED = st.one_of(st.sampled_from(QUANTILES + [0.123, 0.001, 0.999]), st.floats(0.001, 0.999))


@settings(max_examples=25, deadline=None)
@given(history=histories(min_hours=2 * DAY), asked=st.lists(ASKED, min_size=1, max_size=12, unique=True),
       data=st.data())
def test_each_quantile_is_the_same_whichever_others_are_asked(history, asked, data):
    """A quantile's value is a function of the fitted model and q alone (the controller, backtest and the forecast
    store ask different lists of the same forecaster), and the quantiles asked together never cross."""
    auto = AutoForecaster().fit(history)
    every = sorted(asked)
    full = auto.predict(DAY, every)
    check_quantile_frame(full, DAY, every)
    some = sorted(data.draw(st.lists(st.sampled_from(every), min_size=1, unique=True)))  # callers ask in order
    pd.testing.assert_frame_equal(auto.predict(DAY, some), full[some])
