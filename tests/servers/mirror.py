"""The simulated world on a real API server, for proving that `headroom run` on Kubernetes decides what `headroom
simulate` does.

Nothing runs pods or Kueue here. The world is adapters.embedded.EmbeddedCluster, the model `simulate` plays out its
what-ifs in, kept as the source of truth; `Mirror` stands in for everyone but the controller:
  * `publish` (before a reconcile) writes what the world did since the last one, as those who do it in a real
    cluster write it: Kueue's job integration creates a Workload per training job, Kueue's scheduler admits it
    (status.admission, QuotaReserved and Admitted), evicts a deactivated one (Evicted) and releases its quota once
    its pods are gone, the job marks it Finished; the job annotates its checkpoint clock; the Deployment controller
    and the kubelet report the inference replicas (status.readyReplicas);
  * `collect` (after it) reads what the controller wrote (Deployment replicas, ClusterQueue quotas, Workloads
    deactivated and reactivated) and applies it to the world through the world's own write methods.
Both talk to the API server through an admin KubeCluster's public Cluster methods and plain object writes.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from adapters.embedded import TRAINING_NAMESPACE, EmbeddedCluster
from adapters.kube import CHECKPOINT_INTERVAL, LAST_CHECKPOINT, PREEMPTION_SECONDS, KubeCluster
from core.objects import TargetRef, WorkloadInfo
from tests.servers import kueue

PENDING, RUNNING, STOPPING, STOPPED, FINISHED = "pending", "running", "stopping", "stopped", "finished"


def state_of(w: WorkloadInfo) -> str:
    """A Workload's phase, as the world reports it (core.objects.WorkloadInfo explains the combinations)."""
    if w.admitted:
        return RUNNING if w.active else STOPPING
    return PENDING if w.active else STOPPED


def deployment(namespace: str, name: str, replicas: int) -> dict:
    """The inference Deployment at the replicas the world's target starts with (serving before the controller's
    first decision)."""
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "server", "image": "inference:1"}]}}}}


def _rfc3339(moment) -> str:
    return pd.Timestamp(moment).tz_convert("UTC").strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Mirror:
    kube: KubeCluster        # an admin client: Kueue, the job integration, the Deployment controller, the kubelet
    world: EmbeddedCluster
    target: TargetRef        # the policy's Deployment
    queue: str               # the training ClusterQueue, and its LocalQueue in TRAINING_NAMESPACE
    phases: dict[str, list[str]] = field(default_factory=dict)  # Workload name -> every phase written, in order
    replicas: tuple[int, int] | None = None                # the Deployment's (replicas, ready) last written

    @property
    def gpus_per_replica(self) -> int:
        """The GPUs of one of the target's replicas, as its policy says."""
        return next(inf.gpus_per_replica for inf in self.world.inference.values() if inf.ref == self.target)

    @property
    def deployment_path(self) -> str:
        return f"/apis/apps/v1/namespaces/{self.target.namespace}/deployments/{self.target.name}"

    def create(self) -> None:
        """The cluster the world starts as: the flavor, the training ClusterQueue (quota 0) and its LocalQueue, the
        inference Deployment with the replicas serving before (ready)."""
        for ns in (self.target.namespace, TRAINING_NAMESPACE):
            self.kube.apply(f"/api/v1/namespaces/{ns}", {"apiVersion": "v1", "kind": "Namespace",
                                                          "metadata": {"name": ns}})
        self.kube.apply(kueue.path("resourceflavors", kueue.FLAVOR), kueue.resource_flavor())
        self.kube.apply(kueue.path("clusterqueues", self.queue), kueue.cluster_queue(self.queue, gpus=0))
        self.kube.apply(kueue.path("localqueues", self.queue, TRAINING_NAMESPACE),
                        kueue.local_queue(TRAINING_NAMESPACE, self.queue))
        self.kube.create(f"/apis/apps/v1/namespaces/{self.target.namespace}/deployments",
                         deployment(self.target.namespace or "", self.target.name,
                                    self.world.target_state(self.target, self.gpus_per_replica).desired_replicas))
        self._replicas()

    def delete(self) -> None:
        """Every object `create` and `publish` made (namespaces stay: nothing here finalizes a deleted one)."""
        for name in self.phases:
            self.kube.delete(kueue.path("workloads", name, TRAINING_NAMESPACE))
        self.kube.delete(kueue.path("localqueues", self.queue, TRAINING_NAMESPACE))
        self.kube.delete(kueue.path("clusterqueues", self.queue))
        self.kube.delete(self.deployment_path)

    # ---------------------------------------------------------------------------- the world -> the API server
    def publish(self) -> None:
        now = {w.name: w for w in self.world.workloads()}
        for name, w in now.items():
            phase, before = state_of(w), self.phases.get(name, [None])[-1]
            if before is None:  # Kueue's job integration: one Workload per job, in the job's LocalQueue
                self.kube.create(kueue.path("workloads", namespace=TRAINING_NAMESPACE), kueue.workload(
                    TRAINING_NAMESPACE, name, self.queue, gpus_per_pod=w.gpus, annotations={
                        PREEMPTION_SECONDS: repr(w.preemption_seconds),
                        CHECKPOINT_INTERVAL: repr(w.checkpoint_interval_seconds)}))
            if phase != before:
                self._write(w, phase)
                self.phases.setdefault(name, []).append(phase)
        for name, phases in self.phases.items():
            if name not in now and phases[-1] != FINISHED:  # done: the world no longer lists it
                kueue.finish(self.kube, TRAINING_NAMESPACE, name)
                phases.append(FINISHED)
        self._replicas()

    def _write(self, w: WorkloadInfo, phase: str) -> None:
        if phase == RUNNING:  # the job's checkpoint clock starts at its admission; Kueue admits it
            assert w.last_checkpoint is not None
            self.kube._request("PATCH", kueue.path("workloads", w.name, TRAINING_NAMESPACE),
                               {"metadata": {"annotations": {LAST_CHECKPOINT: _rfc3339(w.last_checkpoint)}}},
                               content_type=kueue.MERGE)
            kueue.admit(self.kube, TRAINING_NAMESPACE, w.name, self.queue)
        elif phase == STOPPING:  # deactivated: Kueue evicts it; it holds its quota until its pods are gone
            evicting(self.kube, TRAINING_NAMESPACE, w.name)
        elif phase == STOPPED:
            kueue.complete_eviction(self.kube, TRAINING_NAMESPACE, w.name)
        # PENDING: created just now, or reactivated by the controller itself: nothing for Kueue to write

    def _replicas(self) -> None:
        """The Deployment controller and the kubelet: pods for every replica asked for, ready once warm."""
        state = self.world.target_state(self.target, self.gpus_per_replica)
        if (state.desired_replicas, state.ready_replicas) == self.replicas:
            return
        self.replicas = (state.desired_replicas, state.ready_replicas)
        generation = self.kube.get(self.deployment_path)["metadata"]["generation"]
        status = {"observedGeneration": generation, "replicas": state.desired_replicas,
                  "updatedReplicas": state.desired_replicas, "readyReplicas": state.ready_replicas,
                  "availableReplicas": state.ready_replicas,
                  "unavailableReplicas": state.desired_replicas - state.ready_replicas}
        self.kube._request("PATCH", f"{self.deployment_path}/status", {"status": status}, content_type=kueue.MERGE)

    # ---------------------------------------------------------------------------- the API server -> the world
    def collect(self) -> None:
        """What the controller wrote, applied to the world (each write only if it changes the world, as the
        controller's own writes are)."""
        replicas = self.kube.target_state(self.target, self.gpus_per_replica).desired_replicas
        if replicas != self.world.target_state(self.target, self.gpus_per_replica).desired_replicas:
            self.world.scale_deployment(self.target.namespace or "", self.target.name, replicas)
        for queue, gpus in self.kube.cluster_queue_quotas().items():
            if queue in self.world.quotas and self.world.quotas[queue] != gpus:
                self.world.set_cluster_queue_quota(queue, gpus)
        world = {w.name: w for w in self.world.workloads()}
        for w in self.kube.workloads():
            mine = world.get(w.name) if w.namespace == TRAINING_NAMESPACE else None
            if mine is None:
                continue
            if not w.active and w.evicted_by_plan and mine.active:
                self.world.evict_workload(TRAINING_NAMESPACE, w.name, mine.uid, "deactivated by headroom",
                                          w.evicted_by_plan)
            elif w.active and not mine.active and mine.evicted_by_plan and not mine.admitted:
                self.world.requeue_workload(TRAINING_NAMESPACE, w.name, mine.uid)


def evicting(kube: KubeCluster, namespace: str, name: str) -> dict:
    """What Kueue writes when a Workload it admitted is deactivated: Evicted=True (Deactivated); the admission and
    its quota stay until the pods are gone (kueue.complete_eviction)."""
    held = [c for c in (kube.get(kueue.path("workloads", name, namespace)).get("status") or {}).get("conditions", [])
            if c["type"] != "Evicted"]
    evicted = {"type": "Evicted", "status": "True", "reason": "Deactivated", "message": "The workload is deactivated",
               "lastTransitionTime": _rfc3339(pd.Timestamp.now("UTC"))}
    status = {"conditions": [*held, evicted]}
    return kube._request("PATCH", kueue.path("workloads", name, namespace) + "/status", {"status": status},
                         content_type=kueue.MERGE)


def replay(reconciler, controller: KubeCluster, mirror: Mirror, times: pd.DatetimeIndex) -> None:
    """`headroom run`'s embedded replay (cli/run.py `_replay`) with the world behind a real API server. Each step: time
    passes and what happened meanwhile is published (jobs finished or stopped, replicas warm); the controller
    reconciles at `now` through its watch cache; its writes are taken into the world; Kueue's scheduling pass runs
    and its writes (admissions, evictions begun) are published at once, as Kueue makes them."""
    for k, now in enumerate(times):
        if k:
            mirror.world.advance(now.timestamp())
            mirror.publish()
        controller.sync()  # the watch caches hold what was just written (a real loop's interval leaves them time)
        reconciler.reconcile(now)
        mirror.collect()
        mirror.world.admit()
        mirror.publish()
