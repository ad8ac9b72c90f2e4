"""The reconciler's writes on the embedded cluster: Events sent beside the reconcile (controller.executor.EventsBeside),
the order a demand jump's writes go in, and the statuses whose news is not urgent spread over reconciles."""
import threading
import time
from dataclasses import replace

import pytest

import controller.reconcile as reconcile
from controller.actions import EventNote, PatchStatus, Requeue, Scale, SetQuota
from controller.executor import PAST_DEADLINE, EventsBeside, Outcome, StatusesBeside, execute
from controller.reconcile import Reconciler
from core.deadline import current as current_deadline
from core.objects import Condition, ObjectRef, PolicyStatus, TargetRef
from core.settings import RunConfig
from tests.test_actions import CHAT, Flaky, busy_world, observe, victims, world


class Gated:
    """The embedded cluster, its Events held at a gate: the API server slow to take them."""

    def __init__(self, inner):
        self.inner, self.entered, self.gate = inner, threading.Event(), threading.Event()

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def emit_event(self, *args, **kwargs):
        self.entered.set()
        self.gate.wait(10)
        return self.inner.emit_event(*args, **kwargs)


class Noting:
    """The embedded cluster, noting each write in the order it comes."""

    def __init__(self, inner):
        self.inner, self.writes = inner, []

    def __getattr__(self, name):
        attr = getattr(self.inner, name)
        if name not in ("scale_deployment", "set_cluster_queue_quota", "evict_workload", "requeue_workload"):
            return attr

        def noted(*args):
            self.writes.append((name, args[1] if name == "scale_deployment" else args[0]))
            return attr(*args)
        return noted


def test_events_beside_are_sent_after_the_writes_they_follow_and_all_of_them_by_close():
    w, failed = world(), []
    events = EventsBeside(w, lambda what, error: failed.append((what, error)))
    scale = Scale(CHAT.key, CHAT.target, 5, 10, "up", EventNote(CHAT.ref, "ReservationChanged", "0 -> 5"))
    out = execute([scale, SetQuota("train-a", 40, "slack", EventNote(CHAT.ref, "SlackLent", "40"))], w, record=events)
    assert [(o.applied, o.error) for o in out] == [(True, None), (True, None)]
    events.close()
    assert [e["reason"] for e in w.events] == ["ReservationChanged", "SlackLent"] and failed == []


def test_events_held_while_the_reconcile_writes_are_sent_when_it_ends():
    w, failed = world(), []
    events = EventsBeside(w, lambda what, error: failed.append((what, error)))
    with events.held():
        events(EventNote(CHAT.ref, "ReservationChanged", "0 -> 5"))
        time.sleep(0.3)  # time enough for a sender that does not wait
        assert w.events == []
    deadline = time.monotonic() + 10
    while not w.events and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [e["reason"] for e in w.events] == ["ReservationChanged"]
    with events.held():
        events(EventNote(CHAT.ref, "SlackLent", "40"))
        events.close(timeout=10)  # closing sends what is held
    assert [e["reason"] for e in w.events] == ["ReservationChanged", "SlackLent"] and failed == []


def test_a_full_event_queue_drops_and_reports_and_a_failed_event_is_reported():
    gated, failed = Gated(world()), []
    events = EventsBeside(gated, lambda what, error: failed.append((what, error)), capacity=1, workers=1)
    events(EventNote(CHAT.ref, "First", "taken by the sender, held at the gate"))
    assert gated.entered.wait(10)
    events(EventNote(CHAT.ref, "Second", "queued"))
    events(EventNote(CHAT.ref, "Third", "the queue is full"))
    assert failed == [("Third", "dropped: 1 events already queued")]
    gated.gate.set()
    events.close()
    assert [e["reason"] for e in gated.inner.events] == ["First", "Second"]
    failed.clear()
    broken = EventsBeside(Flaky(world(), {"emit_event"}), lambda what, error: failed.append((what, error)))
    broken(EventNote(CHAT.ref, "Lost", "the API server refuses it"))
    broken.close()
    assert failed == [("Lost", "emit_event: connection refused")]


def test_a_demand_jump_evicts_before_the_reservations_it_does_not_need():
    """The reservation the preemption is made for and the quota going down come first, then the evictions, then the
    other reservations, the quotas going up and the requeues."""
    w = busy_world()
    evict = victims(w, 1)[0]
    noting = Noting(w)
    r = Reconciler(noting, None, RunConfig())  # type: ignore[arg-type]  # no demand is read here
    other = TargetRef("Deployment", "other", "default")
    actions = [Scale("default/other", other, 3, 6, "ramp"), Scale(CHAT.key, CHAT.target, 8, 16, "jump"),
               SetQuota("train-b", 9, "up"), SetQuota("train-a", 30, "down"), evict,
               Requeue("nobody/x", None, "train-a", "done")]
    seen = observe(w)
    r._apply(actions, replace(seen, quotas={**seen.quotas, "train-b": 2}), lambda: {evict.workload})
    assert [name for name, _ in noting.writes] == ["scale_deployment", "set_cluster_queue_quota", "evict_workload",
                                                  "scale_deployment", "set_cluster_queue_quota", "requeue_workload"]
    assert [what for _, what in noting.writes[:2]] == ["chat", "train-a"]


class Quotas:
    """The embedded cluster, saying whether it takes writes side by side, noting each quota write and the thread it
    came on (not applied: its state is not for threads)."""

    def __init__(self, inner, side_by_side: bool):
        self.inner, self.writes_side_by_side, self.writes = inner, side_by_side, []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def set_cluster_queue_quota(self, name, gpus, *args):
        self.writes.append((gpus, threading.current_thread().name))
        return True


def test_many_writes_of_a_kind_go_in_their_order_on_a_cluster_that_takes_them_one_by_one():
    """More than 16 writes of a kind went 8 at a time on 8 threads (actions[k::8] each), whatever the cluster: the
    embedded one got them out of their order (1, 9, 17, 2, ... or as the threads took them), where each is a Kueue
    event that may admit and simulate writes them in order. Where the cluster takes writes one by one they go so, in
    order, on the reconcile's thread; an API server still gets them side by side."""
    quotas = [SetQuota("train-a", gpus, "up") for gpus in range(1, 21)]
    serial = Quotas(world(), side_by_side=False)
    Reconciler(serial, None, RunConfig())._in_parallel(quotas)  # type: ignore[arg-type]  # no demand is read here
    assert serial.writes == [(gpus, threading.current_thread().name) for gpus in range(1, 21)]
    beside = Quotas(world(), side_by_side=True)
    r = Reconciler(beside, None, RunConfig())  # type: ignore[arg-type]
    r._in_parallel(quotas)
    assert sorted(gpus for gpus, _ in beside.writes) == list(range(1, 21))
    assert all(thread.startswith("headroom-io") for _, thread in beside.writes)
    r.close()


@pytest.fixture
def spread(monkeypatch):
    monkeypatch.setattr(reconcile, "STATUS_SPREAD", 2)


def test_statuses_without_urgent_news_are_spread_the_longest_waiting_first(spread):
    w = world()
    r = Reconciler(w, None, RunConfig())  # type: ignore[arg-type]
    refs = [ObjectRef("headroom.dev/v1alpha1", "ReservationPolicy", f"p{k}", "default") for k in range(5)]

    def statuses(reserved=4, hour="10:00", plan="a"):
        return [PatchStatus(ref, PolicyStatus(reserved, 1, (Condition("Ready", "True", "Active"),), plan_id=plan,
                                              next_hours=({"hour": hour},))) for ref in refs]

    def written():
        return [(w.statuses[("default", ref.name)]["nextHours"][0]["hour"], w.statuses[("default", ref.name)][
            "reservedGpus"]) for ref in refs]

    r._execute(statuses())  # nothing said yet: every status now
    assert written() == [("10:00", 4)] * 5
    r._execute(statuses(plan="b"))  # nothing new: passed on (the adapter writes only an hour-old one)
    r._execute(statuses(hour="11:00", plan="c"))  # the hours roll forward: two a reconcile
    assert written() == [("11:00", 4)] * 2 + [("10:00", 4)] * 3
    fresher = statuses(hour="11:00", plan="d")
    fresher[0] = statuses(hour="12:00", plan="d")[0]  # news for p0 again: it waits behind the three still waiting
    r._execute(fresher)
    assert written() == [("11:00", 4)] * 4 + [("10:00", 4)]
    r._execute(statuses(reserved=6, hour="11:00", plan="e"))  # a reservation moved: every status at once
    assert written() == [("11:00", 6)] * 5


class StatusGate:
    """The embedded cluster, its status writes held at a gate and noted (how many at once, in what order)."""

    def __init__(self, inner):
        self.inner, self.gate, self.entered = inner, threading.Event(), threading.Event()
        self.written, self.at_once, self._now, self._lock = [], 0, 0, threading.Lock()

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def patch_policy_status(self, namespace, name, status, uid=None):
        with self._lock:
            self._now += 1
            self.at_once = max(self.at_once, self._now)
        self.entered.set()
        self.gate.wait(10)
        with self._lock:
            self._now -= 1
            self.written.append((name, status.reserved_gpus))
        return self.inner.patch_policy_status(namespace, name, status, uid)


def _status(name: str, reserved: int) -> PatchStatus:
    return PatchStatus(ObjectRef("headroom.dev/v1alpha1", "ReservationPolicy", name, "default"),
                       PolicyStatus(reserved, 1, (Condition("Ready", "True", "Active"),)))


def test_statuses_beside_write_the_newest_per_policy_one_at_a_time_and_report_each():
    gated, seen = StatusGate(world()), []
    statuses = StatusesBeside(gated, lambda a, error, seconds: seen.append((a.policy.name, a.status.reserved_gpus,
                                                                            error, seconds >= 0)), workers=4)
    statuses([_status("p0", 1)])
    assert gated.entered.wait(10)  # p0's first status is being written, held at the gate
    statuses([_status("p0", 2), _status("p1", 1)])
    statuses([_status("p0", 3)])  # replaces 2, not yet written
    assert not statuses.flush(timeout=0.2)
    assert statuses.waiting() == 2  # p0 (its 1 being written, its 3 waiting) and p1
    gated.gate.set()
    assert statuses.flush(timeout=10)
    assert statuses.waiting() == 0
    assert sorted(gated.written) == [("p0", 1), ("p0", 3), ("p1", 1)]
    assert [r for n, r in gated.written if n == "p0"] == [1, 3]  # in order, the stale one never written
    assert gated.at_once <= 2  # p0's two writes never side by side (p1's may be beside either)
    assert gated.inner.statuses[("default", "p0")]["reservedGpus"] == 3
    assert sorted(seen) == [("p0", 1, None, True), ("p0", 3, None, True), ("p1", 1, None, True)]
    statuses.close()
    failed = []
    broken = StatusesBeside(Flaky(world(), {"patch_policy_status"}), lambda a, error, s: failed.append(error))
    broken([_status("p0", 1)])
    broken.close(timeout=10)
    assert failed == ["patch_policy_status: connection refused"]


def test_a_reconciler_with_statuses_beside_notes_what_was_written_and_counts_failures():
    w = world()
    r = Reconciler(w, None, RunConfig(), statuses_beside=True)  # type: ignore[arg-type]  # no demand is read here
    r._execute([_status("p0", 4), _status("p1", 4)])
    assert r._statuses is not None and r._statuses.flush(10)
    assert {k: v["reservedGpus"] for k, v in w.statuses.items()} == {("default", "p0"): 4, ("default", "p1"): 4}
    assert len(r.status_lags()) == 2 and r.status_lags() == []
    assert r._status_lag.count == 2  # what /metrics shows (headroom_status_write_lag_seconds) keeps them
    r._execute([_status("p0", 5)])
    r.close()  # what is queued is written on the way out
    assert w.statuses[("default", "p0")]["reservedGpus"] == 5
    r.close()
    broken = Reconciler(Flaky(world(), {"patch_policy_status"}), None, RunConfig(),  # type: ignore[arg-type]
                        statuses_beside=True)
    broken._execute([_status("p0", 4)])
    broken.close()
    assert broken._errors == {"status": 1}


class Bounded:
    """The embedded cluster, noting the deadline (core.deadline) each write is made within."""

    def __init__(self, inner):
        self.inner, self.deadlines = inner, []

    def __getattr__(self, name):
        attr = getattr(self.inner, name)
        if name not in ("scale_deployment", "set_cluster_queue_quota"):
            return attr

        def noted(*args):
            self.deadlines.append(current_deadline())
            return attr(*args)
        return noted


def test_each_write_is_made_within_the_fence_s_bound_and_none_once_it_has_passed():
    """The fence says until when a write may take (its reconcile's deadline, or the Lease's end if earlier): each
    write's requests end by then (adapters.kube reads it), and once that moment has passed nothing more is written."""
    actions = [Scale(CHAT.key, CHAT.target, 5, 10, "up"), SetQuota("train-a", 40, "slack")]
    cluster = Bounded(world())
    until = time.monotonic() + 60
    out = execute(actions, cluster, fence=lambda: until)
    assert [o.applied for o in out] == [True, True] and cluster.deadlines == [until, until]
    assert current_deadline() is None  # the bound is the write's, not the caller's
    cluster = Bounded(world())
    out = execute(actions, cluster, fence=lambda: time.monotonic() - 0.001)
    assert [o.skipped for o in out] == [PAST_DEADLINE, PAST_DEADLINE] and cluster.deadlines == []


class Behind:
    """The embedded cluster, its Workloads read as they were (a watch cache that has not yet seen a write land)."""

    def __init__(self, inner, workloads):
        self.inner, self.held = inner, workloads

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def workloads(self):
        return self.held


def test_an_eviction_whose_answer_was_lost_is_counted_once_when_it_is_seen_to_have_landed():
    """The eviction's write landed but its answer was lost (the reconcile's deadline came first): the next reconcile
    counts it once its Workload is seen stopped by that plan, not while a cache behind the server still shows it
    running, and never twice."""
    w = busy_world()
    (e,) = victims(w, 1)
    running = w.workloads()
    r = Reconciler(w, None, RunConfig())  # type: ignore[arg-type]  # no demand is read here
    namespace, name = e.workload.split("/")
    assert w.evict_workload(namespace, name, e.uid, e.reason, e.plan_id)  # it landed; the reconcile never heard
    r._count([Outcome(e, False, error="PATCH ...: unreachable: no time left before its deadline")], [])
    r.cluster = Behind(w, running)
    r._landed_late()
    assert r._preemptions == {}
    r.cluster = w
    r._landed_late()
    r._landed_late()
    assert r._preemptions == {e.kind: 1}
