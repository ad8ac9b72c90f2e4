"""Kueue v1beta2 objects for the real-server tests, valid per Kueue v0.19.2's genuine CRDs, and what Kueue's
controllers would do to them (no Kueue runs here: admitting a Workload and completing its eviction are
written to its status by the test, as Kueue writes them)."""
from __future__ import annotations

from datetime import UTC, datetime

from adapters.kube import KUEUE_GROUP, KUEUE_VERSION, KubeCluster

API_VERSION = f"{KUEUE_GROUP}/{KUEUE_VERSION}"
GPU = "nvidia.com/gpu"
FLAVOR = "a100"
MERGE = "application/merge-patch+json"


def path(plural: str, name: str | None = None, namespace: str | None = None) -> str:
    return KubeCluster.custom_path(KUEUE_GROUP, KUEUE_VERSION, plural, name, namespace)


def resource_flavor(name: str = FLAVOR) -> dict:
    return {"apiVersion": API_VERSION, "kind": "ResourceFlavor", "metadata": {"name": name},
            "spec": {"nodeLabels": {"nvidia.com/gpu.product": name}}}


def cluster_queue(name: str, gpus: int = 8, cohort: str = "gpus", cpu: str | None = None,
                  lending_limit: int | None = None) -> dict:
    resources = [{"name": GPU, "nominalQuota": gpus}]
    if lending_limit is not None:
        resources[0]["lendingLimit"] = lending_limit
    covered = [GPU]
    if cpu is not None:
        resources.insert(0, {"name": "cpu", "nominalQuota": cpu})
        covered.insert(0, "cpu")
    return {"apiVersion": API_VERSION, "kind": "ClusterQueue", "metadata": {"name": name},
            "spec": {"cohortName": cohort, "queueingStrategy": "BestEffortFIFO", "namespaceSelector": {},
                     "resourceGroups": [{"coveredResources": covered,
                                         "flavors": [{"name": FLAVOR, "resources": resources}]}]}}


def cohort(name: str, parent: str | None = None, gpus: int | None = None, lending_limit: int | str | None = None,
           borrowing_limit: int | None = None) -> dict:
    """A Kueue Cohort: its parentName, and its own GPU quota (`gpus`: nominalQuota) and limits, if given."""
    spec: dict = {} if parent is None else {"parentName": parent}
    if gpus is not None:
        quota = {"name": GPU, "nominalQuota": gpus}
        quota.update({k: v for k, v in (("lendingLimit", lending_limit), ("borrowingLimit", borrowing_limit))
                      if v is not None})
        spec["resourceGroups"] = [{"coveredResources": [GPU], "flavors": [{"name": FLAVOR, "resources": [quota]}]}]
    return {"apiVersion": API_VERSION, "kind": "Cohort", "metadata": {"name": name}, "spec": spec}


def local_queue(namespace: str, name: str, cluster_queue_name: str | None = None) -> dict:
    return {"apiVersion": API_VERSION, "kind": "LocalQueue", "metadata": {"name": name, "namespace": namespace},
            "spec": {"clusterQueue": cluster_queue_name or name}}


def workload(namespace: str, name: str, queue: str | None, gpus_per_pod: int = 1, count: int = 1,
             priority_class: str | None = None, priority: int = 0, annotations: dict | None = None) -> dict:
    """A Workload as Kueue's job integration creates it for a batch Job: one pod set, GPUs per pod."""
    spec: dict = {"active": True, "podSets": [{"name": "main", "count": count, "template": {"spec": {
        "restartPolicy": "Never",
        "containers": [{"name": "trainer", "image": "trainer:1",
                        "resources": {"requests": {GPU: str(gpus_per_pod)}, "limits": {GPU: str(gpus_per_pod)}}}]}}}]}
    if queue:
        spec["queueName"] = queue
    if priority_class:  # a WorkloadPriorityClass; Kueue copies its value into spec.priority
        spec["priorityClassRef"] = {"group": KUEUE_GROUP, "kind": "WorkloadPriorityClass", "name": priority_class}
        spec["priority"] = priority
    meta: dict = {"name": name, "namespace": namespace}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": API_VERSION, "kind": "Workload", "metadata": meta, "spec": spec}


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _condition(type_: str, status: str, reason: str, message: str) -> dict:
    return {"type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": _now()}


def admit(kube: KubeCluster, namespace: str, name: str, cluster_queue_name: str) -> dict:
    """What Kueue's scheduler writes when it admits a Workload: the admission (the ClusterQueue, each pod
    set's flavor and resource usage) and QuotaReserved=True, Admitted=True."""
    wl = kube.get(path("workloads", name, namespace))
    assignments = []
    for pod_set in wl["spec"]["podSets"]:
        requests = pod_set["template"]["spec"]["containers"][0]["resources"]["requests"]
        count = int(pod_set.get("count", 1))
        assignments.append({"name": pod_set["name"], "count": count, "flavors": {GPU: FLAVOR},
                            "resourceUsage": {GPU: str(int(requests.get(GPU, 0)) * count)}})
    status = {"admission": {"clusterQueue": cluster_queue_name, "podSetAssignments": assignments},
              "conditions": [_condition("QuotaReserved", "True", "QuotaReserved",
                                        f"Quota reserved in ClusterQueue {cluster_queue_name}"),
                             _condition("Admitted", "True", "Admitted", "The workload is admitted")]}
    return kube._request("PATCH", path("workloads", name, namespace) + "/status", {"status": status},
                         content_type=MERGE)


def complete_eviction(kube: KubeCluster, namespace: str, name: str) -> dict:
    """What Kueue does once a deactivated Workload's pods are gone: Evicted=True (Deactivated), the quota
    released (QuotaReserved=False, Admitted=False) and the admission cleared."""
    status = {"admission": None, "conditions": [
        _condition("Evicted", "True", "Deactivated", "The workload is deactivated"),
        _condition("QuotaReserved", "False", "Pending", "The workload is deactivated"),
        _condition("Admitted", "False", "NoReservation", "The workload has no reservation")]}
    return kube._request("PATCH", path("workloads", name, namespace) + "/status", {"status": status},
                         content_type=MERGE)


def preempt(kube: KubeCluster, namespace: str, name: str) -> dict:
    """What Kueue writes when it preempts an admitted Workload for a higher-priority one of its ClusterQueue
    (../shared/kueue/docs/preemption.md): Evicted=True (Preempted) and Preempted=True (InClusterQueue), the admission
    kept until its pods are gone (complete_eviction, then Kueue requeues it)."""
    wl = kube.get(path("workloads", name, namespace))
    message = "Preempted to accommodate a workload due to prioritization in the ClusterQueue"
    conditions = [*(wl.get("status") or {}).get("conditions", []),
                  _condition("Evicted", "True", "Preempted", message),
                  _condition("Preempted", "True", "InClusterQueue", message)]
    return kube._request("PATCH", path("workloads", name, namespace) + "/status",
                         {"status": {"conditions": conditions}}, content_type=MERGE)


def finish(kube: KubeCluster, namespace: str, name: str) -> dict:
    status = {"conditions": [_condition("Finished", "True", "Succeeded", "Job finished successfully")]}
    return kube._request("PATCH", path("workloads", name, namespace) + "/status", {"status": status},
                         content_type=MERGE)
