"""Actions as values: what a plan asks of the cluster, computed purely from the plan and the observed state.

`cluster_actions` gives the changes every driver applies (the reconciler on a real or embedded cluster,
the simulator on its world): scale a target, set a ClusterQueue quota, evict a Workload, requeue one
headroom evicted. The reconciler adds `PatchStatus` and `RecordEvent`. Only what differs from the
observed state becomes an action, so a steady state issues none; each action says why, and a cluster
action carries the Event to record once it has been applied. `headroom plan` shows these actions, and
they are what `forecast-only` policies would have done.
"""
from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from core.objects import ObjectRef, PolicyStatus, TargetRef, TargetState, WorkloadInfo
from core.units import replica_count
from planning.planner import UNANNOTATED_PREEMPTION_SECONDS, StepPlan, Training


@dataclass(frozen=True)
class EventNote:
    about: ObjectRef
    reason: str
    message: str
    type: str = "Normal"


@dataclass(frozen=True)
class Scale:
    """A policy's reservation on its target: Deployment replicas, HPA minReplicas or a ClusterQueue quota."""
    policy: str
    target: TargetRef
    replicas: int
    gpus: int
    reason: str
    event: EventNote | None = None


@dataclass(frozen=True)
class SetQuota:
    queue: str
    gpus: int
    reason: str
    event: EventNote | None = None
    lent: bool = False  # training slack lent: the queue is marked so (Cluster.lent_quotas)
    lent_for: str | None = None  # ...by a controller of this namespace's policies (run.namespace; None: every one's)
    replaces: int | None = None  # written only while the quota is still this (None: whatever it is now)


@dataclass(frozen=True)
class Evict:
    workload: str          # namespace/name
    uid: str | None
    queue: str
    gpus: int
    kind: str              # "planned" | "emergency"
    policy: str            # on whose behalf
    work_lost_seconds: float
    plan_id: str
    reason: str
    event: EventNote | None = None
    # its priority and preemption seconds (stop_seconds) as the plan chose it by (None: not said): changed since, it
    # is a victim a plan on them may not choose
    chosen_as: tuple[int, float] | None = None


@dataclass(frozen=True)
class Requeue:
    workload: str
    uid: str | None
    queue: str
    reason: str
    event: EventNote | None = None


@dataclass(frozen=True)
class PatchStatus:
    policy: ObjectRef
    status: PolicyStatus
    reason: str = "status"


@dataclass(frozen=True)
class RecordEvent:
    event: EventNote
    reason: str = "event"


Action = Scale | SetQuota | Evict | Requeue | PatchStatus | RecordEvent


@dataclass(frozen=True)
class PolicyTarget:
    """What a policy acts on."""
    key: str                       # namespace/name
    ref: ObjectRef                 # the ReservationPolicy (Events about it go there)
    target: TargetRef
    gpus_per_replica: int
    active: bool
    inference_queue: str | None
    training_queues: tuple[str, ...]


@dataclass(frozen=True)
class Stopped:
    """A Workload headroom evicted that has stopped: it goes back into its queue."""
    workload: str
    uid: str | None
    queue: str


@dataclass(frozen=True)
class View:
    """The cluster as the last reads saw it."""
    targets: Mapping[str, TargetState | None]   # policy key -> its target's state (None: the target is missing)
    quotas: Mapping[str, int]                   # ClusterQueue -> GPU nominal quota
    training: Training                          # running training
    uids: Mapping[str, str | None]              # running Workload -> uid
    stopped: tuple[Stopped, ...] = ()


WORKLOAD_REF = ("kueue.x-k8s.io/v1beta2", "Workload")


def owners(policies: Sequence[PolicyTarget]) -> dict[str, PolicyTarget]:
    """Each training ClusterQueue an active policy lends to, and the (first) policy that owns it."""
    out: dict[str, PolicyTarget] = {}
    for p in policies:
        if p.active:
            for q in p.training_queues:
                out.setdefault(q, p)
    return out


def cluster_actions(step: StepPlan, view: View, policies: Sequence[PolicyTarget], plan_id: str,
                    refused_hold: Mapping[str, int] | None = None, missing: Collection[str] = (),
                    lent_for: str | None = None, marked: Mapping[str, int] | None = None) -> list[Action]:
    """The changes the plan asks of the cluster now, for `active` policies only. `refused_hold`: the GPUs refused
    policies' targets hold in each inference ClusterQueue (left as they are, so their pods keep their quota there).
    `missing`: the policies whose target is missing (TargetMissing): their inference ClusterQueue holds what such a
    target holds, none, as the plan counts it (a quota left there would let the namespace's other pods take GPUs the
    plan lends). `lent_for`: the namespace whose policies the controller acts on (None: every namespace's), marked
    on each training queue lent into beside the GPUs lent. `marked`: the GPUs each queue's mark says headroom lent it
    (Cluster.lent_quotas; None: not read): a queue lent GPUs its quota already holds, unmarked, is marked too, or it
    would never come back once no policy names it (Reconciler._returned)."""
    actions: list[Action] = []
    reserved = {w.name: w for w in step.workloads}
    for p in policies:
        w = reserved.get(p.key)
        state = view.targets.get(p.key)
        if w is None or not p.active:
            continue
        replicas = replica_count(w.reserved_gpus, p.gpus_per_replica)
        if p.target.kind == "HorizontalPodAutoscaler":
            replicas, current = max(replicas, 1), state.min_replicas if state else None
        elif p.target.kind == "ClusterQueue":
            current = view.quotas.get(p.target.name)
        else:
            current = state.desired_replicas if state else None
        value = w.reserved_gpus if p.target.kind == "ClusterQueue" else replicas
        if current != value:
            what = f"{p.target.kind} {p.target.name}"
            actions.append(Scale(p.key, p.target, replicas, w.reserved_gpus, w.reason, EventNote(
                p.ref, "ReservationChanged", f"reserved {current} -> {value} on {what}: {w.reason}")))
    # an inference ClusterQueue an active policy runs in holds every sharing policy's reservation: the pods of a
    # forecast-only policy in it run on that quota too, and a refused policy's (beyond it they would borrow what the
    # training queues were lent, or keep the working policies' new replicas out)
    inference: dict[str, int] = dict(refused_hold or {})
    managed: set[str] = set()
    for p in policies:
        if p.inference_queue and (p.key in reserved or p.key in missing):
            gpus = reserved[p.key].reserved_gpus if p.key in reserved else 0
            inference[p.inference_queue] = inference.get(p.inference_queue, 0) + gpus
            if p.active:
                managed.add(p.inference_queue)
    for q, gpus in inference.items():
        if q in managed and q in view.quotas and view.quotas[q] != gpus:  # none without GPU quota (QueueMissing)
            actions.append(SetQuota(q, gpus, f"the inference reservation of the policies running in {q}"))
    owned = owners(policies)
    for q, owner in owned.items():
        gpus = step.quotas.get(q, 0)
        unmarked = marked is not None and gpus > 0 and marked.get(q) != gpus
        if q in view.quotas and (view.quotas[q] != gpus or unmarked):  # none without GPU quota (QueueMissing)
            why = f"ClusterQueue {q} quota -> {gpus} GPUs (slack {step.lent_gpus} lent, split by team weight)"
            why += f"; {step.quota_reason}" if step.quota_reason else ""
            actions.append(SetQuota(q, gpus, why, EventNote(owner.ref, "SlackLent", why), lent=True,
                                    lent_for=lent_for))
    due = step.due()
    t = view.training
    at = {job: k for k, job in enumerate(t.ids)} if due else {}
    for x in due:
        k = at.get(x.job)
        if k is None or t.queue[k] not in owned:
            continue
        namespace, name = x.job.split("/", 1)
        message = f"{x.kind} preemption of {x.gpus} GPUs ({x.work_lost_seconds:.0f} s of work lost): {x.reason}"
        actions.append(Evict(x.job, view.uids.get(x.job), t.queue[k], x.gpus, x.kind, x.workload, x.work_lost_seconds,
                             plan_id, x.reason,
                             EventNote(ObjectRef(*WORKLOAD_REF, name, namespace), "Preempted", message),
                             (int(t.priority[k]), float(t.preempt_seconds[k]))))
    for s in view.stopped:
        if s.queue in owned:
            actions.append(Requeue(s.workload, s.uid, s.queue, "its eviction is complete: back into its queue"))
    return actions


class Writes(NamedTuple):
    """A plan's cluster actions in the order they are written (`in_write_order`)."""
    leading: list[Scale]  # the reservations the preemptions are made for
    down: list[SetQuota]  # the quotas that go down
    evictions: list[Evict]  # each Workload once
    scales: list[Scale]  # the other reservations
    up: list[SetQuota]  # the quotas that go up, or stay and are marked
    requeues: list[Requeue]


def in_write_order(actions: Sequence[Action], quotas: Mapping[str, int]) -> Writes:
    """`actions` in the order a demand jump needs them, `quotas` the ClusterQueues' as observed: the reservations the
    preemptions are made for, the quotas that go down, the preemptions; then the other reservations, the quotas that
    go up and the requeues. The reconciler and the simulator write in this order alike: each write is a Kueue event
    that may admit, so another order admits other Workloads."""
    evictions: dict[str, Evict] = {}
    for a in actions:
        if isinstance(a, Evict):  # each Workload once (parallel writers cannot tell a repeat)
            evictions.setdefault(a.workload, a)
    for_whom = {a.policy for a in evictions.values()}
    scales = [a for a in actions if isinstance(a, Scale)]
    quotas_set = [a for a in actions if isinstance(a, SetQuota)]
    down = [a for a in quotas_set if a.gpus < quotas.get(a.queue, 0)]
    return Writes([a for a in scales if a.policy in for_whom], down, list(evictions.values()),
                  [a for a in scales if a.policy not in for_whom], [a for a in quotas_set if a not in down],
                  [a for a in actions if isinstance(a, Requeue)])


def stop_seconds(w: WorkloadInfo) -> float:
    """How long the Workload takes to stop, as the planner takes it: its preemption-seconds annotation, else slow."""
    return w.preemption_seconds if w.preemption_seconds is not None else UNANNOTATED_PREEMPTION_SECONDS


def evicted_gpus(actions: Sequence[Action], policy: str) -> int:
    return sum(a.gpus for a in actions if isinstance(a, Evict) and a.policy == policy)


def training_columns(ids: Sequence[str], queues: Sequence[str], gpus, priority, preempt, interval,
                     last_checkpoint, terminating_gpus: int, serving_gpus: int = 0) -> Training:
    """The planner's view of running training, from columns any driver builds."""
    return Training(tuple(ids), tuple(queues), np.asarray(gpus, np.int64), np.asarray(priority, np.int64),
                    np.asarray(preempt, float), np.asarray(interval, float), np.asarray(last_checkpoint, float),
                    int(terminating_gpus), int(serving_gpus))
