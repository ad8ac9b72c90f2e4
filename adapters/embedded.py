"""The embedded cluster: the core.cluster.Cluster interface on plain Python state,
with a minimal Kueue (admission of queued workloads FIFO into their queue's
quota) so a reconcile can be watched hour by hour without any server.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from datetime import datetime
from core.cluster import Elector
from core.errors import NotFound
from core.objects import ObjectRef, PolicyStatus, WorkloadInfo


@dataclass
class SoleElector:
    """The embedded cluster has one controller: it always leads."""
    is_leader: bool = True

    def try_acquire_or_renew(self) -> bool:
        return True

    def release(self) -> bool:
        return True


@dataclass
class InMemoryCluster:
    """The embedded cluster: policies, ClusterQueue quotas, Deployments, HPAs, Workloads and Events."""
    policies: list[dict] = field(default_factory=list)
    quotas: dict[str, int] = field(default_factory=dict)                    # ClusterQueue -> GPU quota
    replicas: dict[tuple[str, str], int] = field(default_factory=dict)      # Deployment -> replicas
    hpa_min: dict[tuple[str, str], int] = field(default_factory=dict)       # HPA -> minReplicas
    workloads: dict[tuple[str, str], WorkloadInfo] = field(default_factory=dict)
    statuses: dict[tuple[str, str], dict] = field(default_factory=dict)
    events: list[dict] = field(default_factory=list)
    backlog_gpus: int = 0   # top_up_backlog keeps at least this many GPUs of training queued per queue
    _serial: int = 0

    def list_reservation_policies(self, namespace: str | None = None) -> list[dict]:
        found = []
        for p in self.policies:
            meta = p["metadata"]
            if namespace is None or meta.get("namespace") == namespace:
                found.append({**copy.deepcopy(p), "status": copy.deepcopy(self.statuses.get((meta["namespace"], meta["name"]), {}))})
        return found

    def list_workloads(self, cluster_queue: str) -> list[WorkloadInfo]:
        found = [w for w in self.workloads.values()
                 if w.cluster_queue == cluster_queue or (w.cluster_queue is None and w.queue_name == cluster_queue)]
        return sorted(found, key=lambda w: (w.creation or datetime.min, w.namespace, w.name))

    def get_cluster_queue_quota(self, name: str) -> int:
        if name not in self.quotas:
            raise NotFound(f"ClusterQueue {name} not found", status=404)
        return self.quotas[name]

    def set_cluster_queue_quota(self, name: str, gpus: int) -> bool:
        changed = self.get_cluster_queue_quota(name) != gpus
        self.quotas[name] = gpus
        return changed

    def scale_deployment(self, namespace: str, name: str, replicas: int) -> bool:
        changed = self.replicas.get((namespace, name)) != replicas
        self.replicas[(namespace, name)] = replicas
        return changed

    def set_hpa_min_replicas(self, namespace: str, name: str, min_replicas: int) -> bool:
        changed = self.hpa_min.get((namespace, name)) != min_replicas
        self.hpa_min[(namespace, name)] = min_replicas
        return changed

    def evict_workload(self, namespace: str, name: str, reason: str, plan_id: str) -> bool:
        w = self.workloads[(namespace, name)]
        if not w.active:
            return False
        self.workloads[(namespace, name)] = replace(w, active=False, cluster_queue=None, evicted_by_plan=plan_id)
        return True

    def patch_policy_status(self, namespace: str, name: str, status: PolicyStatus) -> dict:
        old = {c["type"]: c for c in self.statuses.get((namespace, name), {}).get("conditions", [])}
        conditions = {**old, **{c.type: {"type": c.type, "status": c.status, "reason": c.reason,
                                         "message": c.message} for c in status.conditions}}
        self.statuses[(namespace, name)] = {
            "reservedGpus": status.reserved_gpus, "slackGpus": status.slack_gpus,
            "headroomGpus": status.headroom_gpus, "planId": status.plan_id, "model": status.model,
            "forecastDemand": status.forecast_demand, "nextHours": list(status.next_hours),
            "realizedError": dict(status.realized_error or {}), "conditions": list(conditions.values())}
        return self.statuses[(namespace, name)]

    def emit_event(self, about: ObjectRef, reason: str, message: str, type: str = "Normal") -> dict:
        event = {"kind": about.kind, "namespace": about.namespace, "name": about.name,
                 "reason": reason, "message": message, "type": type}
        self.events.append(event)
        return event

    def leader_elector(self, namespace: str, name: str, identity: str, lease_seconds: int = 15) -> Elector:
        return SoleElector()

    # -- the minimal Kueue and a saturated training backlog: what a real cluster does between reconciles
    def top_up_backlog(self, now: datetime, queues: list[str] | None = None) -> None:
        """Queue training workloads (1-8 GPUs, 30-120 s to checkpoint and stop) until every training
        queue has `backlog_gpus` waiting."""
        sizes, stop_seconds = (1, 1, 2, 4, 8), (30.0, 60.0, 90.0, 120.0)
        for queue in queues if queues is not None else [q for q in self.quotas if self._trains(q)]:
            waiting = sum(w.gpus for w in self.list_workloads(queue) if w.cluster_queue is None and w.active)
            while waiting < self.backlog_gpus:
                self._serial += 1
                gpus = sizes[self._serial % len(sizes)]
                name = f"{queue}-job-{self._serial}"
                self.workloads[("training", name)] = WorkloadInfo(
                    "training", name, queue, None, True, 0, now, gpus, None,
                    preemption_seconds=stop_seconds[self._serial % len(stop_seconds)],
                    checkpoint_interval_seconds=1800.0, last_checkpoint=now)
                waiting += gpus

    def _trains(self, queue: str) -> bool:
        return any(queue in p["spec"].get("trainingClusterQueues", []) for p in self.policies)

    def admit(self, now: datetime) -> list[WorkloadInfo]:
        """Admit queued, active workloads oldest first while they fit their queue's quota."""
        admitted = []
        for queue, quota in self.quotas.items():
            used = sum(w.gpus for w in self.workloads.values() if w.cluster_queue == queue and w.active)
            for w in self.list_workloads(queue):
                if w.cluster_queue is None and w.active and used + w.gpus <= quota:
                    self.workloads[(w.namespace, w.name)] = replace(w, cluster_queue=queue, last_checkpoint=now)
                    used += w.gpus
                    admitted.append(w)
        return admitted
