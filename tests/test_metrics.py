"""/metrics over the ControllerStates a real reconcile loop publishes (a day on the embedded cluster, see
tests/test_run.reconciled_day), with a fresh registry per scrape."""
from __future__ import annotations

import dataclasses
import re
import urllib.error
import urllib.request
from pathlib import Path

import pandas as pd
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from controller import metrics as m
from controller.state import (
    ERROR_STAGES,
    PREEMPTION_KINDS,
    RECONCILE_BUCKETS,
    ControllerState,
    Histogram,
    StateHolder,
)
from tests.test_run import MONDAY_6AM, Replay, reconciled_day

QUANTILES = (0.1, 0.5, 0.9, 0.99)  # what the controller forecasts for targetQuantile 0.9, headroomQuantile 0.99


@pytest.fixture(scope="module")
def day(tmp_path_factory):
    """(the replay, every state its reconciles published, in order)."""
    states: list[ControllerState] = []
    replay = reconciled_day(tmp_path_factory.mktemp("day"), states)
    return replay, states


@pytest.fixture(scope="module")
def last(day):
    return day[1][-1]


def scrape(state: ControllerState) -> str:
    return generate_latest(m.registry_for(StateHolder(state))).decode()


def samples(text: str) -> dict[tuple[str, frozenset], float]:
    """(sample name, labels) -> value for every sample in an exposition text."""
    return {(s.name, frozenset(s.labels.items())): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def value(text: str, metric: m.Metric, **labels) -> float:
    return samples(text)[(metric.name, frozenset(labels.items()))]


def test_exports_the_plans_reservation_headroom_slack_and_forecast(day, last):
    replay = day[0]
    text = scrape(last)
    ps = last.policies["inference/chat"]
    status = replay.cluster.statuses[("inference", "chat")]
    assert value(text, m.RESERVED, policy="inference/chat") == ps.reserved_gpus == status["reservedGpus"] > 0
    assert value(text, m.HEADROOM, policy="inference/chat") == ps.headroom_gpus == status["headroomGpus"] > 0
    assert value(text, m.RECLAIMABLE, policy="inference/chat") == ps.reclaimable_gpus
    # the band HeadroomAtRisk holds the reclaimable GPUs against: the policy's ask within what is lent
    assert value(text, m.HEADROOM_BAND) == last.headroom_band_gpus == min(ps.headroom_gpus, last.slack_gpus) > 0
    assert value(text, m.HEADROOM_WANTED) == last.headroom_wanted_gpus == ps.headroom_gpus  # its one policy's ask
    assert value(text, m.POLICY_VALID, policy="inference/chat") == 1
    assert value(text, m.POLICY_INFO, policy="inference/chat", mode="active", model=ps.model) == 1
    assert ps.model.startswith("auto")
    assert value(text, m.DEMAND, policy="inference/chat") == ps.observed_demand > 0
    assert value(text, m.DEMAND_PER_GPU, policy="inference/chat") == 10.0
    assert value(text, m.RESERVATION_UTILIZATION, policy="inference/chat") == pytest.approx(
        ps.observed_demand / (ps.reserved_gpus * 10.0))
    assert value(text, m.FALLBACK, policy="inference/chat") == 0
    assert value(text, m.DEGRADED, policy="inference/chat") == 0
    assert value(text, m.FORECAST_AGE, policy="inference/chat") == ps.forecast_age_seconds
    hour = ps.now.floor("h")
    assert list(ps.forecast.columns) == list(QUANTILES)
    for h in m.FORECAST_HORIZONS:
        for q in QUANTILES:
            expected = ps.forecast.loc[hour + pd.Timedelta(hours=h - 1), q]
            assert value(text, m.FORECAST, policy="inference/chat", quantile=f"{q:g}", horizon=f"{h}h") == \
                pytest.approx(expected)
    # horizon 1h is the forecast the reservation in force used
    assert value(text, m.FORECAST, policy="inference/chat", quantile="0.9", horizon="1h") == \
        pytest.approx(status["forecastDemand"])
    for h in (1, 6, 24):
        assert value(text, m.FORECAST_ERROR, policy="inference/chat", horizon=f"{h}h") == ps.realized_error[h]
        assert value(text, m.FORECAST_COVERAGE, policy="inference/chat", horizon=f"{h}h") == ps.realized_coverage_80[h]
    assert status["realizedError"]["24h"] == pytest.approx(ps.realized_error[24])
    assert value(text, m.SLACK) == last.slack_gpus == 128 - ps.reserved_gpus and "slackGpus" not in status
    assert value(text, m.CAPACITY) == 128
    assert value(text, m.TRAINING) == last.training_gpus > 0
    assert value(text, m.LEADER) == 1
    assert value(text, m.LAST_RECONCILE) == last.last_reconcile_timestamp > 0
    assert value(text, m.RECONCILES) == len(day[1])


def test_realized_error_and_coverage_are_the_last_drift_window_s_hours_and_say_so(day, last):
    """headroom_forecast_scaled_error_ratio and headroom_forecast_coverage_ratio are means over the last
    training.drift_window scored hours of each horizon: recomputed here from the forecasts the day issued (each
    scaled by its own fitting window's scale) and the hourly actuals, and named in their HELP."""
    from controller.observe import hourly_history
    from core.settings import TrainingConfig
    from training.realized import realized_errors

    replay, window = day[0], TrainingConfig().drift_window
    ps = last.policies["inference/chat"]
    raw = replay.files.series("inference/chat")
    hourly = hourly_history(raw[raw.index <= ps.now], "max", ps.now)
    errors = realized_errors(replay.log.load("inference.chat"), hourly, float("nan"))
    text = scrape(last)
    for h in m.FORECAST_HORIZONS:
        recent = errors[errors["horizon"] == h].sort_values("target").tail(window)
        assert len(recent) > 0, h
        assert value(text, m.FORECAST_ERROR, policy="inference/chat", horizon=f"{h}h") == pytest.approx(
            recent["scaled_error"].mean())
        assert value(text, m.FORECAST_COVERAGE, policy="inference/chat", horizon=f"{h}h") == pytest.approx(
            recent["inside_80"].mean())
    for metric in (m.FORECAST_ERROR, m.FORECAST_COVERAGE):
        assert "over the last training.drift_window scored hours" in metric.help, metric.name


def test_forecast_horizons_past_the_forecast_are_left_out(last):
    short = {k: dataclasses.replace(v, forecast=v.forecast.iloc[:6]) if v.valid else v
             for k, v in last.policies.items()}
    text = scrape(dataclasses.replace(last, policies=short))
    horizons = {dict(labels)["horizon"] for (name, labels) in samples(text) if name == m.FORECAST.name}
    assert horizons == {"1h", "6h"}


def test_preemptions_and_lost_work_are_what_the_cluster_saw(day, last):
    replay = day[0]
    text = scrape(last)
    preempted = replay.events("Preempted")
    by_kind = {k: [e for e in preempted if e["message"].startswith(k)] for k in PREEMPTION_KINDS}
    assert by_kind["emergency"] and by_kind["planned"], "the day must make the planner preempt both ways"
    for kind, events in by_kind.items():
        assert value(text, m.PREEMPTIONS, kind=kind) == len(events) == last.preemptions_total[kind]
        lost = sum(int(e["message"].split()[3]) * float(re.search(r"\((\d+) s of work lost", e["message"])[1])
                   for e in events)
        assert value(text, m.LOST_WORK, kind=kind) == pytest.approx(lost, abs=4 * len(events))
    for team in ("research", "product"):  # the backlog names each job after its queue
        mine = [e for e in preempted if e["name"].startswith(f"{team}-job-")]
        assert mine and value(text, m.TEAM_PREEMPTIONS, team=team) == len(mine)


def test_every_error_stage_and_preemption_kind_is_there_from_zero(demand_file, tmp_path):
    """A first reconcile with nothing gone wrong and nothing preempted: rate() needs the zeros to start from."""
    state = Replay(tmp_path, demand_file).step(MONDAY_6AM)
    assert state.reconcile_errors_total == {} and state.preemptions_total == {}
    text = scrape(state)
    for stage in ERROR_STAGES:
        assert value(text, m.RECONCILE_ERRORS, stage=stage) == 0
    for kind in PREEMPTION_KINDS:
        assert value(text, m.PREEMPTIONS, kind=kind) == 0 and value(text, m.LOST_WORK, kind=kind) == 0
    assert {dict(labels)["stage"] for (name, labels) in samples(text) if name == m.RECONCILE_ERRORS.name} == \
        set(ERROR_STAGES)
    # ...and an error counted once is that stage's counter going to 1
    text = scrape(dataclasses.replace(state, reconcile_errors_total={"demand": 1}))
    assert value(text, m.RECONCILE_ERRORS, stage="demand") == 1 and value(text, m.RECONCILE_ERRORS, stage="mlflow") == 0


@pytest.fixture
def demand_file(tmp_path):
    from forecast.synthetic import write_csv
    from tests.test_run import DEMAND

    path = tmp_path / "demand.csv"
    write_csv(DEMAND, path)
    return path


def test_team_quota_usage_borrowed_lent_and_utilization(day, last):
    replay = day[0]
    text = scrape(last)
    assert set(last.teams) == {"research", "product"}
    for t in last.teams.values():
        assert value(text, m.TEAM_QUOTA, team=t.team) == t.quota_gpus == replay.cluster.quotas[t.team]
        assert value(text, m.TEAM_USED, team=t.team) == t.used_gpus > 0
        assert value(text, m.TEAM_BORROWED, team=t.team) == t.borrowed_gpus == max(t.used_gpus - t.quota_gpus, 0)
        assert value(text, m.TEAM_LENT, team=t.team) == t.lent_gpus == max(t.quota_gpus - t.used_gpus, 0)
        assert value(text, m.TEAM_UTILIZATION, team=t.team) == pytest.approx(t.used_gpus / t.quota_gpus)
        assert value(text, m.TEAM_GPU_SECONDS, team=t.team) == t.gpu_seconds_total > 0
        assert value(text, m.TEAM_BORROWED_SECONDS, team=t.team) == t.borrowed_gpu_seconds_total
        # every policy active: all of it ran on lent capacity
        assert value(text, m.TEAM_ON_LENT_SECONDS, team=t.team) == t.on_lent_gpu_seconds_total == t.gpu_seconds_total
    # the slack is split 2:1 by team weight, and training holds what the teams use
    assert last.teams["research"].quota_gpus + last.teams["product"].quota_gpus == last.slack_gpus
    assert last.teams["research"].quota_gpus == pytest.approx(2 * last.teams["product"].quota_gpus, abs=1)
    assert sum(t.used_gpus for t in last.teams.values()) == last.training_gpus
    # GPU-seconds add up what the teams held between reconciles (20 min apart)
    first = day[1][1]
    assert last.teams["research"].gpu_seconds_total >= first.teams["research"].gpu_seconds_total + \
        sum(s.teams["research"].used_gpus for s in day[1][2:]) * 1200 - 1e-6


def test_reconcile_histogram_comes_from_the_stored_buckets(last):
    s = samples(scrape(last))
    name = m.RECONCILE_DURATION.name
    counts = [s[(name + "_bucket", frozenset({("le", f"{float(le)}")}))] for le in RECONCILE_BUCKETS]
    assert counts == list(last.reconcile_seconds.buckets) and counts == sorted(counts)  # cumulative
    assert s[(name + "_bucket", frozenset({("le", "+Inf")}))] == s[(name + "_count", frozenset())] == \
        last.reconcile_total == 73
    assert s[(name + "_sum", frozenset())] == last.reconcile_seconds.sum > 0
    made_up = dataclasses.replace(last, reconcile_seconds=Histogram((0, 0, 1, 1, 2, 2, 2, 2, 2, 3), 4, 75.5))
    s = samples(scrape(made_up))
    assert s[(name + "_bucket", frozenset({("le", "0.25")}))] == 1
    assert s[(name + "_bucket", frozenset({("le", "60.0")}))] == 3
    assert s[(name + "_bucket", frozenset({("le", "+Inf")}))] == 4
    assert s[(name + "_count", frozenset())] == 4 and s[(name + "_sum", frozenset())] == 75.5
    with pytest.raises(ValueError, match=name):
        scrape(dataclasses.replace(last, reconcile_seconds=Histogram((1, 2))))


def test_status_lag_histogram_and_the_statuses_waiting():
    lag = Histogram().observe(0.2).observe(3.0).observe(0.04)
    assert lag.buckets == (1, 1, 2, 2, 2, 2, 3, 3, 3, 3) and lag.count == 3 and lag.sum == pytest.approx(3.24)
    s = samples(scrape(ControllerState(status_lag_seconds=lag, statuses_waiting=7)))
    name = m.STATUS_LAG.name
    assert s[(name + "_bucket", frozenset({("le", "0.25")}))] == 2
    assert s[(name + "_bucket", frozenset({("le", "+Inf")}))] == s[(name + "_count", frozenset())] == 3
    assert s[(m.STATUSES_WAITING.name, frozenset())] == 7


def test_invalid_policy_exports_only_valid_zero(last):
    assert not last.policies["inference/broken"].valid
    s = samples(scrape(last))
    broken = [(name, dict(labels)) for (name, labels), _ in s.items() if ("policy", "inference/broken") in labels]
    assert broken == [(m.POLICY_VALID.name, {"policy": "inference/broken"})]
    assert s[(m.POLICY_VALID.name, frozenset({("policy", "inference/broken")}))] == 0
    assert s[(m.RESERVED.name, frozenset({("policy", "inference/chat")}))] > 0  # the valid one is unaffected


def test_counters_are_monotone_across_publishes_and_read_at_scrape_time(day):
    holder = StateHolder()
    registry = m.registry_for(holder)
    before = samples(generate_latest(registry).decode())
    assert before[(m.RECONCILES.name, frozenset())] == 0
    counters = set()
    previous = before
    for k, state in enumerate(day[1]):
        holder.publish(state)
        text = generate_latest(registry).decode()  # the registry reads the holder at each scrape
        counters |= {s.name for fam in text_string_to_metric_families(text) if fam.type in ("counter", "histogram")
                     for s in fam.samples}
        now = samples(text)
        for key, v in previous.items():
            if key[0] in counters and key in now:
                assert now[key] >= v, (k, key)
        assert now[(m.RECONCILES.name, frozenset())] == k + 1
        previous = now
    assert {m.PREEMPTIONS.name, m.TEAM_GPU_SECONDS.name, m.RECONCILES.name,
            m.RECONCILE_DURATION.name + "_bucket"} <= counters
    emergency = (m.PREEMPTIONS.name, frozenset({("kind", "emergency")}))
    assert previous[emergency] > before.get(emergency, 0)


def test_names_units_and_bounded_labels(day):
    """Counters end in _total, every name says its unit (or is a 0/1 flag, an info, a count of things waiting or a
    demand in the query's unit), and every label takes values from a bounded set over a whole day of reconciles."""
    dimensionless = {m.POLICY_VALID, m.LEADER, m.FALLBACK, m.DEGRADED, m.FORECAST, m.DEMAND, m.DEMAND_PER_GPU,
                     m.STATUSES_WAITING, m.HEADROOM_AT_RISK}
    for metric in m.METRICS:
        assert metric.name.startswith("headroom_") and re.fullmatch(r"[a-z_]+", metric.name), metric.name
        assert metric.name.endswith("_total") == (metric.kind == "counter"), metric.name
        if metric.kind == "histogram":
            assert metric.name.endswith("_seconds")
        elif metric not in dimensionless:
            assert re.search(r"_(gpus|seconds|ratio|info)(_total)?$|_gpu_seconds_total$|_preemptions_total$"
                             r"|_reconciles_total$|_errors_total$", metric.name), metric.name
    values: dict[str, set[str]] = {}
    for state in day[1]:
        for fam in text_string_to_metric_families(scrape(state)):
            assert fam.name.startswith("headroom_")
            for s in fam.samples:
                for label, v in s.labels.items():
                    values.setdefault(label, set()).add(v)
    assert values["policy"] == {"inference/chat", "inference/broken"}
    assert values["team"] == {"research", "product"}
    assert values["quantile"] == {f"{q:g}" for q in QUANTILES}
    assert values["horizon"] == {f"{h}h" for h in m.FORECAST_HORIZONS}
    assert values["kind"] == set(PREEMPTION_KINDS) and values["stage"] == set(ERROR_STAGES)
    assert values["mode"] == {"active"}
    assert all(v == "fallback" or v.startswith("auto") for v in values["model"]) and len(values["model"]) <= 5
    assert values["reason"] <= {"HeadroomCovered", "ReclaimableBelowHeadroom", "HeadroomAboveCapacity", "CohortLends",
                                "CohortCycle"}
    assert set(values) == {"policy", "team", "quantile", "horizon", "kind", "stage", "mode", "model", "le", "reason"}


def test_headroom_at_risk_is_the_condition_by_its_reason(last):
    """An alert on the headroom needs it in the metrics, not only in each policy's status: 1 with the reason while
    at risk (CohortLends too, which no number shows), else 0."""
    from core.objects import Condition

    risk = last.headroom_at_risk
    assert value(scrape(last), m.HEADROOM_AT_RISK, reason=risk.reason) == (risk.status == "True")
    lends = dataclasses.replace(last, headroom_at_risk=Condition("HeadroomAtRisk", "True", "CohortLends", "..."))
    text = scrape(lends)
    assert value(text, m.HEADROOM_AT_RISK, reason="CohortLends") == 1
    assert [k for k in samples(text) if k[0] == m.HEADROOM_AT_RISK.name] == [
        (m.HEADROOM_AT_RISK.name, frozenset({("reason", "CohortLends")}))]  # one series: the reason now


def test_registry_holds_only_headroom_metrics(last):
    names = {fam.name for fam in text_string_to_metric_families(scrape(last))}
    assert names and all(n.startswith("headroom_") for n in names)
    assert {metric.name.removesuffix("_total") for metric in m.METRICS} == names  # a day exports every metric


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


@pytest.fixture
def served(day):
    flags = {"healthy": True, "ready": False}
    holder = StateHolder(day[1][-2])

    def ready():
        if flags["ready"] is None:
            raise RuntimeError("lease lost")
        return flags["ready"]

    server = m.serve(holder, 0, lambda: flags["healthy"], ready, host="127.0.0.1")
    yield f"http://127.0.0.1:{server.port}", holder, flags
    server.shutdown()


def test_http_metrics_is_the_collectors_text(served):
    base, holder, _ = served
    status, body = get(base + "/metrics")
    assert status == 200 and body == scrape(holder.get())
    assert get(base + "/nope")[0] == 404


def test_http_serves_the_latest_publish(served, day):
    base, holder, _ = served
    assert value(get(base + "/metrics")[1], m.RECONCILES) == len(day[1]) - 1
    holder.publish(day[1][-1])
    assert value(get(base + "/metrics")[1], m.RECONCILES) == len(day[1])


def test_health_and_ready_flip(served):
    base, _, flags = served
    assert get(base + "/healthz") == (200, "ok\n")
    assert get(base + "/readyz") == (503, "not ready\n")
    flags["ready"] = True
    assert get(base + "/readyz") == (200, "ok\n")
    flags["healthy"] = False
    assert get(base + "/healthz") == (503, "not healthy\n")
    flags["ready"] = None
    assert get(base + "/readyz") == (503, "not ready: RuntimeError: lease lost\n")


def test_the_headroom_asked_is_the_active_policies_beside_a_forecast_only_one(demand_file, tmp_path):
    """The ask HeadroomAtRisk compares with the band is the active policies' headroom: a forecast-only policy's is what
    it would ask, not part of it. The overview board draws headroom_headroom_wanted_gpus for it."""
    from tests.test_run import policy

    r = Replay(tmp_path, demand_file, policy("chat"),
               policy("batch", mode="forecast-only", trainingClusterQueues=["product"]))
    for minutes in range(0, 4 * 60 + 1, 20):
        state = r.step(MONDAY_6AM + pd.Timedelta(minutes=minutes))
    chat, batch = state.policies["inference/chat"], state.policies["inference/batch"]
    assert chat.mode == "active" and batch.mode == "forecast-only" and batch.headroom_gpus > 0
    text = scrape(state)
    assert value(text, m.HEADROOM_WANTED) == state.headroom_wanted_gpus == chat.headroom_gpus


def test_training_is_every_training_queue_s_beside_a_forecast_only_policy(demand_file, tmp_path):
    """chat is active, lending to research; batch, forecast-only, names product, full of training no one lends into
    or preempts. Those GPUs are held by training all the same: headroom_training_gpus left them out (24 at 06:00, of
    research, where product held 40 more), so the overview's cluster utilization counted them nowhere."""
    from tests.test_run import policy

    r = Replay(tmp_path, demand_file, policy("chat"),
               policy("batch", mode="forecast-only", trainingClusterQueues=["product"]))
    r.fill_training("product")
    for minutes in range(0, 4 * 60 + 1, 20):
        now = MONDAY_6AM + pd.Timedelta(minutes=minutes)
        if minutes:  # Replay.step, but the Workloads read between the reconcile and Kueue's admission pass
            r.cluster.advance(now.timestamp())
        state = r.reconciler.reconcile(now)
        held = {q: sum(w.gpus for w in r.running() if w.cluster_queue == q) for q in ("research", "product")}
        assert held["product"] > 0
        assert value(scrape(state), m.TRAINING) == state.training_gpus == held["research"] + held["product"], now
        r.cluster.admit()


def test_a_queue_only_a_forecast_only_policy_names_is_a_team(demand_file, tmp_path):
    """chat is active, lending to research; batch, forecast-only, names product, full of training headroom neither
    lends into nor preempts. Its team is a team all the same: there was no headroom_team_* series for product (teams
    were the active policies' queues), so the teams board showed none of its 40 running GPUs."""
    from tests.test_run import policy

    r = Replay(tmp_path, demand_file, policy("chat"),
               policy("batch", mode="forecast-only", trainingClusterQueues=["product"]))
    r.fill_training("product")
    used_seconds = 0.0
    for minutes in range(0, 4 * 60 + 1, 20):
        now = MONDAY_6AM + pd.Timedelta(minutes=minutes)
        if minutes:  # Replay.step, but the Workloads read between the reconcile and Kueue's admission pass
            r.cluster.advance(now.timestamp())
        state = r.reconciler.reconcile(now)
        text = scrape(state)
        assert "product" in state.teams, (now, sorted(state.teams))
        used = sum(w.gpus for w in r.running() if w.cluster_queue == "product")
        quota = r.cluster.quotas["product"]
        assert used > 0 and quota == 0, now  # headroom lent product nothing: what runs there borrows from the cohort
        assert (value(text, m.TEAM_QUOTA, team="product"), value(text, m.TEAM_USED, team="product"),
                value(text, m.TEAM_BORROWED, team="product"), value(text, m.TEAM_LENT, team="product")) \
            == (quota, used, used, 0), now
        used_seconds += used * 20 * 60 if minutes else 0  # counted at each reconcile since the last
        r.cluster.admit()
    assert value(text, m.TEAM_GPU_SECONDS, team="product") == used_seconds > 0
    assert value(text, m.TEAM_PREEMPTIONS, team="product") == 0  # headroom stops none of it
    assert "research" in state.teams


@pytest.mark.parametrize("chat_mode", ["active", "forecast-only"])
@pytest.mark.parametrize("batch_mode", ["active", "forecast-only"])
def test_gpu_seconds_on_lent_capacity_are_the_active_policies_queues_only(demand_file, tmp_path, chat_mode,
                                                                          batch_mode):
    """chat names research, batch names product, both full of training. The overview's savings count the GPU-seconds
    on lent capacity: a queue's only while its policy is active. Forecast-only, headroom lends its queue nothing (the
    savings panels counted product's 40 GPUs as saved beside active chat; with every policy forecast-only, all of
    it)."""
    from tests.test_run import policy

    r = Replay(tmp_path, demand_file, policy("chat", mode=chat_mode),
               policy("batch", mode=batch_mode, trainingClusterQueues=["product"]))
    r.fill_training("product")
    used_seconds = {"research": 0.0, "product": 0.0}
    for minutes in range(0, 4 * 60 + 1, 20):
        now = MONDAY_6AM + pd.Timedelta(minutes=minutes)
        if minutes:  # Replay.step, but the Workloads read between the reconcile and Kueue's admission pass
            r.cluster.advance(now.timestamp())
        state = r.reconciler.reconcile(now)
        for q in used_seconds:  # counted at each reconcile since the last
            used_seconds[q] += sum(w.gpus for w in r.running() if w.cluster_queue == q) * 20 * 60 if minutes else 0
        r.cluster.admit()
    text = scrape(state)
    lent_to = {q for q, mode in (("research", chat_mode), ("product", batch_mode)) if mode == "active"}
    for q, seconds in used_seconds.items():
        assert seconds > 0 and value(text, m.TEAM_GPU_SECONDS, team=q) == seconds, q
        assert value(text, m.TEAM_ON_LENT_SECONDS, team=q) == (seconds if q in lent_to else 0), q


def test_a_forecast_only_plan_lends_nothing_and_no_lent_gpu_must_come_back(demand_file, tmp_path):
    """chat is forecast-only, the only policy: it changes nothing, so nothing is lent and no lent GPU must come back.
    The cluster-wide numbers were its would-be plan's: at 07:00 86 GPUs lent (the overview's "GPUs lent to training")
    and a band of 32 beside research's quota of 0, and by 15:00 HeadroomAboveCapacity (it asked for 38 where 24 would
    be lent), an alert on lending that never happens. What chat would reserve and ask stays on its own series."""
    from tests.test_run import policy

    r = Replay(tmp_path, demand_file, policy("chat", mode="forecast-only"))
    r.fill_training()  # what research holds is its own: headroom lent none of it
    for minutes in range(0, 10 * 60 + 1, 20):
        state = r.step(MONDAY_6AM + pd.Timedelta(minutes=minutes))
        text = scrape(state)
        lent = (value(text, m.SLACK), value(text, m.HEADROOM_BAND), value(text, m.HEADROOM_WANTED))
        assert lent == (0, 0, 0) and r.cluster.quotas["research"] == 0, (minutes, lent)
        assert state.headroom_at_risk is not None and state.headroom_at_risk.status == "False", minutes
        chat = state.policies["inference/chat"]
        assert value(text, m.HEADROOM, policy="inference/chat") == chat.headroom_gpus > 0  # what it would ask
        assert value(text, m.RESERVED, policy="inference/chat") == chat.reserved_gpus > 0


def test_a_forecast_only_plan_reclaims_only_what_is_idle(demand_file, tmp_path):
    """chat is forecast-only, the only policy: headroom stops none of research's training and reserves nothing, so
    what inference could take back within the deadline is what is idle beside chat's replicas as they are. It was the
    would-be plan's: all of research's training as preemptible (104 at 06:00, with no GPU idle), the idle part beside
    the replicas chat would reserve."""
    from tests.test_run import policy

    r = Replay(tmp_path, demand_file, policy("chat", mode="forecast-only"))
    r.fill_training()
    seen = set()
    for hours in range(11):
        now = MONDAY_6AM + pd.Timedelta(hours=hours)
        if hours:  # Replay.step, but the cluster read between the reconcile and Kueue's admission pass
            r.cluster.advance(now.timestamp())
        state = r.reconciler.reconcile(now)
        assert value(scrape(state), m.RECLAIMABLE, policy="inference/chat") == r.cluster.idle_gpus, now
        seen.add((r.cluster.training_gpus > 0, r.cluster.idle_gpus > 0))
        r.cluster.admit()
    assert seen >= {(True, False), (True, True)}  # training running beside none idle, and beside some


def test_docs_table_lists_every_metric_with_its_type_and_labels():
    doc = (Path(__file__).resolve().parents[1] / "docs" / "observability.md").read_text()
    rows = {}
    for line in doc.splitlines():
        if line.startswith("| `headroom_"):
            name, kind, labels = (cell.strip() for cell in line.strip("|").split("|")[:3])
            rows[name.strip("`")] = (kind, () if labels == "–" else tuple(x.strip() for x in labels.split(",")))
    assert rows == {x.name: (x.kind, x.labels) for x in m.METRICS}


def test_a_replica_that_leads_again_counts_only_the_time_it_led(demand_file, tmp_path):
    """Two replicas, one leader at a time: replica a leads, loses the lease (the loop publishes its state with leader
    0), b leads an hour, a leads again. The dashboards add the replicas' team GPU-seconds counters (each counts only
    its own work): a must not count the hour b led, or that hour's training is counted twice."""
    from controller.reconcile import Reconciler

    r = Replay(tmp_path, demand_file)
    a = r.reconciler
    at = [MONDAY_6AM + pd.Timedelta(minutes=20 * k) for k in range(10)]
    used: list[int] = []
    for now in at[:4]:  # a leads: 0, 20, 40, 60 min
        used.append(r.step(now).teams["research"].used_gpus)
    a.holder.publish(dataclasses.replace(a.holder.get(), leader=False))  # a loses the lease (controller.loop)
    b = Reconciler(r.cluster, r.files, r.cfg, forecast_log=r.log)
    r.reconciler = b
    for now in at[4:8]:  # b leads: 80 .. 140 min
        used.append(r.step(now).teams["research"].used_gpus)
    r.reconciler = a  # a takes the lease back
    used.append(r.step(at[8]).teams["research"].used_gpus)
    counted = sum(x.holder.get().teams["research"].gpu_seconds_total for x in (a, b))
    # each replica counts from its own first reconcile as leader: a 0..60 and 160, b 80..140 (b's first step and
    # a's return count nothing; each later step the GPUs held then over the 20 minutes since the last one)
    expected = sum(used[1:4]) * 1200 + sum(used[5:8]) * 1200
    assert used[8] > 0 and counted == pytest.approx(expected), \
        f"{counted / 3600:.0f} GPU-hours counted, {expected / 3600:.0f} held while leading"


def test_forecast_age_grows_through_an_outage_and_is_not_reset_by_the_fallback(demand_file, tmp_path):
    """Prometheus down: the last good forecast ages, then (past keep_forecast_seconds) the fallback takes over. The age
    must not drop to 0, which reads as a fresh forecast at the moment there is none: no forecast, no age series."""
    from controller.demand import FileDemand
    from tests.test_run import FailingDemand

    demand = FailingDemand(FileDemand({"inference/chat": demand_file}))
    r = Replay(tmp_path, demand_file, demand=demand, run={"keep_forecast_seconds": 3600})
    r.step(MONDAY_6AM + pd.Timedelta(hours=4))
    demand.fail = True
    kept = r.step(MONDAY_6AM + pd.Timedelta(hours=4, minutes=30))
    assert value(scrape(kept), m.FORECAST_AGE, policy="inference/chat") == 1800  # made at 10:00, in use at 10:30
    gone = r.step(MONDAY_6AM + pd.Timedelta(hours=14))
    assert gone.policies["inference/chat"].fallback and gone.policies["inference/chat"].forecast is None
    text = scrape(gone)
    assert value(text, m.FALLBACK, policy="inference/chat") == 1
    assert (m.FORECAST_AGE.name, frozenset({"policy": "inference/chat"}.items())) not in samples(text), \
        "a policy on its fallback has no forecast, so no forecast age (it exported 0: 'fresh')"


def test_reclaimable_is_the_clusters_on_every_policy_and_says_so(demand_file, tmp_path):
    """headroom_reclaimable_gpus carries a policy label but is one cluster-wide number (controller.reconcile:
    idle GPUs plus training preemptible within the cluster's deadline): summed over policies, as the other per-policy
    GPU gauges are, it counts the same GPUs once per policy. Its help and the docs must say so."""
    from tests.test_run import policy

    r = Replay(tmp_path, demand_file, policy("chat"), policy("search", minGpus=8))
    state = r.step(MONDAY_6AM)  # off-peak: GPUs left over
    text = scrape(state)
    both = [value(text, m.RECLAIMABLE, policy=k) for k in ("inference/chat", "inference/search")]
    assert both[0] == both[1] == state.reclaimable_gpus > 0
    doc = (Path(__file__).resolve().parents[1] / "docs" / "observability.md").read_text()
    row = next(line for line in doc.splitlines() if line.startswith(f"| `{m.RECLAIMABLE.name}`"))
    for said in (m.RECLAIMABLE.help, row):
        assert "the same on every policy" in said, said


def test_what_the_docs_say_is_left_out_before_it_has_series_is(tmp_path):
    """docs/observability.md: 'A metric with no series yet (...) is left out'. The error counters are not among them:
    every stage is exported from 0, from the first scrape on."""
    families = {f.name for f in text_string_to_metric_families(scrape(ControllerState()))}
    assert m.RECONCILE_ERRORS.name.removesuffix("_total") in families
    assert m.TEAM_USED.name not in families and m.RESERVED.name not in families
    doc = (Path(__file__).resolve().parents[1] / "docs" / "observability.md").read_text()
    examples = re.search(r"A metric with no series yet \(([^)]*)\) is left out", doc)
    assert examples and "error" not in examples[1], examples and examples[1]
    assert "teams" in examples[1] and "polic" in examples[1]
