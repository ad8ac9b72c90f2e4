"""`headroom run`'s reconciler against a real kube-apiserver + etcd (Kueue v0.19.2's genuine CRDs, v1beta2) and a
real Prometheus.

Prometheus holds the NASA HTTP 1995 trace (backfilled with promtool); the controller's clock is set inside that
trace and advanced by hand, so simulated hours pass in seconds. The controller reads through its watch cache
(KubeCluster.watch), as `headroom run` does. Nothing runs Kueue or the Deployment controller here: the test
admits Workloads and completes their evictions by writing their status, as Kueue would (tests/servers/kueue.py).
"""
from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter

import pandas as pd
import pytest

from adapters.kube import EVICTED_BY_PLAN, EVICTION_REASON, ConfigMapForecastStore, KubeCluster
from adapters.prometheus import PrometheusDemand
from controller.loop import Loop
from controller.reconcile import Reconciler
from core.errors import ClusterError, NotFound
from core.objects import ObjectRef
from core.settings import PrometheusServer, RunConfig
from tests.servers import free_port, kueue
from tests.servers.prometheus import METRIC
from tests.test_kube_real import counting
from tests.test_training import mlflow_server  # noqa: F401,F811 -- the real `mlflow server` fixture
from training.realized import ForecastLog

NS, TRAIN_NS = "inference-run", "training-run"
QUEUE, INFERENCE_QUEUE, COHORT = "research-run", "inference-run", "run-pool"
MONDAY_7AM = pd.Timestamp("1995-07-17T07:00:00Z")  # the trace's third week: a weekday morning ramp
RP = KubeCluster.custom_path("headroom.dev", "v1alpha1", "reservationpolicies", namespace=NS)
WL = kueue.path("workloads", namespace=TRAIN_NS)
COHORTS = kueue.path("cohorts")


def policy(name: str, **spec) -> dict:
    body = {"query": METRIC, "statistic": "max", "capacity": {"demandPerGpu": 10.0, "gpusPerReplica": 1},
            "target": {"kind": "Deployment", "name": name}, "trainingClusterQueues": [QUEUE],
            "minGpus": 2, "leadTime": "15m", "reclaimDeadline": "5m", "mode": "active",
            "inferenceClusterQueue": INFERENCE_QUEUE}
    body.update(spec)
    return {"apiVersion": "headroom.dev/v1alpha1", "kind": "ReservationPolicy",
            "metadata": {"name": name, "namespace": NS}, "spec": body}


def deployment(name: str) -> dict:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "server", "image": "inference:1"}]}}}}


@pytest.fixture
def kube(kube_admin):
    """Namespaces (kept: nothing here finalizes a deleted one), the ResourceFlavor, the inference and training
    ClusterQueues in one cohort, the training LocalQueue, the Deployment and the policy, fresh for each test."""
    for ns in (NS, TRAIN_NS):
        kube_admin.apply(f"/api/v1/namespaces/{ns}",
                         {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    clean(kube_admin)
    kube_admin.apply(kueue.path("resourceflavors", kueue.FLAVOR), kueue.resource_flavor())
    for name, lends in ((QUEUE, None), (INFERENCE_QUEUE, 0)):  # one cohort of their own: training borrows only
        kube_admin.apply(kueue.path("clusterqueues", name),   # the slack lent, the inference queue lends nothing
                         kueue.cluster_queue(name, gpus=0, cohort=COHORT, lending_limit=lends))
    kube_admin.apply(kueue.path("localqueues", QUEUE, TRAIN_NS), kueue.local_queue(TRAIN_NS, QUEUE))
    kube_admin.create(f"/apis/apps/v1/namespaces/{NS}/deployments", deployment("chat"))
    kube_admin.create(RP, policy("chat"))
    yield kube_admin
    clean(kube_admin)


@pytest.fixture
def controller(kube_server, kube):
    """The controller's own client, reading through its watch cache as `headroom run` does."""
    watching = KubeCluster.from_kubeconfig(str(kube_server.apiserver.kubeconfig()), request_timeout=5).watch()
    yield watching
    watching.close()


def clean(kube: KubeCluster) -> None:
    for path in (RP, WL, f"/apis/apps/v1/namespaces/{NS}/deployments", COHORTS):
        for item in kube.get(path).get("items", []):
            kube.delete(f"{path}/{item['metadata']['name']}")


def admit(kube: KubeCluster, name: str, gpus: int, preemption_seconds: int = 60) -> None:
    """A training Workload submitted to the LocalQueue and admitted by Kueue into the training ClusterQueue."""
    kube.create(WL, kueue.workload(TRAIN_NS, name, QUEUE, gpus_per_pod=gpus, annotations={
        "headroom.dev/preemption-seconds": str(preemption_seconds),
        "headroom.dev/last-checkpoint": "1995-07-17T06:00:00Z"}))
    kueue.admit(kube, TRAIN_NS, name, QUEUE)


def reconciler(kube, prometheus_url, tmp_path, step="5m", beside=False, **run) -> Reconciler:
    """`beside`: Events and statuses written beside the reconciles, as `headroom run` on Kubernetes writes them."""
    server = PrometheusServer(url=prometheus_url, step=step, timeout_seconds=10, retries=0)
    cfg = RunConfig(cluster="kubernetes", prometheus=server, capacity_gpus=128, namespace=NS, **run)
    return Reconciler(kube, PrometheusDemand(cfg.prometheus), cfg, forecast_log=ForecastLog(tmp_path / "log"),
                      summary=kube.plan_summary(NS), events_beside=beside, statuses_beside=beside)


def refitting_beside(cluster, kube, prometheus_url, lease, **run) -> tuple[Reconciler, ConfigMapForecastStore, str]:
    """A reconciler on `cluster` whose hourly refits run beside the reconciles and record into the forecast store the
    replicas share (headroom run's), with chat's record and the Lease `lease` deleted through `kube` first: the
    reconciler, the store and chat's series (`run`: RunConfig's other settings)."""
    from cli.run import shared_forecast_store

    server = PrometheusServer(url=prometheus_url, step="5m", timeout_seconds=10, retries=0)
    cfg = RunConfig(cluster="kubernetes", prometheus=server, capacity_gpus=128, namespace=NS, **run)
    store = shared_forecast_store(cluster, NS, 24, cfg.keep_forecast_seconds)
    r = Reconciler(cluster, PrometheusDemand(server), cfg, forecast_log=store, refit_beside=True)
    series = f"{NS}.chat"
    kube.delete(f"/api/v1/namespaces/{NS}/configmaps/{store.name(series)}")
    kube.delete(f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{lease}")
    return r, store, series


def replicas(kube) -> int:
    return kube.get_deployment_replicas(NS, "chat")


def rp_status(kube, name="chat"):
    status = kube.get_reservation_policy(NS, name).get("status", {})
    return status, {c["type"]: c for c in status.get("conditions", [])}


def events(kube, kind, name, namespace):
    return [e["reason"] for e in kube.list_events(ObjectRef("", kind, name, namespace))]


def chat_events(kube, reason: str) -> list[dict]:
    """The Events of ReservationPolicy chat of `reason` (listed in no order of time)."""
    return [e for e in kube.list_events(ObjectRef("", "ReservationPolicy", "chat", NS)) if e["reason"] == reason]


def training(kube) -> dict:
    return {w.name: w for w in kube.workloads() if w.namespace == TRAIN_NS}


def test_simulated_morning_reserves_ahead_lends_slack_and_takes_back(kube_server, kube, controller, prometheus_server,
                                                                      tmp_path):
    for i in range(12):
        admit(kube, f"train-{i}", 10)  # 120 GPUs of training hold almost the whole cluster at night
    controller.sync()  # written by "Kueue" just now: the next read must see it
    r = reconciler(controller, prometheus_server.url, tmp_path, beside=True)
    seen = []
    for quarter in range(0, 16):  # 07:00 .. 10:45, every 15 minutes
        now = MONDAY_7AM + pd.Timedelta(minutes=15 * quarter)
        state = r.reconcile(now)
        ps = state.policies[f"{NS}/chat"]
        r.flush()  # the status written beside
        assert rp_status(kube)[0]["reservedGpus"] == ps.reserved_gpus
        seen.append((now, ps.reserved_gpus, replicas(kube), kube.get_cluster_queue_quota(QUEUE), state.slack_gpus))
        held = sum(w.gpus for w in training(kube).values() if w.active and w.admitted)
        assert ps.reserved_gpus + held <= 128, (now, ps.reserved_gpus, held)  # never over capacity
        assert not any(state.reconcile_errors_total.values()), state.reconcile_errors_total
    assert all(rep == res for _, res, rep, _, _ in seen)            # Deployment replicas follow the plan
    assert kube.get_cluster_queue_quota(INFERENCE_QUEUE) == seen[-1][1]  # and the inference queue's quota
    assert all(quota == slack for _, _, _, quota, slack in seen), seen  # the training quota is the slack
    r.close()
    assert "ReservationChanged" in events(kube, "ReservationPolicy", "chat", NS)  # sent beside
    assert seen[-1][1] > seen[0][1]                                  # the morning ramp was reserved
    evicted = [w for w in training(kube).values() if not w.active]
    assert evicted and all(w.evicted_by_plan for w in evicted)
    wl = kube.get(f"{WL}/{evicted[0].name}")
    assert wl["metadata"]["annotations"][EVICTED_BY_PLAN] and EVICTION_REASON in wl["metadata"]["annotations"]
    assert "Preempted" in events(kube, "Workload", evicted[0].name, TRAIN_NS)
    reasons = events(kube, "ReservationPolicy", "chat", NS)
    assert {"ReservationChanged", "SlackLent"} <= set(reasons)
    status, conditions = rp_status(kube)
    assert status["reservedGpus"] == seen[-1][1] and "slackGpus" not in status  # cluster-wide: in the summary
    summary = kube.plan_summary(NS).read()
    assert int(summary["slackGpus"]) == seen[-1][4] == kube.get_cluster_queue_quota(QUEUE)
    assert [h["slackGpus"] for h in json.loads(summary["nextHours"])] == [g for _, g in state.slack_by_hour[:6]]
    assert summary["headroomAtRisk"] == state.headroom_at_risk.status and summary["planId"]
    assert len(status["nextHours"]) == 6 and status["model"]
    assert conditions["Ready"]["status"] == "True" and conditions["ForecastDegraded"]["status"] == "False"
    assert status["realizedError"]["1h"] > 0  # the forecasts issued at 07:00-09:00 met their actuals
    assert sum(state.preemptions_total.values()) == len(evicted)
    # A restarted controller (new process state, its own cache) preempts nothing more at the same moment.
    before = {w.name for w in evicted}
    again = KubeCluster.from_kubeconfig(str(kube_server.apiserver.kubeconfig()), request_timeout=5).watch()
    try:
        reconciler(again, prometheus_server.url, tmp_path / "restarted").reconcile(seen[-1][0])
    finally:
        again.close()
    assert {w.name for w in training(kube).values() if not w.active} == before
    # Kueue completes the evictions (the pods are gone, the quota released): headroom requeues its victims.
    for name in before:
        kueue.complete_eviction(kube, TRAIN_NS, name)
    controller.sync()
    r.reconcile(seen[-1][0] + pd.Timedelta(minutes=5))
    back = training(kube)
    assert all(back[name].active and not back[name].evicted_by_plan for name in before)
    assert all(not back[name].admitted for name in before)  # queued again: Kueue decides when they run


def test_a_reconcile_reads_each_object_once_without_a_watch_cache(kube_server, kube, prometheus_server, tmp_path):
    """Without a watch cache every read is a request. A reconcile LISTed the ClusterQueues five or six times (the view
    its plan is made on, the fresh view its evictions are re-planned on, the view after its writes, the Cohort tree,
    the queues' preemption and queueing settings), got a ClusterQueue target beside them, each Deployment target for
    each view, and each object it wrote once more before writing it. Now a reconcile reads each once (the morning
    ramp's evictions and the slack lent included), the next reconcile again, and what it reads after its writes says
    them: the quota lent, the training evicted."""
    kube.apply(kueue.path("clusterqueues", "target-run"),
               kueue.cluster_queue("target-run", gpus=0, cohort=COHORT, lending_limit=0))
    kube.create(RP, policy("queue-target", target={"kind": "ClusterQueue", "name": "target-run"},
                           inferenceClusterQueue=None, trainingClusterQueues=[]))
    for i in range(12):
        admit(kube, f"train-{i}", 10)  # 120 GPUs of training hold almost the whole cluster at night
    plain = KubeCluster.from_kubeconfig(str(kube_server.apiserver.kubeconfig()), request_timeout=5)
    seen = counting(plain)
    wanted = {kueue.path("clusterqueues"), kueue.path("cohorts"), kueue.path("workloads"),
              f"/apis/apps/v1/namespaces/{NS}/deployments/chat"}
    try:
        r = reconciler(plain, prometheus_server.url, tmp_path)
        for hour in range(4):  # 07:00 .. 10:00: the morning ramp takes GPUs back
            seen.clear()
            state = r.reconcile(MONDAY_7AM + pd.Timedelta(hours=hour))
            reads = Counter(path for method, path in seen if method == "GET")
            assert max(reads.values()) == 1 and wanted <= reads.keys(), reads
            assert not any(state.reconcile_errors_total.values()), state.reconcile_errors_total
            assert state.teams[QUEUE].quota_gpus == kube.get_cluster_queue_quota(QUEUE) == state.slack_gpus
            assert state.training_gpus == sum(w.gpus for w in training(kube).values() if w.running)
        assert sum(state.preemptions_total.values()) > 0, "no eviction: its fresh view went unread"
        assert kube.get_cluster_queue_quota("target-run") == state.policies[f"{NS}/queue-target"].reserved_gpus > 0
    finally:
        plain.close()
        kube.delete(kueue.path("clusterqueues", "target-run"))


def test_prometheus_down_keeps_the_forecast_then_falls_back_never_lowering(kube, controller, private_prometheus,
                                                                            tmp_path):
    r = reconciler(controller, private_prometheus.url, tmp_path, keep_forecast_seconds=3600)
    peak = r.reconcile(MONDAY_7AM + pd.Timedelta(hours=5))  # noon
    before = peak.policies[f"{NS}/chat"].reserved_gpus
    private_prometheus.stop()
    kept = r.reconcile(MONDAY_7AM + pd.Timedelta(hours=5, minutes=20)).policies[f"{NS}/chat"]
    assert kept.degraded and not kept.fallback and kept.reserved_gpus >= before
    _, conditions = rp_status(kube)
    assert conditions["ForecastDegraded"]["status"] == "True"
    assert conditions["ForecastDegraded"]["reason"] == "DemandUnavailable"
    assert "Prometheus at" in conditions["ForecastDegraded"]["message"]
    night = r.reconcile(MONDAY_7AM + pd.Timedelta(hours=16)).policies[f"{NS}/chat"]  # 23:00, forecast expired
    assert night.fallback and night.reserved_gpus >= before and replicas(kube) >= before
    status, conditions = rp_status(kube)
    assert conditions["FallbackActive"]["status"] == "True"
    # the same outage a reconcile later: no new Warning event, the status not written again (its message once
    # carried each read's time range, so every reconcile of an outage wrote both)
    warnings = events(kube, "ReservationPolicy", "chat", NS).count("FallbackActive")
    r.reconcile(MONDAY_7AM + pd.Timedelta(hours=16, minutes=5))
    assert events(kube, "ReservationPolicy", "chat", NS).count("FallbackActive") == warnings
    assert rp_status(kube)[0]["conditions"] == status["conditions"] and " .. " not in \
        conditions["ForecastDegraded"]["message"]


@pytest.mark.parametrize("bad, why", [
    ({"targetQuantile": 0.99, "headroomQuantile": 0.9}, "headroomQuantile must be at least targetQuantile"),
    ({"timezone": "Europe/Berln"}, "spec.timezone: 'Europe/Berln' is not an IANA time zone"),
    # several errors the CRD's schema admits: how many and each field first, as the Event keeps them
    ({"timezone": "Europe/Berln", "leadTime": "36h", "reclaimDeadline": "30h"},
     "3 errors in the spec (spec.timezone, spec.leadTime, spec.reclaimDeadline): spec.timezone: "),
])
def test_invalid_policy_is_reported_and_the_valid_one_still_acts(kube, controller, prometheus_server, tmp_path, bad,
                                                                 why):
    # The CRD's schema admits it; headroom's validation does not (headroom below target quantile; a time zone of
    # the right shape that the zone database does not know).
    kube.create(RP, policy("bad", **bad))
    controller.sync()
    r = reconciler(controller, prometheus_server.url, tmp_path)
    state = r.reconcile(MONDAY_7AM)
    assert not state.policies[f"{NS}/bad"].valid and state.policies[f"{NS}/chat"].valid
    _, conditions = rp_status(kube, "bad")
    assert conditions["Ready"]["status"] == "False" and conditions["Ready"]["reason"] == "InvalidSpec"
    assert why in conditions["Ready"]["message"]
    assert "InvalidSpec" in events(kube, "ReservationPolicy", "bad", NS)
    assert replicas(kube) == state.policies[f"{NS}/chat"].reserved_gpus


def test_a_missing_target_is_said_in_the_policy_s_status_and_an_event(kube, controller, prometheus_server, tmp_path):
    """The scale read's 404 once became the Ready condition's reason ('GET /apis/...'), which the CRD's pattern
    refuses: the whole status was rejected and the policy showed nothing, only the controller's log did."""
    kube.create(RP, policy("gone", target={"kind": "Deployment", "name": "no-such-deployment"},
                           trainingClusterQueues=[]))
    controller.sync()
    r = reconciler(controller, prometheus_server.url, tmp_path)
    state = r.reconcile(MONDAY_7AM)
    status, conditions = rp_status(kube, "gone")
    assert conditions["Ready"]["status"] == "False" and conditions["Ready"]["reason"] == "TargetMissing", conditions
    assert "no-such-deployment" in conditions["Ready"]["message"] and status["observedGeneration"] >= 1
    assert "TargetMissing" in events(kube, "ReservationPolicy", "gone", NS)
    assert replicas(kube) == state.policies[f"{NS}/chat"].reserved_gpus  # the other policy still acts


def test_a_policy_deleted_and_created_again_is_told_its_fault_again(kube, controller, prometheus_server, tmp_path):
    """Found on the embedded cluster, and so here: rag, whose query returns nothing, gets a FallbackActive Warning.
    Deleted and created again, the new object (its own uid, which `kubectl describe` lists Events by) had the same
    fault and no Event: the controller remembered by name what it had told the old one."""
    kube.create(f"/apis/apps/v1/namespaces/{NS}/deployments", deployment("rag"))
    rag = policy("rag", query="headroom_no_such_metric", trainingClusterQueues=[], inferenceClusterQueue=None)
    uids = [kube.create(RP, rag)["metadata"]["uid"]]
    controller.sync()
    r = reconciler(controller, prometheus_server.url, tmp_path)
    r.reconcile(MONDAY_7AM)
    kube.delete(f"{RP}/rag")
    uids.append(kube.create(RP, rag)["metadata"]["uid"])
    controller.sync()
    r.reconcile(MONDAY_7AM + pd.Timedelta(minutes=5))
    assert rp_status(kube, "rag")[1]["FallbackActive"]["status"] == "True"
    told = [e["involvedObject"].get("uid") for e in kube.list_events(ObjectRef("", "ReservationPolicy", "rag", NS))
            if e["reason"] == "FallbackActive" and e["type"] == "Warning"]
    assert sorted(told) == sorted(uids)  # one for each object


def test_a_policy_deleted_loses_its_stored_forecasts_but_not_to_a_list_that_failed(kube, controller, prometheus_server,
                                                                                     tmp_path, monkeypatch):
    """Found on the embedded cluster, and so here: the forecasts stored for chat (its ConfigMap's data) stayed after
    chat was deleted. They go once the policies are listed without it, not while the list fails."""
    from cli.run import shared_forecast_store

    server = PrometheusServer(url=prometheus_server.url, step="5m", timeout_seconds=10, retries=0)
    cfg = RunConfig(cluster="kubernetes", prometheus=server, capacity_gpus=128, namespace=NS)
    store = shared_forecast_store(controller, NS, 24, cfg.keep_forecast_seconds)
    series = f"{NS}.chat"
    kube.delete(f"/api/v1/namespaces/{NS}/configmaps/{store.name(series)}")
    r = Reconciler(controller, PrometheusDemand(server), cfg, forecast_log=store)
    r.reconcile(MONDAY_7AM)
    assert store.load(series)

    def failing(namespace=None):
        raise ClusterError("the API server did not answer")

    with monkeypatch.context() as failed:
        failed.setattr(controller, "reservation_policies", failing)
        r.reconcile(MONDAY_7AM + pd.Timedelta(minutes=5))
    assert store.load(series)
    kube.delete(f"{RP}/chat")
    controller.sync()
    r.reconcile(MONDAY_7AM + pd.Timedelta(minutes=10))
    assert store.load(series) == {}


def test_after_a_query_edit_the_policy_is_planned_on_the_new_query_s_samples_alone(kube, controller,
                                                                                    prometheus_server, tmp_path):
    """Found on the embedded cluster, and so here: chat's query edited to count its demand 4 times over (its
    demandPerGpu with it: the same GPUs). The controller joined the new query's samples to the old one's weeks, and
    the refit the edit asked for fitted both: its reservation parted from that of a controller started after the edit,
    which reads the new query whole. A query edited is read whole."""
    r = reconciler(controller, prometheus_server.url, tmp_path)
    r.reconcile(MONDAY_7AM)
    kube.apply(f"{RP}/chat", policy("chat", query=f"4 * {METRIC}",
                                    capacity={"demandPerGpu": 40.0, "gpusPerReplica": 1}))
    controller.sync()
    fresh = reconciler(controller, prometheus_server.url, tmp_path / "fresh")
    for minutes in (15, 30, 45):
        now = MONDAY_7AM + pd.Timedelta(minutes=minutes)
        kept = r.reconcile(now).policies[f"{NS}/chat"].reserved_gpus
        assert kept == fresh.reconcile(now).policies[f"{NS}/chat"].reserved_gpus, (now, kept)


def test_a_policy_whose_target_is_missing_takes_no_gpus_from_a_working_one(kube, controller, prometheus_server,
                                                                           tmp_path):
    """Found here: a policy whose Deployment does not exist said Ready=False TargetMissing, yet the plan reserved it
    35 GPUs, lent training 0 and cut the working policy. Over capacity (64 GPUs lendable, the missing policy older
    and its minGpus 60), the working policy is not cut, reserves what it asks and the rest is lent to training; the
    missing one reserves nothing. Its Deployment created, the next reconcile plans it again and evicts the training
    that holds its reservation."""
    kube.delete(f"{RP}/chat")  # chat again, created after "absent": the older policy comes first
    kube.create(RP, policy("absent", minGpus=60))
    time.sleep(1.1)  # creationTimestamp has seconds: a tie would go by name
    kube.create(RP, policy("chat"))
    controller.sync()
    r = reconciler(controller, prometheus_server.url, tmp_path, non_lendable_gpus=64)
    for minutes in (0, 1):  # the target read first by a GET, then from the watch cache: said once
        state = r.reconcile(MONDAY_7AM + pd.Timedelta(minutes=minutes))
        chat = state.policies[f"{NS}/chat"]
        assert chat.valid and chat.step is not None and chat.step.cut_gpus == 0 and chat.reserved_gpus > 4
        assert replicas(kube) == chat.reserved_gpus
        assert state.slack_gpus == 64 - chat.reserved_gpus == kube.get_cluster_queue_quota(QUEUE)
    assert not state.policies[f"{NS}/absent"].valid
    status, conditions = rp_status(kube, "absent")
    assert (conditions["Ready"]["status"], conditions["Ready"]["reason"]) == ("False", "TargetMissing")
    assert f"Deployment {NS}/absent not found" in conditions["Ready"]["message"] and status["reservedGpus"] == 0
    assert events(kube, "ReservationPolicy", "absent", NS) == ["TargetMissing"]
    for i in range(state.slack_gpus // 4):  # training takes what was lent
        admit(kube, f"train-{i}", 4, preemption_seconds=60)
    kube.create(f"/apis/apps/v1/namespaces/{NS}/deployments", deployment("absent"))
    controller.sync()
    state = r.reconcile(MONDAY_7AM + pd.Timedelta(minutes=6))
    absent = state.policies[f"{NS}/absent"]
    assert absent.valid and absent.reserved_gpus >= 60 and rp_status(kube, "absent")[1]["Ready"]["status"] == "True"
    assert kube.get_deployment_replicas(NS, "absent") == absent.reserved_gpus
    assert state.policies[f"{NS}/chat"].reserved_gpus <= 64 - absent.reserved_gpus
    running = sum(w.gpus for w in training(kube).values() if w.active)
    assert running <= state.slack_gpus < 64 - chat.reserved_gpus and sum(state.preemptions_total.values()) > 0
    assert {"forecastDemand", "model"} <= rp_status(kube, "absent")[0].keys()
    # deleted again: its status no longer shows the forecast it was planned on (a merge patch kept it)
    kube.delete(f"/apis/apps/v1/namespaces/{NS}/deployments/absent")
    controller.sync()
    r.reconcile(MONDAY_7AM + pd.Timedelta(minutes=12))
    status, conditions = rp_status(kube, "absent")
    assert conditions["Ready"]["reason"] == "TargetMissing" and status["reservedGpus"] == 0
    assert not {"forecastDemand", "model"} & status.keys(), status


def _assert_pool_run_held_once(kube, r, claim: str, quota: int = 4, serving: int = 1) -> None:
    """Refused "serve" runs its `serving` replicas of 4 GPUs in pool-run (quota `quota`), the ClusterQueue target of
    refused `claim`: at 07:00 and at the 10:00 peak both stay as they are, and pool-run's GPUs (its quota, or the pods
    where they borrow beyond it) are counted once beside chat's reservation and the slack."""
    held = max(quota, 4 * serving)
    for hour in (0, 3):
        state = r.reconcile(MONDAY_7AM + pd.Timedelta(hours=hour))
        chat = state.policies[f"{NS}/chat"]
        assert not state.policies[f"{NS}/serve"].valid and not state.policies[f"{NS}/{claim}"].valid
        assert kube.get_deployment_replicas(NS, "serve") == serving
        assert kube.get_cluster_queue_quota("pool-run") == quota
        assert chat.reserved_gpus + held + state.slack_gpus == 128, (hour, chat.reserved_gpus, state.slack_gpus)


@pytest.mark.parametrize("refusal", [{"timezone": "Europe/Berln"},  # InvalidSpec: the CRD's schema admits it
                                     {"minGpus": 200}])               # PlanInfeasible
def test_a_refused_policy_s_target_keeps_its_gpus_and_its_team_keeps_its_share(kube, controller, prometheus_server,
                                                                                 tmp_path, refusal):
    """Found on the embedded cluster, and so here: a policy planned, then refused as InvalidSpec, had its target's GPUs
    lent as idle (only a PlanInfeasible target's were held); and whatever the refusal its training queue kept the quota
    the last plan set, beside the whole slack lent to the other policy's queue: the plan lent more than it counted.
    Its target is left as it is and holds its GPUs, in the inference queue the two share too (it was given chat's
    reservation alone), and its team keeps its share of the slack."""
    team = kueue.path("clusterqueues", "team-run")
    kube.apply(team, kueue.cluster_queue("team-run", gpus=0, cohort=COHORT))
    big = {"trainingClusterQueues": ["team-run"], "capacity": {"demandPerGpu": 20.0, "gpusPerReplica": 1}}
    try:
        time.sleep(1.1)  # creationTimestamp has seconds: big comes after chat
        kube.create(f"/apis/apps/v1/namespaces/{NS}/deployments", deployment("big"))
        kube.create(RP, policy("big", **big))
        controller.sync()
        r = reconciler(controller, prometheus_server.url, tmp_path)
        r.reconcile(MONDAY_7AM)
        held = kube.get_deployment_replicas(NS, "big")
        assert held > 0 and kube.get_cluster_queue_quota("team-run") > 0
        kube.apply(f"{RP}/big", policy("big", **big, **refusal))
        controller.sync()
        for minutes in (5, 10):
            state = r.reconcile(MONDAY_7AM + pd.Timedelta(minutes=minutes))
            chat = state.policies[f"{NS}/chat"]
            assert not state.policies[f"{NS}/big"].valid and kube.get_deployment_replicas(NS, "big") == held
            quotas = kube.get_cluster_queue_quota(QUEUE), kube.get_cluster_queue_quota("team-run")
            assert sum(quotas) == state.slack_gpus == 128 - chat.reserved_gpus - held and min(quotas) > 0, \
                (quotas, state.slack_gpus, chat.reserved_gpus, held)
            # the inference queue the two share holds big's pods too: beyond its quota they would borrow
            assert kube.get_cluster_queue_quota(INFERENCE_QUEUE) == chat.reserved_gpus + held
    finally:
        kube.delete(team)


def test_an_active_policy_beside_a_forecast_only_one_is_planned_on_what_that_one_holds(kube, controller,
                                                                                        prometheus_server, tmp_path):
    """Found on the embedded cluster, and so here: shadow, forecast-only beside the active chat, its Deployment at 3
    replicas and its team's queue team-run holding 60 GPUs of training. The one plan counted shadow's would-be
    reservation where its Deployment held 3 GPUs, and team-run's training as the plan's to preempt, where no eviction is
    made for a forecast-only policy: reserved + lent + what shadow and team-run held went over the 128 GPUs, and chat's
    new replicas waited for GPUs team-run kept. chat is planned on what shadow holds; shadow changes nothing and its
    status says what it would reserve."""
    team = kueue.path("clusterqueues", "team-run")
    kube.apply(team, kueue.cluster_queue("team-run", gpus=0, cohort=COHORT))
    kube.apply(kueue.path("localqueues", "team-run", TRAIN_NS), kueue.local_queue(TRAIN_NS, "team-run"))
    try:
        for i in range(6):
            kube.create(WL, kueue.workload(TRAIN_NS, f"team-{i}", "team-run", gpus_per_pod=10))
            kueue.admit(kube, TRAIN_NS, f"team-{i}", "team-run")
        time.sleep(1.1)  # creationTimestamp has seconds: shadow comes after chat
        kube.create(f"/apis/apps/v1/namespaces/{NS}/deployments", deployment("shadow"))
        kube.scale_deployment(NS, "shadow", 3)
        kube.create(RP, policy("shadow", mode="forecast-only", trainingClusterQueues=["team-run"],
                               inferenceClusterQueue=None))
        controller.sync()
        r = reconciler(controller, prometheus_server.url, tmp_path)
        for quarter in range(4):  # 07:00 .. 07:45: the morning ramp
            state = r.reconcile(MONDAY_7AM + pd.Timedelta(minutes=15 * quarter))
            controller.sync()
            chat, shadow = state.policies[f"{NS}/chat"], state.policies[f"{NS}/shadow"]
            team_run = sum(w.gpus for w in training(kube).values() if w.cluster_queue == "team-run" and w.active)
            assert team_run == 60 and kube.get_cluster_queue_quota("team-run") == 0  # forecast-only: nothing changed
            assert kube.get_deployment_replicas(NS, "shadow") == 3
            assert chat.reserved_gpus + 3 + team_run + state.slack_gpus <= 128, \
                (chat.reserved_gpus, state.slack_gpus)
            assert rp_status(kube, "shadow")[0]["reservedGpus"] == shadow.reserved_gpus > 3  # what it would reserve
        r.close()
    finally:
        for i in range(6):
            kube.delete(f"{WL}/team-{i}")
        kube.delete(kueue.path("localqueues", "team-run", TRAIN_NS))
        kube.delete(team)


def test_a_forecast_only_policy_s_minimum_refuses_no_active_policy(kube, controller, prometheus_server, tmp_path):
    """Found on the embedded cluster, and so here: eval, forecast-only and created before chat, asks a minimum of 100
    of the 128 GPUs. Its minimum was counted first: chat, active, was refused PlanInfeasible and its Deployment left
    as it was. chat's minimum comes first; eval, which changes nothing, is the one refused."""
    kube.delete(f"{RP}/chat")
    kube.create(f"/apis/apps/v1/namespaces/{NS}/deployments", deployment("eval"))
    kube.create(RP, policy("eval", mode="forecast-only", minGpus=100, inferenceClusterQueue=None))
    time.sleep(1.1)  # creationTimestamp has seconds: chat comes after eval
    kube.create(RP, policy("chat", minGpus=40))
    controller.sync()
    state = reconciler(controller, prometheus_server.url, tmp_path).reconcile(MONDAY_7AM)
    chat, evaluated = state.policies[f"{NS}/chat"], state.policies[f"{NS}/eval"]
    assert chat.valid and replicas(kube) == chat.reserved_gpus >= 40
    assert not evaluated.valid and rp_status(kube, "eval")[1]["Ready"]["reason"] == "PlanInfeasible"


@pytest.mark.parametrize("restart", [False, True])
def test_a_policy_edited_so_not_even_what_it_holds_reads_still_holds_its_target_s_gpus(kube, controller,
                                                                                     prometheus_server, tmp_path,
                                                                                     restart):
    """big, planned beside chat, is edited so its inference queue is one of its training queues too: the CRD's schema
    (no CEL on 1.20) admits it, and the spec reads not even as far as what it holds. Its Deployment runs on (an edit
    deletes no workload), but the controller counted none of it: its GPUs were lent as idle, beside chat's
    reservation, and team-run kept the quota last set. It holds what the spec read before said, as the embedded
    cluster holds it (tests/test_run.py): its target's GPUs, in the inference queue it shares with chat, and its
    team's share of the slack. So too a controller restarted after the edit (or a new leader), which never read that
    spec: the policy's status says what it holds."""
    team = kueue.path("clusterqueues", "team-run")
    kube.apply(team, kueue.cluster_queue("team-run", gpus=0, cohort=COHORT))
    big = {"trainingClusterQueues": ["team-run"], "capacity": {"demandPerGpu": 20.0, "gpusPerReplica": 1}}
    try:
        time.sleep(1.1)  # creationTimestamp has seconds: big comes after chat
        kube.create(f"/apis/apps/v1/namespaces/{NS}/deployments", deployment("big"))
        kube.create(RP, policy("big", **big))
        controller.sync()
        r = reconciler(controller, prometheus_server.url, tmp_path)
        r.reconcile(MONDAY_7AM)
        held = kube.get_deployment_replicas(NS, "big")
        assert held > 0 and kube.get_cluster_queue_quota("team-run") > 0
        kube.apply(f"{RP}/big", policy("big", **{**big, "trainingClusterQueues": ["team-run", INFERENCE_QUEUE]}))
        controller.sync()
        for minutes in (5, 10):
            if restart:  # the status said by a valid spec, then by the refusal
                r.close()
                r = reconciler(controller, prometheus_server.url, tmp_path)
            state = r.reconcile(MONDAY_7AM + pd.Timedelta(minutes=minutes))
            chat, refused = state.policies[f"{NS}/chat"], state.policies[f"{NS}/big"]
            assert not refused.valid and "inferenceClusterQueue cannot also be a training ClusterQueue" in refused.error
            assert kube.get_deployment_replicas(NS, "big") == held
            quotas = kube.get_cluster_queue_quota(QUEUE), kube.get_cluster_queue_quota("team-run")
            assert sum(quotas) == state.slack_gpus == 128 - chat.reserved_gpus - held and min(quotas) > 0, \
                (quotas, state.slack_gpus, chat.reserved_gpus, held)
            assert kube.get_cluster_queue_quota(INFERENCE_QUEUE) == chat.reserved_gpus + held
    finally:
        kube.delete(team)


@pytest.mark.parametrize("refusal", [{"timezone": "Europe/Berln"},                # InvalidSpec: does not parse
                                     {"trainingClusterQueues": [INFERENCE_QUEUE]}])  # refused for chat's queue
def test_a_queue_two_refused_policies_name_holds_its_gpus_once(kube, controller, prometheus_server, tmp_path,
                                                                refusal):
    """Two refused policies: "serve" (created first) runs its Deployment's pods as Workloads of ClusterQueue pool-run,
    whose quota holds them; "a-claim" (listed first) names pool-run as its ClusterQueue target. The controller counted
    its GPUs twice, serve's 4 replicas and pool-run's quota of 4 as a-claim's target: 8 held where 4 are, at 07:00 chat
    reserved 23 and 97 were lent, 4 GPUs neither. They are counted once, as the embedded cluster holds them
    (tests/test_run.py)."""
    pool = kueue.path("clusterqueues", "pool-run")
    kube.apply(pool, kueue.cluster_queue("pool-run", gpus=4, cohort=COHORT, lending_limit=0))
    serve = {"inferenceClusterQueue": "pool-run", "capacity": {"demandPerGpu": 10.0, "gpusPerReplica": 4}}
    claim = {"target": {"kind": "ClusterQueue", "name": "pool-run"}, "inferenceClusterQueue": None}
    try:
        time.sleep(1.1)  # creationTimestamp has seconds: serve comes after chat, a-claim after serve
        kube.create(f"/apis/apps/v1/namespaces/{NS}/deployments", deployment("serve"))
        kube.create(RP, policy("serve", **serve, **refusal))
        time.sleep(1.1)
        kube.create(RP, policy("a-claim", **claim, **refusal))
        controller.sync()
        _assert_pool_run_held_once(kube, reconciler(controller, prometheus_server.url, tmp_path), "a-claim")
    finally:
        kube.delete(pool)


def test_a_refused_policy_s_pods_in_an_older_refused_policy_s_cluster_queue_target_hold_its_gpus_once(
        kube, controller, prometheus_server, tmp_path):
    """The other way round: "claim" (created first) names pool-run as its ClusterQueue target, quota 4; "serve" runs
    its Deployment's pods with pool-run as its inferenceClusterQueue, so on a cluster Kueue admits them there, within
    that quota: 4 GPUs held. The controller counted 8, pool-run's quota and serve's 4 replicas beside it: at 07:00
    chat reserved 23 and 97 were lent, 4 GPUs neither. The pods of a refused policy in a ClusterQueue target held
    before are within that queue's quota: counted once, as the embedded cluster holds them (tests/test_run.py)."""
    pool = kueue.path("clusterqueues", "pool-run")
    kube.apply(pool, kueue.cluster_queue("pool-run", gpus=4, cohort=COHORT, lending_limit=0))
    refusal = {"timezone": "Europe/Berln"}
    try:
        time.sleep(1.1)  # creationTimestamp has seconds: claim comes after chat, serve after claim
        kube.create(RP, policy("claim", target={"kind": "ClusterQueue", "name": "pool-run"},
                               inferenceClusterQueue=None, **refusal))
        time.sleep(1.1)
        kube.create(f"/apis/apps/v1/namespaces/{NS}/deployments", deployment("serve"))
        kube.create(RP, policy("serve", inferenceClusterQueue="pool-run",
                               capacity={"demandPerGpu": 10.0, "gpusPerReplica": 4}, **refusal))
        controller.sync()
        _assert_pool_run_held_once(kube, reconciler(controller, prometheus_server.url, tmp_path), "claim")
    finally:
        kube.delete(pool)


@pytest.mark.parametrize("restart, said", [(False, True), (True, True), (True, False)])
def test_a_refused_policy_edited_off_a_target_an_older_refused_one_holds_leaves_nothing_behind(
        kube, controller, prometheus_server, tmp_path, restart, said):
    """Refused "serve" holds Deployment serve (4 GPUs), its pods in pool-run; refused "named", created after it, names
    serve too and so holds none of it. named, edited to name pool-run as its ClusterQueue target, holds pool-run's
    quota whole, serve's pods within it; but the controller took serve as a target named left behind, its 4 GPUs held
    again beside pool-run's 4: chat reserved 23 at 07:05 and 97 were lent, 4 GPUs neither. So too a controller
    restarted before it planned the edit, which read named's status: it said serve as what named held. An edit leaves
    behind only what its policy held, as its status says (holdsTarget: false): pool-run's GPUs are counted once. Not
    `said`: the status lacks holdsTarget, as a controller older than the field wrote it; the one restarted decides who
    held serve before the edit from the policies, as that status said them (serve, the older): counted once too."""
    pool = kueue.path("clusterqueues", "pool-run")
    kube.apply(pool, kueue.cluster_queue("pool-run", gpus=4, cohort=COHORT, lending_limit=0))
    refused = {"target": {"kind": "Deployment", "name": "serve"}, "inferenceClusterQueue": "pool-run",
               "capacity": {"demandPerGpu": 10.0, "gpusPerReplica": 4}, "timezone": "Europe/Berln"}
    try:
        time.sleep(1.1)  # creationTimestamp has seconds: serve comes after chat, named after serve
        kube.create(f"/apis/apps/v1/namespaces/{NS}/deployments", deployment("serve"))
        kube.create(RP, policy("serve", **refused))
        time.sleep(1.1)
        kube.create(RP, policy("named", **{**refused, "inferenceClusterQueue": "named-run"}))
        controller.sync()
        r = reconciler(controller, prometheus_server.url, tmp_path)
        state = r.reconcile(MONDAY_7AM)
        assert state.policies[f"{NS}/chat"].reserved_gpus + 4 + state.slack_gpus == 128
        assert rp_status(kube, "named")[0]["holdsTarget"] is False
        if not said:
            kube._request("PATCH", f"{RP}/named/status", {"status": {"holdsTarget": None}},
                          content_type="application/merge-patch+json")
            assert "holdsTarget" not in rp_status(kube, "named")[0]
        kube.apply(f"{RP}/named", policy("named", **{**refused, "inferenceClusterQueue": "named-run",
                                                     "target": {"kind": "ClusterQueue", "name": "pool-run"}}))
        controller.sync()
        if restart:
            r.close()
            r = reconciler(controller, prometheus_server.url, tmp_path)
        for minutes in (5, 10):
            state = r.reconcile(MONDAY_7AM + pd.Timedelta(minutes=minutes))
            chat = state.policies[f"{NS}/chat"]
            assert kube.get_deployment_replicas(NS, "serve") == 1 and kube.get_cluster_queue_quota("pool-run") == 4
            assert chat.reserved_gpus + 4 + state.slack_gpus == 128, (minutes, chat.reserved_gpus, state.slack_gpus)
            assert "left" not in rp_status(kube, "named")[0]
        r.close()
    finally:
        kube.delete(pool)


@pytest.mark.parametrize("claim_first", [True, False])
@pytest.mark.parametrize("quota, serving", [(8, 1), (4, 2)])  # a quota above serve's pods; pods borrowing beyond it
def test_a_refused_cluster_queue_target_holds_its_quota_whole_whichever_refused_policy_is_older(
        kube, controller, prometheus_server, tmp_path, claim_first, quota, serving):
    """Refused "claim" names pool-run as its ClusterQueue target; refused "serve" runs its pods there. Every test had
    quota == pods: with a quota of 8 and serve's 4 GPUs, serve older, the controller counted serve's pods, 4, and lent
    the other 4 pool-run holds; with a quota of 4 and serve's 8 GPUs borrowing beyond it, claim older, it counted the
    quota, 4. Kueue admits the pods within the quota, held whole: pool-run holds the larger, in either order."""
    pool = kueue.path("clusterqueues", "pool-run")
    kube.apply(pool, kueue.cluster_queue("pool-run", gpus=quota, cohort=COHORT, lending_limit=0))
    refusal = {"timezone": "Europe/Berln"}
    claim = policy("claim", target={"kind": "ClusterQueue", "name": "pool-run"}, inferenceClusterQueue=None, **refusal)
    serve = policy("serve", inferenceClusterQueue="pool-run", capacity={"demandPerGpu": 10.0, "gpusPerReplica": 4},
                   **refusal)
    pods = deployment("serve")
    pods["spec"]["replicas"] = serving
    try:
        kube.create(f"/apis/apps/v1/namespaces/{NS}/deployments", pods)
        for p in (claim, serve) if claim_first else (serve, claim):
            time.sleep(1.1)  # creationTimestamp has seconds: each after chat, and after the one before
            kube.create(RP, p)
        controller.sync()
        _assert_pool_run_held_once(kube, reconciler(controller, prometheus_server.url, tmp_path), "claim", quota,
                                   serving)
    finally:
        kube.delete(pool)


def test_a_refused_policy_s_pods_in_an_accepted_policy_s_training_queue_hold_no_gpus_beside_its_quota(
        kube, controller, prometheus_server, tmp_path):
    """"serve" names research-run, chat's training queue, as its inferenceClusterQueue (refused for it): Kueue admits
    its pods there, within the quota chat lends. The controller counted serve's 4 GPUs held beside what it lent: at
    07:00 chat reserved 23 and 101 were lent, 4 GPUs neither. They are within the lent quota: counted once, as lent,
    as the embedded cluster holds them (tests/test_run.py)."""
    time.sleep(1.1)  # creationTimestamp has seconds: serve comes after chat
    kube.create(f"/apis/apps/v1/namespaces/{NS}/deployments", deployment("serve"))
    kube.create(RP, policy("serve", inferenceClusterQueue=QUEUE, trainingClusterQueues=[],
                           capacity={"demandPerGpu": 10.0, "gpusPerReplica": 4}))
    controller.sync()
    r = reconciler(controller, prometheus_server.url, tmp_path)
    for hour in (0, 3):  # 07:00, and the 10:00 peak
        state = r.reconcile(MONDAY_7AM + pd.Timedelta(hours=hour))
        chat = state.policies[f"{NS}/chat"]
        assert not state.policies[f"{NS}/serve"].valid and kube.get_deployment_replicas(NS, "serve") == 1
        assert chat.reserved_gpus + state.slack_gpus == 128, (hour, chat.reserved_gpus, state.slack_gpus)
        assert kube.get_cluster_queue_quota(QUEUE) == state.slack_gpus


def test_a_refused_policy_s_status_keeps_nothing_of_its_last_plan(kube, controller, prometheus_server, tmp_path):
    """Found here: a refusal's status named no planId and no realizedError, so the merge patch kept its last plan's
    (the embedded cluster cleared them): a policy refused said which plan was in force and how well forecasts scored
    that are no longer made or scored. Both go, as on the embedded cluster; observedGeneration is the one refused."""
    r = reconciler(controller, prometheus_server.url, tmp_path)
    for hour in range(3):
        r.reconcile(MONDAY_7AM + pd.Timedelta(hours=hour))
    status, _ = rp_status(kube)
    assert status["planId"] and status["realizedError"], status
    kube.apply(f"{RP}/chat", policy("chat", timezone="Europe/Berln"))
    controller.sync()
    r.reconcile(MONDAY_7AM + pd.Timedelta(hours=2, minutes=5))
    status, conditions = rp_status(kube)
    assert conditions["Ready"]["reason"] == "InvalidSpec"
    assert status["observedGeneration"] == kube.get_reservation_policy(NS, "chat")["metadata"]["generation"] > 1
    assert not {"planId", "realizedError"} & status.keys(), status
    # edited and refused for the same reason: the status says the generation refused now (it said the one before)
    kube.apply(f"{RP}/chat", policy("chat", timezone="Europe/Berln", minGpus=4))
    controller.sync()
    r.reconcile(MONDAY_7AM + pd.Timedelta(hours=2, minutes=10))
    status, conditions = rp_status(kube)
    assert conditions["Ready"]["reason"] == "InvalidSpec"
    assert status["observedGeneration"] == kube.get_reservation_policy(NS, "chat")["metadata"]["generation"] > 2


def test_a_missing_training_queue_is_said_on_the_policy_naming_it(kube, controller, prometheus_server, tmp_path):
    """The slack lent to a ClusterQueue that does not exist never reaches it: once only the controller's log said
    so, the policy Ready=True."""
    kube.create(f"/apis/apps/v1/namespaces/{NS}/deployments", deployment("lone"))
    kube.create(RP, policy("lone", trainingClusterQueues=["no-such-queue"], inferenceClusterQueue=None))
    controller.sync()
    r = reconciler(controller, prometheus_server.url, tmp_path)
    state = r.reconcile(MONDAY_7AM)
    _, conditions = rp_status(kube, "lone")
    assert conditions["Ready"]["status"] == "False" and conditions["Ready"]["reason"] == "QueueMissing", conditions
    assert "ClusterQueue no-such-queue" in conditions["Ready"]["message"]
    assert "QueueMissing" in events(kube, "ReservationPolicy", "lone", NS)
    _, chat = rp_status(kube)
    assert chat["Ready"]["status"] == "True" and state.policies[f"{NS}/chat"].valid  # the other policy is not hit
    # the summary says what training was lent, not what the plan meant to lend (it once counted the missing queue's)
    assert int(kube.plan_summary(NS).read()["slackGpus"]) == state.slack_gpus == kube.get_cluster_queue_quota(QUEUE)


def test_a_queue_lending_into_the_training_cohort_puts_the_headroom_at_risk(kube, controller, prometheus_server,
                                                                              tmp_path, capsys):
    """Kueue lets training borrow what another queue of its cohort does not use, beside the slack headroom lends."""
    from cli.run import _print_state

    r = reconciler(controller, prometheus_server.url, tmp_path)
    assert r.reconcile(MONDAY_7AM).headroom_at_risk.reason != "CohortLends"  # the inference queue lends nothing
    lender = kueue.path("clusterqueues", "lender-run")
    kube.apply(lender, kueue.cluster_queue("lender-run", gpus=16, cohort=COHORT))
    try:
        controller.sync()
        state = r.reconcile(MONDAY_7AM + pd.Timedelta(minutes=5))
        _, conditions = rp_status(kube)
        assert (conditions["HeadroomAtRisk"]["status"], conditions["HeadroomAtRisk"]["reason"]) == ("True",
                                                                                                  "CohortLends")
        message = kube.plan_summary(NS).read()["headroomAtRiskMessage"]
        assert f"ClusterQueue lender-run lends up to 16 GPUs into cohort {COHORT}" in message
        assert message == state.headroom_at_risk.message and "lendingLimit to 0" in message
        _print_state(MONDAY_7AM, state)  # what `headroom run --once` prints
        assert f"headroom at risk (CohortLends): {message}" in capsys.readouterr().out
    finally:
        kube.delete(lender)


def test_a_queue_letting_kueue_reclaim_in_the_training_cohort_is_said_once(kube, controller, prometheus_server,
                                                                           tmp_path, caplog):
    """headroom lowers a training queue's nominalQuota under its running jobs, which Kueue then counts as borrowing:
    another queue of the cohort with reclaimWithinCohort other than Never makes Kueue preempt them at every quota cut,
    uncounted by headroom. Once nothing said so; now HeadroomAtRisk's reason (the headroom itself is covered), one
    Warning Event on the policy and one log line name the queue, the field and the fix."""
    import yaml
    from prometheus_client import generate_latest

    from controller.metrics import registry_for
    from controller.state import StateHolder

    example = yaml.safe_load_all(open("deploy/examples/kueue-clusterqueues.yaml"))
    research = next(d for d in example if d and d["metadata"]["name"] == "training-research")
    reclaiming = kueue.cluster_queue("reclaiming-run", gpus=8, cohort=COHORT, lending_limit=0)  # it lends nothing
    reclaiming["spec"]["preemption"] = {**research["spec"]["preemption"], "reclaimWithinCohort": "Any"}
    r = reconciler(controller, prometheus_server.url, tmp_path)
    assert r.reconcile(MONDAY_7AM).headroom_at_risk.reason == "HeadroomCovered"
    path = kueue.path("clusterqueues", "reclaiming-run")
    earlier = events(kube, "ReservationPolicy", "chat", NS).count("CohortReclaims")  # (any earlier test's)
    kube.apply(path, reclaiming)
    try:
        controller.sync()
        with caplog.at_level(logging.WARNING, logger="controller.reconcile"):
            states = [r.reconcile(MONDAY_7AM + pd.Timedelta(minutes=m)) for m in (5, 10)]
        risk = states[-1].headroom_at_risk
        said = ("ClusterQueue reclaiming-run has spec.preemption.reclaimWithinCohort: Any (set its reclaimWithinCohort "
                f"to Never, and no borrowWithinCohort): Kueue preempts the Workloads of ClusterQueue {QUEUE} whenever "
                "headroom lowers its nominalQuota under what it runs, in Kueue's order and counted nowhere in "
                f"headroom; both are of cohort {COHORT}")
        assert (risk.status, risk.reason) == ("False", "CohortReclaims") and said in risk.message
        _, conditions = rp_status(kube)
        assert (conditions["HeadroomAtRisk"]["status"], conditions["HeadroomAtRisk"]["reason"]) == (
            "False", "CohortReclaims")
        assert kube.plan_summary(NS).read()["headroomAtRiskMessage"] == risk.message
        assert events(kube, "ReservationPolicy", "chat", NS).count("CohortReclaims") == earlier + 1  # 2 reconciles
        assert sum(said in m for m in caplog.messages) == 1, caplog.messages  # logged once, not every reconcile
        metrics = generate_latest(registry_for(StateHolder(states[-1]))).decode()
        assert 'headroom_headroom_at_risk{reason="CohortReclaims"} 0.0' in metrics
        # the plan itself is not changed by it: headroom cannot stop Kueue
        assert states[-1].slack_gpus == int(kube.plan_summary(NS).read()["slackGpus"])
        # a policy deleted and made again is told again: once the name told was enough, the new object got nothing
        kube.delete(f"{RP}/chat")
        uid = kube.create(RP, policy("chat"))["metadata"]["uid"]
        controller.sync()
        r.reconcile(MONDAY_7AM + pd.Timedelta(minutes=12))
        told = [e for e in chat_events(kube, "CohortReclaims") if e["involvedObject"].get("uid") == uid]
        assert len(told) == 1 and said in told[0]["message"], told
        # LowerPriority reclaims too (borrowWithinCohort is allowed beside it); Never, Kueue's default, does not
        reclaiming["spec"]["preemption"].update(reclaimWithinCohort="LowerPriority",
                                                borrowWithinCohort={"policy": "LowerPriority"})
        kube.apply(path, reclaiming)
        controller.sync()
        risk = r.reconcile(MONDAY_7AM + pd.Timedelta(minutes=15)).headroom_at_risk
        assert risk.reason == "CohortReclaims" and "reclaimWithinCohort: LowerPriority" in risk.message
        del reclaiming["spec"]["preemption"]["borrowWithinCohort"]
        reclaiming["spec"]["preemption"]["reclaimWithinCohort"] = "Never"
        kube.apply(path, reclaiming)
        controller.sync()
        assert r.reconcile(MONDAY_7AM + pd.Timedelta(minutes=20)).headroom_at_risk.reason == "HeadroomCovered"
    finally:
        kube.delete(path)


def test_a_strict_fifo_training_queue_is_noted_once(kube, controller, prometheus_server, tmp_path):
    """A training queue of queueingStrategy StrictFIFO admits otherwise than a what-if not told of it (it replays
    BestEffortFIFO unless simulate.world.strict_fifo_queues names the queue): a Normal Event on the policy, once."""
    path = kueue.path("clusterqueues", QUEUE)
    queue = kueue.cluster_queue(QUEUE, gpus=0, cohort=COHORT)
    queue["spec"]["queueingStrategy"] = "StrictFIFO"
    kube.apply(path, queue)
    try:
        controller.sync()
        r = reconciler(controller, prometheus_server.url, tmp_path)
        before = len(chat_events(kube, "KueueStrictFIFO"))
        for m in (0, 5):
            r.reconcile(MONDAY_7AM + pd.Timedelta(minutes=m))
        noted = chat_events(kube, "KueueStrictFIFO")
        assert len(noted) == before + 1  # once, not every reconcile
        assert all(e["type"] == "Normal" and f"ClusterQueue {QUEUE} has spec.queueingStrategy: StrictFIFO" in
                   e["message"] and f"simulate.world.strict_fifo_queues names {QUEUE}" in e["message"] for e in noted)
    finally:
        kube.delete(path)


def test_kueue_s_preemption_within_a_training_queue_is_noted_once_where_it_can_happen(kube, controller,
                                                                                     prometheus_server, tmp_path,
                                                                                     caplog):
    """withinClusterQueue LowerPriority lets Kueue stop a training Workload for a pending higher-priority one of its
    queue: those stops are in none of headroom's counters. Once nothing said so; now a Normal Event on the policy and
    a log line, once, while the queue holds Workloads of more than one priority (one priority: none outranks another,
    nothing said). LowerOrNewerEqualPriority stops equal priorities too (an older pending Workload, as one headroom
    requeued is): said whatever the priorities. The headroom itself is covered: HeadroomAtRisk does not change."""
    path = kueue.path("clusterqueues", QUEUE)
    queue = kueue.cluster_queue(QUEUE, gpus=0, cohort=COHORT)
    queue["spec"]["preemption"] = {"withinClusterQueue": "LowerPriority"}

    def noted() -> list[dict]:
        return chat_events(kube, "KueuePreemptsWithinQueue")


    kube.apply(path, queue)
    try:
        controller.sync()
        r = reconciler(controller, prometheus_server.url, tmp_path)
        admit(kube, "low-0", 2)
        before = len(noted())  # (an earlier test's too)
        with caplog.at_level(logging.INFO, logger="controller.reconcile"):
            assert r.reconcile(MONDAY_7AM).headroom_at_risk.reason == "HeadroomCovered"
            assert len(noted()) == before  # one priority
            kube.create(WL, kueue.workload(TRAIN_NS, "high-100", QUEUE, gpus_per_pod=2, priority_class="high",
                                           priority=100))  # pending: it may preempt low-0
            controller.sync()
            states = [r.reconcile(MONDAY_7AM + pd.Timedelta(minutes=m)) for m in (5, 10)]
        said = (f"ClusterQueue {QUEUE} has spec.preemption.withinClusterQueue: LowerPriority and holds Workloads of "
                "more than one priority: Kueue stops a running Workload of it for a pending one of higher priority")
        (note,) = [e for e in noted() if said in e["message"]]  # (listed in no order of time)
        assert len(noted()) == before + 1 and note["type"] == "Normal"
        assert "in none of headroom's preemption counters" in note["message"]
        assert sum(said in m for m in caplog.messages) == 1, caplog.messages  # logged once, not every reconcile
        assert states[-1].headroom_at_risk.reason == "HeadroomCovered"
        queue["spec"]["preemption"] = {"withinClusterQueue": "LowerOrNewerEqualPriority"}
        kube.apply(path, queue)
        kube.delete(f"{WL}/high-100")  # one priority left: equal priorities are enough under this setting
        controller.sync()
        r.reconcile(MONDAY_7AM + pd.Timedelta(minutes=15))
        assert len(noted()) == before + 2 and any(
            f"ClusterQueue {QUEUE} has spec.preemption.withinClusterQueue: LowerOrNewerEqualPriority: Kueue stops"
            in e["message"] for e in noted())
        # the note reads no Workloads of its own: the reconcile's read after its writes serves it (once one more
        # pass over every Workload of the cluster, each reconcile, wherever a training queue preempts within)
        reads = []
        listed = controller.workloads
        controller.workloads = lambda: reads.append(1) or listed()  # type: ignore[method-assign]
        try:
            r.reconcile(MONDAY_7AM + pd.Timedelta(minutes=20))
            noting = len(reads)
            kube.apply(path, kueue.cluster_queue(QUEUE, gpus=0, cohort=COHORT))  # withinClusterQueue unset: Never
            controller.sync()
            r.reconcile(MONDAY_7AM + pd.Timedelta(minutes=25))
            assert noting == len(reads) - noting, reads
        finally:
            del controller.workloads
    finally:
        kube.apply(path, kueue.cluster_queue(QUEUE, gpus=0, cohort=COHORT))  # as the fixture makes it


class CohortRisk:
    """Kueue Cohorts applied around the training queue's cohort, then one reconcile: the HeadroomAtRisk it says."""

    def __init__(self, kube, controller, prometheus_url, tmp_path):
        self.kube, self.controller = kube, controller
        self.r = reconciler(controller, prometheus_url, tmp_path)
        self.now = MONDAY_7AM

    def after(self, *cohorts: dict):
        held = {c["metadata"]["name"] for c in self.kube.get(COHORTS)["items"]}
        for c in cohorts:  # made again whole: a field left out is gone
            if c["metadata"]["name"] in held:
                self.kube.delete(f"{COHORTS}/{c['metadata']['name']}")
            self.kube.create(COHORTS, c)
        self.controller.sync()
        self.now += pd.Timedelta(minutes=5)
        risk = self.r.reconcile(self.now).headroom_at_risk
        _, conditions = rp_status(self.kube)
        assert (conditions["HeadroomAtRisk"]["status"], conditions["HeadroomAtRisk"]["reason"]) == (
            risk.status, risk.reason)  # the policy's status says it too
        assert self.kube.plan_summary(NS).read()["headroomAtRiskMessage"] == risk.message
        return risk


def test_a_parent_cohort_with_quota_lends_into_the_training_cohort(kube, controller, prometheus_server, tmp_path):
    """A Kueue Cohort's own nominalQuota is a pool for its whole subtree: the training cohort's parent's quota is
    borrowed by training beside the slack, whatever the lendingLimits (they cap what a subtree lends up)."""
    check = CohortRisk(kube, controller, prometheus_server.url, tmp_path)
    assert check.after().reason == "HeadroomCovered"  # no Cohort object at all: as before Cohorts were read
    risk = check.after(kueue.cohort(COHORT, parent="org-run"), kueue.cohort("org-run", gpus=16))
    assert (risk.status, risk.reason) == ("True", "CohortLends")
    assert (f"Cohort org-run's own nominalQuota lends up to 16 GPUs into cohort {COHORT} through cohorts org-run -> "
            f"{COHORT} (remove Cohort {COHORT}'s parentName or set its GPU borrowingLimit to 0)") in risk.message
    # a lendingLimit of 0 on the training cohort does not keep its parent's quota out of it
    assert check.after(kueue.cohort(COHORT, parent="org-run", gpus=0, lending_limit=0)).reason == "CohortLends"
    assert check.after(kueue.cohort(COHORT, parent="org-run", gpus=0, borrowing_limit=0)).reason == "HeadroomCovered"
    assert check.after(kueue.cohort(COHORT)).reason == "HeadroomCovered"  # no parent
    # its own nominalQuota is its queues' to share
    risk = check.after(kueue.cohort(COHORT, gpus=8))
    assert risk.reason == "CohortLends" and (
        f"Cohort {COHORT}'s own nominalQuota lends up to 8 GPUs into cohort {COHORT} (remove its GPU nominalQuota"
        in risk.message)


def test_a_sibling_subtree_lends_through_the_parent_until_its_cohort_lends_nothing(kube, controller,
                                                                                  prometheus_server, tmp_path):
    check = CohortRisk(kube, controller, prometheus_server.url, tmp_path)
    sibling = kueue.path("clusterqueues", "side-run")
    kube.apply(sibling, kueue.cluster_queue("side-run", gpus=8, cohort="side-cohort-run"))
    try:
        assert check.after().reason == "HeadroomCovered"  # a queue of another cohort, no tree: nothing reaches
        risk = check.after(kueue.cohort(COHORT, parent="org-run"), kueue.cohort("side-cohort-run", parent="org-run"))
        assert risk.reason == "CohortLends"
        assert (f"ClusterQueue side-run lends up to 8 GPUs into cohort {COHORT} through cohorts side-cohort-run -> "
                f"org-run (no Cohort object) -> {COHORT} (set Cohort side-cohort-run's GPU lendingLimit to 0 or "
                "remove Cohort side-cohort-run's parentName") in risk.message
        risk = check.after(kueue.cohort("side-cohort-run", parent="org-run", gpus=0, lending_limit=0))
        assert (risk.status, risk.reason) == ("False", "HeadroomCovered")
    finally:
        kube.delete(sibling)


def test_a_queue_reclaiming_across_the_tree_of_cohorts_is_said_once_and_one_of_another_tree_is_not(
        kube, controller, prometheus_server, tmp_path, caplog):
    """Kueue looks for a reclaiming queue's preemption candidates across its whole tree of Cohorts, not only in its
    own cohort: a queue with reclaimWithinCohort Any in the parent's other child cohort preempts the training queue's
    jobs once headroom's quota cuts leave the training cohort holding more than its quota. Once only the training
    queue's own cohort was checked and that went unsaid; now the queue is named with its cohort and the way, in
    HeadroomAtRisk, one Event and one log line. A queue of another tree, or of a tree whose chain loops (Kueue
    disables it), preempts nothing of headroom's training."""
    check = CohortRisk(kube, controller, prometheus_server.url, tmp_path)
    path = kueue.path("clusterqueues", "side-reclaim-run")
    reclaiming = kueue.cluster_queue("side-reclaim-run", gpus=8, cohort="side-cohort-run", lending_limit=0)
    reclaiming["spec"]["preemption"] = {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}
    kube.apply(path, reclaiming)
    tree = (kueue.cohort(COHORT, parent="org-run"), kueue.cohort("side-cohort-run", parent="org-run"))
    try:
        assert check.after().reason == "HeadroomCovered"  # no Cohort object: two cohorts, each a tree of its own
        before = events(kube, "ReservationPolicy", "chat", NS).count("CohortReclaims")  # (an earlier test's too)
        with caplog.at_level(logging.WARNING, logger="controller.reconcile"):
            risk = check.after(*tree)  # org-run has no Cohort object: Kueue's default Cohort, the root of both
            assert check.after(*tree) == risk
        said = ("ClusterQueue side-reclaim-run has spec.preemption.reclaimWithinCohort: Any (set its "
                "reclaimWithinCohort to Never, and no borrowWithinCohort): Kueue preempts the Workloads of "
                f"ClusterQueue {QUEUE} whenever headroom lowers its nominalQuota under what it runs, in Kueue's order "
                f"and counted nowhere in headroom; {QUEUE} is of cohort {COHORT}, reached through cohorts "
                f"side-cohort-run -> org-run -> {COHORT} of their tree, once the cut also leaves cohort {COHORT} above "
                "its quota")
        assert (risk.status, risk.reason) == ("False", "CohortReclaims") and said in risk.message, risk.message
        assert events(kube, "ReservationPolicy", "chat", NS).count("CohortReclaims") == before + 1  # one Event
        assert sum(said in m for m in caplog.messages) == 1, caplog.messages
        # the same queue in another tree; in a tree whose parentName chain loops
        assert check.after(kueue.cohort("side-cohort-run", parent="apart-run")).reason == "HeadroomCovered"
        risk = check.after(kueue.cohort("side-cohort-run", parent="loop-run"),
                           kueue.cohort("loop-run", parent="side-cohort-run"))
        assert (risk.status, risk.reason) == ("False", "HeadroomCovered")
    finally:
        kube.delete(path)


def test_a_cohort_reclaims_event_of_the_longest_names_names_the_queue_and_the_fix(kube, controller, prometheus_server,
                                                                                tmp_path):
    """The API server keeps an Event's message as headroom sends it, which it cuts at 1,024 characters: with a
    reclaiming queue and cohorts of Kubernetes' longest names (253), the finding, said with the way first, lost its
    fix (set reclaimWithinCohort to Never) to that cut. Now the Event starts with the queues and the fix and marks the
    cut; the policy's HeadroomAtRisk in the plan summary keeps the whole way."""
    check = CohortRisk(kube, controller, prometheus_server.url, tmp_path)
    side, org, name = "side-run".ljust(253, "s"), "org-run".ljust(253, "o"), "reclaim-run".ljust(253, "r")
    path = kueue.path("clusterqueues", name)
    reclaiming = kueue.cluster_queue(name, gpus=8, cohort=side, lending_limit=0)
    reclaiming["spec"]["preemption"] = {"reclaimWithinCohort": "LowerPriority"}
    kube.apply(path, reclaiming)
    try:
        risk = check.after(kueue.cohort(COHORT, parent=org), kueue.cohort(side, parent=org))
        (message,) = [e["message"] for e in chat_events(kube, "CohortReclaims") if name in e["message"]]
        assert message.startswith(
            f"ClusterQueue {name} has spec.preemption.reclaimWithinCohort: LowerPriority (set its reclaimWithinCohort "
            f"to Never, and no borrowWithinCohort): Kueue preempts the Workloads of ClusterQueue {QUEUE} whenever ")
        assert len(message) == 1024 and message.endswith("..."), message
        assert risk.reason == "CohortReclaims" and risk.message.endswith(
            f"{side} -> {org} -> {COHORT} of their tree, once the cut also leaves cohort {COHORT} above its quota")
    finally:
        kube.delete(path)
        for c in (side, org):
            kube.delete(f"{COHORTS}/{c}")
        check.after(kueue.cohort(COHORT))


def test_a_parent_cohort_loop_is_named_and_the_controller_goes_on(kube, controller, prometheus_server, tmp_path):
    """Kueue disables every ClusterQueue of a tree whose parentName chain loops: headroom cannot tell what the tree
    would lend, says so, and keeps reconciling."""
    check = CohortRisk(kube, controller, prometheus_server.url, tmp_path)
    risk = check.after(kueue.cohort(COHORT, parent="loop-run"), kueue.cohort("loop-run", parent=COHORT, gpus=8))
    assert (risk.status, risk.reason) == ("True", "CohortCycle")
    assert f"cohort {COHORT}'s parentName chain loops: {COHORT} -> loop-run -> {COHORT}" in risk.message
    assert check.after(kueue.cohort("loop-run", gpus=8)).reason == "CohortLends"  # the loop broken: it lends


def test_a_newcomer_on_a_taken_target_never_takes_it_from_the_working_policy(kube, controller, prometheus_server,
                                                                            tmp_path):
    """A broken copy applied later, whose name sorts first, once took the Deployment and left the working policy
    refused: the policy created first keeps its target."""
    r = reconciler(controller, prometheus_server.url, tmp_path)
    before = r.reconcile(MONDAY_7AM).policies[f"{NS}/chat"]
    time.sleep(1.1)  # creation times have whole seconds
    kube.create(RP, policy("a-copy", query="sum(no_such_metric_typo)", target={"kind": "Deployment", "name": "chat"}))
    controller.sync()
    state = r.reconcile(MONDAY_7AM + pd.Timedelta(minutes=5))
    chat, copy = state.policies[f"{NS}/chat"], state.policies[f"{NS}/a-copy"]
    assert before.valid and chat.valid and chat.model == before.model and replicas(kube) == chat.reserved_gpus
    assert not copy.valid and f"is already the target of ReservationPolicy {NS}/chat" in copy.error


def test_a_conflicting_writer_is_overridden_and_concurrent_writes_retry(kube, controller, prometheus_server,
                                                                        tmp_path):
    r = reconciler(controller, prometheus_server.url, tmp_path)
    want = r.reconcile(MONDAY_7AM).policies[f"{NS}/chat"].reserved_gpus
    kube.scale_deployment(NS, "chat", 1)  # someone scales inference in by hand
    controller.sync()  # the reconcile must read 1: a watch cache a moment behind still holds 23, and nothing is written
    stop = threading.Event()

    def hammer():  # a writer bumping the Deployment's annotations: every write changes resourceVersion
        i = 0
        while not stop.wait(0.02):  # a busy writer, not a flood that no read-modify-write could ever beat
            i += 1
            kube._request("PATCH", f"/apis/apps/v1/namespaces/{NS}/deployments/chat",
                           {"metadata": {"annotations": {"other-writer": str(i)}}},
                           content_type="application/merge-patch+json")

    thread = threading.Thread(target=hammer, daemon=True)
    thread.start()
    try:
        state = r.reconcile(MONDAY_7AM + pd.Timedelta(minutes=5))
    finally:
        stop.set()
        thread.join(10)
    assert replicas(kube) == state.policies[f"{NS}/chat"].reserved_gpus >= want - 2
    assert state.reconcile_errors_total.get("actuate", 0) == 0


def test_api_server_restart_mid_run_is_survived(kube_server, kube, controller, prometheus_server, tmp_path):
    r = reconciler(controller, prometheus_server.url, tmp_path)
    r.reconcile(MONDAY_7AM)
    restart = threading.Thread(target=kube_server.apiserver.restart, kwargs={"down_seconds": 2})
    restart.start()
    r.reconcile(MONDAY_7AM + pd.Timedelta(minutes=5))  # retries with back-off, or counts the error
    restart.join(120)
    # the controller's watch lost its connection: it lists again and follows what changes after the restart
    admit(kube, "after-restart", 4)
    deadline = time.monotonic() + 30
    while "after-restart" not in training(controller):
        assert time.monotonic() < deadline, "the watch cache never resynced after the API server restart"
        time.sleep(0.1)
    state = r.reconcile(MONDAY_7AM + pd.Timedelta(minutes=10))
    assert state.policies[f"{NS}/chat"].valid
    assert state.training_gpus == 4
    status, _ = rp_status(kube)
    assert status["reservedGpus"] == replicas(kube) == state.policies[f"{NS}/chat"].reserved_gpus


def test_two_replicas_never_act_at_once(kube, prometheus_server, tmp_path):
    loops = []
    for identity in ("headroom-a", "headroom-b"):
        r = reconciler(kube, prometheus_server.url, tmp_path / identity)
        elector = kube.leader_elector(NS, "headroom-run-test", identity, lease_seconds=30)
        loops.append(Loop(r, elector, interval=1, lease_seconds=30, clock=lambda: MONDAY_7AM))
    a, b = loops
    assert not a.ready() and not b.ready()  # not before their first election round
    assert a.elector.try_acquire_or_renew()  # replica a leads (it is mid-flight)
    b.run(once=True)
    assert b.reconciler.holder.get().reconcile_total == 0  # the standby does not act...
    assert b.reconciler.holder.get().leader is False and b.ready()  # ...and is ready as a standby
    a.run(once=True)
    assert a.reconciler.holder.get().reconcile_total == 1
    lease = kube.get(f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/headroom-run-test")
    assert lease["spec"].get("holderIdentity") is None  # the leader released it on its way out
    b.run(once=True)  # ...so the standby takes over at once
    assert b.reconciler.holder.get().reconcile_total == 1


@pytest.mark.parametrize("reachable", [True, False])
def test_run_once_on_kubernetes_prints_its_decisions_and_exits_1_when_a_read_failed(kube_server, kube,
                                                                                  prometheus_server, tmp_path,
                                                                                  capsys, reachable):
    """`headroom run --once` printed nothing and exited 0 with Prometheus down (README: 1 for a server down)."""
    import yaml

    from cli.main import main

    config = tmp_path / "headroom.yaml"
    config.write_text(yaml.safe_dump({"run": {
        "cluster": "kubernetes", "namespace": NS, "capacity_gpus": 64, "lease": {"namespace": NS, "name": "once"},
        "prometheus": {"url": prometheus_server.url if reachable else "http://127.0.0.1:1", "retries": 0},
        "forecast_log_dir": str(tmp_path / "log"), "retrain_every_seconds": 0,
        "tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}"}}))
    kubeconfig = kube_server.apiserver.kubeconfig(tmp_path / "kubeconfig")
    status = main(["run", "--once", "--config", str(config), "--kubeconfig", str(kubeconfig),
                   "--metrics-port", str(free_port())])  # not the default port another run on the machine may hold
    out, err = capsys.readouterr()
    assert f"{NS}/chat: demand" in out and "reserved" in out  # one line per policy, as the embedded run prints
    # the wall clock is 2026 and Prometheus holds 1995: no recent demand, the stated fallback, not a failure
    assert (status, "the reconcile failed in part (demand: 1)" in err) == ((0, False) if reachable else (1, True))


def test_run_takes_the_stored_forecasts_of_policies_deleted_while_no_controller_ran(kube_server, kube,
                                                                                      prometheus_server, tmp_path):
    """`headroom run` started after a policy of its namespace was deleted: its stored forecasts (and their ConfigMap)
    stayed for good, no reconcile having listed the policies without it. The leader prunes them as it starts; those
    of a policy outside run.namespace stay (another controller's: its Lease beside this one)."""
    import yaml

    from cli.main import main
    from cli.run import shared_forecast_store

    store = shared_forecast_store(kube, NS, 24, 7200.0)
    issued = pd.Timestamp("1995-07-17T06:05Z")
    frame = pd.DataFrame({0.5: [1.0, 2.0]}, index=pd.date_range(issued.floor("h"), periods=2, freq="h"))
    gone, elsewhere = f"{NS}.gone", "elsewhere.chat"
    for series in (gone, elsewhere):
        kube.delete(f"/api/v1/namespaces/{NS}/configmaps/{store.name(series)}")
        store.record(series, issued, frame)
    config = tmp_path / "headroom.yaml"
    config.write_text(yaml.safe_dump({"run": {
        "cluster": "kubernetes", "namespace": NS, "capacity_gpus": 64, "lease": {"namespace": NS, "name": "sweep"},
        "prometheus": {"url": prometheus_server.url, "retries": 0}, "retrain_every_seconds": 0,
        "tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}"}}))
    kubeconfig = kube_server.apiserver.kubeconfig(tmp_path / "kubeconfig")
    try:
        assert main(["run", "--once", "--config", str(config), "--kubeconfig", str(kubeconfig),
                     "--metrics-port", str(free_port())]) == 0
        assert gone not in store.series() and store.load(gone) == {}
        assert list(store.load(elsewhere)) == [issued]
    finally:
        kube.delete(f"/api/v1/namespaces/{NS}/configmaps/{store.name(elsewhere)}")
        kube.delete(f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/sweep")


def test_run_on_a_metrics_port_already_taken_names_the_flag_and_takes_no_lease(kube_server, kube, tmp_path,
                                                                              capsys):
    """A second `headroom run` on a host (or another server on 9108) said only "error: [Errno 98] Address already in
    use", naming neither the flag nor the port."""
    import socket

    import yaml

    from cli.main import main

    config = tmp_path / "headroom.yaml"
    config.write_text(yaml.safe_dump({"run": {
        "cluster": "kubernetes", "namespace": NS, "lease": {"namespace": NS, "name": "port-taken"},
        "prometheus": {"url": "http://127.0.0.1:1", "retries": 0}, "retrain_every_seconds": 0}}))
    kubeconfig = kube_server.apiserver.kubeconfig(tmp_path / "kubeconfig")
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))  # where the controller serves by default (run.metrics_address)
        taken.listen()
        port = taken.getsockname()[1]
        status = main(["run", "--once", "--config", str(config), "--kubeconfig", str(kubeconfig),
                       "--metrics-port", str(port)])
    assert status == 1
    assert f"headroom: error: --metrics-port {port} (run.metrics_port): cannot serve /metrics on 0.0.0.0:{port}: " \
        "Address already in use" in capsys.readouterr().err
    with pytest.raises(NotFound):  # nothing reconciled: the Lease was never taken
        kube.get(f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/port-taken")


def start_headroom_run(kube_server, prometheus_url: str, tmp_path, lease: str, **prometheus):
    """`headroom run` as an SRE starts it (the real CLI process, a kubeconfig), once /readyz answers 200: the process
    and a GET of its metrics port ((status, body); (None, "") if it does not answer). `prometheus`: settings of
    run.prometheus besides its url and a 2-day lookback."""
    import subprocess
    import sys
    import urllib.request

    import yaml

    from tests.servers import wait_until

    port = free_port()
    config = tmp_path / "headroom.yaml"
    config.write_text(yaml.safe_dump({"run": {
        "cluster": "kubernetes", "namespace": NS, "capacity_gpus": 64, "interval_seconds": 2,
        "prometheus": {"url": prometheus_url, "lookback": "2d", **prometheus},
        "lease": {"namespace": NS, "name": lease},
        "forecast_log_dir": str(tmp_path / "log"), "retrain_every_seconds": 0,
        "tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}"}}))
    kubeconfig = kube_server.apiserver.kubeconfig(tmp_path / "kubeconfig")
    proc = subprocess.Popen([sys.executable, "-m", "cli.main", "run", "--config", str(config),
                             "--kubeconfig", str(kubeconfig), "--metrics-port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def get(path):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as resp:
                return resp.status, resp.read().decode()
        except OSError:
            return None, ""

    try:
        wait_until(lambda: get("/readyz")[0] == 200 or proc.poll() is not None, timeout=90, what="ready")
    except Exception:
        proc.kill()
        raise AssertionError(f"headroom run never became ready:\n{proc.stdout.read()}") from None
    return proc, get


def test_headroom_run_command_serves_probes_and_metrics_and_stops_cleanly(kube_server, kube, prometheus_server,
                                                                            tmp_path):
    """`headroom run` as an SRE starts it: the real CLI process, kubeconfig, /readyz, /metrics, SIGTERM.
    Its wall clock is 2026 and Prometheus holds 1995: no recent demand, so the safe fallback must show."""
    import signal

    from tests.servers import wait_until

    proc, get = start_headroom_run(kube_server, prometheus_server.url, tmp_path, "cli")
    try:
        assert proc.poll() is None, f"headroom run exited with {proc.returncode}:\n{proc.stdout.read()}"
        assert get("/healthz")[0] == 200
        metrics = get("/metrics")[1]
        assert f'headroom_policy_valid{{policy="{NS}/chat"}} 1.0' in metrics and "headroom_leader 1.0" in metrics
        # headroom run writes statuses beside its reconciles: the first lands a moment after /readyz
        wait_until(lambda: "FallbackActive" in rp_status(kube)[1], timeout=30, what="the policy's first status")
        status, conditions = rp_status(kube)
        assert conditions["FallbackActive"]["status"] == "True"  # no demand data at all: minGpus (the planner's
        assert conditions["ForecastDegraded"]["status"] == "True"  # rule: a policy's own fault takes no cluster)
        assert status["reservedGpus"] == replicas(kube) == 2
        summary = kube.get(f"/api/v1/namespaces/{NS}/configmaps/headroom-plan")["data"]  # beside the Lease
        assert int(summary["slackGpus"]) == 64 - status["reservedGpus"]
        assert summary["headroomAtRisk"] in ("True", "False")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        output = proc.stdout.read()
    assert "Traceback" not in output, output
    lease = kube.get(f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/cli")
    assert lease["spec"].get("holderIdentity") is None, "a stopped controller hands its Lease over at once"


@pytest.mark.parametrize("outage", ["down", "halted"])
def test_sigterm_during_an_api_server_outage_stops_cleanly_well_inside_the_grace_period(kube_server, kube,
                                                                                         prometheus_server, tmp_path,
                                                                                         outage):
    """SIGTERM while the API server is down: `headroom run` retried the Lease's release for 20-26 s and exited 1
    with a ClusterError. The stop asked for happened; the Lease it could not hand over expires by itself (the
    standby takes it after lease.duration_seconds). Once stopping it retries no request, tries the release once,
    briefly (RELEASE_TIMEOUT_SECONDS per request), says the Lease is left to expire, and exits 0 within seconds: the
    API server down (connections refused) or halted (SIGSTOP: the packets just stop)."""
    import signal

    from adapters.kube import RELEASE_TIMEOUT_SECONDS

    proc, _ = start_headroom_run(kube_server, prometheus_server.url, tmp_path, "cli-outage")
    api = kube_server.apiserver
    try:
        api.stop() if outage == "down" else api.process.signal_group(signal.SIGSTOP)
        try:
            time.sleep(3)  # the controller meets the outage mid-round
            began = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            status = proc.wait(timeout=60)  # the kubelet's grace period
            took = time.monotonic() - began
        finally:
            api.start() if outage == "down" else api.process.signal_group(signal.SIGCONT)
    finally:
        if proc.poll() is None:
            proc.kill()
        output = proc.stdout.read()
    assert "Traceback" not in output, output
    assert status == 0, output
    # a halted host (SIGSTOP: requests time out rather than fail) adds the request in flight's own timeout
    in_flight = KubeCluster.request_timeout if outage == "halted" else 0
    assert took < in_flight + 2 * RELEASE_TIMEOUT_SECONDS + 5, (took, output)
    assert "expires by itself" in output, output


def test_the_trace_s_own_outage_is_stale_data_then_recovers_and_queries_are_chunked(kube, controller, prometheus_server,
                                                                                    tmp_path, monkeypatch):
    """The NASA trace has a real 3.5-day gap (1995-07-28 17:00 to 08-01 04:00). At a 1-minute step the
    28-day lookback is 40,000 points: the controller's query must be split under the 11,000-point limit."""
    import adapters.prometheus as promsrc

    chunks = []
    original = promsrc.chunk_ranges
    monkeypatch.setattr(promsrc, "chunk_ranges", lambda *a, **k: chunks.append(original(*a, **k)) or chunks[-1])
    r = reconciler(controller, prometheus_server.url, tmp_path, step="1m")
    before = r.reconcile(pd.Timestamp("1995-07-28T16:00:00Z")).policies[f"{NS}/chat"]
    assert not before.degraded and not before.fallback and len(chunks[0]) >= 4
    inside = r.reconcile(pd.Timestamp("1995-07-29T12:00:00Z")).policies[f"{NS}/chat"]
    _, conditions = rp_status(kube)
    assert inside.degraded and conditions["ForecastDegraded"]["reason"] == "StaleData"
    assert inside.fallback and inside.reserved_gpus >= before.reserved_gpus  # no data: never lower
    after = r.reconcile(pd.Timestamp("1995-08-01T10:00:00Z")).policies[f"{NS}/chat"]
    _, conditions = rp_status(kube)
    assert not after.degraded and not after.fallback and after.model.startswith("auto")
    assert conditions["ForecastDegraded"]["status"] == "False" and conditions["FallbackActive"]["status"] == "False"


# ---------------------------------------------------------------------------- accuracy history across a failover
def test_reconciles_at_wall_clock_times_forecast_from_whole_data(kube, controller, prometheus_server, tmp_path):
    """`headroom run` reconciles at wall-clock times (fractions of a second, any second of the minute). Reads laid
    on the unrounded clock once put an empty twin beside every sample ('52% missing': every policy degraded) and
    interleaved successive reads 0.06 s apart (the hourly refit failed): the controller never forecast."""
    r = reconciler(controller, prometheus_server.url, tmp_path, step="1m")
    start = pd.Timestamp("1995-07-27T16:00:00Z")
    for offset in ("7.372s", "20.291s", "47.061s", "1min 3.9s"):
        ps = r.reconcile(start + pd.Timedelta(offset)).policies[f"{NS}/chat"]
        assert not ps.degraded and not ps.fallback and ps.model.startswith("auto"), (offset, ps.model)
    assert not any(r.reconcile(start + pd.Timedelta("1h 0.5s")).reconcile_errors_total.values())
    _, conditions = rp_status(kube)
    assert conditions["ForecastDegraded"]["status"] == "False"


def test_forecast_store_is_one_labelled_bounded_configmap_per_series(kube_server, kube):
    """The shared forecast log: a ConfigMap per series beside the Lease, holding only what realized error and a new
    leader read (the scale, generation, model and basis recorded with each frame) and no more than its window (and
    its byte budget)."""
    import numpy as np

    from adapters.kube import CONFIGMAP_LIMIT, FORECAST_LOG_LABEL
    from core.cluster import FORECAST_BASIS, FORECAST_GENERATION, FORECAST_MODEL, FORECAST_SCALE

    store = kube.forecast_store(NS, keep_seconds=50 * 3600, rows=24)
    series = f"{NS}.store-test"
    kube.delete(f"/api/v1/namespaces/{NS}/configmaps/{store.name(series)}")
    rng = np.random.default_rng(7)
    quantiles = [0.05, 0.1, 0.5, 0.9, 0.95, 0.99]
    start = MONDAY_7AM - pd.Timedelta(days=3)
    frames = {}
    for hour in range(72):  # three days of hourly forecasts, 48 h ahead, six quantiles
        issued = start + pd.Timedelta(hours=hour)
        index = pd.date_range(issued, periods=48, freq="h")
        frames[issued] = pd.DataFrame(np.sort(rng.gamma(3.0, 40.0, (48, 6)), axis=1), index=index,
                                      columns=quantiles)
        if hour % 3:  # its fitting window's scale (realized error divides by it), NaN where it has none
            frames[issued].attrs[FORECAST_SCALE] = 10.0 + hour if hour % 3 == 1 else float("nan")
        if hour % 2:  # the policy generation and the model it was made for (a new leader plans on it)
            frames[issued].attrs.update({FORECAST_GENERATION: hour, FORECAST_MODEL: f"auto: snaive{hour}\n# x: 1",
                                         FORECAST_BASIS: f"{hour:016x}"})
        store.record(series, issued, frames[issued])
    cm = kube.get(f"/api/v1/namespaces/{NS}/configmaps/{store.name(series)}")
    assert cm["metadata"]["labels"][FORECAST_LOG_LABEL] == "true"
    assert cm["metadata"]["annotations"]["headroom.dev/series"] == series
    last = start + pd.Timedelta(hours=71)
    held = store.load(series)
    assert min(held) == last - pd.Timedelta(hours=50) and max(held) == last and len(held) == 51  # the window only
    assert len(json_bytes(cm["data"])) < CONFIGMAP_LIMIT // 10
    for issued, frame in held.items():  # the newest whole, the first 24 periods of the others (what realized error
        # reads); the 80% interval and the median, exactly
        expected = (frames[issued] if issued == last else frames[issued].iloc[:24])[[0.1, 0.5, 0.9]]
        pd.testing.assert_frame_equal(frame, expected, check_names=False, check_freq=False)
        np.testing.assert_equal(frame.attrs, frames[issued].attrs)  # the scale, generation, model and basis, if any
    since = last - pd.Timedelta(hours=5)
    assert sorted(store.load(series, since=since)) == [since + pd.Timedelta(hours=h) for h in range(6)]
    assert store.prune(series, before=since) == 45 and len(store.load(series)) == 6
    assert store.prune(series, before=since) == 0
    assert store.series()[series] == store.name(series)
    # A byte budget smaller than the window: the oldest forecasts go first, the newest always stays.
    tight = kube.forecast_store(NS, keep_seconds=50 * 3600, rows=24, max_bytes=2 * len(json_bytes(
        {"0": store._encode(frames[last])})))
    tight.record(series, last + pd.Timedelta(hours=1), frames[last])
    kept = tight.load(series)
    assert 2 <= len(kept) <= 4 and max(kept) == last + pd.Timedelta(hours=1)
    assert store.load(f"{NS}.no-such-series") == {} and store.prune(f"{NS}.no-such-series", last) == 0
    # Those a new leader may plan on (issued within whole_seconds of the newest) whole, the others cut
    whole = kube.forecast_store(NS, keep_seconds=50 * 3600, rows=24, whole_seconds=2 * 3600)
    for issued in sorted(frames)[-5:]:
        whole.record(f"{series}-whole", issued, frames[issued])
    assert [len(f) for f in whole.load(f"{series}-whole").values()] == [24, 24, 48, 48, 48]
    kube.delete(f"/api/v1/namespaces/{NS}/configmaps/{whole.name(f'{series}-whole')}")
    # keys edited by hand that do not parse are left out, each alone: the hour's refit and realized error, which read
    # them, failed on one before ('internal'), and the hour's fresh forecast was lost
    path = f"/api/v1/namespaces/{NS}/configmaps/{store.name(series)}"
    good = store.load(series)
    edited = {str(int((last + pd.Timedelta(hours=h)).timestamp())): text
              for h, text in ((2, "{not json"), (3, '{"index": [1]}'), (4, '{"index": 1, "columns": [], "values": 2}'))}
    kube._update(path, lambda cm: {"data": edited})
    assert set(store.load(series)) == set(good)
    kube.delete(path)


def json_bytes(data: dict) -> str:
    import json

    return json.dumps(data)


def test_leader_killed_mid_day_the_new_leader_s_realized_error_continues(kube_server, kube, prometheus_server,
                                                                         mlflow_server):  # noqa: F811
    """Two replicas, one Lease, one MLflow: replica a leads from midnight and is killed (no release) after its noon
    reconcile; b takes the Lease once it has gone unrenewed and goes on. The forecasts a issued are in the shared
    ConfigMap, so b's first status already carries the 6-hour-ahead error of a forecast a made at 07:00, and MLflow's
    metric history has one point per hour across the failover."""
    from adapters.mlflow import Tracker
    from cli.run import shared_forecast_store
    from controller.forecasts import Models
    from tests.test_training import client

    lease_seconds, midnight = 2, MONDAY_7AM - pd.Timedelta(hours=7)
    uri = mlflow_server.uri
    series = f"{NS}.chat"
    replicas_ = {}
    for identity in ("headroom-a", "headroom-b"):
        cluster = KubeCluster.from_kubeconfig(str(kube_server.apiserver.kubeconfig()), request_timeout=5).watch()
        server = PrometheusServer(url=prometheus_server.url, step="5m", timeout_seconds=10, retries=0)
        cfg = RunConfig(cluster="kubernetes", prometheus=server, capacity_gpus=128, namespace=NS,
                        retrain_every_seconds=0)
        store = shared_forecast_store(cluster, NS, 24, cfg.keep_forecast_seconds)  # as `headroom run` keeps them
        r = Reconciler(cluster, PrometheusDemand(server), cfg, models=Models(uri), forecast_log=store,
                       tracker=Tracker(uri))
        replicas_[identity] = (cluster, r, cluster.leader_elector(NS, "failover", identity, lease_seconds))
    kube.delete(f"/api/v1/namespaces/{NS}/configmaps/{replicas_['headroom-a'][1].forecasts.forecast_log.name(series)}")
    kube.delete(f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/failover")

    def step(identity: str, now: pd.Timestamp):
        """One round of the Loop: elect, and reconcile if leading (Loop.run does the same, then releases)."""
        _, r, elector = replicas_[identity]
        return r.reconcile(now) if elector.try_acquire_or_renew() else None

    a, b = (replicas_[i][1] for i in ("headroom-a", "headroom-b"))
    try:
        for hour in range(13):  # 00:00 .. 12:00: a leads, b stands by
            now = midnight + pd.Timedelta(hours=hour)
            assert step("headroom-a", now) is not None and step("headroom-b", now) is None
        errors_a = a.holder.get().policies[f"{NS}/chat"].realized_error
        assert {1, 6} <= set(errors_a)
        takeover = midnight + pd.Timedelta(hours=13)
        # a is killed (it renews no more, its Lease is never released): the Lease is still fresh, b waits... (asked
        # before a's client is closed: that joins its watch threads, up to 5 s each, longer than the 2 s lease)
        assert step("headroom-b", takeover) is None
        replicas_["headroom-a"][0].close()
        time.sleep(lease_seconds + 0.5)
        state = step("headroom-b", takeover)  # ...until it has gone unrenewed for a full lease
        assert state is not None
        status, _ = rp_status(kube)
        # b issued one forecast itself; the 6 h error at 13:00 is of a forecast a issued at 07:00
        assert set(status["realizedError"]) >= {"1h", "6h"}, status.get("realizedError")
        assert status["realizedError"]["6h"] > 0
        for hour in range(14, 19):
            assert step("headroom-b", midnight + pd.Timedelta(hours=hour)) is not None
        status, _ = rp_status(kube)
        assert set(status["realizedError"]) >= {"1h", "6h"}
        held = b.forecasts.forecast_log.load(series)
        assert min(held) == midnight and max(held) == midnight + pd.Timedelta(hours=18) and len(held) == 19
        c = client(uri)
        experiment = c.get_experiment_by_name(f"headroom/{series}").experiment_id
        (accuracy,) = c.search_runs([experiment], "tags.`headroom.kind` = 'accuracy'")
        first_target = int(midnight.timestamp() // 3600)
        for h, first in ((1, first_target + 0), (6, first_target + 5)):
            steps = sorted(m.step for m in c.get_metric_history(accuracy.info.run_id, f"abs_error_{h}h"))
            # targets up to 17:00 (the last complete hour at 18:00), one point each, none missing across 12:00-13:00
            assert steps == list(range(first, first_target + 18)), (h, steps)
            # the share below the reserved quantiles too (target q0.9, headroom q0.99), at the same hours: the
            # shared store kept only q0.1/0.5/0.9, so below q0.99 was never scored on Kubernetes
            for below in ("below_q0.9", "below_q0.99"):
                assert sorted(m.step for m in c.get_metric_history(accuracy.info.run_id, f"{below}_{h}h")) == steps
    finally:
        for cluster, _, _ in replicas_.values():
            cluster.close()


# ---------------------------------------------------------------------------- faults an SRE meets (sweep-kube)
@pytest.mark.parametrize("annotations", [
    {"headroom.dev/last-checkpoint": "yesterday"},          # not RFC 3339
    {"headroom.dev/preemption-seconds": "nan"},             # float() takes these: not a duration
    {"headroom.dev/preemption-seconds": "-30", "headroom.dev/checkpoint-interval-seconds": "inf"}])
def test_a_tenant_s_malformed_workload_annotation_stops_no_policy(kube, controller, prometheus_server, tmp_path,
                                                                  annotations):
    """Any team can annotate its own Workloads. A last-checkpoint that was not a timestamp raised ValueError out of
    the Workload read: every reconcile failed ('internal') and no policy acted; 'nan' or a negative preemption time
    was taken as given (a job that stops in -30 s counted as reclaimable at once). A malformed annotation counts as
    not given, as the adapter's docstring says."""
    admit(kube, "tidy", 10)
    kube.create(WL, kueue.workload(TRAIN_NS, "odd", QUEUE, gpus_per_pod=10, annotations=annotations))
    kueue.admit(kube, TRAIN_NS, "odd", QUEUE)
    controller.sync()
    r = reconciler(controller, prometheus_server.url, tmp_path)
    state = r.reconcile(MONDAY_7AM)
    assert not any(state.reconcile_errors_total.values()), state.reconcile_errors_total
    assert state.policies[f"{NS}/chat"].valid and replicas(kube) == state.policies[f"{NS}/chat"].reserved_gpus
    assert state.training_gpus == 20
    odd = training(controller)["odd"]
    assert odd.last_checkpoint is None or odd.last_checkpoint.year > 1900
    assert odd.preemption_seconds is None and odd.checkpoint_interval_seconds is None


def test_run_once_that_cannot_take_the_lease_says_why_and_exits_1(kube_server, kube, prometheus_server, tmp_path,
                                                                   capsys):
    """run.lease.namespace misspelt (the same as a Role without `create` on leases): the Lease can be neither read
    nor created. `headroom run --once` printed 'another replica holds the lease ...: nothing reconciled' and exited
    0: a script saw success, and the SRE was told of a replica that does not exist."""
    import yaml

    from cli.main import main

    config = tmp_path / "headroom.yaml"
    config.write_text(yaml.safe_dump({"run": {
        "cluster": "kubernetes", "namespace": NS, "capacity_gpus": 64,
        "lease": {"namespace": "headroom-sytem", "name": "headroom"},
        "prometheus": {"url": prometheus_server.url, "retries": 0}, "retrain_every_seconds": 0,
        "tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}"}}))
    kubeconfig = kube_server.apiserver.kubeconfig(tmp_path / "kubeconfig")
    status = main(["run", "--once", "--config", str(config), "--kubeconfig", str(kubeconfig),
                   "--metrics-port", str(free_port())])
    out, err = capsys.readouterr()
    assert "another replica holds the lease" not in out
    assert status == 1 and "leader election" in err and "headroom-sytem" in err, (status, out, err)


def test_a_replica_that_cannot_reach_its_lease_is_not_a_ready_standby(kube, prometheus_server, tmp_path):
    """The Lease's namespace missing (or the Lease forbidden): each election round fails. The replica once reported
    itself a ready standby (/readyz 200) while no replica could ever lead; /readyz now fails with the reason, and
    is ready again once the Lease can be taken."""
    from controller.metrics import _probe

    r = reconciler(kube, prometheus_server.url, tmp_path)
    loop = Loop(r, kube.leader_elector("no-such-namespace", "headroom", "replica-a", lease_seconds=30), interval=1,
                lease_seconds=30, clock=lambda: MONDAY_7AM)
    loop.run(once=True)
    code, text = _probe(loop.ready, "not ready")
    assert code == 503 and "no-such-namespace" in text and "leader election" in text, text
    loop.elector = kube.leader_elector(NS, "headroom-ready", "replica-a", lease_seconds=30)
    loop.run(once=True)
    assert _probe(loop.ready, "not ready") == (200, "ok\n")


def test_a_leader_that_loses_the_lease_mid_reconcile_writes_nothing_after(kube, controller, private_prometheus,
                                                                          tmp_path):
    """Replica a takes the Lease and reconciles; Prometheus hangs (SIGSTOP), so a's reconcile waits on the demand
    read longer than the Lease lasts, and replica b takes over. a's reconcile once went on to scale, set quotas and
    write statuses after b led: two controllers acting at once. Past its Lease's expiry (by its own clock) a replica
    writes nothing, and says so."""
    import signal

    server = PrometheusServer(url=private_prometheus.url, step="5m", timeout_seconds=4, retries=0)
    cfg = RunConfig(cluster="kubernetes", prometheus=server, capacity_gpus=128, namespace=NS)
    r = Reconciler(controller, PrometheusDemand(server), cfg, forecast_log=ForecastLog(tmp_path / "log"),
                   summary=controller.plan_summary(NS))
    lease = "mid-reconcile"
    kube.delete(f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{lease}")
    a = Loop(r, controller.leader_elector(NS, lease, "replica-a", lease_seconds=2), interval=1, lease_seconds=2,
             clock=lambda: MONDAY_7AM)
    b = kube.leader_elector(NS, lease, "replica-b", lease_seconds=2)
    assert a.elector.try_acquire_or_renew() and not b.try_acquire_or_renew()
    taken = threading.Event()

    def take_over():
        deadline = time.monotonic() + 20
        while not b.try_acquire_or_renew() and time.monotonic() < deadline:
            time.sleep(0.2)
        taken.set()

    before = {"replicas": replicas(kube), "quota": kube.get_cluster_queue_quota(QUEUE),
              "status": kube.get_reservation_policy(NS, "chat").get("status")}
    private_prometheus.process.signal_group(signal.SIGSTOP)
    thread = threading.Thread(target=take_over, daemon=True)
    try:
        thread.start()
        a.run(once=True)  # renews, then hangs in the demand read while b takes over
    finally:
        private_prometheus.process.signal_group(signal.SIGCONT)
        thread.join(30)
    assert taken.is_set() and b.holder() == "replica-b"
    after = {"replicas": replicas(kube), "quota": kube.get_cluster_queue_quota(QUEUE),
             "status": kube.get_reservation_policy(NS, "chat").get("status")}
    assert after == before, "a replica past its Lease wrote to the cluster"
    state = r.holder.get()
    assert state.reconcile_errors_total.get("cluster", 0) >= 1  # said, not silent


def test_a_replica_that_let_its_lease_go_adds_nothing_to_the_shared_forecast_store(kube, controller, prometheus_server,
                                                                                  tmp_path, caplog):
    """The hour's refit runs beside the reconciles, on a thread of its own, long after the reconcile that queued it
    (a thousand series, one at a time). Replica a queued one, let its Lease go, and b took over; a's refit then
    recorded a's forecast in the store the replicas share, beside b's, where realized error counts it as if it had
    been in force (and pruned it). The store's writes are fenced by the Lease now, as every write is: a replica that
    no longer leads writes none, and says so."""
    lease = "refit-beside"
    r, store, series = refitting_beside(controller, kube, prometheus_server.url, lease)
    a = Loop(r, controller.leader_elector(NS, lease, "replica-a", lease_seconds=30), interval=1, lease_seconds=30,
             clock=lambda: MONDAY_7AM)
    b = kube.leader_elector(NS, lease, "replica-b", lease_seconds=30)
    with r.forecasts._fitter_lock:  # the refit held at its fit, as behind a thousand others, until b leads
        a.run(once=True)  # a leads, reconciles (its refit queued), and lets the Lease go
        assert b.try_acquire_or_renew()
    with caplog.at_level(logging.INFO, logger="controller.reconcile"):
        for job in list(r.forecasts._refits.values()):
            job.result(timeout=120)
    r.close()
    assert store.load(series) == {}, "a replica that no longer led recorded its forecast"
    assert any(f"{series}: the forecast store is not written" in m for m in caplog.messages), caplog.messages


def test_a_restart_keeps_the_reservation_while_its_first_refit_runs_beside(kube, controller, prometheus_server):
    """`headroom run` refits beside the reconciles: a replica that had just started (a rollout, a crash) planned each
    policy on the conservative fallback until its first refit was done, which here moved chat at the very moment the
    old process had planned (the same samples) from the forecast's 23 GPUs to the fallback's 28 (Event 'reserved
    23 -> 28 ... fallback reservation 28'), lent GPUs taken back to be lent again a minute later; where last week's
    peak is the lower, inference was cut ('reserved 31 -> 23'). The new process now plans on the forecast the one
    before it recorded in the shared store while its own refit runs: the same reservation and model, no Event."""
    from cli.run import shared_forecast_store

    before, store, series = refitting_beside(controller, kube, prometheus_server.url, "restart-keeps")
    try:
        for minute in range(600):  # a minute apart, until the hour's refit beside is in force
            now = MONDAY_7AM + pd.Timedelta(minutes=minute)
            ps = before.reconcile(now).policies[f"{NS}/chat"]
            if not ps.fallback and not before.forecasts.refitting():
                break
            time.sleep(0.1)
    finally:
        before.close()
    assert not ps.fallback and ps.model.startswith("auto") and len(store.load(series)) == 1
    assert replicas(kube) == ps.reserved_gpus
    said = {e["metadata"]["name"] for e in kube.list_events(ObjectRef("", "ReservationPolicy", "chat", NS))}
    cfg = before.cfg  # a new process with the same configuration, on the same store
    after = Reconciler(controller, PrometheusDemand(cfg.prometheus), cfg, refit_beside=True,
                       forecast_log=shared_forecast_store(controller, NS, 24, cfg.keep_forecast_seconds))
    try:
        # at the same moment (the same samples: a minute later the recent peak alone may move the reservation)
        first = after.reconcile(now).policies[f"{NS}/chat"]
        assert after.forecasts.refitting() == 1  # its own refit still runs beside
    finally:
        after.close()
    assert not first.fallback and first.model == ps.model and first.reserved_gpus == ps.reserved_gpus
    assert first.forecast_age_seconds == ps.forecast_age_seconds
    assert replicas(kube) == ps.reserved_gpus
    changed = [e["message"] for e in kube.list_events(ObjectRef("", "ReservationPolicy", "chat", NS))
               if e["metadata"]["name"] not in said and e["reason"] == "ReservationChanged"]
    assert changed == [], "the restart moved the reservation"
    _, conditions = rp_status(kube)
    assert conditions["FallbackActive"]["status"] == "False"


def _refitted(r: Reconciler, start: pd.Timestamp):
    """Reconciles of `r` a minute apart from `start` until its hour's refit beside is in force: chat's last state."""
    for minute in range(600):
        ps = r.reconcile(start + pd.Timedelta(minutes=minute)).policies[f"{NS}/chat"]
        if not ps.fallback and not r.forecasts.refitting():
            return ps
        time.sleep(0.1)
    raise AssertionError("the hourly refit never came in")


def test_a_failover_and_back_plans_on_the_newest_stored_forecast_not_the_returning_replica_s_own(
        kube, controller, prometheus_server):
    """Replica a led with its forecast of 07:05; b took over and refitted at 08:00, into the shared store; a takes
    the Lease again at 08:10. a's own forecast was still usable, so it planned on it, not on b's newer one, until its
    own refit landed: the reservation moved on each failover. Taking the Lease (controller.loop), a now plans on b's
    forecast: its plan is b's."""
    import numpy as np

    from cli.run import shared_forecast_store

    lease = "failover-back"
    a, store, series = refitting_beside(controller, kube, prometheus_server.url, lease)
    b = Reconciler(controller, a.demand, a.cfg, refit_beside=True,
                   forecast_log=shared_forecast_store(controller, NS, 24, a.cfg.keep_forecast_seconds))
    try:
        _refitted(a, MONDAY_7AM + pd.Timedelta(minutes=5))
        led = _refitted(b, MONDAY_7AM + pd.Timedelta(hours=1))  # b's own, fitted at 08:00 and stored
        assert max(store.load(series)) == MONDAY_7AM + pd.Timedelta(hours=1)
        back_at = led.now + pd.Timedelta(minutes=1)
        loop = Loop(a, controller.leader_elector(NS, lease, "replica-a", lease_seconds=30), interval=1,
                    lease_seconds=30, clock=lambda: back_at)
        back = loop.run(once=True).policies[f"{NS}/chat"]  # a takes the Lease, reconciles once and lets it go
    finally:
        a.close()
        b.close()
    assert a.forecasts.current(f"{NS}/chat").made_at < MONDAY_7AM + pd.Timedelta(hours=1)  # its own, older
    assert not back.fallback and back.forecast_age_seconds == (back_at - MONDAY_7AM).total_seconds() - 3600
    assert back.model == led.model
    np.testing.assert_array_equal(back.hours.reserved, led.hours.reserved)


def test_a_replica_planning_on_the_stored_forecast_has_its_whole_horizon(kube, controller, prometheus_server):
    """The store kept each forecast's first 24 hours (what realized error reads), so with run.horizon_hours 48 a
    replica that had just started planned the hours past the first 24 on the fallback, last week's peaks, where the
    replica before it had planned them on the forecast. The newest forecasts are kept whole: its plan is the one the
    replica before made, hour for hour."""
    from cli.run import shared_forecast_store

    before, store, series = refitting_beside(controller, kube, prometheus_server.url, "whole-horizon",
                                             horizon_hours=48)
    try:
        ps = _refitted(before, MONDAY_7AM + pd.Timedelta(minutes=5))
    finally:
        before.close()
    assert len(ps.hours.starts) == 48 and ps.hours.from_forecast.all()
    cfg = before.cfg
    after = Reconciler(controller, PrometheusDemand(cfg.prometheus), cfg, refit_beside=True,
                       forecast_log=shared_forecast_store(controller, NS, 24, cfg.keep_forecast_seconds))
    try:
        first = after.reconcile(ps.now).policies[f"{NS}/chat"]
        assert after.forecasts.refitting() == 1  # its own refit still runs beside
    finally:
        after.close()
    assert first.forecast_age_seconds == ps.forecast_age_seconds
    assert first.hours.from_forecast.all(), f"{(~first.hours.from_forecast).sum()} hours planned on the fallback"
    assert list(first.hours.reserved) == list(ps.hours.reserved)


def test_after_a_long_api_server_outage_the_first_reconcile_reads_fresh_state(kube_server, kube, controller,
                                                                              prometheus_server, tmp_path):
    """An outage long enough that the watch caches back off (seconds between tries): once the API server is back,
    they went on serving what they held before the outage until their next try (up to 30 s), so the reconciles
    in between planned on stale state: here a 40-GPU Workload Kueue admitted right after the restart was not seen,
    its GPUs counted as free. A cache whose watch is not connected is not read: the reconcile lists."""
    r = reconciler(controller, prometheus_server.url, tmp_path)
    assert r.reconcile(MONDAY_7AM).training_gpus == 0
    kube_server.apiserver.stop()
    try:
        time.sleep(12)  # the caches retry at 0.2, 0.4, ... 6.4 s: their next try is seconds away
    finally:
        kube_server.apiserver.start()
    admit(kube, "after-outage", 40)
    state = r.reconcile(MONDAY_7AM + pd.Timedelta(minutes=5))
    assert state.training_gpus == 40, "planned on the watch cache as it was before the outage"
    assert not any(state.reconcile_errors_total.values()), state.reconcile_errors_total


RBAC = "/apis/rbac.authorization.k8s.io/v1"


def shipped_cluster_role(name: str) -> dict:
    """The controller's ClusterRole as deploy/base ships it, renamed (test-only)."""
    import yaml

    from tests.servers import ROOT

    (role,) = [d for d in yaml.safe_load_all((ROOT / "deploy" / "base" / "rbac.yaml").read_text())
               if d and d["kind"] == "ClusterRole"]
    role["metadata"] = {"name": name}
    return role


def viewer_may_list(kube_server, allowed: bool) -> None:
    """Wait until the API server's authorizer lets the unprivileged user list Workloads (`allowed`) or not."""
    api = kube_server.apiserver
    probe = KubeCluster.from_token(api.host, api.viewer_token, ca_file=str(api.ca_file), request_timeout=5)
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
              "spec": {"resourceAttributes": {"verb": "list", "group": "kueue.x-k8s.io", "resource": "workloads"}}}
    deadline = time.monotonic() + 15
    while probe.create("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", review)["status"].get(
            "allowed", False) != allowed:
        assert time.monotonic() < deadline, f"the test role never {'reached' if allowed else 'left'} the authorizer"
        time.sleep(0.2)
    probe.close()


def unbind(kube_server, kube, name: str) -> None:
    kube.delete(f"{RBAC}/clusterrolebindings/{name}")
    kube.delete(f"{RBAC}/clusterroles/{name}")
    viewer_may_list(kube_server, False)  # other tests meet an unprivileged user again


def bound_to_the_viewer(kube_server, kube, role: dict):
    """`role` bound (test-only) to the unprivileged user while the fixture lasts; yields that user's client."""
    name = role["metadata"]["name"]
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
               "subjects": [{"kind": "User", "name": "headroom-viewer", "apiGroup": "rbac.authorization.k8s.io"}]}
    kube.apply(f"{RBAC}/clusterroles/{name}", role)
    kube.apply(f"{RBAC}/clusterrolebindings/{name}", binding)
    viewer_may_list(kube_server, True)
    api = kube_server.apiserver
    viewer = KubeCluster.from_token(api.host, api.viewer_token, ca_file=str(api.ca_file), request_timeout=5)
    yield viewer
    viewer.close()
    unbind(kube_server, kube, name)


@pytest.fixture
def without_evict(kube_server, kube):
    """The shipped ClusterRole minus `patch` on Workloads, bound (test-only) to the unprivileged user: a controller
    that can do everything but evict. Unbound afterwards."""
    role = shipped_cluster_role("headroom-test-no-evict")
    for rule in role["rules"]:
        if rule["resources"] == ["workloads"]:
            rule["verbs"] = [v for v in rule["verbs"] if v != "patch"]
    yield from bound_to_the_viewer(kube_server, kube, role)


@pytest.fixture
def with_the_shipped_role(kube_server, kube):
    """The shipped ClusterRole bound (test-only) to the unprivileged user; its name (revoked by `unbind`)."""
    name = "headroom-test-shipped"
    for _ in bound_to_the_viewer(kube_server, kube, shipped_cluster_role(name)):
        yield name


def test_a_controller_whose_rbac_is_revoked_is_refused_within_the_watch_bound(with_the_shipped_role, kube_server,
                                                                             kube, prometheus_server, tmp_path):
    """The API server authorizes a watch once, at its start: a controller whose ClusterRoleBinding was deleted kept
    its watches, and once they broke, its reads served what the caches held (the LIST's 403 was logged and dropped)
    and the thread listed again forever: it went on planning on a cache nothing refreshed. Each watch ends after
    watch_seconds and is opened again; the 403 on that re-watch and re-list now comes out of the reads as the
    server's refusal (HTTP 403, not retried), and the reconcile counts a `cluster` error instead of acting."""
    api = kube_server.apiserver
    watching = KubeCluster.from_token(api.host, api.viewer_token, ca_file=str(api.ca_file), request_timeout=5
                                      ).watch(watch_seconds=2, grace_seconds=2)
    try:
        r = reconciler(watching, prometheus_server.url, tmp_path)
        assert r.reconcile(MONDAY_7AM).reconcile_errors_total.get("cluster", 0) == 0
        unbind(kube_server, kube, with_the_shipped_role)
        # every watch is ended by the server within its 2 s and refused when opened again, and a cache silent past its
        # 4 s bound lists again: the reads are refused within 6 s (2 s more for a loaded machine's threads; a fixed
        # 3 s wait left the watch threads 1 s to meet the refusal)
        deadline = time.monotonic() + 2 + 4 + 2
        with pytest.raises(ClusterError) as info:
            while True:
                watching.reservation_policies(NS)
                assert time.monotonic() < deadline, "the revoked controller's reads are still served from its cache"
                time.sleep(0.1)
        assert (info.value.status, info.value.reason) == (403, "Forbidden"), info.value
        state = r.reconcile(MONDAY_7AM + pd.Timedelta(minutes=5))
        assert state.reconcile_errors_total.get("cluster", 0) == 1
    finally:
        watching.close()


def test_evictions_the_api_server_refuses_are_said_on_the_policy(without_evict, kube, prometheus_server, tmp_path):
    """RBAC without `patch` on Workloads: the morning ramp's evictions are refused (403). Only the controller's log
    and the preempt error counter said so; the policy said Ready=True while the GPUs its reservation needs stayed
    with training. The policy on whose behalf an eviction failed says Ready=False, PreemptFailed, naming the
    Workload and the error, with a Warning event."""
    for i in range(12):
        admit(kube, f"rbac-{i}", 10)
    watching = without_evict.watch()
    server = PrometheusServer(url=prometheus_server.url, step="5m", timeout_seconds=10, retries=0)
    cfg = RunConfig(cluster="kubernetes", prometheus=server, capacity_gpus=128, namespace=NS)
    r = Reconciler(watching, PrometheusDemand(server), cfg, forecast_log=ForecastLog(tmp_path / "log"))
    state = r.reconcile(MONDAY_7AM + pd.Timedelta(hours=3))
    assert state.reconcile_errors_total.get("preempt", 0) >= 1
    assert all(w.active for w in training(kube).values())  # nothing was evicted
    _, conditions = rp_status(kube)
    ready = conditions["Ready"]
    assert (ready["status"], ready["reason"]) == ("False", "PreemptFailed"), ready
    assert f"Workload {TRAIN_NS}/rbac-" in ready["message"] and "HTTP 403" in ready["message"]
    assert "PreemptFailed" in events(kube, "ReservationPolicy", "chat", NS)


def test_a_training_queue_with_two_gpu_flavors_is_named_with_what_to_do(kube, controller, prometheus_server,
                                                                        tmp_path):
    """A ClusterQueue whose GPUs come in two flavors (a100 and h100): headroom cannot tell which flavor's quota to
    lend. The policy's status said 'name one (flavor=...)', an argument of a Python method no user can give. It
    names the flavors and what the ClusterQueue needs; the other policy goes on."""
    kube.apply(kueue.path("resourceflavors", "h100"), kueue.resource_flavor("h100"))
    cq = kueue.cluster_queue("two-flavors", gpus=4, cohort="two-flavors-pool")
    group = cq["spec"]["resourceGroups"][0]
    group["flavors"].append({"name": "h100", "resources": [{"name": kueue.GPU, "nominalQuota": 4}]})
    kube.apply(kueue.path("clusterqueues", "two-flavors"), cq)
    try:
        kube.create(f"/apis/apps/v1/namespaces/{NS}/deployments", deployment("mixed"))
        kube.create(RP, policy("mixed", trainingClusterQueues=["two-flavors"], inferenceClusterQueue=None))
        controller.sync()
        state = reconciler(controller, prometheus_server.url, tmp_path).reconcile(MONDAY_7AM)
        _, conditions = rp_status(kube, "mixed")
        ready = conditions["Ready"]
        assert (ready["status"], ready["reason"]) == ("False", "QuotaFailed"), ready
        assert "flavor=" not in ready["message"], ready["message"]
        assert "ClusterQueue two-flavors" in ready["message"] and "a100, h100" in ready["message"]
        assert state.policies[f"{NS}/chat"].valid and rp_status(kube)[1]["Ready"]["status"] == "True"
    finally:
        kube.delete(kueue.path("clusterqueues", "two-flavors"))


def test_a_policy_lending_into_another_s_inference_queue_is_refused_and_inference_keeps_its_gpus(
        kube, controller, prometheus_server, tmp_path):
    """A second policy names the first's inferenceClusterQueue among its trainingClusterQueues (each spec is valid on
    its own). The inference queue's quota was written twice a reconcile, the slack share winning over the
    reservation, and the inference Workload running in it was counted as training and evicted at the morning ramp;
    both policies said Ready=True. A queue is an inference queue or a training queue: the policy that claims it
    otherwise after another did is refused, naming the other; the first goes on."""
    time.sleep(1.1)  # creation times have whole seconds: "other" comes after "chat"
    kube.apply(kueue.path("localqueues", INFERENCE_QUEUE, NS), kueue.local_queue(NS, INFERENCE_QUEUE))
    inference_wl = kueue.path("workloads", namespace=NS)
    kube.create(inference_wl, kueue.workload(NS, "chat-pods", INFERENCE_QUEUE, gpus_per_pod=1, count=4))
    kube.create(f"/apis/apps/v1/namespaces/{NS}/deployments", deployment("other"))
    kube.create(RP, policy("other", trainingClusterQueues=[INFERENCE_QUEUE], inferenceClusterQueue=None))
    try:
        for i in range(12):
            admit(kube, f"train-{i}", 10)
        kueue.admit(kube, NS, "chat-pods", INFERENCE_QUEUE)
        controller.sync()
        r = reconciler(controller, prometheus_server.url, tmp_path)
        for hour in range(6):  # 07:00 .. 12:00: the morning ramp takes GPUs back
            state = r.reconcile(MONDAY_7AM + pd.Timedelta(hours=hour))
            chat, other = state.policies[f"{NS}/chat"], state.policies[f"{NS}/other"]
            assert chat.valid and not other.valid
            assert kube.get_cluster_queue_quota(INFERENCE_QUEUE) == chat.reserved_gpus  # the reservation, not slack
            assert {w.name: w for w in controller.workloads()}["chat-pods"].active, "inference was evicted"
        assert f"ReservationPolicy {NS}/chat" in other.error and "spec.trainingClusterQueues" in other.error
        _, conditions = rp_status(kube, "other")
        assert (conditions["Ready"]["status"], conditions["Ready"]["reason"]) == ("False", "InvalidSpec")
    finally:
        kube.delete(kueue.path("workloads", "chat-pods", NS))


def test_a_policy_whose_inference_queue_is_another_s_clusterqueue_target_is_refused(kube, controller,
                                                                                   prometheus_server, tmp_path):
    """Policy "queue-target" reserves by a ClusterQueue target (its quota is that policy's reservation); "chat" runs
    its inference in that same queue. Each reconcile wrote the queue twice, each policy's reservation in turn, and it
    held neither. The policy that names it second is refused."""
    kube.apply(kueue.path("clusterqueues", "target-run"),
               kueue.cluster_queue("target-run", gpus=0, cohort=COHORT, lending_limit=0))
    try:
        kube.create(RP, policy("queue-target", target={"kind": "ClusterQueue", "name": "target-run"},
                               inferenceClusterQueue=None, trainingClusterQueues=[]))
        time.sleep(1.1)  # creation times have whole seconds
        kube.delete(f"{RP}/chat")  # chat again, now after "queue-target", in the target's queue
        kube.create(RP, policy("chat", inferenceClusterQueue="target-run"))
        controller.sync()
        r = reconciler(controller, prometheus_server.url, tmp_path)
        for minutes in (0, 5):
            state = r.reconcile(MONDAY_7AM + pd.Timedelta(minutes=minutes))
            target = state.policies[f"{NS}/queue-target"]
            assert target.valid and not state.policies[f"{NS}/chat"].valid
            assert kube.get_cluster_queue_quota("target-run") == target.reserved_gpus
            assert not [a for a in state.actions if getattr(a, "queue", None) == "target-run"]
        assert f"ReservationPolicy {NS}/queue-target" in state.policies[f"{NS}/chat"].error
    finally:
        kube.delete(kueue.path("clusterqueues", "target-run"))


def test_no_training_is_evicted_for_a_reservation_that_could_not_be_applied(kube, controller, prometheus_server,
                                                                            tmp_path):
    """A policy whose Deployment was deleted (TargetMissing): its scale failed every reconcile, yet the morning
    ramp's evictions made on its behalf went ahead, freeing GPUs that no inference replica would take: training work
    lost for nothing. It takes no part in the plan now: it reserves nothing, and nothing is evicted for it."""
    kube.delete(f"{RP}/chat")
    kube.create(RP, policy("gone", target={"kind": "Deployment", "name": "deleted-deployment"}))
    for i in range(12):
        admit(kube, f"train-{i}", 10)
    controller.sync()
    r = reconciler(controller, prometheus_server.url, tmp_path)
    for hour in range(6):  # 07:00 .. 12:00: the ramp would take GPUs back for its reservation
        state = r.reconcile(MONDAY_7AM + pd.Timedelta(hours=hour))
        assert not state.policies[f"{NS}/gone"].valid and state.policies[f"{NS}/gone"].reserved_gpus == 0
    assert all(w.active for w in training(kube).values()), "training evicted for a target that does not exist"
    assert sum(state.preemptions_total.values()) == 0
    _, conditions = rp_status(kube, "gone")
    assert conditions["Ready"]["reason"] == "TargetMissing"


def test_a_queue_no_policy_names_any_more_keeps_the_quota_someone_set_while_it_was_being_returned(
        kube, controller, prometheus_server, tmp_path):
    """chat lent into team-x, then dropped it: what headroom lent there comes back to 0, unless someone else has set
    the quota since (theirs now). An operator setting it between the reconcile's read and its write (the write's
    first attempt, from the copy read, met a 409) had it set to 0 all the same: the re-read was written over without
    a look. The quota returned is written only while it is still the one headroom lent."""
    extra, cq = "team-x-run", kueue.path("clusterqueues", "team-x-run")
    kube.apply(cq, kueue.cluster_queue(extra, gpus=0, cohort=COHORT))

    def lend_to(queues: list[str]) -> None:
        kube._request("PATCH", f"{RP}/chat", {"spec": {"trainingClusterQueues": queues}},
                      content_type="application/merge-patch+json")
        controller.sync()

    def set_by_hand(gpus: int) -> None:
        groups = kube.get(cq)["spec"]["resourceGroups"]
        groups[0]["flavors"][0]["resources"][0]["nominalQuota"] = gpus
        kube._request("PATCH", cq, {"spec": {"resourceGroups": groups}}, content_type="application/merge-patch+json")

    try:
        lend_to([QUEUE, extra])
        r = reconciler(controller, prometheus_server.url, tmp_path)
        r.reconcile(MONDAY_7AM)
        lent = kube.get_cluster_queue_quota(extra)
        assert lent > 0 and controller.lent_quotas(NS).get(extra) == lent
        lend_to([QUEUE])
        real, edited = controller._request, []

        def racing(method, path, body=None, **kw):
            if method == "PATCH" and path == cq and not edited:  # the operator's edit lands first
                edited.append(path)
                set_by_hand(lent + 3)
            return real(method, path, body, **kw)

        controller._request = racing
        try:
            r.reconcile(MONDAY_7AM + pd.Timedelta(minutes=5))
        finally:
            del controller._request
        assert edited, "the controller did not set out to return the quota"
        assert kube.get_cluster_queue_quota(extra) == lent + 3, "the operator's quota was written over"
        r.reconcile(MONDAY_7AM + pd.Timedelta(minutes=10))
        assert kube.get_cluster_queue_quota(extra) == lent + 3
    finally:
        kube.delete(cq)


def test_a_workload_made_slow_to_stop_after_its_preemption_was_planned_is_not_preempted_for_it(
        kube, controller, prometheus_server, tmp_path):
    """The morning ramp takes GPUs back from training, the jobs stopping within a minute. Once the preemptions were
    planned (and re-validated on a fresh view), and before they were written, the victims' owners said they now take an
    hour to stop (headroom.dev/preemption-seconds: 3600, past the 5-minute reclaim deadline): they were deactivated
    all the same, their work lost for GPUs that come back an hour late, where a job stopping within a minute would do.
    A preemption whose priority or preemption-seconds changed since its plan is not written; the next reconcile plans
    on them, and takes the GPUs back from the fast jobs."""
    for i in range(12):
        admit(kube, f"train-{i}", 10)
    controller.sync()
    r = reconciler(controller, prometheus_server.url, tmp_path)
    planned, slowed = r._still_wanted, set()

    def then_slowed(*args):
        wanted = planned(*args)
        if wanted and not slowed:  # the owners' edit lands between the re-validation and the writes
            slowed.update(key.split("/", 1)[1] for key in wanted)
            for name in slowed:
                kube._request("PATCH", f"{WL}/{name}",
                              {"metadata": {"annotations": {"headroom.dev/preemption-seconds": "3600"}}},
                              content_type="application/merge-patch+json")
            controller.sync()
        return wanted

    r._still_wanted = then_slowed
    for quarter in range(16):  # 07:00 .. 10:45
        now = MONDAY_7AM + pd.Timedelta(minutes=15 * quarter)
        r.reconcile(now)
        if slowed:
            break
    assert slowed, "no preemption was planned"
    assert all(training(kube)[name].active for name in slowed), "a job made slow to stop was preempted"
    r.reconcile(now + pd.Timedelta(minutes=5))
    evicted = {w.name for w in training(kube).values() if not w.active}
    assert evicted and not evicted & slowed, (evicted, slowed)


def test_a_replica_that_leads_again_rewrites_the_plan_summary_the_other_changed(kube, prometheus_server, tmp_path):
    """a leads and writes the plan summary; b takes over and writes its own; a leads again with the same plan as
    before. a skipped the write (the same as what it last wrote, under an hour ago), so the summary went on showing
    b's numbers, not the plan in force, for up to an hour. A replica that takes the Lease writes it on its first
    reconcile, as the summary's docstring says."""
    loops = {}
    for identity, clock in (("replica-a", MONDAY_7AM), ("replica-b", MONDAY_7AM + pd.Timedelta(hours=5))):
        r = reconciler(kube, prometheus_server.url, tmp_path / identity)
        elector = kube.leader_elector(NS, "summary-handover", identity, lease_seconds=30)
        loops[identity] = Loop(r, elector, interval=1, lease_seconds=30, clock=lambda c=clock: c)
    a, b = loops["replica-a"], loops["replica-b"]
    a.run(once=True)  # leads, writes, releases
    ours = kube.plan_summary(NS).read()
    b.run(once=True)  # takes over at once, writes its own (another moment: other numbers)
    assert kube.plan_summary(NS).read()["nextHours"] != ours["nextHours"]
    a.run(once=True)  # a again, the same plan as its first
    summary = kube.plan_summary(NS).read()
    assert summary["nextHours"] == ours["nextHours"] and summary["planId"] == a.reconciler.holder.get().plan_id


def test_a_controller_that_let_its_lease_go_never_takes_it_back_to_write_late_statuses(kube, prometheus_server,
                                                                                       tmp_path):
    """Statuses are written beside the reconciles; a write asks whether this replica still leads. Once it has let
    the Lease go on its way out, a status still queued must not renew it (it would hold the Lease it just handed
    over, and no other replica could take it for a whole Lease)."""
    r = reconciler(kube, prometheus_server.url, tmp_path, beside=True)
    lease = "let-go"
    kube.delete(f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{lease}")
    loop = Loop(r, kube.leader_elector(NS, lease, "replica-a", lease_seconds=30), interval=1, lease_seconds=30,
                clock=lambda: MONDAY_7AM)
    loop.run(once=True)
    assert not loop.still_leading()  # what a late status write asks
    r.close()
    holder = kube.get(f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{lease}")["spec"].get("holderIdentity")
    assert holder is None


def test_an_hpa_whose_deployment_is_missing_is_named_and_takes_no_training(kube, controller, prometheus_server,
                                                                            tmp_path):
    """The HPA exists, the Deployment it scales does not. The status said 'HorizontalPodAutoscaler front not found'
    (the SRE finds it there), and the morning ramp evicted training for replicas that could not exist. The status
    names the missing Deployment, and no training is evicted on the policy's behalf."""
    kube.delete(f"{RP}/chat")
    kube.create(f"/apis/autoscaling/v1/namespaces/{NS}/horizontalpodautoscalers", {
        "apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "front", "namespace": NS},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "front-deleted"},
                 "minReplicas": 1, "maxReplicas": 100}})
    try:
        kube.create(RP, policy("front", target={"kind": "HorizontalPodAutoscaler", "name": "front"}))
        for i in range(12):
            admit(kube, f"train-{i}", 10)
        controller.sync()
        r = reconciler(controller, prometheus_server.url, tmp_path)
        for hour in range(6):
            r.reconcile(MONDAY_7AM + pd.Timedelta(hours=hour))
        _, conditions = rp_status(kube, "front")
        ready = conditions["Ready"]
        assert (ready["status"], ready["reason"]) == ("False", "TargetMissing"), ready
        assert "Deployment front-deleted" in ready["message"], ready["message"]
        assert all(w.active for w in training(kube).values()), "training evicted for replicas that cannot exist"
    finally:
        kube.delete(f"/apis/autoscaling/v1/namespaces/{NS}/horizontalpodautoscalers/front")


@pytest.fixture
def without_cohorts(kube_server, kube):
    """The shipped ClusterRole without its rule on Cohorts (one from before headroom read them), bound (test-only) to
    the unprivileged user: a new image run under an old ClusterRole. Unbound afterwards."""
    role = shipped_cluster_role("headroom-test-no-cohorts")
    role["rules"] = [rule for rule in role["rules"] if rule["resources"] != ["cohorts"]]
    yield from bound_to_the_viewer(kube_server, kube, role)


def test_a_cluster_role_without_cohorts_still_plans_and_says_what_it_cannot_check(without_cohorts, kube,
                                                                                  prometheus_server, tmp_path):
    """An image that reads Cohorts under a ClusterRole from before it did: the LIST of Cohorts is refused (403) after
    the plan was applied, and the whole reconcile failed with it, so no status, Event or plan summary was written and
    every reconcile counted one error, the same. The plan is applied and every status written; HeadroomAtRisk is
    Unknown, reason CohortsUnreadable, naming the rule the ClusterRole lacks (the plan summary's ConfigMap is
    beyond this test user's ClusterRole: a namespaced Role grants it)."""
    started = time.monotonic()
    watching = without_cohorts.watch()
    try:
        assert time.monotonic() - started < 10, "start-up waited its 30 s for a watch cache the server refused"
        state = reconciler(watching, prometheus_server.url, tmp_path).reconcile(MONDAY_7AM)
        assert state.reconcile_errors_total.get("cluster", 0) == 1
        risk = state.headroom_at_risk
        assert risk is not None and (risk.status, risk.reason) == ("Unknown", "CohortsUnreadable"), risk
        assert "list and watch on cohorts.kueue.x-k8s.io" in risk.message and "403" in risk.message, risk.message
        _, conditions = rp_status(kube)
        assert conditions["Ready"]["status"] == "True", conditions["Ready"]
        assert (conditions["HeadroomAtRisk"]["status"], conditions["HeadroomAtRisk"]["reason"]) == (
            "Unknown", "CohortsUnreadable")
    finally:
        watching.close()


@pytest.mark.parametrize("restart", [False, True])
def test_a_target_changed_to_another_leaves_the_old_one_s_gpus_held(kube, controller, prometheus_server, tmp_path,
                                                                    restart):
    """big, planned beside chat, is edited to scale Deployment big-v2 instead of big. An edit deletes no workload: big
    runs on with its replicas, which no one scales now. The controller counted none of its GPUs: it lent them, and
    planned big-v2 on them (reserved + lent + big's replicas over the 128 GPUs). They are held by no one, as a refused
    policy's target is, at big's replicas as read, until big is scaled to 0 or deleted; the policy's status says so
    (status.left) until then. So too a controller restarted (or a new leader) before the edit's reconcile (the status's
    holding says big) or after it (its `left` says big), which never read the edit."""
    big = {"trainingClusterQueues": [QUEUE], "capacity": {"demandPerGpu": 20.0, "gpusPerReplica": 1}}
    r = reconciler(controller, prometheus_server.url, tmp_path)

    def reconcile(minutes: int):
        nonlocal r
        if restart:
            r.close()
            r = reconciler(controller, prometheus_server.url, tmp_path)
        state = r.reconcile(MONDAY_7AM + pd.Timedelta(minutes=minutes))
        controller.sync()
        return state, kube.get_reservation_policy(NS, "big")["status"].get("left")

    try:
        time.sleep(1.1)  # creationTimestamp has seconds: big comes after chat
        for name in ("big", "big-v2"):
            kube.create(f"/apis/apps/v1/namespaces/{NS}/deployments", deployment(name))
        kube.create(RP, policy("big", **big))
        controller.sync()
        r.reconcile(MONDAY_7AM)
        held = kube.get_deployment_replicas(NS, "big")
        assert held > 0
        kube.apply(f"{RP}/big", policy("big", **{**big, "target": {"kind": "Deployment", "name": "big-v2"}}))
        controller.sync()
        for minutes in (5, 10):
            state, left = reconcile(minutes)
            chat, v2 = state.policies[f"{NS}/chat"], state.policies[f"{NS}/big"]
            assert kube.get_deployment_replicas(NS, "big") == held  # no one scales it now
            assert kube.get_deployment_replicas(NS, "big-v2") == v2.reserved_gpus > 0
            assert chat.reserved_gpus + v2.reserved_gpus + held + state.slack_gpus <= 128, \
                (chat.reserved_gpus, v2.reserved_gpus, held, state.slack_gpus)
            assert left == [{"target": {"kind": "Deployment", "name": "big"}, "capacity": {"gpusPerReplica": 1},
                             "inferenceClusterQueue": INFERENCE_QUEUE, "trainingClusterQueues": [QUEUE],
                             "mode": "active"}]
        kube.scale_deployment(NS, "big", 0)  # scaled to 0: its GPUs are free again, and the status says big no more
        controller.sync()
        for minutes in (15, 20):
            state, left = reconcile(minutes)
            assert state.policies[f"{NS}/chat"].reserved_gpus + state.policies[f"{NS}/big"].reserved_gpus + \
                state.slack_gpus == 128
            assert left is None
    finally:
        r.close()
        kube.delete(f"/apis/apps/v1/namespaces/{NS}/deployments/big-v2")


def test_a_cluster_queue_target_an_edit_left_holds_its_quota_whole_beside_a_refused_policy_s_pods_in_it(
        kube, controller, prometheus_server, tmp_path):
    """claim, planned beside chat, holds pool-run as its ClusterQueue target; refused serve runs its 4-GPU pod there
    (inferenceClusterQueue). claim edited to scale Deployment claim-v2 left pool-run behind at the quota last set. The
    controller counted serve's pod as its own target and pool-run as no one's: the quota beyond the pod was lent again
    (reserved + lent + held over the 128 GPUs). pool-run holds its quota whole, serve's pod within it, as on the
    embedded cluster (tests/test_run.py)."""
    pool = kueue.path("clusterqueues", "pool-run")
    kube.apply(pool, kueue.cluster_queue("pool-run", gpus=0, cohort=COHORT, lending_limit=0))
    claim = {"target": {"kind": "ClusterQueue", "name": "pool-run"}, "inferenceClusterQueue": None,
             "capacity": {"demandPerGpu": 20.0, "gpusPerReplica": 1}}
    r = reconciler(controller, prometheus_server.url, tmp_path)
    try:
        time.sleep(1.1)  # creationTimestamp has seconds: claim and serve come after chat
        for name in ("serve", "claim-v2"):
            kube.create(f"/apis/apps/v1/namespaces/{NS}/deployments", deployment(name))
        kube.create(RP, policy("claim", **claim))
        kube.create(RP, policy("serve", inferenceClusterQueue="pool-run", timezone="Europe/Berln",
                               capacity={"demandPerGpu": 10.0, "gpusPerReplica": 4}))
        controller.sync()
        r.reconcile(MONDAY_7AM)
        quota = kube.get_cluster_queue_quota("pool-run")
        assert quota > 4
        kube.apply(f"{RP}/claim", policy("claim", **{**claim, "target": {"kind": "Deployment", "name": "claim-v2"},
                                                            "inferenceClusterQueue": INFERENCE_QUEUE}))
        controller.sync()
        for minutes in (5, 10):
            state = r.reconcile(MONDAY_7AM + pd.Timedelta(minutes=minutes))
            controller.sync()
            chat, v2 = state.policies[f"{NS}/chat"], state.policies[f"{NS}/claim"]
            assert not state.policies[f"{NS}/serve"].valid and kube.get_deployment_replicas(NS, "serve") == 1
            assert kube.get_cluster_queue_quota("pool-run") == quota  # no one sets it now
            assert chat.reserved_gpus + v2.reserved_gpus + quota + state.slack_gpus <= 128, \
                (chat.reserved_gpus, v2.reserved_gpus, quota, state.slack_gpus)
    finally:
        r.close()
        kube.delete(pool)
        kube.delete(f"/apis/apps/v1/namespaces/{NS}/deployments/claim-v2")


def test_the_pods_of_a_target_an_edit_left_in_a_held_cluster_queue_are_counted_beyond_its_quota(
        kube, controller, prometheus_server, tmp_path):
    """other, planned beside chat, runs its pods in pool-run (its inferenceClusterQueue), the ClusterQueue target of
    refused claim. other edited to scale other-v2 in chat's queue left Deployment other behind in pool-run, and pool-run
    is claim's again: held, at the quota last set. Scaled up by hand beyond that quota (Kueue lets the pods borrow),
    other's pods were not counted: only the refused policies' pods were read within a held queue, so the quota alone
    was held and the GPUs beyond it lent again. The pods of a left target within a held queue count as a refused
    policy's do."""
    pool = kueue.path("clusterqueues", "pool-run")
    kube.apply(pool, kueue.cluster_queue("pool-run", gpus=0, cohort=COHORT, lending_limit=0))
    other = {"inferenceClusterQueue": "pool-run", "capacity": {"demandPerGpu": 20.0, "gpusPerReplica": 1}}
    r = reconciler(controller, prometheus_server.url, tmp_path)
    try:
        time.sleep(1.1)  # creationTimestamp has seconds: claim and other come after chat
        for name in ("other", "other-v2"):
            kube.create(f"/apis/apps/v1/namespaces/{NS}/deployments", deployment(name))
        kube.create(RP, policy("claim", target={"kind": "ClusterQueue", "name": "pool-run"},
                               inferenceClusterQueue=None, timezone="Europe/Berln"))
        kube.create(RP, policy("other", **other))
        controller.sync()
        r.reconcile(MONDAY_7AM)
        quota = kube.get_cluster_queue_quota("pool-run")
        assert quota == kube.get_deployment_replicas(NS, "other") > 0
        kube.apply(f"{RP}/other", policy("other", **{**other, "target": {"kind": "Deployment", "name": "other-v2"},
                                                     "inferenceClusterQueue": INFERENCE_QUEUE}))
        kube.scale_deployment(NS, "other", quota + 6)  # by hand: borrowing beyond pool-run's quota
        controller.sync()
        for minutes in (5, 10):
            state = r.reconcile(MONDAY_7AM + pd.Timedelta(minutes=minutes))
            controller.sync()
            chat, v2 = state.policies[f"{NS}/chat"], state.policies[f"{NS}/other"]
            assert not state.policies[f"{NS}/claim"].valid and kube.get_cluster_queue_quota("pool-run") == quota
            assert kube.get_deployment_replicas(NS, "other") == quota + 6  # no one scales it now
            assert chat.reserved_gpus + v2.reserved_gpus + quota + 6 + state.slack_gpus <= 128, \
                (chat.reserved_gpus, v2.reserved_gpus, quota, state.slack_gpus)
    finally:
        r.close()
        kube.delete(pool)
        kube.delete(f"/apis/apps/v1/namespaces/{NS}/deployments/other-v2")


def test_a_policy_created_again_under_its_name_is_served_none_of_the_old_one_s_stored_forecasts(kube, controller,
                                                                                                 prometheus_server):
    """chat deleted and created again (kubectl delete, kubectl apply: a new object, its own uid) between two
    reconciles, its forecast of the old object in the shared store. The new object was planned on that forecast, as if
    it were the same policy, and the store kept it: a policy of a new name has none. It falls back until its own
    refit lands, and the old object's forecasts are pruned."""
    r, store, series = refitting_beside(controller, kube, prometheus_server.url, "created-again")
    try:
        old = _refitted(r, MONDAY_7AM + pd.Timedelta(minutes=5))
        issued = old.now - pd.Timedelta(seconds=old.forecast_age_seconds)
        assert not old.fallback and list(store.load(series)) == [issued]
        kube.delete(f"{RP}/chat")
        uid = kube.create(RP, policy("chat"))["metadata"]["uid"]
        controller.sync()
        again = old.now + pd.Timedelta(minutes=1)
        first = r.reconcile(again).policies[f"{NS}/chat"]
        assert first.fallback and first.model == "fallback", (first.model, first.forecast_age_seconds)
        assert issued not in store.load(series)  # the old object's forecast pruned
        own = _refitted(r, again)
    finally:
        r.close()
    assert own.forecast_age_seconds == (own.now - again).total_seconds()  # its own forecast, issued as it was seen
    assert {frame.attrs.get("uid") for frame in store.load(series).values()} == {uid}


def test_a_controller_started_after_a_policy_was_created_again_prunes_the_old_object_s_forecasts(
        kube, controller, prometheus_server):
    """chat deleted and created again (kubectl delete, kubectl apply: a new object, its own uid) while no controller
    ran: the controller started after never saw the old object go, so the old object's forecasts stayed in the shared
    store, neither planned on nor scored, until they aged out. They go at the new object's first prune."""
    a, store, series = refitting_beside(controller, kube, prometheus_server.url, "started-after")
    try:
        old = _refitted(a, MONDAY_7AM + pd.Timedelta(minutes=5))
    finally:
        a.close()
    issued = set(store.load(series))  # the old object's (more than one when its refit ran into the next hour)
    assert old.now - pd.Timedelta(seconds=old.forecast_age_seconds) in issued
    kube.delete(f"{RP}/chat")
    uid = kube.create(RP, policy("chat"))["metadata"]["uid"]
    controller.sync()
    b = Reconciler(controller, a.demand, a.cfg, forecast_log=store, refit_beside=True)  # a new process
    try:
        _refitted(b, old.now + pd.Timedelta(minutes=1))
    finally:
        b.close()
    stored = store.load(series)
    assert not issued & set(stored) and {frame.attrs.get("uid") for frame in stored.values()} == {uid}, (
        sorted(issued), sorted(stored))
