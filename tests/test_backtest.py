"""Rolling-origin backtest: no look-ahead, gaps not scored, JSON shape, honest coverage, fallbacks."""
import json
import logging

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forecast import models
from forecast.backtest import METRICS, AutoForecaster, backtest, inverse_square_weights
from forecast.base import check_quantile_frame

FAST = ["snaive24", "snaive168", "profile", "profile24"]


def demand(weeks: int = 5, noise: float = 5.0, seed: int = 1) -> pd.Series:
    rng = np.random.default_rng(seed)
    index = pd.date_range("2026-01-05", periods=weeks * 168, freq="h", tz="UTC")
    t = np.arange(len(index))
    values = 100 + 40 * np.sin(2 * np.pi * t / 24) + 20 * (index.day_of_week < 5) + rng.normal(0, noise, len(t))
    return pd.Series(values, index=index, name="synthetic")


def test_changing_data_after_a_fold_leaves_that_fold_unchanged():
    series = demand()
    first = backtest(series, folds=3, models=FAST).per_fold
    origin = pd.Timestamp(first[0]["origin"])
    changed = series.copy()
    changed[changed.index >= origin + pd.Timedelta(hours=24)] *= 3.0  # after the first fold's horizon
    again = backtest(changed, folds=3, models=FAST).per_fold
    before = [r for r in first if r["origin"] == first[0]["origin"]]
    after = [r for r in again if r["origin"] == first[0]["origin"]]
    assert [r["model"] for r in before] == [r["model"] for r in after] and "auto" in {r["model"] for r in before}
    for a, b in zip(before, after):
        assert {k: a[k] for k in METRICS if k != "fit_seconds"} == {k: b[k] for k in METRICS if k != "fit_seconds"}


def test_models_only_see_data_before_the_origin(monkeypatch):
    seen = []

    class Spy(models.SeasonalNaive):
        def fit(self, history):
            seen.append(history.index[-1])
            return super().fit(history)

    monkeypatch.setitem(models.MODELS, "spy", lambda: Spy(24))
    result = backtest(demand(), folds=3, models=["spy"])  # auto never picks "spy": only the folds fit it
    origins = sorted({pd.Timestamp(r["origin"]) for r in result.per_fold})
    assert seen == [o - pd.Timedelta(hours=1) for o in origins]


def test_missing_actuals_are_not_scored():
    series = demand()
    series.iloc[-24:] = np.nan  # the whole last fold is a gap
    series.iloc[-48:-40] = np.nan  # part of the one before
    result = backtest(series, folds=3, models=FAST)
    rows = {r["origin"]: r for r in result.per_fold if r["model"] == "snaive24"}
    last, middle = (rows[k] for k in sorted(rows)[-1:-3:-1])
    assert np.isnan(last["mase"]) and np.isnan(last["coverage_80"])
    assert np.isfinite(middle["mase"]) and round(middle["coverage_80"] * 16) == middle["coverage_80"] * 16
    assert np.isfinite(result.models["snaive24"]["mase"])


def test_json_shape():
    payload = backtest(demand(), folds=2, models=FAST).to_json()
    json.dumps(payload)
    assert set(payload) == {"history", "horizon", "folds", "selected", "models", "notes"}
    assert payload["horizon"] == 24 and payload["folds"] == 2 and payload["history"] == "synthetic"
    assert set(payload["models"]) == {*FAST, "auto"}
    assert all(set(m) == set(METRICS) for m in payload["models"].values())
    assert payload["selected"] in {*FAST} or payload["selected"].startswith("mean(")


def test_auto_intervals_cover_near_nominal_on_known_noise():
    # Stationary cycle + Gaussian noise: the conformal intervals should be honest.
    result = backtest(demand(weeks=8, noise=10.0), folds=14, models=FAST)
    auto = result.models["auto"]
    assert abs(auto["coverage_80"] - 0.8) <= 0.1 and abs(auto["coverage_90"] - 0.9) <= 0.08


def test_failing_model_falls_back_to_seasonal_naive(monkeypatch, caplog):
    class Broken(models.HoltWinters):
        def _fit(self, values):
            raise RuntimeError("optimizer diverged")

    monkeypatch.setitem(models.MODELS, "broken", Broken)
    series = demand(weeks=2)
    with caplog.at_level(logging.WARNING):
        fitted = models.MODELS["broken"]().fit(series)
        frame = fitted.predict(24, [0.1, 0.5, 0.9])
    check_quantile_frame(frame, 24, [0.1, 0.5, 0.9])
    assert "optimizer diverged" in fitted.fallback_reason and "falling back" in caplog.text
    np.testing.assert_allclose(frame[0.5].to_numpy(), series.iloc[-24:].to_numpy())
    assert np.isfinite(backtest(series, folds=2, models=["broken", "snaive24"]).models["broken"]["mase"])


@pytest.mark.parametrize("horizon", [24, 48])
def test_auto_selects_from_pre_origin_data_only(horizon):
    series = demand()
    auto = AutoForecaster("fast", horizon=horizon, folds=3).fit(series.iloc[:-horizon])
    assert auto.name.startswith("auto(") and set(auto.scores_) >= set(FAST)
    check_quantile_frame(auto.predict(horizon, [0.05, 0.5, 0.95]), horizon, [0.05, 0.5, 0.95])


def test_weighted_quantile_ignores_weightless_values_and_matches_the_median():
    from forecast.calibrate import weighted_quantile
    values = np.array([3.0, 1.0, 2.0, 100.0])
    assert weighted_quantile(values, np.array([1.0, 1.0, 1.0, 0.0]), np.array([0.5]))[0] == pytest.approx(2.0)
    assert weighted_quantile(values, np.ones(4), np.array([0.5]))[0] == pytest.approx(2.5)


def test_calibration_residuals_of_a_fold_use_only_data_up_to_its_horizon():
    from forecast.calibrate import Calibrated, origins
    series = demand(weeks=4)
    fitted = Calibrated(models.SeasonalProfile(), folds=5).fit(series)
    first = origins(len(series), 24, 5, 24)[0]
    changed = series.copy()
    changed.iloc[first + 24:] *= 3.0  # everything after the oldest fold's horizon
    again = Calibrated(models.SeasonalProfile(), folds=5).fit(changed)
    np.testing.assert_array_equal(fitted.residuals_[0], again.residuals_[0])
    assert not np.allclose(fitted.residuals_[-1], again.residuals_[-1])


def test_recent_folds_weigh_more_when_the_noise_changes():
    # Noisy for six weeks, then calm: recency-weighted intervals narrow toward the calm regime
    # and still cover it near nominal; equal weights keep the old, wide intervals.
    from forecast.calibrate import conformal_values, fold_weights, interval_scores
    noisy, calm = demand(weeks=6, noise=30.0, seed=4), demand(weeks=4, noise=5.0, seed=5)
    series = pd.concat([noisy, calm.set_axis(pd.date_range(noisy.index[-1] + pd.Timedelta(hours=1),
                                                           periods=len(calm), freq="h", tz="UTC"))])
    history, future = series.iloc[:-168], series.iloc[-168:].to_numpy()
    auto = AutoForecaster("fast", horizon=168, folds=28, step=24).fit(history)
    weights = fold_weights(auto.origins_)
    assert weights[-1] == 1.0 and np.all(np.diff(weights) > 0)
    assert fold_weights([0, 2 * 168])[0] == pytest.approx(0.5)
    weighted = auto.predict(168, [0.1, 0.9]).to_numpy()
    values = history.to_numpy(dtype=float)
    scores, groups = interval_scores(values, auto.points_, auto.origins_)
    equal = conformal_values(auto.model_.predict(168, [0.5]).to_numpy()[:, 0], scores, groups, values, [0.1, 0.9])
    assert np.mean(weighted[:, 1] - weighted[:, 0]) < 0.8 * np.mean(equal[:, 1] - equal[:, 0])
    covered = np.mean((future >= weighted[:, 0]) & (future <= weighted[:, 1]))
    assert covered >= 0.7


def heteroscedastic_demand(weeks: int = 8, seed: int = 3) -> pd.Series:
    # Noise proportional to the level: peaks err more than nights (as real demand does).
    rng = np.random.default_rng(seed)
    index = pd.date_range("2026-01-05", periods=weeks * 168, freq="h", tz="UTC")
    t = np.arange(len(index))
    base = 100 + 80 * np.sin(2 * np.pi * t / 24) ** 2 + 40 * (index.day_of_week < 5)
    return pd.Series(base * (1 + rng.normal(0, 0.15, len(t))), index=index, name="hetero")


def test_auto_intervals_reach_nominal_under_heteroscedastic_noise():
    auto = backtest(heteroscedastic_demand(), folds=21, models=FAST).models["auto"]
    assert abs(auto["coverage_80"] - 0.8) <= 0.05 and abs(auto["coverage_90"] - 0.9) <= 0.05


def test_auto_residuals_are_the_selection_procedures_and_see_no_later_data():
    # Residual row j comes from the model selected on folds before j: changing anything after fold j's
    # horizon leaves rows <= j unchanged; the first fold has no earlier fold to select on.
    series = demand(weeks=4)
    auto = AutoForecaster("fast", folds=6).fit(series)
    j = 3
    changed = series.copy()
    changed.iloc[auto.origins_[j] + 24:] *= 3.0
    again = AutoForecaster("fast", folds=6).fit(changed)
    assert np.isnan(auto.residuals_[0]).all()
    np.testing.assert_array_equal(auto.residuals_[1:j + 1], again.residuals_[1:j + 1])
    assert not np.allclose(auto.residuals_[j + 1:], again.residuals_[j + 1:])


def test_adaptive_levels_follow_recent_misses_and_keep_the_median():
    # Recent folds all erring upward: every bound's level rises against the same folds without the shift
    # (the band moves toward where the errors went); the median stays at its split level.
    from forecast.calibrate import ACI_GAMMA, aci_levels
    rng = np.random.default_rng(0)
    quantiles = [0.05, 0.1, 0.5, 0.9, 0.95]
    calm = rng.normal(size=(14, 24))
    shifted = calm.copy()
    shifted[-5:] += 2.0
    before, after = (aci_levels(r, np.arange(14) * 24, quantiles) for r in (calm, shifted))
    assert np.all(np.delete(after - before, 2) > 0.1 * ACI_GAMMA)  # a tenth of a step: the same test at any step
    assert before[2] == after[2] == 0.5


@settings(max_examples=50, deadline=None)
@given(folds=st.integers(3, 28), seed=st.integers(0, 2 ** 16), shift=st.floats(-3, 3),
       asked=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=8, unique=True))
def test_a_quantiles_adaptive_level_does_not_depend_on_the_others_and_never_falls_as_q_rises(folds, seed, shift,
                                                                                               asked):
    # Each level adapts on its own (recent folds shifted, so levels move far) and can cross another: the levels asked
    # are read off one sorted grid, the same whichever quantiles are asked with them.
    from forecast.calibrate import monotone_levels
    residuals = np.random.default_rng(seed).normal(size=(folds, 24))
    residuals[-folds // 3:] += shift
    fold_origins = np.arange(folds) * 24
    asked = sorted(asked)
    together = monotone_levels(residuals, fold_origins, asked)
    alone = [monotone_levels(residuals, fold_origins, [q])[0] for q in asked]
    np.testing.assert_array_equal(together, alone)
    assert np.all(np.diff(together) >= 0)


def test_calibration_spans_more_folds_than_selection_which_sees_only_the_last_ones():
    """Four weeks of residuals calibrate; the last `folds` days alone pick the model."""
    from forecast.calibrate import fold_weights
    history = demand(weeks=6)
    wide = AutoForecaster(horizon=24, folds=7, calibration_folds=28).fit(history)
    narrow = AutoForecaster(horizon=24, folds=7, calibration_folds=7).fit(history)
    assert wide.residuals_.shape == (28, 24) and narrow.residuals_.shape == (7, 24)
    assert wide.chosen == narrow.chosen and wide.scores_ == pytest.approx(narrow.scores_)
    weights = fold_weights(wide.origins_)
    assert weights[0] < 0.3 * weights[-1]  # four weeks back counts for little (two-week half-life)
    assert AutoForecaster(folds=14, calibration_folds=7).calibration_folds == 14  # never fewer than selection


def test_the_median_follows_a_recent_level_error_not_an_old_one_nor_a_burst_nor_quiet_nights():
    from forecast.calibrate import level_correction
    rng = np.random.default_rng(1)
    fold_origins = np.arange(28) * 24
    calm = rng.normal(0.0, 0.05, size=(28, 24))
    recent, old, burst, nights = calm.copy(), calm.copy(), calm.copy(), calm.copy()
    recent[-2:] += 0.3  # the last two days under-forecast by 30 %
    old[:5] += 0.3  # the same error four weeks ago
    burst[-1, 12] = 50.0  # one hour of a flash crowd
    nights[:, :16] = 0.0  # zero demand for 16 hours a day, forecast exactly
    nights[-3:, 16:] += 0.6  # the 8 busy hours under-forecast for three days
    assert abs(level_correction(calm, fold_origins)) < 0.02
    assert level_correction(recent, fold_origins) > 0.1
    assert abs(level_correction(old, fold_origins)) < 0.02
    assert abs(level_correction(burst, fold_origins)) < 0.05
    assert np.median(nights[-3:]) == 0.0 and level_correction(nights, fold_origins) > 0.05  # a median misses it


def test_auto_median_rises_after_a_level_step_and_keeps_its_interval():
    history = demand(weeks=5)
    stepped = history.copy()
    stepped.iloc[-48:] *= 1.5  # demand up by half over the last two days
    auto = AutoForecaster("fast").fit(stepped)
    frame = auto.predict(24, [0.1, 0.5, 0.9])
    plain = auto.model_.predict(24, [0.5]).to_numpy()[:, 0]
    assert frame[0.5].mean() > 1.02 * plain.mean()
    assert (frame[0.1] <= frame[0.5]).all() and (frame[0.5] <= frame[0.9]).all()


def test_json_reports_the_share_of_actuals_below_the_planner_quantiles():
    """backtest --json: per model, the share of actuals at or below q0.9 and q0.99, pooled over the scored hours;
    honest intervals put it near 0.9 and 0.99 on stationary noise, a point model's (no spread) near the half."""
    result = backtest(demand(weeks=8, noise=10.0), folds=14, models=FAST)
    payload = result.to_json()
    for name, metrics in payload["models"].items():
        assert 0.0 <= metrics["below_q0.9"] <= metrics["below_q0.99"] <= 1.0, name
    auto = payload["models"]["auto"]
    assert abs(auto["below_q0.9"] - 0.9) <= 0.07 and auto["below_q0.99"] >= 0.95
    rows = [r for r in result.per_fold if r["model"] == "auto"]
    pooled = np.mean([r["below_q0.9"] for r in rows])  # equal hours per fold: pooled == mean of folds
    assert auto["below_q0.9"] == pytest.approx(pooled)


@pytest.mark.parametrize("rule", ["median", "weighted", "mean"])
def test_combination_rules_combine_the_top_candidates(rule):
    series = demand(weeks=4)
    auto = AutoForecaster(FAST, folds=7, top_k=3, combine=rule).fit(series)
    assert auto.chosen.startswith(f"{rule}(") and len(auto.model_.members) == 3
    ranked = sorted(FAST, key=auto.scores_.get)
    assert set(auto.model_.members) == set(ranked[:3])
    paths = np.array([m.point(24) for m in auto.model_.fitted_])
    expected = {"median": np.median(paths, axis=0), "mean": paths.mean(axis=0)}.get(rule)
    if rule == "weighted":
        inverse = 1 / np.array([auto.scores_[m] for m in auto.model_.members])
        expected = (inverse / inverse.sum()) @ paths
    np.testing.assert_allclose(auto.model_.point(24), expected)
    with pytest.raises(ValueError):
        AutoForecaster(FAST, combine="vote")


def test_level_correction_can_be_off_or_need_enough_folds():
    stepped = demand(weeks=5)
    stepped.iloc[-48:] *= 1.5
    plain = {lc: AutoForecaster("fast", level_correction=lc).fit(stepped) for lc in (True, False, 14, 40)}
    point = plain[False].model_.predict(24, [0.5]).to_numpy()[:, 0]
    np.testing.assert_allclose(plain[False].predict(24, [0.5])[0.5].to_numpy(), point)
    assert plain[True].predict(24, [0.5])[0.5].mean() > 1.02 * point.mean()
    np.testing.assert_allclose(plain[14].predict(24, [0.5]), plain[True].predict(24, [0.5]))  # 27 folds >= 14
    np.testing.assert_allclose(plain[40].predict(24, [0.5])[0.5].to_numpy(), point)  # 27 folds < 40


def _trace(shared_data, name):
    from forecast.history import load_history, prepare
    series, _ = prepare(load_history(shared_data / "traces" / f"{name}_hourly.csv"), step="1h", statistic="mean",
                        outlier_factor=None)
    return series


@pytest.mark.parametrize("name", ["nasa_http_1995", "servegen_m_large", "alibaba_genai_sd_requests"])
def test_auto_is_no_worse_than_the_median_candidate_on_every_shared_trace(shared_data, name):
    """Selection that never hurts (issue 13): over the last 7 daily folds of each shared trace, the honest auto
    scores at or below the median of its candidates' MASE."""
    from forecast.backtest import FAST as CANDIDATES
    result = backtest(_trace(shared_data, name), folds=7, models=list(CANDIDATES))
    candidates = [result.models[c]["mase"] for c in CANDIDATES]
    assert result.models["auto"]["mase"] <= np.median(candidates), (result.models["auto"]["mase"], candidates)


def test_a_one_week_real_trace_backtests_every_model_without_an_unexplained_fallback(shared_data, caplog):
    """The owner's one-week case: `backtest --folds 7` on 7 days (5 folds from day 2). No model may fail with
    an error; only 'too short' fallbacks, which log at debug."""
    week = _trace(shared_data, "servegen_m_large").iloc[:7 * 24]
    with caplog.at_level(logging.WARNING, logger="forecast.models"):
        result = backtest(week, folds=7, models=["snaive24", "profile", "naive", "theta", "mstl", "gbm", "ets"])
    assert result.folds == 5
    assert "failed to" not in caplog.text, caplog.text  # to fit, or to forecast
    assert all(np.isfinite(m["mase"]) for m in result.models.values())


def test_with_too_few_inner_folds_auto_shrinks_its_pick_towards_the_pools_mean():
    """A week of history gives 1-5 inner folds. With min_selection_folds=7 (rounds 3-5's default) and k of the 7
    folds a pick needs, the pick weighs k/7 and every candidate an equal share of the rest, at the last origin and
    in the honest replay the intervals come from ("mean": the pool's mean alone); with a week of inner folds, or
    min_selection_folds=0, the rule's pick alone."""
    from forecast.calibrate import point_forecast
    week = demand(weeks=1)
    paths = np.array([models.MODELS[c]().fit(week).point(24) for c in FAST])
    picking = AutoForecaster(FAST, min_selection_folds=0).fit(week)
    assert picking.scores_ and picking.why_chosen is None  # ranked on its 5 folds alone
    auto = AutoForecaster(FAST, min_selection_folds=7, weak_evidence="shrink").fit(week)
    assert auto.chosen == "weighted(" + "+".join(sorted(FAST)) + ")"
    assert auto.why_chosen == ("5 inner fold(s), under the 7 a pick needs: the pick weighs 5/7, every candidate an "
                               "equal share of the rest")
    np.testing.assert_allclose(auto.model_.point(24), 5 / 7 * picking.model_.point(24) + 2 / 7 * paths.mean(axis=0))
    default = AutoForecaster(FAST).fit(week)
    assert backtest(week, folds=7, models=FAST).selected_why == default.why_chosen
    pooled = AutoForecaster(FAST, min_selection_folds=7, weak_evidence="mean").fit(week)
    assert pooled.chosen == "mean(" + "+".join(sorted(FAST)) + ")" and pooled.scores_ == {}
    np.testing.assert_allclose(pooled.model_.point(24), paths.mean(axis=0))
    for j, origin in enumerate(pooled.origins_[1:], start=1):
        pool = np.mean([point_forecast(models.MODELS[c], week, origin, 24) for c in FAST], axis=0)
        np.testing.assert_allclose(pooled.points_[j], pool)
    picked = AutoForecaster(FAST).fit(demand(weeks=4))
    assert picked.scores_ and picked.why_chosen is None
    with pytest.raises(ValueError):
        AutoForecaster(FAST, weak_evidence="vote")


def test_with_too_few_inner_folds_the_inverse_rule_gives_the_rest_by_inverse_squared_mase():
    """weak_evidence="shrink-inverse": the pick weighs k/7 as under "shrink", and the rest goes to the candidates in
    proportion to 1 / their MASE squared on the k folds (Bates & Granger), so one far off on them weighs little: on
    a series that is zero every night, the last value held (zero all day) gets almost none of it."""
    week = demand(weeks=1)
    paths = np.array([models.MODELS[c]().fit(week).point(24) for c in FAST])
    picking = AutoForecaster(FAST, min_selection_folds=0).fit(week)
    auto = AutoForecaster(FAST, min_selection_folds=7, weak_evidence="shrink-inverse").fit(week)
    weights = np.array([picking.scores_[c] for c in FAST]) ** -2.0
    rest = (weights / weights.sum()) @ paths
    np.testing.assert_allclose(auto.model_.point(24), 5 / 7 * picking.model_.point(24) + 2 / 7 * rest)
    assert auto.why_chosen == ("5 inner fold(s), under the 7 a pick needs: the pick weighs 5/7, every candidate a "
                               "share by 1 / its MASE squared on them of the rest")
    hours = pd.date_range("2026-03-02", periods=7 * 24, freq="h", tz="UTC")
    day = 100.0 + 10 * np.sin(hours.hour) + np.random.default_rng(3).normal(0, 5, len(hours))
    nights = pd.Series(np.where((hours.hour >= 6) & (hours.hour < 22), day, 0.0), hours)
    pool = (*FAST, "naive")
    fitted = AutoForecaster(pool, min_selection_folds=7, weak_evidence="shrink-inverse").fit(nights)
    naive = pool.index("naive")
    assert fitted.model_.weights[naive] < 0.01 * (1 - 5 / 7), fitted.model_.weights


def test_with_too_few_inner_folds_the_unrefuted_rule_shares_the_rest_among_candidates_not_beaten_on_every_fold():
    """weak_evidence="shrink-unrefuted": the pick weighs k/7 as under "shrink", and the rest goes in equal shares to
    the candidates that beat the best one on at least one of the k folds (and to it): on a series that is zero every
    night, the last value held (zero all day), beaten on every fold, gets none of it."""
    hours = pd.date_range("2026-03-02", periods=7 * 24, freq="h", tz="UTC")
    day = 100.0 + 10 * np.sin(hours.hour) + np.random.default_rng(3).normal(0, 5, len(hours))
    nights = pd.Series(np.where((hours.hour >= 6) & (hours.hour < 22), day, 0.0), hours)
    pool = (*FAST, "naive")
    picking = AutoForecaster(pool, min_selection_folds=0).fit(nights)
    auto = AutoForecaster(pool, min_selection_folds=7, weak_evidence="shrink-unrefuted").fit(nights)
    best = min(pool, key=lambda c: picking.scores_[c])
    weights = dict(zip(auto.model_.members, auto.model_.weights))
    assert "naive" not in weights and "naive" not in auto.chosen and weights[best] > 0  # no weight: not in the pick
    assert sum(weights.values()) == pytest.approx(1.0)
    assert auto.why_chosen == ("5 inner fold(s), under the 7 a pick needs: the pick weighs 5/7, every candidate not "
                               "worse than the best on each of them an equal share of the rest")
    shrunk = AutoForecaster(pool, min_selection_folds=7, weak_evidence="shrink").fit(nights)
    assert dict(zip(pool, shrunk.model_.weights))["naive"] == pytest.approx(2 / 7 / len(pool))  # the old equal share


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.floats(0, 1e6), st.just(float("nan")), st.just(float("inf"))), min_size=1, max_size=8))
def test_inverse_square_weights_are_a_distribution_favouring_the_lower_score(scores):
    """Non-negative, summing to 1; a lower finite score never weighs less; a perfect score (0) takes everything;
    no finite score at all: equal weights."""
    s = np.array(scores)
    w = inverse_square_weights(s)
    assert np.all(w >= 0) and w.sum() == pytest.approx(1.0)
    real = np.isfinite(s)
    if not real.any():
        np.testing.assert_allclose(w, 1 / len(s))
    elif (s[real] == 0).any():
        assert w[~(real & (s == 0))].sum() == 0
    else:
        assert np.all(w[~real] == 0)
        order = np.argsort(s[real])
        assert np.all(np.diff(w[real][order]) <= 1e-12)


def test_a_null_mase_of_a_history_with_no_hour_known_a_day_apart_names_its_gaps():
    """A week scraped for ten hours, then from its last day on: no hour before any scored origin is known together
    with the hour a day earlier. The note said the history did not change from one day to the next "(constant, or one
    day's shape repeated exactly)", of a history that changed every hour it was known; `train` refused it so too."""
    hours = 7 * 24
    values = 100 + 40 * np.sin(2 * np.pi * np.arange(hours) / 24)
    values[10:148] = np.nan
    history = pd.Series(values, index=pd.date_range("2026-01-05", periods=hours, freq="h", tz="UTC"))
    result = backtest(history, folds=5, models=["snaive24"])
    assert result.models["snaive24"]["mase"] != result.models["snaive24"]["mase"]  # NaN: no scale
    assert result.notes[0] == ("mase and pinball_* are null: they divide errors by the history's change from one day "
                               "to the next, and before every origin no hour is known together with the same hour a "
                               "day earlier (the history's gaps)")
