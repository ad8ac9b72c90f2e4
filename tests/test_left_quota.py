"""Quotas headroom set are not left behind, against a real kube-apiserver + etcd (Kueue v0.19.2's genuine CRDs) and a
real Prometheus: what headroom lent a training ClusterQueue no policy names any more, and what a policy whose target
is missing held in its inference ClusterQueue. The same on the embedded cluster: tests/test_run.py."""
from __future__ import annotations

import time

import pandas as pd
import pytest

from adapters.kube import LENT_FOR, LENT_GPUS, MERGE_PATCH
from tests import test_run_real
from tests.servers import kueue
from tests.test_run_real import INFERENCE_QUEUE, MONDAY_7AM, NS, QUEUE, RP, deployment, policy, reconciler, rp_status

# the real API server's fixtures (a namespace, the ClusterQueues, chat's Deployment and policy; the watching controller)
kube, controller = test_run_real.kube, test_run_real.controller


def test_the_inference_cluster_queue_of_a_policy_whose_target_is_missing_holds_nothing(kube, controller,
                                                                                       prometheus_server, tmp_path):
    """chat's Deployment deleted: the plan lent all 128 GPUs to training, yet its inference ClusterQueue kept the
    reservation last set, quota beside them that nothing of the plan's serves and the namespace's other pods could
    take. It is set to what the target holds, none; the Deployment back, to its reservation again."""
    r = reconciler(controller, prometheus_server.url, tmp_path)
    held = r.reconcile(MONDAY_7AM).policies[f"{NS}/chat"].reserved_gpus
    assert kube.get_cluster_queue_quota(INFERENCE_QUEUE) == held > 0
    kube.delete(f"/apis/apps/v1/namespaces/{NS}/deployments/chat")
    controller.sync()
    state = r.reconcile(MONDAY_7AM + pd.Timedelta(minutes=5))
    assert rp_status(kube)[1]["Ready"]["reason"] == "TargetMissing"
    lent = (kube.get_cluster_queue_quota(INFERENCE_QUEUE), kube.get_cluster_queue_quota(QUEUE))
    assert lent == (0, state.slack_gpus) == (0, 128)
    kube.create(f"/apis/apps/v1/namespaces/{NS}/deployments", deployment("chat"))
    controller.sync()
    chat = r.reconcile(MONDAY_7AM + pd.Timedelta(minutes=10)).policies[f"{NS}/chat"]
    assert chat.valid and kube.get_cluster_queue_quota(INFERENCE_QUEUE) == chat.reserved_gpus > 0
    assert kube.get_cluster_queue_quota(INFERENCE_QUEUE) + kube.get_cluster_queue_quota(QUEUE) <= 128


EXTRA = "extra-run"  # a training queue in a cohort of its own: no other queue of the training cohort names it


def lent_mark(kube) -> tuple[str, str | None] | None:
    """EXTRA's mark: the GPUs lent and the namespace the lending controller acts on; None: no mark."""
    annotations = kube.get(kueue.path("clusterqueues", EXTRA))["metadata"].get("annotations") or {}
    return None if LENT_GPUS not in annotations else (annotations[LENT_GPUS], annotations.get(LENT_FOR))


@pytest.fixture
def extra(kube, controller):
    """Policy "batch", created after chat, lending into its own training queue EXTRA."""
    path = kueue.path("clusterqueues", EXTRA)
    kube.apply(path, kueue.cluster_queue(EXTRA, gpus=0, cohort="extra-pool"))
    time.sleep(1.1)  # creationTimestamp has seconds: batch comes after chat
    kube.create(f"/apis/apps/v1/namespaces/{NS}/deployments", deployment("batch"))
    kube.create(RP, policy("batch", trainingClusterQueues=[EXTRA], inferenceClusterQueue=None))
    controller.sync()
    yield path
    kube.delete(path)


@pytest.mark.parametrize("how", ["deleted", "queue dropped", "made forecast-only"])
def test_what_headroom_lent_a_queue_no_policy_names_comes_back(kube, controller, extra, prometheus_server, tmp_path,
                                                               how):
    """Policy batch deleted (or EXTRA dropped from its trainingClusterQueues, or batch made forecast-only, which lends
    nothing): EXTRA kept the quota last lent, beside the whole slack lent again to chat's queue: 128 GPUs of training
    quota beside chat's reservation, and outside the training cohort nothing said so. A controller restarted in between
    knows the queue is headroom's from its mark and returns it to 0; the slack lent and the reservation (or, made
    forecast-only, what batch's Deployment holds) add up to the cluster again."""
    r = reconciler(controller, prometheus_server.url, tmp_path)
    r.reconcile(MONDAY_7AM)
    lent = kube.get_cluster_queue_quota(EXTRA)
    assert lent > 0 and lent_mark(kube) == (str(lent), NS)
    if how == "deleted":
        kube.delete(f"{RP}/batch")
    else:
        edit = {"trainingClusterQueues": [QUEUE]} if how == "queue dropped" else {"mode": "forecast-only"}
        kube._request("PATCH", f"{RP}/batch", {"spec": edit}, content_type=MERGE_PATCH)  # as `kubectl edit`
    controller.sync()
    r = reconciler(controller, prometheus_server.url, tmp_path)  # a new process: none of the old one's memory
    state = r.reconcile(MONDAY_7AM + pd.Timedelta(minutes=5))
    assert (kube.get_cluster_queue_quota(EXTRA), lent_mark(kube)) == (0, None)
    reserved = sum(p.reserved_gpus for p in state.policies.values() if p.mode == "active")
    held = kube.get_deployment_replicas(NS, "batch") if how == "made forecast-only" else 0
    assert kube.get_cluster_queue_quota(QUEUE) == state.slack_gpus == 128 - reserved - held


@pytest.mark.parametrize("leave", ["quota set by hand", "a spec that says nothing"])
def test_a_queue_no_policy_names_is_left_where_headroom_cannot_tell_it_is_its_own(kube, controller, extra,
                                                                                  prometheus_server, tmp_path, leave):
    """Left as they are: a queue whose quota someone set after headroom lent it (theirs now), and every queue while a
    policy's spec does not say which it names."""
    r = reconciler(controller, prometheus_server.url, tmp_path)
    r.reconcile(MONDAY_7AM)
    lent = kube.get_cluster_queue_quota(EXTRA)
    kube.delete(f"{RP}/batch")
    if leave == "quota set by hand":
        lent += 3
        kube.set_cluster_queue_quota(EXTRA, lent)  # with no mark: so too an older controller's writes
    elif leave == "a spec that says nothing":  # its inference queue a training queue too: the CRD admits it, and
        # the spec reads not even as far as what it holds, and no status says it: it may be meant to lend into EXTRA
        kube.create(RP, policy("odd", trainingClusterQueues=[EXTRA], inferenceClusterQueue=EXTRA))
    controller.sync()
    r.reconcile(MONDAY_7AM + pd.Timedelta(minutes=5))
    assert kube.get_cluster_queue_quota(EXTRA) == lent
