"""Actions as values (controller.actions.cluster_actions) and applying them (controller.executor.execute) on the
embedded cluster, built as controller/simulate.py builds it."""
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapters.embedded import EmbeddedCluster
from controller.actions import (
    EventNote,
    Evict,
    PatchStatus,
    PolicyTarget,
    RecordEvent,
    Requeue,
    Scale,
    SetQuota,
    Stopped,
    View,
    cluster_actions,
    evicted_gpus,
    in_write_order,
)
from controller.executor import execute
from controller.reconcile import training_view
from core.errors import ClusterError
from core.objects import Condition, ObjectRef, PolicyStatus, TargetRef, TargetState
from core.policy import API_VERSION, KIND, PolicySpec, manifest
from core.settings import WorldSettings
from core.units import whole_replicas
from planning.planner import Preemption, StepPlan, Training, WorkloadStep

NOW = pd.Timestamp("2026-01-08 10:07", tz="UTC").timestamp()


def target(name, kind="Deployment", gpr=2, active=True, inference_queue=None, training_queues=("train-a",)):
    ns = None if kind == "ClusterQueue" else "prod"
    return PolicyTarget(f"prod/{name}", ObjectRef(API_VERSION, KIND, name, "prod"), TargetRef(kind, f"{name}-t", ns),
                        gpr, active, inference_queue, tuple(training_queues))


def step(reserved: dict, lent=20, quotas=None, preemptions=(), now=NOW) -> StepPlan:
    ws = tuple(WorkloadStep(k, g, g, 0, 0, 2, True, False) for k, g in reserved.items())
    return StepPlan(now, ws, lent, {"train-a": lent} if quotas is None else quotas, 2, tuple(preemptions))


def running(*jobs) -> Training:
    """jobs: (id, queue, gpus)"""
    n = len(jobs)
    return Training(tuple(j[0] for j in jobs), tuple(j[1] for j in jobs), np.array([j[2] for j in jobs], np.int64),
                    np.zeros(n, np.int64), np.full(n, 60.0), np.full(n, 1800.0), np.full(n, NOW - 300))


def view(targets=None, quotas=None, training=None, stopped=()) -> View:
    training = training or running()
    return View(targets or {}, {"train-a": 20, **(quotas or {})}, training,
                {j: f"uid-{j}" for j in training.ids}, tuple(stopped))


def preempt(job, at=NOW, kind="emergency", workload="prod/chat") -> Preemption:
    return Preemption(job, 8, kind, at, 120.0, workload, "observed demand above the forecast")


# --------------------------------------------------------------------------------------------- cluster_actions
def test_steady_state_issues_no_action_and_each_difference_one():
    chat = target("chat")
    steady = view({"prod/chat": TargetState(5, 5)})
    assert cluster_actions(step({"prod/chat": 10}), steady, [chat], "p1") == []
    (a,) = cluster_actions(step({"prod/chat": 14}), steady, [chat], "p1")
    assert isinstance(a, Scale) and (a.replicas, a.gpus, a.target) == (7, 14, chat.target)
    assert a.event.reason == "ReservationChanged" and a.event.about == chat.ref and "5 -> 7" in a.event.message
    assert a.reason and a.reason == step({"prod/chat": 14}).workloads[0].reason
    odd = cluster_actions(step({"prod/chat": 11}), steady, [chat], "p1")  # 11 GPUs need 6 replicas of 2
    assert [(x.replicas, x.gpus) for x in odd] == [(6, 11)]
    (q,) = cluster_actions(step({"prod/chat": 10}, lent=26), steady, [chat], "p1")
    assert isinstance(q, SetQuota) and (q.queue, q.gpus) == ("train-a", 26) and q.event.reason == "SlackLent"
    # a missing target is scaled (the adapter reports NotFound)
    missing = cluster_actions(step({"prod/chat": 10}), view({"prod/chat": None}), [chat], "p")
    assert [type(x) for x in missing] == [Scale]


def test_forecast_only_policies_get_no_cluster_actions():
    watch = target("chat", active=False, inference_queue="inf-cq")
    v = view({"prod/chat": TargetState(1, 1)}, quotas={"train-a": 0, "inf-cq": 0},
             training=running(("training/j", "train-a", 8)),
             stopped=(Stopped("training/old", "uid-old", "train-a"),))
    s = step({"prod/chat": 30}, lent=40, preemptions=[preempt("training/j")])
    assert cluster_actions(s, v, [watch], "p") == []
    # ...and what it would do, once active
    kinds = [type(a) for a in cluster_actions(s, v, [replace(watch, active=True)], "p")]
    assert kinds == [Scale, SetQuota, SetQuota, Evict, Requeue]


@given(st.integers(1, 2**62), st.integers(1, 1024))
def test_a_target_is_scaled_to_the_fewest_whole_replicas_holding_its_reservation(gpus, per_replica):
    """The replicas were math.ceil of a float division, beside core.units.whole_replicas' integer one: the same for
    every reservation a cluster of at most MAX_CLUSTER_GPUS holds, but 2**53 + 1 GPUs of 1-GPU replicas were 2**53
    replicas. One integer count now serves both."""
    (a,) = cluster_actions(step({"prod/chat": gpus}), view(), [target("chat", gpr=per_replica)], "p")
    assert (a.replicas - 1) * per_replica < gpus <= a.replicas * per_replica
    assert a.replicas * per_replica == whole_replicas(gpus, per_replica)


def test_hpa_min_replicas_is_at_least_one():
    hpa = target("embed", kind="HorizontalPodAutoscaler", gpr=1)
    (a,) = cluster_actions(step({"prod/embed": 0}), view({"prod/embed": TargetState(4, 4, min_replicas=3)}), [hpa], "p")
    assert (a.replicas, a.gpus) == (1, 0)
    one = view({"prod/embed": TargetState(4, 4, min_replicas=1)})
    assert cluster_actions(step({"prod/embed": 0}), one, [hpa], "p") == []
    # an HPA is compared on minReplicas, not on what it scaled to
    scaled = view({"prod/embed": TargetState(9, 9, min_replicas=6)})
    assert cluster_actions(step({"prod/embed": 6}), scaled, [hpa], "p") == []


def test_cluster_queue_targets_get_a_quota_and_shared_inference_queues_the_sum():
    cq = target("batch", kind="ClusterQueue", gpr=4)
    (a,) = cluster_actions(step({"prod/batch": 10}), view(quotas={"batch-t": 8}), [cq], "p")
    assert isinstance(a, Scale) and a.gpus == 10 and a.target.kind == "ClusterQueue"
    assert cluster_actions(step({"prod/batch": 10}), view(quotas={"batch-t": 10}), [cq], "p") == []
    chat, embed = target("chat", inference_queue="inf-cq"), target("embed", gpr=1, inference_queue="inf-cq")
    other = target("rank", gpr=1, inference_queue="inf-2")
    states = {"prod/chat": TargetState(4, 4), "prod/embed": TargetState(5, 5), "prod/rank": TargetState(3, 3)}
    s = step({"prod/chat": 8, "prod/embed": 5, "prod/rank": 3})
    got = [(a.queue, a.gpus) for a in cluster_actions(s, view(states, {"inf-cq": 0, "inf-2": 3}),
                                                       [chat, embed, other], "p") if isinstance(a, SetQuota)]
    assert got == [("inf-cq", 13)]
    # a forecast-only policy sharing the queue still counts: its pods run in it too
    got = [(a.queue, a.gpus) for a in cluster_actions(s, view(states, {"inf-cq": 0, "inf-2": 3}),
                                                       [chat, replace(embed, active=False), other], "p")
           if isinstance(a, SetQuota)]
    assert got == [("inf-cq", 13)]
    # ...but a queue only forecast-only policies use is left alone
    assert cluster_actions(s, view(states, {"inf-cq": 0, "inf-2": 0}),
                           [replace(chat, active=False), replace(embed, active=False), replace(other, active=False)],
                           "p") == []


def test_evictions_only_for_due_preemptions_in_queues_an_active_policy_owns():
    chat = target("chat", training_queues=("train-a",))
    watch = target("embed", active=False, training_queues=("train-b",))
    t = running(("training/a1", "train-a", 8), ("training/b1", "train-b", 8), ("training/x1", "elsewhere", 8),
                ("training/a2", "train-a", 8))
    s = step({"prod/chat": 10, "prod/embed": 2}, preemptions=[
        preempt("training/a1"), preempt("training/b1"), preempt("training/x1"),
        preempt("training/a2", at=NOW + 600, kind="planned")])  # a2: not due yet
    v = view({"prod/chat": TargetState(5, 5), "prod/embed": TargetState(1, 1)}, quotas={"train-b": 0}, training=t)
    actions = cluster_actions(s, v, [chat, watch], "plan-7")
    (e,) = [a for a in actions if isinstance(a, Evict)]
    assert (e.workload, e.uid, e.queue, e.gpus, e.kind, e.policy, e.plan_id) == (
        "training/a1", "uid-training/a1", "train-a", 8, "emergency", "prod/chat", "plan-7")
    assert e.event.about == ObjectRef("kueue.x-k8s.io/v1beta2", "Workload", "a1", "training")
    assert e.event.reason == "Preempted"
    assert "120 s of work lost" in e.event.message
    assert evicted_gpus(actions, "prod/chat") == 8 and evicted_gpus(actions, "prod/embed") == 0
    assert not any(isinstance(a, SetQuota) and a.queue == "train-b" for a in actions)


def test_stopped_victims_are_requeued_in_owned_queues_only():
    chat = target("chat", training_queues=("train-a",))
    v = view({"prod/chat": TargetState(5, 5)}, stopped=(Stopped("training/v1", "u1", "train-a"),
                                                         Stopped("training/v2", "u2", "someone-else")))
    (r,) = cluster_actions(step({"prod/chat": 10}), v, [chat], "p")
    assert isinstance(r, Requeue) and (r.workload, r.uid, r.queue) == ("training/v1", "u1", "train-a") and r.reason


def test_the_first_active_owner_of_a_training_queue_sets_its_quota_once():
    a, b = target("chat", training_queues=("train-a",)), target("embed", gpr=1, training_queues=("train-a", "train-b"))
    v = view({"prod/chat": TargetState(5, 5), "prod/embed": TargetState(2, 2)}, quotas={"train-a": 0, "train-b": 0})
    s = step({"prod/chat": 10, "prod/embed": 2}, lent=30, quotas={"train-a": 20, "train-b": 10})
    sets = [(x.queue, x.gpus, x.event.about.name) for x in cluster_actions(s, v, [a, b], "p")
            if isinstance(x, SetQuota)]
    assert sets == [("train-a", 20, "chat"), ("train-b", 10, "embed")]
    # a queue the plan has no share for gets none
    s = step({"prod/chat": 10, "prod/embed": 2}, lent=30, quotas={"train-a": 30})
    sets = [(x.queue, x.gpus) for x in cluster_actions(s, replace(v, quotas={"train-a": 30, "train-b": 4}), [a, b], "p")
            if isinstance(x, SetQuota)]
    assert sets == [("train-b", 0)]


def test_a_training_queue_lent_the_quota_it_already_has_is_marked_lent_into():
    """A queue lent GPUs its quota already holds (20 in train-a) was written nowhere, so its mark as lent into was
    not either: once no policy names it, it is not returned (Reconciler._returned). Marked where the mark is missing
    or says otherwise; a queue lent none (train-b) holds nothing to return."""
    chat = target("chat", training_queues=("train-a", "train-b"))
    v = view({"prod/chat": TargetState(5, 5)}, quotas={"train-a": 20, "train-b": 0})
    s = step({"prod/chat": 10}, lent=20, quotas={"train-a": 20, "train-b": 0})
    assert cluster_actions(s, v, [chat], "p", marked={"train-a": 20}) == []
    for marked in ({}, {"train-a": 12}):
        sets = [(x.queue, x.gpus, x.lent) for x in cluster_actions(s, v, [chat], "p", marked=marked)
                if isinstance(x, SetQuota)]
        assert sets == [("train-a", 20, True)], marked


# --------------------------------------------------------------------------------------------- execute
SPEC = PolicySpec.model_validate({"query": "q", "capacity": {"demandPerGpu": 10.0, "gpusPerReplica": 2},
                                  "mode": "active", "target": {"kind": "Deployment", "name": "chat"},
                                  "trainingClusterQueues": ["train-a"]})


def world(capacity=64) -> EmbeddedCluster:
    start = pd.Timestamp("2026-01-08 10:00", tz="UTC")
    index = pd.date_range(start - pd.Timedelta(days=1), start + pd.Timedelta(days=1), freq="5min")
    demand = pd.Series(50.0, index=index)
    return EmbeddedCluster(capacity, [manifest("chat", "default", SPEC)], {"default/chat": demand},
                           start=start.timestamp(), settings=WorldSettings(seed=3))


CHAT = PolicyTarget("default/chat", ObjectRef(API_VERSION, KIND, "chat", "default"),
                    TargetRef("Deployment", "chat", "default"), 2, True, None, ("train-a",))


def observe(w: EmbeddedCluster) -> View:
    training, uids, stopped = training_view(w.workloads(), {"train-a"}, w.now)
    state = w.target_state(CHAT.target, CHAT.gpus_per_replica)
    return View({CHAT.key: state}, w.cluster_queue_quotas(), training, uids, stopped)


def busy_world() -> EmbeddedCluster:
    """Inference at 10 GPUs and training admitted into a 40-GPU quota."""
    w = world()
    out = execute(cluster_actions(step({CHAT.key: 10}, lent=40), observe(w), [CHAT], ""), w)
    assert [o.applied for o in out] == [True, True]
    w.admit()
    assert 0 < w.training_gpus <= 40
    return w


def victims(w: EmbeddedCluster, n: int) -> list[Evict]:
    v = observe(w)
    due = [Preemption(j, int(g), "emergency", w.now, 0.0, CHAT.key, "test")
           for j, g in list(zip(v.training.ids, v.training.gpus))[:n]]
    s = step({CHAT.key: 10}, lent=40, preemptions=due, now=w.now)
    return [a for a in cluster_actions(s, v, [CHAT], "plan-1") if isinstance(a, Evict)]


def test_applied_actions_change_the_cluster_and_record_their_events_and_reapplying_changes_nothing():
    w = world()
    actions = cluster_actions(step({CHAT.key: 10}, lent=40), observe(w), [CHAT], "")
    out = execute(actions, w)
    assert [(type(o.action), o.applied, o.error, o.skipped) for o in out] == [(Scale, True, None, None),
                                                                            (SetQuota, True, None, None)]
    assert w.target_state(CHAT.target, 2).desired_replicas == 5 and w.cluster_queue_quotas()["train-a"] == 40
    assert [e["reason"] for e in w.events] == ["ReservationChanged", "SlackLent"]
    before = (len(w.events), w.target_state(CHAT.target, CHAT.gpus_per_replica), dict(w.cluster_queue_quotas()))
    again = execute(actions, w)  # a restart mid-reconcile re-applies the same plan
    assert [(o.applied, o.error) for o in again] == [(False, None), (False, None)]
    assert (len(w.events), w.target_state(CHAT.target, CHAT.gpus_per_replica), dict(w.cluster_queue_quotas())) == before
    # and a fresh look at the cluster asks for nothing more
    assert cluster_actions(step({CHAT.key: 10}, lent=40), observe(w), [CHAT], "") == []


def test_an_eviction_is_applied_once_and_skipped_when_the_workload_is_no_longer_running_as_planned():
    w = busy_world()
    (e,) = victims(w, 1)
    (o,) = execute([e], w)
    assert o.applied and o.error is None and w.events[-1]["reason"] == "Preempted"
    stopping = {x.key: x for x in w.workloads()}[e.workload]
    assert stopping.admitted and not stopping.active and stopping.evicted_by_plan == "plan-1"
    (o,) = execute([e], w)  # never twice
    assert not o.applied and o.skipped == "no longer running as planned"
    (e2,) = victims(w, 1)
    assert e2.workload != e.workload
    for stale in (replace(e2, uid="uid-someone-else"), replace(e2, queue="train-b"),
                  replace(e2, workload="training/no-such-job")):
        (o,) = execute([stale], w)
        assert not o.applied and o.skipped == "no longer running as planned" and o.error is None
    assert {x.key: x for x in w.workloads()}[e2.workload].active
    # twice in one list: the second is skipped
    out = execute([e2, e2], w)
    assert [(o.applied, o.skipped) for o in out] == [(True, None), (False, "no longer running as planned")]


def test_an_eviction_a_fresh_plan_no_longer_wants_is_dropped():
    w = busy_world()
    e1, e2 = victims(w, 2)
    asked = []

    def still_wanted(evictions):
        asked.append([a.workload for a in evictions])
        return {e2.workload}

    scale = Scale(CHAT.key, CHAT.target, 6, 12, "up")
    out = execute([scale, e1, e2], w, still_wanted=still_wanted)
    assert asked == [[e1.workload, e2.workload]]  # asked once, with every eviction
    assert [(o.applied, o.skipped) for o in out] == [(True, None), (False, "a fresh plan no longer needs it"),
                                                     (True, None)]
    state = {x.key: x.active for x in w.workloads()}
    assert state[e1.workload] and not state[e2.workload]
    # no eviction: the re-plan is not asked for
    execute([Scale(CHAT.key, CHAT.target, 7, 14, "up")], w, still_wanted=lambda _: pytest.fail("asked"))


def test_requeue_of_a_stopped_victim():
    w = busy_world()
    (e,) = victims(w, 1)
    execute([e], w)
    w.advance(w.now + 600)  # past its preemption time: stopped
    v = observe(w)
    assert [s.workload for s in v.stopped] == [e.workload]
    actions = cluster_actions(step({CHAT.key: 10}, lent=40, now=w.now), v, [CHAT], "")
    (r,) = [a for a in actions if isinstance(a, Requeue)]
    assert [o.applied for o in execute([r], w)] == [True]
    back = {x.key: x for x in w.workloads()}[e.workload]
    assert back.active and not back.admitted and back.evicted_by_plan is None
    assert [o.applied for o in execute([r], w)] == [False]  # idempotent
    assert observe(w).stopped == ()


class Flaky:
    """The embedded cluster, except that some writes fail as an unreachable API server's would."""

    def __init__(self, inner: EmbeddedCluster, fail: set[str]):
        self.inner, self.fail = inner, fail

    def __getattr__(self, name):
        attr = getattr(self.inner, name)
        if name in self.fail:
            def broken(*args, **kwargs):
                raise ClusterError(f"{name}: connection refused", status=503)
            return broken
        return attr


def test_a_failing_action_is_reported_and_does_not_stop_the_others():
    w = busy_world()
    (e,) = victims(w, 1)
    status = PolicyStatus(10, 2, (Condition("Ready", "True", "Planned"),))
    note = EventNote(CHAT.ref, "Hello", "a message")
    actions = [Scale(CHAT.key, CHAT.target, 8, 16, "up"), SetQuota("train-a", 30, "slack"), e,
               PatchStatus(CHAT.ref, status), RecordEvent(note)]
    out = execute(actions, Flaky(w, {"scale_deployment"}))
    assert out[0].error == "scale_deployment: connection refused" and not out[0].applied
    assert [(o.applied, o.error) for o in out[1:]] == [(True, None)] * 4
    assert w.cluster_queue_quotas()["train-a"] == 30 and not {x.key: x for x in w.workloads()}[e.workload].active
    assert w.target_state(CHAT.target, CHAT.gpus_per_replica).desired_replicas == 5  # unchanged
    assert w.statuses[("default", "chat")]["reservedGpus"] == 10
    assert [ev["reason"] for ev in w.events].count("Hello") == 1  # a RecordEvent is recorded once
    # the cluster refusing reads while re-validating an eviction: reported, the rest goes on
    (e2,) = victims(w, 1)
    out = execute([e2, SetQuota("train-a", 20, "slack")], Flaky(w, {"workloads"}))
    assert "workloads: connection refused" in out[0].error and out[1].applied
    # an event that cannot be recorded: the action stands, its Outcome says the event failed
    out = execute([SetQuota("train-a", 25, "slack", EventNote(CHAT.ref, "SlackLent", "m"))], Flaky(w, {"emit_event"}))
    assert out[0].applied and out[0].error == "event: emit_event: connection refused"
    assert w.cluster_queue_quotas()["train-a"] == 25
    # a write to something that does not exist (NotFound is a ClusterError)
    (o,) = execute([SetQuota("no-such-queue", 4, "x")], w)
    assert not o.applied and "not found" in o.error


def test_the_writes_go_in_the_order_a_demand_jump_needs_them():
    """The reconciler and simulate write in one order (each write is a Kueue event on the embedded cluster): the
    reservations preemptions are made for, the quotas that go down, each eviction once; then the other reservations,
    the quotas that go up (or stay, to be marked) and the requeues."""
    other = TargetRef("Deployment", "other", "default")
    chat, rest = Scale(CHAT.key, CHAT.target, 8, 16, "up"), Scale("default/other", other, 2, 2, "down")
    up, same, down = SetQuota("inference-q", 16, "up"), SetQuota("b", 5, "marked"), SetQuota("a", 10, "down")
    evict = Evict("ml/j1", "u1", "a", 4, "planned", CHAT.key, 0.0, "p", "why")
    requeue = Requeue("ml/j0", "u0", "a", "back")
    writes = in_write_order([rest, requeue, up, chat, evict, same, down, evict], {"inference-q": 8, "a": 20, "b": 5})
    assert writes == ([chat], [down], [evict], [rest], [up, same], [requeue])


def test_plan_act_observe_plan_again_is_steady():
    """The real planner's step on the embedded cluster: its actions applied, a fresh view of the cluster asks for
    nothing more until time passes."""
    from planning.planner import ClusterPolicy, History, Observed, WorkloadPolicy, plan_hours, plan_step

    w = busy_world()
    wp = WorkloadPolicy.from_spec(CHAT.key, SPEC)
    policy = ClusterPolicy(64, (wp,), (("train-a", 1.0),))
    now = pd.Timestamp(w.now, unit="s", tz="UTC")
    hours = plan_hours({}, {CHAT.key: History(None)}, policy, now)  # no forecast, no history: minGpus an hour
    t = np.array([w.now])
    surge = Observed(t, np.array([1000.0]), 10)  # demand live now beyond the cluster: everything to inference
    first = plan_step(hours, {CHAT.key: surge}, observe(w).training, policy, w.now)
    assert first.lent_gpus == 0 and {p.job for p in first.due()} == set(observe(w).training.ids)
    out = execute(cluster_actions(first, observe(w), [CHAT], "plan-x"), w)
    assert all(o.applied for o in out) and sum(isinstance(o.action, Evict) for o in out) == len(first.due())
    again = plan_step(hours, {CHAT.key: surge}, observe(w).training, policy, w.now)
    assert again.due() == () and cluster_actions(again, observe(w), [CHAT], "plan-y") == []
