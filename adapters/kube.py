"""Kubernetes, thinly: the only module that imports `kubernetes`.

`KubeCluster` is core.cluster.Cluster on a real API server with Kueue (kueue.x-k8s.io/v1beta2, Kueue
>= v0.15): it reads ReservationPolicies, Kueue Workloads, LocalQueues, ClusterQueues and Cohorts, and the
policies' targets (Deployments, HPAs, ClusterQueues), and writes the few things headroom acts through:
ClusterQueue GPU quotas, Deployment scale / HPA minReplicas, Workload deactivation and reactivation,
ReservationPolicy status and Events. `LeaseElector` elects one active controller. No planning here.

Reads: with `watch()` started (what `headroom run` does), policies, Workloads, LocalQueues,
ClusterQueues and Cohorts are served from a watch cache (`Informer`: one LIST, then a WATCH from its
resourceVersion; re-LIST when the watch is too old (410) or the connection drops, e.g. an API server
restart; the cache also takes in the objects our own writes return, so a reconcile reads what it just
wrote). A cache that has heard nothing from the server for WATCH_SECONDS + WATCH_GRACE_SECONDS is stale: it is
not read (StaleCache) until a LIST succeeds. Without it every read is one LIST per resource, and a policy's target
one GET per read; within a reconcile (`snapshot`) each is read once and then served as read, with what the
reconcile wrote.

All requests go through one path (`_request`): JSON in, JSON out, over the `kubernetes` client's
configuration (kubeconfig / token / CA / TLS), with
  * a per-request timeout,
  * back-off and retry on 429 (no sooner than its Retry-After), 5xx, timeouts, connection errors and answers that
    are not JSON (a proxy's page, an answer cut short), and on a path not served (a plain 404) while the server is
    not ready or its discovery lists the resource (`_served_soon`); a write retried after its answer was lost (it may
    have landed) that meets 409 is our own write if the object holds every field it sent (`_landed`),
  * read-modify-write with the object's resourceVersion, re-read on 409,
  * no write when the object already has the wanted value (idempotent).
Errors surface as `ClusterError` with the HTTP status and the server's message.
"""
from __future__ import annotations

import copy
import json
import logging
import math
import os
import random
import secrets
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from core.cluster import FORECAST_SCALE as SCALE
from core.cluster import FORECAST_TAKEN_UP_BY
from core.deadline import current as current_deadline
from core.deadline import earliest
from core.errors import ClusterError, Conflict, Invalid, NotFound, NotInstalled, StaleCache, Unauthorized
from core.objects import (
    CONDITION_TYPES,
    GpuQuota,
    ObjectRef,
    PolicyStatus,
    QuotaNode,
    TargetRef,
    TargetState,
    WorkloadInfo,
    event_message,
)

log = logging.getLogger(__name__)

KUEUE_GROUP, KUEUE_VERSION = "kueue.x-k8s.io", "v1beta2"
HEADROOM_GROUP, HEADROOM_VERSION = "headroom.dev", "v1alpha1"
GPU_RESOURCE = "nvidia.com/gpu"
EVICTED_BY_PLAN = "headroom.dev/evicted-by-plan"
EVICTION_REASON = "headroom.dev/eviction-reason"
# What a training job declares so headroom knows how fast it can be taken back (Workload annotations).
PREEMPTION_SECONDS = "headroom.dev/preemption-seconds"        # checkpoint + termination time
CHECKPOINT_INTERVAL = "headroom.dev/checkpoint-interval-seconds"
LAST_CHECKPOINT = "headroom.dev/last-checkpoint"              # RFC 3339
# The GPUs headroom last lent a training ClusterQueue (its annotation): once no policy names the queue, the controller
# returns what it lent, a restarted one too
LENT_GPUS = "headroom.dev/lent-gpus"
LENT_FOR = "headroom.dev/lent-for-namespace"  # ...by a controller of that namespace's policies (none: every one's)
RETRYABLE_STATUS = {0, 429, 500, 502, 503, 504}
MERGE_PATCH = "application/merge-patch+json"
ADDRESS_SECONDS = 1.0  # how long the request headers (the token) are used before the client library makes them again
# The server ends each watch after WATCH_SECONDS (timeoutSeconds) and the cache opens it again, so a healthy watch is
# heard from (an event, a bookmark, its end, the next one opened; kube-apiserver 1.20 sends no bookmark on an idle
# watch, so its end is what is heard) at least that often, and every re-watch is authorized anew (a revoked RBAC
# role is met there). Silent for WATCH_GRACE_SECONDS longer, the server is gone (a halted host sends no reset): the
# read times out and the cache is stale (StaleCache) until a LIST succeeds.
WATCH_SECONDS = 60
WATCH_GRACE_SECONDS = 15
WATCH_BACKOFF_MAX_SECONDS = 30.0  # the longest a watch cache waits before it lists again after a failure
# A WATCH RBAC refuses (403; the LIST allowed) is said once, and the cache lists this often instead (polls) until a
# watch is allowed: no waiting makes the server allow it, and a warning every back-off would say nothing new.
POLL_SECONDS = 30.0
# Letting the Lease go on the way out: one attempt per request, this long each (two requests), so a controller asked
# to stop while the API server cannot answer ends well inside the pod's 30 s grace period; the Lease expires by itself.
RELEASE_TIMEOUT_SECONDS = 3.0
# An election round gives up after this share of the lease (client-go's RenewDeadline, 10 s of 15): a renewal that
# lands later is one the other replicas may already have taken over from, and a round waiting out every retry on a
# halted host (7 x the request timeout) would hold the writes fenced behind it.
RENEW_DEADLINE_SHARE = 2 / 3


def _now() -> datetime:
    return datetime.now(UTC)


def _rfc3339(moment: datetime, micro: bool = False) -> str:
    moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ")


def _parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _float(text: str | None) -> float | None:
    """An annotation's or header's number of seconds; a malformed one (not a number, or NaN, infinite or negative,
    which float() takes) counts as not given (a job then gets the defaults)."""
    try:
        value = float(text) if text is not None else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) and value >= 0 else None


def _retry_after(headers: Mapping, longest: float) -> float:
    """The seconds an answer's Retry-After asks the client to wait before it asks again (an API server over its
    max-in-flight answers 429 with Retry-After: 1), up to `longest`; 0 where it asks for none."""
    return min(_float(headers.get("Retry-After")) or 0.0, longest)


def _annotation_time(text: str | None) -> datetime | None:
    """An annotation's RFC 3339 time; a malformed one counts as not given (any team annotates its own Workloads: one
    bad value must not fail the read of every Workload); one without a zone is taken as UTC."""
    try:
        moment = _parse_time(text)
    except ValueError:
        return None
    return moment.replace(tzinfo=UTC) if moment is not None and moment.tzinfo is None else moment


def _quantity(value: Any) -> Decimal:
    from kubernetes.utils import parse_quantity
    return Decimal(parse_quantity(value))


def _rv(obj: Mapping) -> int | None:
    """An object's resourceVersion as a number (etcd's revision), None if it is not one."""
    text = (obj.get("metadata") or {}).get("resourceVersion") or ""
    return int(text) if text.isdigit() else None


def _holds(stored: Any, sent: Any) -> bool:
    """`stored` says everything `sent` says: each field sent is stored with the value sent (None, what a merge patch
    deletes a field with: absent); what the server added is not compared."""
    if isinstance(sent, dict):
        return isinstance(stored, dict) and all(
            stored.get(key) is None if value is None else key in stored and _holds(stored[key], value)
            for key, value in sent.items())
    return bool(stored == sent)


def _merge_patch(old: object, new: object) -> object:
    """The merge patch (RFC 7386) that turns `old` into `new`: a key `new` drops is removed (null), maps are patched
    key by key, anything else replaced."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return new
    return {**dict.fromkeys(old), **{key: _merge_patch(old.get(key), value) for key, value in new.items()}}


def _condition(obj: Mapping, type_: str) -> bool:
    return any(c.get("type") == type_ and c.get("status") == "True"
               for c in ((obj.get("status") or {}).get("conditions") or []))


def _pod_set_gpus(pod_set: Mapping, resource: str) -> Decimal:
    """count x the pod template's request of `resource` (a container's limit when it gives no request, as the
    API server defaults it; init containers count by their largest request, as the scheduler does)."""
    spec = (pod_set.get("template") or {}).get("spec") or {}

    def wanted(c: Mapping) -> Decimal:
        res = c.get("resources") or {}
        value = (res.get("requests") or {}).get(resource, (res.get("limits") or {}).get(resource, 0))
        return _quantity(value)

    per_pod = sum((wanted(c) for c in spec.get("containers") or []), Decimal(0))
    per_pod = max([per_pod, *(wanted(c) for c in spec.get("initContainers") or [])])
    return per_pod * int(pod_set.get("count", 1))


def workload_info(obj: dict, local_queues: Mapping[tuple[str, str], str] | None = None,
                  resource: str = GPU_RESOURCE) -> WorkloadInfo:
    """A Kueue v1beta2 Workload as the controller sees it.

    The ClusterQueue is the one it holds quota in (status.admission.clusterQueue) or, not admitted, the one
    its LocalQueue (spec.queueName, in its namespace) points to (`local_queues`: (namespace, name) -> the
    LocalQueue's spec.clusterQueue). Admitted: status.admission is set (quota reserved) and it has not
    finished. GPUs: what the admission assigned (podSetAssignments[].resourceUsage), else what the pod
    templates ask for."""
    meta, spec, status = obj.get("metadata", {}), obj.get("spec", {}) or {}, obj.get("status", {}) or {}
    annotations = meta.get("annotations") or {}
    namespace = meta.get("namespace", "")
    admission = status.get("admission") or None
    finished = _condition(obj, "Finished")
    queue = spec.get("queueName") or None
    gpus = Decimal(0)
    assigned = (admission or {}).get("podSetAssignments") or []
    if assigned and any(resource in (a.get("resourceUsage") or {}) for a in assigned):
        gpus = sum((_quantity((a.get("resourceUsage") or {}).get(resource, 0)) for a in assigned), Decimal(0))
    else:
        gpus = sum((_pod_set_gpus(p, resource) for p in spec.get("podSets") or []), Decimal(0))
    cluster_queue = (admission or {}).get("clusterQueue") or (local_queues or {}).get((namespace, queue or ""))
    ref = spec.get("priorityClassRef") or {}
    return WorkloadInfo(namespace=namespace, name=meta["name"], local_queue=queue, cluster_queue=cluster_queue,
                        admitted=admission is not None and not finished, active=spec.get("active", True) is not False,
                        priority=int(spec.get("priority", 0) or 0), creation=_parse_time(meta.get("creationTimestamp")),
                        gpus=int(gpus), uid=meta.get("uid"), priority_class=ref.get("name"), finished=finished,
                        evicted=_condition(obj, "Evicted"),
                        evicted_by_plan=annotations.get(EVICTED_BY_PLAN),
                        preemption_seconds=_float(annotations.get(PREEMPTION_SECONDS)),
                        checkpoint_interval_seconds=_float(annotations.get(CHECKPOINT_INTERVAL)),
                        last_checkpoint=_annotation_time(annotations.get(LAST_CHECKPOINT)))


def _owner_pod(obj: Mapping) -> tuple[str, str] | None:
    """The Pod a Workload runs, (name, uid), where Kueue's pod integration made it (owned by its Pod, or by each Pod
    of a pod group); None for a Job's or any other kind's."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("apiVersion") == "v1" and ref.get("kind") == "Pod" and ref.get("name"):
            return ref["name"], str(ref.get("uid") or "")
    return None


def _pod_key(namespace: str, pod: tuple[str, str]) -> str:
    """A Workload's Pod (_owner_pod) in `namespace`, as KubeCluster keeps what it read of it: its uid, else its
    namespace/name."""
    return pod[1] or f"{namespace}/{pod[0]}"


def _pod_deployment(pod: Mapping) -> str | None:
    """The Deployment a Pod is of: its ReplicaSet is named `<deployment>-<pod-template-hash>` (the Deployment
    controller names it so, and labels its Pods with the hash); None for a Pod of anything else."""
    meta = pod.get("metadata") or {}
    template_hash = (meta.get("labels") or {}).get("pod-template-hash")
    for ref in meta.get("ownerReferences") or []:
        name = str(ref.get("name") or "")
        if ref.get("apiVersion") == "apps/v1" and ref.get("kind") == "ReplicaSet" and template_hash \
                and name.endswith(f"-{template_hash}"):
            return name[: -len(template_hash) - 1]
    return None


def _quotas_of(cq: Mapping, resource: str) -> list[tuple[str, Mapping]]:
    """A ClusterQueue's (or Cohort's) quota entries for `resource`, one per flavor that covers it: (flavor, entry)."""
    return [(str(flavor.get("name")), r) for group in (cq.get("spec") or {}).get("resourceGroups") or []
            for flavor in group.get("flavors") or [] for r in flavor.get("resources") or []
            if r.get("name") == resource]


def gpu_quota(cq: Mapping, resource: str = GPU_RESOURCE) -> int | None:
    """A ClusterQueue's nominalQuota of `resource`, summed over its flavors; None if it covers none."""
    found = [r.get("nominalQuota", 0) for _, r in _quotas_of(cq, resource)]
    return int(sum((_quantity(q) for q in found), Decimal(0))) if found else None


def quota_node(obj: Mapping, kind: str, resource: str = GPU_RESOURCE) -> QuotaNode:
    """A Kueue v1beta2 ClusterQueue or Cohort (`kind`) as a node of its cohort tree, its quota of `resource` by
    flavor. A fraction of a GPU counts as a whole one: any part of one lent is lending."""
    def gpus(value: Any) -> int:
        return math.ceil(_quantity(value))

    def limit(value: Any) -> int | None:
        return None if value is None else gpus(value)

    spec = obj.get("spec") or {}
    parent = spec.get("cohortName") if kind == "ClusterQueue" else spec.get("parentName")
    return QuotaNode(kind, obj["metadata"]["name"], str(parent) if parent else None,
                     {flavor: GpuQuota(gpus(r.get("nominalQuota", 0)), limit(r.get("borrowingLimit")),
                                       limit(r.get("lendingLimit")))
                      for flavor, r in _quotas_of(obj, resource)},
                     _reclaims(spec) if kind == "ClusterQueue" else None)


def _reclaims(spec: Mapping) -> str | None:
    """A ClusterQueue's preemption setting that lets Kueue preempt other queues' Workloads of its tree of Cohorts, as
    "field: value": reclaimWithinCohort (Never, Kueue's default, when unset), else borrowWithinCohort.policy (Kueue
    allows it only beside a reclaimWithinCohort other than Never; said should a server not check that)."""
    preemption = spec.get("preemption") or {}
    reclaim = preemption.get("reclaimWithinCohort") or "Never"
    borrow = (preemption.get("borrowWithinCohort") or {}).get("policy") or "Never"
    if reclaim != "Never":
        return f"spec.preemption.reclaimWithinCohort: {reclaim}"
    return f"spec.preemption.borrowWithinCohort.policy: {borrow}" if borrow != "Never" else None


class _Snapshot:
    """What one reconcile has read with no watch cache to serve it (KubeCluster.snapshot): each resource listed at most
    once and each target got at most once, then served as read, with the objects this client's writes return put in (a
    reconcile reads what it wrote). Held by cache name (WATCHED's, _target_cache's), then (namespace, name); a resource
    listed holds all its objects, a target cache only those got (None: not found)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, dict[tuple[str, str], dict | None]] = {}
        self._listed: set[str] = set()

    def listing(self, name: str) -> list[dict] | None:
        """The resource's objects as listed in this reconcile (None: not listed yet)."""
        with self._lock:
            return [o for o in self._held[name].values() if o is not None] if name in self._listed else None

    def listed(self, name: str, items: list[dict]) -> list[dict]:
        """Hold a LIST's `items`; the first LIST held stands (a second, made beside it, is no newer than the writes
        put in since)."""
        with self._lock:
            if name not in self._listed:
                self._held[name] = {Informer.key(o): o for o in items}
                self._listed.add(name)
        return self.listing(name) or []

    def read(self, name: str, key: tuple[str, str]) -> tuple[bool, dict | None]:
        """(whether the object was read in this reconcile, the object: None if not found)."""
        with self._lock:
            held = self._held.get(name, {})
            return (name in self._listed or key in held), held.get(key)

    def got(self, name: str, key: tuple[str, str], obj: dict | None) -> dict | None:
        """Hold one object got (None: not found); the first held stands."""
        with self._lock:
            return self._held.setdefault(name, {}).setdefault(key, obj)

    def put(self, name: str, obj: dict) -> None:
        """An object this client wrote, kept where its resource was read, unless what is held is newer."""
        key = Informer.key(obj)
        with self._lock:
            held = self._held.get(name)
            if held is None or (name not in self._listed and key not in held):
                return  # not read: a read lists or gets it, the write in it
            old = held.get(key)
            if old is None or (_rv(old) or 0) <= (_rv(obj) or 0):
                held[key] = obj


def _answer(data: bytes | str) -> tuple[Any, str]:
    """An error answer's body: (its JSON, None if it is none; what the server says: a Status's message, else the
    text)."""
    text = data.decode(errors="replace") if isinstance(data, bytes) else str(data)
    try:
        payload = json.loads(text)
    except ValueError:
        payload = None
    return payload, payload.get("message", text) if isinstance(payload, dict) else text


class _Gone(Exception):
    """The watch's resourceVersion is too old (410): list again."""


class _WatchRefused(ClusterError):
    """The API server answered a WATCH with an error; `retry_after`: the seconds it asked the client to wait first
    (its Retry-After, a 429's), 0 where it asked for none."""

    def __init__(self, message: str, status: int, retry_after: float):
        super().__init__(message, status=status)
        self.retry_after = retry_after


class Informer:
    """One resource kept in memory: LIST, then WATCH from the list's resourceVersion, in a daemon thread.

    The watch is re-opened from the last resourceVersion seen when the server ends it, or answers it is too busy
    (429: after its Retry-After); the resource is listed again when the server says that version is gone (410) or
    the connection fails (an API server restart), with back-off; a WATCH RBAC refuses (403, the LIST allowed) is said
    once, and the resource listed every `poll_seconds` instead until a watch is allowed; an API not installed (its
    CRD deleted: Kueue uninstalled) is said once too, as its reads say it, and listed again with back-off until it is
    served. A cache that has heard nothing from the server for `watch_seconds + grace_seconds` is stale: readers list
    again, and are refused (StaleCache) if that fails too. Events not newer than the last LIST, or than the object
    already held (one our own write put there), are ignored, so a late event never takes an object back in time.
    Until the first LIST has succeeded, `items()` is None and readers fall back to a LIST of their own. While the
    watch is broken or stale, readers first `catch_up()`: the server may be back long before the thread's next
    try."""

    def __init__(self, cluster: KubeCluster, path: str, watch_seconds: int = WATCH_SECONDS,
                 grace_seconds: float = WATCH_GRACE_SECONDS, resync_seconds: float = 600.0,
                 poll_seconds: float = POLL_SECONDS):
        self.cluster, self.path = cluster, path
        self.watch_seconds, self.resync_seconds, self.poll_seconds = watch_seconds, resync_seconds, poll_seconds
        self.stale_after = watch_seconds + grace_seconds  # silent this long: the server is gone (WATCH_SECONDS)
        self._heard = time.monotonic()     # when the server last answered: a LIST, a watch opened, a line, its end
        self._items: dict[tuple[str, str], dict] = {}
        self._floor: int | None = None     # resourceVersion of the last LIST
        self._version = ""                 # where the watch resumes
        self._synced = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._response = None
        self.lists = 0                     # LISTs made (tests and logs: one at start, one per resync)
        self.connected = False
        # a failure only a change to the cluster ends (RBAC that refuses the WATCH, an API not installed), warned
        # once: (the warning, what is said once a watch streams again); None while none lasts
        self._outage: tuple[str, str] | None = None
        self._caught_up = 0.0              # when a reader last listed while the watch was broken (catch_up)
        self.refused: ClusterError | None = None  # a LIST refused (403: RBAC revoked), until a LIST succeeds

    @staticmethod
    def key(obj: Mapping) -> tuple[str, str]:
        meta = obj.get("metadata") or {}
        return meta.get("namespace") or "", meta.get("name") or ""

    # -- reads
    def items(self) -> list[dict] | None:
        with self._lock:
            return list(self._items.values()) if self._synced else None

    def get(self, key: tuple[str, str], copied: bool = False) -> dict | None:
        """One object held (None: not held, or not listed yet); read-only unless `copied` (a deep copy)."""
        with self._lock:
            held = self._items.get(key) if self._synced else None
        return copy.deepcopy(held) if held is not None and copied else held

    def synced(self) -> bool:
        return self._synced

    def silent_for(self) -> float:
        """Seconds since the server was last heard from."""
        return time.monotonic() - self._heard

    def catch_up(self, every: float = 1.0) -> None:
        """While the watch is broken (an API server restart: the thread lists again only after its back-off, up to
        30 s) or silent past `stale_after` (a halted host): LIST now, one attempt, at most once every `every` seconds,
        so a reconcile reads what the server holds and not what it held before the outage. A refusal (403 once the
        controller's RBAC is revoked, 404) is raised, and again until a LIST succeeds. If the server cannot answer,
        what is held is served while it is fresh (nothing can be written either: the writes say so) and refused once
        it is stale (StaleCache). Nothing while the watch streams."""
        if (self.connected and self.silent_for() <= self.stale_after) or not self._synced:
            return
        now = time.monotonic()
        with self._lock:
            listed_just_now = now - self._caught_up < every
            if not listed_just_now:
                self._caught_up = now
        if listed_just_now:
            failure = "a LIST a moment ago failed"
        else:
            try:
                self.relist(retries=0)
                return
            except ClusterError as exc:
                if exc.status not in RETRYABLE_STATUS:  # the server's answer, which no waiting changes
                    raise
                failure = f"a LIST failed too: {exc}"
        refused = self.refused
        if refused is not None:  # a fresh exception: one raised again and again keeps every traceback
            raise ClusterError(str(refused), status=refused.status, reason=refused.reason, body=refused.body)
        silent = self.silent_for()
        if silent > self.stale_after:
            raise StaleCache(f"watch cache {self.path}: nothing heard from the API server for {silent:.0f} s "
                             f"(stale after {self.stale_after:.0f} s) and {failure}; not read")
        if not listed_just_now:
            log.info("%s: its watch is broken and %s; serving what was held", self.path, failure)

    # -- feeding
    def put(self, obj: Mapping, deleted: bool = False) -> None:
        """An object seen in an event or returned by a write: kept unless what is held is newer."""
        rv = _rv(obj)
        with self._lock:
            if rv is not None and self._floor is not None and rv <= self._floor:
                return
            key = self.key(obj)
            held = self._items.get(key)
            if held is not None and rv is not None and (_rv(held) or 0) > rv:
                return
            if deleted:
                if held is None or (held.get("metadata") or {}).get("uid") == (obj.get("metadata") or {}).get("uid"):
                    self._items.pop(key, None)
            else:
                self._items[key] = dict(obj)

    def relist(self, retries: int | None = None) -> str:
        """LIST now and replace what is held (synchronously; the watch goes on from where it was), unless what is
        held was listed later (a reader's LIST and the thread's crossed); returns the list's resourceVersion."""
        try:
            listing = self.cluster._request("GET", self.path, retries=retries)
        except NotInstalled:  # its CRD deleted (Kueue uninstalled; _request's word for a plain 404 on its path):
            # nothing held is true any more; reads LIST, and say so
            with self._lock:
                self._items, self._floor, self._synced = {}, None, False
            raise
        except ClusterError as exc:
            if exc.status not in RETRYABLE_STATUS:
                self.refused = exc
            raise
        version = (listing.get("metadata") or {}).get("resourceVersion") or ""
        self._heard, self.refused = time.monotonic(), None
        with self._lock:
            floor = int(version) if version.isdigit() else None
            if not (self._synced and floor is not None and self._floor is not None and floor < self._floor):
                self._items, self._floor, self._synced = {self.key(o): o for o in listing.get("items", [])}, floor, True
        self.lists += 1
        return version

    # -- the thread
    def start(self) -> Informer:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"informer {self.path}", daemon=True)
            self._thread.start()
        return self

    def stop(self, wait: float = 5.0) -> None:
        """Stop the thread, waiting up to `wait` seconds for it to end (a LIST in flight ends with its attempt)."""
        self._stop.set()
        response = self._response
        if response is not None:
            try:
                response.response.shutdown()  # unblock a read waiting on the stream
            except Exception:  # noqa: BLE001 - best effort on the way out
                pass
        if self._thread is not None and wait > 0:
            self._thread.join(wait)

    def _run(self) -> None:
        delay = 0.2
        listed: float | None = None  # when the resource was last listed; None: list it before the next watch
        while not self._stop.is_set():
            try:
                if listed is None or time.monotonic() - listed >= self.resync_seconds:
                    self._version = self.relist()
                    listed = time.monotonic()
                self._watch()
                delay = 0.2  # a watch that ran its course: the connection is sound
            except _Gone:
                listed = None
                log.info("watch %s: resourceVersion %s too old; listing again", self.path, self._version)
            except Exception as exc:  # noqa: BLE001 - the server went away (or refused): list again after a pause
                if self.connected:  # the watch had been streaming: a fresh failure, start the back-off over
                    delay = 0.2
                self.connected = False
                if self._stop.is_set():
                    break
                refused = exc if isinstance(exc, _WatchRefused) else None
                # a WATCH the server is too busy for (429) is opened again from where it was, as client-go does: a
                # LIST of everything would only add to its load (a version it no longer keeps: 410, listed then)
                busy = refused is not None and refused.status == 429 and bool(self._version)
                if not busy:
                    listed = None
                if refused is not None and refused.status == 403:  # RBAC lets the controller list, not watch: it polls
                    self._lasting(f"{exc}; polling instead: listing every {self.poll_seconds:g} s until a watch is "
                                  "allowed", "allowed now: streaming again, polling ended")
                    self._stop.wait(self.poll_seconds)
                    continue
                wait = max(delay, refused.retry_after if refused is not None else 0.0)
                if isinstance(exc, NotInstalled):  # its CRD deleted (Kueue uninstalled): it may be installed again
                    self._lasting(f"watch {self.path}: {exc}; listing again, at most {WATCH_BACKOFF_MAX_SECONDS:g} s "
                                  "apart, until it is served", "served again: streaming again")
                else:  # a failure of the moment (the server restarting): each said; a lasting one after it said anew
                    self._outage = None
                    again = f"watching again from resourceVersion {self._version}" if busy else "listing again"
                    log.warning("watch %s: %s; %s in %.1f s", self.path, exc, again, wait)
                self._stop.wait(wait)
                delay = min(delay * 2, WATCH_BACKOFF_MAX_SECONDS)

    def _lasting(self, warning: str, ended: str) -> None:
        """Warn of a failure that lasts until the cluster is changed (its RBAC, its CRDs) once: when it begins, or
        follows another; the same warning again at each back-off would say nothing new. `ended` is said once a
        watch streams again."""
        if self._outage is None or self._outage[0] != warning:
            log.warning("%s", warning)
        self._outage = (warning, ended)

    def _watch(self) -> None:
        query = {"watch": "1", "resourceVersion": self._version, "allowWatchBookmarks": "true",
                 "timeoutSeconds": str(self.watch_seconds)}
        host, headers = self.cluster._address()
        response = self.cluster.api_client.call_api(
            "GET", f"{host}{self.path}?{urllib.parse.urlencode(query)}", header_params=dict(headers),
            _request_timeout=(self.cluster.request_timeout, self.stale_after))
        if response.status == 410:
            raise _Gone()
        if response.status != 200:  # a 403 names the verb and resource RBAC lacks: said whole, as _request says it
            payload, message = _answer(response.response.data)
            not_installed = _not_installed_error(self.path, response.status, payload)
            if not_installed is not None:  # its CRD deleted: said as the reads say it
                raise not_installed
            # a 429 says when to come back (Retry-After): not sooner, as every request (_request)
            raise _WatchRefused(f"WATCH {self.path}: HTTP {response.status}: {message}", response.status,
                                _retry_after(response.headers, WATCH_BACKOFF_MAX_SECONDS))
        self._response = response
        self.connected, self._heard = True, time.monotonic()
        if self._outage is not None:
            log.info("watch %s: %s", self.path, self._outage[1])
            self._outage = None
        try:
            buffer = b""
            for chunk in response.response.stream(65536, decode_content=True):
                if self._stop.is_set():
                    return
                self._heard = time.monotonic()
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        self._event(json.loads(line))
            self._heard = time.monotonic()  # the server ended it (timeoutSeconds): it is there
        finally:
            self._response = None
            response.response.release_conn()

    def _event(self, event: dict) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise _Gone()
            raise ClusterError(f"WATCH {self.path}: {obj.get('message', obj)}", status=obj.get("code") or 0)
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if version:
            self._version = version
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            self.put(obj, deleted=kind == "DELETED")


# The resources headroom reads as a whole, each one LIST (or one watch cache), cluster-wide.
def _kueue(plural: str) -> str:
    return f"/apis/{KUEUE_GROUP}/{KUEUE_VERSION}/{plural}"


WATCHED = {"reservationpolicies": f"/apis/{HEADROOM_GROUP}/{HEADROOM_VERSION}/reservationpolicies",
           "workloads": _kueue("workloads"), "localqueues": _kueue("localqueues"),
           "clusterqueues": _kueue("clusterqueues"), "cohorts": _kueue("cohorts")}
# Who serves them, and how to install it: what a 404 on one of them names.
_INSTALL = {
    HEADROOM_GROUP: f"headroom's CRD ({HEADROOM_GROUP}/{HEADROOM_VERSION} ReservationPolicy) is not installed: "
                    "kubectl apply --server-side -f deploy/crds/headroom.dev_reservationpolicies.yaml (docs/deploy.md)",
    KUEUE_GROUP: f"Kueue's {KUEUE_VERSION} API ({KUEUE_GROUP}/{KUEUE_VERSION}) is not installed: install Kueue v0.15 "
                 "or later with its CRDs (https://kueue.sigs.k8s.io/docs/installation/); an older Kueue serves "
                 "v1beta1 only (docs/deploy.md, Kueue versions)"}


UNAUTHORIZED = ("the API server refused this client's credentials (HTTP 401 Unauthorized): the token or certificate of "
                "the kubeconfig's user (--kubeconfig, run.kubeconfig, $KUBECONFIG; a pod's ServiceAccount with "
                "--in-cluster) is not one it accepts: expired, revoked or another cluster's")

# Kueue before v0.15 serves v1beta1 alone: installed, but too old.
_KUEUE_TOO_OLD = (f"Kueue is installed but serves only {KUEUE_GROUP}/v1beta1 (a release before v0.15): upgrade to "
                  f"Kueue v0.15 or later, which serves {KUEUE_GROUP}/{KUEUE_VERSION} (docs/deploy.md, Kueue versions)")


def _installable(path: str) -> tuple[str, str] | None:
    """(API group, resource plural) of a request path in an API `_INSTALL` says how to install (headroom's CRD,
    Kueue's); None for a path of any other API, or one that names no resource."""
    api = _api_of(path)
    if api is None or api[1] is None or not api[0].startswith("/apis/"):
        return None
    group = api[0].split("/")[2]
    return (group, api[1]) if group in _INSTALL else None


def _unserved(status: int, payload: Any) -> bool:
    """Whether an answer is a plain 404, the path not served (a missing object's 404 is a Status, reason NotFound)."""
    return status == 404 and not (isinstance(payload, dict) and payload.get("kind") == "Status")


def _not_installed_error(path: str, status: int, payload: Any) -> NotInstalled | None:
    """NotInstalled, naming what to install, for a plain 404 on a path of headroom's or Kueue's API (its CRD not
    installed, or deleted under the controller); None for any other answer."""
    if not _unserved(status, payload) or _installable(path) is None:
        return None
    return NotInstalled(_not_installed([path]), status=status, body=payload)


def _not_installed(paths: list[str], old_kueue: bool = False) -> str:
    """What a plain 404 (the path not served) on these paths, each `_installable`, means: one sentence per API not
    served, saying how to install it (or, for a Kueue that serves v1beta1 alone, `old_kueue`, to upgrade it)."""
    groups: dict[str, list[str]] = {}  # API group -> its plurals not served, in the paths' order
    for group, plural in filter(None, map(_installable, paths)):
        groups.setdefault(group, []).append(plural)
    return "; ".join(f"the API server does not serve {', '.join(plurals)}: "
                     f"{_KUEUE_TOO_OLD if group == KUEUE_GROUP and old_kueue else _INSTALL[group]}"
                     for group, plurals in groups.items())


def _api_of(path: str) -> tuple[str, str | None] | None:
    """The discovery document of the API group/version a request path is in ("/apis/GROUP/VERSION", "/api/v1") and
    the resource's plural in it (None: the path is that document); None for a path in no API group (/readyz)."""
    parts = path.split("?")[0].strip("/").split("/")
    size = {"api": 2, "apis": 3}.get(parts[0])
    if size is None or len(parts) < size:
        return None
    rest = parts[size:]
    if len(rest) >= 3 and rest[0] == "namespaces":  # a namespaced resource's (a namespace's own path is not)
        rest = rest[2:]
    return "/" + "/".join(parts[:size]), rest[0] if rest else None


# A written object's (group, kind) -> the cache it belongs in.
_CACHED_KINDS = {(HEADROOM_GROUP, "ReservationPolicy"): "reservationpolicies", (KUEUE_GROUP, "Workload"): "workloads",
                 (KUEUE_GROUP, "LocalQueue"): "localqueues", (KUEUE_GROUP, "ClusterQueue"): "clusterqueues"}
# Policy targets, watched per namespace (the namespaces the policies' targets are in): kind -> (API group, plural).
_TARGET_APIS = {"Deployment": ("apps/v1", "deployments"),
                "HorizontalPodAutoscaler": ("autoscaling/v1", "horizontalpodautoscalers")}


def _target_path(kind: str, namespace: str, name: str = "") -> str:
    group, plural = _TARGET_APIS[kind]
    return f"/apis/{group}/namespaces/{namespace}/{plural}" + (f"/{name}" if name else "")


def _target_cache(kind: str, namespace: str | None) -> str:
    """The name of the watch cache holding `kind`'s objects of `namespace`."""
    return f"{_TARGET_APIS[kind][1]}@{namespace}"


STATUS_REFRESH_SECONDS = 3600.0  # an unchanged policy status is rewritten (lastPlanTime) at most this often
PLAN_SUMMARY = "headroom-plan"  # the ConfigMap, beside the Lease, holding the plan's cluster-wide numbers


@dataclass
class KubeCluster:
    """The real cluster behind core.cluster.Cluster."""
    writes_side_by_side = True  # the API server takes them in any order; Kueue schedules apart, asynchronously
    api_client: Any  # kubernetes.client.ApiClient
    field_manager: str = "headroom"
    request_timeout: float = 10.0
    retries: int = 6            # attempts after the first, on 429/5xx/timeouts/connection errors
    backoff_base: float = 0.2   # seconds; doubles per attempt, with jitter
    backoff_max: float = 5.0
    conflict_retries: int = 5
    resource: str = GPU_RESOURCE
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)
    # set once the controller is asked to stop: no request is retried from then on, so it ends within seconds
    stopping: threading.Event = field(default_factory=threading.Event, repr=False)
    informers: dict[str, Informer] = field(default_factory=dict, repr=False)
    _watching: bool = field(default=False, repr=False)
    _informer_settings: dict = field(default_factory=dict, repr=False)
    _informers_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    # (when made, the server's address, the headers every request carries): see _address
    _address_made: tuple[float, str, dict] | None = field(default=None, repr=False)
    # requests sent (each attempt), by method: what a reconcile costs the API server (watch streams not counted)
    requests: dict[str, int] = field(default_factory=dict, repr=False)
    # each Workload as last read, by (namespace, name): (resourceVersion, its LocalQueue's ClusterQueue, the info)
    _workload_infos: dict[tuple[str, str], tuple[Any, Any, WorkloadInfo]] = field(default_factory=dict, repr=False)
    # the Deployment of each Pod a Workload runs, by the Pod's uid (a Pod's owner never changes): read once
    _pod_deployments: dict[str, str | None] = field(default_factory=dict, repr=False)
    # what the reconcile under way has read where no watch cache serves it (snapshot); None: outside a reconcile
    _snapshot: _Snapshot | None = field(default=None, repr=False)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_kubeconfig(cls, path: str | None = None, context: str | None = None, requests_at_once: int | None = None,
                        **kwargs) -> KubeCluster:
        from kubernetes import client, config
        configuration = client.Configuration()
        # no path: $KUBECONFIG as it is now, as kubectl reads it (the client read it once, at import), else the
        # client's ~/.kube/config; the error names the file that was read
        from_env = os.environ.get("KUBECONFIG") if path is None else None
        path = path or from_env or None
        named = f"{path} ($KUBECONFIG)" if from_env else path or "~/.kube/config"
        if from_env and not any(os.path.isfile(os.path.expanduser(p)) for p in from_env.split(os.pathsep) if p):
            # the client says "Invalid kube-config file. No configuration found." of a file that is not there
            raise ClusterError(f"cannot load kubeconfig {named}: no such file (set KUBECONFIG to the kubeconfig's "
                               "path, or give --kubeconfig)")
        try:
            config.load_kube_config(config_file=path, context=context, client_configuration=configuration)
        except (config.ConfigException, OSError) as exc:
            raise ClusterError(f"cannot load kubeconfig {named}: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - the client's loader fails on a file that is no kubeconfig in many
            # ways, each a traceback: a YAML error, a TypeError on text or a list, a RecursionError on deep nesting
            raise ClusterError(f"cannot load kubeconfig {named}: not a kubeconfig (YAML with "
                               f"clusters, contexts and users): {type(exc).__name__}: {str(exc)[:300]}") from None
        return cls(cls._api_client(configuration, requests_at_once), **kwargs)

    @classmethod
    def in_cluster(cls, requests_at_once: int | None = None, **kwargs) -> KubeCluster:
        from kubernetes import client, config
        configuration = client.Configuration()
        try:
            config.load_incluster_config(client_configuration=configuration)
        except config.ConfigException as exc:
            raise ClusterError(f"not running in a Kubernetes pod (no service account credentials): {exc}") from None
        return cls(cls._api_client(configuration, requests_at_once), **kwargs)

    @classmethod
    def from_token(cls, host: str, token: str, ca_file: str | None = None,
                   verify_ssl: bool = True, requests_at_once: int | None = None, **kwargs) -> KubeCluster:
        from kubernetes import client
        configuration = client.Configuration(host=host)
        configuration.api_key = {"BearerToken": token}
        configuration.api_key_prefix = {"BearerToken": "Bearer"}
        configuration.verify_ssl = verify_ssl
        if ca_file:
            configuration.ssl_ca_cert = ca_file
        return cls(cls._api_client(configuration, requests_at_once), **kwargs)

    @staticmethod
    def _api_client(configuration, requests_at_once: int | None):
        """`requests_at_once`: the most requests its users make at once beside the watch caches' streams; the
        connection pool keeps a connection for each, and for each watch (None: the client's default, 5 a CPU: 10 on
        a 2-core node, where a controller's connections past it were closed as they came back, each with a warning,
        and opened anew)."""
        from kubernetes import client
        configuration.retries = 0  # our back-off decides, not urllib3's silent immediate retries
        if requests_at_once is not None:
            configuration.connection_pool_maxsize = requests_at_once + len(WATCHED)
        return client.ApiClient(configuration)

    def close(self) -> None:
        self._watching = False
        self.stopping.set()  # no request is retried from now on (a watch cache's LIST on a halted host)
        informers = list(self.informers.values())
        for informer in informers:  # all asked at once, then waited for together: 5 s in all, not 5 s each
            informer.stop(wait=0)
        end = time.monotonic() + 5
        for informer in informers:
            informer.stop(wait=max(end - time.monotonic(), 0.001))
        self.informers.clear()
        self.api_client.close()

    # ------------------------------------------------------------------ the watch cache
    def watch(self, timeout: float = 30.0, **informer_settings) -> KubeCluster:
        """Serve the policies, Workloads, LocalQueues, ClusterQueues and Cohorts from watch caches (started here;
        waits up to `timeout` for their first LIST, not for one the server refused, then reads fall back to LISTs
        until it arrives). NotInstalled first, and nothing started, if the API server does not serve one of them
        (Kueue's API or headroom's CRD missing: a watch cache that could never fill). A server that did not answer
        is not waited for: the reads list until the caches fill."""
        answered = self.check_served()
        self._watching, self._informer_settings = True, dict(informer_settings)
        for name, path in WATCHED.items():
            if name not in self.informers:
                self.informers[name] = Informer(self, path, **informer_settings).start()
        deadline = time.monotonic() + (timeout if answered else 0)
        # a cache whose LIST the server refused (403: a ClusterRole without one of them) cannot fill by waiting; its
        # reads say so, and the controller goes on without what it holds
        while any(i.items() is None and i.refused is None for i in self.informers.values()) and \
                time.monotonic() < deadline:
            time.sleep(0.05)
        return self

    def check_served(self) -> bool:
        """NotInstalled, naming what to install, if the API server does not serve (404) one of the resources headroom
        reads as a whole: one small LIST of each, one attempt; Unauthorized if it accepts none of this client's
        requests (401). A server that cannot be reached, or refuses a LIST
        (403), is not judged here: the reads say so later, and the controller copes with a server down as it always
        does. False if the server did not answer (a halted host would hold each retry for the request timeout)."""
        missing = []
        for path in WATCHED.values():
            try:
                self._request("GET", path, query={"limit": "1"}, retries=0)
            except NotInstalled:
                missing.append(path)
            except ClusterError as exc:
                if exc.status == 401:  # not one request would be answered: said now, not as a Lease unreadable
                    raise Unauthorized(UNAUTHORIZED, status=401) from None
                if exc.status == 0 or exc.status >= 500:  # the server down: not asked again
                    return False
        if missing:
            raise NotInstalled(_not_installed(missing, self._serves(f"/apis/{KUEUE_GROUP}/v1beta1")), status=404)
        return True

    def _serves(self, group_version: str) -> bool:
        """The API server serves this group/version (its discovery document answers)."""
        try:
            self._request("GET", group_version)
            return True
        except ClusterError:
            return False

    def sync(self) -> None:
        """Bring every watch cache up to the server's state now (one LIST each; nothing without `watch()`): after
        changes made by someone else that the next read must see at once (tests; the watch gets there by
        itself a moment later)."""
        for informer in self.informers.values():
            informer.relist()

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """One reconcile's reads (core.cluster.Cluster.snapshot): what no watch cache serves is read once within it,
        the policies, Workloads, LocalQueues, ClusterQueues and Cohorts one LIST each and each target one GET, and
        served from then on as read, with the objects this client's writes return (a reconcile reads what it wrote;
        a read-modify-write starts from what is held, and its resourceVersion makes a copy changed since cost one 409
        and a re-read, as a watch cache's does). What a watch cache serves is read from it, as outside."""
        self._snapshot = _Snapshot()
        try:
            yield
        finally:
            self._snapshot = None

    def _objects(self, name: str) -> list[dict]:
        informer = self.informers.get(name)
        if informer is not None:
            informer.catch_up()  # its watch broken: the server's state, not the one before the outage
        cached = informer.items() if informer is not None else None
        if cached is not None:
            return cached
        snapshot = self._snapshot
        if snapshot is not None and (listed := snapshot.listing(name)) is not None:
            return listed
        # its CRD deleted while headroom runs (`watch()` refuses to start without it): NotInstalled
        items = self._request("GET", WATCHED[name]).get("items", [])
        return snapshot.listed(name, items) if snapshot is not None else items

    def _written(self, obj: Any) -> None:
        """An object a write returned goes into its cache at once (a reconcile reads what it wrote)."""
        if not isinstance(obj, dict) or not (obj.get("metadata") or {}).get("name"):
            return
        group = (obj.get("apiVersion") or "").split("/")[0]
        name = _CACHED_KINDS.get((group, str(obj.get("kind"))))
        if name is None and obj.get("kind") in _TARGET_APIS:  # a target: its namespace's cache
            name = _target_cache(obj["kind"], (obj.get("metadata") or {}).get("namespace"))
        if name is not None:
            self._keep(name, obj)

    def _keep(self, name: str, obj: dict) -> None:
        """`obj`, written by this client, into the watch cache `name` and the reconcile's snapshot, where they hold
        its kind."""
        if name in self.informers:
            self.informers[name].put(obj)
        snapshot = self._snapshot
        if snapshot is not None:
            snapshot.put(name, obj)

    def _target_informer(self, kind: str, namespace: str) -> Informer | None:
        """The watch cache of `kind` (Deployment, HorizontalPodAutoscaler) in `namespace`, started on first use
        once `watch()` is on (until its first LIST lands, reads are GETs)."""
        if not self._watching:
            return None
        name = _target_cache(kind, namespace)
        with self._informers_lock:
            if name not in self.informers:
                self.informers[name] = Informer(self, _target_path(kind, namespace), **self._informer_settings).start()
            return self.informers[name]

    def _cached(self, name: str, namespace: str, obj_name: str, copied: bool = False) -> dict | None:
        """An object from a watch cache, else as the reconcile under way read it (read-only unless `copied`), None if
        neither holds it."""
        informer = self.informers.get(name)
        held = informer.get((namespace, obj_name)) if informer is not None else None
        if held is None and self._snapshot is not None:
            held = self._snapshot.read(name, (namespace, obj_name))[1]
        return copy.deepcopy(held) if held is not None and copied else held

    # ------------------------------------------------------------------ transport
    def _address(self) -> tuple[str, dict]:
        """The server's address and the headers every request carries (authentication included), made again at
        most once a second: the client library's token refresh sets its whole configuration again on each call
        (proxies looked up in the environment too), a third of a small write's client CPU, and a rotated token
        (kubeconfig exec plugins, the service account's projected token) is still taken up within a second."""
        now = time.monotonic()
        with self._informers_lock:
            made = self._address_made
            if made is None or now - made[0] >= ADDRESS_SECONDS:
                _, host, headers, _, _ = self.api_client.param_serialize(
                    method="GET", resource_path="", header_params={"Accept": "application/json"},
                    auth_settings=["BearerToken"])
                made = self._address_made = (now, host, headers)
        return made[1], made[2]

    def _request(self, method: str, path: str, body: Any = None, query: dict | None = None,
                 content_type: str = "application/json", retries: int | None = None,
                 timeout: float | None = None, deadline: float | None = None) -> dict:
        """One request with its retries; `deadline` (time.monotonic()), or the deadline of the work it is made for
        (core.deadline: a reconcile's, a write's), whichever is earlier: no attempt waits past it, none starts after."""
        deadline = earliest(deadline, current_deadline())
        query = dict(query or {})
        if method in ("POST", "PUT", "PATCH"):
            query.setdefault("fieldManager", self.field_manager)
        lands = method in ("POST", "PUT", "PATCH") and query.get("dryRun") != "All"  # a write that changes the object
        url_path = path + ("?" + urllib.parse.urlencode(query) if query else "")
        attempt = 0
        while True:
            status, data, headers = self._send(method, url_path, body, content_type, timeout, deadline)
            if 200 <= status < 300:
                try:
                    result = json.loads(data) if data else {}
                except ValueError:  # a proxy's page in the server's place, an answer cut short: none to read, as
                    # one lost (a write's retry that meets 409 is recognised as ours: _landed)
                    status, data = 0, f"HTTP {status} with an answer that is not JSON: {_answer(data)[1][:200]}"
                else:
                    if lands:
                        self._written(result)
                    return result
            payload, message = _answer(data)
            delay = min(self.backoff_max, self.backoff_base * 2 ** attempt) * (0.5 + random.random() / 2)
            # an API server over its max-in-flight (429) says when to come back (Retry-After: 1): not sooner, up to
            # the longest back-off (a controller asked to stop still ends within its grace period)
            delay = max(delay, _retry_after(headers, self.backoff_max))
            unserved = _unserved(status, payload)
            if (attempt < (self.retries if retries is None else retries) and not self.stopping.is_set()
                    and (deadline is None or time.monotonic() + delay < deadline)
                    and (status in RETRYABLE_STATUS or (unserved and self._served_soon(path, deadline)))):
                log.warning("%s %s: %s %s; retry %d/%d in %.1f s", method, path, status or "unreachable",
                            message[:200], attempt + 1, self.retries, delay)
                attempt += 1
                self.sleep(delay)
                continue
            if status == 409 and attempt and lands:
                landed = self._landed(method, path, body, deadline)
                if landed is not None:
                    return landed
            not_installed = _not_installed_error(path, status, payload)
            if not_installed is not None:  # a read or a write says so, not a bare 404
                raise not_installed
            reason = payload.get("reason", "") if isinstance(payload, dict) else ""
            error = {404: NotFound, 409: Conflict, 422: Invalid}.get(status, ClusterError)
            where = "unreachable" if status == 0 else f"HTTP {status}"
            if status == 0 and deadline is not None and time.monotonic() + delay >= deadline:
                message += " (no time left before its deadline)"
            raise error(f"{method} {path}: {where}: {message}", status=status, reason=reason, body=payload)

    def _send(self, method: str, url_path: str, body: Any = None, content_type: str = "application/json",
              timeout: float | None = None, deadline: float | None = None) -> tuple[int, bytes | str, Mapping]:
        """One attempt, waiting `timeout` (the request timeout) or until `deadline`, whichever is sooner: (the HTTP
        status, 0 if no answer came; the body; the headers)."""
        import urllib3
        from kubernetes.client.exceptions import ApiException

        wait = timeout or self.request_timeout
        if deadline is not None:
            wait = min(wait, deadline - time.monotonic())
        try:
            if wait <= 0:
                raise TimeoutError("not sent")
            with self._informers_lock:
                self.requests[method] = self.requests.get(method, 0) + 1
            host, headers = self._address()
            response = self.api_client.call_api(method, host + url_path,
                                                body=self.api_client.sanitize_for_serialization(body),
                                                header_params={**headers, "Content-Type": content_type},
                                                _request_timeout=wait)
            response.read()
            return response.status, response.data, response.headers
        except ApiException as exc:  # the REST layer raises these for TLS and protocol errors
            return exc.status or 0, exc.body or str(exc.reason), exc.headers or {}
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            return 0, f"{type(exc).__name__}: {exc}".encode(), {}

    def _served_soon(self, path: str, deadline: float | None) -> bool:
        """Whether a 404 that is no Status on `path` (the path not served) may be a moment's, and so worth a retry: an
        API server just started serves a CRD's group only once its CRD informer has synced, and says it is not ready
        (/readyz) until then; a CRD just deleted may still be listed by discovery for a moment. A server that is
        ready, and whose discovery does not list the resource, does not serve it: its CRD is not installed (deleted
        under a running controller), which no retry changes. Whatever cannot be told (no answer, or a path of no API
        group) is retried, as a server not ready."""
        api = _api_of(path)
        if api is None or self._send("GET", "/readyz", deadline=deadline)[0] != 200:
            return True
        listing, plural = api
        if plural is None:  # the 404 was its discovery document's own: not served
            return False
        try:
            resources = self._request("GET", listing, retries=0, deadline=deadline).get("resources") or []
        except NotFound:
            return False
        except ClusterError:
            return True
        return any(r.get("name") == plural for r in resources)

    def _landed(self, method: str, path: str, body: Any, deadline: float | None) -> dict | None:
        """A write answered 409 after a retry: an earlier attempt whose answer was lost (a timeout, a connection reset
        after it was sent, a 504) may have landed, and the retry met it (a create's AlreadyExists; the resourceVersion
        a PUT or patch carried moved: by that write). The object as stored if it holds every field sent (metadata:
        its name, namespace, labels and annotations; a field a merge patch deletes, None: absent): the write
        landed, and a Lease's renewTime or an Event's random name says whose; None if it does not (someone else's
        write: the 409 stands) or cannot be read."""
        if not isinstance(body, dict):
            return None
        metadata = body.get("metadata") or {}
        if method == "POST":
            if not metadata.get("name"):
                return None
            path = f"{path}/{metadata['name']}"
        sent = {**body, "metadata": {k: v for k, v in metadata.items() if k in ("name", "namespace", "labels",
                                                                                  "annotations")}}
        try:
            stored = self._request("GET", path, deadline=deadline)
        except ClusterError:
            return None
        if not _holds(stored, sent):
            return None
        log.info("%s %s: 409 after a retry, and the object holds what was sent: an earlier attempt landed (its "
                 "answer was lost)", method, path)
        self._written(stored)
        return stored

    def _update(self, path: str, mutate: Callable[[dict], dict | None], subresource: str = "",
                cached: dict | None = None) -> tuple[dict, bool]:
        """Read, let `mutate` return a merge patch (None = nothing to do), write with the read
        resourceVersion; on 409 re-read and try again. Returns (object, changed). `cached`: the object as the
        watch cache holds it, read instead of a GET the first time (a stale copy costs one 409 and a re-read)."""
        for attempt in range(self.conflict_retries + 1):
            current = cached if attempt == 0 and cached is not None else self._request("GET", path)
            patch = mutate(current)
            if patch is None:
                return current, False
            patch.setdefault("metadata", {})["resourceVersion"] = current["metadata"]["resourceVersion"]
            try:
                return self._request("PATCH", path + subresource, patch, content_type=MERGE_PATCH), True
            except Conflict:
                if attempt == self.conflict_retries:
                    raise
                log.info("conflict on %s (resourceVersion %s); re-reading", path,
                         current["metadata"]["resourceVersion"])
        raise AssertionError("unreachable")

    # ------------------------------------------------------------------ generic objects
    @staticmethod
    def custom_path(group: str, version: str, plural: str, name: str | None = None,
                    namespace: str | None = None) -> str:
        path = f"/apis/{group}/{version}"
        if namespace:
            path += f"/namespaces/{namespace}"
        path += f"/{plural}"
        return path + (f"/{name}" if name else "")

    def get(self, path: str) -> dict:
        return self._request("GET", path)

    def create(self, path: str, body: dict, dry_run: bool = False) -> dict:
        return self._request("POST", path, body, query={"dryRun": "All"} if dry_run else None)

    def apply(self, path: str, body: dict, dry_run: bool = False, force: bool = True) -> dict:
        """Server-side apply (`path` names the object)."""
        query = {"force": "true" if force else "false"}
        if dry_run:
            query["dryRun"] = "All"
        return self._request("PATCH", path, body, query=query, content_type="application/apply-patch+yaml")

    def delete(self, path: str, preconditions: Mapping[str, str] | None = None) -> None:
        """DELETE the object at `path`; one gone already is no error. `preconditions` (its uid, resourceVersion): only
        if it still is the object as read (Conflict otherwise)."""
        options = None if preconditions is None else {"apiVersion": "v1", "kind": "DeleteOptions",
                                                      "preconditions": dict(preconditions)}
        try:
            self._request("DELETE", path, options)
        except NotFound:
            pass

    # ------------------------------------------------------------------ Cluster: reads
    def reservation_policies(self, namespace: str | None = None) -> list[dict]:
        """ReservationPolicy objects (metadata, spec, status), in every namespace or one."""
        found = [p for p in self._objects("reservationpolicies")
                 if namespace is None or p["metadata"].get("namespace") == namespace]
        return sorted(found, key=Informer.key)  # the cache's own objects: read-only (a copy of 1,000 costs seconds)

    def workloads(self) -> list[WorkloadInfo]:
        """Every Kueue Workload (one LIST of Workloads and one of LocalQueues, or the watch caches), oldest
        first."""
        local_queues = {Informer.key(q): str((q.get("spec") or {}).get("clusterQueue"))
                        for q in self._objects("localqueues") if (q.get("spec") or {}).get("clusterQueue")}
        # a Workload unchanged since the last read is not parsed again (a reconcile reads thousands several times)
        held, infos = self._workload_infos, {}
        listed = self._objects("workloads")
        for w in listed:
            key = Informer.key(w)
            version = (w["metadata"].get("resourceVersion"),
                       local_queues.get((key[0], (w.get("spec") or {}).get("queueName") or "")))
            known = held.get(key)
            if known is not None and version[0] and known[:2] == version:
                infos[key] = known
                continue
            info = workload_info(w, local_queues, self.resource)
            served = self._with_deployment(w, info)
            # its Pod not read: parsed again at the next read (no version kept), so the Pod is asked for again
            infos[key] = (version[0], version[1], served) if served is not None else (None, version[1], info)
        self._workload_infos = infos
        if self._pod_deployments:  # (none where no Workload runs a Pod of its own: no pass over thousands)
            pods = {_pod_key(w["metadata"].get("namespace", ""), pod) for w in listed
                    if (pod := _owner_pod(w)) is not None}
            self._pod_deployments = {pod: d for pod, d in self._pod_deployments.items() if pod in pods}
        return sorted((info for _, _, info in infos.values()),
                      key=lambda w: (w.creation or datetime.min.replace(tzinfo=UTC), w.namespace, w.name))

    def _with_deployment(self, obj: Mapping, info: WorkloadInfo) -> WorkloadInfo | None:
        """`info` with the Deployment whose Pod the Workload runs (one GET of the Pod, the first time its Workload
        is read): a policy's inference pods Kueue admits into a training queue are no training. A Pod the ClusterRole
        may not `get` (403) is of none: its Workload is read as training, as before headroom read Pods. None: the Pod
        could not be read now (the API server failing): its Workload is read as training meanwhile, and the next read
        of the Workloads asks for the Pod again."""
        pod = _owner_pod(obj)
        if pod is None:
            return info
        name, key = pod[0], _pod_key(info.namespace, pod)
        if key not in self._pod_deployments:
            try:
                self._pod_deployments[key] = _pod_deployment(
                    self._request("GET", f"/api/v1/namespaces/{info.namespace}/pods/{name}"))
            except NotFound:  # the Pod is gone: its Workload is finishing
                self._pod_deployments[key] = None
            except ClusterError as exc:
                refused = exc.status == 403  # asking again is refused again: once per Pod, not every reconcile
                log.warning("Pod %s/%s of Workload %s not read (%s): its Workload is counted as training%s",
                            info.namespace, name, info.key, exc, "" if refused else " until the Pod is read")
                if not refused:
                    return None
                self._pod_deployments[key] = None
        return replace(info, deployment=self._pod_deployments[key])

    def cluster_queue_quotas(self) -> Mapping[str, int]:
        """Each ClusterQueue's GPU nominalQuota (summed over flavors; a queue without GPUs is absent)."""
        out = {}
        for cq in self._objects("clusterqueues"):
            quota = gpu_quota(cq, self.resource)
            if quota is not None:
                out[cq["metadata"]["name"]] = quota
        return out

    def lent_quotas(self, lent_for: str | None = None) -> Mapping[str, int]:
        out = {}
        for cq in self._objects("clusterqueues"):
            annotations = cq["metadata"].get("annotations") or {}
            lent = annotations.get(LENT_GPUS)
            if lent is not None and lent.isdigit() and annotations.get(LENT_FOR) == lent_for:  # anything else is no
                # mark headroom wrote, or one another controller's (of another namespace's policies) wrote
                out[cq["metadata"]["name"]] = int(lent)
        return out

    def within_queue_preemption(self) -> Mapping[str, str]:
        out = {}
        for cq in self._objects("clusterqueues"):
            policy = ((cq.get("spec") or {}).get("preemption") or {}).get("withinClusterQueue") or "Never"
            if policy != "Never":
                out[cq["metadata"]["name"]] = str(policy)
        return out

    def strict_fifo_queues(self) -> frozenset[str]:
        return frozenset(cq["metadata"]["name"] for cq in self._objects("clusterqueues")
                         if (cq.get("spec") or {}).get("queueingStrategy") == "StrictFIFO")

    def cohort_tree(self) -> list[QuotaNode]:
        """Each ClusterQueue in a cohort (spec.cohortName) and each Cohort object, with their GPU quotas."""
        queues = [quota_node(cq, "ClusterQueue", self.resource) for cq in self._objects("clusterqueues")]
        return [q for q in queues if q.parent is not None] + [
            quota_node(c, "Cohort", self.resource) for c in self._objects("cohorts")]

    def _target(self, kind: str, namespace: str, name: str) -> dict:
        """A Deployment or HPA: from its namespace's watch cache (watching; NotFound if the cache has it not),
        else one GET."""
        informer = self._target_informer(kind, namespace)
        if informer is not None:
            try:
                informer.catch_up()
            except NotFound:
                pass  # its namespace gone: the cache is emptied, and the GET below says what is missing
        missing = NotFound(f"{kind} {namespace}/{name} not found", status=404)
        if informer is not None and informer.synced():
            held = informer.get((namespace, name))
            if held is None:
                raise missing
            return held
        snapshot, key = self._snapshot, (namespace, name)
        read, held = snapshot.read(_target_cache(kind, namespace), key) if snapshot is not None else (False, None)
        if not read:
            try:
                held = self._request("GET", _target_path(kind, namespace, name))
            except NotFound:  # said as the cache says it: the policy's status and Event do not change with the read
                held = None
            if snapshot is not None:
                held = snapshot.got(_target_cache(kind, namespace), key, held)
        if held is None:
            raise missing
        return held

    def target_state(self, target: TargetRef, gpus_per_replica: int) -> TargetState:
        """Replicas of an inference target: from the watch caches (watching), else one GET (an HPA: two, itself
        and its Deployment). A ClusterQueue target's are the whole replicas of `gpus_per_replica` GPUs its quota
        holds, all counted as serving: its pods' readiness is not read, as nothing on Kubernetes uses it
        (docs/deploy.md)."""
        if target.kind == "ClusterQueue":
            cq = self._cluster_queue(target.name)
            replicas = (gpu_quota(cq, self.resource) or 0) // gpus_per_replica
            return TargetState(replicas, replicas)
        if target.namespace is None:
            raise ClusterError(f"{target.kind} {target.name}: a Deployment or HPA target needs a namespace")
        if target.kind == "Deployment":
            d = self._target("Deployment", target.namespace, target.name)
            return TargetState(int((d.get("spec") or {}).get("replicas", 1) or 0),
                               int((d.get("status") or {}).get("readyReplicas", 0) or 0))
        if target.kind == "HorizontalPodAutoscaler":
            hpa = self._target("HorizontalPodAutoscaler", target.namespace, target.name)
            spec, status = hpa.get("spec") or {}, hpa.get("status") or {}
            ref = spec.get("scaleTargetRef") or {}
            desired, ready = int(status.get("desiredReplicas", 0) or 0), int(status.get("currentReplicas", 0) or 0)
            if ref.get("kind") == "Deployment":
                try:
                    d = self._target("Deployment", target.namespace, ref["name"])
                except NotFound as exc:  # the HPA is there: what is missing is what it scales
                    raise NotFound(f"HorizontalPodAutoscaler {target.namespace}/{target.name} scales Deployment "
                                   f"{ref['name']}, which is not found", status=404) from exc
                desired = int((d.get("spec") or {}).get("replicas", 1) or 0)
                ready = int((d.get("status") or {}).get("readyReplicas", 0) or 0)
            return TargetState(desired, ready, spec.get("minReplicas", 1), spec.get("maxReplicas"),
                               ref["name"] if ref.get("kind") == "Deployment" else None)
        raise ClusterError(f"unknown target kind {target.kind!r}")

    # ------------------------------------------------------------------ ClusterQueue quota
    def _cq_path(self, name: str) -> str:
        return self.custom_path(KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", name)

    def _cluster_queue(self, name: str) -> dict:
        """A ClusterQueue: from the watch cache; else, in a reconcile (snapshot), from its one LIST of them, made now
        if not yet (their quotas are read from it too); else one GET."""
        informer, snapshot = self.informers.get("clusterqueues"), self._snapshot
        missing = NotFound(f"ClusterQueue {name} not found", status=404)
        if informer is not None and informer.synced():
            cq = informer.get(("", name))
        elif snapshot is not None:
            self._objects("clusterqueues")
            cq = snapshot.read("clusterqueues", ("", name))[1]
            if cq is None:
                raise missing
        else:
            cq = None
        try:
            return cq or self._request("GET", self._cq_path(name))
        except NotFound as exc:
            raise missing from exc

    @staticmethod
    def _find_quota(cq: dict, resource: str, flavor: str | None) -> tuple[int, int, int]:
        found = []
        for g, group in enumerate(cq.get("spec", {}).get("resourceGroups", []) or []):
            for f, fl in enumerate(group.get("flavors", []) or []):
                if flavor is not None and fl.get("name") != flavor:
                    continue
                for r, res in enumerate(fl.get("resources", []) or []):
                    if res.get("name") == resource:
                        found.append((g, f, r))
        name = cq.get("metadata", {}).get("name")
        if not found:
            raise ClusterError(f"ClusterQueue {name} has no {resource} quota"
                               + (f" in flavor {flavor}" if flavor else ""))
        if len(found) > 1:
            flavors = ", ".join(str(cq["spec"]["resourceGroups"][g]["flavors"][f].get("name")) for g, f, _ in found)
            raise ClusterError(f"ClusterQueue {name} has {resource} in {len(found)} flavors ({flavors}): headroom sets "
                               f"the quota of a queue with one {resource} flavor; give it one (a ClusterQueue per "
                               "flavor)")
        return found[0]

    def get_cluster_queue_quota(self, name: str, resource: str | None = None, flavor: str | None = None) -> int:
        cq = self._request("GET", self._cq_path(name))
        g, f, r = self._find_quota(cq, resource or self.resource, flavor)
        return int(_quantity(cq["spec"]["resourceGroups"][g]["flavors"][f]["resources"][r]["nominalQuota"]))

    def set_cluster_queue_quota(self, name: str, gpus: int, lent: bool = False, lent_for: str | None = None,
                                replaces: int | None = None, resource: str | None = None,
                                flavor: str | None = None) -> bool:
        """Set the nominalQuota of `resource`, and the queue's LENT_GPUS mark if `lent` (else none), with LENT_FOR
        `lent_for` (the lending controller's run.namespace; None: none); True if it changed (False: already so, or
        its quota is no longer `replaces`: someone else set it since, and the write carries the resourceVersion of
        the queue so checked). A lendingLimit above the new quota is lowered to it (Kueue refuses a lendingLimit over
        the nominalQuota)."""
        if gpus < 0:
            raise ValueError(f"quota must be >= 0, got {gpus}")
        resource = resource or self.resource

        def mutate(cq: dict) -> dict | None:
            g, f, r = self._find_quota(cq, resource, flavor)
            groups = cq["spec"]["resourceGroups"]
            quota = groups[g]["flavors"][f]["resources"][r]
            marks = {LENT_GPUS: str(gpus) if lent else None, LENT_FOR: lent_for if lent else None}
            annotations = cq["metadata"].get("annotations") or {}
            if replaces is not None and _quantity(quota["nominalQuota"]) != replaces:
                log.info("ClusterQueue %s: its quota is %s, not the %d it was to replace: someone else set it, left as "
                         "it is", name, quota["nominalQuota"], replaces)
                return None
            if _quantity(quota["nominalQuota"]) == gpus and all(annotations.get(k) == v for k, v in marks.items()):
                return None
            quota["nominalQuota"] = gpus
            if "lendingLimit" in quota and _quantity(quota["lendingLimit"]) > gpus:
                quota["lendingLimit"] = gpus
            # a merge patch replaces lists whole
            return {"metadata": {"annotations": marks}, "spec": {"resourceGroups": groups}}

        return self._update(self._cq_path(name), mutate, cached=self._cached("clusterqueues", "", name, copied=True))[1]

    # ------------------------------------------------------------------ inference capacity
    def get_deployment_replicas(self, namespace: str, name: str) -> int:
        scale = self._request("GET", _target_path("Deployment", namespace, name) + "/scale")
        return int(scale.get("spec", {}).get("replicas", 0) or 0)

    def scale_deployment(self, namespace: str, name: str, replicas: int) -> bool:
        """Set spec.replicas through the scale subresource; True if it changed."""
        if replicas < 0:
            raise ValueError(f"replicas must be >= 0, got {replicas}")
        path = _target_path("Deployment", namespace, name) + "/scale"

        def mutate(scale: dict) -> dict | None:
            return None if scale.get("spec", {}).get("replicas") == replicas else {"spec": {"replicas": replicas}}

        # the Deployment's cached copy serves as the Scale's first read: the same spec.replicas and resourceVersion
        cache = _target_cache("Deployment", namespace)
        changed = self._update(path, mutate, cached=self._cached(cache, namespace, name))[1]
        held = self._cached(cache, namespace, name)
        if held is not None and (held.get("spec") or {}).get("replicas") != replicas:
            # the write returned a Scale, not the Deployment: what is held says the new replicas until the watch
            # brings the Deployment itself (same resourceVersion: the next event replaces this copy). A new top
            # level and spec, the rest shared: what is held is never changed in place
            self._keep(cache, {**held, "spec": {**(held.get("spec") or {}), "replicas": replicas}})
        return changed

    def set_hpa_min_replicas(self, namespace: str, name: str, min_replicas: int) -> bool:
        """Set an HPA's spec.minReplicas (autoscaling/v1); True if it changed."""
        if min_replicas < 1:
            raise ValueError(f"minReplicas must be >= 1, got {min_replicas}")
        path = _target_path("HorizontalPodAutoscaler", namespace, name)

        def mutate(hpa: dict) -> dict | None:
            spec = hpa.get("spec", {})
            if spec.get("minReplicas") == min_replicas:
                return None
            if min_replicas > spec.get("maxReplicas", min_replicas):
                raise ClusterError(f"HPA {namespace}/{name}: minReplicas {min_replicas} > "
                                   f"maxReplicas {spec['maxReplicas']}")
            return {"spec": {"minReplicas": min_replicas}}

        return self._update(path, mutate, cached=self._cached(_target_cache("HorizontalPodAutoscaler", namespace),
                                                              namespace, name))[1]

    # ------------------------------------------------------------------ training workloads
    def _wl_path(self, namespace: str, name: str) -> str:
        return self.custom_path(KUEUE_GROUP, KUEUE_VERSION, "workloads", name, namespace)

    def evict_workload(self, namespace: str, name: str, uid: str | None, reason: str, plan_id: str,
                       queue: str | None = None) -> bool:
        """Deactivate a Workload (spec.active=false: Kueue evicts it and does not requeue it) and record why in
        its annotations. True if this call deactivated it; False if it is already inactive (by this plan, a
        restarted controller's or anyone's: the first record stays), finished, holds no quota any more (Kueue
        preempted or requeued it since the plan's view: it frees no GPU), holds it in another ClusterQueue than
        `queue` (admitted elsewhere since: it holds none of what was lent there), is being evicted by Kueue (Evicted:
        it stops without headroom, which must not count it as its own preemption), or no longer the object `uid`
        names. The write carries the resourceVersion read, so a Workload replaced in between is not touched."""
        def mutate(wl: dict) -> dict | None:
            if uid is not None and wl["metadata"].get("uid") != uid:
                return None
            if (wl.get("spec") or {}).get("active", True) is False or _condition(wl, "Finished") \
                    or _condition(wl, "Evicted"):
                return None
            admission = (wl.get("status") or {}).get("admission")
            if not admission or (queue is not None and admission.get("clusterQueue") != queue):
                return None
            return {"metadata": {"annotations": {EVICTED_BY_PLAN: plan_id, EVICTION_REASON: event_message(reason)}},
                    "spec": {"active": False}}

        return self._update(self._wl_path(namespace, name), mutate,
                            cached=self._cached("workloads", namespace, name))[1]

    def requeue_workload(self, namespace: str, name: str, uid: str | None) -> bool:
        """Reactivate a Workload headroom deactivated, once its eviction is complete (no admission left: its pods
        are gone and its quota released); Kueue queues it again. The eviction annotations go. False if it is
        still stopping, active, finished, was deactivated by someone else, or is not the object `uid` names."""
        def mutate(wl: dict) -> dict | None:
            meta, spec, status = wl["metadata"], wl.get("spec") or {}, wl.get("status") or {}
            if uid is not None and meta.get("uid") != uid:
                return None
            if spec.get("active", True) is not False or not (meta.get("annotations") or {}).get(EVICTED_BY_PLAN):
                return None
            if status.get("admission") or _condition(wl, "Finished"):
                return None
            return {"metadata": {"annotations": {EVICTED_BY_PLAN: None, EVICTION_REASON: None}},
                    "spec": {"active": True}}

        return self._update(self._wl_path(namespace, name), mutate,
                            cached=self._cached("workloads", namespace, name))[1]

    # ------------------------------------------------------------------ ReservationPolicy
    def list_reservation_policies(self, namespace: str | None = None) -> list[dict]:
        """One LIST (never the cache)."""
        path = self.custom_path(HEADROOM_GROUP, HEADROOM_VERSION, "reservationpolicies", namespace=namespace)
        return self._request("GET", path).get("items", [])

    def get_reservation_policy(self, namespace: str, name: str) -> dict:
        return self._request("GET", self.custom_path(HEADROOM_GROUP, HEADROOM_VERSION,
                                                     "reservationpolicies", name, namespace))

    def patch_policy_status(self, namespace: str, name: str, status: PolicyStatus, uid: str | None = None) -> bool:
        """Write the status subresource; True if it was written. A condition keeps its lastTransitionTime unless its
        status changes; conditions not named keep their old value. A status that says nothing new (planId and
        lastPlanTime aside) is not written unless its lastPlanTime is STATUS_REFRESH_SECONDS old; nor one of another
        object than `uid` names (the policy deleted and created again since its plan: the write carries the
        resourceVersion of the object whose uid was checked). The object is read from the watch cache when there is
        one (a stale copy costs a 409 and a re-read)."""
        path = self.custom_path(HEADROOM_GROUP, HEADROOM_VERSION, "reservationpolicies", name, namespace)
        now = _rfc3339(_now())

        def mutate(policy: dict) -> dict | None:
            if uid is not None and policy["metadata"].get("uid") != uid:
                log.info("ReservationPolicy %s/%s was deleted and created again since its plan: the old object's "
                         "status is not written onto the new one", namespace, name)
                return None
            old = {c["type"]: c for c in (policy.get("status") or {}).get("conditions", []) or []}
            merged = dict(old)
            for cond in status.conditions:
                prev = old.get(cond.type)
                merged[cond.type] = {
                    "type": cond.type, "status": cond.status, "reason": cond.reason, "message": cond.message,
                    "lastTransitionTime": prev["lastTransitionTime"] if prev and prev.get("status") == cond.status
                    else now,
                    "observedGeneration": policy["metadata"].get("generation", 0)}
                if not cond.message:  # the 1.20 merge-patch path turns "" into null: omit it
                    del merged[cond.type]["message"]
            body: dict[str, Any] = {
                "reservedGpus": status.reserved_gpus, "headroomGpus": status.headroom_gpus, "lastPlanTime": now,
                "observedGeneration": status.observed_generation if status.observed_generation is not None
                else policy["metadata"].get("generation", 0),
                "conditions": [merged[t] for t in CONDITION_TYPES if t in merged]}
            # none (the fallback's, or a policy not planned): null, which the merge patch removes, where an old one
            # kept would read as the forecast in force, or a refused policy's last plan as the plan in force
            body["planId"] = status.plan_id
            body["forecastDemand"] = float(status.forecast_demand) if status.forecast_demand is not None else None
            body["model"] = status.model
            body["holding"] = status.holding  # none: no spec of the policy says what it holds (null removes it)
            body["left"] = status.left  # a list: written whole (none left: null removes it)
            body["holdsTarget"] = status.holds_target
            body["nextHours"] = list(status.next_hours)
            if status.realized_error is None:  # a policy not planned: its forecasts are no longer scored
                body["realizedError"] = None
            elif status.realized_error:  # ({}: none scored this time, no forecast in force or a replica's first
                # refit not done: the last one stands)
                body["realizedError"] = {k: float(v) for k, v in status.realized_error.items()}
            # Nothing new to say (the same numbers, conditions and hours; the plan id and time aside, but a plan id
            # to remove is news: a refusal's status names none): no write, so a steady reconcile of many policies
            # costs no request; the time is refreshed at least hourly.
            held = policy.get("status") or {}
            last = _parse_time(held.get("lastPlanTime"))
            if (last is not None and (_now() - last).total_seconds() < STATUS_REFRESH_SECONDS
                    and (body["planId"] is not None or not held.get("planId"))
                    and all(held.get(k) == v for k, v in body.items() if k not in ("lastPlanTime", "planId"))):
                return None
            # the horizons scored now are the whole error, and the holding written the whole holding: a merge patch
            # merges maps, so a key said before and not now is removed (null), not left beside them
            for key in ("realizedError", "holding"):
                if key in body:
                    body[key] = _merge_patch(held.get(key), body[key])
            return {"status": body}

        return self._update(path, mutate, subresource="/status", cached=self._cached("reservationpolicies", namespace,
                                                                                      name))[1]

    # ------------------------------------------------------------------ events
    def emit_event(self, about: ObjectRef, reason: str, message: str, type: str = "Normal",
                   action: str = "Reconcile") -> dict:
        """A core/v1 Event about `about` (cluster-scoped objects get theirs in "default")."""
        if type not in ("Normal", "Warning"):
            raise ValueError(f"event type must be Normal or Warning, got {type!r}")
        namespace = about.namespace or "default"
        now = _now()
        involved = {"apiVersion": about.api_version, "kind": about.kind, "name": about.name}
        if about.namespace:
            involved["namespace"] = about.namespace
        if about.uid:
            involved["uid"] = about.uid
        body = {"apiVersion": "v1", "kind": "Event",
                "metadata": {"name": f"{about.name}.{secrets.token_hex(8)}", "namespace": namespace},
                "involvedObject": involved, "reason": reason, "message": event_message(message), "type": type,
                "action": action, "source": {"component": self.field_manager},
                "reportingComponent": self.field_manager, "reportingInstance": self.field_manager,
                "firstTimestamp": _rfc3339(now), "lastTimestamp": _rfc3339(now), "count": 1}
        return self._request("POST", f"/api/v1/namespaces/{namespace}/events", body)

    def list_events(self, about: ObjectRef) -> list[dict]:
        namespace = about.namespace or "default"
        selector = f"involvedObject.name={about.name},involvedObject.kind={about.kind}"
        return self._request("GET", f"/api/v1/namespaces/{namespace}/events",
                             query={"fieldSelector": selector}).get("items", [])

    # ------------------------------------------------------------------ shared forecast history
    def forecast_store(self, namespace: str, **settings) -> ConfigMapForecastStore:
        return ConfigMapForecastStore(self, namespace, **settings)

    def plan_summary(self, namespace: str, name: str = PLAN_SUMMARY) -> PlanSummary:
        return PlanSummary(self, namespace, name)

    # ------------------------------------------------------------------ leader election
    def leader_elector(self, namespace: str, name: str, identity: str,
                       lease_seconds: int = 15) -> LeaseElector:
        return LeaseElector(self, namespace, name, identity, lease_seconds)


@dataclass
class LeaseElector:
    """Leader election on a coordination.k8s.io/v1 Lease, as client-go does it.

    Every write carries the resourceVersion it read, so of two electors racing
    for the same Lease only one write succeeds. A holder's lease is taken over
    only after this elector has watched it go unrenewed for a full
    `lease_seconds` by its own monotonic clock (immune to clock skew). Its own
    lease it counts from the start of the round that renewed it, not from the
    answer: the others count from when they saw the renewal, as early as when it
    landed, and a renewal whose answer was lost is recognised only after a retry.
    """
    cluster: KubeCluster
    namespace: str
    name: str
    identity: str
    lease_seconds: int = 15
    monotonic: Callable[[], float] = field(default=time.monotonic, repr=False)
    _observed: tuple | None = field(default=None, init=False, repr=False)
    _observed_at: float = field(default=0.0, init=False, repr=False)
    _leader: bool = field(default=False, init=False, repr=False)

    @property
    def path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases/{self.name}"

    @property
    def is_leader(self) -> bool:
        """Leader as of the last successful acquire/renew, and not yet expired locally."""
        return self.monotonic() < self.expires_at

    @property
    def expires_at(self) -> float:
        """When (time.monotonic()) this elector's lease lapses as the other replicas may count it: a lease from the
        start of the round that renewed it (-inf: it does not lead)."""
        return self._observed_at + self.lease_seconds if self._leader else -math.inf

    def _spec(self, transitions: int, acquire_time: str) -> dict:
        now = _rfc3339(_now(), micro=True)
        return {"holderIdentity": self.identity, "leaseDurationSeconds": self.lease_seconds,
                "acquireTime": acquire_time or now, "renewTime": now, "leaseTransitions": transitions}

    def try_acquire_or_renew(self) -> bool:
        """One round: returns True if this elector holds the lease afterwards; a ClusterError if the server did not
        answer within the round's deadline (RENEW_DEADLINE_SHARE of the lease)."""
        began = self.monotonic()
        deadline = time.monotonic() + RENEW_DEADLINE_SHARE * self.lease_seconds
        try:
            lease = self.cluster._request("GET", self.path, deadline=deadline)
        except NotFound:
            spec0 = self._spec(0, "")
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace}, "spec": spec0}
            try:
                self.cluster._request("POST", f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases", body,
                                      deadline=deadline)
            except Conflict:  # someone else created it first
                return self._lost()
            return self._won(spec0, began)
        spec = lease.get("spec", {}) or {}
        holder = spec.get("holderIdentity") or ""
        record = (holder, spec.get("renewTime"), spec.get("leaseTransitions"))
        if record != self._observed:
            self._observed, self._observed_at = record, self.monotonic()
        if holder and holder != self.identity:
            duration = spec.get("leaseDurationSeconds") or self.lease_seconds
            if self.monotonic() - self._observed_at < duration:
                return self._lost()
        transitions = int(spec.get("leaseTransitions") or 0)
        if holder != self.identity:
            transitions += 1
            acquire = ""
        else:
            acquire = spec.get("acquireTime") or ""
        lease["spec"] = self._spec(transitions, acquire)
        try:
            self.cluster._request("PUT", self.path, lease, deadline=deadline)  # carries the read resourceVersion
        except Conflict:
            return self._lost()
        return self._won(lease["spec"], began)

    def _won(self, spec: dict, began: float) -> bool:
        self._observed = (spec["holderIdentity"], spec["renewTime"], spec["leaseTransitions"])
        self._observed_at = began
        self._leader = True
        return True

    def _lost(self) -> bool:
        self._leader = False
        return False

    def holder(self) -> str | None:
        try:
            return (self.cluster.get(self.path).get("spec", {}) or {}).get("holderIdentity") or None
        except NotFound:
            return None

    def release(self) -> bool:
        """Give the lease up (others may take it at once); True if this elector held it. One quick attempt
        (RELEASE_TIMEOUT_SECONDS): a ClusterError if the server cannot answer at once (the Lease expires by itself)."""
        self._leader = False
        try:
            lease = self.cluster._request("GET", self.path, retries=0, timeout=RELEASE_TIMEOUT_SECONDS)
        except NotFound:
            return False
        spec = lease.get("spec", {}) or {}
        if spec.get("holderIdentity") != self.identity:
            return False
        lease["spec"] = {**spec, "holderIdentity": None, "leaseDurationSeconds": 1,
                         "renewTime": _rfc3339(_now(), micro=True)}
        try:
            self.cluster._request("PUT", self.path, lease, retries=0, timeout=RELEASE_TIMEOUT_SECONDS)
        except Conflict:
            return False
        return True


FORECAST_LOG_LABEL = "headroom.dev/forecast-log"   # value: "true"; every ConfigMap of the store carries it
FORECAST_SERIES_ANNOTATION = "headroom.dev/series"
FORECAST_OPENING = '{"index":'  # how a stored forecast's JSON begins (ConfigMapForecastStore._encode writes it first)
_JSON = json.JSONDecoder()
CONFIGMAP_LIMIT = 1024 * 1024                       # what the API server accepts in one ConfigMap's data


def _index(text: str) -> list | None:
    """A stored forecast's periods (epoch seconds), read off its index, which _encode writes first, without parsing
    the rest; None where it does not begin so."""
    if not text.startswith(FORECAST_OPENING):
        return None
    try:
        index = _JSON.raw_decode(text, len(FORECAST_OPENING))[0]
    except ValueError:
        return None
    return index if isinstance(index, list) else None


@dataclass
class ConfigMapForecastStore:
    """core.cluster.ForecastStore in ConfigMaps: one per policy series in `namespace` (the Lease's), so whichever
    replica leads reads the forecasts the previous leader issued and realized error goes on without a gap.

    A forecast is one data key, its issue time in epoch seconds, holding JSON {index: [epoch s], columns: [quantile],
    values: [[...]], scale, generation, model, basis, uid}: only what realized error, and a new leader planning on it
    until its own refit lands, read (the quantiles nearest `quantiles`, all of them when None; every period of those
    issued within `whole_seconds` of the newest, which a new leader may plan on over its whole horizon, and of the
    others the `rows` hours from the one each was issued in, realized error's, all of them when None). Each ConfigMap
    stays bounded: a record drops forecasts issued more than `keep` before it, and then the oldest until the data fits
    in `max_bytes` (under the 1 MiB a ConfigMap holds). Reads are one GET (strongly consistent: a new leader sees the
    last write of the old one); writes are read-modify-write merge patches carrying the resourceVersion
    read."""
    cluster: KubeCluster
    namespace: str
    keep_seconds: float = 50 * 3600.0
    rows: int | None = 24
    whole_seconds: float = 0.0
    quantiles: tuple[float, ...] | None = (0.1, 0.5, 0.9)
    max_bytes: int = 900 * 1024
    prefix: str = "headroom-forecasts"

    def name(self, series: str) -> str:
        """A DNS-1123 name for the series' ConfigMap (a hash keeps it unique and short)."""
        import hashlib
        import re

        slug = re.sub(r"[^a-z0-9.-]+", "-", series.lower()).strip(".-")[:200]
        digest = hashlib.sha256(series.encode()).hexdigest()[:10]
        return f"{self.prefix}.{slug}.{digest}" if slug else f"{self.prefix}.{digest}"

    def _path(self, series: str | None = None) -> str:
        path = f"/api/v1/namespaces/{self.namespace}/configmaps"
        return f"{path}/{self.name(series)}" if series is not None else path

    def _encode(self, frame) -> str:
        import pandas as pd

        columns = [float(c) for c in frame.columns]
        if self.quantiles is not None and columns:
            keep = sorted({min(range(len(columns)), key=lambda i: abs(columns[i] - q)) for q in self.quantiles})
            frame, columns = frame.iloc[:, keep], [columns[i] for i in keep]
        index = [int(pd.Timestamp(t).timestamp()) for t in frame.index]
        values = [[None if v != v else float(v) for v in row] for row in frame.to_numpy(float).tolist()]
        doc = {"index": index, "columns": columns, "values": values}
        scale = frame.attrs.get(SCALE)
        if scale is not None:  # realized error divides by its fitting window's scale: NaN (none) is null
            doc[SCALE] = None if scale != scale else float(scale)
        for key in FORECAST_TAKEN_UP_BY:  # what a new leader takes the forecast up by
            if key in frame.attrs:
                doc[key] = frame.attrs[key]
        return json.dumps(doc, separators=(",", ":"))

    def _cut(self, text: str, issued: int) -> str | None:
        """A forecast issued at `issued` cut to the `rows` hours from the one it was issued in (realized error scores
        those: a forecast whose last complete hours were missing begins before its issue hour); None where there is
        nothing to cut, or it does not parse (left as it is: load says so). Every record looks at every older
        forecast, all but one of them cut on an earlier record: its periods are read off its index alone, its values
        (most of its bytes) parsed only if it is to be cut. That is read from the forecast itself, not from what
        earlier records did, so it holds after a restart with other settings and for a forecast edited by hand (one
        not as _encode writes it is parsed whole)."""
        if self.rows is None:
            return None
        end = issued - issued % 3600 + self.rows * 3600
        index = _index(text)
        if index is not None and all(isinstance(t, int) and t < end for t in index):
            return None
        try:
            doc = json.loads(text)
            rows = [row for row in zip(doc["index"], doc["values"], strict=True) if row[0] < end]
            if len(rows) == len(doc["index"]):
                return None
            doc["index"], doc["values"] = [t for t, _ in rows], [v for _, v in rows]
        except (ValueError, KeyError, TypeError):
            return None
        return json.dumps(doc, separators=(",", ":"))

    @staticmethod
    def _decode(text: str):
        import pandas as pd

        doc = json.loads(text)
        index = pd.DatetimeIndex(pd.to_datetime(doc["index"], unit="s", utc=True), name="timestamp")
        frame = pd.DataFrame(doc["values"], index=index, columns=[float(c) for c in doc["columns"]], dtype=float)
        if SCALE in doc:
            frame.attrs[SCALE] = float("nan") if doc[SCALE] is None else float(doc[SCALE])
        frame.attrs.update({key: doc[key] for key in FORECAST_TAKEN_UP_BY if key in doc})
        return frame

    def _data(self, series: str) -> dict[str, str]:
        try:
            return self.cluster.get(self._path(series)).get("data") or {}
        except NotFound:
            return {}

    def record(self, series: str, issued_at, frame) -> None:
        import pandas as pd

        issued = int(pd.Timestamp(issued_at).timestamp())
        value = self._encode(frame)
        if len(value) > self.max_bytes:
            raise ValueError(f"{series}: a forecast of {len(value)} bytes does not fit in a ConfigMap")

        def mutate(cm: dict) -> dict:
            data = dict(cm.get("data") or {})
            data[str(issued)] = value
            kept = sorted(int(k) for k in data if k.isdigit() and int(k) >= issued - self.keep_seconds)
            patch: dict[str, str | None] = {}
            for k in kept:
                cut = self._cut(data[str(k)], k) if k < kept[-1] - self.whole_seconds else None
                if cut is not None:  # no new leader plans on it any more: realized error's periods are enough
                    data[str(k)] = patch[str(k)] = cut
            while len(kept) > 1 and sum(len(data[str(k)]) + len(str(k)) for k in kept) > self.max_bytes:
                kept.pop(0)  # the oldest go first
            wanted = {str(k) for k in kept}
            patch.update({k: None for k in data if k not in wanted})
            if str(issued) in wanted:
                patch[str(issued)] = data[str(issued)]
            return {"data": patch}

        path = self._path(series)
        try:
            self.cluster._update(path, mutate)
        except NotFound:
            body = {"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": self.name(series), "namespace": self.namespace,
                                 "labels": {FORECAST_LOG_LABEL: "true", "app.kubernetes.io/managed-by": "headroom"},
                                 "annotations": {FORECAST_SERIES_ANNOTATION: series}},
                    "data": {str(issued): value}}
            try:
                self.cluster._request("POST", self._path(), body)
            except Conflict:  # created in between (another writer): merge into it
                self.cluster._update(path, mutate)

    def load(self, series: str, since=None) -> dict:
        """Forecasts of `series` by issue time (UTC Timestamps), those issued at or after `since` if given; one that
        does not parse is left out, with a warning."""
        import pandas as pd

        floor = pd.Timestamp(since).timestamp() if since is not None else None
        out = {}
        for key, text in sorted(self._data(series).items()):
            if not key.isdigit() or (floor is not None and int(key) < floor):
                continue
            try:
                out[pd.Timestamp(int(key), unit="s", tz="UTC")] = self._decode(text)
            except (ValueError, KeyError, TypeError) as exc:  # edited by hand: it alone is lost, not the hour's refit
                log.warning("%s: the forecast %s in ConfigMap %s/%s does not parse, left out: %s", series, key,
                            self.namespace, self.name(series), exc)
        return dict(sorted(out.items()))

    def prune(self, series: str, before) -> int:
        """Drop forecasts of `series` issued before `before`; how many went. Its ConfigMap goes once it holds nothing
        (every forecast of a policy deleted; a key or binaryData someone put beside them keeps it), unless written
        since (a forecast recorded meanwhile: its resourceVersion is the delete's precondition)."""
        import pandas as pd

        limit = pd.Timestamp(before).timestamp()
        gone: list[str] = []

        def mutate(cm: dict) -> dict | None:
            gone[:] = [k for k in (cm.get("data") or {}) if k.isdigit() and int(k) < limit]
            return {"data": {k: None for k in gone}} if gone else None

        path = self._path(series)
        try:
            held, _ = self.cluster._update(path, mutate)
        except NotFound:
            return 0
        if not held.get("data") and not held.get("binaryData"):
            meta = held["metadata"]
            try:
                self.cluster.delete(path, {"uid": meta["uid"], "resourceVersion": meta["resourceVersion"]})
            except Conflict:  # written since: it holds a forecast again
                pass
            except ClusterError as exc:
                if exc.status != 403:
                    raise
                # deploy/base's Role grants delete; a Role from before it did not: the forecasts are gone all the same
                log.warning("%s: its ConfigMap %s/%s stays, empty: %s", series, self.namespace, self.name(series), exc)
        return len(gone)

    def series(self) -> dict[str, str]:
        """Every series held: its name -> its ConfigMap's name (one LIST by label)."""
        items = self.cluster._request("GET", self._path(), query={"labelSelector": f"{FORECAST_LOG_LABEL}=true"})
        return {(i["metadata"].get("annotations") or {}).get(FORECAST_SERIES_ANNOTATION, ""): i["metadata"]["name"]
                for i in items.get("items", [])}


@dataclass
class PlanSummary:
    """The cluster-wide numbers of the last plan (slack lent, headroom at risk, slack ahead) in one ConfigMap, so
    the policies' statuses carry only their own. Written by server-side apply, one request, only when something
    but the plan id changed (and at least every STATUS_REFRESH_SECONDS, so lastPlanTime says the controller is
    alive); a new leader writes it on its first reconcile."""
    cluster: KubeCluster
    namespace: str
    name: str = PLAN_SUMMARY
    _written: tuple[dict[str, str], float] | None = field(default=None, repr=False)  # (data without planId, when)

    def write(self, data: Mapping[str, str]) -> bool:
        """True if it was written."""
        said = {k: v for k, v in data.items() if k != "planId"}
        if (self._written is not None and self._written[0] == said
                and time.monotonic() - self._written[1] < STATUS_REFRESH_SECONDS):
            return False
        body = {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": self.name, "namespace": self.namespace,
                             "labels": {"app.kubernetes.io/managed-by": "headroom"}},
                "data": {**data, "lastPlanTime": _rfc3339(_now())}}
        self.cluster.apply(f"/api/v1/namespaces/{self.namespace}/configmaps/{self.name}", body)
        self._written = (said, time.monotonic())
        return True

    def forget(self) -> None:
        """What was last written is forgotten, so the next write goes out: a replica that takes the Lease again does
        not know what the other leader wrote meanwhile."""
        self._written = None

    def read(self) -> dict[str, str]:
        return self.cluster.get(f"/api/v1/namespaces/{self.namespace}/configmaps/{self.name}").get("data") or {}
