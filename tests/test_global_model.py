"""The model learned across series (forecast/global_model.py) and where training offers it."""
from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapters.mlflow import Tracker
from forecast.base import check_quantile_frame
from forecast.global_model import GlobalBoosting, GlobalForecaster, GlobalPool, GlobalSettings
from tests.test_forecaster_contract import HISTORIES, QUANTILES
from training.pipeline import NOT_SERVED, TrainSettings, load_champion, train_series

DAY = 24
SMALL = GlobalSettings(horizon=24, max_iter=60)
SHAPE = np.array([1, 1, 1, 1, 1, 2, 4, 8, 9, 9, 8, 7, 7, 8, 9, 9, 8, 6, 4, 3, 2, 2, 1, 1], dtype=float)


def shared_shape(count: int, days: int, noise: float = 0.3, seed: int = 0) -> dict[str, pd.Series]:
    """`count` series of one daily shape at levels from 1 to 1000, each with its own multiplicative noise; the
    last day of each is its noise-free future."""
    rng = np.random.default_rng(seed)
    index = pd.date_range("2026-02-02", periods=days * DAY, freq="h", tz="UTC")
    levels = np.geomspace(1, 1000, count)
    out = {}
    for i, level in enumerate(levels):
        values = level * np.tile(SHAPE, days) * np.exp(rng.normal(0, noise, days * DAY))
        values[-DAY:] = level * SHAPE
        out[f"s{i}"] = pd.Series(values, index=index)
    return out



def test_learns_a_shape_shared_across_series_that_one_noisy_series_cannot_show():
    """Each series is too noisy to show the shape (seasonal naive copies its noise); forty of them together do."""
    pool = shared_shape(40, days=9)
    histories = [s.iloc[:-DAY] for s in pool.values()]
    truth = np.array([s.iloc[-DAY:].to_numpy() for s in pool.values()])
    paths = GlobalBoosting(SMALL).fit_many(histories).paths(histories, DAY)
    snaive = np.array([h.iloc[-DAY:].to_numpy() for h in histories])
    relative = lambda f: np.mean(np.abs(f - truth) / truth.mean(axis=1, keepdims=True))  # noqa: E731
    assert relative(paths) < 0.6 * relative(snaive), (relative(paths), relative(snaive))
    assert all(np.corrcoef(p, SHAPE)[0, 1] > 0.9 for p in paths)


def test_a_forecast_never_uses_any_series_after_its_origin():
    """The pool is cut at the history's last timestamp: changing every series after the origin changes nothing."""
    pool = shared_shape(6, days=10, seed=1)
    origin = pool["s0"].index[8 * DAY]
    changed = {n: s.where(s.index < origin, s * 50 + 7) for n, s in pool.items()}
    history = pool["s0"].loc[:origin - pd.Timedelta(hours=1)]
    first = GlobalForecaster(GlobalPool(pool, SMALL), "s0").fit(history).predict(DAY, [0.5])
    second = GlobalForecaster(GlobalPool(changed, SMALL), "s0").fit(history).predict(DAY, [0.5])
    pd.testing.assert_frame_equal(first, second)
    outsider = GlobalForecaster(GlobalPool(pool, SMALL), "new").fit(history).predict(DAY, [0.5])
    assert outsider.index.equals(first.index)


@pytest.fixture(scope="module")
def fitted() -> GlobalBoosting:
    return GlobalBoosting(SMALL).fit_many([s.iloc[:-DAY] for s in shared_shape(12, days=9, seed=2).values()])


def test_the_pool_clips_each_series_by_a_bound_from_its_hours_before_the_cut():
    """headroom train gave the pool its series clipped by a bound from the whole history, so the learner fitted at a
    fold's origin fitted hours clipped by a bound that had seen after it: bursts there (over 1 % of the hours) left
    a glitch before the origin unclipped. The pool takes the series as read and clips each cut by its own bound, so
    what comes after the origin, bursts or not, changes nothing."""
    pool = shared_shape(6, days=10, seed=1)
    origin = pool["s0"].index[8 * DAY]
    pool["s1"].iloc[7 * DAY - 12] = 50 * pool["s1"].max()  # a glitch 36 hours before the origin
    bursts = {n: s.copy() for n, s in pool.items()}
    bursts["s1"].iloc[8 * DAY + 2:8 * DAY + 6] = 1000 * pool["s1"].max()
    history = pool["s0"].loc[:origin - pd.Timedelta(hours=1)]
    first, second = (GlobalForecaster(GlobalPool(p, SMALL, outlier_factor=3.0), "s0").fit(history).predict(DAY, [0.5])
                     for p in (pool, bursts))
    pd.testing.assert_frame_equal(first, second)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(factor=st.floats(1e-3, 1e4), seed=st.integers(0, 1000))
def test_forecasts_scale_with_the_series(fitted, factor, seed):
    """Inputs are divided by the series' own level: demand in other units gets the same forecast in those units."""
    rng = np.random.default_rng(seed)
    history = np.tile(SHAPE, 8) * np.exp(rng.normal(0, 0.3, 8 * DAY)) * 50
    assert np.allclose(fitted.paths([history * factor], DAY), fitted.paths([history], DAY) * factor, rtol=1e-6)


def test_too_short_for_any_training_row_falls_back_with_the_reason():
    model = GlobalForecaster().fit(HISTORIES["short"])
    check_quantile_frame(model.predict(48, QUANTILES), 48, QUANTILES)
    assert model.fallback_reason.startswith("too short") and "a day and a horizon" in model.fallback_reason


def test_a_longer_horizon_than_fitted_is_refused(fitted):
    with pytest.raises(ValueError, match="fitted for a horizon of 24"):
        fitted.paths([np.ones(10 * DAY)], 48)


@pytest.mark.parametrize("history", HISTORIES, ids=str)
def test_pooled_forecasts_honour_the_contract(history):
    series = HISTORIES[history]
    pool = GlobalPool({"other": HISTORIES["three_weeks"]}, GlobalSettings(max_iter=20))
    frame = GlobalForecaster(pool, "mine").fit(series).predict(48, QUANTILES)
    check_quantile_frame(frame, 48, QUANTILES)


def test_training_offers_the_global_model_only_with_several_series(tmp_path, caplog):
    """Scored on the same folds as every candidate and logged; here the series are too noisy for seasonal naive, so
    it scores best, yet the champion is the best model the controller can serve alone (it refits each series
    alone)."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    pool = {n: s.iloc[:-DAY] for n, s in shared_shape(8, days=10, seed=3).items()}
    trained = TrainSettings(horizon=24, folds=2, step=24, candidates=("snaive24",), quantiles=(0.1, 0.5, 0.9))
    with caplog.at_level(logging.DEBUG, logger="training.pipeline"):
        alone = train_series("s1", pool["s1"], trained, Tracker(uri))
    assert set(alone.scores) == {"snaive24"} and "global model is not offered" in caplog.text
    together = train_series("s2", pool["s2"], trained, Tracker(uri), pool=GlobalPool(pool, SMALL))
    assert set(together.scores) == {"snaive24", "global"}
    assert together.scores["global"]["mase"] < together.scores["snaive24"]["mase"]
    assert together.selected == "snaive24" and load_champion("s2", uri).card.model == "snaive24"
    # and it says why the better score was not promoted, in the result and on the run (it said nothing of it)
    assert [n for n in together.notes if n.startswith("global scored a lower mase than snaive24")] == [
        f"global scored a lower mase than snaive24 ({together.scores['global']['mase']:.4g} against "
        f"{together.scores['snaive24']['mase']:.4g}): {NOT_SERVED}"]
    from mlflow.tracking import MlflowClient
    runs = MlflowClient(uri).search_runs([together.experiment_id], "tags.`headroom.kind` = 'candidate'")
    assert {r.info.run_name: r.data.tags.get("headroom.not_served") for r in runs} == {"snaive24": None,
                                                                                      "global": NOT_SERVED}


def test_headroom_train_with_several_series_scores_the_global_model_for_each(tmp_path, monkeypatch, capsys):
    """`headroom train` on a configuration with several series pools them; with one (`--history`) it does not."""
    import json

    from cli.main import main
    from forecast.synthetic import write_csv

    for name, series in shared_shape(3, days=10, seed=4).items():
        write_csv(series.iloc[:-DAY], tmp_path / f"{name}.csv")
    (tmp_path / "headroom.yaml").write_text(
        "history:\n  file: s0.csv\nbacktest:\n  horizon: 24\n  folds: 2\n"
        "training:\n  candidates: [snaive24]\n  series:\n"
        + "".join(f"  - name: {n}\n    file: {n}.csv\n" for n in ("s0", "s1", "s2")))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert main(["train", "--config", "headroom.yaml"]) == 0
    results = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in results] == ["s0", "s1", "s2"]
    assert all(set(r["scores"]) == {"snaive24", "global"} for r in results)
    assert main(["train", "--config", "headroom.yaml", "--history", "s1.csv", "--name", "one"]) == 0
    assert set(json.loads(capsys.readouterr().out)["scores"]) == {"snaive24"}


def test_several_series_of_which_one_loads_train_it_and_say_the_global_model_is_missing(tmp_path, monkeypatch,
                                                                                          capsys):
    """Two series configured, one all missing: the other trained without the model learned across series and said
    nothing of it, though the README promises it with several series."""
    import json

    from cli.main import main
    from forecast.synthetic import write_csv

    good = shared_shape(1, days=10, seed=4)["s0"].iloc[:-DAY]
    write_csv(good, tmp_path / "good.csv")
    write_csv(good * np.nan, tmp_path / "empty.csv")
    (tmp_path / "headroom.yaml").write_text(
        "backtest:\n  horizon: 24\n  folds: 2\ntraining:\n  candidates: [snaive24]\n  series:\n"
        "  - {name: good, file: good.csv}\n  - {name: empty, file: empty.csv}\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert main(["train", "--config", "headroom.yaml"]) == 1  # the empty one failed
    captured = capsys.readouterr()
    good_result, empty_result = json.loads(captured.out)
    note = "the model learned across series is not trained: it needs two series that load, and 1 of the 2 did"
    assert set(good_result["scores"]) == {"snaive24"} and note in good_result["notes"] and "error" in empty_result
    assert f"note: good: {note}" in captured.err
