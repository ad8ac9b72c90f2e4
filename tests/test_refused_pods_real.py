"""A policy's inference pods that Kueue admits into a training ClusterQueue, against a real kube-apiserver + etcd
(Kueue v0.19.2's genuine CRDs) and a real Prometheus: they hold the quota they run in, and are never preempted as
training. Nothing runs Kueue or the Deployment controller here: the test creates the Pods and their Workloads as the
ReplicaSet controller and Kueue's pod integration would (a single-Pod Workload owned by its Pod, labelled with the
Pod's UID) and admits them by writing their status (tests/servers/kueue.py)."""
from __future__ import annotations

import logging
import time

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapters.kube import KubeCluster, _pod_deployment
from adapters.prometheus import PrometheusDemand
from controller.reconcile import Reconciler
from core.settings import PrometheusServer, RunConfig
from tests.servers import kueue
from tests.servers.proxy import AnswerLosingProxy
from tests.test_run_real import (  # noqa: F401 -- fixtures: kube (the cohort, chat's Deployment and policy), controller
    MONDAY_7AM,
    NS,
    QUEUE,
    RP,
    TRAIN_NS,
    bound_to_the_viewer,
    controller,
    deployment,
    kube,
    policy,
    reconciler,
    shipped_cluster_role,
)
from training.realized import ForecastLog

PODS = f"/api/v1/namespaces/{NS}/pods"
NS_WL = kueue.path("workloads", namespace=NS)
HPAS = f"/apis/autoscaling/v1/namespaces/{NS}/horizontalpodautoscalers"


def serving_pod(cluster, deployment_name: str, gpus: int, annotations: dict | None = None) -> str:
    """A Pod of Deployment `deployment_name` as its ReplicaSet makes it (`<deployment>-<pod-template-hash>-<suffix>`,
    owned by ReplicaSet `<deployment>-<hash>`, labelled with the hash), and the single-Pod Workload Kueue's pod
    integration makes for it (owned by the Pod, labelled kueue.x-k8s.io/job-uid), admitted into the training queue
    QUEUE (`annotations` on it): the Workload's name."""
    template_hash = "5d8f7c9b6"
    rs = f"{deployment_name}-{template_hash}"
    pod = cluster.create(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": f"{rs}-x2k9p", "namespace": NS,
        "labels": {"app": deployment_name, "pod-template-hash": template_hash, "kueue.x-k8s.io/queue-name": QUEUE},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs,
                             "uid": "0b0c3f1e-8d0e-4a51-9a6e-3f6f4a1d2c11", "controller": True}]},
        "spec": {"containers": [{"name": "server", "image": "inference:1", "resources": {
            "requests": {kueue.GPU: str(gpus)}, "limits": {kueue.GPU: str(gpus)}}}]}})
    name = f"pod-{pod['metadata']['name']}-3e1a7"
    body = kueue.workload(NS, name, QUEUE, gpus_per_pod=gpus, annotations=annotations)
    body["metadata"]["labels"] = {"kueue.x-k8s.io/job-uid": pod["metadata"]["uid"]}
    body["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": pod["metadata"]["name"],
                                            "uid": pod["metadata"]["uid"], "controller": True,
                                            "blockOwnerDeletion": True}]
    cluster.create(NS_WL, body)
    kueue.admit(cluster, NS, name, QUEUE)
    return name


def clean_pods(cluster) -> None:
    for path in (NS_WL, PODS, kueue.path("localqueues", namespace=NS), HPAS):
        for item in cluster.get(path).get("items", []):
            cluster.delete(f"{path}/{item['metadata']['name']}")


def refused_serve(cluster, target: str) -> None:
    """"serve", a policy naming research-run, chat's training queue, as its inferenceClusterQueue (refused for it),
    created after chat; its target `target`: Deployment serve-pods itself, or HPA serve scaling it."""
    time.sleep(1.1)  # creationTimestamp has seconds: serve comes after chat
    cluster.create(f"/apis/apps/v1/namespaces/{NS}/deployments", deployment("serve-pods"))
    if target == "HorizontalPodAutoscaler":
        cluster.create(HPAS, {"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
                              "metadata": {"name": "serve", "namespace": NS},
                              "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                                                          "name": "serve-pods"}, "minReplicas": 1, "maxReplicas": 10}})
    cluster.create(RP, policy("serve", inferenceClusterQueue=QUEUE, trainingClusterQueues=[],
                              target={"kind": target, "name": "serve" if target != "Deployment" else "serve-pods"},
                              capacity={"demandPerGpu": 10.0, "gpusPerReplica": 4}))
    cluster.apply(kueue.path("localqueues", QUEUE, NS), kueue.local_queue(NS, QUEUE))


def over_lent(cluster) -> str:
    """A 4-GPU Pod of serve-pods admitted into research-run beside 74 GPUs of training (priority 100): 2 GPUs more
    than chat lends there at 7 am. Its Workload's name."""
    served = serving_pod(cluster, "serve-pods", 4)
    cluster.create(kueue.path("workloads", namespace=TRAIN_NS), kueue.workload(
        TRAIN_NS, "train", QUEUE, gpus_per_pod=74, priority_class="high", priority=100))
    kueue.admit(cluster, TRAIN_NS, "train", QUEUE)
    return served


def active(cluster, namespace: str, name: str) -> bool:
    return cluster.get(kueue.path("workloads", name, namespace))["spec"]["active"]


@pytest.mark.parametrize("target", ["Deployment", "HorizontalPodAutoscaler"])
def test_a_refused_policy_s_pods_in_an_accepted_policy_s_training_queue_are_never_preempted_as_training(  # noqa: F811
        kube, controller, prometheus_server, tmp_path, target):  # noqa: F811
    """Kueue admits serve's pods into research-run, as Workloads of that queue. The controller read every Workload
    there as training: with the queue holding 2 GPUs more than chat lends, the planner deactivated serve's Workload
    (priority 0, below the training's 100), evicting an inference pod as if it were training. Its GPUs are counted
    where they are, within the lent quota, and the training there gives back what is over. With an HPA target the
    pods are of the Deployment its scaleTargetRef names, and only Deployment targets were matched to them: serve's
    Workload was deactivated as a planned preemption."""
    refused_serve(kube, target)
    try:
        controller.sync()
        r = reconciler(controller, prometheus_server.url, tmp_path)
        lent = r.reconcile(MONDAY_7AM).slack_gpus
        assert lent > 8, lent
        served = over_lent(kube)
        controller.sync()
        state = r.reconcile(MONDAY_7AM + pd.Timedelta(minutes=5))
        assert state.slack_gpus == lent, (state.slack_gpus, lent)
        assert active(kube, NS, served) is True, "serve's pod was preempted"
        assert active(kube, TRAIN_NS, "train") is False
    finally:
        clean_pods(kube)


def hpa_unread(messages: list[str]) -> list[str]:
    """The log lines saying serve's HPA was not read."""
    return [m for m in messages if f"HorizontalPodAutoscaler {NS}/serve not read" in m]


def test_an_hpa_not_read_keeps_the_deployment_it_scaled_when_last_read(kube, kube_server, prometheus_server,  # noqa: F811
                                                                       tmp_path, caplog):
    """serve's HPA not read (the API server answering 504 past every retry) at the reconcile that finds research-run
    over-lent: its pods are of the Deployment it scaled when last read, never a victim, and the reconcile goes on
    (the refused policy's fault is its own): the training gives back what is over. The failed read is logged once
    while it lasts (it was logged at every reconcile: 2,880 lines a day in a 30 s loop), and again once it fails after
    a read."""
    refused_serve(kube, "HorizontalPodAutoscaler")
    api = kube_server.apiserver
    proxy = AnswerLosingProxy(api, hold_seconds=1).start()
    lossy = KubeCluster.from_token(proxy.host, api.token, ca_file=str(api.ca_file), request_timeout=5,
                                   backoff_base=0.05, backoff_max=0.2)
    try:
        r = reconciler(lossy, prometheus_server.url, tmp_path)
        r.reconcile(MONDAY_7AM)
        served = over_lent(kube)
        with caplog.at_level(logging.WARNING, logger="controller.reconcile"):
            for minutes in (5, 10):  # not read twice running
                proxy.lose("GET", f"{HPAS}/serve", "504", times=lossy.retries + 1)
                state = r.reconcile(MONDAY_7AM + pd.Timedelta(minutes=minutes))
                assert not any(state.reconcile_errors_total.values()), state.reconcile_errors_total
            assert len(proxy.lost) == 2 * (lossy.retries + 1), proxy.lost
            assert active(kube, NS, served) is True, "serve's pod was preempted"
            assert active(kube, TRAIN_NS, "train") is False
            said = hpa_unread(caplog.messages)
            assert len(said) == 1, said  # (logged at every reconcile, it was said twice)
            assert "504" in said[0] and "Deployment serve-pods, which it scaled when last read" in said[0], said
            r.reconcile(MONDAY_7AM + pd.Timedelta(minutes=15))  # read again
            proxy.lose("GET", f"{HPAS}/serve", "504", times=lossy.retries + 1)
            r.reconcile(MONDAY_7AM + pd.Timedelta(minutes=20))
            assert len(hpa_unread(caplog.messages)) == 2, caplog.messages
    finally:
        lossy.close()
        proxy.stop()
        clean_pods(kube)


@pytest.fixture
def without_pods(kube_server, kube):  # noqa: F811
    """The shipped ClusterRole without its rule on Pods (one from before headroom read them), bound (test-only) to the
    unprivileged user: its client. Unbound afterwards."""
    role = shipped_cluster_role("headroom-test-no-pods")
    role["rules"] = [rule for rule in role["rules"] if rule["resources"] != ["pods"]]
    yield from bound_to_the_viewer(kube_server, kube, role)


def test_a_pod_the_cluster_role_may_not_read_is_training_and_said_once(without_pods, kube, prometheus_server,  # noqa: F811
                                                                      tmp_path, caplog):
    """Under a ClusterRole without `get` on Pods the Pod's read is refused (403): serve's Workload is read as training,
    as before headroom read Pods (the stated fallback; deploy/ ships the rule), so it is preempted as the over-lent
    queue's lowest priority. The refusal is logged once, not at every reconcile: the Pod is not asked for again."""
    refused_serve(kube, "Deployment")
    server = PrometheusServer(url=prometheus_server.url, step="5m", timeout_seconds=10, retries=0)
    cfg = RunConfig(cluster="kubernetes", prometheus=server, capacity_gpus=128, namespace=NS)
    r = Reconciler(without_pods, PrometheusDemand(server), cfg, forecast_log=ForecastLog(tmp_path / "log"))
    try:
        r.reconcile(MONDAY_7AM)
        served = over_lent(kube)
        with caplog.at_level(logging.WARNING, logger="adapters.kube"):
            for minutes in (5, 10, 15):
                state = r.reconcile(MONDAY_7AM + pd.Timedelta(minutes=minutes))
                assert not any(state.reconcile_errors_total.values()), state.reconcile_errors_total
        refused = [m for m in caplog.messages if f"of Workload {NS}/{served} not read" in m]
        assert len(refused) == 1 and "403" in refused[0], caplog.messages
        assert "counted as training" in refused[0] and "until" not in refused[0], refused
        assert active(kube, NS, served) is False, "a Pod not read is of no Deployment: its Workload is training"
    finally:
        clean_pods(kube)


@pytest.fixture
def without_hpas(kube_server, kube):  # noqa: F811
    """The shipped ClusterRole without its rule on HPAs, bound (test-only) to the unprivileged user: its client, whose
    every read of an HPA is refused (403). Unbound afterwards."""
    role = shipped_cluster_role("headroom-test-no-hpas")
    role["rules"] = [rule for rule in role["rules"] if rule["resources"] != ["horizontalpodautoscalers"]]
    yield from bound_to_the_viewer(kube_server, kube, role)


def test_an_hpa_never_read_takes_the_deployment_pods_in_its_queue_for_its_own(without_hpas, kube,  # noqa: F811
                                                                               prometheus_server, tmp_path, caplog):
    """serve's HPA is never read (the controller's ClusterRole lets it not: 403, from its first reconcile), so which
    Deployment it scales is not known. Its pod in research-run, chat's training queue, was read as training and, the
    queue 2 GPUs over what chat lends, preempted (priority 0, below the training's 100), at every reconcile logging
    the failed read. Until the HPA is read, the pods of its namespace's Deployments in its inferenceClusterQueue are
    taken as its: inference, never a victim (the safe side); the training Workload there, of no Deployment, is
    training still and gives back what is over. The failed read is logged once."""
    refused_serve(kube, "HorizontalPodAutoscaler")
    server = PrometheusServer(url=prometheus_server.url, step="5m", timeout_seconds=10, retries=0)
    cfg = RunConfig(cluster="kubernetes", prometheus=server, capacity_gpus=128, namespace=NS)
    r = Reconciler(without_hpas, PrometheusDemand(server), cfg, forecast_log=ForecastLog(tmp_path / "log"))
    try:
        with caplog.at_level(logging.WARNING, logger="controller.reconcile"):
            r.reconcile(MONDAY_7AM)
            served = over_lent(kube)
            for minutes in (5, 10, 15):
                state = r.reconcile(MONDAY_7AM + pd.Timedelta(minutes=minutes))
                assert not any(state.reconcile_errors_total.values()), state.reconcile_errors_total
        assert active(kube, NS, served) is True, "serve's pod was preempted"
        assert active(kube, TRAIN_NS, "train") is False
        said = hpa_unread(caplog.messages)
        assert len(said) == 1, said
        assert "403" in said[0] and f"Deployment of namespace {NS} whose Pods run in ClusterQueue {QUEUE}" in said[0], \
            said
    finally:
        clean_pods(kube)


@given(st.from_regex(r"[a-z]([a-z0-9-]{0,40}[a-z0-9])?", fullmatch=True),
       st.from_regex(r"[a-z0-9]{6,10}", fullmatch=True))
def test_a_pod_is_of_the_deployment_its_replicaset_is_named_after(name, template_hash):
    """A Deployment's ReplicaSet is `<deployment>-<pod-template-hash>`, whatever dashes the Deployment's name holds;
    a Pod of a ReplicaSet no Deployment made (no hash label, or another), or of a Job, is of none."""
    def pod(kind, owner, labels):
        return {"metadata": {"labels": labels, "ownerReferences": [
            {"apiVersion": "apps/v1" if kind == "ReplicaSet" else "batch/v1", "kind": kind, "name": owner}]}}

    assert _pod_deployment(pod("ReplicaSet", f"{name}-{template_hash}", {"pod-template-hash": template_hash})) == name
    assert _pod_deployment(pod("ReplicaSet", f"{name}-{template_hash}", {})) is None
    assert _pod_deployment(pod("ReplicaSet", f"{name}-{template_hash}", {"pod-template-hash": "zz"})) is None
    assert _pod_deployment(pod("Job", f"{name}-{template_hash}", {"pod-template-hash": template_hash})) is None



def test_the_pods_a_target_an_edit_left_runs_in_a_training_queue_are_never_preempted_as_training(  # noqa: F811
        kube, controller, prometheus_server, tmp_path):  # noqa: F811
    """"old", refused for naming research-run (chat's training queue) as its inferenceClusterQueue, runs Deployment
    old's pods there, as Workloads Kueue admitted into that queue. Edited to scale old-v2 (refused still), Deployment
    old runs on (an edit deletes no workload), left behind with its pods in research-run: within that queue's lent
    quota (its queue lent into, the left target is held by no one). The controller matched only the Deployments of the
    policies' targets, refused ones' too, to the pods: old's Workload was read as training and, with the queue 2 GPUs
    over what chat lends, preempted (priority 0, below the training's 100, both quick to stop). The pods of a
    target an edit left are inference wherever Kueue admits them: the training gives back what is over."""
    time.sleep(1.1)  # creationTimestamp has seconds: old comes after chat
    for name in ("old", "old-v2"):
        kube.create(f"/apis/apps/v1/namespaces/{NS}/deployments", deployment(name))
    old = {"inferenceClusterQueue": QUEUE, "trainingClusterQueues": [],
           "capacity": {"demandPerGpu": 10.0, "gpusPerReplica": 4}}
    kube.create(RP, policy("old", **old))
    kube.apply(kueue.path("localqueues", QUEUE, NS), kueue.local_queue(NS, QUEUE))
    r = reconciler(controller, prometheus_server.url, tmp_path)
    try:
        controller.sync()
        lent = r.reconcile(MONDAY_7AM).slack_gpus
        assert lent > 8, lent
        kube.apply(f"{RP}/old", policy("old", target={"kind": "Deployment", "name": "old-v2"}, **old))
        # both quick to stop, so the lowest priority goes first, whether the GPUs are needed soon or not
        quick = {"headroom.dev/preemption-seconds": "60", "headroom.dev/last-checkpoint": "1995-07-17T06:00:00Z"}
        served = serving_pod(kube, "old", 4, quick)
        kube.create(kueue.path("workloads", namespace=TRAIN_NS), kueue.workload(  # 2 GPUs over what chat lends
            TRAIN_NS, "train", QUEUE, gpus_per_pod=lent - 4 + 2, priority_class="high", priority=100,
            annotations=quick))
        kueue.admit(kube, TRAIN_NS, "train", QUEUE)
        controller.sync()
        state = r.reconcile(MONDAY_7AM + pd.Timedelta(minutes=5))
        assert state.slack_gpus == lent, (state.slack_gpus, lent)
        assert [left["target"]["name"] for left in kube.get_reservation_policy(NS, "old")["status"]["left"]] == ["old"]
        assert active(kube, NS, served) is True, "old's pod was preempted"
        assert active(kube, TRAIN_NS, "train") is False
    finally:
        r.close()
        clean_pods(kube)


def test_a_refused_policy_s_pods_beyond_the_training_queue_s_quota_are_held_not_lent_again(  # noqa: F811
        kube, controller, prometheus_server, tmp_path):  # noqa: F811
    """serve's pod in research-run runs on 8 GPUs more than chat lends there (its quota lowered under it, as when the
    queue was lent less since). The controller counted it only within that quota and lent the same GPUs again: the
    slack lent stayed what it was, the 8 GPUs beyond the quota counted nowhere. Beyond the quota they are held
    (controller.reconcile.serving_gpus): lent no more, and the pod, inference, is no victim. Nor are the GPUs it holds
    within the old quota counted nowhere where the plan lends less: chat reserved 23 beside research-run's 113 (136 of
    128 GPUs), lending 97 with only the 8 beyond 105 held. Each GPU is counted once."""
    refused_serve(kube, "Deployment")
    try:
        controller.sync()
        r = reconciler(controller, prometheus_server.url, tmp_path)
        lent = r.reconcile(MONDAY_7AM).slack_gpus
        quota = controller.cluster_queue_quotas()[QUEUE]
        assert quota > 8, quota
        served = serving_pod(kube, "serve-pods", quota + 8)
        controller.sync()
        state = r.reconcile(MONDAY_7AM + pd.Timedelta(minutes=5))
        assert state.slack_gpus <= lent - 8, (state.slack_gpus, lent)
        reserved = sum(p.reserved_gpus for p in state.policies.values())
        assert reserved + controller.cluster_queue_quotas()[QUEUE] <= 128, (reserved, controller.cluster_queue_quotas())
        assert active(kube, NS, served) is True, "serve's pod was preempted"
    finally:
        clean_pods(kube)
