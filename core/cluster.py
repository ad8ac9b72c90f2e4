"""The cluster the controller acts on: the interface every implementation provides.

Two implementations: adapters.kube.KubeCluster (Kubernetes + Kueue, its reads served from a watch
cache) and adapters.embedded.EmbeddedCluster (in-process state with a model of what the cluster does
between reconciles: warm-up, the HPA, Kueue's admission, checkpoints and termination).

Reads return a consistent view of the last state seen; on a real cluster they cost no request in
steady state. Every write is idempotent and returns True only if it changed something.
"""
from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Any, Protocol

from core.objects import ObjectRef, PolicyStatus, QuotaNode, TargetRef, TargetState, WorkloadInfo


class Elector(Protocol):
    is_leader: bool

    @property
    def expires_at(self) -> float:
        """When (time.monotonic()) the lease held lapses as the other replicas may count it (-inf: none held)."""
        ...

    def try_acquire_or_renew(self) -> bool: ...

    def release(self) -> bool: ...


class PlanSummaryWriter(Protocol):
    """Where the plan's cluster-wide numbers are kept (a ConfigMap on Kubernetes: adapters.kube.PlanSummary)."""

    def write(self, data: Mapping[str, str]) -> bool:
        """True if written (a summary that says nothing new is not)."""
        ...

    def forget(self) -> None:
        """What was last written is forgotten: the next write goes out (a replica that leads again)."""
        ...


# A forecast frame's attrs keys, each kept with the frame by every ForecastStore: the seasonal-24 scale of the window it
# was fitted on (realized error is divided by it, as the backtest divides each fold by its own window's), and the
# policy's metadata.generation it was made for, the model that made it, what it is a forecast of (its basis: a
# replica that has just taken the Lease plans on the leader's forecast until its own refit lands:
# controller.forecasting) and the policy object's metadata.uid (one created again under its name is another
# policy: the old object's forecasts are not its own); data only, never code
FORECAST_SCALE = "scale"
FORECAST_GENERATION = "generation"
FORECAST_MODEL = "model"
FORECAST_BASIS = "basis"
FORECAST_UID = "uid"
FORECAST_TAKEN_UP_BY = (FORECAST_GENERATION, FORECAST_MODEL, FORECAST_BASIS, FORECAST_UID)  # kept beside the scale


class ForecastStore(Protocol):
    """Forecasts by issue time, per series, shared by every replica (realized error survives failover, and a new
    leader plans on the last forecast in force); each frame loaded carries the `FORECAST_SCALE` and
    `FORECAST_TAKEN_UP_BY` attrs it was recorded with, as plain data (whoever reads them checks
    their types: controller.observe.stored)."""

    def record(self, series: str, issued_at: Any, frame: Any) -> Any: ...

    def load(self, series: str, since: Any = None) -> dict[Any, Any]: ...

    def prune(self, series: str, before: Any) -> int: ...


class Cluster(Protocol):
    @property
    def writes_side_by_side(self) -> bool:
        """Whether a reconcile may make many writes at once (an API server's: Kueue reacts to them later, on its own).
        False: one after another in the order given, as each may change what comes of the next."""
        ...

    def snapshot(self) -> AbstractContextManager[Any]:
        """One reconcile's view (the controller enters it around each): within it each kind of object is read from
        the cluster at most once, what a watch cache serves aside, and served from then on as read, with this client's
        own writes in it (a reconcile reads what it wrote)."""
        ...

    # -- reads
    def reservation_policies(self, namespace: str | None = None) -> list[dict[str, Any]]:
        """ReservationPolicy objects (metadata, spec, status), in every namespace or one."""
        ...

    def workloads(self) -> list[WorkloadInfo]:
        """Every Kueue Workload, oldest first."""
        ...

    def cluster_queue_quotas(self) -> Mapping[str, int]:
        """Each ClusterQueue's GPU nominalQuota (a queue that does not exist is absent)."""
        ...

    def lent_quotas(self, lent_for: str | None = None) -> Mapping[str, int]:
        """Each ClusterQueue headroom last set as a training queue it lends into, and the GPUs it lent (the queue
        marks it: a controller restarted, or another replica, knows it too), by a controller of `lent_for`'s
        policies (run.namespace; None: every namespace's)."""
        ...

    def cohort_tree(self) -> list[QuotaNode]:
        """Each ClusterQueue in a cohort and each Kueue Cohort object, with their GPU quotas (controller.cohorts)."""
        ...

    def within_queue_preemption(self) -> Mapping[str, str]:
        """Each ClusterQueue whose spec.preemption.withinClusterQueue is not Never (Kueue's default): that value."""
        ...

    def strict_fifo_queues(self) -> frozenset[str]:
        """The ClusterQueues whose spec.queueingStrategy is StrictFIFO (Kueue's default: BestEffortFIFO)."""
        ...

    def target_state(self, target: TargetRef, gpus_per_replica: int) -> TargetState:
        """Replicas of an inference target, each of `gpus_per_replica` GPUs (its policy's: what a ClusterQueue
        target's GPU quota is read in); raises core.errors.NotFound if it does not exist."""
        ...

    # -- writes
    def scale_deployment(self, namespace: str, name: str, replicas: int) -> bool: ...

    def set_hpa_min_replicas(self, namespace: str, name: str, min_replicas: int) -> bool: ...

    def set_cluster_queue_quota(self, name: str, gpus: int, lent: bool = False, lent_for: str | None = None,
                                replaces: int | None = None) -> bool:
        """Its GPU nominalQuota; `lent`: training slack headroom lends, so the queue is marked as lent into
        (lent_quotas), by a controller of `lent_for`'s policies (None: every namespace's), else the mark goes.
        `replaces`: only while its quota is still that (False, nothing written, once someone else has set another)."""
        ...

    def evict_workload(self, namespace: str, name: str, uid: str | None, reason: str, plan_id: str,
                       queue: str | None = None) -> bool:
        """Deactivate a running Workload (Kueue evicts it) and record why; False if it is already inactive, is no
        longer the object `uid` names, or runs in another ClusterQueue than `queue` (None: any)."""
        ...

    def requeue_workload(self, namespace: str, name: str, uid: str | None) -> bool:
        """Reactivate a Workload headroom evicted once its eviction is complete (Kueue queues it again)."""
        ...

    def patch_policy_status(self, namespace: str, name: str, status: PolicyStatus, uid: str | None = None) -> bool:
        """Write a policy's status; False if it says nothing new (the cluster may then skip the write), or the policy
        is no longer the object `uid` names (deleted and created again under its name: its status is not the new
        one's)."""
        ...

    def emit_event(self, about: ObjectRef, reason: str, message: str, type: str = "Normal") -> dict[str, Any]: ...

    def leader_elector(self, namespace: str, name: str, identity: str, lease_seconds: int = 15) -> Elector: ...
