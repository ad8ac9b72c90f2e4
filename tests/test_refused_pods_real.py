"""A policy's inference pods that Kueue admits into a training ClusterQueue, against a real kube-apiserver + etcd
(Kueue v0.19.2's genuine CRDs) and a real Prometheus: they hold the quota they run in, and are never preempted as
training. Nothing runs Kueue or the Deployment controller here: the test creates the Pods and their Workloads as the
ReplicaSet controller and Kueue's pod integration would (a single-Pod Workload owned by its Pod, labelled with the
Pod's UID) and admits them by writing their status (tests/servers/kueue.py)."""
from __future__ import annotations

import time

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapters.kube import _pod_deployment
from tests.servers import kueue
from tests.test_run_real import (  # noqa: F401 -- fixtures: kube (the cohort, chat's Deployment and policy), controller
    MONDAY_7AM,
    NS,
    QUEUE,
    RP,
    TRAIN_NS,
    controller,
    deployment,
    kube,
    policy,
    reconciler,
)

PODS = f"/api/v1/namespaces/{NS}/pods"
NS_WL = kueue.path("workloads", namespace=NS)
HPAS = f"/apis/autoscaling/v1/namespaces/{NS}/horizontalpodautoscalers"


def serving_pod(cluster, deployment_name: str, gpus: int) -> str:
    """A Pod of Deployment `deployment_name` as its ReplicaSet makes it (`<deployment>-<pod-template-hash>-<suffix>`,
    owned by ReplicaSet `<deployment>-<hash>`, labelled with the hash), and the single-Pod Workload Kueue's pod
    integration makes for it (owned by the Pod, labelled kueue.x-k8s.io/job-uid), admitted into the training queue
    QUEUE: the Workload's name."""
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
    body = kueue.workload(NS, name, QUEUE, gpus_per_pod=gpus)
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


@pytest.mark.parametrize("target", ["Deployment", "HorizontalPodAutoscaler"])
def test_a_refused_policy_s_pods_in_an_accepted_policy_s_training_queue_are_never_preempted_as_training(  # noqa: F811
        kube, controller, prometheus_server, tmp_path, target):  # noqa: F811
    """"serve" names research-run, chat's training queue, as its inferenceClusterQueue (refused for it): Kueue admits
    its pods there, as Workloads of that queue. The controller read every Workload there as training: with the queue
    holding 2 GPUs more than chat lends, the planner deactivated serve's Workload (priority 0, below the training's
    100), evicting an inference pod as if it were training. Its GPUs are counted where they are, within the lent
    quota, and the training there gives back what is over. With an HPA target (scaling Deployment serve-pods) the
    pods are of the Deployment its scaleTargetRef names, which only Deployment targets were matched to: serve's
    Workload was deactivated as a planned preemption."""
    time.sleep(1.1)  # creationTimestamp has seconds: serve comes after chat
    kube.create(f"/apis/apps/v1/namespaces/{NS}/deployments", deployment("serve-pods"))
    if target == "HorizontalPodAutoscaler":
        kube.create(HPAS, {"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
                           "metadata": {"name": "serve", "namespace": NS},
                           "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                                                       "name": "serve-pods"}, "minReplicas": 1, "maxReplicas": 10}})
    kube.create(RP, policy("serve", inferenceClusterQueue=QUEUE, trainingClusterQueues=[],
                           target={"kind": target, "name": "serve" if target != "Deployment" else "serve-pods"},
                           capacity={"demandPerGpu": 10.0, "gpusPerReplica": 4}))
    kube.apply(kueue.path("localqueues", QUEUE, NS), kueue.local_queue(NS, QUEUE))
    try:
        controller.sync()
        r = reconciler(controller, prometheus_server.url, tmp_path)
        lent = r.reconcile(MONDAY_7AM).slack_gpus
        assert lent > 8, lent
        served = serving_pod(kube, "serve-pods", 4)
        kube.create(kueue.path("workloads", namespace=TRAIN_NS), kueue.workload(
            TRAIN_NS, "train", QUEUE, gpus_per_pod=74, priority_class="high", priority=100))
        kueue.admit(kube, TRAIN_NS, "train", QUEUE)
        controller.sync()
        state = r.reconcile(MONDAY_7AM + pd.Timedelta(minutes=5))
        assert state.slack_gpus == lent, (state.slack_gpus, lent)
        assert kube.get(kueue.path("workloads", served, NS))["spec"]["active"] is True, "serve's pod was preempted"
        assert kube.get(kueue.path("workloads", "train", TRAIN_NS))["spec"]["active"] is False
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
