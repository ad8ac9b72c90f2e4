"""The embedded cluster (adapters.embedded) over random sequences of what a controller does to it: time passing,
quotas and reservations moving, Workloads evicted and requeued. It must never hold more GPUs than it has, Kueue must
admit nothing beyond the cohort's quota, and an evicted job must lose exactly the work since the newest checkpoint
the planner was shown (planning.planner.Training), never more."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import event, example, given, settings
from hypothesis import strategies as st

from adapters.embedded import EmbeddedCluster
from controller.actions import Evict, PolicyTarget, View, cluster_actions
from controller.executor import execute
from controller.reconcile import training_view
from core.objects import ObjectRef, TargetRef
from core.policy import API_VERSION, KIND, PolicySpec, manifest
from core.settings import WorldSettings
from planning.planner import Preemption, StepPlan, WorkloadStep

START = pd.Timestamp("2026-01-08 10:00", tz="UTC")
SPEC = PolicySpec.model_validate({"query": "q", "capacity": {"demandPerGpu": 10.0, "gpusPerReplica": 2},
                                  "mode": "active", "target": {"kind": "Deployment", "name": "chat"},
                                  "trainingClusterQueues": ["train-a", "train-b"]})
step = st.one_of(
    st.tuples(st.just("advance"), st.sampled_from([1.0, 59.0, 300.0, 1799.0, 1800.0, 3600.0])),
    st.tuples(st.just("quota"), st.sampled_from(["train-a", "train-b"]), st.integers(0, 40)),
    st.tuples(st.just("scale"), st.integers(0, 20)),
    st.tuples(st.just("evict"), st.integers(0, 1000)),
    st.tuples(st.just("requeue"), st.integers(0, 1000)),
    st.tuples(st.just("admit")))


# a job trace: (GPUs, work seconds, arrival offset seconds) per job; None: the saturated backlog
job_trace = st.one_of(st.none(), st.lists(st.tuples(st.integers(1, 8), st.floats(1.0, 20000.0),
                                                    st.floats(0.0, 7200.0)), min_size=1, max_size=12))


@settings(max_examples=200, deadline=None)
@given(st.integers(4, 48), st.lists(step, min_size=1, max_size=40), st.integers(0, 5),
       st.sampled_from([60.0, 1800.0, 3600.0]), job_trace)
def test_capacity_quotas_and_lost_work_hold_over_any_sequence(capacity, steps, seed, interval, trace):
    """Also: GPU-seconds allocated to training less those lost (work after the last checkpoint, stopping time) are
    the work the jobs hold at every moment, so goodput is useful work over allocated (a job still stopping at the end
    once counted its whole stopping time lost, never allocated); no job does more than its work, a finished one did
    all of it."""
    index = pd.date_range(START - pd.Timedelta(days=1), START + pd.Timedelta(days=3), freq="5min")
    jobs = trace_jobs(trace, capacity)
    w = EmbeddedCluster(capacity, [manifest("chat", "default", SPEC)], {"default/chat": pd.Series(30.0, index=index)},
                        start=START.timestamp(),
                        settings=WorldSettings(seed=seed, checkpoint_interval_seconds=interval,
                                               preemption_seconds=(0.0, 300.0)), jobs=jobs)
    w.set_cluster_queue_quota("train-a", capacity // 2)  # training running from the start
    w.admit()
    for s in steps:
        match s:
            case ("advance", dt):
                w.advance(w.now + dt)
            case ("quota", q, gpus):
                w.set_cluster_queue_quota(q, gpus)
            case ("scale", replicas):
                w.scale_deployment("default", "chat", replicas)
            case ("evict", k):
                running = [x for x in w.workloads() if x.admitted and x.active]
                if running:
                    x = running[k % len(running)]
                    view = w.training()
                    i = view.ids.index(x.key)
                    expected = w.now - float(view.last_checkpoint[i])  # what the planner counts as lost
                    before = w.accounting.training_lost
                    assert w.evict_workload(x.namespace, x.name, x.uid, "test", "plan")
                    event("evicted")
                    lost = (w.accounting.training_lost - before) / x.gpus  # its stopping time is lost as it passes
                    assert 0.0 <= expected < interval + 1e-6
                    assert abs(lost - expected) < 1e-6, (lost, expected)
            case ("requeue", k):
                stopped = w.stopped_by_plan()
                if stopped:
                    name = stopped[k % len(stopped)][0].split("/", 1)[1]
                    assert w.requeue_workload("training", name, None)
            case ("admit",):
                usage = sum(x.gpus for x in w.workloads() if x.admitted)  # running and stopping: what Kueue counts
                quota = sum(w.cluster_queue_quotas()[q] for q in ("train-a", "train-b"))
                admitted = w.admit()
                gpus = int(w.jobs.gpus[admitted].sum()) if admitted else 0
                assert gpus <= max(quota - usage, 0)
        assert w.inference_gpus + w.training_gpus <= capacity and w.idle_gpus >= 0
        t = w.training()
        assert (t.last_checkpoint <= w.now).all() and (np.asarray(t.gpus) > 0).all()
        j, a = w.jobs, w.accounting
        held = float((j.gpus[:j.size] * j.progress[:j.size]).sum())
        assert abs(a.training_alloc - a.training_lost - held) < 1e-6 * max(held, 1.0), (a.training_alloc,
                                                                                          a.training_lost, held)
        assert (j.progress[:j.size] <= j.work[:j.size] + 1e-9).all()
        assert (j.progress[:j.size][j.state[:j.size] == 4] >= j.work[:j.size][j.state[:j.size] == 4] - 1e-9).all()


CHAT = PolicyTarget("default/chat", ObjectRef(API_VERSION, KIND, "chat", "default"),
                    TargetRef("Deployment", "chat", "default"), 2, True, None, ("train-a", "train-b"))


def trace_jobs(trace: list | None, capacity: int) -> tuple | None:
    """A drawn job trace as EmbeddedCluster takes it: (gpus, work seconds, arrival) columns by arrival, each job
    no larger than the cluster."""
    return None if trace is None else tuple(np.array(column) for column in zip(*sorted(
        ((min(g, capacity), work, at) for g, work, at in trace), key=lambda job: job[2])))


def observe(w: EmbeddedCluster) -> View:
    training, uids, stopped = training_view(w.workloads(), {"train-a", "train-b"}, w.now)
    state = w.target_state(CHAT.target, CHAT.gpus_per_replica)
    return View({CHAT.key: state}, w.cluster_queue_quotas(), training, uids, stopped)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 5), st.lists(st.integers(0, 1000), min_size=1, max_size=6),
       st.lists(st.sampled_from(["evict", "finish", "requeue", "nothing"]), min_size=1, max_size=6),
       st.sampled_from([None, "none", "all"]))
def test_an_eviction_is_applied_only_to_a_workload_still_running_as_planned(seed, picks, changes, fresh_plan):
    """Evictions planned on one snapshot, then the cluster moves (the victim evicted by another writer, finished, or
    evicted and requeued under the same name): each is applied only where the Workload still runs as the snapshot saw
    it and a fresh plan still wants it, never twice."""
    index = pd.date_range(START - pd.Timedelta(days=1), START + pd.Timedelta(days=3), freq="5min")
    w = EmbeddedCluster(32, [manifest("chat", "default", SPEC)], {"default/chat": pd.Series(30.0, index=index)},
                        start=START.timestamp(), settings=WorldSettings(seed=seed, backlog_job_hours=(0.01, 8.0)))
    w.set_cluster_queue_quota("train-a", 20)
    w.set_cluster_queue_quota("train-b", 10)
    w.admit()
    before = observe(w)
    ids = list(before.training.ids)
    chosen = list(dict.fromkeys(ids[k % len(ids)] for k in picks))
    gpus = dict(zip(ids, before.training.gpus.tolist()))
    due = tuple(Preemption(j, int(gpus[j]), "planned", w.now, 0.0, CHAT.key, "test") for j in chosen)
    plan = StepPlan(w.now, (WorkloadStep(CHAT.key, 0, 0, 0, 0, 0, True, False),), 30, {"train-a": 20, "train-b": 10},
                    0, due)
    evictions = [a for a in cluster_actions(plan, before, [CHAT], "plan-1") if isinstance(a, Evict)]
    evictions += evictions[:1]  # a list that asks twice
    for job, change in zip(chosen, changes):
        name = job.split("/", 1)[1]
        if change in ("evict", "requeue"):
            w.evict_workload("training", name, before.uids[job], "someone else", "other-plan")
        if change == "requeue":
            w.advance(w.now + 600.0)  # stopped by then
            w.requeue_workload("training", name, None)
            w.admit()
        if change == "finish":
            w.advance(w.now + 0.01 * 3600)  # the shortest backlog jobs are done
    fresh = {x.key: x for x in w.workloads() if x.admitted and x.active}
    wanted = {"none": set(), "all": set(chosen)}.get(fresh_plan or "")
    out = execute(evictions, w, still_wanted=None if fresh_plan is None else lambda _: wanted)
    applied = [o.action.workload for o in out if o.applied]
    event(f"applied {min(len(applied), 2)}")
    assert len(applied) == len(set(applied))
    for o in out:
        x = fresh.get(o.action.workload)
        as_planned = x is not None and x.uid == o.action.uid and x.cluster_queue == o.action.queue
        if o.applied:
            assert as_planned and (wanted is None or o.action.workload in wanted)
        else:
            assert o.skipped and o.error is None


def test_requeued_workloads_rejoin_the_pending_line():
    """Each requeue once rebuilt the sort key of every pending Workload to insert one (admission sorts the line
    anyway): quadratic in the line, now constant (its speed is the simulator benchmark's: a dense job trace). Every
    Workload taken out and requeued is pending again, once."""
    n = 3000
    index = pd.date_range(START - pd.Timedelta(days=1), START + pd.Timedelta(days=1), freq="5min")
    w = EmbeddedCluster(8, [manifest("chat", "default", SPEC)], {"default/chat": pd.Series(30.0, index=index)},
                        start=START.timestamp(), jobs=(np.ones(n, np.int64), np.full(n, 3600.0), np.zeros(n)))
    assert w.admit() == []  # no training quota: all of them arrive and wait
    names = [x.name for x in w.workloads()][::10]
    for name in names:
        assert w.evict_workload("training", name, None, "test", "plan")
    assert sum(x.active and not x.admitted for x in w.workloads()) == n - len(names)
    for name in names:
        assert w.requeue_workload("training", name, None)
    assert sum(x.active and not x.admitted for x in w.workloads()) == n


def test_the_stopped_are_listed_as_the_controller_reads_them():
    """simulate requeues the Workloads stopped_by_plan lists, the embedded controller those its read lists
    (training_view of Cluster.workloads, oldest first). stopped_by_plan listed them as they stopped, so the two wrote a
    step's requeues in other orders (of 12 at once, the world got team-13-job-833 first from one and team-02-job-129
    from the other). It lists them as the read does."""
    index = pd.date_range(START - pd.Timedelta(days=1), START + pd.Timedelta(days=1), freq="5min")
    w = EmbeddedCluster(32, [manifest("chat", "default", SPEC)], {"default/chat": pd.Series(0.0, index=index)},
                        start=START.timestamp(), settings=WorldSettings(preemption_seconds=(0.0, 0.0)))
    w.set_cluster_queue_quota("train-a", 16)
    w.set_cluster_queue_quota("train-b", 16)
    w.admit()
    running = [x for x in w.workloads() if x.admitted and x.active]
    for x in running[::-1]:  # the newest evicted first: they stop in that order
        assert w.evict_workload(x.namespace, x.name, x.uid, "test", "plan")
    w.advance(w.now + 300.0)
    stopped = [(s.workload, s.queue) for s in observe(w).stopped]
    assert len(stopped) == len(running) > 2
    assert w.stopped_by_plan() == stopped


def _backlog_after_hours(capacity: int, seed: int, hours: float = 4.0) -> EmbeddedCluster:
    """A world of `capacity` GPUs, all of them training's (no demand), its backlog admitted and topped up every
    5 minutes for `hours`."""
    index = pd.date_range(START - pd.Timedelta(days=1), START + pd.Timedelta(days=1), freq="5min")
    w = EmbeddedCluster(capacity, [manifest("chat", "default", SPEC)], {"default/chat": pd.Series(0.0, index=index)},
                        start=START.timestamp(), settings=WorldSettings(seed=seed))
    w.set_cluster_queue_quota("train-a", capacity // 2)
    w.set_cluster_queue_quota("train-b", capacity - capacity // 2)
    for _ in range(int(hours * 12)):
        w.admit()
        w.advance(w.now + 300.0)
    return w


@settings(max_examples=10, deadline=None)
@given(st.sampled_from([2, 7, 100, 1000]), st.integers(0, 3))
def test_the_backlog_holds_as_many_jobs_at_any_size(times, seed):
    """`simulate --gpus 1000000` ran for minutes: the backlog kept a cluster's worth of 1-8 GPU jobs pending, so a
    million GPUs meant ~600,000 jobs, each read by every Kueue pass. Now its jobs grow with the cluster above 1,000
    GPUs: on `times` x 1,000 GPUs it is the 1,000-GPU backlog, each job `times` as large, doing the same work scaled."""
    small, large = _backlog_after_hours(1000, seed), _backlog_after_hours(times * 1000, seed)
    n = small.jobs.size
    assert set(small.jobs.gpus[:n].tolist()) <= set(WorldSettings().backlog_job_gpus)  # 1,000 GPUs: sizes as set
    assert large.jobs.size == n
    assert (large.jobs.gpus[:n] == times * small.jobs.gpus[:n]).all()
    assert (large.jobs.state[:n] == small.jobs.state[:n]).all()
    assert large.training_gpus == times * small.training_gpus > 0
    assert large.accounting.training_alloc == pytest.approx(times * small.accounting.training_alloc)


@settings(max_examples=50, deadline=None)
@given(st.sampled_from(["Deployment", "HorizontalPodAutoscaler", "ClusterQueue"]), st.floats(0.0, 400.0),
       st.integers(4, 48), st.integers(0, 30), st.integers(1, 30), st.booleans())
@example("Deployment", 20.0, 16, 4, 1, True)
@example("ClusterQueue", 20.0, 16, 4, 1, True)
def test_a_target_serves_its_demand_from_the_start(kind, demand, capacity, first, more, later):
    """The workload served before the world starts. The world once created its replicas only at the controller's first
    scale, so before it (the replay's first row) the target reported 0 ready replicas: `simulate` of the ServeGen
    trace showed reserved 79, warm 0, then warm 79. Now the target starts with the replicas its demand at the start
    needs (as many as the cluster holds), ready. The controller ran before too: the replicas its scale at the start
    asks beyond those serve at once; those of any later scale warm up. A Deployment or ClusterQueue target the start's
    decision left as it was (`later`: its reservation was what it held) took its first scale, an hour or a day on,
    as that decision: the replicas served at once, with no warm-up (the examples: 5 ready at once, not 1)."""
    index = pd.date_range(START - pd.Timedelta(days=1), START + pd.Timedelta(days=1), freq="5min")
    spec = SPEC.model_copy(update={"target": SPEC.target.model_copy(update={"kind": kind})})
    w = EmbeddedCluster(capacity, [manifest("chat", "default", spec)], {"default/chat": pd.Series(demand, index=index)},
                        start=START.timestamp())
    target = spec.target.ref("default")
    needed = min(int(np.ceil(demand / 10.0 / 2 - 1e-9)), capacity // 2)  # 10 per GPU, 2 GPUs a replica
    state = w.target_state(target, 2)
    assert state.desired_replicas == state.ready_replicas == needed
    assert w.inference_gpus == 2 * needed
    if kind == "ClusterQueue":
        assert w.cluster_queue_quotas()["chat"] == 2 * needed

    def scale(replicas: int) -> None:
        if kind == "Deployment":
            w.scale_deployment("default", "chat", replicas)
        elif kind == "HorizontalPodAutoscaler":
            w.set_hpa_min_replicas("default", "chat", replicas)
        else:
            w.set_cluster_queue_quota("chat", 2 * replicas)

    if later:  # no scale at the start: the reservation was what the target held; time passes
        w.advance(w.now + 3600.0)
    asked = min(needed + first, capacity // 2)
    scale(asked)
    if later:  # a scale after the start is no decision in place before it: its replicas warm up
        assert w.target_state(target, 2).ready_replicas == needed
        w.advance(w.now + WorldSettings().warmup_seconds)
    assert w.target_state(target, 2).ready_replicas == asked
    w.advance(w.now + 60.0)
    again = min(asked + more, capacity // 2)
    scale(again)
    assert w.target_state(target, 2).ready_replicas == asked  # the new ones are warming
    w.advance(w.now + WorldSettings().warmup_seconds)
    assert w.target_state(target, 2).ready_replicas == again


SERVED = SPEC.model_copy(update={"target": SPEC.target.model_copy(update={"kind": "HorizontalPodAutoscaler"}),
                                 "inference_cluster_queue": "serve"})
serve_step = st.one_of(
    st.tuples(st.just("advance"), st.sampled_from([1.0, 59.0, 300.0, 1800.0, 3600.0])),
    st.tuples(st.just("quota"), st.sampled_from(["train-a", "train-b", "serve", "serve"]), st.integers(0, 40)),
    st.tuples(st.just("min"), st.integers(0, 20)),
    st.tuples(st.just("evict"), st.integers(0, 1000)),
    st.tuples(st.just("admit")))


@settings(max_examples=100, deadline=None)
@given(st.integers(4, 48), st.lists(serve_step, min_size=1, max_size=30), st.integers(0, 5),
       st.lists(st.floats(0.0, 600.0), min_size=1, max_size=12), job_trace)
@example(16, [("quota", "train-a", 6), ("admit",), ("min", 6)], 0, [0.0], [(8, 3600.0, 0.0)])
def test_kueue_admits_an_inference_cluster_queues_replicas_within_its_quota_and_the_cohorts(capacity, steps, seed,
                                                                                           hourly, trace):
    """The pods of a policy naming an inferenceClusterQueue are Workloads of it: a replica starts holding GPUs only
    within the queue's nominalQuota plus what the training queues leave unused of theirs (the cohort it borrows from),
    whatever the HPA asks and however many GPUs are idle; training is admitted only into what that borrowing leaves.
    And a training Workload too large for that unused quota and for its queue's nominalQuota holds no replica back
    (Kueue's BestEffortFIFO passes over it): the example's 8-GPU job, waiting beside a training quota of 6, kept the
    replicas from borrowing any of it. One within its queue's nominalQuota may: it reserves that quota in its cycle."""
    index = pd.date_range(START - pd.Timedelta(days=1), START + pd.Timedelta(days=1), freq="5min")
    demand = pd.Series([hourly[(t.hour + t.day) % len(hourly)] for t in index], index=index)
    jobs = trace_jobs(trace, capacity)
    w = EmbeddedCluster(capacity, [manifest("chat", "default", SERVED)], {"default/chat": demand},
                        start=START.timestamp(), settings=WorldSettings(seed=seed), jobs=jobs)
    inf = w.inference["default/chat"]

    def training_room() -> int:  # the training queues' quota no Workload of theirs holds
        used = sum(x.gpus for x in w.workloads() if x.admitted)  # running and stopping: what Kueue counts
        return sum(w.cluster_queue_quotas()[q] for q in ("train-a", "train-b")) - used

    for s in steps:
        held = inf.held_replicas * 2
        match s:
            case ("advance", dt):
                w.advance(w.now + dt)
            case ("quota", q, gpus):
                w.set_cluster_queue_quota(q, gpus)
            case ("min", replicas):
                w.set_hpa_min_replicas("default", "chat", replicas)
            case ("evict", k):
                running = [x for x in w.workloads() if x.admitted and x.active]
                if running:
                    x = running[k % len(running)]
                    w.evict_workload(x.namespace, x.name, x.uid, "test", "plan")
            case ("admit",):
                borrowed = max(held - w.cluster_queue_quotas()["serve"], 0)
                room = training_room()
                admitted = w.admit()
                assert (int(w.jobs.gpus[admitted].sum()) if admitted else 0) <= max(room - borrowed, 0)
        if inf.held_replicas * 2 > held:
            event("a replica admitted")
            assert inf.held_replicas * 2 - w.cluster_queue_quotas()["serve"] <= max(training_room(), 0)
        serve = w.cluster_queue_quotas()["serve"]
        unused = training_room() - max(inf.held_replicas * 2 - serve, 0)  # the cohort's, for training and borrowers
        pending = [x for x in w.workloads() if x.active and not x.admitted]
        quotas = w.cluster_queue_quotas()
        # a training Workload within its queue's nominalQuota that does not fit reserves that quota in its cycle
        if inf.waiting and w.idle_gpus >= 2 and all(x.gpus > max(unused, quotas[x.cluster_queue]) for x in pending):
            event("a replica waits while no training Workload fits or reserves")
            assert max(serve - inf.held_replicas * 2, 0) + max(unused, 0) < 2
        assert w.inference_gpus + w.training_gpus <= capacity and w.idle_gpus >= 0
