"""/metrics over ControllerStates built from the real planner's output, with a fresh registry per test."""
from __future__ import annotations

import dataclasses
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from controller import metrics as m
from planning.planner import Observation, Plan, Policy, RunningJob, Snapshot, WorkloadPolicy, plan
from planning.queue import Job, TeamQuota
from controller.state import RECONCILE_BUCKETS, ControllerState, PolicyState, StateHolder, TeamState

NOW = pd.Timestamp("2026-01-08 10:07", tz="UTC")
QUANTILES = (0.1, 0.5, 0.9, 0.99)
DEADLINE = 300.0


def forecast_frame(base: float, hours: int = 30) -> pd.DataFrame:
    """A daily-cycle forecast from the current hour on, one column per quantile."""
    idx = pd.date_range(NOW.floor("h"), periods=hours, freq="h")
    level = base * (1.5 + np.sin(np.arange(hours) * 2 * np.pi / 24))
    spread = {0.1: 0.6, 0.5: 1.0, 0.9: 1.4, 0.99: 2.0}
    return pd.DataFrame({q: level * spread[q] for q in QUANTILES}, index=idx)


def week_history(value: float) -> pd.Series:
    idx = pd.date_range(NOW.floor("h") - pd.Timedelta(days=8), NOW.floor("h"), freq="h")
    return pd.Series(value, index=idx, dtype=float)


POLICY = Policy(
    capacity_gpus=64,
    workloads=(WorkloadPolicy("prod/chat", demand_per_gpu=2.0, gpus_per_replica=2, min_gpus=2, max_gpus=40),
               WorkloadPolicy("prod/embed", demand_per_gpu=10.0, min_gpus=1, max_gpus=16)),
    teams=(TeamQuota("research", 24), TeamQuota("vision", 8)),
    horizon_hours=24,
)
FORECASTS = {"prod/chat": forecast_frame(12.0), "prod/embed": forecast_frame(40.0)}


def snapshot(chat_demand: float) -> Snapshot:
    """Training holds most of the cluster; a high `chat_demand` forces emergency preemptions."""
    running = (
        RunningJob(Job("r1", "research", 16, 7200), NOW - pd.Timedelta(minutes=12)),
        RunningJob(Job("r2", "research", 16, 7200), NOW - pd.Timedelta(minutes=3)),
        RunningJob(Job("v1", "vision", 8, 7200, preemption_seconds=900), NOW - pd.Timedelta(minutes=20)),
    )
    queued = (Job("v2", "vision", 4, 3600, submitted_at=1), Job("r3", "research", 4, 3600, submitted_at=2))
    obs = {"prod/chat": Observation(chat_demand, week_history(15.0)), "prod/embed": Observation(50.0, week_history(45.0))}
    return Snapshot(obs, running, queued)


def state_from_plan(p: Plan, snap: Snapshot, previous: ControllerState | None = None,
                    invalid: dict[str, str] | None = None) -> ControllerState:
    """What a reconcile publishes after applying plan `p`; counters carry on from `previous`."""
    previous = previous or ControllerState()
    stopped = {x.job_id for x in p.preemptions if x.at <= p.now}
    holding = [r.job for r in snap.running if r.job.id not in stopped]
    admitted = {a.job_id for a in p.admissions}
    training = holding + [j for j in snap.queued if j.id in admitted]
    fast_training = sum(j.gpus for j in training if j.preemption_seconds <= DEADLINE)
    slack = p.hours[0].slack_gpus
    reclaimable = max(slack - sum(j.gpus for j in training), 0) + fast_training
    policies = {}
    for w in POLICY.workloads:
        (r,) = [x for x in p.reservations if x.workload == w.name and x.hour == p.hours[0].hour]
        policies[w.name] = PolicyState(
            w.name, "active", True, plan=p, forecast=FORECASTS[w.name], model="seasonal-naive",
            observed_demand=snap.observations[w.name].current_demand, demand_per_gpu=w.demand_per_gpu,
            reserved_gpus=r.gpus, headroom_gpus=r.headroom_gpus, reclaimable_gpus=reclaimable,
            fallback=r.source == "fallback", forecast_age_seconds=420.0,
            realized_error={1: 0.7, 6: 0.9, 24: 1.1}, realized_coverage_80={1: 0.82, 6: 0.78, 24: 0.71})
    for name, error in (invalid or {}).items():
        policies[name] = PolicyState(name, "active", False, error=error)
    teams = {}
    for q in POLICY.teams:
        used = sum(j.gpus for j in training if j.team == q.team)
        was = previous.teams.get(q.team)
        teams[q.team] = TeamState(
            q.team, int(q.quota_gpus), used, max(used - int(q.quota_gpus), 0), max(int(q.quota_gpus) - used, 0),
            gpu_seconds_total=(was.gpu_seconds_total if was else 0.0) + used * 60.0,
            borrowed_gpu_seconds_total=(was.borrowed_gpu_seconds_total if was else 0.0) + max(used - q.quota_gpus, 0) * 60.0,
            preempted_total=(was.preempted_total if was else 0)
            + sum(1 for x in p.preemptions for r in snap.running if r.job.id == x.job_id and r.job.team == q.team))
    preemptions = dict(previous.preemptions_total)
    lost = dict(previous.lost_gpu_seconds_total)
    for x in p.preemptions:
        preemptions[x.kind] = preemptions.get(x.kind, 0) + 1
        lost[x.kind] = lost.get(x.kind, 0.0) + x.gpus * x.work_lost_seconds
    duration = 0.3  # seconds this reconcile took
    buckets = tuple(n + (duration <= le) for n, le in zip(previous.reconcile_seconds_buckets, RECONCILE_BUCKETS))
    return ControllerState(
        capacity_gpus=POLICY.capacity_gpus, leader=True, policies=policies, teams=teams,
        slack_gpus=slack, training_gpus=sum(j.gpus for j in training),
        preemptions_total=preemptions, lost_gpu_seconds_total=lost,
        reconcile_total=previous.reconcile_total + 1,
        reconcile_errors_total={"forecast": previous.reconcile_errors_total.get("forecast", 0) + 1},
        reconcile_seconds_buckets=buckets, reconcile_seconds_count=previous.reconcile_seconds_count + 1,
        reconcile_seconds_sum=previous.reconcile_seconds_sum + duration,
        last_reconcile_timestamp=p.now.timestamp())


def planned_state(chat_demand: float = 14.0, previous: ControllerState | None = None, **kw) -> tuple[Plan, ControllerState]:
    snap = snapshot(chat_demand)
    p = plan(FORECASTS, snap, POLICY, NOW)
    return p, state_from_plan(p, snap, previous, **kw)


def scrape(state: ControllerState) -> str:
    return generate_latest(m.registry_for(StateHolder(state))).decode()


def samples(text: str) -> dict[tuple[str, frozenset], float]:
    """(sample name, labels) -> value for every sample in an exposition text."""
    return {(s.name, frozenset(s.labels.items())): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def value(text: str, metric: m.Metric, **labels) -> float:
    return samples(text)[(metric.name, frozenset(labels.items()))]


def test_exports_the_plans_reservation_headroom_slack_and_forecast():
    p, state = planned_state()
    text = scrape(state)
    now_hour = p.hours[0].hour
    for w in POLICY.workloads:
        (r,) = [x for x in p.reservations if x.workload == w.name and x.hour == now_hour]
        assert value(text, m.RESERVED, policy=w.name) == r.gpus > 0
        assert value(text, m.HEADROOM, policy=w.name) == r.headroom_gpus > 0
        assert value(text, m.POLICY_VALID, policy=w.name) == 1
        assert value(text, m.POLICY_INFO, policy=w.name, mode="active", model="seasonal-naive") == 1
        assert value(text, m.DEMAND_PER_GPU, policy=w.name) == w.demand_per_gpu
        assert value(text, m.RESERVATION_UTILIZATION, policy=w.name) == pytest.approx(
            state.policies[w.name].observed_demand / (r.gpus * w.demand_per_gpu))
        frame = FORECASTS[w.name]
        for h in m.FORECAST_HORIZONS:
            for q in QUANTILES:
                expected = frame.loc[now_hour + pd.Timedelta(hours=h - 1), q]
                assert value(text, m.FORECAST, policy=w.name, quantile=f"{q:g}", horizon=f"{h}h") == pytest.approx(expected)
        assert value(text, m.FORECAST_ERROR, policy=w.name, horizon="6h") == 0.9
        assert value(text, m.FORECAST_COVERAGE, policy=w.name, horizon="24h") == 0.71
    assert value(text, m.SLACK) == p.hours[0].slack_gpus == 64 - sum(
        x.gpus for x in p.reservations if x.hour == now_hour)
    assert value(text, m.CAPACITY) == 64
    assert value(text, m.TRAINING) == state.training_gpus > 0
    assert value(text, m.LEADER) == 1
    assert value(text, m.LAST_RECONCILE) == NOW.timestamp()


def test_forecast_horizons_past_the_forecast_are_left_out():
    _, state = planned_state()
    short = {k: dataclasses.replace(v, forecast=v.forecast.iloc[:6]) for k, v in state.policies.items()}
    text = scrape(dataclasses.replace(state, policies=short))
    horizons = {dict(labels)["horizon"] for (name, labels) in samples(text) if name == m.FORECAST.name}
    assert horizons == {"1h", "6h"}


def test_emergency_preemptions_and_lost_work_follow_the_plan():
    p, state = planned_state(chat_demand=70.0)  # far above the forecast: 35 GPUs needed now
    emergency = [x for x in p.preemptions if x.kind == "emergency"]
    assert emergency, "the scenario must make the planner preempt"
    text = scrape(state)
    assert value(text, m.PREEMPTIONS, kind="emergency") == len(emergency)
    assert value(text, m.PREEMPTIONS, kind="planned") == len(p.preemptions) - len(emergency)
    lost = sum(x.gpus * x.work_lost_seconds for x in emergency)
    assert lost > 0 and value(text, m.LOST_WORK, kind="emergency") == pytest.approx(lost)
    preempted_research = sum(1 for x in p.preemptions if x.job_id.startswith("r"))
    assert value(text, m.TEAM_PREEMPTIONS, team="research") == preempted_research


def test_team_quota_usage_borrowed_lent_and_utilization():
    _, state = planned_state()
    text = scrape(state)
    for t in state.teams.values():
        assert value(text, m.TEAM_QUOTA, team=t.team) == t.quota_gpus
        assert value(text, m.TEAM_USED, team=t.team) == t.used_gpus
        assert value(text, m.TEAM_BORROWED, team=t.team) == t.borrowed_gpus
        assert value(text, m.TEAM_LENT, team=t.team) == t.lent_gpus
        assert value(text, m.TEAM_UTILIZATION, team=t.team) == pytest.approx(t.used_gpus / t.quota_gpus)
        assert value(text, m.TEAM_GPU_SECONDS, team=t.team) == t.gpu_seconds_total
        assert value(text, m.TEAM_BORROWED_SECONDS, team=t.team) == t.borrowed_gpu_seconds_total
    # vision runs v1 (8 GPUs, its whole quota) and the planner admitted v2 (4) on idle quota: it borrows
    assert value(text, m.TEAM_USED, team="vision") == 12 and value(text, m.TEAM_BORROWED, team="vision") == 4


def test_reconcile_histogram_comes_from_the_stored_buckets():
    _, first = planned_state()
    _, state = planned_state(previous=first)
    state = dataclasses.replace(state, reconcile_seconds_buckets=(0, 0, 1, 1, 2, 2, 2, 2, 2, 3),
                                reconcile_seconds_count=4, reconcile_seconds_sum=75.5)
    s = samples(scrape(state))
    name = m.RECONCILE_DURATION.name
    assert s[(name + "_bucket", frozenset({("le", "0.25")}))] == 1
    assert s[(name + "_bucket", frozenset({("le", "60.0")}))] == 3
    assert s[(name + "_bucket", frozenset({("le", "+Inf")}))] == 4
    assert s[(name + "_count", frozenset())] == 4 and s[(name + "_sum", frozenset())] == 75.5
    with pytest.raises(ValueError, match="reconcile_seconds_buckets"):
        scrape(dataclasses.replace(state, reconcile_seconds_buckets=(1, 2)))


def test_invalid_policy_exports_only_valid_zero():
    _, state = planned_state(invalid={"prod/broken": "spec.targetQuantile: must be in (0, 1)"})
    s = samples(scrape(state))
    broken = [(name, dict(labels)) for (name, labels), _ in s.items() if ("policy", "prod/broken") in labels]
    assert broken == [(m.POLICY_VALID.name, {"policy": "prod/broken"})]
    assert s[(m.POLICY_VALID.name, frozenset({("policy", "prod/broken")}))] == 0
    assert s[(m.RESERVED.name, frozenset({("policy", "prod/chat")}))] > 0  # the valid ones are unaffected


def test_counters_are_monotone_across_publishes_and_read_at_scrape_time():
    holder = StateHolder()
    registry = m.registry_for(holder)
    before = samples(generate_latest(registry).decode())
    assert before[(m.RECONCILES.name, frozenset())] == 0
    _, first = planned_state(chat_demand=70.0)
    holder.publish(first)
    after_first = samples(generate_latest(registry).decode())
    _, second = planned_state(chat_demand=70.0, previous=first)
    holder.publish(second)
    after_second = samples(generate_latest(registry).decode())
    counters = {s.name for fam in text_string_to_metric_families(generate_latest(registry).decode())
                if fam.type in ("counter", "histogram") for s in fam.samples}
    assert {m.PREEMPTIONS.name, m.TEAM_GPU_SECONDS.name, m.RECONCILES.name} <= counters
    for key, v in after_first.items():
        if key[0] in counters:
            assert after_second[key] >= v, key
    emergency = (m.PREEMPTIONS.name, frozenset({("kind", "emergency")}))
    assert after_second[emergency] == 2 * after_first[emergency] > 0
    assert after_second[(m.RECONCILES.name, frozenset())] == 2


def test_registry_holds_only_headroom_metrics():
    _, state = planned_state()
    names = {fam.name for fam in text_string_to_metric_families(scrape(state))}
    assert names and all(n.startswith("headroom_") for n in names)
    assert {metric.name.removesuffix("_total") for metric in m.METRICS} >= names


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


@pytest.fixture
def served():
    flags = {"healthy": True, "ready": False}
    _, state = planned_state()
    holder = StateHolder(state)

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


def test_http_serves_the_latest_publish(served):
    base, holder, _ = served
    _, second = planned_state(previous=holder.get())
    holder.publish(second)
    assert value(get(base + "/metrics")[1], m.RECONCILES) == 2


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


def test_docs_table_lists_every_metric_with_its_type_and_labels():
    doc = (Path(__file__).resolve().parents[1] / "docs" / "observability.md").read_text()
    rows = {}
    for line in doc.splitlines():
        if line.startswith("| `headroom_"):
            name, kind, labels = (cell.strip() for cell in line.strip("|").split("|")[:3])
            rows[name.strip("`")] = (kind, () if labels == "–" else tuple(x.strip() for x in labels.split(",")))
    assert rows == {x.name: (x.kind, x.labels) for x in m.METRICS}
