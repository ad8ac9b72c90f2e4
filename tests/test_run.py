"""The controller loop on the embedded cluster (adapters.embedded.InMemoryCluster).

Each behaviour here is proven against the real API server and Prometheus in
tests/test_run_real.py; this file covers the decisions, fast.
"""
from __future__ import annotations

import pandas as pd
import pytest

from adapters.embedded import InMemoryCluster
from core.settings import RunConfig
from core.objects import WorkloadInfo
from controller.demand import FileDemand
from controller.reconcile import Reconciler, parse_policies
from adapters.prometheus import PrometheusError
from forecast.synthetic import synthetic_demand, write_csv
from training.realized import ForecastLog
from tests.test_training import mlflow_server  # noqa: F401 -- the real `mlflow server` fixture

# 21 days of synthetic 5-min demand from Monday 2026-01-05; the tests run in its third week, when weekday
# mornings ramp up (FileDemand never shows the controller a sample after its `now`).
DEMAND = synthetic_demand(days=21, peak=1000.0)
MONDAY_6AM = pd.Timestamp("2026-01-19T06:00:00Z")


def policy(name="chat", mode="active", **spec):
    body = {"query": "sum(rate(requests_total[5m]))", "statistic": "max",
            "capacity": {"demandPerGpu": 10.0, "gpusPerReplica": 2}, "target": {"kind": "Deployment", "name": name},
            "trainingClusterQueues": ["research"], "minGpus": 2, "leadTime": "15m", "mode": mode}
    body.update(spec)
    return {"metadata": {"name": name, "namespace": "inference", "generation": 1}, "spec": body}


@pytest.fixture
def demand_file(tmp_path):
    path = tmp_path / "demand.csv"
    write_csv(DEMAND, path)
    return path


def make(demand_file, tmp_path, *policies, demand=None, **run):
    cluster = InMemoryCluster(policies=list(policies) or [policy()], quotas={"research": 0})
    files = {f"inference/{p['metadata']['name']}": demand_file for p in cluster.policies}
    cfg = RunConfig(capacity_gpus=128, **run)
    reconciler = Reconciler(cluster, demand or FileDemand(files), cfg, forecast_log=ForecastLog(tmp_path / "log"))
    return cluster, reconciler


def training(cluster, n, gpus=8, preemption=60.0, at=None, queue="research"):
    at = (at or MONDAY_6AM - pd.Timedelta(hours=2)).to_pydatetime()
    for i in range(n):
        cluster.workloads[("training", f"job-{i}")] = WorkloadInfo(
            "training", f"job-{i}", queue, queue, True, 0, at, gpus, None, preemption_seconds=preemption,
            checkpoint_interval_seconds=1800.0, last_checkpoint=at)


def status(cluster, name="chat"):
    s = cluster.statuses[("inference", name)]
    return s, {c["type"]: c for c in s["conditions"]}


def test_invalid_policy_is_reported_with_field_paths_and_does_not_stop_the_others(demand_file, tmp_path):
    bad = policy("bad", leadTime="soon", capacity={"demandPerGpu": -1})
    cluster, r = make(demand_file, tmp_path, policy(), bad)
    for minutes in (0, 5):  # the same error twice: one event, not one per reconcile
        state = r.reconcile(MONDAY_6AM + pd.Timedelta(minutes=minutes))
    assert not state.policies["inference/bad"].valid
    s, conditions = status(cluster, "bad")
    assert conditions["Ready"]["status"] == "False" and conditions["Ready"]["reason"] == "InvalidSpec"
    assert "spec.capacity.demandPerGpu" in conditions["Ready"]["message"]
    assert "spec.leadTime" in conditions["Ready"]["message"]
    assert [e["reason"] for e in cluster.events if e["name"] == "bad"] == ["InvalidSpec"]
    assert state.policies["inference/chat"].valid and cluster.replicas[("inference", "chat")] >= 1


def test_parse_policies_names_every_bad_field():
    valid, invalid = parse_policies([policy(), policy("x", mode="sometimes", leadTime="soon"),
                                     policy("y", targetQuantile=0.99, headroomQuantile=0.9)])
    assert [p.key for p in valid] == ["inference/chat"]
    by_name = {ref.name: message for ref, message in invalid.items()}
    assert "spec.mode: Input should be 'forecast-only' or 'active'" in by_name["x"] and "spec.leadTime" in by_name["x"]
    assert by_name["y"] == "spec: headroomQuantile must be at least targetQuantile"


def test_reservation_is_applied_ahead_of_the_morning_ramp_and_slack_is_lent(demand_file, tmp_path):
    cluster, r = make(demand_file, tmp_path)
    night = r.reconcile(MONDAY_6AM - pd.Timedelta(hours=3))
    night_replicas = cluster.replicas[("inference", "chat")]
    state = r.reconcile(MONDAY_6AM + pd.Timedelta(hours=3))  # 9:00, the ramp to the 10:30 peak
    ps = state.policies["inference/chat"]
    assert cluster.replicas[("inference", "chat")] * 2 == ps.reserved_gpus > night_replicas * 2
    # the reservation covers the forecast, and the slack of the plan went to the training queue
    res = ps.plan.reservations[0]
    assert res.source == "forecast" and "q0.9 forecast" in res.reason
    assert ps.reserved_gpus >= ps.forecast.loc[res.hour, 0.9] / 10.0
    assert cluster.quotas["research"] == state.slack_gpus == 128 - ps.reserved_gpus
    assert night.policies["inference/chat"].reserved_gpus < ps.reserved_gpus
    reasons = [e["reason"] for e in cluster.events]
    assert "ReservationChanged" in reasons and "SlackLent" in reasons
    s, conditions = status(cluster)
    assert s["reservedGpus"] == ps.reserved_gpus and len(s["nextHours"]) == 6
    assert conditions["Ready"]["reason"] == "Active" and conditions["FallbackActive"]["status"] == "False"
    assert s["model"].startswith("auto")


def test_forecast_only_reports_but_changes_nothing(demand_file, tmp_path):
    cluster, r = make(demand_file, tmp_path, policy(mode="forecast-only"))
    training(cluster, 16)  # holds everything: an active controller would preempt
    state = r.reconcile(MONDAY_6AM + pd.Timedelta(hours=3))
    assert cluster.replicas == {} and cluster.quotas == {"research": 0}
    assert all(w.active for w in cluster.workloads.values()) and cluster.events == []
    s, conditions = status(cluster)
    assert conditions["Ready"]["reason"] == "ForecastOnly"
    assert s["reservedGpus"] == state.policies["inference/chat"].reserved_gpus > 0


def test_training_is_taken_back_when_it_holds_the_reservation_and_never_twice(demand_file, tmp_path):
    cluster, r = make(demand_file, tmp_path)
    training(cluster, 16)  # 128 GPUs of training: the morning's reservation must come out of it
    state = r.reconcile(MONDAY_6AM + pd.Timedelta(hours=3))
    evicted = {k for k, w in cluster.workloads.items() if not w.active}
    held = sum(w.gpus for w in cluster.workloads.values() if w.active and w.cluster_queue)
    assert evicted and held <= state.slack_gpus
    assert sum(state.preemptions_total.values()) == len(evicted)
    preempted = [e for e in cluster.events if e["reason"] == "Preempted" and e["kind"] == "Workload"]
    assert len(preempted) == len(evicted)
    # A restarted controller (fresh process state) on the same cluster: nothing more to take back.
    _, again = make(demand_file, tmp_path)
    again.cluster = cluster
    again.reconcile(MONDAY_6AM + pd.Timedelta(hours=3))
    assert {k for k, w in cluster.workloads.items() if not w.active} == evicted


def test_slow_jobs_may_not_hold_the_headroom_band(demand_file, tmp_path):
    cluster, r = make(demand_file, tmp_path, policy(capacity={"demandPerGpu": 20.0, "gpusPerReplica": 2}))
    training(cluster, 16, preemption=900.0)  # slower than the 5 min deadline
    state = r.reconcile(MONDAY_6AM + pd.Timedelta(hours=3))
    ps = state.policies["inference/chat"]
    slow_held = sum(w.gpus for w in cluster.workloads.values() if w.active and w.cluster_queue)
    assert 0 < slow_held <= state.slack_gpus - ps.headroom_gpus and ps.headroom_gpus > 0
    _, conditions = status(cluster)
    assert conditions["HeadroomAtRisk"]["status"] == "False"
    assert ps.reclaimable_gpus >= ps.headroom_gpus


class FailingDemand:
    """Demand that answers until `fail` is set, then fails like an unreachable Prometheus."""

    def __init__(self, inner):
        self.inner, self.fail = inner, False

    def read(self, key, query, start, end):
        if self.fail:
            raise PrometheusError("Prometheus at http://prometheus:9090 failed: connection refused")
        return self.inner.read(key, query, start, end)


def test_demand_outage_keeps_the_forecast_then_falls_back_and_never_lowers_the_reservation(demand_file, tmp_path):
    demand = FailingDemand(FileDemand({"inference/chat": demand_file}))
    cluster, r = make(demand_file, tmp_path, demand=demand, keep_forecast_seconds=3600)
    peak = r.reconcile(MONDAY_6AM + pd.Timedelta(hours=4)).policies["inference/chat"]  # 10:00, near the peak
    demand.fail = True
    later = MONDAY_6AM + pd.Timedelta(hours=4, minutes=30)
    kept = r.reconcile(later).policies["inference/chat"]
    assert kept.degraded and not kept.fallback and kept.model == peak.model
    _, conditions = status(cluster)
    assert conditions["ForecastDegraded"]["status"] == "True"
    assert conditions["ForecastDegraded"]["reason"] == "DemandUnavailable"
    # Past keep_forecast_seconds: the conservative reservation, and still never below what was in force.
    night = MONDAY_6AM + pd.Timedelta(hours=14)  # 20:00: a healthy forecast would scale in
    gone = r.reconcile(night).policies["inference/chat"]
    assert gone.fallback and gone.reserved_gpus >= kept.reserved_gpus >= peak.reserved_gpus - 2
    _, conditions = status(cluster)
    assert conditions["FallbackActive"]["status"] == "True"
    assert r.holder.get().reconcile_errors_total["demand"] == 2


def test_forecasts_are_logged_when_issued_and_scored_as_actuals_arrive(demand_file, tmp_path):
    cluster, r = make(demand_file, tmp_path)
    start = MONDAY_6AM - pd.Timedelta(days=1)
    for hour in range(8):
        state = r.reconcile(start + pd.Timedelta(hours=hour))
    issued = ForecastLog(tmp_path / "log").load("inference.chat")
    assert len(issued) == 8 and min(issued) == start  # one forecast per hour, stamped with its issue time
    assert ForecastLog(tmp_path / "log").prune("inference.chat", before=start + pd.Timedelta(hours=3)) == 3
    assert min(ForecastLog(tmp_path / "log").load("inference.chat")) == start + pd.Timedelta(hours=3)
    ps = state.policies["inference/chat"]
    assert set(ps.realized_error) == {1, 6}  # 24 h ahead has no actual yet after 8 hours
    assert 0 < ps.realized_error[1] < 3 and 0 <= ps.realized_coverage_80[1] <= 1
    assert status(cluster)[0]["realizedError"]["1h"] == pytest.approx(ps.realized_error[1])


def test_capacity_shared_by_two_workloads_never_exceeds_the_cluster(demand_file, tmp_path):
    cluster, r = make(demand_file, tmp_path, policy("chat"), policy("search", minGpus=8))
    state = r.reconcile(MONDAY_6AM + pd.Timedelta(hours=4))
    reserved = [state.policies[k].reserved_gpus for k in ("inference/chat", "inference/search")]
    assert reserved[1] >= 8 and sum(reserved) + state.slack_gpus == 128
    assert {("inference", "chat"), ("inference", "search")} <= set(cluster.replicas)


def reconciled_state(tmp_path):
    """A day of reconciles on the embedded cluster ending in a burst above the forecast: real planned and
    emergency preemptions, realized error, team usage, an invalid policy. (The dashboards test reads it.)"""
    burst_at = MONDAY_6AM - pd.Timedelta(hours=3)  # 3 am: far above what the night's forecast reserved
    demand = DEMAND.copy()
    demand[burst_at] = 3 * demand[burst_at]
    path = tmp_path / "burst.csv"
    write_csv(demand, path)
    cluster, r = make(path, tmp_path, policy(), {"metadata": {"name": "broken", "namespace": "inference"},
                                                  "spec": {"query": "q"}})
    cluster.backlog_gpus = 128  # training always waiting: whatever is lent is used
    for minutes in range(0, 27 * 60 + 1, 30):
        now = MONDAY_6AM - pd.Timedelta(hours=24) + pd.Timedelta(minutes=minutes)
        cluster.top_up_backlog(now.to_pydatetime())
        cluster.admit(now.to_pydatetime())
        state = r.reconcile(now)
    return state


def test_a_burst_above_the_forecast_preempts_as_an_emergency(tmp_path):
    state = reconciled_state(tmp_path)
    assert state.preemptions_total.get("planned", 0) > 0 and state.preemptions_total.get("emergency", 0) > 0
    assert not state.policies["inference/broken"].valid
    assert state.teams["research"].preempted_total == sum(state.preemptions_total.values())


def test_an_unexpected_error_is_counted_and_the_next_reconcile_runs(demand_file, tmp_path):
    cluster, r = make(demand_file, tmp_path)
    cluster.policies.append({"metadata": {"name": "odd", "namespace": "inference"}, "spec": None})
    cluster.policies[-1]["metadata"] = None  # a malformed object the API would never return: a bug's stand-in
    state = r.reconcile(MONDAY_6AM)
    assert state.reconcile_errors_total["internal"] == 1 and state.reconcile_total == 1
    cluster.policies.pop()
    state = r.reconcile(MONDAY_6AM + pd.Timedelta(minutes=5))
    assert state.policies["inference/chat"].valid and state.reconcile_total == 2


@pytest.fixture(params=["sqlite", "server"])
def tracking_uri(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'mlflow.db'}"
    return request.getfixturevalue("mlflow_server").uri


def test_the_loop_serves_the_champion_logs_realized_error_and_retrains_on_drift(tracking_uri, tmp_path):
    """MLflow in the loop, on a local sqlite store and a real `mlflow server`: the controller forecasts with
    the registered champion, logs realized error as metric history, and when demand doubles (drift) it
    retrains in the background; the new version is registered without touching the loop."""
    from controller.forecasts import Models
    from controller.loop import BackgroundTrainer
    from forecast.history import prepare
    from tests.test_training import champion_version, client
    from training.pipeline import TrainSettings, train_series
    from adapters.mlflow import Tracker

    start = MONDAY_6AM - pd.Timedelta(days=2)
    drifted = DEMAND.copy()
    drifted[drifted.index >= start] *= 2.0
    path = tmp_path / "drift.csv"
    write_csv(drifted, path)
    settings = TrainSettings(folds=2, candidates=("snaive24", "profile"), quantiles=(0.1, 0.5, 0.9, 0.99),
                             statistic="max")
    hourly = prepare(drifted[drifted.index < start], statistic="max")[0]
    train_series("inference.chat", hourly, settings, Tracker(tracking_uri))
    assert champion_version(tracking_uri, "inference.chat") == "1"
    cluster, r = make(path, tmp_path, retrain_every_seconds=0)  # no schedule: only drift retrains
    trainer = BackgroundTrainer(tracking_uri, settings)
    r.models, r.tracker, r.retrain, r.drift_window, r.drift_factor = Models(tracking_uri), Tracker(tracking_uri), trainer, 6, 1.5
    for hour in range(12):
        state = r.reconcile(start + pd.Timedelta(hours=hour))
    assert state.policies["inference/chat"].model.startswith("champion v1")
    drift_events = [e for e in cluster.events if e["reason"] == "ForecastDrift"]
    assert drift_events and "retraining" in drift_events[0]["message"]
    trainer.wait()
    c = client(tracking_uri)
    versions = c.search_model_versions("name='headroom-inference.chat'")
    assert len(versions) >= 2  # retrained on drift (promoted only if it beats the champion by the margin)
    experiment = c.get_experiment_by_name("headroom/inference.chat").experiment_id
    (accuracy,) = c.search_runs([experiment], "tags.`headroom.kind` = 'accuracy'")
    history = c.get_metric_history(accuracy.info.run_id, "abs_error_1h")
    assert len(history) >= 10 and len({m.step for m in history}) == len(history)  # one point per hour
    # MLflow's scaled error uses the scale the status does (the fitting window's), not a second one
    last = max(history, key=lambda m: m.step)
    (scaled,) = [m for m in c.get_metric_history(accuracy.info.run_id, "scaled_error_1h") if m.step == last.step]
    assert last.value / scaled.value == pytest.approx(r._forecasts["inference/chat"].scale)
    assert accuracy.data.tags["headroom.retrain_recommended"] == "true"


def test_retraining_runs_on_its_schedule(demand_file, tmp_path):
    from adapters.mlflow import Tracker

    cluster, r = make(demand_file, tmp_path, retrain_every_seconds=2 * 3600)
    r.tracker = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}")
    trained = []
    r.retrain = lambda series, history, now: trained.append((series, now, history.index[-1]))
    for hour in range(5):
        r.reconcile(MONDAY_6AM + pd.Timedelta(hours=hour))
    # counted from start-up, every 2 h, each on the complete hours before its moment
    assert [(s, now.hour, last.hour) for s, now, last in trained] == [("inference.chat", 8, 7), ("inference.chat", 10, 9)]


def test_the_inference_cluster_queue_quota_follows_the_reservation(demand_file, tmp_path):
    cluster, r = make(demand_file, tmp_path, policy("chat", inferenceClusterQueue="inference"),
                      policy("search", inferenceClusterQueue="inference"))
    cluster.quotas["inference"] = 0
    state = r.reconcile(MONDAY_6AM + pd.Timedelta(hours=3))
    both = state.policies["inference/chat"].reserved_gpus + state.policies["inference/search"].reserved_gpus
    assert cluster.quotas["inference"] == both > 0


def test_a_mostly_missing_last_hour_is_degraded_data(demand_file, tmp_path):
    holes = DEMAND.copy()
    now = MONDAY_6AM + pd.Timedelta(hours=3)
    last_hour = (holes.index > now - pd.Timedelta(hours=1)) & (holes.index <= now)
    holes[last_hour & (holes.index.minute % 20 != 0)] = float("nan")  # fresh, but 3 samples in 12
    path = tmp_path / "holes.csv"
    write_csv(holes, path)
    cluster, r = make(path, tmp_path)
    r.reconcile(now - pd.Timedelta(hours=1))
    before = cluster.replicas[("inference", "chat")]
    ps = r.reconcile(now).policies["inference/chat"]
    _, conditions = status(cluster)
    assert ps.degraded and conditions["ForecastDegraded"]["reason"] == "PartialData"
    assert cluster.replicas[("inference", "chat")] >= before  # degraded data never lowers the reservation


def test_mlflow_down_keeps_the_last_champion_and_the_loop_serving(demand_file, tmp_path):
    from controller.forecasts import Models
    from forecast.history import prepare
    from tests.mlflow_server import MlflowServer
    from training.pipeline import TrainSettings, train_series
    from adapters.mlflow import Tracker

    server = MlflowServer(tmp_path / "mlflow")
    try:
        server.start()
    except RuntimeError as exc:
        pytest.skip(f"no mlflow server: {exc}")
    try:
        hourly = prepare(DEMAND[DEMAND.index < MONDAY_6AM], statistic="max")[0]
        train_series("inference.chat", hourly, TrainSettings(folds=2, candidates=("profile",), statistic="max",
                                                             quantiles=(0.1, 0.5, 0.9, 0.99)), Tracker(server.uri))
        cluster, r = make(demand_file, tmp_path, retrain_every_seconds=0)
        r.models, r.tracker = Models(server.uri), Tracker(server.uri)
        assert r.reconcile(MONDAY_6AM).policies["inference/chat"].model.startswith("champion v1")
    finally:
        server.stop()
    state = r.reconcile(MONDAY_6AM + pd.Timedelta(hours=1))  # MLflow is gone now
    ps = state.policies["inference/chat"]
    assert ps.model.startswith("champion v1") and not ps.fallback and not ps.degraded
    assert cluster.replicas[("inference", "chat")] * 2 == ps.reserved_gpus
    assert state.reconcile_errors_total["mlflow"] == 1  # realized error could not be logged: counted, not fatal


class CountingDemand:
    """The file source, recording each window asked for."""

    def __init__(self, inner):
        self.inner, self.windows = inner, []

    def read(self, key, query, start, end):
        self.windows.append((start, end))
        return self.inner.read(key, query, start, end)


def test_the_lookback_is_read_once_an_hour_and_only_new_samples_in_between(demand_file, tmp_path):
    demand = CountingDemand(FileDemand({"inference/chat": demand_file}))
    cluster, r = make(demand_file, tmp_path, demand=demand)
    for minutes in range(0, 56, 5):  # 06:00 .. 06:55
        r.reconcile(MONDAY_6AM + pd.Timedelta(minutes=minutes))
    held = r._raw["inference/chat"].copy()  # what the 06:55 reconcile saw, pieced together
    r.reconcile(MONDAY_6AM + pd.Timedelta(hours=1))
    spans = [end - start for start, end in demand.windows]
    assert spans[0] == spans[-1] == pd.Timedelta(days=28)  # 06:00 and 07:00: the whole lookback
    assert all(span <= pd.Timedelta(minutes=20) for span in spans[1:-1])  # in between: the last minutes
    # ...and it is exactly what one full read at 06:55 returns.
    (chat,), _ = parse_policies(cluster.list_reservation_policies())
    end = MONDAY_6AM + pd.Timedelta(minutes=55)
    full = FileDemand({"inference/chat": demand_file}).read(chat.key, chat.spec.query, end - pd.Timedelta(days=28), end)
    pd.testing.assert_series_equal(held, full.astype(float), check_names=False, check_freq=False)
