"""The values the controller and every cluster implementation exchange: object references, training
Workloads as the controller sees them, and what it reports on a ReservationPolicy."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

CONDITION_TYPES = ("Ready", "ForecastDegraded", "FallbackActive", "HeadroomAtRisk")
EVENT_MESSAGE_CHARS = 1024  # an Event's message as headroom writes it (events.k8s.io keeps a note of at most 1 kB)
CONDITION_MESSAGE_CHARS = 32768  # a status condition's message: metav1.Condition's maxLength, the CRD's too


def cut(text: str, chars: int) -> str:
    """`text` in at most `chars` characters, the cut marked '...'."""
    return text if len(text) <= chars else text[:chars - 3] + "..."


def event_message(text: str) -> str:
    """`text` as an Event keeps it: cut to EVENT_MESSAGE_CHARS, the cut marked; so what must be said goes first."""
    return cut(text, EVENT_MESSAGE_CHARS)


@dataclass(frozen=True)
class ObjectRef:
    """What an Event is about."""
    api_version: str
    kind: str
    name: str
    namespace: str | None = None
    uid: str | None = None

    @classmethod
    def of(cls, obj: dict[str, Any]) -> ObjectRef:
        meta = obj.get("metadata", {})
        return cls(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"), meta.get("uid"))


@dataclass(frozen=True)
class WorkloadInfo:
    """A Kueue Workload as the controller sees it (v1beta2 fields).

    running: admitted, active and not being evicted; stopping (pods still holding the GPUs): admitted and deactivated
    (headroom's eviction) or being evicted by Kueue itself (its Evicted condition: a preemption of its own, e.g. for a
    higher-priority Workload of the queue); pending: active, not admitted, not finished; evicted by headroom and
    stopped: not admitted, not active, `evicted_by_plan` set (headroom requeues it)."""
    namespace: str
    name: str
    local_queue: str | None         # spec.queueName
    cluster_queue: str | None       # admitted: status.admission.clusterQueue; else the LocalQueue's spec.clusterQueue
    admitted: bool                  # status.admission is set: it holds quota
    active: bool                    # spec.active
    priority: int                   # spec.priority (Kueue fills it from the priority class)
    creation: datetime | None
    gpus: int                       # sum over podSets of count x GPU requests in the pod template
    uid: str | None = None
    priority_class: str | None = None   # spec.priorityClassRef.name
    finished: bool = False          # condition Finished=True
    evicted: bool = False           # condition Evicted=True (Kueue resets it when it admits the Workload again)
    evicted_by_plan: str | None = None
    preemption_seconds: float | None = None
    checkpoint_interval_seconds: float | None = None
    last_checkpoint: datetime | None = None
    deployment: str | None = None   # the Deployment (in `namespace`) whose Pod it runs: Kueue's pod integration

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def running(self) -> bool:
        return self.admitted and self.active and not self.evicted

    @property
    def stopping(self) -> bool:
        return self.admitted and not self.running


@dataclass(frozen=True)
class TargetRef:
    """What a policy's reservation is applied to."""
    kind: str          # "Deployment" | "HorizontalPodAutoscaler" | "ClusterQueue"
    name: str
    namespace: str | None = None  # None for a ClusterQueue


@dataclass(frozen=True)
class TargetState:
    """An inference target now, in replicas (of the policy's gpusPerReplica GPUs) for every kind of target: replicas
    asked for and replicas serving (warm). A ClusterQueue target's replicas are those its GPU quota holds (whole ones:
    its quota, also a part of a replica, is in Cluster.cluster_queue_quotas); on Kubernetes its pods' readiness is not
    read, so all of them count as serving, where the embedded cluster models their warm-up."""
    desired_replicas: int          # Deployment spec.replicas (an HPA: its scale target's); ClusterQueue: its quota's
    ready_replicas: int            # Deployment status.readyReplicas (an HPA: its scale target's); ClusterQueue: above
    min_replicas: int | None = None   # HPA spec.minReplicas
    max_replicas: int | None = None   # HPA spec.maxReplicas
    scales: str | None = None  # HPA spec.scaleTargetRef's Deployment, whose Pods serve it (the embedded world's HPA
    # scales a Deployment of its own name: its pods' Workloads say it)


@dataclass(frozen=True)
class GpuQuota:
    """A Kueue ClusterQueue's or Cohort's quota of GPUs in one flavor (a limit of None: not set, no limit)."""
    nominal: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None


@dataclass(frozen=True)
class QuotaNode:
    """A node of a Kueue cohort tree: a ClusterQueue in a cohort, or a Cohort object."""
    kind: str                      # "ClusterQueue" | "Cohort"
    name: str
    parent: str | None             # a ClusterQueue's spec.cohortName; a Cohort's spec.parentName (None: a root)
    gpus: Mapping[str, GpuQuota]   # by flavor; a flavor not listed has no quota and no limits
    reclaims: str | None = None    # a ClusterQueue's spec.preemption setting that lets Kueue preempt the Workloads
                                   # of other queues of its tree of Cohorts, as "field: value" (None: Never, Kueue's
                                   # default)


@dataclass(frozen=True)
class Condition:
    type: str
    status: str  # "True" | "False" | "Unknown"
    reason: str
    message: str = ""

    def __post_init__(self) -> None:
        if self.type not in CONDITION_TYPES:
            raise ValueError(f"condition type must be one of {CONDITION_TYPES}, got {self.type!r}")
        if self.status not in ("True", "False", "Unknown"):
            raise ValueError(f"condition status must be True, False or Unknown, got {self.status!r}")
        # the API server refuses a longer one, and with it the whole status write (64 clashing queues of 253
        # characters come to about 42,000): cut, marked, what matters first as in an Event
        object.__setattr__(self, "message", cut(self.message, CONDITION_MESSAGE_CHARS))


@dataclass(frozen=True)
class PolicyStatus:
    """What the controller reports on a ReservationPolicy."""
    reserved_gpus: int
    headroom_gpus: int
    conditions: tuple[Condition, ...] = ()
    plan_id: str | None = None
    forecast_demand: float | None = None
    observed_generation: int | None = None
    model: str | None = None
    next_hours: tuple[dict[str, Any], ...] = ()        # {"hour", "reservedGpus", "headroomGpus"}
    realized_error: dict[str, float] | None = None  # "1h"/"6h"/"24h" ahead -> mean scaled error
    holding: dict[str, Any] | None = None  # what the policy holds, as its spec says it (core.policy.holding_said)
    left: list[dict[str, Any]] | None = None  # the targets an edit named others in place of, each as `holding`
    # False: another policy holds the target `holding` names (this one refused): an edit of it leaves none behind
    holds_target: bool | None = None
