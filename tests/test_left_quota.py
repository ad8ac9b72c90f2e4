"""Quotas headroom set are not left behind, against a real kube-apiserver + etcd (Kueue v0.19.2's genuine CRDs) and a
real Prometheus: what a policy whose target is missing held in its inference ClusterQueue. The same on the embedded
cluster: tests/test_run.py."""
from __future__ import annotations

import pandas as pd

from tests import test_run_real
from tests.test_run_real import INFERENCE_QUEUE, MONDAY_7AM, NS, QUEUE, deployment, reconciler, rp_status

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
