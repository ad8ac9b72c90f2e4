"""Applying actions: each re-validated against fresh state just before it is applied (Karpenter validates a
disruption command again before it acts; Kueue's IssuePreemptions checks each target is still admitted).

  * Scale and SetQuota: skipped if the cluster already holds the value (another writer, or a restart
    mid-reconcile, got there first);
  * Evict: only if the Workload is still running with the same uid in the same queue, and a plan made
    on a fresh view still stops it (`still_wanted`); never twice;
  * Requeue, PatchStatus, RecordEvent: the adapters' writes are idempotent.
A write that conflicts is retried by the adapter on a fresh read; one that fails is reported in its
Outcome and does not stop the others. A `fence` (the controller's: this replica still holds its Lease) is asked
before each write: once it says no, nothing more is written (NOT_LEADER), as another replica may lead. It says until
when the write may take, too (the reconcile's deadline, or the Lease's end if earlier: core.deadline): every request
of the write ends by then, and once that moment has passed nothing more is written (PAST_DEADLINE). An
action's Event is recorded once the action has changed something: at once, or handed to an EventsBeside that sends
it off the reconcile's path.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from controller.actions import (
    Action,
    EventNote,
    Evict,
    PatchStatus,
    RecordEvent,
    Requeue,
    Scale,
    SetQuota,
    stop_seconds,
)
from core.cluster import Cluster
from core.deadline import within
from core.errors import ClusterError, NotFound
from core.objects import ObjectRef, WorkloadInfo

log = logging.getLogger(__name__)

NOT_LEADER = "not written: this replica no longer holds its Lease (another may lead)"
PAST_DEADLINE = "not written: its reconcile's deadline (or its Lease's end) had passed; the next reconcile acts anew"
# until when (time.monotonic()) this replica may write now; None: it may not (it no longer leads)
Fence = Callable[[], float | None]


def window(fence: Fence | None) -> tuple[float | None, str | None]:
    """(until when the next write may take, None: no bound; why it must not be made, None: it may)."""
    if fence is None:
        return None, None
    until = fence()
    if until is None:
        return None, NOT_LEADER
    return until, PAST_DEADLINE if until <= time.monotonic() else None


@dataclass(frozen=True)
class Outcome:
    action: Action
    applied: bool          # it changed something
    error: str | None = None
    skipped: str | None = None  # why it was not applied though it succeeded (already so, no longer wanted)

    @property
    def failure(self) -> str | None:
        """Why the action itself failed; None if it went through (or only its Event failed: "event: ...")."""
        return self.error if self.error and not self.error.startswith("event:") else None


def apply(action: Action, cluster: Cluster) -> bool:
    """One action on the cluster, as it stands (no re-validation); True if it changed something."""
    match action:
        case Scale(target=t, replicas=replicas, gpus=gpus):
            if t.kind == "ClusterQueue":
                return cluster.set_cluster_queue_quota(t.name, gpus)
            if t.namespace is None:
                raise ClusterError(f"{t.kind} {t.name}: no namespace")
            if t.kind == "Deployment":
                return cluster.scale_deployment(t.namespace, t.name, replicas)
            return cluster.set_hpa_min_replicas(t.namespace, t.name, replicas)
        case SetQuota(queue=q, gpus=gpus, lent=lent, lent_for=lent_for, replaces=replaces):
            return cluster.set_cluster_queue_quota(q, gpus, lent, lent_for, replaces)
        case Evict(workload=w, uid=uid, queue=queue, reason=reason, plan_id=plan_id):
            namespace, name = w.split("/", 1)
            return cluster.evict_workload(namespace, name, uid, reason, plan_id, queue)
        case Requeue(workload=w, uid=uid):
            namespace, name = w.split("/", 1)
            return cluster.requeue_workload(namespace, name, uid)
        case PatchStatus(policy=ref, status=status):
            return cluster.patch_policy_status(ref.namespace or "default", ref.name, status, uid=ref.uid)
        case RecordEvent(event=e):
            cluster.emit_event(e.about, e.reason, e.message, type=e.type)
            return True
    raise TypeError(f"not an action: {action!r}")


def _record(event: EventNote, cluster: Cluster) -> str | None:
    """Record `event` now; its error, if it failed."""
    try:
        cluster.emit_event(event.about, event.reason, event.message, type=event.type)
    except ClusterError as exc:
        return str(exc)
    return None


EVENT_SENDERS = 2  # the threads sending Events beside the reconciles
STATUS_WRITERS = 8  # the threads writing policy statuses beside them


class EventsBeside:
    """Events sent by background threads, off the reconcile's path, as client-go's EventRecorder does (a broadcaster
    with a bounded queue, best-effort): a thousand reservations moving at once must not hold up the evictions and
    statuses behind their Events. A full queue drops the event; drops and failures go to `failed(reason, error)`
    (the reconciler counts them as `events` errors). While `held()`, queued Events wait: the reconcile's own writes
    (a demand jump's scales and evictions) go to the API server first. Each is sent within `deadline()` (the
    reconcile's: core.deadline). flush() waits until what is queued is sent; drop() drops it, and every Event after
    (the replica lets its Lease go: nothing is sent once another could lead); close() sends what is queued (bounded
    by `timeout`)."""

    def __init__(self, cluster: Cluster, failed: Callable[[str, str], None], capacity: int = 4096,
                 workers: int = EVENT_SENDERS,
                 deadline: Callable[[], float | None] = lambda: None):
        self.cluster, self.failed, self.deadline = cluster, failed, deadline
        self._queue: queue.Queue[EventNote | None] = queue.Queue(capacity)
        self._open = threading.Event()  # cleared while held
        self._open.set()
        self._dropping = threading.Event()  # set by drop(): nothing is sent from then on
        self._threads = [threading.Thread(target=self._run, name=f"headroom-events-{k}", daemon=True)
                         for k in range(workers)]
        for t in self._threads:
            t.start()

    def __call__(self, event: EventNote) -> None:
        if self._dropping.is_set():
            return
        try:
            self._queue.put_nowait(event)
        except queue.Full:
            self.failed(event.reason, f"dropped: {self._queue.maxsize} events already queued")

    @contextmanager
    def held(self) -> Iterator[None]:
        """Queued Events wait until the block ends (one already on its way is sent)."""
        self._open.clear()
        try:
            yield
        finally:
            self._open.set()

    def _run(self) -> None:
        while (event := self._queue.get()) is not None:
            self._open.wait()
            if not self._dropping.is_set():  # (one taken from the queue as drop() emptied it)
                with within(self.deadline()):
                    error = _record(event, self.cluster)
                if error:
                    self.failed(event.reason, error)
            self._queue.task_done()

    def flush(self, timeout: float) -> bool:
        """Wait until every Event queued is sent (True) or `timeout` passes (False)."""
        with self._queue.all_tasks_done:
            return self._queue.all_tasks_done.wait_for(lambda: not self._queue.unfinished_tasks, timeout)

    def drop(self) -> int:
        """Send nothing more, queued or to come: the Events queued are dropped; how many. One already on its way is
        not called back (its request may land)."""
        self._dropping.set()
        dropped = 0
        while True:
            try:
                event = self._queue.get_nowait()
            except queue.Empty:
                return dropped
            self._queue.task_done()
            dropped += event is not None

    def close(self, timeout: float = 30.0) -> None:
        """Send what is queued, then stop (a queue the API server cannot take within `timeout` is left)."""
        end = time.monotonic() + timeout
        self._open.set()
        try:
            for _ in self._threads:
                self._queue.put(None, timeout=max(end - time.monotonic(), 0.001))
        except queue.Full:
            pass  # daemon threads: what is still queued goes with the process
        for t in self._threads:
            t.join(max(end - time.monotonic(), 0))


class StatusesBeside:
    """Policy statuses written by background threads after the reconcile that made them, as a Kubernetes
    controller's status work queue does: at most one write waiting per policy (a newer status replaces one not yet
    written: only the newest is worth writing) and never two of one policy's at once (a later one could land
    first). A reconcile's decisions and writes (scales, quotas, evictions) do not wait for a thousand statuses.
    `written(action, error, seconds)` is told of each: its error (None: none) and how long after it was handed over
    it landed (None: it said nothing new, so nothing was written). flush() waits for what is queued; close()
    writes it, then stops."""

    def __init__(self, cluster: Cluster, written: Callable[[PatchStatus, str | None, float | None], None],
                 workers: int = STATUS_WRITERS, fence: Fence | None = None):
        self.cluster, self.written, self.fence = cluster, written, fence
        self._latest: dict[ObjectRef, tuple[PatchStatus, float]] = {}  # policy -> (its newest status, handed over at)
        self._queue: deque[ObjectRef] = deque()   # policies with a status to write, in the order they came
        self._queued: set[ObjectRef] = set()
        self._writing: set[ObjectRef] = set()
        self._closing = False
        self._changed = threading.Condition()
        self._threads = [threading.Thread(target=self._run, name=f"headroom-statuses-{k}", daemon=True)
                         for k in range(workers)]
        for t in self._threads:
            t.start()

    def __call__(self, statuses: Sequence[PatchStatus]) -> None:
        now = time.monotonic()
        with self._changed:
            for a in statuses:
                self._latest[a.policy] = (a, now)
                if a.policy not in self._queued and a.policy not in self._writing:
                    self._queue.append(a.policy)
                    self._queued.add(a.policy)
            self._changed.notify_all()

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._queue and not self._closing:
                    self._changed.wait()
                if not self._queue:
                    return
                policy = self._queue.popleft()
                self._queued.discard(policy)
                self._writing.add(policy)
                action, since = self._latest.pop(policy)
            error, wrote = None, True
            until, refused = window(self.fence)
            try:
                if refused:
                    error, wrote = refused, False
                else:
                    with within(until):
                        wrote = apply(action, self.cluster)
            except ClusterError as exc:
                error = str(exc)
            self.written(action, error, time.monotonic() - since if wrote else None)
            with self._changed:
                self._writing.discard(policy)
                if policy in self._latest and policy not in self._queued:  # a newer one came while this was written
                    self._queue.append(policy)
                    self._queued.add(policy)
                self._changed.notify_all()

    def waiting(self) -> int:
        """Policies with a status handed over and not yet written."""
        with self._changed:
            return len(self._latest.keys() | self._writing)

    def flush(self, timeout: float = 60.0) -> bool:
        """Wait until every status handed over is written (True) or `timeout` passes (False)."""
        with self._changed:
            return self._changed.wait_for(lambda: not (self._queue or self._writing), timeout)

    def close(self, timeout: float = 30.0) -> None:
        """Write what is queued (bounded by `timeout`), then stop."""
        self.flush(timeout)
        with self._changed:
            self._closing = True
            self._changed.notify_all()
        for t in self._threads:
            t.join(1.0)


def execute(actions: Sequence[Action], cluster: Cluster,
            still_wanted: Callable[[list[Evict]], set[str]] | None = None,
            record: Callable[[EventNote], str | None] | None = None,
            fence: Fence | None = None) -> list[Outcome]:
    """Apply `actions` in order (inference first: it must never wait for training); `still_wanted` re-plans
    on a fresh view and returns the Workloads a fresh plan still evicts (None: trust the plan as made); `record`
    records an Event and returns its error (None: at once, on `cluster`); `fence` says until when this replica may
    write (None: always, unbounded): once it says no, the rest are skipped as NOT_LEADER, once that moment has
    passed as PAST_DEADLINE."""
    record = record or (lambda event: _record(event, cluster))
    evictions = [a for a in actions if isinstance(a, Evict)]
    wanted = still_wanted(evictions) if evictions and still_wanted is not None else None
    running: dict[str, WorkloadInfo] | None = None
    out: list[Outcome] = []
    for a in actions:
        until, refused = window(fence)
        if refused:
            out.append(Outcome(a, False, skipped=refused))
            continue
        with within(until):  # every request of this action ends by then
            if isinstance(a, RecordEvent):
                error = record(a.event)
                out.append(Outcome(a, error is None, error=error))
                continue
            try:
                if isinstance(a, Evict):
                    if running is None:
                        running = {w.key: w for w in cluster.workloads() if w.running}
                    w = running.get(a.workload)
                    if w is None or w.uid != a.uid or w.cluster_queue != a.queue:
                        out.append(Outcome(a, False, skipped="no longer running as planned"))
                        continue
                    if a.chosen_as is not None and (w.priority, stop_seconds(w)) != a.chosen_as:
                        log.info("preemption of %s dropped: its priority or preemption-seconds changed since its plan; "
                                 "the next reconcile plans on them", a.workload)
                        out.append(Outcome(a, False, skipped="its priority or preemption-seconds changed since its "
                                                             "plan"))
                        continue
                    if wanted is not None and a.workload not in wanted:
                        log.info("preemption of %s dropped: a fresh plan no longer needs it", a.workload)
                        out.append(Outcome(a, False, skipped="a fresh plan no longer needs it"))
                        continue
                applied = apply(a, cluster)
                if isinstance(a, Evict) and running is not None:
                    running.pop(a.workload, None)  # never twice, even if the list asks twice
            except NotFound as exc:
                if isinstance(a, Evict | Requeue):  # deleted since the view (finished, its Job gone): nothing to stop
                    out.append(Outcome(a, False, skipped="it no longer exists"))
                    continue
                out.append(Outcome(a, False, error=str(exc)))
                continue
            except ClusterError as exc:
                out.append(Outcome(a, False, error=str(exc)))
                continue
            event: EventNote | None = getattr(a, "event", None)
            event_error = record(event) if applied and event is not None else None
            out.append(Outcome(a, applied, error=f"event: {event_error}" if event_error else None))
    return out
