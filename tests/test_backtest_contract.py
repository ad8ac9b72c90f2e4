"""`headroom backtest --json`'s contract, drawn: the origins the flags ask for, `auto` as the honest procedure (at each
origin an AutoForecaster fitted on the data before it alone), the shares below the planner's quantiles and the
coverages as the per-fold forecasts give them, and folds without a known actual not scored, and said."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from forecast.backtest import FAST, SCORED_QUANTILES, AutoForecaster, backtest
from forecast.metrics import seasonal_scale
from forecast.models import DAY
from tests.test_forecast_properties import histories

MIN_TRAIN = 2 * DAY  # the docs: two days to fit before the first origin


def documented_origins(n: int, horizon: int, folds: int, step: int) -> list[int]:
    """The last `folds` origins `step` h apart, the last leaving `horizon` h to score, none before two days."""
    return [o for o in (n - horizon - step * k for k in reversed(range(folds))) if o >= MIN_TRAIN]


@st.composite
def cases(draw):
    history = draw(histories(min_hours=3 * DAY, max_hours=20 * DAY, zoned=True))
    return (history, draw(st.sampled_from([1, 6, 24, 48])), draw(st.integers(1, 9)),
            draw(st.sampled_from([1, 12, 24, 48])))


def auto_rows(result) -> list[dict]:
    return [r for r in result.per_fold if r["model"] == "auto"]


@settings(max_examples=30, deadline=None)
@given(case=cases())
def test_autos_folds_are_an_autoforecaster_fitted_before_each_origin_and_its_scores_pool_them(case):
    """At each documented origin, auto's scores are those of AutoForecaster() fitted on the history before it, and
    the summary is the mean MASE over folds and, pooled over every known actual, the share inside the 80 / 90 %
    bands and at or below q0.9 / q0.99."""
    history, horizon, folds, step = case
    fold_origins = documented_origins(len(history), horizon, folds, step)
    if not fold_origins:
        return
    result = backtest(history, horizon=horizon, folds=folds, step=step, models=list(FAST))
    rows = auto_rows(result)
    assert result.folds == len(fold_origins)
    assert [r["origin"] for r in rows] == [history.index[o].isoformat() for o in fold_origins]
    values = history.to_numpy(dtype=float)
    mases, hits = [], {"coverage_80": [], "coverage_90": [], "below_q0.9": [], "below_q0.99": []}
    for row, origin in zip(rows, fold_origins):
        frame = AutoForecaster(horizon=horizon).fit(history.iloc[:origin]).predict(horizon, SCORED_QUANTILES)
        q = {c: frame[c].to_numpy() for c in frame.columns}
        actual = values[origin:origin + horizon]
        real = np.isfinite(actual)
        a = actual[real]
        fold = {"coverage_80": (a >= q[0.1][real]) & (a <= q[0.9][real]),
                "coverage_90": (a >= q[0.05][real]) & (a <= q[0.95][real]),
                "below_q0.9": a <= q[0.9][real], "below_q0.99": a <= q[0.99][real]}
        mase = np.mean(np.abs(a - q[0.5][real])) / seasonal_scale(values[:origin], DAY) if real.any() else np.nan
        np.testing.assert_allclose(row["mase"], mase, rtol=1e-9, equal_nan=True)
        for key, hit in fold.items():
            np.testing.assert_allclose(row[key], hit.mean() if real.any() else np.nan, equal_nan=True)
            hits[key].append(hit)
        mases.append(mase)
    summary = result.models["auto"]
    known = np.isfinite(mases)
    np.testing.assert_allclose(summary["mase"], np.mean(np.asarray(mases)[known]) if known.any() else np.nan,
                               rtol=1e-9, equal_nan=True)
    for key, fold_hits in hits.items():
        pooled = np.concatenate(fold_hits)
        np.testing.assert_allclose(summary[key], pooled.mean() if len(pooled) else np.nan, equal_nan=True)
    assert result.selected == AutoForecaster(horizon=horizon).fit(history).chosen  # the pick on the whole history


@settings(max_examples=20, deadline=None)
@given(case=cases(), cut=st.floats(0.0, 1.0), garbage=st.sampled_from(["nan", "huge", "zero", "noise"]))
def test_what_follows_a_folds_horizon_never_moves_that_fold(case, cut, garbage):
    """Replace everything after some hour with garbage: every fold whose horizon ends by then scores exactly as
    before, for every model and auto (which re-selects inside each fold on the data before its origin)."""
    history, horizon, folds, step = case
    if not documented_origins(len(history), horizon, folds, step):
        return
    at = MIN_TRAIN + int(cut * (len(history) - MIN_TRAIN))
    spoiled = history.copy()
    rng = np.random.default_rng(0)
    spoiled.iloc[at:] = {"nan": np.nan, "huge": 1e12, "zero": 0.0,
                         "noise": rng.uniform(0, 1e6, len(history) - at)}[garbage]
    before, after = (backtest(h, horizon=horizon, folds=folds, step=step, models=["snaive24", "profile"])
                     for h in (history, spoiled))
    kept = [(a, b) for a, b in zip(before.per_fold, after.per_fold)
            if history.index.get_loc(pd.Timestamp(a["origin"])) + horizon <= at]
    for a, b in kept:
        assert scores(a) == scores(b)


def scores(row: dict) -> dict:
    """A per-fold row but its timing, NaN written as text so that NaN equals NaN."""
    return {k: ("nan" if isinstance(v, float) and np.isnan(v) else v) for k, v in row.items() if k != "fit_seconds"}


@settings(max_examples=20, deadline=None)
@given(case=cases(), holes=st.lists(st.tuples(st.floats(0.0, 1.0), st.integers(1, 3 * DAY)), min_size=1, max_size=3))
def test_missing_actuals_are_not_scored_and_the_notes_say_how_many_and_which_folds_have_none(case, holes):
    """Gaps in the folds' horizons: those hours are not scored; a fold with no known actual scores null, is left out
    of the means, and the notes name it, so a script reading `folds` knows how many were scored."""
    history, horizon, folds, step = case
    fold_origins = documented_origins(len(history), horizon, folds, step)
    if not fold_origins:
        return
    history = history.copy()
    for where, length in holes:
        start = MIN_TRAIN + int(where * (len(history) - MIN_TRAIN))
        history.iloc[start:start + length] = np.nan
    result = backtest(history, horizon=horizon, folds=folds, step=step, models=["snaive24"])
    values = history.to_numpy(dtype=float)
    known = [np.isfinite(values[o:o + horizon]).sum() for o in fold_origins]
    for row, k in zip(auto_rows(result), known):
        assert np.isnan(row["coverage_80"]) == (k == 0)
    missing = len(fold_origins) * horizon - sum(known)
    said = [n for n in result.notes if "to score are missing" in n]
    if not any(known):
        assert any(n.startswith("every score is null") for n in result.notes)
    elif missing:
        assert len(said) == 1 and said[0].startswith(f"{missing} of the folds' {len(fold_origins) * horizon} hours")
        for origin, k in zip(fold_origins, known):
            assert (history.index[origin].isoformat() in said[0]) == (k == 0)
    else:
        assert not said


def test_the_command_backtests_a_one_week_history_on_five_folds_and_says_a_missing_last_day(tmp_path, capsys):
    """`headroom backtest --horizon 24 --folds 7 --step 24` on a week: 5 daily folds from day 2, said to be fewer than
    asked; with the export's last day empty, the JSON's notes say that fold has no known actual."""
    from cli.main import main
    from tests.test_forecast_properties import write_csv
    index = pd.date_range("2026-03-02", periods=7 * DAY, freq="h", tz="UTC")
    week = pd.Series(100 + 40 * np.sin(2 * np.pi * np.arange(len(index)) / DAY), index=index)
    week += np.random.default_rng(2).normal(0, 3, len(week))
    path = tmp_path / "week.csv"
    flags = ["--horizon", "24", "--folds", "7", "--step", "24"]
    write_csv(week, path)
    assert main(["backtest", str(path), *flags]) == 0
    assert "5 folds 24 h apart (7 asked: the history holds fewer)" in capsys.readouterr().out
    week.iloc[-DAY:] = np.nan
    write_csv(week, path)
    assert main(["backtest", str(path), *flags, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["folds"], out["folds_asked"]) == (5, 7)  # the text run says "7 asked"; a script reads it here
    assert any(f"(1 of 5, origin {index[-DAY].isoformat()})" in n for n in out["notes"]), out["notes"]


def test_the_command_scores_auto_on_the_shared_traces_as_the_benchmark_quotes(shared_data):
    """`headroom backtest --horizon 24 --folds 7 --step 24` reads each shared hourly trace as bench/forecast_bench.py
    does (no sample clipped by the command's cleaning) and its `auto` scores the MASE docs/bench-forecast.md quotes."""
    import re
    from datetime import UTC, datetime
    from pathlib import Path

    from cli.config import load_config
    from cli.sources import load_series
    from forecast.clock import local_hours
    from tests.conftest import bench_module

    bench = bench_module("forecast_bench")
    doc = (Path(__file__).parents[1] / "docs" / "bench-forecast.md").read_text()
    for name in ("alibaba_genai_sd_requests_hourly", "nasa_http_1995_hourly", "servegen_m_large_hourly"):
        path = shared_data / "traces" / f"{name}.csv"
        cfg = load_config(None, {"history.file": str(path)})
        series = local_hours(load_series(cfg, datetime.now(UTC), say=False)[0], cfg.forecast.timezone)
        pd.testing.assert_series_equal(series, bench.load_trace(path), check_names=False)
        table = doc.split(f"## {name}\n", 1)[1]
        quoted = float(re.search(r"\| headroom auto \(selected: [^)]*\)+ \| ([0-9.]+) \|", table).group(1))
        result = backtest(series, horizon=24, folds=7, step=24, models=list(FAST))
        assert round(result.models["auto"]["mase"], 3) == quoted, name


def test_the_command_scores_an_outlier_as_it_was_and_fits_on_it_clipped(tmp_path, capsys):
    """Cleaning clips hours over 3x the 99th percentile, and backtest scored the clipped value: a spike in the last
    fold, unforeseeable by every model, scored as a tenth of itself (auto's MASE 1.1 where the hours as they were give
    3.8), flattering every model against a peer scored on the same folds. Now the models fit the cleaned hours and
    are scored against the hours as read; with the spike after every fitting window, that is exactly what a run
    without clipping (history.outlier_factor: null) scores."""
    from cli.main import main
    from tests.test_forecast_properties import write_csv
    index = pd.date_range("2026-03-02", periods=20 * DAY, freq="h", tz="UTC")
    demand = pd.Series(10 + 5 * np.sin(2 * np.pi * np.arange(len(index)) / DAY), index=index)
    demand += np.random.default_rng(1).normal(0, 1, len(demand))
    demand.iloc[-10] = 500.0
    path, raw = tmp_path / "spike.csv", tmp_path / "raw.yaml"
    write_csv(demand, path)
    raw.write_text("history:\n  outlier_factor: null\n")
    scores = []
    for extra in ([], ["--config", str(raw)]):
        assert main(["backtest", str(path), "--folds", "7", "--json", *extra]) == 0
        captured = capsys.readouterr()
        scores.append({name: m["mase"] for name, m in json.loads(captured.out)["models"].items()})
        assert ("1 outliers clipped in what the models fit" in captured.err) == (not extra), captured.err
    assert scores[0] == scores[1]
    assert scores[0]["auto"] > 3


def test_each_fold_fits_its_hours_clipped_by_a_bound_from_those_hours_alone(tmp_path, capsys):
    """Cleaning's outlier bound (3x the 99th percentile) was the whole history's, so a fold fitted on hours clipped by
    a bound that had seen its future: bursts after the origin (here over 1 % of the hours, in the scored day) raised
    the bound, and an outlier the day before the origin, which the controller's refit at that origin clips, was fitted
    as it was. Each fold's bound is now that of its own hours: the backtest's forecasts are exactly those of a run
    without clipping on the same hours with those before the origin clipped as they alone say (sMAPE and coverage:
    MASE and pinball are scaled by the hours before the origin as read, which differ)."""
    from cli.main import main
    from forecast.history import clip_outliers
    from tests.test_forecast_properties import write_csv
    index = pd.date_range("2026-03-02", periods=20 * DAY, freq="h", tz="UTC")
    demand = pd.Series(10 + 5 * np.sin(2 * np.pi * np.arange(len(index)) / DAY), index=index)
    demand += np.random.default_rng(2).normal(0, 1, len(demand))
    origin = len(demand) - DAY
    demand.iloc[origin - DAY + 12] = 80.0  # over 3x the 99th percentile of the hours before the origin
    demand.iloc[origin + 6:origin + 14] = 400.0  # after the origin: 8 of 480 hours, so the whole bound is 1200
    assert not clip_outliers(demand, 3.0)[1], "the whole history's bound clips nothing"
    before, clipped = clip_outliers(demand.iloc[:origin], 3.0)
    assert clipped == [index[origin - DAY + 12].isoformat()]
    path, by_hand, raw = tmp_path / "demand.csv", tmp_path / "clipped.csv", tmp_path / "raw.yaml"
    write_csv(demand, path)
    write_csv(pd.concat([before, demand.iloc[origin:]]), by_hand)
    raw.write_text("history:\n  outlier_factor: null\n")
    scores = []
    for argv in ([str(path)], [str(by_hand), "--config", str(raw)]):
        assert main(["backtest", *argv, "--folds", "1", "--json"]) == 0
        scores.append({name: (m["smape"], m["coverage_80"], m["coverage_90"])
                       for name, m in json.loads(capsys.readouterr().out)["models"].items()})
    assert scores[0] == scores[1]

def test_forecast_runs_the_procedure_backtest_scores_as_auto_at_any_horizon(shared_data, capsys):
    """`auto` in `backtest --horizon H` is AutoForecaster picking on inner folds H hours long, while `forecast
    --horizon H` picked on 24-hour ones whatever H: on servegen's trace at 12 hours forecast served the mean of three
    seasonal models where backtest's `auto` had picked and scored the last value held. Both run one procedure now."""
    from cli.main import main
    path = str(shared_data / "traces" / "servegen_m_large_hourly.csv")
    assert main(["backtest", path, "--horizon", "12", "--folds", "1", "--json"]) == 0
    selected = json.loads(capsys.readouterr().out)["selected"]
    assert main(["forecast", path, "--horizon", "12", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["model"] == f"auto({selected})"
