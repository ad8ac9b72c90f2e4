"""One reconcile of the controller: read the cluster, plan, turn the plan into actions, apply them, report.

At a `now` the caller passes in:
  1. the ReservationPolicies: an invalid one, one whose target is missing, or one whose minGpus no longer fit
     beside the others', gets Ready=False with every reason in its status and one Warning event, and takes no part
     in the plan: its target is left as it is, what that holds not lent (none, if missing), and its training queues
     are still lent to;
  2. per policy, its own faults kept to itself: demand read (Prometheus or a file), the forecast
     refitted once an hour on complete hours (the MLflow champion's model, else automatic selection,
     or the policy's baseline forecaster; controller.forecasting keeps it), kept for a bounded time when
     data stops (controller.observe);
     a policy whose data, forecast or champion fails falls back to the conservative reservation and says
     so in its status, its events and its metrics, while the others go on;
  3. one plan for every workload (planning.planner, the only decision-maker), on a view of the cluster
     (policies, Workloads, quotas and targets; from a watch cache on a real cluster, else read once: Cluster.snapshot);
     forecast-only policies beside active ones hold what they hold in the plan applied, and are planned with the
     others as if active for their statuses alone;
  4. actions (controller.actions): the reservation on each target, the inference and training
     ClusterQueues' quotas, the evictions due now and the requeue of finished victims, for `active`
     policies; a training queue lent into that no policy names any more back to 0 (_returned); status and
     events for all; each re-validated just before it is applied (controller.executor), evictions against a plan
     made on a fresh view;
  5. realized forecast error (and drift) to MLflow (controller.forecasting), a ControllerState for /metrics, and
     optionally a timeline row per policy (the same columns `headroom simulate --timeline` writes).
Data missing never lowers the reservation in force: while degraded, the reservation only goes up.
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np
import pandas as pd

from adapters.prometheus import DeadlinePassed, PrometheusError
from controller.actions import (
    EventNote,
    Evict,
    PatchStatus,
    PolicyTarget,
    RecordEvent,
    Scale,
    SetQuota,
    Stopped,
    View,
    cluster_actions,
    evicted_gpus,
    in_write_order,
    stop_seconds,
    training_columns,
)
from controller.cohorts import CohortCheck, cohort_lenders
from controller.demand import DemandReader
from controller.executor import (
    EVENT_SENDERS,
    NOT_LEADER,
    PAST_DEADLINE,
    STATUS_WRITERS,
    EventsBeside,
    Outcome,
    StatusesBeside,
    execute,
    window,
)
from controller.forecasting import ForecastKeeper
from controller.forecasts import Models
from controller.observe import (
    DataSettings,
    IssuedForecast,
    degraded_reason,
    due,
    window_facts,
)
from controller.state import (
    ERROR_STAGES,
    ControllerState,
    Histogram,
    PolicyState,
    StateHolder,
    TeamState,
    forget_absent,
)
from core.cluster import Cluster, ForecastStore, PlanSummaryWriter
from core.deadline import current as current_deadline
from core.deadline import earliest, within
from core.errors import ClusterError, ConfigError, NotFound
from core.objects import CONDITION_TYPES, Condition, ObjectRef, PolicyStatus, TargetRef, TargetState, WorkloadInfo
from core.policy import (
    API_VERSION,
    KIND,
    Claims,
    PolicySpec,
    created,
    holding_said,
    holding_spec,
    parse_policy_spec,
    pods_queues,
    refused_holders,
    refused_lends,
)
from core.settings import RunConfig
from core.units import epoch_seconds
from forecast.history import OUTLIER_FACTOR, HistoryError, check_values
from planning.planner import (
    UNANNOTATED_CHECKPOINT_SECONDS,
    ClusterPolicy,
    Forecast,
    History,
    HourPlan,
    Observed,
    StepPlan,
    WorkloadHours,
    WorkloadPolicy,
    WorkloadStep,
    newest_checkpoint,
    plan_hours,
    plan_step,
    queue_weights,
    stale,
)

log = logging.getLogger(__name__)

STATUS_HOURS = 6                         # hours ahead shown in a policy's status
# Statuses whose news is not urgent (the hours ahead, the forecast, the model, realized error) a reconcile writes at
# most, the longest waiting first: the hour's first reconcile rolls every policy's hours forward, and a thousand
# such writes would hold it up; what a status says urgently (reservation, headroom, conditions) is written at once
STATUS_SPREAD = 200
SIDE_BY_SIDE = 8  # a reconcile's reads and writes at once (more only queue on 2 cores beside the API server)
# The most requests a Kubernetes controller has in flight at once, its watches aside: a reconcile's side by side,
# the statuses and Events written beside it, the election round and a refit's forecast write
API_REQUESTS_AT_ONCE = SIDE_BY_SIDE + STATUS_WRITERS + EVENT_SENDERS + 2


# --------------------------------------------------------------------------- policies
def series_of(ref: ObjectRef) -> str:
    """A policy's forecast series in MLflow and the forecast store."""
    return f"{ref.namespace}.{ref.name}"


@dataclass(frozen=True)
class PolicyObject:
    """A ReservationPolicy as read from the cluster, its spec validated."""
    ref: ObjectRef
    generation: int
    spec: PolicySpec
    status: Mapping

    @property
    def key(self) -> str:
        return f"{self.ref.namespace}/{self.ref.name}"

    @property
    def series(self) -> str:
        return series_of(self.ref)

    @property
    def active(self) -> bool:
        return self.spec.mode == "active"

    def target(self) -> PolicyTarget:
        ref = self.spec.target.ref(self.ref.namespace or "default")
        return PolicyTarget(self.key, self.ref, ref, self.spec.capacity.gpus_per_replica, self.active,
                            self.spec.inference_cluster_queue, tuple(self.spec.training_cluster_queues))


class ParsedSpecs:
    """Each policy's spec parsed once per generation (a thousand policies parsed every reconcile took 0.35 s), and
    forgotten when the policy is gone. The spec is compared too: a policy deleted and created again under its name
    starts again at generation 1, a generation alone names no one spec (a new uid is forgotten whole anyway)."""

    def __init__(self) -> None:
        self._held: dict[ObjectRef, tuple[int, object, PolicySpec | str, PolicySpec | None]] = {}
        # each policy's newest spec that said what it holds, and its generation
        self._last_holding: dict[ObjectRef, tuple[int, PolicySpec]] = {}
        # the targets each policy held before an edit named another, each with the spec it held it by: an edit deletes
        # no workload, so they run on, scaled by no one, until scaled to 0 or deleted (`left`)
        self._left: dict[ObjectRef, dict[TargetRef, PolicySpec]] = {}
        # the targets each policy's status says it left behind, as written and as read (`left`), read once per status
        self._said_left: dict[ObjectRef, tuple[list, list[PolicySpec]]] = {}
        # the refused policies whose target another policy held, each with that target, as the last invalid_holdings
        # decided: never their own, so an edit of one leaves no target behind (`_parsed`)
        self._held_elsewhere: dict[ObjectRef, TargetRef] = {}
        # the generation of the spec each policy held by before the last edit this process read: what that edit left
        # behind was decided here (`_parsed`), by who held what then, so a status of it or older says nothing more
        self._edited_from: dict[ObjectRef, int] = {}

    def of(self, ref: ObjectRef, generation: int, raw: object) -> PolicySpec | str:
        """The parsed spec, or every error (field paths) in one message."""
        return self._parsed(ref, generation, raw)[2]

    def holding(self, ref: ObjectRef, generation: int, raw: object, status: Mapping) -> PolicySpec | None:
        """The spec as far as it says what its policy holds: the parsed spec, or one that does not parse as
        core.policy.holding_spec reads it; where not even that reads (its target mistyped or removed), what the
        newest spec that did said: an edit deletes no workload, so that target still holds its GPUs. That is the
        newer of the one this process read and the one the policy's `status` says (status.holding, written by
        whichever controller led: this one restarted, or another replica); None: neither says."""
        held = self._parsed(ref, generation, raw)[3]
        if held is not None:
            return held
        read = self._last_holding.get(ref)
        said = holding_spec(status.get("holding"))
        if said is not None and (read is None or int(status.get("observedGeneration") or 0) > read[0]):
            return said
        return read[1] if read is not None else None

    def _parsed(self, ref: ObjectRef, generation: int, raw: object
                ) -> tuple[int, object, PolicySpec | str, PolicySpec | None]:
        held = self._held.get(ref)
        parsed_before = held is not None and held[0] == generation and held[1] == raw
        if held is None or not parsed_before:
            try:
                spec = parse_policy_spec(raw, f"ReservationPolicy {ref.namespace}/{ref.name}")
                held = (generation, raw, spec, spec)
            except ConfigError as exc:
                held = (generation, raw, spec_errors_said(exc.errors), holding_spec(raw))
            self._held[ref] = held
        # what a spec holds is noted when it is parsed, and again once forget_decisions forgot it
        if held[3] is not None and not (parsed_before and ref in self._last_holding):
            before = self._last_holding.get(ref)
            self._last_holding[ref] = (generation, held[3])
            namespace = ref.namespace or "default"
            now_held = held[3].target.ref(namespace)
            left = self._left.setdefault(ref, {})
            left.pop(now_held, None)  # named again: its policy's once more
            if before is not None:
                self._edited_from[ref] = before[0]
                # named another: the one named before is left, unless another policy held it (never this one's)
                if (was := before[1].target.ref(namespace)) != now_held and self._held_elsewhere.get(ref) != was:
                    left[was] = before[1]
        return held

    def left(self, ref: ObjectRef, generation: int, raw: object, status: Mapping) -> list[tuple[TargetRef, PolicySpec]]:
        """The targets the policy `ref` held before an edit named another, each with the spec it held it by: those
        this process read the edit of, those the policy's `status` says (status.left), as this controller wrote it
        before a restart or another leader did, and those invalid_holdings decided from a status of an older
        generation (held_before, note_left). The one the policy holds now is not left."""
        namespace = ref.namespace or "default"
        left = self._left.setdefault(ref, {})
        said = status.get("left") or []
        if said:
            read = self._said_left.get(ref)
            if read is None or read[0] != said:
                read = self._said_left[ref] = (said, [s for s in map(holding_spec, said) if s is not None])
            for spec in read[1]:
                left.setdefault(spec.target.ref(namespace), spec)
        if not left:  # (most policies: nothing more to read)
            return []
        holding = self.holding(ref, generation, raw, status)
        if holding is not None:
            left.pop(holding.target.ref(namespace), None)
        return list(left.items())

    def held_before(self, ref: ObjectRef, generation: int, raw: object, status: Mapping) -> PolicySpec | None:
        """The spec the policy `ref`'s status, written for an older generation (no controller has planned the edit
        since), says it held by (status.holding), where the edit left that target behind if the policy held it, and
        nothing says whether it did: the status lacks holdsTarget: false (a controller older than the field wrote it,
        or the policy held it), and this process did not read the edit itself (what it decided then, `_parsed`, by
        note_owners' verdict, is fresher than the status, whose next write may have failed). invalid_holdings decides
        (note_left). None: no such spec, or it names the target the policy holds now, or one already left."""
        said_at = status.get("observedGeneration")
        if said_at == generation or status.get("holdsTarget") is False \
                or int(said_at or 0) <= self._edited_from.get(ref, -1):
            return None
        said = holding_spec(status.get("holding"))
        if said is None:
            return None
        namespace = ref.namespace or "default"
        holding = self.holding(ref, generation, raw, status)
        target = said.target.ref(namespace)
        if target in self._left.get(ref, {}) or holding is not None and holding.target.ref(namespace) == target:
            return None
        return said

    def note_left(self, ref: ObjectRef, spec: PolicySpec) -> None:
        """invalid_holdings' verdict on held_before's `spec`: the policy `ref` held its target, which its edit left."""
        self._left.setdefault(ref, {})[spec.target.ref(ref.namespace or "default")] = spec

    def left_said(self, ref: ObjectRef) -> list[dict] | None:
        """The targets `left` gave for the policy `ref` and not forgotten since, as its status says them (status.left;
        None: none), each as status.holding says a target held (core.policy.holding_said)."""
        return [holding_said(spec) for spec in self._left.get(ref, {}).values()] or None

    def note_owners(self, refused: Iterable[PolicyObject], owners: Iterable[PolicyObject]) -> None:
        """invalid_holdings' verdict: of the `refused` policies, those not among the `owners` (each holding its target,
        or its pods within another's holding) name a target another policy holds (`_held_elsewhere`)."""
        owning = {(p.ref, p.target().target) for p in owners}  # (a left target's is its policy's ref too)
        self._held_elsewhere = {p.ref: target for p in refused if (p.ref, target := p.target().target) not in owning}

    def holds_target(self, ref: ObjectRef) -> bool | None:
        """False: another policy holds the target of the refused policy `ref` (invalid_holdings' verdict, note_owners).
        Its status says so (status.holdsTarget), so a controller restarted before it plans an edit of the policy does
        not count that target as left behind by it either (`left`). None: it holds its target, or none is known."""
        return False if ref in self._held_elsewhere else None

    def forget_left(self, ref: ObjectRef, target: TargetRef) -> None:
        """A target left behind that holds no GPU now (scaled to 0, or deleted): nothing to count any more."""
        self._left.get(ref, {}).pop(target, None)

    def forget_decisions(self) -> None:
        """Forget who held and left what as this process decided it (not the specs parsed): another replica that led
        since may have decided again, so it is read from the statuses, as a restarted controller reads it (`left`)."""
        self._last_holding, self._left, self._said_left = {}, {}, {}
        self._held_elsewhere, self._edited_from = {}, {}

    def keep(self, present: set[ObjectRef]) -> None:
        forget_absent(present, self._held, self._last_holding, self._left, self._said_left, self._edited_from)


def spec_errors_said(errors: list[str]) -> str:
    """A spec's errors ('field.path: message') in one message: of several, how many and every field path first, each
    error after, so the Event (1,024 characters) names every field to correct and the Ready condition says each."""
    if len(errors) == 1:
        return errors[0]
    paths = dict.fromkeys(error.partition(": ")[0] for error in errors)
    return f"{len(errors)} errors in the spec ({', '.join(paths)}): " + "; ".join(errors)


class Identified(NamedTuple):
    """A ReservationPolicy object as read (a file's may leave out apiVersion and kind), its ref and generation."""
    obj: dict
    ref: ObjectRef
    generation: int


def identified(objects: Iterable[dict]) -> list[Identified]:
    """The objects read, each identified once: a reconcile passes them along (identified three times, a thousand
    policies took 6 ms)."""
    out = []
    for obj in objects:
        obj = {"apiVersion": API_VERSION, "kind": KIND, **obj}
        out.append(Identified(obj, ObjectRef.of(obj), int(obj["metadata"].get("generation", 0) or 0)))
    return out


def parse_policies(objects: list[Identified], specs: ParsedSpecs | None = None
                   ) -> tuple[list[PolicyObject], dict[ObjectRef, str]]:
    """Valid policies, and the invalid ones with every error (field paths) in one message. A policy whose target an
    older valid policy already scales is refused (the two would undo each other's decisions): the one created first
    goes on (in a file, the one written first), so a newcomer never takes a working policy's target. The valid ones
    come oldest first: the planner cuts, and feasible() refuses, the later ones first. So too a
    ClusterQueue one policy holds inference in (its inferenceClusterQueue or ClusterQueue target) and another lends
    training slack into: the one that named it first keeps it (core.policy.Claims)."""
    specs = specs or ParsedSpecs()
    parsed, invalid = [], {}
    for obj, ref, generation in objects:
        spec = specs.of(ref, generation, obj.get("spec"))
        if isinstance(spec, str):
            invalid[ref] = spec
            continue
        parsed.append((obj, PolicyObject(ref, generation, spec, obj.get("status") or {})))
    # oldest first (the API server lists by name; ties, and a file's policies, which have no time, keep their order):
    # the order the cluster is shared in too, so a newcomer is cut, or refused, before the policies already working
    parsed.sort(key=lambda op: created(op[0]))
    claims = Claims()
    for _, p in parsed:
        if (refusal := claims.take(p.key, p.spec.target.ref(p.ref.namespace or "default"), p.spec)) is not None:
            invalid[p.ref] = refusal
    return [p for _, p in parsed if p.ref not in invalid], invalid


class Holdings(NamedTuple):
    """What the refused policies and the targets edits left behind hold (invalid_holdings), each oldest first."""
    holders: list[PolicyObject]  # the refused policies holding their targets
    lenders: list[PolicyObject]  # the refused policies lending into training queues, each with those it lends into
    refused: list[PolicyObject]  # every refused policy, with what it holds (its status says it)
    left: list[PolicyObject]     # the left targets held, each as a policy object of the spec it was held by
    within: list[PolicyObject]   # those whose pods run in another's holding (core.policy.pods_queues): a ClusterQueue
    # target held, within its quota (Reconciler._held_by), or a training queue lent into (training_view, _pods_in)


def invalid_holdings(objects: list[Identified], invalid: Mapping[ObjectRef, str], kept: list[PolicyObject],
                     specs: ParsedSpecs) -> Holdings:
    """What the InvalidSpec policies (as far as their specs say what they hold: ParsedSpecs.holding) and the targets
    policies held before an edit named others (ParsedSpecs.left) hold beside the policies `kept`, parse_policies' valid
    ones, each GPU counted once, decided together (core.policy.refused_holders): a ClusterQueue target holds its quota
    whether refused or left, and the pods of the others in it are within it. An edit deletes no workload: a left
    target runs on at its replicas, which no one scales now, so its GPUs are held as a refused policy's target's are,
    not lent; a target a refused policy named while another held it is not its to leave (the verdict is kept in
    `specs`: ParsedSpecs.note_owners; where no status says it either, it is decided again: _held_then). A refused
    policy lends into no queue any policy holds inference in (its queue clash), only into its others."""
    ordered = sorted(objects, key=lambda o: created(o.obj))
    refused = [PolicyObject(ref, generation, spec, obj.get("status") or {}) for obj, ref, generation in ordered
               if ref in invalid and (spec := specs.holding(ref, generation, obj.get("spec"), obj.get("status") or {})
                                      ) is not None]

    def edits_left() -> list[PolicyObject]:
        return [PolicyObject(ref, generation, spec, obj.get("status") or {}) for obj, ref, generation in ordered
                for _, spec in specs.left(ref, generation, obj.get("spec"), obj.get("status") or {})]

    left = edits_left()
    before = {ref: spec for obj, ref, generation in ordered
              if (spec := specs.held_before(ref, generation, obj.get("spec"), obj.get("status") or {})) is not None}
    if before:  # (after a restart, or a leader's change, before the edits are planned)
        for ref in _held_then(ordered, kept, refused, left, before):
            specs.note_left(ref, before[ref])
        left = edits_left()
    inference = {q for p in (*kept, *refused) for q in p.spec.inference_queues}
    lenders = [replace(p, spec=p.spec.model_copy(update={"training_cluster_queues": lent}))
               for p in refused if (lent := refused_lends(p.spec, inference))]
    accepted = [(p.target().target, p.spec) for p in kept]
    others = [(p.target().target, p.spec) for p in (*refused, *left)]
    holds = refused_holders(accepted, others, training_queues(lenders))
    holders = [p for p, own in zip(refused, holds) if own]
    left_held = [p for p, own in zip(left, holds[len(refused):]) if own]
    within = [p for p, queue in zip((*refused, *left), pods_queues(accepted, others, holds)) if queue is not None]
    specs.note_owners(refused, (*holders, *within))
    return Holdings(holders, lenders, refused, left_held, within)


def _held_then(ordered: list[Identified], kept: list[PolicyObject], refused: list[PolicyObject],
               left: list[PolicyObject], before: Mapping[ObjectRef, PolicySpec]) -> set[ObjectRef]:
    """Which of the policies `before` names (each with the spec its status, of an older generation, says it held by:
    ParsedSpecs.held_before) held that target when the status was written. Nothing records it, so it is decided as it
    was then: by core.policy's verdict (refused_holders: it holds it, or pods_queues: its pods run within another's
    holding) over the policies as their statuses said them, each edited since by its status (accepted then unless it
    says InvalidSpec), the others as they are, beside the targets edits left before. So a refused policy older on the
    same Deployment held it, still names it, and counts it once (as its own, or within the queue its pods run in),
    not again as a target the younger one left behind."""
    now = {p.ref: (p.target().target, p.spec, kept_now) for kept_now, policies in ((True, kept), (False, refused))
           for p in policies}
    accepted, others, refused_refs, held = [], [], [], set()
    for obj, ref, generation in ordered:
        status = obj.get("status") or {}
        said = holding_spec(status.get("holding")) if status.get("observedGeneration") != generation else None
        if said is not None:
            target, spec = said.target.ref(ref.namespace or "default"), said
            kept_then = not _not_ready(status, "reason", "InvalidSpec")
        elif ref in now:
            target, spec, kept_then = now[ref]
        else:
            continue
        if kept_then:
            accepted.append((target, spec))
            held.add(ref)  # an accepted policy holds its target
        else:
            others.append((target, spec))
            refused_refs.append(ref)
    inference = {q for _, spec in (*accepted, *others) for q in spec.inference_queues}
    lent = {q for _, spec in others for q in refused_lends(spec, inference)}
    others += [(p.target().target, p.spec) for p in left]
    holds = refused_holders(accepted, others, lent)
    held |= {ref for ref, own, queue in zip(refused_refs, holds, pods_queues(accepted, others, holds))
             if own or queue is not None}
    return held & set(before)


def training_queues(policies: Iterable[PolicyObject]) -> set[str]:
    """The training ClusterQueues `policies` lend to."""
    return {q for p in policies for q in p.spec.training_cluster_queues}


def _queue_missing(spec: PolicySpec, quotas: Mapping[str, int]) -> str | None:
    """Ready's reason and message for the first ClusterQueue `spec` names for inference or training that has no GPU
    quota (`quotas`, the cluster's ClusterQueues), or None: the field to correct, the queue, and what it is left."""
    named = [("spec.inferenceClusterQueue", spec.inference_cluster_queue, "its quota is not set")] + [
        (f"spec.trainingClusterQueues[{k}]", q, "it is lent nothing (the other training queues share the slack)")
        for k, q in enumerate(spec.training_cluster_queues)]
    for field, queue, left in named:
        if queue is not None and queue not in quotas:
            return (f"QueueMissing: {field}: ClusterQueue {queue} not found, or it has no GPU quota: {left}; create "
                    "it or correct the name")
    return None


def feasible(policies: list[PolicyObject], lendable: int, active_first: bool = False
             ) -> tuple[list[PolicyObject], dict[ObjectRef, str]]:
    """The policies whose minGpus (and one replica) fit, in order; a policy that no longer fits beside those before
    it is the only one refused (it cannot take its neighbours down with it). `active_first`: the active policies'
    minimums are counted before any forecast-only one's, which changes nothing and so refuses none of them."""
    refused, taken = {}, 0
    active_first = active_first and any(p.active for p in policies)
    for p in sorted(policies, key=lambda p: not p.active) if active_first else policies:
        if too_big := p.spec.too_big_for(lendable):
            refused[p.ref] = f"{too_big} does not fit: the cluster lends {lendable} GPUs"
            continue
        if taken + p.spec.least_gpus > lendable:
            before = "the active policies and those before this one" if active_first and not p.active else \
                "the policies before this one"
            refused[p.ref] = (f"{p.spec.least_gpus_said()} does not fit: the cluster lends {lendable} GPUs and "
                              f"{before} keep {taken} as their minimum")
            continue
        taken += p.spec.least_gpus
    return [p for p in policies if p.ref not in refused], refused


REASON = re.compile(r"[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?")  # a condition's reason (the CRD's pattern)


def reason_of(text: str, otherwise: str) -> str:
    """A condition's reason from 'Reason: details': its first word, or `otherwise` when that is no reason (an HTTP
    request line: the API server refuses the whole status)."""
    head = text.split(":")[0]
    return head if REASON.fullmatch(head) else otherwise


# a failed read's time range, in the message and in the request's URL (adapters.prometheus)
READ_RANGE = re.compile(r" \[[^\]]* \.\. [^\]]*\]|&start=[0-9.]+&end=[0-9.]+")


def timeless(text: str) -> str:
    """A fault without the time range of the read that failed: the same outage reads the same every reconcile, so
    its status is written once, not once a reconcile."""
    return READ_RANGE.sub("", text)


def headroom_condition(reclaimable: int, band: int, wanted: int, lent: int, cohorts: CohortCheck) -> Condition:
    """HeadroomAtRisk: the lent GPUs of the headroom band (`band`, the policies' headroom to their headroom quantile,
    `wanted`, within what is lent) cannot all come back within the deadline; or the headroom quantile asks for more
    than the cluster has left to lend, so demand up to it cannot be served whatever comes back; or something else
    lends GPUs to the training queues (controller.cohorts), so Kueue may admit training beyond what is lent; or a
    training cohort's parentName chain loops, so headroom cannot tell what its tree lends. Unknown where the Cohorts
    and ClusterQueues could not be read at all. Covered, but reason CohortReclaims, where a queue of a training
    cohort's tree lets Kueue preempt training itself at headroom's quota cuts: the reservation holds, training loses
    work headroom does not count."""
    said = f"{reclaimable} GPUs reclaimable within the deadline; the headroom band is {band}"
    if reclaimable < band:
        return Condition("HeadroomAtRisk", "True", "ReclaimableBelowHeadroom", said)
    if wanted > band:
        return Condition("HeadroomAtRisk", "True", "HeadroomAboveCapacity",
                         f"{said}; the headroom quantile asks for {wanted} but only {lent} GPUs are lent")
    if cohorts.lenders:
        return Condition("HeadroomAtRisk", "True", "CohortLends",
                         f"{said}; {cohorts.lenders_said()}: Kueue admits training into what they do not use, beside "
                         f"the {lent} GPUs headroom lends")
    if cohorts.unreadable:
        return Condition("HeadroomAtRisk", "Unknown", "CohortsUnreadable",
                         f"{said}; {cohorts.unreadable}: headroom cannot tell whether anything else lends GPUs to the "
                         "training queues")
    if cohorts.loops:
        return Condition("HeadroomAtRisk", "True", "CohortCycle",
                         f"{said}; {cohorts.loops_said()}: Kueue admits nothing to the ClusterQueues of that tree "
                         "until the loop is removed, and headroom cannot tell what the tree would lend; remove it")
    if cohorts.reclaimers:
        return Condition("HeadroomAtRisk", "False", "CohortReclaims", f"{said}; {cohorts.reclaimers_said()}")
    return Condition("HeadroomAtRisk", "False", "HeadroomCovered", said)


# A policy's status says whether the cluster's headroom is at risk, not the cluster-wide numbers behind it: those move
# with every sample of any policy, and in each of a thousand statuses they would rewrite all of them every time.
POLICY_RISK_MESSAGE = ("cluster-wide: the GPUs reclaimable within the deadline against the headroom band are in the "
                       "plan summary and the metrics")


def policy_risk(cluster: Condition) -> Condition:
    """The cluster's HeadroomAtRisk as a policy's status carries it: its status and reason, no numbers."""
    return Condition(cluster.type, cluster.status, cluster.reason, POLICY_RISK_MESSAGE)


def plan_summary(state: ControllerState) -> dict[str, str]:
    """The cluster-wide numbers of a reconcile, written to one object (every policy's status would be rewritten
    whenever any of them moved): the slack lent, training's GPUs, the headroom at risk and the slack ahead."""
    risk = state.headroom_at_risk
    assert risk is not None  # every reconcile that plans says it
    return {"planId": state.plan_id, "slackGpus": str(state.slack_gpus), "trainingGpus": str(state.training_gpus),
            "reclaimableGpus": str(state.reclaimable_gpus), "headroomBandGpus": str(state.headroom_band_gpus),
            "headroomWantedGpus": str(state.headroom_wanted_gpus), "headroomAtRisk": risk.status,
            "headroomAtRiskReason": risk.reason, "headroomAtRiskMessage": risk.message,
            "nextHours": json.dumps([{"hour": t.strftime("%Y-%m-%dT%H:%M:%SZ"), "slackGpus": g}
                                     for t, g in state.slack_by_hour[:STATUS_HOURS]], separators=(",", ":"))}


def urgent_news(said: PolicyStatus, status: PolicyStatus) -> bool:
    """`status` changes what a policy's status said in a way its readers act on: the reservation, the headroom, the
    generation observed, a condition's status or reason."""
    def gist(s: PolicyStatus) -> tuple:
        return (s.reserved_gpus, s.headroom_gpus, s.observed_generation,
                tuple((c.type, c.status, c.reason) for c in s.conditions))
    return gist(said) != gist(status)


# A refused policy's other conditions: a status write keeps the conditions it does not name, so those of its last
# plan (HeadroomAtRisk, FallbackActive, ForecastDegraded) would read as the state of a policy no longer planned
NOT_PLANNED = tuple(Condition(kind, "Unknown", "NotPlanned", "the policy takes no part in the plan: Ready says why")
                    for kind in CONDITION_TYPES if kind != "Ready")


def _not_ready(status: Mapping, key: str, value: str) -> bool:
    """Whether a policy's status has a Ready=False condition whose `key` (its reason, its message) is `value`."""
    return any(c.get("type") == "Ready" and c.get("status") == "False" and c.get(key) == value
               for c in status.get("conditions") or [])


def _refusal_said(status: Mapping, message: str, generation: int, holding: dict | None, left: list[dict] | None,
                  holds_target: bool | None) -> tuple[bool, bool]:
    """Whether a policy's status already says Ready=False for this reason (a restarted controller reported it), and
    whether it says all a refusal's status says: the generation refused, what the policy holds and left behind and
    whether another holds its target, no plan's id or realized error (an older controller's refusal left its last
    plan's, and a spec edited and refused for the same reason is a new generation)."""
    told = _not_ready(status, "message", message)
    return told, told and status.get("observedGeneration") == generation and not status.get("planId") \
        and not status.get("realizedError") and status.get("holding") == holding and status.get("left") == left \
        and status.get("holdsTarget") == holds_target


@dataclass(frozen=True)
class _Input:
    """One policy's inputs to this reconcile."""
    policy: PolicyObject
    raw: pd.Series                 # demand samples in the lookback (UTC; NaN = missing)
    degraded: str | None           # why the demand data is not trustworthy, if it is not
    forecast: IssuedForecast | None  # the forecast in use (None: the planner falls back)
    fault: str | None = None       # a forecaster or champion that failed, if one did


@dataclass(frozen=True)
class _Samples:
    """A policy's demand samples as the planner reads them, and the newest one that is not missing; converted once
    per series (a reconcile reads weeks of samples of every policy, and between Prometheus steps they are the same)."""
    raw: pd.Series
    times: np.ndarray            # epoch seconds
    values: np.ndarray
    newest: float | None = None  # its time (epoch seconds; None: every sample missing)
    latest: float | None = None  # its value

    @classmethod
    def of(cls, raw: pd.Series) -> _Samples:
        times, values = epoch_seconds(raw.index), raw.to_numpy(float)
        seen = np.flatnonzero(~np.isnan(values))
        if not len(seen):
            return cls(raw, times, values)
        return cls(raw, times, values, float(times[seen[-1]]), float(values[seen[-1]]))


class _Planned(NamedTuple):
    """One policy as a plan of the reconcile planned it."""
    input: _Input
    step: WorkloadStep
    hours: WorkloadHours
    workload: WorkloadPolicy
    lendable: int  # the GPUs that plan could lend


class _ClusterRead(NamedTuple):
    """The cluster as a reconcile read it: each policy's target by its key (None: not found), the ClusterQueues' GPU
    quotas and the Workloads."""
    targets: Mapping[str, TargetState | None]
    quotas: Mapping[str, int]
    workloads: list[WorkloadInfo]


class _Plan(NamedTuple):
    """One plan of a reconcile (Reconciler._plan): its policies' inputs, the cluster policy it was made under, its hours
    and its step, on its view of the cluster."""
    inputs: list[_Input]
    policy: ClusterPolicy
    hours: HourPlan
    view: View
    step: StepPlan
    pods_in: dict[str, int]  # the GPUs the pods of refused policies and left targets run on in each training queue

    def each(self) -> dict[str, _Planned]:
        """Each policy planned, by its key."""
        return {i.policy.key: _Planned(i, ws, wh, w, self.policy.lendable) for i, ws, wh, w in zip(
            self.inputs, self.step.workloads, self.hours.workloads, self.policy.workloads)}


def _utc(moment) -> pd.Timestamp:
    """A timestamp in UTC; one without a zone is taken as UTC."""
    moment = pd.Timestamp(moment)
    return moment.tz_convert("UTC") if moment.tzinfo else moment.tz_localize("UTC")


def _checkpoint_base(w: WorkloadInfo, now: float) -> float:
    """Where a job's checkpoint clock starts: the checkpoint it reports, else its creation, else now."""
    base = w.last_checkpoint or w.creation
    return base.timestamp() if base is not None else now


def _held_gpus(spec: PolicySpec, state: TargetState | None, quotas: Mapping[str, int]) -> int:
    """The GPUs an inference target holds: its replicas', or a ClusterQueue target's GPU quota, all of it (a part of
    a replica too; none when unread)."""
    if state is None:
        return 0
    if spec.target.kind == "ClusterQueue":
        return quotas.get(spec.target.name, 0)
    return state.desired_replicas * spec.capacity.gpus_per_replica


def within_queue_preemptors(settings: Mapping[str, str], workloads: list[WorkloadInfo],
                            queues: set[str]) -> list[tuple[str, str]]:
    """The training queues in which Kueue itself may stop a running Workload for a pending one of the same queue
    (../shared/kueue/docs/preemption.md), each as (what to say, the queue): withinClusterQueue LowerPriority once
    the queue holds Workloads of more than one priority; LowerOrNewerEqualPriority also for an equal priority, so
    whatever they are: a Workload headroom stopped and requeued keeps its creation time, older than those admitted
    since. Those stops are in none of headroom's counters (README, "The simulated Kueue")."""
    priorities: dict[str, set[int]] = {}
    for w in workloads:
        if w.cluster_queue in queues and not w.finished:
            priorities.setdefault(w.cluster_queue, set()).add(w.priority)
    found: list[tuple[str, str]] = []
    for q in sorted(queues & settings.keys()):
        setting = settings[q]
        if setting == "LowerPriority" and len(priorities.get(q, ())) < 2:
            continue  # one priority: no Workload of the queue outranks another
        whom = ("of higher priority" if setting == "LowerPriority" else
                "of higher priority, or of equal priority and older (a Workload headroom stopped and requeued is "
                "older than those admitted since)")
        held = " and holds Workloads of more than one priority" if setting == "LowerPriority" else ""
        found.append((f"ClusterQueue {q} has spec.preemption.withinClusterQueue: {setting}{held}: Kueue stops a "
                      f"running Workload of it for a pending one {whom} that does not fit the quota headroom lends "
                      "(the Workload's Preempted condition, reason InClusterQueue; the lowest priority, then the most "
                      "recently admitted first, not the least work lost); those stops are in none of headroom's "
                      "preemption counters, lost work or Events, nor in a replay's training_goodput. "
                      "withinClusterQueue: Never makes the pending Workload wait for quota instead", q))
    return found


def strict_fifo_notes(strict: frozenset[str], queues: set[str]) -> list[tuple[str, str]]:
    """The training queues Kueue takes strictly in order, each as (what to say, the queue): a what-if replays a queue
    as BestEffortFIFO unless simulate.world.strict_fifo_queues names it, and the two admit differently."""
    return [(f"ClusterQueue {q} has spec.queueingStrategy: StrictFIFO: a head Workload that does not fit the quota "
             "headroom lends blocks the Workloads behind it until it is admitted, so the team may run less than it is "
             f"lent; a what-if (headroom simulate, tune) does the same only where simulate.world.strict_fifo_queues "
             f"names {q}", q) for q in sorted(queues & strict)]


def training_gpus(workloads: list[WorkloadInfo], queues: set[str]) -> int:
    """The GPUs the Workloads running, or stopping, in `queues` hold."""
    return sum(w.gpus for w in workloads if w.cluster_queue in queues and (w.running or w.stopping))


class Served(NamedTuple):
    """The Deployments whose pods are inference wherever Kueue admits them, (namespace, name): the policies' targets,
    or the Deployments their HPA targets scale (Reconciler._serving); with what the plan lent each training queue,
    which such pods in it hold within, and are held beyond (serving_gpus)."""
    deployments: frozenset[tuple[str, str]]
    lent: Mapping[str, int]


NONE_SERVED = Served(frozenset(), {})


def serving_in(workloads: list[WorkloadInfo], queues: set[str], deployments: frozenset[tuple[str, str]]
               ) -> dict[str, int]:
    """The GPUs the running pods of `deployments` run on in each of the training `queues`."""
    in_queue: dict[str, int] = {}
    for w in workloads:
        if w.running and w.cluster_queue in queues and (w.namespace, w.deployment) in deployments:
            in_queue[w.cluster_queue] = in_queue.get(w.cluster_queue, 0) + w.gpus
    return in_queue


def beyond_lent(pods_in: Mapping[str, int], lent: Mapping[str, int]) -> dict[str, int]:
    """The GPUs the inference pods running in each training queue (`pods_in`) run on beyond what a plan `lent` it
    (nothing, where it says nothing of that queue): held, neither lent nor reserved again, and held by the queue's
    quota too, so Kueue admits one of them restarted again."""
    return {q: max(gpus - lent.get(q, 0), 0) for q, gpus in pods_in.items()}


def serving_gpus(workloads: list[WorkloadInfo], queues: set[str], served: Served) -> tuple[int, int]:
    """The GPUs the running pods of the Deployments `served` run on in the training `queues`, as (within what the plan
    lent those queues, beyond it). Kueue admits such pods as Workloads of the queue: within what is lent they hold it
    (training_view), beyond it they are held: neither lent nor reserved again, and the queue's quota holds them too
    (Reconciler._reconcile), so Kueue admits one of them restarted again."""
    in_queue = serving_in(workloads, queues, served.deployments)
    beyond = sum(beyond_lent(in_queue, served.lent).values())
    return sum(in_queue.values()) - beyond, beyond


def training_view(workloads: list[WorkloadInfo], queues: set[str], now: float, served: Served = NONE_SERVED):
    """The planner's running training and the requeue candidates, from the cluster's Workloads. Those running the
    pods of a Deployment `served` are inference Kueue admitted into a training queue (a policy's
    inferenceClusterQueue there, refused): never a victim, they hold what is lent there, up to its quota (beyond it
    they are held: serving_gpus)."""
    inside = [w for w in workloads if w.cluster_queue in queues and w.running]
    running = [w for w in inside if (w.namespace, w.deployment) not in served.deployments]
    terminating = sum(w.gpus for w in workloads if w.cluster_queue in queues and w.stopping)
    since = [_checkpoint_base(w, now) for w in running]
    interval = [w.checkpoint_interval_seconds or UNANNOTATED_CHECKPOINT_SECONDS for w in running]
    training = training_columns(
        [w.key for w in running], [w.cluster_queue or "" for w in running], [w.gpus for w in running],
        [w.priority for w in running],
        [stop_seconds(w) for w in running],
        interval, newest_checkpoint(np.array(since, float), np.array(interval, float), now), terminating,
        serving_gpus(workloads, queues, served)[0])
    stopped = tuple(Stopped(w.key, w.uid, w.cluster_queue) for w in workloads
                    if w.cluster_queue in queues and not w.admitted and not w.active and w.evicted_by_plan
                    and not w.finished)
    return training, {w.key: w.uid for w in running}, stopped


class Reconciler:
    def __init__(self, cluster: Cluster, demand: DemandReader, cfg: RunConfig, holder: StateHolder | None = None,
                 models: Models | None = None, forecast_log: ForecastStore | None = None, tracker=None,
                 retrain: Callable[[str, pd.Series, pd.Timestamp], None] | None = None,
                 drift_factor: float = 1.5, drift_window: int = 24, timeline: list | None = None,
                 dry_run: bool = False, refit_beside: bool = False, events_beside: bool = False,
                 statuses_beside: bool = False,
                 summary: PlanSummaryWriter | None = None, outlier_factor: float | None = OUTLIER_FACTOR,
                 stored_series: Callable[[], Iterable[str]] | None = None):
        self.cluster, self.demand, self.cfg = cluster, demand, cfg
        self.data = DataSettings.of(cfg, outlier_factor)  # outlier_factor: history.outlier_factor, as training's
        self.holder = holder or StateHolder()
        self.timeline = timeline  # a list the reconciler appends one row per policy to (TIMELINE_COLUMNS)
        self.dry_run = dry_run    # decide as if every policy were active, change nothing (`headroom plan`)
        self.summary = summary    # keeps plan_summary(...) where the cluster keeps it (a ConfigMap on Kubernetes)
        # the policy object (its uid) each policy's key stands for in the maps by key below and in the forecasts
        self._object_of: dict[str, ObjectRef] = {}
        # the series the forecast store holds (None: not asked, so none is swept: the embedded cluster's forecast log
        # folder may be shared by runs of other policy files, whose policies this one never lists)
        self.stored_series = stored_series
        self._sweep_due = True  # the store is swept of the policies gone unseen (_unlisted): at start-up, on each lead
        self._raw: dict[str, pd.Series] = {}  # each policy's demand samples in the lookback (shared with forecasts)
        self._converted: dict[str, _Samples] = {}   # each policy's samples as arrays (_samples)
        self._full_read: dict[str, pd.Timestamp] = {}
        self._queried: dict[str, str] = {}  # the query each policy's samples held answer (a query edited: read anew)
        self._reported: dict[ObjectRef, str] = {}   # the refusal last reported per policy (one event per change)
        # each policy target's Deployments, (namespace, name), whose Pods serve it: this reconcile's (_serving)
        self._served: dict[TargetRef, frozenset[tuple[str, str]]] = {}
        # each HPA target's Deployment as last read: memory across reconciles, an HPA not read now keeps it (_serving)
        self._scaled: dict[TargetRef, tuple[str, str]] = {}
        # what the last plan lent each training queue: inference pods there are within it or beyond it (serving_gpus),
        # read against it, not the quota, which holds those beyond too. Not known (just started): every one beyond
        self._lent: Mapping[str, int] = {}
        self._unread: set[TargetRef] = set()  # the HPA targets whose read failed, said once until read again
        self._faults: dict[ObjectRef, str] = {}     # the fault last reported per policy
        self._failed: dict[ObjectRef, str | None] = {}  # the failure to act last reported per policy
        self._told: dict[str, dict[ObjectRef, set[str]]] = {}  # per Event reason, what each policy was told
        self._logged: dict[str, set[str]] = {}      # per Event reason, the findings last logged
        self._missing: dict[str, str] = {}          # policy -> why its target was not found (the last view's)
        self._hours: dict[str, tuple] = {}          # role -> (key, HourPlan): kept until its inputs change (_plan)
        self._unweighed: set[str] = set()           # run.team_weights keys no policy's training queue has: said once
        self._preemptions: dict[str, int] = {}
        self._unsure: dict[str, Evict] = {}  # Workload -> its eviction that failed, which may yet land (_landed_late)
        self._lost: dict[str, float] = {}
        self._errors: dict[str, int] = {}
        self._team_seconds: dict[str, tuple[float, float, int]] = {}
        self._team_on_lent_seconds: dict[str, float] = {}  # GPU-seconds used while headroom lent to the queue
        self._durations = Histogram()
        self._last_now: pd.Timestamp | None = None
        self._prefetched: dict = {}                 # this reconcile's demand reads, by policy
        self._io: ThreadPoolExecutor | None = None  # the reconcile's reads and writes side by side (_side_by_side)
        self._specs = ParsedSpecs()
        self._said: dict[ObjectRef, PolicyStatus] = {}  # the status last written per policy
        self._waiting: dict[ObjectRef, float] = {}      # statuses held back (STATUS_SPREAD): since when
        self._errors_lock = threading.Lock()  # events beside count their failures from their own threads
        self._said_lock = threading.Lock()    # statuses beside note what they wrote from their own threads
        self._status_lags: list[float] = []   # seconds from a reconcile to each of its statuses written beside
        self._status_lag = Histogram()        # the same, since the start
        # Events and statuses written beside the reconciles (a Kubernetes controller's many writes): off the path
        # from a demand change to the writes it needs
        self._events = EventsBeside(cluster, lambda what, error: self._error("events", what, error),
                                    deadline=lambda: self._deadline) if events_beside else None
        self._statuses = StatusesBeside(cluster, self._status_written, fence=self._may_write) \
            if statuses_beside else None
        # until when this replica may write (controller.loop sets it: its Lease's end, renewed first once it has
        # lapsed; None: it no longer leads); asked before each write, so a replica whose Lease lapsed mid-reconcile
        # writes nothing more, and no write outlasts the Lease (None: always leads, no bound)
        self.leading: Callable[[], float | None] | None = None
        # set once the controller is asked to stop (controller.loop shares its own): from then on the reconcile under
        # way starts no write, as past its deadline
        self.stopping = threading.Event()
        self._fenced = False  # this reconcile met the fence (said once)
        self._deadline: float | None = None  # the reconcile's (time.monotonic()): see reconcile()
        self._left = 0  # actions this reconcile left undone at its deadline
        # each policy's forecast: fitted, refitted beside, recorded, scored against what came, retrained
        self.forecasts = ForecastKeeper(
            demand, self.data, self._raw, error=self._error, leads=self.leads, lease_end=self._lease_end,
            record=self._execute, fit_took=self._later_by, models=models, forecast_log=forecast_log, tracker=tracker,
            retrain=retrain, drift_factor=drift_factor, drift_window=drift_window,
            retrain_every_seconds=cfg.retrain_every_seconds, refit_beside=refit_beside)

    # -- bookkeeping
    def _error(self, stage: str, what: str, exc: Exception | str) -> None:
        assert stage in ERROR_STAGES, stage
        with self._errors_lock:
            self._errors[stage] = self._errors.get(stage, 0) + 1
        log.warning("%s: %s: %s", stage, what, exc)

    def took_lead(self) -> None:
        """This replica has just taken the Lease (controller.loop): what it wrote when it led before may have been
        overwritten by the leader since, so the plan summary goes out on the next reconcile whatever it last wrote, and
        the leader's stored forecasts newer than its own are planned on until its own refits land. Who held what, as
        it decided then, the leader may have decided again: it reads that from the statuses, as a restarted one does
        (ParsedSpecs.left)."""
        self.forecasts.took_lead()
        self._sweep_due = True  # policies may have been deleted while another replica led, which died before pruning
        if self.summary is not None:
            self.summary.forget()
        self._specs.forget_decisions()

    def _may_write(self) -> float | None:
        """Until when (time.monotonic()) this replica may write now: the reconcile's deadline, or its Lease's end if
        earlier (math.inf: no bound); None: it no longer leads (the first refusal of a reconcile is counted and
        logged). Past the deadline the Lease is not renewed for a write that will not be made."""
        if self._past_deadline():
            return time.monotonic()
        deadline = self._deadline
        if self.leading is None:
            return math.inf if deadline is None else deadline
        with within(deadline):  # a renewal asked for here ends by the reconcile's deadline too
            until = self.leading()
        if until is not None:
            return until if deadline is None else min(until, deadline)
        with self._errors_lock:
            said, self._fenced = self._fenced, True
        if not said:
            self._error("cluster", "leader election", "the Lease lapsed mid-reconcile and could not be renewed: "
                                                      "nothing more is written")
        return None

    def _unlisted(self, listed: Mapping[str, ObjectRef]) -> dict[str, str]:
        """The policies (key -> series) the forecast store holds forecasts of, within this controller's policies
        (run.namespace's, or every namespace's) but not among those `listed`: deleted while no controller ran, or
        while a replica that died before pruning them led. Asked once the policies are listed, at start-up and on each
        lead taken (its prunes are fenced by the Lease, as every write to the store); a store that cannot list is said
        and asked again at the next reconcile, or, refused it (a Role from before, without list), at the next lead.
        None are taken outside the namespace this controller lists: a controller of another namespace may share the
        store (its Lease beside this one's)."""
        if self.stored_series is None or not self._sweep_due:
            return {}
        try:
            stored = list(self.stored_series())
        except (ClusterError, OSError) as exc:
            self._error("cluster", "forecast store", exc)
            self._sweep_due = not (isinstance(exc, ClusterError) and exc.status == 403)
            return {}
        self._sweep_due = False
        unlisted = {}
        for series in stored:
            namespace, _, name = series.partition(".")  # series_of: a namespace (a DNS label) holds no "."
            key = f"{namespace}/{name}"
            if namespace and name and self.cfg.namespace in (None, namespace) and key not in listed:
                unlisted[key] = series
        if unlisted:
            log.info("the forecast store holds forecasts of %d policies not listed (deleted while no controller ran), "
                     "pruned now: %s", len(unlisted), ", ".join(sorted(unlisted)))
        return unlisted

    def _later_by(self, seconds: float) -> None:
        """The reconcile's deadline moves later by `seconds` (a fit's, which waits on no server)."""
        if self._deadline is not None:
            self._deadline += seconds

    def _past_deadline(self) -> bool:
        return self.stopping.is_set() or (self._deadline is not None and time.monotonic() >= self._deadline)

    def _note_left(self, outcomes: list[Outcome]) -> None:
        self._left += sum(o.skipped == PAST_DEADLINE for o in outcomes)

    # -- the whole reconcile
    def reconcile(self, now, deadline: float | None = None) -> ControllerState:
        """One reconcile at `now`. `deadline` (time.monotonic(); controller.loop sets it): every request it makes to
        the cluster ends by then, none starts after; what it has not done by then is left, counted and logged, to the
        next reconcile, which acts on fresh state."""
        now = _utc(now)
        started = time.monotonic()
        self._fenced, self._deadline, self._left = False, deadline, 0
        try:
            # one deadline, kept here: a fit moves it later (_later_by); each kind of object read once (snapshot)
            with within(lambda: self._deadline), self.cluster.snapshot():
                state = self._reconcile(now)
                # the stored forecasts of policies deleted go last: a slow store spends none of the deadline the plan's
                # writes need (none after a reconcile that failed: its list may have)
                self.forecasts.prune_deleted()
        except ClusterError as exc:  # the API server is down or refusing: nothing was half-applied we cannot redo
            self._error("cluster", "reconcile", exc)
            state = replace(self.holder.get(), leader=True)
        except Exception as exc:  # noqa: BLE001 - a bug must not stop the loop: log it whole, count it, go on
            log.exception("reconcile at %s failed", now)
            self._error("internal", "reconcile", exc)
            state = replace(self.holder.get(), leader=True)
        if self._left and self.stopping.is_set():
            log.info("%d writes left undone: the controller is stopping; the next leader acts on fresh state",
                     self._left)
        elif self._left:
            self._error("cluster", "reconcile deadline", f"{self._left} actions left undone: its deadline passed "
                        f"{time.monotonic() - started:.1f} s after it began (the API server answered too slowly, or "
                        "not at all); the next reconcile acts on fresh state")
        self._durations = self._durations.observe(time.monotonic() - started)
        with self._said_lock:
            status_lag = self._status_lag
        state = replace(state, reconcile_total=self._durations.count, reconcile_errors_total=dict(self._errors),
                        reconcile_seconds=self._durations, status_lag_seconds=status_lag,
                        statuses_waiting=self._statuses.waiting() if self._statuses is not None else 0,
                        last_reconcile_timestamp=time.time(),
                        preemptions_total=dict(self._preemptions), lost_gpu_seconds_total=dict(self._lost))
        self.holder.publish(state)
        return state

    def _reconcile(self, now: pd.Timestamp) -> ControllerState:
        lendable = self.cfg.capacity_gpus - self.cfg.non_lendable_gpus
        objects = identified(self.cluster.reservation_policies(self.cfg.namespace))
        policies, invalid = parse_policies(objects, self._specs)
        parsed = policies
        holders, lending_invalid, invalid_held, left, within = invalid_holdings(objects, invalid, parsed, self._specs)
        left_held = self._held_by(left, within)
        for p, gpus in zip(left, left_held):
            if gpus == 0:  # scaled to 0 or deleted: its GPUs are free, and its policy's status no longer says it
                self._specs.forget_left(p.ref, p.target().target)
        policies, missing = self._present(policies)
        policies, too_big = feasible(policies, lendable, active_first=not self.dry_run)
        # a refused policy's fault stays its own. Its target is left as it is, and what that holds (none, if missing:
        # its inference ClusterQueue is set to none too) is neither reserved nor lent again. Its training queues are
        # lent to as any (a queue's SlackLent Events go to a working policy first): their teams neither lose nor gain
        # by the refusal, and the training there is seen and preemptible, where a quota left as last set would lend
        # GPUs the plan no longer counts
        holders = [p for p in parsed if p.ref in too_big] + holders
        lending = policies + [p for p in parsed if p.ref in missing or p.ref in too_big] + lending_invalid
        refused = {**invalid, **missing, **too_big}
        states: dict[str, PolicyState] = {}
        report: list[RecordEvent | PatchStatus] = []
        read = {o.ref: o for o in objects}
        holds = {p.ref: p.spec for p in (*parsed, *invalid_held)}  # what each holds (ParsedSpecs.holding), read once
        # the Deployments policies scale (an HPA target: the one it scales), accepted or refused, and those edits left
        # behind (held, or `within`: one whose inferenceClusterQueue is lent into runs its pods in that training queue):
        # their pods are inference wherever Kueue admits them
        self._served = self._serving((*parsed, *invalid_held, *left, *within))
        for ref, message in refused.items():
            key = f"{ref.namespace}/{ref.name}"
            states[key] = PolicyState(key, "", False, message)
            obj, _, generation = read[ref]
            status = obj.get("status") or {}
            holding = holding_said(holds[ref]) if ref in holds else None
            left_said, holds_target = self._specs.left_said(ref), self._specs.holds_target(ref)
            told, whole = _refusal_said(status, message, generation, holding, left_said, holds_target)
            why = "PlanInfeasible" if ref in too_big else "TargetMissing" if ref in missing else "InvalidSpec"
            if self._reported.get(ref) != message and not told:
                # one event per new refusal, not one per reconcile (nor one per restart: the status remembers)
                report.append(RecordEvent(EventNote(ref, why, message, "Warning")))
                self._reported[ref] = message
            if not whole:
                conditions = (Condition("Ready", "False", why, message), *NOT_PLANNED)
                report.append(PatchStatus(ref, PolicyStatus(0, 0, conditions, observed_generation=generation,
                                                            holding=holding, left=left_said,
                                                            holds_target=holds_target)))
        for p in policies:
            self._reported.pop(p.ref, None)
        # what was written and told a policy since deleted is forgotten (a thousand come and go over a controller's
        # life), so one created again under its name (a new object, its Events of its own) is told its faults again
        present = {p.ref for p in policies} | set(refused)
        forget_absent(present, self._reported, self._faults, self._failed, *self._told.values())
        with self._said_lock:
            forget_absent(present, self._said, self._waiting)
        self._specs.keep(present)
        # and so are its samples and forecast (weeks of samples each), so one created again reads its history whole;
        # so too where it was created again between two reconciles (another uid, its generation 1 again, its query
        # perhaps another: an edit of it is told by the generation, and no refit would be due within the hour)
        objects_by_key = {f"{ref.namespace}/{ref.name}": ref for ref in present}
        kept = {key for key, ref in objects_by_key.items() if self._object_of.get(key, ref) == ref}
        # its stored forecasts too, once the policies are listed without it (a list that fails ends the reconcile
        # before this: nothing is taken for deleted then) or with another object under its name, and those of
        # policies gone while no controller ran; not by `headroom plan`, which writes nothing
        deleted = {} if self.dry_run else {key: series_of(ref) for key, ref in self._object_of.items()
                                           if objects_by_key.get(key) != ref} | self._unlisted(objects_by_key)
        self._object_of = objects_by_key
        forget_absent(kept, self._raw, self._converted, self._full_read, self._queried, self._missing)
        self.forecasts.keep(kept, deleted, now)
        marked = self.cluster.lent_quotas(self.cfg.namespace)
        returned = self._returned(invalid, holds, marked)
        if not lending:  # (a refused policy still has its training queues lent to)
            if not self.dry_run:
                self._execute(report + returned)
            return ControllerState(self.cfg.capacity_gpus, True, states)
        self._prefetched = self._prefetch(policies, now)
        self.forecasts.reconcile_starts()
        inputs = [self._input(p, now) for p in policies]
        # a refused policy's target holds its GPUs as any workload headroom does not manage holds them: not lent (the
        # policies kept have their minimums first, as feasible() gave them)
        held = self._held_by(holders, within) + left_held
        held_gpus = sum(gpus or 0 for gpus in held)
        quotas = self.cluster.cluster_queue_quotas()
        weights = self._weights(lending, quotas)
        self._landed_late()
        # forecast-only policies beside active ones change nothing: the active ones are planned on what those hold
        # (their targets as read, the training in the queues only they name, which no one lends into or preempts), not
        # on what they would reserve and preempt; their statuses say what they would do, planned with the others as if
        # active
        shadows = [] if self.dry_run or all(p.active for p in policies) or not any(p.active for p in policies) \
            else [p for p in policies if not p.active]
        acting_lending = [p for p in lending if p.active] if shadows else lending
        # both plans on one read of the cluster: two reads could disagree (a job ended, a replica came up between them)
        cluster = _ClusterRead(self._targets(policies), quotas, self.cluster.workloads())
        shadow = self._plan("shadow", inputs, policies, lending, held_gpus, within, weights, now, cluster) \
            if shadows else None
        shadows_held = self._held_by(shadows, within)
        beside = sum(gpus or 0 for gpus in shadows_held) + training_gpus(
            cluster.workloads, training_queues(lending) - training_queues(acting_lending))
        acting_inputs = [i for i in inputs if i.policy.active] if shadows else inputs
        acting = self._plan("acting", acting_inputs, [i.policy for i in acting_inputs], acting_lending,
                            held_gpus + beside, within, weights, now, cluster)
        cluster_policy, hours, view, step = acting.policy, acting.hours, acting.view, acting.step
        plan_id = hashlib.sha256(repr((now.isoformat(), [(w.name, w.reserved_gpus) for w in step.workloads],
                                       [(x.job, x.kind, x.at) for x in step.preemptions])).encode()).hexdigest()[:12]
        targets = [replace(p.target(), active=True) if self.dry_run else p.target() for p in lending]
        in_queues: dict[str, int] = {}  # what refused and forecast-only policies' targets hold in each inference queue
        for p, gpus in zip(holders + left + shadows, held + shadows_held):
            if q := p.spec.inference_cluster_queue:
                in_queues[q] = in_queues.get(q, 0) + (gpus or 0)
        # a training queue's quota holds what is lent there and the pods beyond it: Kueue admits one of them restarted
        # again (within a quota of only what is lent it would wait for good, its target scaled by no one)
        held_there = {q: gpus for q, gpus in beyond_lent(acting.pods_in, step.quotas).items() if q in step.quotas}
        quotas_set = replace(step, quotas={q: gpus + held_there.get(q, 0) for q, gpus in step.quotas.items()})
        actions = cluster_actions(quotas_set, view, targets, plan_id, in_queues,
                                  {f"{r.namespace}/{r.name}" for r in missing}, self.cfg.namespace, marked)
        actions += returned
        with self._events.held() if self._events is not None else nullcontext():  # the writes first, their Events after
            outcomes = [] if self.dry_run else self._apply(actions, view, lambda: self._still_wanted(
                hours, acting.inputs, cluster_policy, acting_lending, now))
        self._note_left(outcomes)
        failures = self._count(outcomes, policies)
        for p in policies:  # a queue an active policy names that cannot be set: said on it, naming the field
            if p.active and (missing_queue := _queue_missing(p.spec, quotas)):
                failures.setdefault(p.key, missing_queue)
        self._lent = step.quotas
        after_read = self._read_cluster([i.policy for i in acting.inputs])  # after evictions and scaling
        workloads = after_read.workloads
        after = self._view([i.policy for i in acting.inputs], acting_lending, now, after_read, self._lent)
        lenders = self._cohort_check(lending)
        report += self._reclaim_notes(lending, lenders) + self._queue_notes(lending, workloads)
        # with every policy forecast-only the plan is what they would do and nothing is lent (`headroom plan`, dry_run,
        # plans every policy as active)
        acts = self.dry_run or any(p.active for p in lending)
        reclaimable, band, wanted, risk = self._headroom(step, after, cluster_policy, lenders,
                                                         None if acts else [i.policy for i in acting.inputs])
        # each policy as the plan it is planned by says it: an acting one by the plan applied, a forecast-only one
        # beside active ones by the plan of them all
        by_key = {**(shadow.each() if shadow is not None else {}), **acting.each()}
        planned = [by_key[i.policy.key] for i in inputs]
        report += self._reports(planned, after, failures, plan_id, now, states, reclaimable, risk)
        if not self.dry_run:
            self._execute(report)
        if self.timeline is not None:
            self._record(planned, {**(shadow.view.targets if shadow is not None else {}), **view.targets}, step,
                         outcomes, now)
        # training in every queue lent to, those only forecast-only policies name too: it holds GPUs all the same, and
        # its teams are teams all the same
        every_queue = self._view([], lending, now, after_read, self._lent)
        # headroom lends only to the queues of the policies acting (none with every policy forecast-only): only
        # training there runs on lent capacity, what the savings count
        lent_to = training_queues(acting_lending) if acts else set()
        state = ControllerState(
            self.cfg.capacity_gpus, True, states, self._teams(every_queue, lending, lent_to, now, held_there),
            slack_gpus=self._lent_in_place(step, outcomes, after, held_there) if acts else 0,
            training_gpus=int(every_queue.training.gpus.sum()),
            reclaimable_gpus=reclaimable,
            headroom_band_gpus=band, headroom_wanted_gpus=wanted, headroom_at_risk=risk,
            plan_id=plan_id, slack_by_hour=tuple((pd.Timestamp(t, unit="s", tz="UTC"), int(g)) for t, g in zip(
                hours.workloads[0].starts if hours.workloads else (), hours.slack)),
            actions=tuple(actions), notes=hours.notes)
        if self.summary is not None and not self.dry_run:
            self._write_summary(self.summary, state)
        return state

    def _write_summary(self, summary: PlanSummaryWriter, state: ControllerState) -> None:
        """The plan summary, fenced as every write is."""
        until, refused = window(self._may_write)
        self._left += refused == PAST_DEADLINE
        if refused:
            return
        try:
            with within(until):
                summary.write(plan_summary(state))
        except ClusterError as exc:
            self._error("status", "the plan summary", exc)

    def _plan(self, role: str, inputs: list[_Input], planned: list[PolicyObject], lending: list[PolicyObject],
              held: int, within: list[PolicyObject], weights: tuple[tuple[str, float], ...],
              now: pd.Timestamp, read: _ClusterRead) -> _Plan:
        """The plan of the policies `planned` (their `inputs`), with the training in the queues `lending` lend to,
        beside `held` GPUs that workloads headroom does not plan hold (and the pods `within` beyond the quotas of those
        queues), never more than the minimums of `planned` leave (feasible() gave them first), on the cluster as `read`.
        `role`: which of a reconcile's plans it is, each hourly plan kept for its own (_hour_plan).
        The pods within what the last plan lent a training queue hold it; a plan lending less there than they hold
        within it would count the rest nowhere (they never leave: the GPUs it expects back would be reserved again, a
        replica waiting), so it is made again with what it lends as the split, until it lends no less than that."""
        held_most = self.cfg.capacity_gpus - self.cfg.non_lendable_gpus - sum(p.spec.least_gpus for p in planned)
        workloads = tuple(WorkloadPolicy.from_spec(p.key, p.spec) for p in planned)
        pods_in = self._pods_in(within, training_queues(lending), read.workloads)
        lent = self._lent
        while True:
            beyond = beyond_lent(pods_in, lent)
            cluster_policy = ClusterPolicy(self.cfg.capacity_gpus, workloads, weights, self.cfg.non_lendable_gpus
                                           + min(held + sum(beyond.values()), held_most),
                                           self.cfg.horizon_hours, self.cfg.keep_forecast_seconds)
            hours = self._hour_plan(role, inputs, cluster_policy, now)
            view = self._view(planned, lending, now, read, lent)
            step = plan_step(hours, self._observed(inputs, view), view.training, cluster_policy, now)
            shrunk = {**lent, **{q: step.quotas.get(q, 0) for q in pods_in if step.quotas.get(q, 0) < lent.get(q, 0)}}
            if beyond_lent(pods_in, shrunk) == beyond:
                return _Plan(inputs, cluster_policy, hours, view, step, pods_in)
            lent = shrunk  # (a queue lent less each pass, never below 0: it ends)

    # -- 2. demand and forecast, each policy's faults its own
    def _input(self, p: PolicyObject, now: pd.Timestamp) -> _Input:
        try:
            return self._observe(p, now)
        except Exception as exc:  # noqa: BLE001 - a bug in one policy's inputs must not stop the others
            log.exception("%s: observing its demand failed", p.key)
            self._error("internal", p.key, exc)
            empty = pd.Series(dtype=float, index=pd.DatetimeIndex([], tz="UTC"))
            return _Input(p, self._raw.get(p.key, empty), f"InternalError: {type(exc).__name__}: {exc}", None)

    def _observe(self, p: PolicyObject, now: pd.Timestamp) -> _Input:
        degraded, fault = None, None
        try:
            got = self._prefetched.pop(p.key, None)
            if isinstance(got, Exception):
                raise got
            raw = got if got is not None else self._read(p, now)
            self._raw[p.key] = raw
        except (PrometheusError, HistoryError, OSError) as exc:
            self._error("demand", p.key, exc)
            degraded = f"DemandUnavailable: {exc}"
        raw = self._raw.get(p.key, pd.Series(dtype=float, index=pd.DatetimeIndex([], tz="UTC")))
        t_now = now.timestamp()
        if degraded is None:
            seen = self._samples(p.key, raw)
            degraded = degraded_reason(*window_facts(seen.times, seen.values, t_now), t_now,
                                       self.data.stale_after_seconds)
        cached = self.forecasts.current(p.key)
        if degraded is None and due(cached, now, p.generation):
            cached, fault = self.forecasts.refit(p, raw, now, cached, self._full_read.get(p.key) == now.floor("h"))
            raw = self._raw.get(p.key, raw)  # a whole lookback re-read beside, taken up
        return _Input(p, raw, degraded, self.forecasts.in_force(p, cached, now), fault)

    def leads(self) -> bool:
        """Whether this replica may write now: it holds its Lease (renewed first if it has lapsed: controller.loop),
        or has none (the embedded cluster)."""
        return self.leading is None or self.leading() is not None

    def _lease_end(self) -> float | None:
        """Until when (time.monotonic()) this replica may write: its Lease's end (renewed first if it has lapsed:
        controller.loop; math.inf: no Lease), or the deadline set around the write if earlier; None: it does not
        lead."""
        until = math.inf if self.leading is None else self.leading()
        return None if until is None else earliest(until, current_deadline())

    def _samples(self, key: str, raw: pd.Series) -> _Samples:
        held = self._converted.get(key)
        if held is None or held.raw is not raw:
            held = self._converted[key] = _Samples.of(raw)
        return held

    def close(self) -> None:
        """Hourly work not started is dropped and the fit under way stopped (a controller shutting down does not wait
        for a thousand refits); the statuses and Events queued beside are written."""
        self.forecasts.close()
        if self._io is not None:
            self._io.shutdown(wait=False)
        if self._statuses is not None:
            self._statuses.close()
        if self._events is not None:
            self._events.close()

    def flush(self, timeout: float = 30.0) -> None:
        """Write the statuses and Events queued beside now (a leader stepping down writes what it decided before it
        lets go)."""
        end = time.monotonic() + timeout
        if self._statuses is not None and not self._statuses.flush(timeout):
            log.warning("statuses still queued after %.0f s", timeout)
        if self._events is not None and not self._events.flush(max(end - time.monotonic(), 0)):
            log.warning("Events still queued after %.0f s", timeout)

    def let_go(self) -> None:
        """This replica lets its Lease go (controller.loop, just before the release): the Events still queued beside
        are dropped, said how many, and none is sent from then on, as another replica may lead at once (statuses are
        fenced by the Lease already)."""
        if self._events is not None and (dropped := self._events.drop()):
            log.info("%d Events still queued were dropped: this replica lets its Lease go and writes nothing after",
                     dropped)

    def _prefetch(self, policies: list[PolicyObject], now: pd.Timestamp) -> dict:
        """Every policy's demand read at once: the reads in 8 parts side by side, each part's reads of one range in
        few requests where the source can (DemandReader.read_many; a thousand queries one by one take seconds); a
        read's error is kept for its policy."""
        if len(policies) < 4 or self.stopping.is_set():  # stopping: each policy's own read says it was not made
            return {}
        asked = [(p, self._since(p, now)) for p in policies]
        out: dict[str, pd.Series | Exception] = {p.key: self._raw[p.key] for p, since in asked if since is None}
        reads = [(p, since) for p, since in asked if since is not None]
        deadline = current_deadline()  # the reconcile's: a thread sees only what is set in it

        def read(part: list) -> list[pd.Series | Exception]:
            try:
                with within(deadline):
                    return self.demand.read_many([(p.key, p.spec.query, start, now) for p, (start, _) in part])
            except Exception as exc:  # noqa: BLE001 - raised again in those policies' own observe
                return [exc] * len(part)

        parts = [reads[k::SIDE_BY_SIDE] for k in range(min(SIDE_BY_SIDE, len(reads)))]
        for part, got in zip(parts, self._side_by_side().map(read, parts)):
            for (p, (_, whole)), raw in zip(part, got):
                try:
                    out[p.key] = raw if isinstance(raw, Exception) else self._joined(p, now, whole, raw)
                except HistoryError as exc:  # raised again in that policy's own observe
                    out[p.key] = exc
        return out

    def _side_by_side(self) -> ThreadPoolExecutor:
        """The threads a reconcile reads and writes on, kept from one reconcile to the next (starting 8 threads
        several times a reconcile cost the ramp's reconcile 0.4 s at 1,000 policies)."""
        if self._io is None:
            self._io = ThreadPoolExecutor(SIDE_BY_SIDE, "headroom-io")
        return self._io

    def _read(self, p: PolicyObject, now: pd.Timestamp) -> pd.Series:
        """The whole lookback once an hour (when the forecast is refitted; with the refit beside, the refit re-reads
        it and a reconcile only at start-up); in between only the samples since the newest one held, so a reconcile
        a minute does not re-read weeks of history."""
        since = self._since(p, now)
        if since is None:
            return self._raw[p.key]
        if self.stopping.is_set():  # as past the deadline: a halted Prometheus would hold each read for its timeout
            raise DeadlinePassed("not read: the controller is stopping")
        return self._joined(p, now, since[1], self.demand.read(p.key, p.spec.query, since[0], now))

    def _since(self, p: PolicyObject, now: pd.Timestamp) -> tuple[pd.Timestamp, bool] | None:
        """Where this reconcile's read of the policy's demand starts, and whether that is the whole lookback; None:
        nothing to ask."""
        held = self._raw.get(p.key)
        hourly_reread = not self.forecasts.refit_beside and self._full_read.get(p.key) != now.floor("h")
        # samples of a query since edited are of another demand: joined to the new ones, a refit fitted on both
        if held is None or hourly_reread or (len(held) and held.index[-1] > now) or \
                self._queried.get(p.key) != p.spec.query:
            return now - pd.Timedelta(seconds=self.data.lookback_seconds), True
        if len(held) > 1 and now < held.index[-1] + (held.index[-1] - held.index[-2]):
            return None  # no newer sample can exist before the next step: nothing to ask (reconciles outpace it)
        # whole steps back from the newest sample, so the new samples land on the same grid
        if len(held):
            return held.index[-1] - self.data.read_overlap, False
        return now - pd.Timedelta(seconds=self.data.lookback_seconds), False

    def _joined(self, p: PolicyObject, now: pd.Timestamp, whole: bool, fresh: pd.Series) -> pd.Series:
        """The policy's samples in the lookback with `fresh`, read from _since; a HistoryError if `fresh` holds what
        is no demand (a query answering negative values: this policy's demand unavailable, said so). Only the fresh
        samples are checked: those held were, as they came."""
        fresh = fresh.astype(float)
        check_values(fresh)
        if whole:
            self._full_read[p.key] = now.floor("h")
            self._queried[p.key] = p.spec.query
            return fresh
        held = self._raw[p.key]
        stamps = held.index.asi8
        if (stamps[1:] < stamps[:-1]).any():  # pandas' own check builds an index engine: 0.7 ms a policy
            held = held.sort_index()
        # the samples held in the lookback before the first fresh one: two searches and one array, where masks over
        # weeks of samples and pd.concat cost a thousand policies seconds a reconcile
        index = held.index
        lo = index.searchsorted(now - pd.Timedelta(seconds=self.data.lookback_seconds), side="right")
        hi = index.searchsorted(fresh.index[0] if len(fresh) else now, side="left")
        if hi <= lo:
            return fresh
        return pd.Series(np.concatenate((held.to_numpy()[lo:hi], fresh.to_numpy())),
                         index=index[lo:hi].append(fresh.index), name=fresh.name)

    # -- 3. plan
    def _weights(self, policies: list[PolicyObject], quotas: Mapping[str, int]) -> tuple[tuple[str, float], ...]:
        """The teams' shares of the slack: the training queues the active `policies` lend to that hold GPU quota
        (`quotas`). A queue that does not exist (a typo, or one not yet created) can be lent nothing: its share went to
        no one, 15 of 47 GPUs with one such queue beside two real ones, so the teams that exist share all of it."""
        queues = training_queues(p for p in policies if p.active) & quotas.keys()
        # a weight for a queue no policy lends to (a typo) would leave the teams equal without a word
        named = training_queues(policies)
        for queue in sorted(set(self.cfg.team_weights) - named - self._unweighed):
            log.warning("run.team_weights.%s: no ReservationPolicy lends to a training ClusterQueue of that name "
                        "(its trainingClusterQueues: %s); the weight is unused", queue, ", ".join(sorted(named)) or
                        "none")
            self._unweighed.add(queue)
        return queue_weights(queues, self.cfg.team_weights)

    def _hour_plan(self, role: str, inputs: list[_Input], policy: ClusterPolicy, now: pd.Timestamp) -> HourPlan:
        """Kept until the hour, a forecast or the policies change; one for each `role` (_plan)."""
        # every sample read is at or before now (a series ending later is read again whole): History.of's newest
        samples = {i.policy.key: self._samples(i.policy.key, i.raw) for i in inputs}
        histories = {k: History(s.newest, s.times, s.values, now.timestamp()) for k, s in samples.items()}
        key = (now.floor("h"), policy, tuple(id(i.forecast) for i in inputs),
               tuple(stale(histories[i.policy.key].newest, now.timestamp(), policy) for i in inputs))
        kept = self._hours.get(role)
        if kept is not None and kept[0] == key:
            return kept[1]
        forecasts = {}
        for i in inputs:
            spec = i.policy.spec
            try:
                forecasts[i.policy.key] = None if i.forecast is None else \
                    Forecast.of(i.forecast.frame, spec.target_quantile, spec.headroom_quantile)
            except KeyError:  # a forecast without the policy's quantiles: the planner falls back
                forecasts[i.policy.key] = None
        hours = plan_hours(forecasts, histories, policy, now)
        self._hours[role] = (key, hours)
        return hours

    def _targets(self, policies: list[PolicyObject]) -> dict[str, TargetState | None]:
        """Each policy's target as read now (None: not found)."""
        targets: dict[str, TargetState | None] = {}
        for p in policies:
            try:
                target = p.target()
                targets[p.key] = self.cluster.target_state(target.target, target.gpus_per_replica)
                self._missing.pop(p.key, None)
            except NotFound as exc:
                targets[p.key] = None
                self._missing[p.key] = str(exc)  # what is missing: the target, or the Deployment its HPA scales
        return targets

    def _serving(self, policies: Iterable[PolicyObject]) -> dict[TargetRef, frozenset[tuple[str, str]]]:
        """The Deployments whose Pods each of `policies`' target runs, each (namespace, name): a Deployment target
        itself, an HPA the Deployment its scaleTargetRef names (read as its target is, within the reconcile's one read
        of it). One missing, or scaling no Deployment, runs no Pods of one. An HPA not read now (the API server
        failing, or the controller's ClusterRole not letting it: a fault of its policy's own) keeps the Deployment it
        scaled when last read (`_scaled`). One never read (the controller just started, or never let) is taken to
        scale every Deployment of its namespace whose Pods run in its policy's inferenceClusterQueue: inference is not
        taken for training (none of those Pods is preempted as training, and where they run beyond a training queue's
        quota they are held), while a Workload there that runs no Deployment's Pod (a Job) is training still. Logged
        once per HPA until it is read again (a 30 s loop would say it 2,880 times a day)."""
        served: dict[TargetRef, frozenset[tuple[str, str]]] = {}
        scaled: dict[TargetRef, tuple[str, str]] = {}
        unread: dict[TargetRef, tuple[PolicyObject, ClusterError]] = {}
        for p in policies:
            target = p.target()
            ref = target.target
            if ref.kind == "Deployment":
                served[ref] = frozenset({(ref.namespace or "", ref.name)})
            elif ref.kind == "HorizontalPodAutoscaler":
                try:
                    scales = self.cluster.target_state(ref, target.gpus_per_replica).scales
                except NotFound:
                    scales = None
                except ClusterError as exc:
                    unread[ref] = (p, exc)
                    continue
                if scales is not None:
                    scaled[ref] = (ref.namespace or "", scales)
                    served[ref] = frozenset({scaled[ref]})
        unknown = [ref for ref in unread if ref not in self._scaled]
        workloads = self.cluster.workloads() if unknown else []
        for ref, (p, error) in unread.items():
            if ref in self._scaled:
                scaled[ref] = self._scaled[ref]
                served[ref] = frozenset({scaled[ref]})
                how = f"its Pods are of Deployment {scaled[ref][1]}, which it scaled when last read"
            else:
                queue = p.spec.inference_cluster_queue
                served[ref] = frozenset((w.namespace, w.deployment) for w in workloads if w.deployment is not None
                                        and w.namespace == ref.namespace and w.cluster_queue == queue)
                how = (f"never read, it is taken to scale every Deployment of namespace {ref.namespace} whose Pods "
                       f"run in ClusterQueue {queue}: none of them is preempted as training" if queue is not None else
                       "never read, no Pods are known to be its")
            if ref not in self._unread:
                log.warning("%s %s/%s not read (%s): %s; said once until it is read again", ref.kind, ref.namespace,
                            ref.name, error, how)
        self._scaled, self._unread = scaled, set(unread)
        return served

    def _present(self, policies: list[PolicyObject]) -> tuple[list[PolicyObject], dict[ObjectRef, str]]:
        """The policies to plan, in order, and those refused because their target is missing, with what is missing.
        Nothing is served by a target that does not exist: GPUs held for it, or its minimum, would be taken from the
        working policies and from training, and its reservation comes back, as any rise does, once it exists. A
        forecast-only policy acts on nothing and is planned as it is (`headroom plan` treats every policy as active)."""
        targets = self._targets([p for p in policies if p.active or self.dry_run])
        missing = {p.ref: f"{self._missing[p.key]}: nothing is served there, so the policy reserves nothing and takes "
                          "no part in the plan until it exists"
                   for p in policies if p.key in targets and targets[p.key] is None}
        return [p for p in policies if p.ref not in missing], missing

    def _returned(self, invalid: Mapping[ObjectRef, str], holds: Mapping[ObjectRef, PolicySpec],
                  lent: Mapping[str, int]) -> list[SetQuota]:
        """The training ClusterQueues headroom lent into that no policy lends to any more (`holds`: what each policy's
        spec names; deleted, the queue dropped from it, or the policy made forecast-only, which lends nothing), their
        quota still what headroom lent: back to what the inference pods running there hold (a target an edit left,
        whose pods Kueue admitted there: one of them restarted is admitted again; marked still, so it comes back as
        they go), or 0, or Kueue admits training into GPUs the plan lends again (or, beside a forecast-only policy,
        counts as held): those a controller of the same namespace's policies lent (run.namespace; none set: every
        namespace's), as the queue's mark says (`lent`). Left as they are: one whose quota someone else has set since
        (theirs now), one another namespace's controller lent into (it reads no policy of this one's, nor this one of
        its), and all of them while an `invalid` policy's spec does not say what it names."""
        if not lent or any(ref not in holds for ref in invalid):
            return []
        named = {q for spec in holds.values() for q in (
            *(spec.training_cluster_queues if spec.mode == "active" or self.dry_run else ()), *spec.inference_queues)}
        quotas = self.cluster.cluster_queue_quotas()
        unnamed = {q: gpus for q, gpus in lent.items() if q not in named and quotas.get(q) == gpus}
        pods = serving_in(self.cluster.workloads(), set(unnamed), frozenset().union(*self._served.values())) \
            if unnamed else {}
        out = []
        for q, gpus in sorted(unnamed.items()):
            kept = pods.get(q, 0)
            if kept == gpus:
                continue
            back = f"beyond the {kept} the inference pods running there hold come back" if kept else "come back"
            out.append(SetQuota(q, kept, f"no active ReservationPolicy names ClusterQueue {q} any more: the "
                                f"{gpus - kept} GPUs headroom lent it {back} (what Kueue admitted there runs on; "
                                "nothing more is admitted into them)", lent=kept > 0,
                                lent_for=self.cfg.namespace if kept else None, replaces=gpus))
        return out

    def _read_cluster(self, planned: list[PolicyObject]) -> _ClusterRead:
        """The cluster as read now, for the policies `planned`."""
        return _ClusterRead(self._targets(planned), self.cluster.cluster_queue_quotas(), self.cluster.workloads())

    def _view(self, planned: list[PolicyObject], lending: list[PolicyObject], now: pd.Timestamp, read: _ClusterRead,
              lent: Mapping[str, int]) -> View:
        """The targets of the policies `planned` as `read` (a refused policy's is read where it is refused, once),
        and the training among its Workloads in the queues `lending` lend to, the inference pods there within what the
        plan `lent` them (serving_gpus)."""
        training, uids, stopped = training_view(read.workloads, training_queues(lending), now.timestamp(),
                                                Served(frozenset().union(*self._served.values()), lent))
        return View({p.key: read.targets[p.key] for p in planned}, read.quotas, training, uids, stopped)

    def _held_by(self, policies: list[PolicyObject], within: list[PolicyObject]) -> list[int | None]:
        """The GPUs the target of each of `policies` holds now (one not found: none; None: it could not be read). A
        ClusterQueue target holds its quota, or more: the pods of the refused policies and left targets `within`
        (holding no target of their own, core.policy.pods_queues) that name it as their inferenceClusterQueue, where
        Kueue let them borrow beyond it."""
        if not policies:
            return []
        quotas = self.cluster.cluster_queue_quotas()

        def read(p: PolicyObject) -> int | None:
            try:
                target = p.target()
                return _held_gpus(p.spec, self.cluster.target_state(target.target, target.gpus_per_replica), quotas)
            except NotFound:
                return 0
            except ClusterError:
                return None

        held = [read(p) for p in policies]
        for k, p in enumerate(policies):
            queue = p.spec.target.name
            if p.spec.target.kind == "ClusterQueue" and held[k] is not None:
                pods = [read(w) for w in within if w.spec.inference_cluster_queue == queue]
                held[k] = max(held[k] or 0, sum(gpus or 0 for gpus in pods))  # pods unread: the quota, known held
        return held

    def _pods_in(self, within: list[PolicyObject], lent_to: set[str], workloads: list[WorkloadInfo]
                 ) -> dict[str, int]:
        """The GPUs the pods of the refused policies and left targets `within` run on, among `workloads`, in each of
        the training queues `lent_to` they name as their inferenceClusterQueue. Beyond what was lent there they are held
        (serving_gpus), as a ClusterQueue target's pods beyond its quota are (_held_by): counted apart from the view's
        within count (training_view), as the plan is made with them before the view is built."""
        queues = lent_to & {p.spec.inference_cluster_queue for p in within}
        if not queues:  # no such pods
            return {}
        pods = frozenset().union(*(self._served.get(p.target().target, ()) for p in within))
        return serving_in(workloads, queues, pods)

    def _observed(self, inputs: list[_Input], view: View) -> dict[str, Observed]:
        out = {}
        for i in inputs:
            held = _held_gpus(i.policy.spec, view.targets.get(i.policy.key), view.quotas)
            seen = self._samples(i.policy.key, i.raw)
            out[i.policy.key] = Observed(seen.times, seen.values, held, i.degraded is not None)
        return out

    def _still_wanted(self, hours: HourPlan, inputs, policy: ClusterPolicy, policies, now) -> set[str]:
        """The Workloads a plan on a fresh view still evicts now (a watch cache's state now; without one, what the
        reconcile read, each object once: Cluster.snapshot)."""
        planned = [i.policy for i in inputs]
        fresh = self._view(planned, policies, now, self._read_cluster(planned), self._lent)
        return {x.job for x in plan_step(hours, self._observed(inputs, fresh), fresh.training, policy, now).due()}

    # -- 4. act
    def _apply(self, actions, view: View, still_wanted: Callable[[], set[str]]) -> list[Outcome]:
        """The plan's actions in their write order (in_write_order: what a demand jump needs first, the simulator's
        too). Each kind's writes go a few at a time (a thousand reservations moving at once take seconds, and must not
        hold the evictions up). Evictions go only where a plan on a fresh view, made before anything changes,
        still makes them, and only for a policy whose reservation was applied."""
        writes = in_write_order(actions, view.quotas)
        wanted = still_wanted() if writes.evictions else set()  # re-planned before anything changes, as execute would
        out = self._in_parallel(writes.leading) + self._in_parallel(writes.down)
        # an eviction makes room for its policy's reservation: where that could not be applied (its target missing,
        # the scale refused), the GPUs would go to no inference replica, and the training work is lost for nothing
        unapplied = {o.action.policy for o in out if isinstance(o.action, Scale) and o.failure}
        unapplied |= {key for key, state in view.targets.items() if state is None}  # e.g. an HPA's Deployment gone
        out += [Outcome(a, False, skipped="the reservation it makes room for could not be applied")
                for a in writes.evictions if a.policy in unapplied]
        out += self._in_parallel([a for a in writes.evictions if a.policy not in unapplied],
                                 still_wanted=lambda _: wanted)
        out += self._in_parallel(writes.scales) + self._in_parallel(writes.up)
        return out + self._in_parallel(writes.requeues)

    def _run(self, actions: list, still_wanted: Callable[[list[Evict]], set[str]] | None = None) -> list[Outcome]:
        """`actions` one after another, their Events beside when they are (execute)."""
        return execute(actions, self.cluster, still_wanted=still_wanted, record=self._events, fence=self._may_write)

    def _in_parallel(self, actions: list, still_wanted: Callable[[list[Evict]], set[str]] | None = None
                     ) -> list[Outcome]:
        """Independent writes (one object each), 8 at a time when there are many (a thousand in a row take
        seconds) and the cluster takes them so (Cluster.writes_side_by_side), else in their order."""
        if len(actions) <= 16 or not self.cluster.writes_side_by_side:
            return self._run(actions, still_wanted)
        chunks = [actions[k::SIDE_BY_SIDE] for k in range(SIDE_BY_SIDE)]
        return [o for part in self._side_by_side().map(lambda c: self._run(c, still_wanted), chunks) for o in part]

    def _statuses_due(self, statuses: list[PatchStatus]) -> list[PatchStatus]:
        """The statuses to write now: what says something urgent or nothing new (the adapter writes that only when
        it is an hour old), and at most STATUS_SPREAD others, the longest waiting first; the rest wait."""
        due, news = [], []
        with self._said_lock:
            for a in statuses:
                said = self._said.get(a.policy)
                if said is None or urgent_news(said, a.status) or replace(said, plan_id=a.status.plan_id) == a.status:
                    due.append(a)
                else:
                    news.append(a)
            now = time.monotonic()
            news.sort(key=lambda a: self._waiting.setdefault(a.policy, now))
        return due + news[:STATUS_SPREAD]

    def _status_written(self, action: PatchStatus, error: str | None, seconds: float | None = None) -> None:
        if error:
            self._error("status", action.reason, error)
            return
        with self._said_lock:
            self._said[action.policy] = action.status
            self._waiting.pop(action.policy, None)
            if seconds is not None:  # written beside (not: said nothing new, or written in the reconcile)
                self._status_lags.append(seconds)
                self._status_lag = self._status_lag.observe(seconds)

    def status_lags(self) -> list[float]:
        """Seconds from the end of a reconcile to each of its statuses written beside, since the last call (the
        benchmark's look at the status queue)."""
        with self._said_lock:
            lags, self._status_lags = self._status_lags, []
        return lags

    def _execute(self, actions) -> None:
        statuses = self._statuses_due([a for a in actions if isinstance(a, PatchStatus)])
        if self._statuses is not None and not self._past_deadline():  # past it: left, and counted below
            self._statuses(statuses)
            statuses = []
        outcomes = self._in_parallel(statuses) + self._run([a for a in actions if not isinstance(a, PatchStatus)])
        self._note_left(outcomes)
        for o in outcomes:
            if o.skipped in (NOT_LEADER, PAST_DEADLINE):  # not written: counted once by the fence, or as left
                continue
            if isinstance(o.action, PatchStatus):
                self._status_written(o.action, o.error)
            elif o.error:
                self._error("events", o.action.reason, o.error)

    def _count(self, outcomes: list[Outcome], policies: list[PolicyObject]) -> dict[str, str]:
        """Preemption counters, and each policy's actuation failure: its target's, a ClusterQueue's it names, or an
        eviction made on its behalf."""
        failures: dict[str, str] = {}
        for o in outcomes:
            a = o.action
            if error := o.failure:
                self._error("preempt" if isinstance(a, Evict) else "actuate", getattr(a, "policy", a.reason), error)
                if isinstance(a, Scale):  # a condition's reason is a CamelCase word (the CRD's pattern)
                    failures[a.policy] = f"{'TargetMissing' if 'HTTP 404' in error else 'ScaleFailed'}: {error}"
                if isinstance(a, SetQuota):  # the slack lent there never reached it: said on each policy naming it
                    why = f"{'QueueMissing' if 'HTTP 404' in error else 'QuotaFailed'}: ClusterQueue {a.queue}: " \
                          f"{error}"
                    for p in policies:
                        if a.queue in (*p.spec.training_cluster_queues, p.spec.inference_cluster_queue):
                            failures.setdefault(p.key, why)
                if isinstance(a, Evict):  # the GPUs its reservation needs stay with training: said on that policy
                    failures.setdefault(a.policy, f"PreemptFailed: Workload {a.workload}: {error}")
            elif o.error:
                self._error("events", a.reason, o.error)
            if isinstance(a, Evict) and o.applied:
                self._preempted(a)
            elif isinstance(a, Evict) and o.failure:  # its answer lost (the deadline came first), it may yet land
                self._unsure[a.workload] = a
        return failures

    def _preempted(self, a: Evict) -> None:
        self._preemptions[a.kind] = self._preemptions.get(a.kind, 0) + 1
        self._lost[a.kind] = self._lost.get(a.kind, 0.0) + a.work_lost_seconds * a.gpus
        seconds, borrowed, preempted = self._team_seconds.get(a.queue, (0.0, 0.0, 0))
        self._team_seconds[a.queue] = (seconds, borrowed, preempted + 1)

    def _landed_late(self) -> None:
        """Evictions that failed may have landed since (an answer lost at the deadline, the host halted: it acts on
        the request once it runs again): one that did (the Workload stopped, carrying its plan's id, which no other
        write sets) is counted now, once; one whose Workload is gone or stopped by another plan is forgotten. A
        Workload still running is asked about again next time (a watch cache may not have seen the write land yet)."""
        if not self._unsure:
            return
        seen = {w.key: w for w in self.cluster.workloads()}
        for key, a in list(self._unsure.items()):
            w = seen.get(key)
            if w is not None and w.active:
                continue
            if w is not None and w.evicted_by_plan == a.plan_id and a.uid in (None, w.uid):
                log.info("the eviction of %s, whose answer was lost, landed: counted now", key)
                self._preempted(a)
            del self._unsure[key]

    # -- 5. report
    @staticmethod
    def _lent_in_place(step: StepPlan, outcomes: list[Outcome], after: View, held_there: Mapping[str, int]) -> int:
        """The slack lent to training now: the plan's, except where a training quota's write failed, whose queue
        holds what it held before (nothing, if it does not exist), but the inference pods it holds beyond what is lent
        (`held_there`)."""
        failed = {o.action.queue for o in outcomes if isinstance(o.action, SetQuota) and o.failure}
        return step.lent_gpus - sum(step.quotas[q] - max(after.quotas.get(q, 0) - held_there.get(q, 0), 0)
                                    for q in failed & step.quotas.keys())

    def _cohort_check(self, policies: list[PolicyObject]) -> CohortCheck:
        """What else lends GPUs to the training queues. A tree that cannot be read (a ClusterRole from before headroom
        read Cohorts, the server gone) is said on HeadroomAtRisk and counted, not a failed reconcile: the plan was
        applied, and every status and the plan summary are still written."""
        try:
            tree = self.cluster.cohort_tree()
        except ClusterError as exc:
            self._error("cluster", "the Cohorts and ClusterQueues", exc)
            fix = (": the controller's ClusterRole needs list and watch on cohorts.kueue.x-k8s.io "
                   "(deploy/base/rbac.yaml)" if exc.status == 403 else "")
            return CohortCheck(unreadable=f"the Cohorts and ClusterQueues could not be read ({exc}){fix}")
        return cohort_lenders(tree, training_queues(policies))

    def _reclaim_notes(self, policies: list[PolicyObject], cohorts: CohortCheck) -> list[RecordEvent]:
        """A ClusterQueue letting Kueue preempt a policy's training queues: a Warning (HeadroomAtRisk says it while
        nothing outranks it). A tree that could not be read changes nothing said."""
        if cohorts.unreadable:
            return []
        return self._say_once("CohortReclaims", [f for r in cohorts.reclaimers for f in r.findings()], policies,
                              "Warning")

    def _queue_notes(self, policies: list[PolicyObject], workloads: list[WorkloadInfo]) -> list[RecordEvent]:
        """A training queue in which Kueue itself may preempt Workloads for others of the queue, or that it takes
        strictly in order: for the record (Normal), since it is the team's own setting, within the quota headroom
        lends, and the reservation is as safe; but headroom's figures then leave those stops out, and a what-if not
        told of StrictFIFO admits otherwise. `workloads`: the reconcile's own read, after its writes. A read of the
        ClusterQueues that fails changes nothing said (the same ClusterQueues read for the Cohorts are counted
        there)."""
        queues = training_queues(policies)
        try:
            settings = self.cluster.within_queue_preemption()
            strict = self.cluster.strict_fifo_queues()
        except ClusterError:
            return []
        return (self._say_once("KueuePreemptsWithinQueue", within_queue_preemptors(settings, workloads, queues),
                               policies, "Normal")
                + self._say_once("KueueStrictFIFO", strict_fifo_notes(strict, queues), policies, "Normal"))

    def _say_once(self, reason: str, findings: list[tuple[str, str]], policies: list[PolicyObject],
                  kind: str) -> list[RecordEvent]:
        """Each finding (what to say, the training queue it is about): a log line (a warning beside a Warning Event),
        and an Event `reason` of type `kind` of its own on each policy of that queue (findings joined into one Event, or
        one finding of several queues, ran past the 1,024 characters an Event's message keeps), each when first seen,
        not every reconcile (a finding changed is a new one; a policy deleted and made again is a new object: told
        again)."""
        logged = self._logged.get(reason, set())
        for said, _ in findings:
            if said not in logged:
                log.log(logging.WARNING if kind == "Warning" else logging.INFO, "%s", said)
        self._logged[reason] = {said for said, _ in findings}
        told = self._told.setdefault(reason, {})
        notes = []
        for p in policies:
            mine = set(p.spec.training_cluster_queues)
            its = {said for said, queue in findings if queue in mine}
            notes += [RecordEvent(EventNote(p.ref, reason, said, kind))
                      for said in sorted(its - told.get(p.ref, set()))]
            told[p.ref] = its
        return notes

    @staticmethod
    def _headroom(step: StepPlan, view: View, policy: ClusterPolicy, lenders: CohortCheck,
                  forecast_only: list[PolicyObject] | None) -> tuple[int, int, int, Condition]:
        """The cluster's headroom now: (GPUs reclaimable within the deadline, the headroom band, GPUs the headroom
        quantile asks for, HeadroomAtRisk). A plan that does not act (every policy forecast-only: `forecast_only` names
        them) lends nothing and stops no training: no lent GPU must come back, no headroom is asked of what is lent,
        and what is reclaimable is only what is idle beside their targets as they are, not beside what they would
        reserve."""
        t = view.training
        if forecast_only is None:
            reserved = sum(w.reserved_gpus for w in step.workloads)
            preemptible = int(t.gpus[t.preempt_seconds <= policy.reclaim_deadline_seconds].sum())
            band, wanted, lent = step.headroom_gpus, sum(w.headroom_gpus for w in step.workloads), step.lent_gpus
        else:
            reserved = sum(_held_gpus(p.spec, view.targets.get(p.key), view.quotas) for p in forecast_only)
            preemptible, band, wanted, lent = 0, 0, 0, 0
        idle = max(policy.lendable - reserved - int(t.gpus.sum()) - t.terminating_gpus - t.serving_gpus, 0)
        return idle + preemptible, band, wanted, headroom_condition(idle + preemptible, band, wanted, lent, lenders)

    def _reports(self, planned: list[_Planned], view: View, failures, plan_id, now, states, reclaimable: int,
                 risk: Condition) -> list:
        actions: list[RecordEvent | PatchStatus] = []
        for i, ws, wh, w, lendable in planned:
            p = i.policy
            missing = self._missing.get(p.key) or f"{p.spec.target.kind} {p.spec.target.name} not found"
            failure = failures.get(p.key) or (f"TargetMissing: {missing}"
                                              if p.active and view.targets.get(p.key) is None
                                              and p.spec.target.kind != "ClusterQueue" else None)
            errors, coverage = self.forecasts.realized(p, i.forecast, i.raw, now) \
                if self._samples(p.key, i.raw).newest is not None else ({}, {})
            fallback = not ws.from_forecast
            degraded = i.degraded or i.fault
            conditions = (
                Condition("Ready", "False" if failure else "True",
                          reason_of(failure, "Failed") if failure else ("Active" if p.active else "ForecastOnly"),
                          failure or ""),
                Condition("ForecastDegraded", "True" if degraded else "False",
                          reason_of(degraded, "Degraded") if degraded else "DemandFresh",
                          "; ".join(timeless(x) for x in (i.degraded, i.fault) if x)),
                Condition("FallbackActive", "True" if fallback else "False",
                          "ConservativeReservation" if fallback else "ForecastInUse",
                          wh.reason(ws.period, w, lendable) if fallback else ""),
                policy_risk(risk))
            if failure and self._failed.get(p.ref) != failure:  # a new failure to act: one Warning event
                actions.append(RecordEvent(EventNote(p.ref, reason_of(failure, "Failed"), failure, "Warning")))
            self._failed[p.ref] = failure
            fault = timeless(i.fault or (i.degraded if fallback else None) or "") or None
            # a new kind of fault (its reason), not each new wording of the same outage: one Warning event
            said = self._faults.get(p.ref)
            if fault and (said is None or reason_of(said, "Degraded") != reason_of(fault, "Degraded")):
                actions.append(RecordEvent(EventNote(p.ref, "FallbackActive" if fallback else "ForecastDegraded",
                                                     f"{fault}; {ws.reason}", "Warning")))
            if fault:
                self._faults[p.ref] = fault
            else:
                self._faults.pop(p.ref, None)
            target = None
            if i.forecast is not None:
                f = Forecast.of(i.forecast.frame, p.spec.target_quantile, p.spec.headroom_quantile)
                k = int(np.searchsorted(f.starts, now.timestamp(), side="right") - 1)
                target = float(f.target[k]) if 0 <= k < len(f.target) and math.isfinite(f.target[k]) else None
            model = i.forecast.model if i.forecast is not None else "fallback"
            next_hours = tuple({"hour": pd.Timestamp(wh.starts[k], unit="s", tz="UTC").strftime("%Y-%m-%dT%H:%M:%SZ"),
                                "reservedGpus": int(wh.reserved[k]), "headroomGpus": int(wh.headroom[k])}
                               for k in range(min(STATUS_HOURS, len(wh.starts))))
            actions.append(PatchStatus(p.ref, PolicyStatus(
                reserved_gpus=ws.reserved_gpus, headroom_gpus=ws.headroom_gpus,
                conditions=conditions, plan_id=plan_id, forecast_demand=target, observed_generation=p.generation,
                model=model, next_hours=next_hours, realized_error={f"{h}h": v for h, v in errors.items()},
                holding=holding_said(p.spec), left=self._specs.left_said(p.ref))))
            latest = self._samples(p.key, i.raw).latest
            states[p.key] = PolicyState(
                p.key, p.spec.mode, True, None, now, wh, ws, i.forecast.frame if i.forecast is not None else None,
                model, latest if i.degraded is None else None,
                p.spec.capacity.demand_per_gpu, ws.reserved_gpus, ws.headroom_gpus, reclaimable, fallback,
                i.degraded is not None or i.fault is not None,
                (now - i.forecast.made_at).total_seconds() if i.forecast is not None else 0.0, errors, coverage)
        return actions

    def _record(self, planned: list[_Planned], targets: Mapping[str, TargetState | None], step: StepPlan, outcomes,
                now) -> None:
        """One timeline row per policy: what it observed (`targets`: read before the actions) and what the plan decided
        (the simulator's columns)."""
        applied = [o.action for o in outcomes if o.applied]
        assert self.timeline is not None  # _record runs only when a timeline is kept
        for i, ws, *_ in planned:
            p = i.policy
            state = targets.get(p.key)
            warm = state.ready_replicas * p.spec.capacity.gpus_per_replica if state is not None else 0
            demand = self._samples(p.key, i.raw).latest  # None: no sample in the lookback, a blank in the timeline
            self.timeline.append((now, p.key, math.nan if demand is None else demand / p.spec.capacity.demand_per_gpu,
                                  ws.reserved_gpus, warm,
                                  ws.headroom_gpus, step.lent_gpus, evicted_gpus(applied, p.key)))

    def _teams(self, view: View, policies: list[PolicyObject], lent_to: set[str], now: pd.Timestamp,
               held_there: Mapping[str, int]) -> dict[str, TeamState]:
        """Each team's training, of every queue `policies` name: its quota what is lent it (not the inference pods it
        holds beyond, `held_there`; a queue only forecast-only policies name, the quota it has), its GPU-seconds on
        lent capacity counted while its queue is `lent_to`."""
        # GPU-seconds since this replica's last reconcile, unless it stood by since (controller.loop publishes its
        # state with leader False): the replica that led meanwhile counted that time
        dt = (now - self._last_now).total_seconds() if self._last_now is not None and self.holder.get().leader \
            else 0.0
        self._last_now = now
        teams = {}
        t = view.training
        for q in sorted(training_queues(policies)):
            quota = max(int(view.quotas.get(q, 0)) - held_there.get(q, 0), 0)
            used = int(sum(g for g, tq in zip(t.gpus, t.queue) if tq == q))
            seconds, borrowed_seconds, preempted = self._team_seconds.get(q, (0.0, 0.0, 0))
            seconds, borrowed_seconds = seconds + used * dt, borrowed_seconds + max(used - quota, 0) * dt
            self._team_seconds[q] = (seconds, borrowed_seconds, preempted)
            on_lent_seconds = self._team_on_lent_seconds.get(q, 0.0) + (used * dt if q in lent_to else 0.0)
            self._team_on_lent_seconds[q] = on_lent_seconds
            teams[q] = TeamState(q, quota, used, max(used - quota, 0), max(quota - used, 0),
                                 seconds, borrowed_seconds, preempted, on_lent_seconds)
        return teams

