"""The seasonal clock (forecast.clock, a policy's spec.timezone): forecasts on local wall-clock hours across daylight
saving changes, handed back on UTC hours; UTC, the default, is today's forecast bit for bit."""
import json
from zoneinfo import available_timezones

import numpy as np
import pandas as pd
import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from controller.observe import issue
from core.errors import ConfigError
from core.policy import PolicySpec, parse_policy_spec
from core.units import check_timezone
from forecast.backtest import AutoForecaster
from forecast.baselines import BASELINES
from forecast.clock import local_hours, on_clock, on_utc, wall_clock
from forecast.metrics import mase, seasonal_scale
from forecast.models import MODELS

BERLIN = "Europe/Berlin"
# Monday 2026-03-30 00:00 in Berlin, the day after the clocks went forward (Sunday 2026-03-29 02:00 -> 03:00)
WEEK_AFTER = pd.Timestamp("2026-03-29 22:00", tz="UTC")
SPEC = {"query": "demand", "capacity": {"demandPerGpu": 1.0}, "target": {"kind": "Deployment", "name": "chat"}}


def business_hours(start: str, end: str, zone: str, step: str = "h", seed: int = 0) -> pd.Series:
    """Demand at 100 from 09:00 to 17:00 local time on weekdays, 20 otherwise, with 5 % noise (UTC index)."""
    index = pd.date_range(start, end, freq=step, tz="UTC", inclusive="left")
    local = index.tz_convert(zone)
    busy = (local.hour >= 9) & (local.hour < 17) & (local.day_of_week < 5)
    noise = np.random.default_rng(seed).lognormal(0, 0.05, len(index))
    return pd.Series(np.where(busy, 100.0, 20.0) * noise, index=index, name="value")


@st.composite
def hourly_series(draw, zones=("Europe/Berlin", "America/New_York", "Australia/Sydney", "Europe/London",
                                "Australia/Lord_Howe", "Asia/Kathmandu")):
    """An hourly UTC series of 1-400 hours starting near a DST change of a zone, with NaN gaps."""
    zone = draw(st.sampled_from(zones))
    change = draw(st.sampled_from(["2026-03-08", "2026-03-29", "2026-04-05", "2026-10-04", "2026-10-25",
                                   "2026-11-01"]))
    start = pd.Timestamp(change, tz="UTC") + pd.Timedelta(hours=draw(st.integers(-200, 48)))
    values = draw(st.lists(st.one_of(st.floats(0, 1e6), st.just(float("nan"))), min_size=1, max_size=400))
    return zone, pd.Series(values, index=pd.date_range(start, periods=len(values), freq="h"), dtype=float)


# ------------------------------------------------------------------------------------------- (a) UTC is today's
@given(series=hourly_series(zones=("UTC",)), model=st.sampled_from(["snaive24", "snaive168", "profile", "profile24"]))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_utc_is_todays_forecast_bit_for_bit(series, model):
    """The default clock hands the model over untouched, and issue() with a policy that leaves timezone out forecasts
    exactly what the bare model does."""
    _, history = series
    bare = MODELS[model]()
    assert on_clock(bare) is bare and local_hours(history, "UTC") is history
    if history.notna().sum() < 2:
        return
    now = history.index[-1] + pd.Timedelta(hours=1)
    spec = PolicySpec.model_validate(SPEC)
    assert spec.timezone == "UTC"
    issued = issue(MODELS[model](), model, history, now, spec, 0, 24)
    expected = MODELS[model]().fit(history).predict(24, sorted(issued.frame.columns))
    pd.testing.assert_frame_equal(issued.frame, expected, check_exact=True)


@given(series=hourly_series(zones=("Etc/GMT-3",)), model=st.sampled_from(["snaive24", "snaive168", "profile"]))
@settings(max_examples=40, deadline=None)
def test_a_zone_without_daylight_saving_forecasts_what_utc_does(series, model):
    """The wrapper's machinery itself (re-index, map back) changes nothing when the clock has no change to follow: a
    fixed-offset zone gives the UTC forecast, value for value."""
    zone, history = series
    if history.notna().sum() < 2:
        return
    on_zone = on_clock(MODELS[model](), zone).fit(history).predict(30, [0.5, 0.9])
    bare = MODELS[model]().fit(history).predict(30, [0.5, 0.9])
    pd.testing.assert_frame_equal(on_zone, bare, check_exact=True, check_freq=False)


# ------------------------------------------------------------------------- (d) the doubled and the missing hour
@given(series=hourly_series())
@settings(max_examples=300, deadline=None)
def test_the_re_index_and_its_inverse_round_trip(series):
    """local_hours puts each UTC hour on its wall-clock hour: the result is one value per wall-clock hour, the
    skipped hour a gap, the repeated hour the mean of its UTC hours (once both are seen); on_utc maps it back, every
    other UTC hour to its own value, both UTC hours of a repeated hour to that mean."""
    zone, history = series
    local = local_hours(history, zone)
    wall = wall_clock(history.index, zone)
    assert local.index.tz is not None and str(local.index.tz) == "UTC"
    if len(local):
        assert (local.index == pd.date_range(local.index[0], local.index[-1], freq="h")).all()
        assert local.index[0] == wall[0]
    # the skipped wall-clock hours are gaps; every wall-clock hour of the history is there but a last, half-seen one
    skipped = local.index.difference(wall)
    assert local[skipped].isna().all()
    repeated_ahead = wall_clock(history.index[-1:] + pd.Timedelta(hours=1), zone)[0] == wall[-1]
    assert set(local.index) >= set(wall[:-1] if repeated_ahead else wall)
    back = on_utc(local.to_frame("v"), history.index, zone)["v"]
    for hour in set(wall) & set(local.index):
        expected = history[wall == hour]
        mean = expected.mean()  # NaN-skipping: the seen hours of the repeated hour; NaN if none
        assert (np.isnan(mean) and np.isnan(local[hour])) or local[hour] == pytest.approx(mean, rel=1e-12)
        assert np.allclose(back[wall == hour], local[hour], equal_nan=True, rtol=1e-12)
        if len(expected) == 1:  # not a repeated hour: the round trip gives the very value
            assert np.array_equal(back[wall == hour], expected, equal_nan=True)


@given(series=hourly_series(), horizon=st.integers(1, 60))
@settings(max_examples=200, deadline=None)
def test_the_forecast_is_on_the_utc_hours_after_the_history(series, horizon):
    """Whatever the changes in the history and the horizon, the forecast covers exactly the next `horizon` UTC hours
    (the repeated hour's two UTC hours get the same forecast) and nothing of it is lost to the re-index."""
    zone, history = series
    assume(len(history) > 1)  # one hour, the first of a repeated one, leaves nothing to fit: every caller needs 48
    history = history.fillna(1.0)
    frame = on_clock(BASELINES["static"](), zone).fit(history).predict(horizon, [0.5])
    assert (frame.index == pd.date_range(history.index[-1] + pd.Timedelta(hours=1), periods=horizon, freq="h")).all()
    assert frame.notna().all().all()


@pytest.mark.parametrize("zone", ["Australia/Lord_Howe", "Asia/Kathmandu"])
def test_a_zone_a_fraction_of_an_hour_off_utc_forecasts_every_hour(zone, tmp_path, capsys):
    """Lord Howe Island moves its clock by half an hour (+11:00 to +10:30 on 2026-04-05), Kathmandu is 5:45 off UTC:
    the wall-clock hours are one grid of hours on both sides of the change, so every hour is forecast (the
    wall clock's own minutes put every hour after the change off the grid before it: all NaN, printed as NaN
    in --json, exit 0)."""
    from cli.main import main

    demand = tmp_path / "demand.csv"
    business_hours("2026-03-16", "2026-04-09", zone).rename_axis("timestamp").to_csv(demand)
    assert main(["forecast", str(demand), "--timezone", zone, "--horizon", "24", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out, parse_constant=pytest.fail)["forecast"]
    assert len(rows) == 24 and all(np.isfinite(r["q0.5"]) for r in rows)
    busy = [r for r in rows if pd.Timestamp(r["timestamp"]).tz_convert(zone).hour in range(10, 16)]
    assert busy and min(r["q0.5"] for r in busy) > 60  # the peak at its local hours, whatever the minutes


def test_the_repeated_hour_is_the_mean_of_its_two_utc_hours_and_the_skipped_hour_a_gap():
    autumn = pd.Series([1.0, 2.0, 3.0, 5.0, 7.0], index=pd.date_range("2026-10-24 23:00", periods=5, freq="h",
                                                                        tz="UTC"))
    # 01:00, 02:00 CEST, 02:00 CET, 03:00 CET (and 00:00 UTC of the 25th is 02:00 CEST)
    assert local_hours(autumn, BERLIN).to_dict() == {pd.Timestamp(f"2026-10-25 0{h}:00", tz="UTC"): v
                                                     for h, v in ((1, 1.0), (2, 2.5), (3, 5.0), (4, 7.0))}
    assert on_utc(local_hours(autumn, BERLIN).to_frame("v"), autumn.index, BERLIN)["v"].tolist() == \
        [1.0, 2.5, 2.5, 5.0, 7.0]
    spring = pd.Series([1.0, 2.0, 3.0], index=pd.date_range("2026-03-29 00:00", periods=3, freq="h", tz="UTC"))
    assert local_hours(spring, BERLIN).tolist() == pytest.approx([1.0, np.nan, 2.0, 3.0], nan_ok=True)
    # the history ends on the first of the repeated hours: that hour is forecast (for its second UTC hour), not fitted
    assert local_hours(autumn.iloc[:2], BERLIN).index[-1] == pd.Timestamp("2026-10-25 01:00", tz="UTC")


# ------------------------------------------------------------------- (b) the forecast peak stays at local hours
@pytest.mark.parametrize("model", ["snaive168", "profile", "auto"])
def test_a_business_hours_peak_is_forecast_at_its_local_hours_after_the_spring_change(model):
    """Four weeks of a 09:00-17:00 Berlin peak up to the Monday after the clocks went forward; the week after
    forecast. On UTC hours the seasonal models put the peak an hour late (last week's 08:00-16:00 UTC is this week's
    09:00-17:00 CEST, 07:00-15:00 UTC); on Berlin's clock they put it at 09:00-17:00 local, and MASE drops sharply."""
    series = business_hours("2026-02-23", "2026-04-06", BERLIN)
    history, week = series[series.index < WEEK_AFTER], series[series.index >= WEEK_AFTER].iloc[:168]
    scale = seasonal_scale(history.to_numpy(), 24)
    scores, peaks = {}, {}
    for zone in ("UTC", BERLIN):
        make = (lambda: AutoForecaster()) if model == "auto" else MODELS[model]
        frame = on_clock(make(), zone).fit(history).predict(168, [0.5, 0.9])
        assert (frame.index == week.index).all()
        scores[zone] = mase(week.to_numpy(), frame[0.5].to_numpy(), scale)
        weekdays = frame[frame.index.tz_convert(BERLIN).day_of_week < 5][0.5]
        peaks[zone] = sorted(set(weekdays[weekdays > 60].index.tz_convert(BERLIN).hour))
    assert peaks[BERLIN] == list(range(9, 17))
    assert peaks["UTC"] == list(range(10, 18))  # an hour late: the morning ramp is short
    assert scores[BERLIN] < scores["UTC"] / 2.5, scores


# -------------------------------------------------------------------- (c) the simulator: shortage at the ramps
def test_simulate_with_the_policy_s_timezone_is_short_far_less_in_the_week_after_the_change(tmp_path, capsys):
    """`headroom simulate --policy-file P` over the week after the spring change of a Berlin business-hours trace
    (5-minute samples): with spec.timezone Europe/Berlin the reservation is up before 09:00 local; on UTC hours the
    forecast ramps an hour late and the morning ramps go short."""
    from cli.main import main

    trace = business_hours("2026-02-23", "2026-04-05 22:00", BERLIN, step="5min")
    demand = tmp_path / "berlin.csv"
    pd.DataFrame({"timestamp": trace.index.strftime("%Y-%m-%dT%H:%M:%SZ"), "value": trace.round(2)}).to_csv(
        demand, index=False)
    results = {}
    for zone in ("UTC", BERLIN):
        policy = tmp_path / "p.yaml"
        policy.write_text(yaml.safe_dump({"apiVersion": "headroom.dev/v1alpha1", "kind": "ReservationPolicy",
                                          "metadata": {"name": "chat", "namespace": "inference"},
                                          "spec": {**SPEC, "mode": "active", "timezone": zone}}))
        assert main(["simulate", str(demand), "--policy-file", str(policy), "--days", "7", "--json"]) == 0
        results[zone] = json.loads(capsys.readouterr().out)
        assert results[zone]["policy"]["timezone"] == zone
    utc, local = results["UTC"], results[BERLIN]
    assert not utc["objective_met"] and local["objective_met"]
    assert local["shortage_within_cluster"] < utc["shortage_within_cluster"] / 100
    assert local["shortage_hours"] < utc["shortage_hours"]
    assert local["mean_reserved_gpus"] <= utc["mean_reserved_gpus"]


# ----------------------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("zone", ["Europe/Berln", "CEST", "../../etc/passwd", "", "europe/berlin", "localtime", 3])
def test_a_zone_that_is_not_an_iana_time_zone_is_an_error_naming_spec_timezone(zone):
    with pytest.raises(ConfigError) as caught:
        parse_policy_spec({**SPEC, "timezone": zone}, "p.yaml")
    assert "spec.timezone:" in str(caught.value)


@given(st.sampled_from(sorted(z for z in available_timezones() if "/" in z and not z.startswith("Etc/"))),
       st.sampled_from(["lower", "city", "spaces", "letter left out"]), st.data())
def test_a_zone_misspelt_is_named_with_the_zone_it_misspells(zone, how, data):
    """'Europe/berlin', 'Berlin' or 'America/New York' said only "is not an IANA time zone, e.g. Europe/Berlin, ...":
    the zone meant is now named. A city several zones share (Pacific), or a letter left out that spells another
    zone or a short name, is not guessed at (the ordinary message stays)."""
    city = zone.rsplit("/", 1)[-1]
    cut = data.draw(st.integers(len(zone) - len(city), len(zone) - 1), label="cut")  # a letter of the city's name
    typed = {"lower": zone.lower(), "city": city, "spaces": zone.replace("_", " "),
             "letter left out": zone[:cut] + zone[cut + 1:]}[how]
    assume(typed not in available_timezones())
    try:
        check_timezone(typed)
    except ValueError as exc:
        said = str(exc)
    assert said.startswith(f"{typed!r} is not an IANA time zone")
    shared = sum(z.rsplit("/", 1)[-1] == city for z in available_timezones() if not z.startswith("Etc/")) > 1
    if how in ("lower", "spaces") or (how == "city" and not shared):
        assert said.endswith(f": did you mean {zone}?"), said
    elif said.endswith("?"):  # a close spelling: a real zone, never an offset's
        meant = said.rsplit(" ", 1)[-1][:-1]
        assert meant in available_timezones() and not meant.startswith("Etc/"), said


@pytest.mark.parametrize("typed", ["CEST", "PST", "AEDT", "GMT+2", "gmt-5", "+02:00", "UTC+2", "Pacific"])
def test_an_abbreviation_or_an_offset_is_not_guessed_at(typed):
    """CEST is one letter from EST, six hours away; Etc/GMT+2 is UTC-2: a guess there would be a wrong clock."""
    with pytest.raises(ValueError) as caught:
        check_timezone(typed)
    assert str(caught.value) == f"{typed!r} is not an IANA time zone, e.g. Europe/Berlin, America/New_York or UTC"


@pytest.mark.parametrize("command", [["forecast"], ["backtest"], ["train", "--name", "x"], ["simulate"], ["tune"]])
def test_a_bad_timezone_flag_is_a_usage_error_naming_forecast_timezone(command, tmp_path, capsys):
    from cli.main import main

    demand = tmp_path / "d.csv"
    demand.write_text("timestamp,value\n2026-01-01T00:00:00Z,1\n")
    where = ["--history", str(demand)] if command[0] == "train" else [str(demand)]
    assert main([*command, *where, "--timezone", "Europe/Berln"]) == 2
    err = capsys.readouterr().err
    assert "forecast.timezone: 'Europe/Berln' is not an IANA time zone" in err and "command line" in err


def test_the_embedded_controller_forecasts_on_the_policy_s_clock_as_simulate_does(tmp_path, monkeypatch, capsys):
    """`headroom run --policy-file P` (the controller's path: controller.observe.issue) and `headroom simulate` with
    spec.timezone Europe/Berlin decide the same at every step of the Monday after the change, and the reservation
    is up leadTime (15m) ahead of the 09:00 local ramp (07:00 UTC); on UTC hours it waits for the demand to arrive."""
    from tests.test_sameness import _both

    monkeypatch.chdir(tmp_path)  # the embedded controller keeps its MLflow store and forecast log here
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    trace = business_hours("2026-02-23", "2026-03-30 22:00", BERLIN, step="5min")
    demand = tmp_path / "berlin.csv"
    pd.DataFrame({"timestamp": trace.index.strftime("%Y-%m-%dT%H:%M:%SZ"), "value": trace.round(2)}).to_csv(
        demand, index=False)
    policy = tmp_path / "p.yaml"
    policy.write_text(yaml.safe_dump({"apiVersion": "headroom.dev/v1alpha1", "kind": "ReservationPolicy",
                                      "metadata": {"name": "inference", "namespace": "default"},
                                      "spec": {**SPEC, "mode": "active", "timezone": BERLIN,
                                               "trainingClusterQueues": ["training"]}}))
    simulated, ran = _both(tmp_path, demand, str(policy), days=1)
    assert simulated == ran
    frame = pd.read_csv(tmp_path / "simulate.csv", parse_dates=["timestamp"]).set_index("timestamp")
    assert (frame.loc["2026-03-30T06:45Z":"2026-03-30T14:55Z", "reserved_gpus"] >= 100).all()


def test_the_commands_without_a_policy_file_take_the_timezone_flag(tmp_path, capsys, monkeypatch):
    """`forecast --timezone` puts the peak of the Monday after the spring change at 09:00-17:00 Berlin time
    (07:00-15:00 UTC), UTC an hour late; `backtest`, `simulate` (its policy) and `train` take it too."""
    from cli.main import main

    demand = tmp_path / "berlin.csv"
    business_hours("2026-02-23", "2026-03-29 22:00", BERLIN).rename_axis("timestamp").to_csv(demand)
    peaks = {}
    for zone in ("UTC", BERLIN):
        assert main(["forecast", str(demand), "--timezone", zone, "--horizon", "24", "--json"]) == 0
        rows = json.loads(capsys.readouterr().out)["forecast"]
        peaks[zone] = [pd.Timestamp(r["timestamp"]).hour for r in rows if r["q0.5"] > 60]
    assert peaks == {"UTC": list(range(8, 16)), BERLIN: list(range(7, 15))}
    assert main(["backtest", str(demand), "--timezone", BERLIN, "--folds", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["timezone"] == BERLIN
    # simulate (and tune) without a policy file: the policy they run and tune is on the flag's clock
    assert main(["simulate", str(demand), "--timezone", BERLIN, "--policy", "oracle", "--days", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["policy"]["timezone"] == BERLIN
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert main(["train", "--history", str(demand), "--name", "berlin", "--timezone", BERLIN]) == 0
