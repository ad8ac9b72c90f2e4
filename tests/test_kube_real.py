"""adapters.kube.KubeCluster against a real kube-apiserver 1.20 + etcd (RBAC on)."""
from __future__ import annotations

import threading
import time

import pytest

from tests.servers.fixtures import CRD_PATH, crd_documents
from adapters.kube import KubeCluster
from core.errors import ClusterError, Conflict, Invalid
from core.objects import Condition, ObjectRef, PolicyStatus

NS = "headroom-test"
RP = KubeCluster.custom_path("headroom.dev", "v1alpha1", "reservationpolicies", namespace=NS)
CQ = KubeCluster.custom_path("kueue.x-k8s.io", "v1beta1", "clusterqueues")
WL = KubeCluster.custom_path("kueue.x-k8s.io", "v1beta1", "workloads", namespace=NS)


@pytest.fixture(scope="module")
def cluster(kube_admin) -> KubeCluster:
    kube_admin.apply(f"/api/v1/namespaces/{NS}", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    return kube_admin


def policy(name: str, **spec) -> dict:
    body = {"query": 'sum(rate(http_requests_total{service="chat"}[5m]))',
            "capacity": {"demandPerGpu": 40.0, "gpusPerReplica": 1},
            "target": {"kind": "Deployment", "name": "chat"},
            "trainingClusterQueues": ["training"], "minGpus": 2, "maxGpus": 64}
    body.update(spec)
    return {"apiVersion": "headroom.dev/v1alpha1", "kind": "ReservationPolicy",
            "metadata": {"name": name, "namespace": NS}, "spec": body}


def cluster_queue(name: str, gpus: int = 8) -> dict:
    return {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": name},
            "spec": {"cohort": "gpus", "resourceGroups": [{
                "coveredResources": ["cpu", "nvidia.com/gpu"],
                "flavors": [{"name": "a100", "resources": [
                    {"name": "cpu", "nominalQuota": "64"},
                    {"name": "nvidia.com/gpu", "nominalQuota": gpus, "borrowingLimit": 0, "lendingLimit": gpus}]}]}]}}


def workload(name: str, queue: str | None = None, label: str | None = None, gpus: int = 1) -> dict:
    meta: dict = {"name": name, "namespace": NS}
    if label:
        meta["labels"] = {"kueue.x-k8s.io/queue-name": label}
    spec: dict = {"active": True, "priority": 0, "podSets": [{"name": "main", "count": 2, "template": {
        "spec": {"containers": [{"name": "t", "image": "trainer",
                                 "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}]}}}]}
    if queue:
        spec["queueName"] = queue
    return {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload", "metadata": meta, "spec": spec}


# --------------------------------------------------------------------------- CRDs
def test_crds_install_and_everything_dry_run_applies(cluster, crd_dir):
    docs = crd_documents(crd_dir)
    assert {d["metadata"]["name"] for d in docs} == {
        "reservationpolicies.headroom.dev", "clusterqueues.kueue.x-k8s.io", "workloads.kueue.x-k8s.io"}
    for doc in docs:
        applied = cluster.apply(f"{CRD_PATH}/{doc['metadata']['name']}", doc, dry_run=True)
        assert applied["spec"]["group"] == doc["spec"]["group"]
    installed = cluster.get(f"{CRD_PATH}/reservationpolicies.headroom.dev")
    version = installed["spec"]["versions"][0]
    assert [c["name"] for c in version["additionalPrinterColumns"]] == [
        "Mode", "Reserved", "Slack", "Headroom", "Model", "Ready", "Age"]
    assert version["subresources"] == {"status": {}}
    # ...and a dry run of one object of each kind passes their schemas, persisting nothing.
    cluster.create(RP, policy("dry"), dry_run=True)
    cluster.create(CQ, cluster_queue("dry"), dry_run=True)
    cluster.create(WL, workload("dry", queue="dry"), dry_run=True)
    assert all(i["metadata"]["name"] != "dry" for i in cluster.list_reservation_policies(NS))


def test_valid_policy_gets_defaults(cluster):
    created = cluster.create(RP, policy("defaults"))
    assert created["spec"]["mode"] == "forecast-only"
    assert created["spec"]["statistic"] == "mean"
    assert created["spec"]["targetQuantile"] == 0.9
    assert created["spec"]["leadTime"] == "10m"


@pytest.mark.parametrize("spec, field", [
    ({"mode": "yolo"}, "spec.mode"),
    ({"minGpus": -1}, "spec.minGpus"),
    ({"maxGpus": 0}, "spec.maxGpus"),
    ({"target": {"kind": "StatefulSet", "name": "x"}}, "spec.target.kind"),
    ({"capacity": {"demandPerGpu": 0}}, "spec.capacity.demandPerGpu"),
    ({"targetQuantile": 1.5}, "spec.targetQuantile"),
    ({"statistic": "median"}, "spec.statistic"),
    ({"leadTime": "ten minutes"}, "spec.leadTime"),
    ({"query": ""}, "spec.query"),
])
def test_invalid_policy_rejected_with_422(cluster, spec, field):
    with pytest.raises(Invalid) as info:
        cluster.create(RP, policy("bad", **spec))
    assert info.value.status == 422
    assert field in str(info.value)


def test_policy_without_target_rejected(cluster):
    body = policy("no-target")
    del body["spec"]["target"]
    with pytest.raises(Invalid, match="spec.target"):
        cluster.create(RP, body)


# --------------------------------------------------------------------------- quota
def test_quota_set_idempotently(cluster):
    cluster.create(CQ, cluster_queue("training", gpus=8))
    assert cluster.get_cluster_queue_quota("training") == 8
    assert cluster.set_cluster_queue_quota("training", 12) is True
    before = cluster.get(f"{CQ}/training")
    assert cluster.set_cluster_queue_quota("training", 12) is False
    after = cluster.get(f"{CQ}/training")
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]  # no write at all
    assert cluster.get_cluster_queue_quota("training") == 12
    resources = after["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    assert resources[0] == {"name": "cpu", "nominalQuota": "64"}  # other resources untouched
    assert resources[1]["lendingLimit"] == 8
    with pytest.raises(ClusterError, match="no example.com/tpu quota"):
        cluster.set_cluster_queue_quota("training", 1, resource="example.com/tpu")


def test_quota_conflict_is_retried_on_fresh_read(cluster, kube_server):
    cluster.create(CQ, cluster_queue("contended", gpus=4))
    other = KubeCluster.from_token(kube_server.apiserver.host, kube_server.apiserver.token, verify_ssl=False)
    real = cluster._request
    patches = []

    def racing(method, path, body=None, **kw):
        if method == "PATCH" and path.endswith("/clusterqueues/contended"):
            patches.append(body["metadata"]["resourceVersion"])
            if len(patches) == 1:  # another writer slips in between our read and our write
                other.apply(f"{CQ}/contended", {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue",
                                                "metadata": {"name": "contended", "labels": {"team": "ml"}}},
                            force=True)
        return real(method, path, body, **kw)

    cluster._request = racing
    try:
        assert cluster.set_cluster_queue_quota("contended", 6) is True
    finally:
        del cluster._request
    assert len(patches) == 2 and patches[0] != patches[1]  # 409, re-read, retried with the new version
    final = cluster.get(f"{CQ}/contended")
    assert cluster.get_cluster_queue_quota("contended") == 6
    assert final["metadata"]["labels"] == {"team": "ml"}  # the other writer's change survives
    other.close()


def test_conflicts_that_never_stop_surface_as_conflict(cluster):
    cluster.create(CQ, cluster_queue("hot", gpus=1))
    real, writes = cluster._request, []

    def always_stale(method, path, body=None, **kw):
        if method == "PATCH" and path.endswith("/clusterqueues/hot"):
            writes.append(1)
            body["metadata"]["resourceVersion"] = "1"
        return real(method, path, body, **kw)

    cluster._request = always_stale
    try:
        with pytest.raises(Conflict):
            cluster.set_cluster_queue_quota("hot", 2)
    finally:
        del cluster._request
    assert len(writes) == cluster.conflict_retries + 1


# --------------------------------------------------------------------------- inference capacity
def test_deployment_scale_and_hpa_min_replicas(cluster):
    cluster.create(f"/apis/apps/v1/namespaces/{NS}/deployments", {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "chat", "namespace": NS},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "chat"}},
                 "template": {"metadata": {"labels": {"app": "chat"}},
                              "spec": {"containers": [{"name": "srv", "image": "vllm"}]}}}})
    assert cluster.scale_deployment(NS, "chat", 3) is True
    assert cluster.scale_deployment(NS, "chat", 3) is False
    assert cluster.get_deployment_replicas(NS, "chat") == 3
    assert cluster.get(f"/apis/apps/v1/namespaces/{NS}/deployments/chat")["spec"]["replicas"] == 3

    cluster.create(f"/apis/autoscaling/v1/namespaces/{NS}/horizontalpodautoscalers", {
        "apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "chat", "namespace": NS},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "chat"},
                 "minReplicas": 1, "maxReplicas": 10}})
    assert cluster.set_hpa_min_replicas(NS, "chat", 4) is True
    assert cluster.set_hpa_min_replicas(NS, "chat", 4) is False
    hpa = cluster.get(f"/apis/autoscaling/v1/namespaces/{NS}/horizontalpodautoscalers/chat")
    assert hpa["spec"]["minReplicas"] == 4
    with pytest.raises(ClusterError, match="maxReplicas"):
        cluster.set_hpa_min_replicas(NS, "chat", 11)


# --------------------------------------------------------------------------- workloads
def test_list_and_evict_workloads_idempotently(cluster):
    cluster.create(WL, workload("by-spec", queue="training", gpus=2))
    cluster.create(WL, workload("by-label", label="training"))
    cluster.create(WL, workload("other", queue="serving"))
    admitted = cluster.create(WL, workload("admitted", queue="team-x"))
    cluster._request("PATCH", f"{WL}/admitted/status", {"status": {"admission": {"clusterQueue": "training"}}},
                     content_type="application/merge-patch+json")
    assert admitted["spec"]["active"] is True

    found = {w.name: w for w in cluster.list_workloads("training")}
    assert set(found) == {"by-spec", "by-label", "admitted"}
    assert found["by-spec"].gpus == 4 and found["by-label"].gpus == 2
    assert found["admitted"].cluster_queue == "training"

    assert cluster.evict_workload(NS, "by-spec", reason="reclaim for inference", plan_id="plan-1") is True
    first = cluster.get(f"{WL}/by-spec")
    assert first["spec"]["active"] is False
    assert first["metadata"]["annotations"] == {"headroom.dev/evicted-by-plan": "plan-1",
                                                "headroom.dev/eviction-reason": "reclaim for inference"}
    # Repeating it (same plan after a restart, or a later plan) changes nothing.
    assert cluster.evict_workload(NS, "by-spec", reason="reclaim for inference", plan_id="plan-1") is False
    assert cluster.evict_workload(NS, "by-spec", reason="again", plan_id="plan-2") is False
    again = cluster.get(f"{WL}/by-spec")
    assert again["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    inactive = {w.name: w for w in cluster.list_workloads("training")}["by-spec"]
    assert inactive.active is False and inactive.evicted_by_plan == "plan-1"


# --------------------------------------------------------------------------- status and events
def test_policy_status_conditions_and_events(cluster, kube_server):
    cluster.create(RP, policy("chat"))
    assert "chat" in {p["metadata"]["name"] for p in cluster.list_reservation_policies(NS)}
    assert "chat" in {p["metadata"]["name"] for p in cluster.list_reservation_policies()}
    ready = Condition("Ready", "True", "PlanApplied", "reserved 10 GPUs")
    cluster.patch_policy_status(NS, "chat", PolicyStatus(
        reserved_gpus=10, slack_gpus=3, headroom_gpus=2, plan_id="plan-7", forecast_demand=311.5,
        conditions=(ready, Condition("HeadroomAtRisk", "False", "WithinQuantile"))))
    status = cluster.get_reservation_policy(NS, "chat")["status"]
    assert (status["reservedGpus"], status["slackGpus"], status["headroomGpus"]) == (10, 3, 2)
    assert status["planId"] == "plan-7" and status["forecastDemand"] == 311.5
    conds = {c["type"]: c for c in status["conditions"]}
    assert conds["Ready"]["status"] == "True" and conds["Ready"]["reason"] == "PlanApplied"
    first_ready = conds["Ready"]["lastTransitionTime"]

    time.sleep(1.1)  # RFC 3339 seconds: a new transition gets a later stamp
    cluster.patch_policy_status(NS, "chat", PolicyStatus(
        reserved_gpus=12, slack_gpus=1, headroom_gpus=2,
        conditions=(ready, Condition("ForecastDegraded", "True", "PrometheusUnreachable", "using fallback"),
                    Condition("HeadroomAtRisk", "True", "DemandAboveForecast"))))
    conds = {c["type"]: c for c in cluster.get_reservation_policy(NS, "chat")["status"]["conditions"]}
    assert conds["Ready"]["lastTransitionTime"] == first_ready  # unchanged status keeps its time
    assert conds["HeadroomAtRisk"]["lastTransitionTime"] > first_ready
    assert set(conds) == {"Ready", "ForecastDegraded", "HeadroomAtRisk"}

    # Printer columns read the status (a Table, as kubectl get shows it).
    import requests
    api = kube_server.apiserver
    table = requests.get(f"{api.host}{RP}/chat", verify=False, timeout=5, headers={
        "Authorization": f"Bearer {api.token}",
        "Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}).json()
    columns = [c["name"] for c in table["columnDefinitions"]]
    row = dict(zip(columns, table["rows"][0]["cells"]))
    assert (row["Mode"], row["Reserved"], row["Slack"], row["Headroom"], row["Ready"]) == (
        "forecast-only", 12, 1, 2, "True")

    about = ObjectRef.of(cluster.get_reservation_policy(NS, "chat"))
    cluster.emit_event(about, "HeadroomAtRisk", "demand 20% above the p90 forecast", type="Warning")
    cq_ref = ObjectRef.of(cluster.create(CQ, cluster_queue("events-cq")))
    cluster.emit_event(cq_ref, "QuotaLowered", "nominalQuota 8 -> 5 (plan-7)")
    events = cluster.list_events(about)
    assert [(e["reason"], e["type"]) for e in events] == [("HeadroomAtRisk", "Warning")]
    assert events[0]["involvedObject"]["uid"] == about.uid
    assert [e["reason"] for e in cluster.list_events(cq_ref)] == ["QuotaLowered"]
    with pytest.raises(ValueError):
        Condition("Healthy", "True", "X")


def test_rbac_is_real_forbidden_is_not_retried(kube_server):
    api = kube_server.apiserver
    viewer = KubeCluster.from_token(api.host, api.viewer_token, ca_file=str(api.ca_file), retries=5,
                                    sleep=lambda s: pytest.fail("403 must not be retried"))
    with pytest.raises(ClusterError) as info:
        viewer.list_reservation_policies(NS)
    assert info.value.status == 403
    viewer.close()


# --------------------------------------------------------------------------- leader election
def test_leader_election_one_leader_and_takeover_after_expiry(cluster):
    a = cluster.leader_elector(NS, "headroom-controller", "pod-a", lease_seconds=2)
    b = cluster.leader_elector(NS, "headroom-controller", "pod-b", lease_seconds=2)
    assert a.try_acquire_or_renew() is True
    assert b.try_acquire_or_renew() is False
    for _ in range(3):  # a keeps renewing: b never gets in
        time.sleep(0.7)
        assert a.try_acquire_or_renew() is True
        assert b.try_acquire_or_renew() is False
        assert a.is_leader and not b.is_leader
    assert a.holder() == "pod-a"
    # a stops renewing (crashed): b takes over only after a full lease duration.
    began = time.monotonic()
    while not b.try_acquire_or_renew():
        assert time.monotonic() - began < 10
        time.sleep(0.25)
    assert time.monotonic() - began >= 1.5
    assert b.holder() == "pod-b"
    assert a.try_acquire_or_renew() is False and not a.is_leader
    lease = cluster.get(b.path)["spec"]
    assert lease["leaseTransitions"] == 1
    # release hands over at once.
    assert b.release() is True
    assert a.try_acquire_or_renew() is True


def test_two_electors_racing_never_both_lead(cluster):
    for round_ in range(5):
        electors = [cluster.leader_elector(NS, f"race-{round_}", f"pod-{i}", lease_seconds=30) for i in range(2)]
        barrier, results = threading.Barrier(2), {}

        def run(e):
            barrier.wait()
            results[e.identity] = e.try_acquire_or_renew()

        threads = [threading.Thread(target=run, args=(e,)) for e in electors]
        for t in threads:
            t.start()
        for t in threads:
            t.join(20)
        assert sorted(results.values()) == [False, True], results
        winner = next(i for i, won in results.items() if won)
        assert electors[0].holder() == winner


# --------------------------------------------------------------------------- outage (keep last)
def test_apiserver_restart_mid_run_adapter_recovers(cluster, kube_server):
    cluster.create(CQ, cluster_queue("outage", gpus=2))
    api = kube_server.apiserver
    slept = []
    patient = KubeCluster.from_kubeconfig(str(api.kubeconfig()), request_timeout=3, retries=30,
                                          backoff_max=2.0, sleep=lambda s: (slept.append(s), time.sleep(s)))
    api.stop()
    restarter = threading.Thread(target=api.restart, kwargs={"down_seconds": 2.0})
    restarter.start()
    try:
        began = time.monotonic()
        assert patient.set_cluster_queue_quota("outage", 5) is True
        took = time.monotonic() - began
    finally:
        restarter.join(120)
    assert api.ready()
    assert slept, "the adapter should have backed off while the server was down"
    assert took >= 2.0
    assert patient.get_cluster_queue_quota("outage") == 5
    patient.close()
