"""The embedded cluster: the core.cluster.Cluster interface on in-process state, and a model of what a GPU
cluster does between two reconciles. It is `headroom run`'s cluster when there is no Kubernetes, and the
world the simulator's what-ifs play out in; the controller's decisions come from the planner alone.

What it models (core.settings.WorldSettings has the numbers):
  * inference replicas: each target served before the world starts, so it starts with the replicas its demand
    then needs, warm, and the controller ran before: what it decides at that moment (its scales, and the quotas that
    admit them) was in place, so the replicas it asks beyond those serve at once (a replay measures a policy as it
    runs, not its start). A new replica gets GPUs from the idle pool (else waits for GPUs to be freed), and once time
    has moved on serves `warmup_seconds` later; a replica of a policy that names an inferenceClusterQueue is a Kueue
    Workload of it (a refused policy's naming another's training queue: of that queue, `pods_in_training`; so too a
    target an edit left behind, `left_pods`), and waits until that queue's quota admits it too (`_kueue_inference`).
    Scaling in drops waiting replicas first, then warming, then warm ones. An HPA target scales up on demand by itself
    (replicas for the demand it sees, at least minReplicas) and down only after `hpa_scale_down_seconds` of lower
    demand, as Kubernetes' HPA does;
  * Kueue: training Workloads admitted into their ClusterQueue's quota, borrowing the cohort's unused
    quota (planning.kueue), onto GPUs that are free, whenever GPUs free or a job arrives (Kueue's scheduler does
    not wait for the controller's next step); what it looks at and cannot admit for quota it sets aside until
    something in the cohort changes (`_kueue_events`), but the head of a StrictFIFO queue
    (WorldSettings.strict_fifo_queues), which blocks the Workloads behind it until it is admitted;
  * training: a running job checkpoints every `checkpoint_interval_seconds` of progress; deactivated,
    it stops after its preemption time (checkpoint + termination), losing the work since its last
    checkpoint, and holds its GPUs until then; requeued, it resumes from that checkpoint;
  * demand: each policy's trace, a sample at time t being the demand of the interval ending at t
    (what a rate over the last step reports); the interval is served by the replicas warm in it.
A saturated backlog keeps every training queue's pending work at least the cluster's size, unless a
job trace gives the arrivals; above BACKLOG_SCALE_GPUS its jobs' sizes grow with the cluster.
Times are epoch seconds.
"""
from __future__ import annotations

import bisect
import copy
import math
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import NamedTuple

import numpy as np
import pandas as pd

from core.cluster import Elector
from core.errors import ConfigError, NotFound
from core.objects import ObjectRef, PolicyStatus, QuotaNode, TargetRef, TargetState, WorkloadInfo
from core.policy import (
    Claims,
    PolicySpec,
    created,
    held_demand_per_gpu,
    holding_spec,
    parse_policy_spec,
    pods_queues,
    refused_holders,
    refused_lends,
)
from core.settings import WorldSettings
from core.units import epoch_seconds
from planning.kueue import admit
from planning.planner import Training, newest_checkpoint

# DELETED: a Workload deleted before it ran, its ClusterQueue no longer a training queue (EmbeddedCluster._retire)
PENDING, RUNNING, STOPPING, STOPPED, DONE, DELETED = range(6)
_NO_DEMAND: tuple[list[float], list[float]] = ([], [])
TRAINING_NAMESPACE = "training"
# Above this many GPUs the backlog's job sizes are multiplied by capacity // BACKLOG_SCALE_GPUS: its jobs stay as many
# as on a cluster of 1,000 to 1,999 GPUs (each step's cost is in the jobs: Kueue's pass reads every pending one), and
# a job stays as large a share of the cluster. At or below it, the sizes are backlog_job_gpus themselves.
BACKLOG_SCALE_GPUS = 1000


@dataclass
class SoleElector:
    """The embedded cluster has one controller: it always leads."""
    is_leader: bool = True
    expires_at: float = math.inf

    def try_acquire_or_renew(self) -> bool:
        return True

    def release(self) -> bool:
        return True


@dataclass
class _Inference:
    """One policy's inference target: replicas asked for, and where each replica is."""
    key: str                    # the policy's namespace/name
    ref: TargetRef
    gpus_per_replica: int
    demand_per_gpu: float | None  # None: unknown (a refused policy's spec that does not parse): no demand served
    desired: int = 0            # replicas asked for (an HPA: what the HPA asks for)
    min_replicas: int = 0       # an HPA's minReplicas
    max_replicas: int | None = None
    warm: int = 0               # replicas serving since before the current interval
    warming: list[float] = field(default_factory=list)  # when each warming replica starts serving
    # the Workload of each replica with no GPUs yet, oldest first: (its creationTimestamp, its UID)
    asked: list[tuple[int, str]] = field(default_factory=list)
    # ...and the Kueue event count (EmbeddedCluster._kueue_events) at which Kueue set it aside: it is looked at again
    # only after the next event
    aside: list[int] = field(default_factory=list)
    recommendations: list[tuple[float, int]] = field(default_factory=list)  # an HPA's recent (time, replicas)

    @property
    def held_replicas(self) -> int:
        return self.warm + len(self.warming)

    @property
    def waiting(self) -> int:
        """Replicas with no GPUs yet."""
        return len(self.asked)


class _Held(NamedTuple):
    """A policy as the world holds it (EmbeddedCluster._hold_all): its spec, or what a spec that does not parse says
    it holds (core.policy.holding_spec; where not even that reads, the spec it was held by before), and whether the
    controller accepts it."""
    key: str                        # the policy's namespace/name
    spec: PolicySpec
    ref: TargetRef
    demand_per_gpu: float | None    # None: a spec that does not parse, its demandPerGpu unread too
    accepted: bool


@dataclass
class Accounting:
    """What happened, per policy and for training, since the world started."""
    steps: int = 0
    seconds: float = 0.0
    demand: dict[str, float] = field(default_factory=dict)         # GPU-seconds of demand
    within: dict[str, float] = field(default_factory=dict)         # ...of it within the cluster's capacity
    served: dict[str, float] = field(default_factory=dict)
    unmet_within: dict[str, float] = field(default_factory=dict)   # demand within the cluster left unserved
    short_steps: dict[str, int] = field(default_factory=dict)
    longest_short: dict[str, int] = field(default_factory=dict)    # steps in the longest run of short steps
    short_hours: dict[str, set[int]] = field(default_factory=dict)  # clock hours (epoch hours) with a short step
    hours: set[int] = field(default_factory=set)  # clock hours any accounted interval starts in (short_hours' whole)
    # per policy and epoch day: [demand GPU-seconds, unmet within the cluster, short steps, steps] (how much the
    # shortage figures vary from day to day: SimResult's standard errors)
    days: dict[str, dict[int, list[float]]] = field(default_factory=dict)
    run: dict[str, int] = field(default_factory=dict)
    inference_held: float = 0.0     # GPU-seconds held by inference (warm or warming)
    training_alloc: float = 0.0     # GPU-seconds allocated to training (running or stopping)
    # ...of it wasted: work after the last checkpoint, and stopping time (so training_alloc - training_lost is the
    # progress the jobs hold, in GPU-seconds)
    training_lost: float = 0.0
    preemptions: dict[str, int] = field(default_factory=dict)      # by kind
    reclaim_seconds: list[float] = field(default_factory=list)


class _Jobs:
    """Training Workloads as columns (index = job number); capacity doubles as jobs are added."""
    NUMERIC = {"gpus": np.int64, "work": float, "progress": float, "credited": float, "preempt": float,
               "interval": float, "priority": np.int64, "created": float, "state": np.int64,
               "admitted_at": float, "stop_at": float, "queue": np.int64, "aside": np.int64,
               "ids": object, "queue_names": object}  # "training/<name>" and the queue's name, for the planner
    # the columns, set from NUMERIC in __init__ and grown in add
    gpus: np.ndarray
    work: np.ndarray
    progress: np.ndarray
    credited: np.ndarray
    preempt: np.ndarray
    interval: np.ndarray
    priority: np.ndarray
    created: np.ndarray
    state: np.ndarray
    admitted_at: np.ndarray
    stop_at: np.ndarray
    queue: np.ndarray
    aside: np.ndarray  # the Kueue event count at which Kueue set it aside (EmbeddedCluster._kueue_events)
    ids: np.ndarray
    queue_names: np.ndarray

    def __init__(self) -> None:
        self.size = 0
        for name, dtype in self.NUMERIC.items():
            setattr(self, name, np.zeros(64, dtype=dtype))
        self.names: list[str] = []
        self.uids: list[str] = []
        self.evicted_by: list[str | None] = []

    def add(self, name: str, uid: str, queue: int, gpus: int, work: float, preempt: float, interval: float,
            created: int, priority: int = 0, queue_name: str | None = None) -> int:
        i = self.size
        if i == len(self.gpus):
            for column in self.NUMERIC:
                old = getattr(self, column)
                grown = np.zeros(2 * len(old), dtype=old.dtype)
                grown[:i] = old
                setattr(self, column, grown)
        self.gpus[i], self.work[i], self.preempt[i], self.interval[i] = gpus, work, preempt, interval
        self.priority[i], self.created[i], self.state[i], self.queue[i] = priority, created, PENDING, queue
        self.progress[i] = self.credited[i] = 0.0
        self.admitted_at[i] = self.stop_at[i] = np.nan
        self.aside[i] = -1
        self.ids[i], self.queue_names[i] = f"{TRAINING_NAMESPACE}/{name}", queue_name
        self.names.append(name)
        self.uids.append(uid)
        self.evicted_by.append(None)
        self.size += 1
        return i


def _utc(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def _left_key(ref: TargetRef) -> str:
    """A target an edit left behind, as a key among the policies' (`_inference_workloads`): none is `left:...`, a
    policy's key being its namespace/name."""
    return f"left:{ref.kind}/{ref.namespace}/{ref.name}"


def _creation_timestamp(t: float) -> int:
    """A Workload's metadata.creationTimestamp, created at `t`: whole seconds, as the API server keeps it (RFC 3339),
    so Kueue orders two Workloads created in one second by UID (planning.kueue)."""
    return math.floor(t)


class EmbeddedCluster:
    """The Cluster interface on in-process state, advanced step by step by `advance` (time passes) and
    `admit` (Kueue's scheduling pass)."""
    # one after another, in the order given: each write is a Kueue event taken at once (admitting what then fits), so
    # the order decides what is admitted, and simulate writes in one order (in_write_order); nor is the state locked
    writes_side_by_side = False

    def __init__(self, capacity_gpus: int, policies: list[dict], demand: Mapping[str, pd.Series], start: float,
                 settings: WorldSettings = WorldSettings(),
                 jobs: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None):
        self.capacity_gpus = capacity_gpus
        self.settings = settings
        self.now = start
        self._policies_created = 0
        self.policies = [self._created(copy.deepcopy(p)) for p in policies]
        self.statuses: dict[tuple[str, str], dict] = {}
        self.events: list[dict] = []
        self.accounting = Accounting()
        self.rng = np.random.default_rng(settings.seed)
        self.specs: dict[str, PolicySpec] = {}
        self.quotas: dict[str, int] = {}
        # ClusterQueue -> the GPUs headroom last lent it, and the namespace its controller acts on (Cluster.lent_quotas)
        self.lent: dict[str, tuple[int, str | None]] = {}
        self.inference: dict[str, _Inference] = {}
        self.inference_queues: dict[str, str] = {}  # policy key -> the inferenceClusterQueue its pods are Workloads of
        # a refused policy's key -> the training queue (another policy's) its inferenceClusterQueue names: its target is
        # no one else's, and Kueue admits its pods there as Workloads of that queue, in its quota (`_hold_all`)
        self.pods_in_training: dict[str, str] = {}
        # the targets an edit of their policy left behind (it named another): an edit deletes no workload, so each runs
        # on, scaled by no one (an HPA scales itself), until a policy names it again; each with the spec it was held by
        self.left: dict[TargetRef, tuple[PolicySpec, _Inference]] = {}
        # ...each that runs and names an inferenceClusterQueue -> that queue: its pods are Workloads of it (their
        # queue-name label), held by it, or, one held by no one in a training queue lent into, as a refused policy's
        # are (`pods_in_training`), counted by the controller within what is lent there (`within`)
        self.left_pods: dict[TargetRef, str] = {}
        self._left_within: set[TargetRef] = set()  # ...those held by no one, within a training queue lent into
        self._found: dict[TargetRef, _Inference] = {}  # _target's answers
        self.training_queues: list[str] = []  # the ClusterQueues training is submitted into
        # ...and every one it ever was (a job's queue number indexes it): one a policy now holds inference in is not one
        self._queues: list[str] = []
        self._training_numbers: list[int] = []  # the training queues' numbers in it
        # each policy's (times, values) as lists: one sample is read at a time, which numpy makes slow
        self.demand: dict[str, tuple[list[float], list[float]]] = {}
        for key, series in demand.items():
            values = pd.Series(series.to_numpy(float)).ffill().fillna(0.0).tolist()  # a gap: demand as last seen
            self.demand[key] = (epoch_seconds(series.index).tolist(), values)
        self.jobs = _Jobs()
        self._pending: list[int] = []     # job numbers waiting for admission (planning.kueue.admit orders them)
        self._running = np.zeros(0, np.int64)
        self._stopping: list[int] = []
        self._stopped: list[int] = []     # evicted by headroom and stopped: waiting to be requeued
        self._serial = 0
        self._pods = 0  # inference replicas asked for: each a Workload of its own, numbered for its UID
        self._arrivals = None
        self._pending_version = self._held_version = 0  # bumped when the pending line, or what training holds, changes
        # Kueue's events: bumped whenever something in the cohort changes that makes Kueue look again at every Workload
        # it set aside (a Workload finishing, stopping or deleted, a quota changing)
        self._kueue_events = 0
        self._derived: tuple | None = None
        self._training: tuple[int, float, Training] | None = None  # (version, until when, the planner's view)
        self._step_alloc: tuple[tuple, float] = ((), 0.0)  # (version, step): the GPU-seconds running jobs use in it
        self._finish: tuple[int, float] = (-1, math.inf)  # (version, when): the soonest a running job finishes
        self._idle_admission: tuple | None = None  # the inputs of the last admission pass that admitted nothing
        self._started = False             # time has moved on (`advance`)
        self._topped_up = -1              # the version at the backlog's last top-up
        self.backlog_scale = max(1, capacity_gpus // BACKLOG_SCALE_GPUS)  # the backlog's job sizes' multiplier
        if jobs is not None:  # a job trace: (gpus, work seconds, arrival offset seconds from `start`)
            if len(jobs[0]) and int(np.max(jobs[0])) > capacity_gpus:  # Kueue would never admit it
                raise ValueError(f"a job of {int(np.max(jobs[0]))} GPUs can never fit the {capacity_gpus}-GPU cluster")
            # as lists: admit reads them one at a time
            self._arrivals = (np.asarray(jobs[0]).tolist(), np.asarray(jobs[1]).tolist(),
                              (start + np.asarray(jobs[2], float)).tolist(), 0)
        self._hold_all()  # last: a target starts serving its demand, on GPUs nothing else holds yet
        unknown = sorted(set(settings.strict_fifo_queues) - set(self.quotas))
        if unknown:  # a typo would replay that queue as BestEffortFIFO, without a word
            raise ConfigError(None, [
                f"simulate.world.strict_fifo_queues: {', '.join(unknown)}: no ClusterQueue of the policies (their "
                "trainingClusterQueues, inferenceClusterQueue or ClusterQueue target: "
                f"{', '.join(sorted(self.quotas))})"])

    def _hold_all(self) -> None:
        """What every policy holds, derived from all of them as the controller derives who is accepted every reconcile
        (core.policy.Claims, taken oldest first): the accepted ones are held before those refused, which hold only what
        no policy held before them holds (but a refused ClusterQueue target: it holds its quota whole whatever the
        age of the refused pods in it, core.policy.refused_holders). Done again on each `apply_policy`: an edit,
        or a new policy, can change who else is accepted (an older policy that drops a target or a queue a newer
        one was refused for)."""
        claims = Claims()
        held: list[_Held] = []
        for p in sorted(self.policies, key=created):
            meta, raw = p["metadata"], p.get("spec")
            key = f"{meta.get('namespace', 'default')}/{meta['name']}"
            spec: PolicySpec | None
            demand_per_gpu: float | None
            try:
                spec = parse_policy_spec(raw, f"ReservationPolicy {key}")
                demand_per_gpu, parsed = spec.capacity.demand_per_gpu, True
            except ConfigError:  # refused (InvalidSpec), it claims nothing, but holds what its spec still says
                spec, demand_per_gpu, parsed = holding_spec(raw), held_demand_per_gpu(raw), False
            if spec is None:  # not even its target reads: an edit deletes no workload, so it holds what it last held,
                # as the controller reads it (controller.reconcile.ParsedSpecs.holding); never held: nothing is known
                spec = self.specs.get(key)
                if spec is None:
                    continue
            ref = spec.target.ref(meta.get("namespace", "default"))
            held.append(_Held(key, spec, ref, demand_per_gpu, parsed and claims.take(key, ref, spec) is None))
        for h in held:  # an edit named another target: the one held runs on, left behind
            before, held_by = self.inference.get(h.key), self.specs.get(h.key)
            if before is not None and held_by is not None and before.ref != h.ref:
                self.left[before.ref] = (held_by, self.inference.pop(h.key))
                # its replicas' queue is the left target's now (left_pods, below); the policy's is set as it is held
                self.inference_queues.pop(h.key, None)
                self.pods_in_training.pop(h.key, None)
        inference_named = {q for h in held for q in h.spec.inference_queues}
        kept = [h for h in held if h.accepted]
        refused = [h for h in held if not h.accepted]  # oldest first, as the controller counts them
        left = list(self.left.items())
        # whether each refused policy and left target holds its target, decided together: the controller's rule
        # (controller.reconcile.invalid_holdings)
        lent = {q for h in refused for q in refused_lends(h.spec, inference_named)}
        accepted = [(h.ref, h.spec) for h in kept]
        others = [(h.ref, h.spec) for h in refused] + [(ref, spec) for ref, (spec, _) in left]
        owns = refused_holders(accepted, others, lent)
        # one holding no target whose pods Kueue admits into a training queue: the controller counts them there
        # (controller.reconcile.training_view, invalid_holdings' `within`), so the world runs them there; one whose
        # pods run in a ClusterQueue target held runs none of its own (they are within that quota)
        lent_into = {q for h in kept for q in h.spec.training_cluster_queues} | lent
        in_training = [q if q in lent_into else None for q in pods_queues(accepted, others, owns)]
        roles = Claims()  # each ClusterQueue's role, as the policies held so far hold it (its `role`)
        for h, own, pods_queue in zip(kept + refused, [True] * len(kept) + owns, [None] * len(kept) + in_training):
            self._hold(h, own, roles, inference_named, pods_queue)
        self._left_within = {ref for (ref, _), queue in zip(left, in_training[len(refused):]) if queue is not None}
        for (ref, (spec, _)), own, queue in zip(left, owns[len(refused):], in_training[len(refused):]):
            if queue is None and not own:  # a policy holds it again, or it is within a quota held: none of its own
                self.left.pop(ref, None)
                self.left_pods.pop(ref, None)
                continue
            # it runs on, its pods Workloads of the inferenceClusterQueue it was held with (their queue-name label),
            # whether that is a training queue lent into or no longer
            if spec.inference_cluster_queue is None or ref.kind == "ClusterQueue":  # (a queue's are no pods)
                self.left_pods.pop(ref, None)
            else:
                self.left_pods[ref] = spec.inference_cluster_queue
        self._forget_left_without_gpus()
        self._found.clear()
        self._retire()

    def _forget_left_without_gpus(self) -> None:
        """A left target that holds no GPU (scaled to 0, or left at 0) is forgotten, as the controller forgets one it
        reads at 0 (controller.reconcile.ParsedSpecs.forget_left): scaled up again by hand, it is no one's, counted by
        neither until a policy names it again. One whose pods run within a training queue lent into (`_left_within`)
        the controller does not read (they are within what is lent there): kept, as it keeps it."""
        for ref, (_, inf) in list(self.left.items()):
            if ref in self._left_within:
                continue
            gpus = self.quotas.get(ref.name, 0) if ref.kind == "ClusterQueue" else inf.desired * inf.gpus_per_replica
            if not gpus:
                del self.left[ref]
                self.left_pods.pop(ref, None)
                self._found.clear()

    def _retire(self) -> None:
        """A ClusterQueue that held training and now holds inference (an edit let a policy keep it as its inference
        queue or target) is no training queue: no Workload is submitted into it, and those waiting there are deleted (a
        quota there is the reservation's, not training's); those running finish, held in its Kueue usage."""
        held = set(self.inference_queues.values()) | {inf.ref.name for _, inf in self._inference_workloads()
                                                       if inf.ref.kind == "ClusterQueue"}
        self._training_numbers = [k for k, q in enumerate(self._queues) if q not in held]
        self.training_queues = [self._queues[k] for k in self._training_numbers]
        j, gone = self.jobs, held.intersection(self._queues)
        deleted = {i for i in self._pending + self._stopped if j.queue_names[i] in gone}
        if deleted:
            j.state[list(deleted)] = DELETED
            self._pending = [i for i in self._pending if i not in deleted]
            self._stopped = [i for i in self._stopped if i not in deleted]
            self._pending_version += 1
            self._kueue_events += 1  # Workloads deleted: Kueue looks again at what it set aside

    def _hold(self, h: _Held, own: bool, roles: Claims, inference_named: set[str], pods_queue: str | None) -> None:
        """What a policy names exists in the cluster as a cluster the controller's accepted policies describe holds it
        (`_hold_all`; `roles.role`: each ClusterQueue's, "inference", "target" or "training", as the policies held
        before this one hold it, the accepted ones first as they claimed it; a quota, or another policy's workload,
        left from the last rebuild is no one's until held again): a policy
        accepted there holds its target and every ClusterQueue it names (training quotas start at 0); one refused there
        (its target another's, or a queue another names otherwise, or its spec does not parse) holds its target where
        `own` says so, core.policy.refused_holders' verdict, the controller's: a target is one workload, whichever
        policies name it, and a queue's GPUs are held once. A ClusterQueue has the role the policy that kept it gave it
        (no training is submitted into an inference queue, nor on a refused policy's behalf into any queue a policy
        names for inference, `inference_named`). A refused policy that holds no target, its inferenceClusterQueue
        `pods_queue` another policy's training queue, runs its target as Workloads of that queue (`pods_in_training`),
        as Kueue admits its pods there on a cluster. The target served before: it starts with the replicas its demand
        now needs, warm (as many as the idle GPUs hold), so a ClusterQueue it runs in (its target, or its
        inferenceClusterQueue) starts with a quota holding them, as Kueue admitted them. A refused policy whose spec
        does not parse holds what it still says it holds (core.policy.holding_spec, as the controller reads it), its
        target's demand served by its demandPerGpu where that reads (else none is known)."""
        key, spec, ref, accepted = h.key, h.spec, h.ref, h.accepted
        self.specs[key] = spec
        queue_target = ref.name if ref.kind == "ClusterQueue" else None

        def named(q: str | None, kind: str) -> str | None:  # a queue as this policy names it, if that is its role
            return q if q is not None and (accepted or roles.role.get(q, (kind,))[0] == kind) else None

        taken = not own  # another's, or a queue held, or held within one
        runs = own or pods_queue is not None  # a workload of its own
        if own and ref in self.left:  # left behind by an edit, and named again
            self.inference[key] = self.left.pop(ref)[1]
            self.left_pods.pop(ref, None)
            self.inference[key].key = key
        other = next((k for k, inf in self.inference.items() if k != key and inf.ref == ref), None)
        if other is not None and own:  # held last time by a policy that comes later now (a refused one, or one held
            # after this one): the workload is this policy's now
            self.inference[key] = self.inference.pop(other)
            self.inference[key].key = key
            self.inference_queues.pop(other, None)
            self.pods_in_training.pop(other, None)
        inference_queue = None if taken else named(spec.inference_cluster_queue, "inference")
        # a refused policy's training queue is one no policy names for inference (the controller lends it no other)
        training = [q for q in (spec.training_cluster_queues if accepted else refused_lends(spec, inference_named))
                    if named(q, "training")]
        if not runs:  # the target is what the cluster has: no workload of this policy's own (one held before is gone)
            self.inference.pop(key, None)
            self._found.clear()
        if pods_queue is None:
            self.pods_in_training.pop(key, None)
        else:
            self.pods_in_training[key] = pods_queue
        if inference_queue is None:
            self.inference_queues.pop(key, None)
        else:
            self.inference_queues[key] = inference_queue
        named_here = [*((q, "training") for q in training), (inference_queue, "inference")]
        if not taken:  # a target taken is a queue another holds, in the role it gave it
            named_here.append((queue_target, "target"))
        for q, kind in named_here:
            if q is not None:
                self.quotas.setdefault(q, 0)
                roles.name(key, q, kind)
        inf = self.inference.get(key)
        if runs and inf is not None and inf.ref == ref:  # held before: an edit may have changed how it reads
            inf.demand_per_gpu = h.demand_per_gpu  # how headroom converts its demand: as the spec now says
            if inf.gpus_per_replica != spec.capacity.gpus_per_replica:
                self._roll_out(inf, spec.capacity.gpus_per_replica)
        if runs and (inf is None or inf.ref != ref):
            inf = _Inference(key, ref, spec.capacity.gpus_per_replica, h.demand_per_gpu)
            self.inference[key] = inf
            self._found.clear()
            fits = max(self.idle_gpus, 0) // inf.gpus_per_replica
            inf.desired = inf.warm = min(self._replicas_for(inf, self.now), fits)
            if ref.kind == "HorizontalPodAutoscaler":  # the HPA saw that demand
                inf.recommendations.append((self.now, inf.desired))
            if queue_target is not None:  # a ClusterQueue target's replicas are its quota
                self.quotas[queue_target] = inf.desired * inf.gpus_per_replica
            if inference_queue is not None:  # what the serving replicas of every policy running in it hold, at least
                self.quotas[inference_queue] = max(self.quotas[inference_queue],
                                                   self._held_in(self._replica_queues())[inference_queue])
        self._queues += [q for q in training if q not in self._queues]
        self._pending_version += 1  # a new training queue: what is derived from the queues is redone
        self._kueue_events += 1  # and its quota is new to Kueue: it looks again at what it set aside
        self._held_version += 1

    def _roll_out(self, inf: _Inference, gpus_per_replica: int) -> None:
        """A new replica size: capacity.gpusPerReplica is the pod template's GPU request as the policy reads it, so an
        edit of it is a rollout to pods of that size. Modelled as Kubernetes' Recreate strategy: every pod goes (its
        GPUs free at once), as many pods of the new size are asked for (a ClusterQueue target: its quota's whole
        replicas; an HPA: what it now recommends), and each warms up as any new replica."""
        inf.warm, inf.warming, inf.asked, inf.aside = 0, [], [], []
        inf.gpus_per_replica = gpus_per_replica
        replicas = inf.desired
        if inf.ref.kind == "ClusterQueue":
            replicas = self.quotas[inf.ref.name] // gpus_per_replica
        elif inf.ref.kind == "HorizontalPodAutoscaler":  # what it saw, in replicas of the old size, no longer holds
            inf.recommendations = [(self.now, self._replicas_for(inf, self.now))]
            replicas = self._hpa_recommendation(inf)
        self._kueue_events += self._in_kueue(inf)  # its pods' Workloads deleted: a Kueue event
        self._scale(inf, replicas)

    def apply_policy(self, obj: dict) -> None:
        """`kubectl apply` of a ReservationPolicy: created, or its spec replaced (metadata.generation goes up). An edit
        deletes no workload: one whose spec no longer says what it holds holds what it held; a workload kept takes the
        replica size (`_roll_out`) and demandPerGpu its policy now says."""
        obj = copy.deepcopy(obj)
        meta = obj["metadata"]
        for i, p in enumerate(self.policies):
            if (p["metadata"].get("namespace"), p["metadata"]["name"]) == (meta.get("namespace"), meta["name"]):
                meta["generation"] = int(p["metadata"].get("generation", 1) or 1) + 1
                meta["uid"] = p["metadata"]["uid"]
                self.policies[i] = obj
                break
        else:
            meta.setdefault("generation", 1)
            self.policies.append(self._created(obj))
        self._hold_all()

    def _created(self, obj: dict) -> dict:
        """`obj` as the API server stores an object it creates: with a uid of its own, whatever it was sent with, kept
        by every update (the controller tells by it an object deleted and created again under its name)."""
        self._policies_created += 1
        obj["metadata"]["uid"] = f"uid-policy-{self._policies_created}"
        return obj

    def delete_target(self, target: TargetRef) -> None:
        """`kubectl delete` of a policy's target (a ClusterQueue target: with its quota): its replicas stop at once and
        their GPUs go to replicas waiting elsewhere, then to training; the policy stays, its target not found, until
        `apply_policy` makes the target again."""
        inf = self._target(target)
        self.left_pods.pop(target, None)
        if self.left.pop(target, None) is None:
            del self.inference[inf.key]
            self.inference_queues.pop(inf.key, None)
            self.pods_in_training.pop(inf.key, None)
        if target.kind == "ClusterQueue":
            self.quotas.pop(target.name, None)
        self._found.clear()
        self._kueue_events += 1  # its pods' Workloads (and a ClusterQueue target) deleted: Kueue looks again
        self._grant(self.now)

    # ------------------------------------------------------------------------------------ Cluster: reads
    def snapshot(self) -> AbstractContextManager[None]:
        """Nothing to hold: its reads cost no request, and within a reconcile its state moves only by the controller's
        own writes (time passes in `advance`, between reconciles), so each reconcile sees one view already."""
        return nullcontext()

    def reservation_policies(self, namespace: str | None = None) -> list[dict]:
        found = []
        for p in self.policies:
            meta = p["metadata"]
            if namespace is None or meta.get("namespace") == namespace:
                status = self.statuses.get((meta.get("namespace"), meta["name"]), {})
                found.append({**copy.deepcopy(p), "status": copy.deepcopy(status)})
        return found

    def workloads(self) -> list[WorkloadInfo]:
        j = self.jobs
        out = []
        for i in range(j.size):
            state = int(j.state[i])
            if state in (DONE, DELETED):
                continue
            queue = self._queues[int(j.queue[i])]
            admitted = state in (RUNNING, STOPPING)
            out.append(WorkloadInfo(
                namespace=TRAINING_NAMESPACE, name=j.names[i], local_queue=queue, cluster_queue=queue,
                admitted=admitted, active=state in (PENDING, RUNNING), priority=int(j.priority[i]),
                creation=_utc(float(j.created[i])), gpus=int(j.gpus[i]), uid=j.uids[i],
                evicted_by_plan=j.evicted_by[i], preemption_seconds=float(j.preempt[i]),
                checkpoint_interval_seconds=float(j.interval[i]),
                last_checkpoint=_utc(float(j.admitted_at[i])) if admitted else None))
        return out + self._pod_workloads()

    def _pod_workloads(self) -> list[WorkloadInfo]:
        """The Workloads Kueue's pod integration makes for the pods of `pods_in_training` and `left_pods`, one each, of
        the Deployment its target runs (an HPA's is named as the HPA: `target_state`): admitted while it holds GPUs,
        else pending."""
        out = []
        for key, (inf, queue) in self._replica_queues().items():
            if key in self.inference_queues:  # Workloads of an inference queue: none the controller reads
                continue
            held = [(_creation_timestamp(self.now), f"uid-{key}-held-{k}") for k in range(inf.held_replicas)]
            for k, (creation, uid) in enumerate(held + inf.asked):
                out.append(WorkloadInfo(
                    namespace=inf.ref.namespace or "", name=f"pod-{inf.ref.name}-{k}", local_queue=queue,
                    cluster_queue=queue, admitted=k < len(held), active=True, priority=0, creation=_utc(creation),
                    gpus=inf.gpus_per_replica, uid=uid, deployment=inf.ref.name))
        return out

    def cluster_queue_quotas(self) -> Mapping[str, int]:
        return dict(self.quotas)

    def lent_quotas(self, lent_for: str | None = None) -> Mapping[str, int]:
        return {q: gpus for q, (gpus, by) in self.lent.items() if by == lent_for}

    def cohort_tree(self) -> list[QuotaNode]:
        return []  # the training queues borrow from one another alone (planning.kueue): no queue lends them more

    def within_queue_preemption(self) -> Mapping[str, str]:
        return {}  # the embedded Kueue preempts within no queue (README, "The simulated Kueue")

    def strict_fifo_queues(self) -> frozenset[str]:
        return frozenset(self.settings.strict_fifo_queues)

    def target_state(self, target: TargetRef, gpus_per_replica: int) -> TargetState:
        if target.kind == "ClusterQueue" and target.name in self.quotas \
                and not any(inf.ref == target for _, inf in self._inference_workloads()):
            # a ClusterQueue no policy holds as its target (a refused policy's, where another holds the queue) is
            # there all the same: read as the API server reads one (adapters.kube), its quota's whole replicas
            replicas = self.quotas[target.name] // gpus_per_replica
            return TargetState(replicas, replicas)
        inf = self._target(target)  # its replicas are of the GPUs its policy says, as `gpus_per_replica` is
        hpa = target.kind == "HorizontalPodAutoscaler"
        # an HPA scales a Deployment of its own name: the one its pods' Workloads are of (`_pod_workloads`)
        return TargetState(inf.desired, inf.warm + sum(1 for r in inf.warming if r <= self.now),
                           inf.min_replicas if hpa else None, inf.max_replicas, target.name if hpa else None)

    def _target(self, target: TargetRef) -> _Inference:
        inf = self._found.get(target)  # cleared whenever a policy's target changes
        if inf is not None:
            return inf
        for _, inf in self._inference_workloads():
            if inf.ref == target:
                self._found[target] = inf
                return inf
        where = f"{target.namespace}/" if target.namespace else ""  # a ClusterQueue has no namespace
        raise NotFound(f"{target.kind} {where}{target.name} not found", status=404)

    # ------------------------------------------------------------------------------------ Cluster: writes
    def scale_deployment(self, namespace: str, name: str, replicas: int) -> bool:
        inf = self._target(TargetRef("Deployment", name, namespace))
        return self._scale(inf, replicas)

    def set_hpa_min_replicas(self, namespace: str, name: str, min_replicas: int) -> bool:
        inf = self._target(TargetRef("HorizontalPodAutoscaler", name, namespace))
        changed = inf.min_replicas != min_replicas
        inf.min_replicas = min_replicas
        self._scale(inf, max(self._hpa_recommendation(inf), min_replicas))
        return changed

    def set_cluster_queue_quota(self, name: str, gpus: int, lent: bool = False, lent_for: str | None = None,
                                replaces: int | None = None) -> bool:
        if name not in self.quotas:
            raise NotFound(f"ClusterQueue {name} not found", status=404)
        if replaces is not None and self.quotas[name] != replaces:
            return False  # someone else set it since: theirs
        changed = self.quotas[name] != gpus
        self.quotas[name] = gpus
        if lent:
            self.lent[name] = (gpus, lent_for)
        else:
            self.lent.pop(name, None)
        self._kueue_events += changed  # Kueue looks again at what it set aside
        for _, inf in self._inference_workloads():  # an inference ClusterQueue target: its quota is its replicas
            if inf.ref.kind == "ClusterQueue" and inf.ref.name == name:
                self._scale(inf, gpus // inf.gpus_per_replica)
        if self._replica_queues():  # more quota: Kueue admits replicas waiting for it
            self._grant(self.now)
        return changed

    def evict_workload(self, namespace: str, name: str, uid: str | None, reason: str, plan_id: str,
                       queue: str | None = None) -> bool:
        i = self._job(name, uid)
        j = self.jobs
        if queue is not None and self._queues[int(j.queue[i])] != queue:
            return False
        if j.state[i] == PENDING:
            self._pending.remove(i)
            j.state[i] = STOPPED
            j.evicted_by[i] = plan_id
            self._stopped.append(i)
            self._pending_version += 1
            self._kueue_events += 1  # a Workload deactivated: Kueue looks again at what it set aside
            return True
        if j.state[i] != RUNNING:
            return False
        if j.admitted_at[i] < self.now:  # run since its admission: its credit is its newest checkpoint of progress
            j.credited[i] = np.floor(j.progress[i] / j.interval[i]) * j.interval[i]
        lost = float(j.progress[i] - j.credited[i])
        j.progress[i] = j.credited[i]
        j.state[i] = STOPPING
        j.stop_at[i] = self.now + float(j.preempt[i])
        j.evicted_by[i] = plan_id
        self._running = self._running[self._running != i]
        self._stopping.append(i)
        self._held_version += 1
        a = self.accounting
        a.training_lost += lost * float(j.gpus[i])  # its stopping time is lost as it passes (advance)
        a.reclaim_seconds.append(float(j.preempt[i]))
        return True

    def requeue_workload(self, namespace: str, name: str, uid: str | None) -> bool:
        i = self._job(name, uid)
        j = self.jobs
        if j.state[i] != STOPPED or j.evicted_by[i] is None:
            return False
        j.state[i] = PENDING
        j.evicted_by[i] = None
        self._stopped.remove(i)
        self._pending.append(i)  # back at its place in Kueue's order (its creation time): admission sorts the line
        j.aside[i] = -1  # queued again: looked at in the next pass
        self._pending_version += 1
        return True

    def _job(self, name: str, uid: str | None) -> int:
        try:
            i = int((name if uid is None else uid).rsplit("-", 1)[1]) - 1  # both end in the job's number
            if self.jobs.names[i] == name:
                return i
        except (ValueError, IndexError):
            pass
        raise NotFound(f"Workload {TRAINING_NAMESPACE}/{name} not found", status=404)

    def patch_policy_status(self, namespace: str, name: str, status: PolicyStatus, uid: str | None = None) -> bool:
        if uid is not None and not any(p["metadata"]["uid"] == uid for p in self.policies):
            return False  # (as on Kubernetes) no longer the object the status was planned for
        said = self.statuses.get((namespace, name), {})
        old = {c["type"]: c for c in said.get("conditions", [])}
        conditions = {**old, **{c.type: {"type": c.type, "status": c.status, "reason": c.reason,
                                         "message": c.message} for c in status.conditions}}
        # as Kubernetes' status says it (adapters.kube): none scored this time ({}): the last realized error stands;
        # a policy not planned (None): none
        errors = status.realized_error
        realized = dict(errors) if errors else {} if errors is None else said.get("realizedError", {})
        self.statuses[(namespace, name)] = {
            "reservedGpus": status.reserved_gpus, "headroomGpus": status.headroom_gpus, "planId": status.plan_id,
            "model": status.model, "observedGeneration": status.observed_generation,
            "forecastDemand": status.forecast_demand, "nextHours": list(status.next_hours),
            "realizedError": realized, "conditions": list(conditions.values()),
            "holding": copy.deepcopy(status.holding), "left": copy.deepcopy(status.left),
            "holdsTarget": status.holds_target}
        return True

    def emit_event(self, about: ObjectRef, reason: str, message: str, type: str = "Normal") -> dict:
        event = {"kind": about.kind, "namespace": about.namespace, "name": about.name,
                 "reason": reason, "message": message, "type": type}
        self.events.append(event)
        return event

    def leader_elector(self, namespace: str, name: str, identity: str, lease_seconds: int = 15) -> Elector:
        return SoleElector()

    # ------------------------------------------------------------------------------------ the model
    def _columns(self) -> tuple:
        """What the job lists give, computed once per change of them: the running jobs' ids, queues, GPUs,
        priorities, preemption times, checkpoint intervals and admission times, and the GPUs of the stopping ones.
        (version, ids, queues, gpus, priority, preempt, interval, admitted_at, stopping)"""
        if self._derived is None or self._derived[0] != self._held_version:
            j, r = self.jobs, self._running
            stopping = sum(int(j.gpus[i]) for i in self._stopping)
            self._derived = (self._held_version, tuple(j.ids[r]), tuple(j.queue_names[r]), j.gpus[r], j.priority[r],
                             j.preempt[r], j.interval[r], j.admitted_at[r], stopping)
        return self._derived

    def _usage(self) -> dict[str, int]:
        """The GPUs each training queue's running and stopping jobs hold (what Kueue counts against its quota)."""
        j, r = self.jobs, self._running
        held = np.concatenate([r, np.array(self._stopping, np.int64)]) if self._stopping else r
        counts = np.bincount(j.queue[held], weights=j.gpus[held], minlength=len(self._queues))
        return {q: int(counts[k]) for k, q in enumerate(self._queues)}

    @property
    def training_gpus(self) -> int:
        """GPUs training holds: running jobs and jobs still stopping (summed here, not from `_columns`: Kueue's passes
        between two steps ask it as jobs come and go, where the planner's view is built once a step)."""
        j = self.jobs
        return int(j.gpus[self._running].sum()) + sum(int(j.gpus[i]) for i in self._stopping)

    def _inference_workloads(self) -> Iterator[tuple[str, _Inference]]:
        """Every inference workload: each policy's (with its key), then each an edit left behind (`_left_key`)."""
        yield from self.inference.items()
        for ref, (_, inf) in self.left.items():
            yield _left_key(ref), inf

    @property
    def inference_gpus(self) -> int:
        return sum(inf.held_replicas * inf.gpus_per_replica for _, inf in self._inference_workloads())

    @property
    def idle_gpus(self) -> int:
        return self.capacity_gpus - self.inference_gpus - self.training_gpus

    def _scale(self, inf: _Inference, replicas: int) -> bool:
        changed = inf.desired != replicas
        inf.desired = replicas
        have = inf.held_replicas + inf.waiting
        if replicas > have:
            created = _creation_timestamp(self.now)
            for _ in range(replicas - have):
                self._pods += 1
                inf.asked.append((created, f"uid-{inf.key}-{self._pods}"))
            inf.aside += [-1] * (replicas - have)
            self._grant(self.now)
        elif replicas < have:
            drop = have - replicas
            take = min(drop, inf.waiting)  # the newest waiting first, as a ReplicaSet deletes its pending pods
            del inf.asked[len(inf.asked) - take:], inf.aside[len(inf.aside) - take:]
            drop -= take
            while drop and inf.warming:  # the latest to serve goes first
                inf.warming.remove(max(inf.warming))
                drop -= 1
            inf.warm -= min(drop, inf.warm)
            self._kueue_events += self._in_kueue(inf)  # its pods' Workloads deleted: a Kueue event
            self._grant(self.now)  # freed GPUs serve another policy's waiting replicas
        if not replicas:
            self._forget_left_without_gpus()
        return changed

    def _grant(self, at: float, idle: int | None = None) -> int:
        """Waiting replicas Kueue admits take idle GPUs (all of them, or `idle`), in policy order; each serves
        `warmup_seconds` after `at`. Returns the GPUs left idle."""
        idle = self.idle_gpus if idle is None else idle
        admitted = self._kueue_inference()
        for key, inf in self._inference_workloads():
            granted = set()
            for r in admitted.get(key, range(inf.waiting)):  # without an inferenceClusterQueue: all, oldest first
                if idle < inf.gpus_per_replica:
                    break
                granted.add(r)
                if self._started:
                    inf.warming.append(at + self.settings.warmup_seconds)
                else:  # the controller ran before: what it decides as the world starts was in place, warm
                    inf.warm += 1
                idle -= inf.gpus_per_replica
            if granted:
                inf.asked = [t for r, t in enumerate(inf.asked) if r not in granted]
                inf.aside = [e for r, e in enumerate(inf.aside) if r not in granted]
        return idle

    def _kueue_inference(self) -> dict[str, list[int]]:
        """Kueue's pass over the waiting replicas of the policies that name an inferenceClusterQueue (each pod a
        Workload of it) and the training Workloads waiting: which replicas it admits (each such policy's, as indices
        into its `asked`, in admission order). What it looks at and does not admit, replicas and training alike, it
        sets aside until its next event.

        A replica is admitted into its queue's unused nominalQuota, else borrows the training cohort's unused quota (the
        shipped inference queue is in that cohort with no borrowingLimit, and its lendingLimit 0 lends the cohort
        nothing), in Kueue's order (planning.kueue.admit): each scheduling cycle admits the heads within their own
        queue's quota first, then borrowers by priority (PrioritySortingWithinCohort, on by default), then creation
        time (a replica's: the second it was asked for), then UID (in a tie of creation second, a training Workload's
        uid-<n> goes before a replica's uid-<policy>-<n>, digits sorting before letters). Kueue gives inference no
        precedence of its own: only a higher priority would (a WorkloadPriorityClass), and even that never before a
        Workload within its own quota; and a training head within its queue's nominalQuota that the cohort's unused
        quota does not cover reserves that quota for its cycle, keeping a borrowing replica after it out of that cycle
        (the replica heads its queue again in the next). The training
        Workloads are taken on quota alone (admitted, pods wait for GPUs); a queue is StrictFIFO if the world's
        settings say so (strict_fifo_queues), else BestEffortFIFO (Kueue's default and the shipped queues')."""
        queues = self._replica_queues()
        if not queues:
            return {}
        events, j = self._kueue_events, self.jobs
        p = np.array(self._pending, np.int64)
        p = p[j.aside[p] != events]  # those Kueue set aside wait for its next event
        replicas = [(key, r) for key, (inf, _) in queues.items() for r, seen in enumerate(inf.aside) if seen != events]
        quotas, usage, kept = self._cohort({})
        chosen, aside = admit(
            np.concatenate([j.queue_names[p], np.array([queues[key][1] for key, _ in replicas], object)]),
            np.concatenate([j.gpus[p], np.array([queues[key][0].gpus_per_replica for key, _ in replicas], np.int64)]),
            np.concatenate([j.priority[p], np.zeros(len(replicas), np.int64)]),
            np.concatenate([j.created[p], np.array([queues[key][0].asked[r][0] for key, r in replicas], float)]),
            [j.uids[i] for i in p] + [queues[key][0].asked[r][1] for key, r in replicas], usage, quotas,
            sum(quotas.values()), kept, self.settings.strict_fifo_queues)
        admitted: dict[str, list[int]] = {key: [] for key in queues}
        for k in chosen:
            if k >= len(p):
                key, r = replicas[k - len(p)]
                admitted[key].append(r)
        for k in aside:
            if k < len(p):
                j.aside[p[k]] = events
            else:
                key, r = replicas[k - len(p)]
                queues[key][0].aside[r] = events
        return admitted

    def _cohort(self, admitted: Mapping[str, list[int]]) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
        """The training cohort as planning.kueue.admit reads it: each ClusterQueue's nominalQuota and the GPUs its
        Workloads hold (an inference queue's: its replicas holding GPUs, and those `admitted` waiting for them; a
        training queue's: its training and the pods of `pods_in_training` and `left_pods` there, alike), and
        the quota each inference queue keeps: its lendingLimit 0 lends the cohort nothing. An inference queue that was
        a training queue (`_retire`) holds the training still running there too."""
        queues = self._replica_queues()
        used = self._held_in({key: queues[key] for key in self.inference_queues})
        pods = self._held_in({key: queue for key, queue in queues.items() if key not in self.inference_queues})
        for key, chosen in admitted.items():
            inf, queue = queues[key]
            (used if key in self.inference_queues else pods)[queue] += len(chosen) * inf.gpus_per_replica
        quotas = {q: self.quotas.get(q, 0) for q in [*self.training_queues, *used, *pods]}
        usage = self._usage()
        for q, gpus in (*used.items(), *pods.items()):
            usage[q] = usage.get(q, 0) + gpus
        return quotas, usage, {q: quotas[q] for q in used}

    def _admit_training(self, quotas: dict[str, int], usage: dict[str, int], kept: dict[str, int],
                        free: int) -> list[int]:
        """The pending training Workloads (job numbers) Kueue admits into the cohort (`_cohort`) and `free` GPUs; those
        it looks at and sets aside wait for its next event."""
        j, p = self.jobs, np.array(self._pending, np.int64)
        p = p[j.aside[p] != self._kueue_events]
        chosen, aside = admit(j.queue_names[p], j.gpus[p], j.priority[p], j.created[p], [j.uids[i] for i in p],
                              usage, quotas, free, kept, self.settings.strict_fifo_queues)
        j.aside[p[aside]] = self._kueue_events
        return [int(p[k]) for k in chosen]

    def _replica_queues(self) -> dict[str, tuple[_Inference, str]]:
        """Each workload whose replicas are Kueue Workloads, by its key in `_inference_workloads` -> it and their
        ClusterQueue: a policy's inferenceClusterQueue, or the training queue a refused policy's pods run in
        (`pods_in_training`), or a target's an edit left behind (`left_pods`)."""
        if not (self.inference_queues or self.pods_in_training or self.left_pods):  # (a replay's every step asks)
            return {}
        queues = {key: (self.inference[key], queue)
                  for key, queue in {**self.inference_queues, **self.pods_in_training}.items()}
        return queues | {_left_key(ref): (self.left[ref][1], queue) for ref, queue in self.left_pods.items()}

    def _in_kueue(self, inf: _Inference) -> bool:
        """Whether the replicas of `inf` are Kueue Workloads (`_replica_queues`)."""
        return any(inf is kept for kept, _ in self._replica_queues().values())

    def _held_in(self, queues: Mapping[str, tuple[_Inference, str]]) -> dict[str, int]:
        """The GPUs the replicas of the workloads `queues` maps to each ClusterQueue hold there (warming ones too)."""
        held = dict.fromkeys((queue for _, queue in queues.values()), 0)
        for inf, queue in queues.values():
            held[queue] += inf.held_replicas * inf.gpus_per_replica
        return held

    def _hpa_recommendation(self, inf: _Inference) -> int:
        """Replicas for the highest demand the HPA saw over its scale-down window, at least minReplicas."""
        window = self.now - self.settings.hpa_scale_down_seconds
        inf.recommendations = [(t, r) for t, r in inf.recommendations if t >= window]
        best = max((r for _, r in inf.recommendations), default=0)
        top = inf.max_replicas if inf.max_replicas is not None else best
        return min(max(best, inf.min_replicas), max(top, inf.min_replicas))

    def _replicas_for(self, inf: _Inference, t: float) -> int:
        """The replicas that serve the demand of the interval ending at `t`."""
        return int(math.ceil(self._demand_gpus(inf, t) / inf.gpus_per_replica - 1e-9))

    def _demand_gpus(self, inf: _Inference, t: float) -> float:
        """The GPUs the demand of the interval ending at `t` needs (a demandPerGpu not known: none)."""
        return 0.0 if inf.demand_per_gpu is None else self.demand_at(inf.key, t) / inf.demand_per_gpu

    def _new_job(self, queue: int, gpus: int, work: float, created: float) -> None:
        """A training Workload created at `created` into `queue` (its number in `_queues`)."""
        self._serial += 1
        lo, hi = self.settings.preemption_seconds
        # named by its number, as its UID: the UIDs of one queue's Workloads sort as their names (as text: uid-10
        # before uid-9; a real cluster's UIDs are random, so a tie of creation second there is chance)
        name, uid = f"{self._queues[queue]}-job-{self._serial}", f"uid-{self._serial}"
        i = self.jobs.add(name, uid, queue, gpus, work, float(self.rng.uniform(lo, hi)),
                          self.settings.checkpoint_interval_seconds, _creation_timestamp(created),
                          queue_name=self._queues[queue])
        self._pending.append(i)
        self._pending_version += 1

    def admit(self) -> list[int]:
        """Kueue's pass at `now`: arrivals (the job trace) or the backlog's top-up, then admission into the
        training queues' quotas and the GPUs no inference replica is waiting for."""
        j, s = self.jobs, self.settings
        if self._arrivals is not None:
            gpus, work, at, nxt = self._arrivals
            live = self._training_numbers
            while nxt < len(at) and at[nxt] <= self.now:
                self._new_job(live[nxt % max(len(live), 1)], int(gpus[nxt]), float(work[nxt]), float(at[nxt]))
                nxt += 1
            self._arrivals = (gpus, work, at, nxt)
        elif self.training_queues and self._topped_up != self._pending_version:  # the pending line changed: top it up
            waiting = np.zeros(len(self._queues), np.int64)
            if self._pending:
                p = np.array(self._pending)
                np.add.at(waiting, j.queue[p], j.gpus[p])
            for q in self._training_numbers:
                while waiting[q] < self.capacity_gpus:
                    g = int(self.rng.choice(s.backlog_job_gpus)) * self.backlog_scale
                    self._new_job(q, g, float(self.rng.uniform(*s.backlog_job_hours)) * 3600, self.now)
                    waiting[q] += g
            self._topped_up = self._pending_version
        if not self._pending:
            return []
        queued = self._kueue_inference()
        free = self.idle_gpus - sum(len(queued.get(key, inf.asked)) * inf.gpus_per_replica
                                    for key, inf in self._inference_workloads())
        if free <= 0:
            return []
        quotas, usage, kept = self._cohort(queued)
        # A pass that admitted nothing admits nothing again with the same pending line and usage, no Kueue event (what
        # it set aside stays aside), no more free GPUs and no more quota in all: Kueue admits a Workload only if its
        # GPUs fit the free GPUs and the cohort's unused quota (planning.kueue.admit), and both can only have shrunk.
        lent = sum(quotas[q] for q in self.training_queues) - sum(max(usage[q] - kept[q], 0) for q in kept)
        inputs = (self._pending_version, self._held_version, self._kueue_events, free, lent)
        last = self._idle_admission
        if last is not None and last[:3] == inputs[:3] and free <= last[3] and lent <= last[4]:
            return []
        admitted = self._admit_training(quotas, usage, kept, free)
        if admitted:  # out of the line in one pass: removing them one by one is quadratic in a long line
            taken = set(admitted)
            self._pending = [i for i in self._pending if i not in taken]
            j.state[admitted] = RUNNING
            j.admitted_at[admitted] = self.now
            self._running = np.concatenate([self._running, np.array(admitted, np.int64)])
            self._pending_version += 1
            self._held_version += 1
            if self._replica_queues():  # replicas may take what the training waiting leaves
                self._grant(self.now)
        else:
            self._idle_admission = inputs
        return admitted

    def advance(self, to: float) -> None:
        """Time passes from `now` to `to`: jobs progress, checkpoint, finish or stop; freed GPUs go to waiting
        replicas, then Kueue admits into what is left, at the moment they free (or a job arrives), not at the next
        reconcile: its scheduler runs whenever quota frees, not on the controller's clock; replicas warm up; each
        policy's demand of the interval ending at `to` is served by what is warm in it; the HPA reacts."""
        t0, dt = self.now, to - self.now
        if dt <= 0:
            raise ValueError(f"the clock only moves forward "
                             f"({pd.Timestamp(t0, unit='s')} -> {pd.Timestamp(to, unit='s')})")
        self._started = True  # a replica granted from now on is no decision in place before the world started
        while True:  # from one moment Kueue may admit (a job arrives, or GPUs free while jobs wait) to the next
            at = self.now
            until = min(self._next_event(), to)
            freed = self._train(at, until)
            self.now = until
            if freed:  # GPUs freed go to waiting replicas first, at the moment they free
                idle = self.idle_gpus - sum(g for _, g in freed)
                for moment, g in sorted(freed):
                    self._kueue_events += 1  # a Workload finished or stopped: Kueue looks again at what it set aside
                    idle = self._grant(moment, idle + g)
            if until >= to:  # what frees at `to` itself Kueue admits after the controller's reconcile there
                break
            self.admit()
        a = self.accounting
        held = 0.0
        for key, inf in self._inference_workloads():
            serving = float(inf.warm)
            warm_now = []
            for ready in inf.warming:
                serving += min(max((to - max(ready, t0)) / dt, 0.0), 1.0)
                if ready <= to:
                    inf.warm += 1
                else:
                    warm_now.append(ready)
            inf.warming = warm_now
            held += (inf.held_replicas + 0.0) * inf.gpus_per_replica
            if key in self.inference:  # one left behind serves none of its policy's demand (its new target does)
                self._serve(key, inf, to, serving * inf.gpus_per_replica, dt)
            if inf.ref.kind == "HorizontalPodAutoscaler":
                inf.recommendations.append((to, self._replicas_for(inf, to)))
                self._scale(inf, self._hpa_recommendation(inf))
        a.inference_held += held * dt
        a.steps += 1
        a.seconds += dt
        a.hours.add(int((to - dt) // 3600))

    def _next_event(self) -> float:
        """The first moment after `now` Kueue may admit: a job of the trace arrives or, while jobs wait, a running job
        finishes or a stopping one stops (with none waiting, a free admits nothing: not a moment to stop at)."""
        arrival = math.inf
        if self._arrivals is not None and self._arrivals[3] < len(self._arrivals[2]):
            arrival = self._arrivals[2][self._arrivals[3]]
        if not self._pending:
            return max(arrival, self.now)
        j, r = self.jobs, self._running
        if self._finish[0] != self._held_version:  # running jobs all progress with the clock: kept until they change
            left = float((j.work[r] - j.progress[r]).min()) if len(r) else math.inf
            self._finish = (self._held_version, self.now + left)
        soonest = self._finish[1]
        if self._stopping:
            soonest = min(soonest, float(j.stop_at[self._stopping].min()))
        return max(min(soonest, arrival), self.now)

    def _train(self, t0: float, to: float) -> list[tuple[float, int]]:
        """Training from `t0` to `to`: running jobs progress or finish, stopping ones stop; (when, GPUs) freed."""
        dt = to - t0
        j, a = self.jobs, self.accounting
        freed: list[tuple[float, int]] = []
        r = self._running
        if len(r):
            # credited (progress at the newest checkpoint) is only read when a job is evicted: computed there. The
            # running jobs' columns are read directly: what training holds may change here, and the planner's view
            # of it (_columns) is built once, after
            before = j.progress[r]
            progress = before + dt
            work = j.work[r]
            done = progress >= work - 1e-6  # a microsecond: the moment of its finish as `_next_event` computed it
            if done.any():
                took = np.where(done, np.minimum(work - before, dt), dt)
                a.training_alloc += float((took * j.gpus[r]).sum())
                j.progress[r] = np.minimum(progress, work)
                j.progress[r[done]] = work[done]
                j.state[r[done]] = DONE
                freed += [(t0 + float(t), int(g)) for t, g in zip(took[done], j.gpus[r[done]])]
                self._running = r[~done]
                self._held_version += 1
            else:
                if self._step_alloc[0] != (self._held_version, dt):  # the same jobs over as long a step: the same
                    self._step_alloc = ((self._held_version, dt), float((dt * j.gpus[r]).sum()))
                a.training_alloc += self._step_alloc[1]
                j.progress[r] = progress
        still = []
        if self._stopping:
            self._held_version += 1  # some may stop
        for i in self._stopping:
            stopping = (min(float(j.stop_at[i]), to) - t0) * float(j.gpus[i])
            a.training_alloc += stopping
            a.training_lost += stopping  # lost as it is held, so a job still stopping at the end is not over-counted
            if j.stop_at[i] <= to:
                j.state[i] = STOPPED
                self._stopped.append(i)
                freed.append((float(j.stop_at[i]), int(j.gpus[i])))
            else:
                still.append(i)
        self._stopping = still
        return freed

    def _serve(self, key: str, inf: _Inference, t: float, serving_gpus: float, dt: float) -> None:
        """Account the interval ending at `t`: its demand, what was served, what was short."""
        u = self._demand_gpus(inf, t)
        within = min(u, float(self.capacity_gpus))
        a = self.accounting
        served = min(u, serving_gpus)
        unmet = max(within - serving_gpus, 0.0)
        a.demand[key] = a.demand.get(key, 0.0) + u * dt
        a.within[key] = a.within.get(key, 0.0) + within * dt
        a.served[key] = a.served.get(key, 0.0) + served * dt
        a.unmet_within[key] = a.unmet_within.get(key, 0.0) + unmet * dt
        day = a.days.setdefault(key, {}).setdefault(int((t - dt) // 86400), [0.0, 0.0, 0, 0])
        day[0] += u * dt
        day[1] += unmet * dt
        day[2] += unmet > 1e-9
        day[3] += 1
        if unmet > 1e-9:
            a.short_steps[key] = a.short_steps.get(key, 0) + 1
            a.short_hours.setdefault(key, set()).add(int((t - dt) // 3600))
            a.run[key] = a.run.get(key, 0) + 1
            a.longest_short[key] = max(a.longest_short.get(key, 0), a.run[key])
        else:
            a.run[key] = 0

    # ------------------------------------------------------------------------------------ for the simulator
    def training(self) -> Training:
        """Running training as the planner sees it (what core.cluster's reads would give, without building them).
        Kept until what training holds changes or a job passes its next checkpoint."""
        version, ids, queues, gpus, priority, preempt, interval, admitted_at, stopping = self._columns()
        held = self._training
        if held is not None and held[0] == version and self.now < held[1]:
            return held[2]
        checkpoints = newest_checkpoint(admitted_at, interval, self.now)
        if held is None or held[0] != version:
            view = Training(ids, queues, gpus, priority, preempt, interval, checkpoints, stopping)
        else:
            view = held[2].with_checkpoints(checkpoints)
        # the newest checkpoints stay the same until the soonest next one (none running: until training changes)
        self._training = (version, float((checkpoints + interval).min()) if len(ids) else math.inf, view)
        return view

    def stopped_by_plan(self) -> list[tuple[str, str]]:
        """(workload, queue) of every Workload headroom evicted that has stopped, oldest first as `workloads` lists
        them: simulate requeues them in the order the controller's read gives (reconcile.training_view)."""
        j = self.jobs
        return [(f"{TRAINING_NAMESPACE}/{j.names[i]}", self._queues[int(j.queue[i])])
                for i in sorted(self._stopped)]

    def fast_preemptible_gpus(self, deadline_seconds: float) -> int:
        columns = self._columns()
        return int(columns[3][columns[5] <= deadline_seconds].sum())

    def demand_at(self, key: str, t: float) -> float:
        """The demand sample of the interval ending at `t` (query units; a gap: as last seen; none yet: 0)."""
        times, values = self.demand.get(key, _NO_DEMAND)
        k = bisect.bisect_right(times, t) - 1
        return values[k] if k >= 0 else 0.0
