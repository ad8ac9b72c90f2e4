"""adapters.kube.KubeCluster against a real kube-apiserver 1.20 + etcd (RBAC on), with Kueue v0.19.2's genuine
CRDs (kueue.x-k8s.io/v1beta2) installed."""
from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from dataclasses import replace

import hypothesis
import pandas as pd
import pytest
from hypothesis import strategies as st

from adapters.embedded import EmbeddedCluster
from adapters.kube import EVICTED_BY_PLAN, EVICTION_REASON, ConfigMapForecastStore, KubeCluster
from controller.reconcile import training_view
from core.cluster import FORECAST_GENERATION, FORECAST_MODEL, FORECAST_SCALE
from core.errors import ClusterError, Conflict, Invalid, NotFound
from core.objects import Condition, ObjectRef, PolicyStatus, TargetRef, TargetState
from core.settings import PrometheusServer, RunConfig, WorldSettings
from tests.servers import kueue
from tests.servers.fixtures import CRD_PATH, crd_documents

NS = "headroom-test"
RP = KubeCluster.custom_path("headroom.dev", "v1alpha1", "reservationpolicies", namespace=NS)
CQ = kueue.path("clusterqueues")
LQ = kueue.path("localqueues", namespace=NS)
WL = kueue.path("workloads", namespace=NS)


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


def counting(cluster: KubeCluster) -> list[tuple[str, str]]:
    """Record the requests `cluster` makes from now on (undone by `del cluster._request`)."""
    real, seen = cluster._request, []

    def request(method, path, body=None, **kw):
        seen.append((method, path))
        return real(method, path, body, **kw)

    cluster._request = request
    return seen


# --------------------------------------------------------------------------- CRDs
def test_crds_install_and_v1beta2_objects_dry_run(cluster, crd_dir, kueue_crds):
    docs = crd_documents(crd_dir)
    assert {d["metadata"]["name"] for d in docs} == {"reservationpolicies.headroom.dev"}, \
        "deploy/crds holds headroom's own CRD only (Kueue's come from Kueue)"
    for doc in docs:
        applied = cluster.apply(f"{CRD_PATH}/{doc['metadata']['name']}", doc, dry_run=True)
        assert applied["spec"]["group"] == doc["spec"]["group"]
    installed = cluster.get(f"{CRD_PATH}/reservationpolicies.headroom.dev")
    version = installed["spec"]["versions"][0]
    assert [c["name"] for c in version["additionalPrinterColumns"]] == [
        "Mode", "Reserved", "Headroom", "Model", "Ready", "Age"]
    assert version["subresources"] == {"status": {}}
    # Kueue's genuine CRDs, serving v1beta2 as their storage version.
    for crd in kueue_crds:
        served = cluster.get(f"{CRD_PATH}/{crd['metadata']['name']}")["spec"]["versions"]
        assert {(v["name"], v["served"], v["storage"]) for v in served} == {
            ("v1beta1", True, False), ("v1beta2", True, True)}, crd["metadata"]["name"]
    # ...and a dry run of one object of each kind passes their schemas, persisting nothing.
    cluster.create(RP, policy("dry"), dry_run=True)
    cluster.create(kueue.path("resourceflavors"), kueue.resource_flavor("dry"), dry_run=True)
    cluster.create(CQ, kueue.cluster_queue("dry", cpu="64", lending_limit=4), dry_run=True)
    cluster.create(LQ, kueue.local_queue(NS, "dry"), dry_run=True)
    dry = cluster.create(WL, kueue.workload(NS, "dry", "dry", gpus_per_pod=2, count=2, priority_class="low",
                                            priority=100), dry_run=True)
    assert dry["spec"]["priorityClassRef"]["name"] == "low" and dry["spec"]["podSets"][0]["count"] == 2
    assert all(i["metadata"]["name"] != "dry" for i in cluster.list_reservation_policies(NS))


def test_kueue_schema_is_enforced(cluster):
    """The genuine schema, not a permissive copy: v1beta2 refuses what Kueue refuses, and prunes the v1beta1
    field name (`cohort`) that v1beta2 renamed (`cohortName`)."""
    bad_ref = kueue.workload(NS, "bad-ref", "training", priority_class="low")
    bad_ref["spec"]["priorityClassRef"]["group"] = "example.com"
    with pytest.raises(Invalid, match="priorityClassRef.group"):
        cluster.create(WL, bad_ref, dry_run=True)
    no_pods = kueue.workload(NS, "no-pods", "training")
    no_pods["spec"]["podSets"] = []
    with pytest.raises(Invalid, match="podSets"):
        cluster.create(WL, no_pods, dry_run=True)
    old_style = kueue.cluster_queue("old-style")
    old_style["spec"]["cohort"] = old_style["spec"].pop("cohortName")
    created = cluster.create(CQ, old_style, dry_run=True)
    assert "cohort" not in created["spec"] and "cohortName" not in created["spec"]


def test_valid_policy_gets_defaults(cluster):
    """The API server fills in core.policy's own defaults (the controller reads what `simulate` reads in a file)."""
    from core.policy import PolicySpec, spec_dict

    body = policy("defaults")
    created = cluster.create(RP, body)
    assert created["spec"] == spec_dict(PolicySpec.model_validate(body["spec"]))


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
def test_quota_set_idempotently_and_read_in_one_list(cluster):
    cluster.create(CQ, kueue.cluster_queue("training", gpus=8, cpu="64", lending_limit=8))
    cluster.create(CQ, kueue.cluster_queue("empty", gpus=0))
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
    # Lowered under its lendingLimit, the limit follows (Kueue refuses lendingLimit > nominalQuota).
    assert cluster.set_cluster_queue_quota("training", 5) is True
    lowered = cluster.get(f"{CQ}/training")["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1]
    assert (lowered["nominalQuota"], lowered["lendingLimit"]) == (5, 5)
    with pytest.raises(ClusterError, match="no example.com/tpu quota"):
        cluster.set_cluster_queue_quota("training", 1, resource="example.com/tpu")
    with pytest.raises(NotFound):
        cluster.set_cluster_queue_quota("no-such-queue", 1)
    seen = counting(cluster)
    try:
        quotas = cluster.cluster_queue_quotas()
    finally:
        del cluster._request
    assert quotas["training"] == 5 and quotas["empty"] == 0
    assert seen == [("GET", CQ)], "every ClusterQueue's quota in one LIST"
    assert cluster.target_state(TargetRef("ClusterQueue", "training"), 1).desired_replicas == 5


def test_quota_conflict_is_retried_on_fresh_read(cluster, kube_server):
    cluster.create(CQ, kueue.cluster_queue("contended", gpus=4))
    other = KubeCluster.from_token(kube_server.apiserver.host, kube_server.apiserver.token, verify_ssl=False)
    real = cluster._request
    patches = []

    def racing(method, path, body=None, **kw):
        if method == "PATCH" and path.endswith("/clusterqueues/contended"):
            patches.append(body["metadata"]["resourceVersion"])
            if len(patches) == 1:  # another writer slips in between our read and our write
                other._request("PATCH", f"{CQ}/contended", {"metadata": {"labels": {"team": "ml"}}},
                               content_type="application/merge-patch+json")
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
    cluster.create(CQ, kueue.cluster_queue("hot", gpus=1))
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
def test_deployment_scale_hpa_min_replicas_and_target_state(cluster):
    cluster.create(f"/apis/apps/v1/namespaces/{NS}/deployments", {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "chat", "namespace": NS},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "chat"}},
                 "template": {"metadata": {"labels": {"app": "chat"}},
                              "spec": {"containers": [{"name": "srv", "image": "vllm"}]}}}})
    assert cluster.scale_deployment(NS, "chat", 3) is True
    assert cluster.scale_deployment(NS, "chat", 3) is False
    assert cluster.get_deployment_replicas(NS, "chat") == 3
    assert cluster.get(f"/apis/apps/v1/namespaces/{NS}/deployments/chat")["spec"]["replicas"] == 3
    # No controller-manager here: nothing becomes ready, and target_state says so.
    assert cluster.target_state(TargetRef("Deployment", "chat", NS), 1).desired_replicas == 3
    assert cluster.target_state(TargetRef("Deployment", "chat", NS), 1).ready_replicas == 0

    cluster.create(f"/apis/autoscaling/v1/namespaces/{NS}/horizontalpodautoscalers", {
        "apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "chat", "namespace": NS},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "chat"},
                 "minReplicas": 1, "maxReplicas": 10}})
    assert cluster.set_hpa_min_replicas(NS, "chat", 4) is True
    assert cluster.set_hpa_min_replicas(NS, "chat", 4) is False
    hpa = cluster.get(f"/apis/autoscaling/v1/namespaces/{NS}/horizontalpodautoscalers/chat")
    assert hpa["spec"]["minReplicas"] == 4
    state = cluster.target_state(TargetRef("HorizontalPodAutoscaler", "chat", NS), 1)
    assert (state.desired_replicas, state.min_replicas, state.max_replicas) == (3, 4, 10)  # its Deployment's replicas
    with pytest.raises(ClusterError, match="maxReplicas"):
        cluster.set_hpa_min_replicas(NS, "chat", 11)
    for missing in (TargetRef("Deployment", "gone", NS), TargetRef("HorizontalPodAutoscaler", "gone", NS),
                    TargetRef("ClusterQueue", "gone")):
        with pytest.raises(NotFound):
            cluster.target_state(missing, 1)


def test_a_clusterqueue_target_reads_as_the_same_replicas_in_the_embedded_cluster_and_on_kubernetes(cluster):
    """TargetState is in replicas for every kind of target. A ClusterQueue target's are the whole replicas of its
    policy's gpusPerReplica its GPU quota holds, on Kubernetes as in the embedded cluster (which once gave the quota
    in GPUs here, 6 for 3 replicas of 2, and replicas there)."""
    spec = {"capacity": {"demandPerGpu": 10.0, "gpusPerReplica": 2}, "target": {"kind": "ClusterQueue", "name": "cq-t"}}
    start = pd.Timestamp("2026-01-05 12:00", tz="UTC")
    demand = pd.Series(55.0, index=pd.date_range(start - pd.Timedelta(days=1), start, freq="5min"))  # 3 replicas
    world = EmbeddedCluster(64, [policy("cq-target", **spec)], {f"{NS}/cq-target": demand}, start.timestamp())
    world.advance(world.now + 60.0)  # past the start, whose decisions were in place: a change from now on warms up
    ref = TargetRef("ClusterQueue", "cq-t")
    cluster.create(CQ, kueue.cluster_queue("cq-t", gpus=world.cluster_queue_quotas()["cq-t"]))
    assert cluster.target_state(ref, 2) == world.target_state(ref, 2) == TargetState(3, 3)
    for gpus in (11, 4):  # more (a part of a replica too: whole ones are read), once warm; fewer
        assert cluster.set_cluster_queue_quota("cq-t", gpus) and world.set_cluster_queue_quota("cq-t", gpus)
        world.advance(world.now + WorldSettings().warmup_seconds)
        assert cluster.target_state(ref, 2) == world.target_state(ref, 2) == TargetState(gpus // 2, gpus // 2)


def test_a_snapshot_reads_each_object_once_and_serves_what_its_own_writes_wrote(cluster, kube_server):
    """Without a watch cache a reconcile read the ClusterQueues once for each fact it wanted (quotas, the cohort tree,
    the preemption and queueing settings, a ClusterQueue target) and each target for each view, and read what it
    wrote once more before writing it. Within a snapshot each is read once and served as read, with what this
    client wrote in it; a copy someone else changed since costs a 409 and a re-read (nothing of theirs lost); after
    it, reads are requests again."""
    deployments, hpas = f"/apis/apps/v1/namespaces/{NS}/deployments", \
        f"/apis/autoscaling/v1/namespaces/{NS}/horizontalpodautoscalers"
    cluster.create(CQ, kueue.cluster_queue("snap-queue", gpus=2))
    cluster.create(LQ, kueue.local_queue(NS, "snap-queue"))
    cluster.create(WL, kueue.workload(NS, "snap-job", "snap-queue", gpus_per_pod=2))
    kueue.admit(cluster, NS, "snap-job", "snap-queue")
    cluster.create(deployments, {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "snap", "namespace": NS},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "snap"}},
                 "template": {"metadata": {"labels": {"app": "snap"}},
                              "spec": {"containers": [{"name": "srv", "image": "vllm"}]}}}})
    cluster.create(hpas, {"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
                          "metadata": {"name": "snap", "namespace": NS},
                          "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "snap"},
                                   "minReplicas": 1, "maxReplicas": 10}})
    other = KubeCluster.from_token(kube_server.apiserver.host, kube_server.apiserver.token, verify_ssl=False)
    queue, deployment, hpa = (TargetRef("ClusterQueue", "snap-queue"), TargetRef("Deployment", "snap", NS),
                              TargetRef("HorizontalPodAutoscaler", "snap", NS))
    seen = counting(cluster)
    try:
        with cluster.snapshot():
            for _ in range(2):  # every fact of the ClusterQueues, every target, twice
                quotas = cluster.cluster_queue_quotas()
                cluster.within_queue_preemption(), cluster.strict_fifo_queues(), cluster.cohort_tree()
                states = [cluster.target_state(t, 1) for t in (queue, deployment, hpa)]
                jobs = {w.name: w for w in cluster.workloads()}
                with pytest.raises(NotFound):
                    cluster.target_state(TargetRef("Deployment", "snap-gone", NS), 1)
            assert quotas["snap-queue"] == 2 and jobs["snap-job"].running
            assert [(s.desired_replicas, s.min_replicas) for s in states] == [(2, None), (1, None), (1, 1)]
            reads = [request for request in seen if request[0] == "GET"]
            assert sorted(reads) == sorted([
                ("GET", CQ), ("GET", kueue.path("cohorts")), ("GET", kueue.path("workloads")),
                ("GET", kueue.path("localqueues")), ("GET", f"{deployments}/snap"), ("GET", f"{hpas}/snap"),
                ("GET", f"{deployments}/snap-gone")]), "each object read once, a target not found too"
            seen.clear()
            # its own writes: each starts from what is held (no read), and what is read next says it
            assert cluster.set_cluster_queue_quota("snap-queue", 5) and cluster.scale_deployment(NS, "snap", 4)
            assert cluster.set_hpa_min_replicas(NS, "snap", 3)
            assert cluster.evict_workload(NS, "snap-job", jobs["snap-job"].uid, "test", "plan-snap")
            assert [method for method, _ in seen] == ["PATCH"] * 4, seen
            assert cluster.cluster_queue_quotas()["snap-queue"] == 5
            assert [(s.desired_replicas, s.min_replicas) for s in (
                cluster.target_state(t, 1) for t in (queue, deployment, hpa))] == [(5, None), (4, None), (4, 3)]
            assert not {w.name: w for w in cluster.workloads()}["snap-job"].active
            assert [method for method, _ in seen] == ["PATCH"] * 4, "what it wrote is read without a request"
            # someone else changes the queue after it was read: the write from the copy held meets a 409, reads
            # the queue again and keeps their change
            theirs = cluster.get(f"{CQ}/snap-queue")
            theirs["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["borrowingLimit"] = 1
            other._request("PUT", f"{CQ}/snap-queue", theirs)
            assert cluster.set_cluster_queue_quota("snap-queue", 6)
            stored = cluster.get(f"{CQ}/snap-queue")["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]
            assert (stored["nominalQuota"], stored["borrowingLimit"]) == (6, 1)
            assert cluster.cluster_queue_quotas()["snap-queue"] == 6
        seen.clear()
        assert cluster.cluster_queue_quotas()["snap-queue"] == 6 and seen == [("GET", CQ)]
        cluster.cluster_queue_quotas()
        assert seen == [("GET", CQ)] * 2, "outside a snapshot every read is a request"
    finally:
        del cluster._request
        other.close()
        for path in (f"{WL}/snap-job", f"{LQ}/snap-queue", f"{CQ}/snap-queue", f"{hpas}/snap", f"{deployments}/snap"):
            cluster.delete(path)


def _versioned(name: str, version: int) -> dict:
    return {"metadata": {"name": name, "resourceVersion": str(version)}}


@hypothesis.given(listed=st.dictionaries(st.sampled_from("abc"), st.integers(1, 50)),
       written=st.lists(st.tuples(st.sampled_from("abcd"), st.integers(1, 50)), max_size=12))
def test_a_snapshot_never_takes_an_object_back_in_time(listed, written):
    """Whatever order a reconcile's parallel writes answer in, a resource listed holds each object at the newest
    version seen (its LIST's, or a write's), new ones written since included; a target cache holds only what was
    got (a write to one not read is left to the read)."""
    from adapters.kube import _Snapshot

    snapshot = _Snapshot()
    snapshot.listed("clusterqueues", [_versioned(name, version) for name, version in listed.items()])
    for name, version in written:
        snapshot.put("clusterqueues", _versioned(name, version))
        snapshot.put("deployments@ns", _versioned(name, version))
    newest: dict[str, int] = dict(listed)
    for name, version in written:
        newest[name] = max(version, newest.get(name, 0))
    held = {o["metadata"]["name"]: int(o["metadata"]["resourceVersion"]) for o in snapshot.listing("clusterqueues")}
    assert held == newest
    assert snapshot.read("deployments@ns", ("", "a")) == (False, None)


# --------------------------------------------------------------------------- workloads
def test_workloads_read_as_kueue_v1beta2_defines_them(cluster):
    cluster.create(CQ, kueue.cluster_queue("wl-train", gpus=8))
    cluster.create(LQ, kueue.local_queue(NS, "team-a", "wl-train"))  # a LocalQueue named unlike its ClusterQueue
    cluster.create(WL, kueue.workload(NS, "pending", "team-a", gpus_per_pod=2, count=2, priority_class="high",
                                      priority=1000))
    time.sleep(1.1)  # creationTimestamp has whole seconds: the others are newer
    cluster.create(WL, kueue.workload(NS, "running", "team-a", gpus_per_pod=4, count=1,
                                      annotations={"headroom.dev/preemption-seconds": "45",
                                                   "headroom.dev/checkpoint-interval-seconds": "900",
                                                   "headroom.dev/last-checkpoint": "2026-01-05T10:00:00Z"}))
    kueue.admit(cluster, NS, "running", "wl-train")
    cluster.create(WL, kueue.workload(NS, "done", "team-a", gpus_per_pod=1))
    kueue.admit(cluster, NS, "done", "wl-train")
    kueue.finish(cluster, NS, "done")
    cluster.create(WL, kueue.workload(NS, "no-queue-known", "nowhere"))

    seen = counting(cluster)
    try:
        found = {w.name: w for w in cluster.workloads() if w.namespace == NS}
    finally:
        del cluster._request
    assert sorted(seen) == [("GET", kueue.path("localqueues")), ("GET", kueue.path("workloads"))], \
        "one LIST of Workloads (all namespaces) and one of LocalQueues, not one per queue"
    pending, running = found["pending"], found["running"]
    assert (pending.local_queue, pending.cluster_queue, pending.admitted, pending.active) == (
        "team-a", "wl-train", False, True)
    assert (pending.gpus, pending.priority, pending.priority_class) == (4, 1000, "high")
    assert (running.cluster_queue, running.admitted, running.active, running.gpus) == ("wl-train", True, True, 4)
    assert running.uid and running.uid == cluster.get(f"{WL}/running")["metadata"]["uid"]
    assert (running.preemption_seconds, running.checkpoint_interval_seconds) == (45.0, 900.0)
    assert running.last_checkpoint.isoformat() == "2026-01-05T10:00:00+00:00"
    assert found["done"].finished and not found["done"].admitted  # a finished Workload holds no quota
    assert found["no-queue-known"].cluster_queue is None
    order = [w.name for w in cluster.workloads() if w.namespace == NS]
    assert order[0] == "pending", order  # oldest first


def test_evict_and_requeue_a_workload(cluster):
    cluster.create(CQ, kueue.cluster_queue("ev-train", gpus=8))
    cluster.create(LQ, kueue.local_queue(NS, "ev-train"))
    cluster.create(WL, kueue.workload(NS, "victim", "ev-train", gpus_per_pod=2, count=2))
    kueue.admit(cluster, NS, "victim", "ev-train")
    uid = cluster.get(f"{WL}/victim")["metadata"]["uid"]

    assert cluster.evict_workload(NS, "victim", "not-its-uid", "reclaim", "plan-0") is False  # another object
    assert cluster.get(f"{WL}/victim")["spec"]["active"] is True
    assert cluster.evict_workload(NS, "victim", uid, reason="reclaim for inference", plan_id="plan-1") is True
    first = cluster.get(f"{WL}/victim")
    assert first["spec"]["active"] is False
    assert first["metadata"]["annotations"] == {EVICTED_BY_PLAN: "plan-1", EVICTION_REASON: "reclaim for inference"}
    # Repeating it (same plan after a restart, or a later plan) changes nothing.
    assert cluster.evict_workload(NS, "victim", uid, reason="reclaim for inference", plan_id="plan-1") is False
    assert cluster.evict_workload(NS, "victim", uid, reason="again", plan_id="plan-2") is False
    assert cluster.get(f"{WL}/victim")["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    stopping = {w.name: w for w in cluster.workloads()}["victim"]
    assert (stopping.admitted, stopping.active, stopping.evicted_by_plan) == (True, False, "plan-1")  # terminating

    # Not before Kueue has completed the eviction: its pods still hold the GPUs.
    assert cluster.requeue_workload(NS, "victim", uid) is False
    kueue.complete_eviction(cluster, NS, "victim")
    stopped = {w.name: w for w in cluster.workloads()}["victim"]
    assert (stopped.admitted, stopped.active, stopped.cluster_queue) == (False, False, "ev-train")
    assert cluster.requeue_workload(NS, "victim", "not-its-uid") is False
    assert cluster.requeue_workload(NS, "victim", uid) is True
    back = cluster.get(f"{WL}/victim")
    assert back["spec"]["active"] is True and not (back["metadata"].get("annotations") or {})
    assert cluster.requeue_workload(NS, "victim", uid) is False  # once

    # A Workload someone else deactivated is not headroom's to requeue.
    cluster.create(WL, kueue.workload(NS, "paused-by-user", "ev-train"))
    cluster._request("PATCH", f"{WL}/paused-by-user", {"spec": {"active": False}},
                     content_type="application/merge-patch+json")
    assert cluster.requeue_workload(NS, "paused-by-user", None) is False
    with pytest.raises(NotFound):
        cluster.evict_workload(NS, "gone", None, "x", "plan-3")


def test_an_eviction_is_revalidated_on_the_object_it_writes(cluster):
    """The plan evicts what its view showed running; the write re-reads the Workload (a stale cached copy costs a
    409 and a fresh read) and re-checks uid, active and Finished, but not whether it still holds quota. A Workload
    Kueue had meanwhile preempted or requeued itself (pending, no admission) was deactivated anyway, counted as a
    preemption with its work lost, and later reactivated by headroom: one that held no GPU."""
    cluster.create(CQ, kueue.cluster_queue("ev-pending", gpus=8))
    cluster.create(LQ, kueue.local_queue(NS, "ev-pending"))
    cluster.create(WL, kueue.workload(NS, "queued", "ev-pending", gpus_per_pod=2))
    uid = cluster.get(f"{WL}/queued")["metadata"]["uid"]
    before = cluster.get(f"{WL}/queued")["metadata"]["resourceVersion"]
    assert cluster.evict_workload(NS, "queued", uid, "reclaim", "plan-p") is False
    assert cluster.get(f"{WL}/queued")["metadata"]["resourceVersion"] == before  # untouched
    kueue.admit(cluster, NS, "queued", "ev-pending")
    assert cluster.evict_workload(NS, "queued", uid, "reclaim", "plan-p") is True  # admitted: evicted


def test_an_eviction_of_a_workload_admitted_since_into_another_queue_is_not_made(cluster):
    """The plan evicts a Workload running in a training queue it lends to (ev-lent), to take back GPUs lent there.
    Between the executor's look (running there) and the write, Kueue evicted it, its queue was changed to its team's
    own (ev-own), and Kueue admitted it there: the write's first attempt met a 409, and the re-read was checked for
    uid, active, Finished, Evicted and an admission, not for where: a job running in a queue headroom lends nothing
    to was stopped (its work lost) for GPUs it does not hold. The write is made only while it runs where planned."""
    from controller.actions import Evict
    from controller.executor import execute

    for queue in ("ev-lent", "ev-own"):
        cluster.create(CQ, kueue.cluster_queue(queue, gpus=8))
        cluster.create(LQ, kueue.local_queue(NS, queue))
    cluster.create(WL, kueue.workload(NS, "moved", "ev-lent", gpus_per_pod=2))
    kueue.admit(cluster, NS, "moved", "ev-lent")
    uid = cluster.get(f"{WL}/moved")["metadata"]["uid"]
    real, moved = cluster._request, []

    def racing(method, path, body=None, **kw):
        if method == "PATCH" and path == f"{WL}/moved" and not moved:  # re-admitted elsewhere, just before the write
            moved.append(path)
            kueue.complete_eviction(cluster, NS, "moved")
            real("PATCH", f"{WL}/moved", {"spec": {"queueName": "ev-own"}},
                 content_type="application/merge-patch+json")
            kueue.admit(cluster, NS, "moved", "ev-own")
        return real(method, path, body, **kw)

    cluster._request = racing
    try:
        [outcome] = execute([Evict(f"{NS}/moved", uid, "ev-lent", 2, "planned", f"{NS}/chat", 0.0, "plan-m",
                                   "slack taken back")], cluster)
    finally:
        del cluster._request
    assert moved, "the write was not made"
    assert outcome.error is None and not outcome.applied
    stored = cluster.get(f"{WL}/moved")
    assert stored["spec"]["active"] is True and stored["status"]["admission"]["clusterQueue"] == "ev-own"
    assert EVICTED_BY_PLAN not in (stored["metadata"].get("annotations") or {})


def test_a_workload_kueue_is_preempting_is_stopping_not_running(cluster):
    """Kueue preempts on its own within a queue (withinClusterQueue: LowerPriority, a higher-priority Workload
    pending): the victim keeps its admission, its pods stopping, with Evicted=True. headroom counted it running,
    could pick it as a victim and deactivate it, counting a preemption (and the work lost) that was Kueue's. It is
    stopping: its GPUs are on their way out, not headroom's to take, and Kueue requeues it itself."""
    cluster.create(CQ, kueue.cluster_queue("kp-train", gpus=8))
    cluster.create(LQ, kueue.local_queue(NS, "kp-train"))
    for name in ("kp-low", "kp-other"):
        cluster.create(WL, kueue.workload(NS, name, "kp-train", gpus_per_pod=4))
        kueue.admit(cluster, NS, name, "kp-train")
    kueue.preempt(cluster, NS, "kp-low")
    uid = cluster.get(f"{WL}/kp-low")["metadata"]["uid"]

    training, uids, stopped = training_view(cluster.workloads(), {"kp-train"}, time.time())
    assert list(training.ids) == [f"{NS}/kp-other"] and set(uids) == {f"{NS}/kp-other"}
    assert training.terminating_gpus == 4 and not stopped  # its GPUs still held, while it stops
    before = cluster.get(f"{WL}/kp-low")["metadata"]["resourceVersion"]
    assert cluster.evict_workload(NS, "kp-low", uid, "reclaim", "plan-k") is False
    assert cluster.get(f"{WL}/kp-low")["metadata"]["resourceVersion"] == before  # not deactivated, not annotated

    kueue.complete_eviction(cluster, NS, "kp-low")  # Kueue requeues its own victim (still active): pending
    kueue.admit(cluster, NS, "kp-low", "kp-train")  # admitted again, Evicted no longer True: running
    training, _, _ = training_view(cluster.workloads(), {"kp-train"}, time.time())
    assert sorted(training.ids) == [f"{NS}/kp-low", f"{NS}/kp-other"] and training.terminating_gpus == 0


# --------------------------------------------------------------------------- status and events
def test_policy_status_conditions_and_events(cluster, kube_server):
    cluster.create(RP, policy("chat"))
    assert "chat" in {p["metadata"]["name"] for p in cluster.reservation_policies(NS)}
    assert "chat" in {p["metadata"]["name"] for p in cluster.reservation_policies()}
    assert cluster.reservation_policies("elsewhere") == []
    ready = Condition("Ready", "True", "PlanApplied", "reserved 10 GPUs")
    first = PolicyStatus(reserved_gpus=10, headroom_gpus=2, plan_id="plan-7", forecast_demand=311.5,
                         conditions=(ready, Condition("HeadroomAtRisk", "False", "WithinQuantile")))
    assert cluster.patch_policy_status(NS, "chat", first) is True
    assert cluster.patch_policy_status(NS, "chat", replace(first, plan_id="plan-8")) is False  # nothing new: unwritten
    status = cluster.get_reservation_policy(NS, "chat")["status"]
    assert (status["reservedGpus"], status["headroomGpus"]) == (10, 2) and "slackGpus" not in status
    assert status["planId"] == "plan-7" and status["forecastDemand"] == 311.5
    conds = {c["type"]: c for c in status["conditions"]}
    assert conds["Ready"]["status"] == "True" and conds["Ready"]["reason"] == "PlanApplied"
    first_ready = conds["Ready"]["lastTransitionTime"]

    time.sleep(1.1)  # RFC 3339 seconds: a new transition gets a later stamp
    cluster.patch_policy_status(NS, "chat", PolicyStatus(
        reserved_gpus=12, headroom_gpus=2,
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
    assert (row["Mode"], row["Reserved"], row["Headroom"], row["Ready"]) == ("forecast-only", 12, 2, "True")

    about = ObjectRef.of(cluster.get_reservation_policy(NS, "chat"))
    cluster.emit_event(about, "HeadroomAtRisk", "demand 20% above the p90 forecast", type="Warning")
    cq_ref = ObjectRef.of(cluster.create(CQ, kueue.cluster_queue("events-cq")))
    cluster.emit_event(cq_ref, "QuotaLowered", "nominalQuota 8 -> 5 (plan-7)")
    events = cluster.list_events(about)
    assert [(e["reason"], e["type"]) for e in events] == [("HeadroomAtRisk", "Warning")]
    assert events[0]["involvedObject"]["uid"] == about.uid
    assert [e["reason"] for e in cluster.list_events(cq_ref)] == ["QuotaLowered"]
    with pytest.raises(ValueError):
        Condition("Healthy", "True", "X")


def test_realized_error_says_the_same_on_kubernetes_and_the_embedded_cluster(cluster):
    """The merge patch merges maps: some horizons scored kept the horizons scored before beside them on Kubernetes
    (1h 0.25 written over 1h/6h/24h read back 6h 0.75 and 24h 1.25), where the embedded cluster replaced the map; none
    scored this time ({}: no forecast in force, a replica's first refit not done) kept the last one on Kubernetes,
    where the embedded cluster cleared it. On both now: the horizons scored now, all of them; the last ones while none
    is scored; none for a policy not planned (None)."""
    cluster.create(RP, policy("errors"))
    world = EmbeddedCluster(8, [], {}, 0.0)
    full, partial = {"1h": 0.5, "6h": 0.75, "24h": 1.25}, {"1h": 0.25}
    for sent, held in [(full, full), (partial, partial), ({}, partial), (full, full), (None, None), ({}, None),
                       (partial, partial)]:
        status = PolicyStatus(reserved_gpus=4, headroom_gpus=2, realized_error=sent,
                              conditions=(Condition("Ready", "True", "Active"),))
        cluster.patch_policy_status(NS, "errors", status)
        world.patch_policy_status(NS, "errors", status)
        on_kube = cluster.get_reservation_policy(NS, "errors")["status"].get("realizedError")
        embedded = world.statuses[(NS, "errors")]["realizedError"] or None
        assert on_kube == embedded == held, (sent, on_kube, embedded)


HOLDINGS = st.builds(
    lambda kind, name, namespace, capacity, queues, mode: {
        "target": {"kind": kind, "name": name, **namespace}, "capacity": capacity, **queues, "mode": mode},
    st.sampled_from(["Deployment", "HorizontalPodAutoscaler", "ClusterQueue"]), st.sampled_from(["a", "b"]),
    st.sampled_from([{}, {"namespace": "other"}]), st.sampled_from([{}, {"gpusPerReplica": 2}]),
    st.fixed_dictionaries({}, optional={"inferenceClusterQueue": st.sampled_from(["q-a", "q-b"]),
                                        "trainingClusterQueues": st.lists(st.sampled_from(["t-a", "t-b"]),
                                                                          unique=True)}),
    st.sampled_from(["forecast-only", "active"]))


@hypothesis.settings(max_examples=20, deadline=None)
@hypothesis.given(holdings=st.lists(st.tuples(st.none() | HOLDINGS, st.none() | st.lists(HOLDINGS, min_size=1,
                                                                                          max_size=3),
                                              st.sampled_from([None, False])),
                                    min_size=1, max_size=4))
def test_a_status_s_holding_says_the_same_on_kubernetes_and_the_embedded_cluster(cluster, holdings):
    """What a policy holds (status.holding, read back by a restarted controller where no spec says it), the targets
    an edit left behind (status.left, each as a holding) and whether another policy holds its target
    (status.holdsTarget) read back as written, whole, on Kubernetes as on the embedded cluster: a merge patch merges
    maps, so a queue or namespace said before and not now would be left in it; none written (None) removes it; the
    same said again is no write."""
    cluster.delete(f"{RP}/holding")
    cluster.create(RP, policy("holding"))
    world = EmbeddedCluster(8, [], {}, 0.0)
    for holding, left, holds_target in holdings:
        status = PolicyStatus(reserved_gpus=0, headroom_gpus=0, holding=holding, left=left, holds_target=holds_target,
                              conditions=(Condition("Ready", "False", "InvalidSpec", "spec.target.name: required"),))
        cluster.patch_policy_status(NS, "holding", status)
        world.patch_policy_status(NS, "holding", status)
        on_kube = cluster.get_reservation_policy(NS, "holding")["status"]
        said = world.statuses[(NS, "holding")]
        assert (on_kube.get("holding"), on_kube.get("left"), on_kube.get("holdsTarget")) == (
            said["holding"], said["left"], said["holdsTarget"]) == (holding, left, holds_target), \
            (holding, left, holds_target, on_kube)
        assert cluster.patch_policy_status(NS, "holding", status) is False  # said: nothing new


def test_a_refusal_s_status_removes_the_plan_id_an_older_controller_left(cluster):
    """A status that said nothing new but its plan id was not written: an older controller's refusal that kept its last
    plan's id (the same numbers and conditions) kept it on every rewrite for up to an hour, read as a plan in force."""
    cluster.create(RP, policy("left"))
    refused = PolicyStatus(reserved_gpus=0, headroom_gpus=0, observed_generation=1,
                           conditions=(Condition("Ready", "False", "InvalidSpec", "spec.leadTime: not a duration"),))
    cluster.patch_policy_status(NS, "left", replace(refused, plan_id="by-an-older-controller"))
    assert cluster.get_reservation_policy(NS, "left")["status"]["planId"] == "by-an-older-controller"
    assert cluster.patch_policy_status(NS, "left", refused) is True
    assert "planId" not in cluster.get_reservation_policy(NS, "left")["status"]
    assert cluster.patch_policy_status(NS, "left", refused) is False  # said: nothing new


@pytest.mark.parametrize("in_a_snapshot", [False, True])
def test_a_status_planned_for_a_policy_deleted_and_created_again_is_not_written_onto_the_new_one(cluster,
                                                                                                 in_a_snapshot):
    """A status is planned for the policy object the reconcile read. Deleted and created again under its name before
    the status lands (written beside, after the reconcile), the old object's plan, its planId, reservation and
    status.holding (what it held: Deployment d0), was written onto the new object, whose spec names d1: a controller
    restarted then reads the new policy as one edited off d0, holding d0's GPUs for it. The write is of the object
    read (its uid), or none; in a reconcile too, where the first read is the old object as the reconcile read it."""
    from controller.actions import PatchStatus
    from controller.executor import execute

    name = f"again-{int(in_a_snapshot)}"
    old = ObjectRef.of(cluster.create(RP, policy(name, target={"kind": "Deployment", "name": "d0"})))
    planned = PolicyStatus(reserved_gpus=6, headroom_gpus=2, plan_id="plan-of-the-old-one", observed_generation=1,
                           holding={"capacity": {"gpusPerReplica": 1}, "target": {"kind": "Deployment", "name": "d0"}},
                           conditions=(Condition("Ready", "True", "PlanApplied", "reserved 6 GPUs on d0"),))
    with cluster.snapshot() if in_a_snapshot else contextlib.nullcontext():
        if in_a_snapshot:
            cluster.reservation_policies(NS)  # the reconcile's read: the old object
        cluster.delete(f"{RP}/{name}")
        new = cluster.create(RP, policy(name, target={"kind": "Deployment", "name": "d1"}))
        [outcome] = execute([PatchStatus(old, planned)], cluster)
    assert outcome.error is None and not outcome.applied
    stored = cluster.get_reservation_policy(NS, name)
    assert stored["metadata"]["uid"] == new["metadata"]["uid"] != old.uid
    assert "status" not in stored or not stored["status"], stored["status"]
    # the new object's own status is written as any
    [outcome] = execute([PatchStatus(ObjectRef.of(new), replace(planned, plan_id="plan-of-the-new-one"))], cluster)
    assert outcome.applied and cluster.get_reservation_policy(NS, name)["status"]["planId"] == "plan-of-the-new-one"


def test_plan_summary_is_one_configmap_written_only_when_it_changes(cluster):
    summary = cluster.plan_summary(NS, "plan-summary-test")
    first = {"planId": "plan-1", "slackGpus": "40", "headroomAtRisk": "False"}
    before = sum(cluster.requests.values())
    assert summary.write(first) and sum(cluster.requests.values()) == before + 1  # created by one apply
    held = summary.read()
    assert {k: held[k] for k in first} == first and held["lastPlanTime"].endswith("Z")
    # a new plan that says the same: no request
    before = sum(cluster.requests.values())
    assert not summary.write({**first, "planId": "plan-2"}) and sum(cluster.requests.values()) == before
    assert summary.read()["planId"] == "plan-1"
    # a number that moved: one request, the whole summary replaced
    assert summary.write({"planId": "plan-3", "slackGpus": "38", "headroomAtRisk": "True"})
    assert {k: summary.read()[k] for k in first} == {"planId": "plan-3", "slackGpus": "38", "headroomAtRisk": "True"}


def kept_as_before(store: ConfigMapForecastStore, data: dict[str, str], issued: int, value: str) -> dict[str, str]:
    """A forecast store ConfigMap's data after `store` records `value` at `issued`, by the rule record followed before
    it read a forecast's periods off its index: every forecast older than the newest by `whole_seconds` parsed whole,
    and cut to the `rows` hours from the one it was issued in where it held more."""
    data = {**data, str(issued): value}
    kept = sorted(int(k) for k in data if k.isdigit() and int(k) >= issued - store.keep_seconds)
    for k in kept:
        if store.rows is None or k >= kept[-1] - store.whole_seconds:
            continue
        try:
            doc = json.loads(data[str(k)])
            rows = [row for row in zip(doc["index"], doc["values"], strict=True) if row[0] < k // 3600 * 3600
                    + store.rows * 3600]
            if len(rows) < len(doc["index"]):
                doc["index"], doc["values"] = [t for t, _ in rows], [v for _, v in rows]
                data[str(k)] = json.dumps(doc, separators=(",", ":"))
        except (ValueError, KeyError, TypeError):
            pass
    while len(kept) > 1 and sum(len(data[str(k)]) + len(str(k)) for k in kept) > store.max_bytes:
        kept.pop(0)
    return {str(k): data[str(k)] for k in kept}


def forecast(issued: pd.Timestamp, periods: int, quantiles=(0.1, 0.5, 0.9)) -> pd.DataFrame:
    index = pd.date_range(issued.floor("h"), periods=periods, freq="h")
    values = [[issued.hour + i + q for q in quantiles] for i in range(periods)]
    frame = pd.DataFrame(values, index=index, columns=list(quantiles))
    frame.attrs.update({FORECAST_SCALE: 12.5, FORECAST_GENERATION: 3, FORECAST_MODEL: "auto: ets"})
    return frame


STORE_SETTINGS = [  # what a replica may run with; one restarted with other settings reads what the last one wrote
    {"keep_seconds": 6 * 3600.0, "rows": 2, "whole_seconds": 0.0},
    {"keep_seconds": 6 * 3600.0, "rows": 2, "whole_seconds": 7200.0},
    {"keep_seconds": 8 * 3600.0, "rows": 4, "whole_seconds": 3600.0},
    {"keep_seconds": 8 * 3600.0, "rows": None, "whole_seconds": 0.0},
    {"keep_seconds": 8 * 3600.0, "rows": 3, "whole_seconds": 0.0, "max_bytes": 1500},
]
HAND_EDITS = [  # what an operator may write into a key: a whole forecast back, as _encode writes it or reformatted
    lambda whole: whole, lambda whole: json.dumps(json.loads(whole)), lambda whole: "{not json",
    lambda whole: '{"index": 1, "columns": [], "values": 2}', lambda whole: '{"index":[1,2,3,4,5,6,7]}',
]


@hypothesis.settings(max_examples=25, deadline=None)
@hypothesis.given(st.lists(st.tuples(st.integers(-2, 3), st.integers(1, 8), st.sampled_from(range(len(STORE_SETTINGS))),
                                     st.none() | st.tuples(st.integers(1, 9), st.sampled_from(range(len(HAND_EDITS))))),
                           min_size=1, max_size=10))
def test_the_forecast_store_keeps_what_it_kept_when_it_parsed_every_forecast_on_every_record(cluster, steps):
    """record reads how many periods a stored forecast holds off its index, not its whole JSON: the ConfigMap holds
    exactly what it held when every record parsed every older forecast whole (kept_as_before), whatever the order of
    issue times, the settings of the replica recording (a restart with other rows, whole_seconds, keep or byte
    budget), and what was written into it by hand in between (a whole forecast back under an older key, reformatted,
    not JSON, not a forecast). Cutting only the forecasts that had just aged past whole_seconds would leave a forecast
    written back whole, or one a replica with a longer whole_seconds had kept whole, uncut for good."""
    series = f"{NS}.store-property"
    path = f"/api/v1/namespaces/{NS}/configmaps/{cluster.forecast_store(NS).name(series)}"
    try:
        cluster.delete(path)
    except NotFound:
        pass
    expected: dict[str, str] = {}
    issued = pd.Timestamp("2026-03-02T08:05Z")
    for advance, periods, which, edit in steps:
        issued += pd.Timedelta(hours=advance)
        store = cluster.forecast_store(NS, quantiles=None, **STORE_SETTINGS[which])
        frame = forecast(issued, periods)
        store.record(series, issued, frame)
        expected = kept_as_before(store, expected, int(issued.timestamp()), store._encode(frame))
        if edit is not None:
            hours_back, how = edit
            key = str(int((issued - pd.Timedelta(hours=hours_back)).timestamp()))
            text = HAND_EDITS[how](store._encode(forecast(issued - pd.Timedelta(hours=hours_back), 8)))
            cluster._update(path, lambda cm, edited={key: text}: {"data": edited})
            expected[key] = text
        assert (cluster.get(path).get("data") or {}) == expected
    cluster.delete(path)


def test_a_forecast_record_parses_whole_only_the_forecast_it_cuts(cluster, monkeypatch):
    """A ConfigMap holding 50 h of hourly forecasts 48 h ahead, as `headroom run` keeps them (the 24 hours from the
    issue hour of those over keep_forecast_seconds old): each record parsed the JSON of every older forecast (48 of
    them) to see whether it was to be cut, all but one cut on earlier records already (2.4 ms of the record's 2.9 ms
    CPU in the store, measured). One record now parses only the forecast that has just aged past
    keep_forecast_seconds, and cuts it."""
    from cli.run import shared_forecast_store

    store = shared_forecast_store(cluster, NS, 24, 7200.0)
    series = f"{NS}.store-parses"
    path = f"/api/v1/namespaces/{NS}/configmaps/{store.name(series)}"
    try:
        cluster.delete(path)
    except NotFound:
        pass
    start = pd.Timestamp("2026-03-02T00:01Z")
    quantiles = (0.1, 0.5, 0.9, 0.95, 0.99)
    for issued in pd.date_range(start, periods=51, freq="h"):
        store.record(series, issued, forecast(issued, 48, quantiles))
    held = store.load(series)
    assert len(held) == 51 and [len(f) for f in held.values()] == [24] * 48 + [48] * 3
    stored, parsed = set(cluster.get(path)["data"].values()), []
    loads = json.loads

    def counted(text, *args, **kwargs):
        if text in stored:
            parsed.append(text)
        return loads(text, *args, **kwargs)

    monkeypatch.setattr(json, "loads", counted)
    store.record(series, start + pd.Timedelta(hours=51), forecast(start + pd.Timedelta(hours=51), 48, quantiles))
    monkeypatch.undo()
    assert len(parsed) == 1, f"{len(parsed)} stored forecasts parsed whole"
    held = store.load(series)
    assert len(held) == 51 and [len(f) for f in held.values()] == [24] * 48 + [48] * 3
    cluster.delete(path)


def test_a_stored_forecast_keeps_the_hours_realized_error_scores_when_it_begins_before_its_issue_hour(cluster):
    """A forecast whose last complete hours were missing begins before its issue hour (controller.observe.issue
    lengthens it by them), and realized error scores h hours ahead on the h-th hour from the issue hour: cut to its
    first 24 rows, the stored forecast lost its 24 h target (issued 08:05 from 06:00, rows 06:00-05:00 where 1-24 h
    ahead are 08:00-07:00). It is cut to the 24 hours from its issue hour, and each of 1, 6 and 24 h ahead is
    scored."""
    from cli.run import shared_forecast_store
    from training.realized import realized_errors

    store = shared_forecast_store(cluster, NS, 24, 0.0)
    series = f"{NS}.store-early"
    try:
        cluster.delete(f"/api/v1/namespaces/{NS}/configmaps/{store.name(series)}")
    except NotFound:
        pass
    issued = pd.Timestamp("2026-03-02T08:05Z")
    early = forecast(issued, 50).set_axis(pd.date_range("2026-03-02T06:00Z", periods=50, freq="h"))
    store.record(series, issued, early)
    store.record(series, issued + pd.Timedelta(hours=1), forecast(issued + pd.Timedelta(hours=1), 48))
    kept = store.load(series)[issued]
    assert (kept.index[0], kept.index[-1]) == (pd.Timestamp("2026-03-02T06:00Z"), pd.Timestamp("2026-03-03T07:00Z"))
    actuals = pd.Series(1.0, index=pd.date_range("2026-03-02T00:00Z", periods=72, freq="h"))
    scored = realized_errors({issued: kept}, actuals, 1.0)
    assert sorted(scored["horizon"]) == [1, 6, 24]


def test_a_forecast_configmap_goes_once_pruned_of_all_it_held_unless_written_since_or_holding_more(cluster,
                                                                                                      monkeypatch):
    """A policy deleted had its forecasts pruned, and its ConfigMap stayed, empty, for good (one per policy that ever
    was: the Role granted no delete). It goes once it holds nothing: an empty one an earlier version left too; not
    one with a key someone put beside the forecasts, nor one a forecast was recorded into between the prune's read
    and its delete (the resourceVersion read is the delete's precondition)."""
    store = cluster.forecast_store(NS, quantiles=None)
    issued = pd.Timestamp("2026-03-02T08:05Z")
    every = pd.Timestamp.max.tz_localize("UTC")
    gone, beside, meanwhile, emptied = (f"{NS}.prune-{name}" for name in ("gone", "beside", "meanwhile", "emptied"))
    paths = {series: f"/api/v1/namespaces/{NS}/configmaps/{store.name(series)}"
             for series in (gone, beside, meanwhile, emptied)}
    for series in paths:
        cluster.delete(paths[series])
        for hours in (0, 1):
            store.record(series, issued + pd.Timedelta(hours=hours), forecast(issued, 4))
    cluster._update(paths[beside], lambda cm: {"data": {"notes": "a user's"}})
    cluster._update(paths[emptied], lambda cm: {"data": {k: None for k in cm["data"]}})  # as the code before left it
    request = cluster._request
    later = issued + pd.Timedelta(hours=2)

    def recorded_meanwhile(method, path, *args, **kwargs):
        if method == "DELETE" and path == paths[meanwhile] and not store.load(meanwhile):
            store.record(meanwhile, later, forecast(later, 4))
        return request(method, path, *args, **kwargs)

    monkeypatch.setattr(cluster, "_request", recorded_meanwhile)
    assert [store.prune(series, every) for series in paths] == [2, 2, 2, 0]
    for series in (gone, emptied):
        with pytest.raises(NotFound):
            cluster.get(paths[series])
    assert cluster.get(paths[beside])["data"] == {"notes": "a user's"}
    assert list(store.load(meanwhile)) == [later]
    assert store.prune(gone, every) == 0
    cluster.delete(paths[beside])
    cluster.delete(paths[meanwhile])


def test_a_forecast_configmap_a_role_may_not_delete_stays_empty_and_the_prune_is_done(cluster, kube_server, caplog):
    """A Role from before the controller deleted emptied ConfigMaps (no delete verb): the forecasts are pruned all
    the same, and the ConfigMap stays, empty, said; not a failed prune, tried again at every reconcile."""
    api = kube_server.apiserver
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}"
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "no-delete"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "patch"]}]}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "no-delete"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "no-delete"},
               "subjects": [{"kind": "User", "name": "headroom-viewer", "apiGroup": "rbac.authorization.k8s.io"}]}
    cluster.apply(f"{rbac}/roles/no-delete", role)
    cluster.apply(f"{rbac}/rolebindings/no-delete", binding)
    viewer = KubeCluster.from_token(api.host, api.viewer_token, ca_file=str(api.ca_file), retries=0)
    store = viewer.forecast_store(NS)
    series = f"{NS}.prune-no-delete"
    path = f"/api/v1/namespaces/{NS}/configmaps/{store.name(series)}"
    issued = pd.Timestamp("2026-03-02T08:05Z")

    def recorded() -> bool:  # the authorizer takes the new role up from its cache a moment later
        try:
            store.record(series, issued, forecast(issued, 4))
            return True
        except ClusterError:
            return False

    try:
        cluster.delete(path)
        eventually(recorded, "the viewer to record a forecast", 15)
        with caplog.at_level(logging.WARNING, logger="adapters.kube"):
            assert store.prune(series, pd.Timestamp.max.tz_localize("UTC")) == 1
        assert store.load(series) == {} and not cluster.get(path).get("data")
        assert f"{series}: its ConfigMap {NS}/{store.name(series)} stays, empty" in caplog.text
    finally:
        viewer.close()
        cluster.delete(path)
        cluster.delete(f"{rbac}/rolebindings/no-delete")
        cluster.delete(f"{rbac}/roles/no-delete")


def test_rbac_is_real_forbidden_is_not_retried(kube_server):
    api = kube_server.apiserver
    viewer = KubeCluster.from_token(api.host, api.viewer_token, ca_file=str(api.ca_file), retries=5,
                                    sleep=lambda s: pytest.fail("403 must not be retried"))
    with pytest.raises(ClusterError) as info:
        viewer.reservation_policies(NS)
    assert info.value.status == 403
    viewer.close()


RBAC = "/apis/rbac.authorization.k8s.io/v1"


def grant_viewer_cluster_queues(cluster, name: str, *verbs: str) -> None:
    """A ClusterRole `name` with `verbs` on ClusterQueues, bound to the viewer (applied again: its verbs changed)."""
    cluster.apply(f"{RBAC}/clusterroles/{name}", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name},
        "rules": [{"apiGroups": ["kueue.x-k8s.io"], "resources": ["clusterqueues"], "verbs": list(verbs)}]})
    cluster.apply(f"{RBAC}/clusterrolebindings/{name}", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "User", "name": "headroom-viewer", "apiGroup": "rbac.authorization.k8s.io"}]})


def lists(informer):
    """Whether `informer` can list now: the authorizer takes a new role up from its cache a moment later."""
    def listed() -> bool:
        try:
            informer.relist()
            return True
        except ClusterError:
            return False
    return listed


def test_a_watch_rbac_refuses_names_the_verb_and_resource_it_lacks(cluster, kube_server):
    """A ClusterRole without `watch` on a resource headroom caches: the LIST works, the WATCH is refused (403) and the
    cache's warning said the server's Status as a bytes repr cut at 200 characters, its quotes escaped, so the API
    group (and, for a ServiceAccount's longer name, the resource) was cut off. It says the server's message whole."""
    from adapters.kube import Informer

    api = kube_server.apiserver
    grant_viewer_cluster_queues(cluster, "list-no-watch", "list")
    viewer = KubeCluster.from_token(api.host, api.viewer_token, ca_file=str(api.ca_file), retries=0)
    informer = Informer(viewer, CQ)
    try:
        eventually(lists(informer), "the viewer to list ClusterQueues", 15)
        with pytest.raises(ClusterError) as refused:
            informer._watch()
        assert refused.value.status == 403
        assert str(refused.value) == (f"WATCH {CQ}: HTTP 403: clusterqueues.kueue.x-k8s.io is forbidden: User "
                                      '"headroom-viewer" cannot watch resource "clusterqueues" in API group '
                                      '"kueue.x-k8s.io" at the cluster scope')
    finally:
        viewer.close()
        cluster.delete(f"{RBAC}/clusterrolebindings/list-no-watch")
        cluster.delete(f"{RBAC}/clusterroles/list-no-watch")


def test_a_watch_rbac_refuses_is_said_once_and_the_cache_polls(cluster, kube_server, caplog):
    """A ClusterRole with `list` but not `watch` on a resource headroom caches: the cache listed again after every
    refused WATCH, with a warning each time, the back-off doubling up to 30 s: five warnings in its first 3 s, then one
    every 30 s for as long as it ran, each saying it would list again, as for a server gone. It says once what the
    controller lacks and that it polls (a LIST every poll_seconds) instead, polls quietly, keeps following changes, and
    says when a watch is allowed again."""
    from adapters.kube import Informer

    api = kube_server.apiserver
    grant_viewer_cluster_queues(cluster, "polled", "list")
    viewer = KubeCluster.from_token(api.host, api.viewer_token, ca_file=str(api.ca_file), retries=0)
    informer = Informer(viewer, CQ)
    informer.poll_seconds = 0.5

    def said(level: int) -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == "adapters.kube" and r.levelno == level]

    try:
        eventually(lists(informer), "the viewer to list ClusterQueues", 15)
        with caplog.at_level(logging.INFO, logger="adapters.kube"):
            informer.start()
            eventually(lambda: informer.lists >= 5, "the cache to list again", 15)  # the old back-off: by 3 s
            cluster.create(CQ, kueue.cluster_queue("polled", gpus=4))  # no read asks: the polls bring it
            eventually(lambda: informer.get(("", "polled")) is not None, "the polls to bring a new ClusterQueue", 15)
            assert informer.synced() and not informer.connected
            assert said(logging.WARNING) == [
                f"WATCH {CQ}: HTTP 403: clusterqueues.kueue.x-k8s.io is forbidden: User \"headroom-viewer\" cannot "
                'watch resource "clusterqueues" in API group "kueue.x-k8s.io" at the cluster scope; polling instead: '
                "listing every 0.5 s until a watch is allowed"]
            grant_viewer_cluster_queues(cluster, "polled", "list", "watch")
            eventually(lambda: informer.connected, "the watch once RBAC allows it", 15)
            assert said(logging.INFO)[-1] == f"watch {CQ}: allowed now: streaming again, polling ended"
            assert len(said(logging.WARNING)) == 1
    finally:
        informer.stop()
        viewer.close()
        cluster.delete(f"{CQ}/polled")
        cluster.delete(f"{RBAC}/clusterrolebindings/polled")
        cluster.delete(f"{RBAC}/clusterroles/polled")


def test_a_token_refreshed_by_the_client_library_is_sent_within_a_second(kube_server, monkeypatch):
    """The request headers are made again at most every ADDRESS_SECONDS (kube.py _address): a token the library's
    refresh hook replaces (a kubeconfig exec plugin, the projected service-account token) is used from then on."""
    import adapters.kube as kube

    api = kube_server.apiserver
    monkeypatch.setattr(kube, "ADDRESS_SECONDS", 0.2)
    c = KubeCluster.from_token(api.host, api.token, ca_file=str(api.ca_file))
    c.get("/api/v1/namespaces/default")
    c.api_client.configuration.api_key["BearerToken"] = api.viewer_token  # as a refresh hook does
    time.sleep(0.3)
    with pytest.raises(ClusterError) as info:
        c.apply("/api/v1/namespaces/default/configmaps/rotated", {
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "rotated", "namespace": "default"}})
    assert info.value.status == 403 and "viewer" in str(info.value)
    c.close()


# --------------------------------------------------------------------------- leader election
def test_leader_election_one_leader_and_takeover_after_expiry(cluster):
    a = cluster.leader_elector(NS, "headroom-controller", "pod-a", lease_seconds=2)
    b = cluster.leader_elector(NS, "headroom-controller", "pod-b", lease_seconds=2)
    assert a.try_acquire_or_renew() is True
    assert b.try_acquire_or_renew() is False
    for _ in range(3):  # a keeps renewing: b never gets in
        time.sleep(0.7)
        assert a.try_acquire_or_renew() is True
        renewed = time.monotonic()  # b's read below sees this renewal
        assert b.try_acquire_or_renew() is False
        assert a.is_leader and not b.is_leader
    assert a.holder() == "pod-a"
    # a stops renewing (crashed): b takes over only after a full lease duration from the last renewal it saw (timed
    # from before b saw it; timed from after the reads above, slow reads there ate into the 1.5 s it asserted)
    while not b.try_acquire_or_renew():
        assert time.monotonic() - renewed < 10
        time.sleep(0.25)
    assert time.monotonic() - renewed >= 2
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

        def run(e, barrier, results):
            barrier.wait()
            results[e.identity] = e.try_acquire_or_renew()

        threads = [threading.Thread(target=run, args=(e, barrier, results)) for e in electors]
        for t in threads:
            t.start()
        for t in threads:
            t.join(20)
        assert sorted(results.values()) == [False, True], results
        winner = next(i for i, won in results.items() if won)
        assert electors[0].holder() == winner


# --------------------------------------------------------------------------- the watch cache, and outages (keep last)
def eventually(check, what: str, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_watch_cache_serves_reads_without_requests_and_follows_changes(cluster, kube_server):
    api = kube_server.apiserver
    watching = KubeCluster.from_kubeconfig(str(api.kubeconfig()), request_timeout=5).watch()
    try:
        cluster.create(CQ, kueue.cluster_queue("watched", gpus=3))
        cluster.create(LQ, kueue.local_queue(NS, "watched"))
        cluster.create(WL, kueue.workload(NS, "watched-job", "watched", gpus_per_pod=2))
        # the Workload's ClusterQueue is read through its LocalQueue: both watch events in, not only the Workload's
        eventually(lambda: {w.name: w.cluster_queue for w in watching.workloads()}.get("watched-job") == "watched",
                   "the new Workload, in its LocalQueue's ClusterQueue")
        eventually(lambda: watching.cluster_queue_quotas().get("watched") == 3, "the new ClusterQueue")
        seen = counting(watching)
        try:
            infos = {w.name: w for w in watching.workloads()}
            quotas = watching.cluster_queue_quotas()
            watching.reservation_policies(NS)
        finally:
            del watching._request
        assert seen == [], "in steady state the reads cost no request"
        assert infos["watched-job"].cluster_queue == "watched" and quotas["watched"] == 3
        # someone else changes things: the watch brings it
        kueue.admit(cluster, NS, "watched-job", "watched")
        eventually(lambda: {w.name: w for w in watching.workloads()}["watched-job"].admitted, "the admission")
        cluster.delete(f"{WL}/watched-job")
        eventually(lambda: "watched-job" not in {w.name for w in watching.workloads()}, "the deletion")
        # our own write is read back at once (the written object goes into the cache)
        assert watching.set_cluster_queue_quota("watched", 7) is True
        assert watching.cluster_queue_quotas()["watched"] == 7
        lists = {name: i.lists for name, i in watching.informers.items()}
        assert lists == dict.fromkeys(watching.informers, 1), "one LIST each, then only the watch"
    finally:
        watching.close()


def test_the_cohort_tree_is_read_from_the_watch_cache_and_follows_changes(cluster, kube_server):
    """Cohorts (kueue.x-k8s.io/v1beta2, genuine CRD) and the ClusterQueues in a cohort, as controller.cohorts
    reads them: parents, GPU quotas and limits by flavor (a fraction of a GPU lent counts as lending)."""
    from core.objects import GpuQuota, QuotaNode

    watching = KubeCluster.from_kubeconfig(str(kube_server.apiserver.kubeconfig()), request_timeout=5).watch()
    cohorts = kueue.path("cohorts")
    try:
        cluster.create(cohorts, kueue.cohort("tree-org", gpus=16))
        cluster.create(cohorts, kueue.cohort("tree-pool", parent="tree-org", gpus=0, lending_limit="500m",
                                             borrowing_limit=4))
        cluster.create(CQ, kueue.cluster_queue("tree-queue", gpus=3, cohort="tree-pool", lending_limit=1))
        alone = kueue.cluster_queue("tree-alone", gpus=3)
        del alone["spec"]["cohortName"]  # in no cohort: no node of a tree
        cluster.create(CQ, alone)

        def tree() -> dict[str, QuotaNode]:
            return {n.name: n for n in watching.cohort_tree() if n.name.startswith("tree-")}

        eventually(lambda: tree().keys() == {"tree-org", "tree-pool", "tree-queue"}, "the Cohorts and the queue")
        seen = counting(watching)
        try:
            nodes = tree()
        finally:
            del watching._request
        assert seen == [], "in steady state the reads cost no request"
        assert nodes["tree-org"] == QuotaNode("Cohort", "tree-org", None, {kueue.FLAVOR: GpuQuota(16)})
        assert nodes["tree-pool"] == QuotaNode("Cohort", "tree-pool", "tree-org", {kueue.FLAVOR: GpuQuota(0, 4, 1)})
        assert nodes["tree-queue"] == QuotaNode("ClusterQueue", "tree-queue", "tree-pool",
                                                {kueue.FLAVOR: GpuQuota(3, None, 1)})
        cluster.delete(kueue.path("cohorts", "tree-pool"))  # made again, detached and without a quota
        cluster.create(cohorts, kueue.cohort("tree-pool"))
        eventually(lambda: tree().get("tree-pool") == QuotaNode("Cohort", "tree-pool", None, {}), "the change")
        cluster.delete(kueue.path("cohorts", "tree-org"))
        eventually(lambda: "tree-org" not in tree(), "the deletion")
    finally:
        watching.close()
        for name in ("tree-org", "tree-pool"):
            try:
                cluster.delete(kueue.path("cohorts", name))
            except NotFound:
                pass
        for name in ("tree-queue", "tree-alone"):
            cluster.delete(f"{CQ}/{name}")


def test_the_controllers_requests_at_once_keep_their_connections(cluster, kube_server, tmp_path, caplog):
    """`headroom run` as leader logged urllib3's `Connection pool is full, discarding connection` (pool size 10) as it
    stopped: the client's pool is 5 connections a CPU, 10 on 2 cores, and the controller has more requests in flight
    at once (its 5 watches, a reconcile's 8 side by side, 8 status writers, 2 Event senders, the election round): the
    connections past 10 were closed as they came back, the watches' at the stop, and opened anew, a TLS handshake
    each, the rest of the time. The client `headroom run` builds keeps one for each now: its requests all in flight at
    once beside its watches, then stopped, no connection is discarded."""
    from cli.run import _kube
    from controller.reconcile import API_REQUESTS_AT_ONCE

    kubeconfig = kube_server.apiserver.kubeconfig(tmp_path / "kubeconfig")
    config = RunConfig(cluster="kubernetes", kubeconfig=kubeconfig, prometheus=PrometheusServer(url="http://unused"))
    watching = _kube(config, in_cluster=False)
    all_in_flight = threading.Barrier(API_REQUESTS_AT_ONCE)

    def held_open():  # a watch the server ends after 2 s: every request is in flight at once. Of a namespace no
        # object is in, so that it ends with no event: a stream of them is no one JSON object for _request to read
        all_in_flight.wait()
        watching._request("GET", f"/api/v1/namespaces/{NS}-held-open/configmaps?watch=1&timeoutSeconds=2")

    with caplog.at_level(logging.WARNING, logger="urllib3"):
        try:
            requests = [threading.Thread(target=held_open) for _ in range(API_REQUESTS_AT_ONCE)]
            for r in requests:
                r.start()
            for r in requests:
                r.join()
        finally:
            watching.close()
    assert not [r.getMessage() for r in caplog.records if "pool is full" in r.getMessage()]


def test_a_watch_from_a_version_the_server_no_longer_has_is_gone(cluster):
    """The API server answers a watch from a resourceVersion it no longer keeps with 410 Gone, which the cache
    takes as "list again" (never as the end of the changes)."""
    from adapters.kube import Informer, _Gone

    informer = Informer(cluster, kueue.path("clusterqueues"))
    informer.relist()
    informer._version = "2"  # older than anything the server still keeps for watches
    with pytest.raises(_Gone):
        informer._watch()
    # (Informer._run then lists again; a connection cut and an API server restart: the tests around this one)


def test_apiserver_restart_mid_run_adapter_and_watch_recover(cluster, kube_server):
    cluster.create(CQ, kueue.cluster_queue("outage", gpus=2))
    api = kube_server.apiserver
    slept = []
    patient = KubeCluster.from_kubeconfig(str(api.kubeconfig()), request_timeout=3, retries=30,
                                          backoff_max=2.0, sleep=lambda s: (slept.append(s), time.sleep(s)))
    watching = KubeCluster.from_kubeconfig(str(api.kubeconfig()), request_timeout=3).watch()
    assert watching.cluster_queue_quotas()["outage"] == 2
    api.stop()
    restarter = threading.Thread(target=api.restart, kwargs={"down_seconds": 2.0})
    restarter.start()
    try:
        # while the server is down the cache still answers with the last state seen
        assert watching.cluster_queue_quotas()["outage"] == 2
        began = time.monotonic()
        assert patient.set_cluster_queue_quota("outage", 5) is True
        took = time.monotonic() - began
    finally:
        restarter.join(120)
    assert api.ready()
    assert slept, "the adapter should have backed off while the server was down"
    assert took >= 2.0
    assert patient.get_cluster_queue_quota("outage") == 5
    # the watch lost its connection: it lists again and follows changes made after the restart
    eventually(lambda: watching.cluster_queue_quotas().get("outage") == 5, "the cache to resync after the restart", 30)
    assert watching.informers["clusterqueues"].lists >= 2
    cluster.set_cluster_queue_quota("outage", 6)
    eventually(lambda: watching.cluster_queue_quotas().get("outage") == 6, "a change after the restart", 30)
    patient.close()
    watching.close()


def test_a_halted_api_server_makes_the_watch_cache_stale_within_its_bound(cluster, kube_server):
    """A halted API-server host (SIGSTOP: no connection reset, the packets just stop): the watch waited out its 270 s
    read timeout while reads served the cache as if it were fresh. A cache that has heard nothing from the server
    (an event, a bookmark, a watch opened or ended, a LIST) for watch_seconds + grace_seconds is stale: a read lists
    again and, when that fails too, refuses with StaleCache naming the resource; the server back, reads are fresh."""
    import signal

    from core.errors import StaleCache

    cluster.create(CQ, kueue.cluster_queue("halted", gpus=2))
    api = kube_server.apiserver
    timeout = 2
    watching = KubeCluster.from_kubeconfig(str(api.kubeconfig()), request_timeout=timeout).watch(watch_seconds=2,
                                                                                                 grace_seconds=2)
    try:
        assert watching.cluster_queue_quotas()["halted"] == 2
        time.sleep(5)  # a healthy idle watch: ended by the server and opened again, never stale
        assert watching.cluster_queue_quotas()["halted"] == 2
        api.process.signal_group(signal.SIGSTOP)
        try:
            time.sleep(5)  # past the bound (2 + 2 s)
            began = time.monotonic()
            with pytest.raises(StaleCache) as info:
                watching.cluster_queue_quotas()
            # one LIST's request timeout, not the retry loop: its attempts alone wait out (retries + 1) timeouts (14 s,
            # the back-off between aside), bounded by half of that
            assert time.monotonic() - began < (KubeCluster.retries + 1) * timeout / 2, "a retry loop, not one LIST"
        finally:
            api.process.signal_group(signal.SIGCONT)
        assert "clusterqueues" in str(info.value) and "nothing heard from the API server" in str(info.value)
        cluster.set_cluster_queue_quota("halted", 3)

        def fresh() -> bool:
            try:
                return watching.cluster_queue_quotas().get("halted") == 3
            except StaleCache:  # stale until a LIST succeeds: one sent as the server resumes may still time out
                return False

        eventually(fresh, "fresh reads once the server is back", 30)
    finally:
        watching.close()


# --------------------------------------------------------------------------- what headroom takes, the server takes
@pytest.mark.parametrize("spec", [
    *({field: value} for field in ("leadTime", "scaleInDelay", "reclaimDeadline")
      for value in ("1d", "0d", "0w", "90s", "1h30m", "1.5h", "500ms", "0s")),
    *({"statistic": value} for value in ("p0.5", "p5_0", "p 50", "p100.0", "p50", "p99.9", "p100", "mean")),
    *({"timezone": value} for value in ("UTC", "Europe/Berlin", "America/Argentina/Buenos_Aires", "Etc/GMT+5",
                                        "Europe Berlin", "Europe//Berlin", "/Europe/Berlin", "../etc/passwd", "", 5)),
])
def test_a_policy_headroom_takes_is_one_the_api_server_takes(cluster, spec):
    """`simulate --policy-file P` and `headroom run --policy-file P` must not run a manifest that `kubectl apply -f P`
    refuses (nor tune write one): core.policy accepts a field's value exactly when the CRD's schema does. (A time
    zone of the right shape that the zone database lacks, e.g. Europe/Berln, the schema cannot tell: the server
    takes it and the controller reports it, tests/test_run_real.py.)"""
    from pydantic import ValidationError

    from core.policy import PolicySpec

    body = policy("same-rules", **spec)
    try:
        PolicySpec.model_validate(body["spec"])
        ours = "accepted"
    except ValidationError as exc:
        ours = f"refused: {exc}"
    try:
        cluster.create(RP, body, dry_run=True)
        theirs = "accepted"
    except Invalid as exc:
        theirs = f"refused: {exc}"
    assert ours.split(":")[0] == theirs.split(":")[0], (spec, ours, theirs)


def test_the_manifest_tune_writes_is_applied_unchanged(cluster, shared_data, tmp_path, capsys):
    """`headroom tune DEMAND --write-policy P`, then `kubectl apply -f P`: the API server takes it as written, every
    field kept (nothing pruned, nothing defaulted otherwise)."""
    import pandas as pd
    import yaml

    from cli.main import main

    demand = tmp_path / "nasa4.csv"
    pd.read_csv(shared_data / "traces" / "nasa_http_1995_5min.csv").iloc[:4 * 288].to_csv(demand, index=False)
    policy_path = tmp_path / "p.yaml"
    assert main(["tune", str(demand), "--days", "1", "--write-policy", str(policy_path)]) in (0, 1)
    capsys.readouterr()
    written = yaml.safe_load(policy_path.read_text())
    written["metadata"]["namespace"] = NS
    stored = cluster.create(RP, written, dry_run=True)
    assert stored["spec"] == written["spec"]
