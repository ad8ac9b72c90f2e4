"""Invariants of the planner (plan_hours + plan_step) over random forecasts, policies, demand and training."""
from dataclasses import replace

import numpy as np
import pandas as pd
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from planning.planner import (
    MAX_GPUS,
    ClusterPolicy,
    Forecast,
    History,
    Observed,
    Training,
    WorkloadPolicy,
    plan_hours,
    plan_step,
    shares,
)

BASE = pd.Timestamp("2026-03-02 13:00", tz="UTC")
H = 6
value = st.one_of(st.floats(0, 500), st.just(float("nan")), st.floats(-50, -0.1))


@st.composite
def scenario(draw):
    now = BASE + pd.Timedelta(seconds=draw(st.integers(0, 3599)))
    n = draw(st.integers(1, 3))
    capacity = draw(st.integers(8, 256))
    mins = draw(st.lists(st.integers(0, capacity // (2 * n)), min_size=n, max_size=n))
    non_lendable = draw(st.integers(0, capacity // 4)) if sum(mins) <= capacity * 3 // 4 else 0
    workloads, forecasts, histories, observed = [], {}, {}, {}
    t_now = now.timestamp()
    for k in range(n):
        name = f"ns/w{k}"
        workloads.append(WorkloadPolicy(
            name, demand_per_gpu=draw(st.floats(0.5, 20)), gpus_per_replica=draw(st.integers(1, 4)),
            lead_time_seconds=draw(st.sampled_from([0.0, 300.0, 900.0, 3600.0])),
            warm_buffer=draw(st.sampled_from([0.0, 0.5, 1.0, 2.0])),
            scale_in_delay_seconds=draw(st.sampled_from([0.0, 600.0, 1800.0])),
            min_gpus=mins[k], max_gpus=draw(st.one_of(st.none(), st.integers(max(mins[k], 1), capacity))),
            margin_gpus=draw(st.integers(0, 4)), headroom_floor_gpus=draw(st.integers(0, 4)),
            reclaim_deadline_seconds=draw(st.sampled_from([120.0, 300.0, 900.0]))))
        kind = draw(st.sampled_from(["full", "short", "late", "none"]))
        if kind != "none":
            start = now.floor("h") + pd.Timedelta(hours=1 if kind == "late" else 0)
            periods = 3 if kind == "short" else H
            lo = np.array(draw(st.lists(value, min_size=periods, max_size=periods)))
            hi = lo + np.array(draw(st.lists(st.floats(0, 100), min_size=periods, max_size=periods)))
            frame = pd.DataFrame({0.9: lo, 0.99: hi}, index=pd.date_range(start, periods=periods, freq="h"))
            forecasts[name] = Forecast.of(frame, 0.9, 0.99)
        if draw(st.booleans()):  # an observed history, newest `lag` hours ago (stale past 2 h)
            lag = draw(st.sampled_from([0, 1, 3, 30]))
            end = now.floor("h") - pd.Timedelta(hours=lag)
            idx = pd.date_range(end - pd.Timedelta(days=8) + pd.Timedelta(hours=lag), end, freq="h")
            level = draw(st.floats(0, 500))
            histories[name] = History.of(pd.Series(level * (1 + np.sin(np.arange(len(idx)) / 4)), index=idx), now)
        samples = draw(st.lists(st.one_of(st.floats(0, 2000), st.just(float("nan"))), max_size=6))
        times = t_now - 300.0 * np.arange(len(samples))[::-1]
        observed[name] = Observed(times, np.array(samples, float), draw(st.integers(0, capacity)), draw(st.booleans()))
    queues = draw(st.lists(st.sampled_from(["team-a", "team-b", "team-c"]), unique=True, max_size=3))
    weights = tuple((q, draw(st.floats(0.1, 5))) for q in queues)
    preempt = st.sampled_from([30.0, 60.0, 120.0, 600.0, 900.0])
    jobs = draw(st.lists(st.tuples(st.integers(1, 16), st.integers(0, 3), preempt,
                                   st.sampled_from([600.0, 1800.0, 3600.0]), st.floats(0, 1)), max_size=8))
    training = Training(
        tuple(f"training/j{i}" for i in range(len(jobs))), tuple(draw(st.sampled_from(queues or ["x"])) for _ in jobs),
        np.array([j[0] for j in jobs], np.int64), np.array([j[1] for j in jobs], np.int64),
        np.array([j[2] for j in jobs], float), np.array([j[3] for j in jobs], float),
        np.array([t_now - j[4] * j[3] for j in jobs], float), draw(st.integers(0, 8)))
    # minimums round up to whole replicas drawn after the GPUs kept back: 2 + 2 of 4-GPU replicas hold 8 GPUs, more
    # than the 6 an 8-GPU cluster keeping 2 back lends (a ClusterPolicy refuses it, as the controller does)
    assume(sum(w.least_gpus for w in workloads) <= capacity - non_lendable)
    policy = ClusterPolicy(capacity, tuple(workloads), weights, non_lendable, horizon_hours=H)
    return forecasts, histories, observed, training, policy, now


def plan(forecasts, histories, observed, training, policy, now):
    hours = plan_hours(forecasts, histories, policy, now)
    return hours, plan_step(hours, observed, training, policy, now.timestamp())


@settings(max_examples=200, deadline=None)
@given(scenario())
def test_invariants(s):
    forecasts, histories, observed, training, policy, now = s
    hours, step = plan(*s)
    lendable, t_now = policy.lendable, now.timestamp()
    # the hourly plan: within [min, top], never over what is lendable, a reason for every period
    total = np.zeros(H, np.int64)
    for w, wh in zip(policy.workloads, hours.workloads):
        assert len(wh.reserved) == H and (wh.reserved >= w.min_gpus).all() and (wh.reserved <= w.top(lendable)).all()
        assert (wh.reserved % w.gpus_per_replica == 0).all()  # whole replicas: a part of one would be held whole
        # headroom is at least its floor, both only up to maxGpus (no takeback reserves beyond it; the headroom is
        # planned before a cut to fit the cluster)
        top = w.top(MAX_GPUS)
        assert (wh.headroom >= np.minimum(w.headroom_floor_gpus, top - wh.reserved - wh.cut)).all()
        assert (wh.headroom <= top - wh.reserved).all() and (wh.cut >= 0).all()
        assert all(wh.reason(i, w, lendable) for i in range(H))
        if not wh.from_forecast.all():
            assert any(note.startswith(w.name) for note in hours.notes)
        total += wh.reserved
    assert (total <= lendable).all() and (hours.slack == lendable - total).all()
    # now: within [min, top], the lead time's reservation unless cut, degraded data not lowered unless cut
    for w, wh, ws in zip(policy.workloads, hours.workloads, step.workloads):
        assert w.min_gpus <= ws.reserved_gpus <= w.top(lendable) and ws.reason
        assert ws.reserved_gpus % w.gpus_per_replica == 0
        assert ws.forecast_gpus >= max(wh.reserved[wh.at(t_now)], wh.reserved[wh.at(t_now + w.lead_time_seconds)])
        assert ws.reserved_gpus + ws.cut_gpus >= ws.forecast_gpus
        o = observed[w.name]
        if o.degraded:
            assert ws.reserved_gpus + ws.cut_gpus >= min(o.held_gpus, w.top(lendable))
    reserved = sum(ws.reserved_gpus for ws in step.workloads)
    assert reserved <= lendable and step.lent_gpus + reserved <= lendable and step.lent_gpus >= 0
    assert 0 <= step.headroom_gpus <= step.lent_gpus
    # the quotas admit at most what is lent, all of it unless the plan says why not
    quota = sum(step.quotas.values())
    assert 0 <= quota <= step.lent_gpus and (not policy.queue_weights or (quota < step.lent_gpus) == bool(
        step.quota_reason))
    assert set(step.quotas) == {q for q, _ in policy.queue_weights}
    share = shares(step.lent_gpus, policy.queue_weights)  # no team's quota above its share of the slack lent
    assert all(step.quotas[q] <= share[q] for q in share), (step.quotas, share)
    # preemptions: running jobs, each once, with a reason; after the due ones training fits in the lent slack, and
    # what is slow to preempt fits outside the headroom band
    ids = [p.job for p in step.preemptions]
    assert len(ids) == len(set(ids)) and set(ids) <= set(training.ids)
    gpus = dict(zip(training.ids, training.gpus.tolist()))
    for p in step.preemptions:
        assert p.reason and p.kind in ("planned", "emergency") and p.gpus == gpus[p.job]
        assert p.at >= t_now and p.work_lost_seconds >= 0
        assert p.workload in {w.name for w in policy.workloads}
    stopped = {p.job for p in step.due()}
    left = [i for i, j in enumerate(training.ids) if j not in stopped]
    assert int(training.gpus[left].sum()) <= step.lent_gpus
    slow = [i for i in left if training.preempt_seconds[i] > policy.reclaim_deadline_seconds]
    assert int(training.gpus[slow].sum()) <= step.lent_gpus - step.headroom_gpus


def _hours_key(hours):
    return (hours.now, hours.notes, hours.slack.tolist(),
            [(w.name, w.reserved.tolist(), w.headroom.tolist(), w.from_forecast.tolist(), w.cut.tolist(),
              w.why_fallback) for w in hours.workloads])


@settings(max_examples=40, deadline=None)
@given(scenario(), st.randoms(use_true_random=False))
def test_deterministic_and_independent_of_the_order_jobs_are_listed_in(s, rnd):
    forecasts, histories, observed, training, policy, now = s
    h1, s1 = plan(*s)
    h2, s2 = plan(*s)
    assert _hours_key(h1) == _hours_key(h2) and s1 == s2
    _, s3 = plan(forecasts, histories, observed, listed_in_another_order(training, rnd), policy, now)
    assert s3 == s1


def listed_in_another_order(training: Training, rnd) -> Training:
    """The same running jobs listed in a random order (`rnd`: hypothesis' random)."""
    order = list(range(len(training.ids)))
    rnd.shuffle(order)
    return Training(tuple(training.ids[i] for i in order), tuple(training.queue[i] for i in order),
                    training.gpus[order], training.priority[order], training.preempt_seconds[order],
                    training.checkpoint_interval[order], training.last_checkpoint[order], training.terminating_gpus)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.floats(0, 1e4),
                          st.sampled_from([0.0, 1.0, 2.0**40, 1e300])), min_size=1, max_size=30),
       st.floats(0.01, 50), st.integers(1, 8))
def test_gpus_of_a_whole_array_are_gpus_of_each_value(demand, per_gpu, per_replica):
    # plan_hours reserves with the array form; plan_step with the scalar one: they must never disagree
    w = WorkloadPolicy("ns/w", demand_per_gpu=per_gpu, gpus_per_replica=per_replica)
    assert w.gpus_each(np.array(demand)).tolist() == [w.gpus(d) for d in demand]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.floats(0, 2000), st.just(float("nan"))), min_size=0, max_size=400),
       st.sampled_from([0.5, 0.9, 0.99]), st.sampled_from([0.5, 0.9, 0.99]), st.sampled_from([0.0, 1.0]),
       st.sampled_from([0.0, 600.0]), st.sampled_from([300.0, 900.0]), st.floats(0, 2000))
def test_a_warm_buffer_from_observed_rises_only_adds_and_grows_with_its_quantile(samples, q1, q2, floor, delay, lead,
                                                                                   latest):
    """warmBufferQuantile never lowers the reservation the fixed warmBuffer gives, and a higher quantile never asks
    for less, on any observed demand (missing samples included)."""
    now = BASE
    idx = pd.date_range(now - pd.Timedelta(minutes=5 * len(samples)), periods=len(samples), freq="5min")
    history = History.of(pd.Series(samples, index=idx, dtype=float), now)
    t_now = now.timestamp()
    observed = {"w": Observed(np.array([t_now - 300.0, t_now]), np.array([samples[-1] if samples else 0.0, latest]),
                              0)}
    fixed = WorkloadPolicy("w", 2.0, warm_buffer=floor, scale_in_delay_seconds=delay, lead_time_seconds=lead)
    frame = pd.DataFrame({0.9: [10.0] * H, 0.99: [20.0] * H}, index=pd.date_range(now.floor("h"), periods=H, freq="h"))
    reserved, factors = [], []
    for w in (fixed, *(replace(fixed, warm_buffer_quantile=q) for q in sorted((q1, q2)))):
        policy = ClusterPolicy(10**6, (w,), horizon_hours=H)
        hours = plan_hours({"w": Forecast.of(frame, 0.9, 0.99)}, {"w": history}, policy, now)
        factors.append(hours.workloads[0].rise_buffer)
        reserved.append(plan_step(hours, observed, Training(), policy, t_now).workloads[0].reserved_gpus)
    assert factors[0] == 0.0 and 0.0 <= factors[1] <= factors[2]
    assert reserved[0] <= reserved[1] <= reserved[2]


def _beside_a_cpu_only_workload(gpus: int, preempt_seconds: float):
    """A scenario: one workload forecast to need nothing on an 8-GPU cluster (all of it lent, 6 GPUs outside its
    2-GPU band), and in its training queue a Workload asking no GPUs (CPU only) beside a job of `gpus` GPUs stopping
    in `preempt_seconds`."""
    w = WorkloadPolicy("ns/w0", demand_per_gpu=1.0, headroom_floor_gpus=2)
    frame = pd.DataFrame({0.9: [0.0] * H, 0.99: [0.0] * H}, index=pd.date_range(BASE, periods=H, freq="h"))
    training = Training(("training/cpu", "training/j"), ("team-a", "team-a"), np.array([0, gpus], np.int64),
                        np.zeros(2, np.int64), np.full(2, preempt_seconds), np.full(2, 1800.0),
                        np.full(2, BASE.timestamp() - 600.0))
    return ({w.name: Forecast.of(frame, 0.9, 0.99)}, {}, {}, training,
            ClusterPolicy(8, (w,), (("team-a", 1.0),), horizon_hours=H), BASE)


@settings(max_examples=150, deadline=None)
@given(scenario(), st.integers(0, 24))
@example(_beside_a_cpu_only_workload(1, 60.0), 9)  # the pods hold more than is lent: the job goes, not the CPU one
@example(_beside_a_cpu_only_workload(0, 900.0), 7)  # ... more than the room outside the band: no slow job holds GPUs
def test_inference_pods_in_a_training_queue_hold_what_is_lent_and_are_never_taken_back(s, serving):
    """A policy's inference pods Kueue admitted into a training queue (Training.serving_gpus) are no job: never a
    victim, yet they hold what is lent as the jobs do, so the jobs beside them give back what is over, and slow jobs
    hold only what they leave of the room outside the headroom band. A Workload asking no GPUs frees none of it: it is
    never stopped for it."""
    forecasts, histories, observed, training, policy, now = s
    training = replace(training, serving_gpus=serving)
    _, step = plan(forecasts, histories, observed, training, policy, now)
    assert {p.job for p in step.preemptions} <= set(training.ids)
    assert all(p.gpus > 0 for p in step.preemptions), step.preemptions
    stopped = {p.job for p in step.due()}
    left = [i for i, j in enumerate(training.ids) if j not in stopped]
    if serving <= step.lent_gpus:
        assert int(training.gpus[left].sum()) + serving <= step.lent_gpus
    slow = [i for i in left if training.preempt_seconds[i] > policy.reclaim_deadline_seconds]
    if serving <= step.lent_gpus - step.headroom_gpus:
        assert int(training.gpus[slow].sum()) + serving <= step.lent_gpus - step.headroom_gpus


@settings(max_examples=200, deadline=None)
@given(scenario(), st.data())
def test_a_job_admitted_beside_inference_pods_while_slow_jobs_run_stays_outside_the_headroom_band(s, data):
    """While jobs slow to preempt run, new admissions may fill only what leaves a job as slow within the room outside
    the headroom band. A policy's inference pods in a training queue hold some of that room, as the slow jobs do (the
    preemptions count them against it): the quotas leave them out of what a new job may take. Counted as room too,
    a new slow job would be over the band, and preempted at the next reconcile."""
    forecasts, histories, observed, training, policy, now = s
    assume(len(training.ids) > 0)
    preempt = training.preempt_seconds.copy()
    preempt[0] = policy.reclaim_deadline_seconds + 60.0  # one job at least cannot stop within the deadline
    training = replace(training, preempt_seconds=preempt)
    _, step = plan(forecasts, histories, observed, training, policy, now)
    room = step.lent_gpus - step.headroom_gpus  # the pods change neither (they are no policy's reservation)
    serving = data.draw(st.integers(0, room))
    training = replace(training, serving_gpus=serving)
    _, step = plan(forecasts, histories, observed, training, policy, now)
    slow = training.preempt_seconds > policy.reclaim_deadline_seconds
    stopped = {p.job for p in step.due()}
    left = np.array([job not in stopped for job in training.ids], dtype=bool)
    # what Kueue admits once the jobs stopped now are gone: the quotas less what the jobs left and the pods hold
    admitted = max(sum(step.quotas.values()) - int(training.gpus[left].sum()) - serving, 0)
    assert int(training.gpus[left & slow].sum()) + admitted + serving <= room
