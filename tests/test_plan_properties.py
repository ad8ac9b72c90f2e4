"""Invariants of the planner over random forecasts, snapshots and policies."""
import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from planning.planner import Observation, Policy, RunningJob, Snapshot, WorkloadPolicy, plan
from planning.queue import Job, TeamQuota

NOW = pd.Timestamp("2026-03-02 13:41", tz="UTC")
H = 6
value = st.one_of(st.floats(0, 500), st.just(float("nan")), st.floats(-50, -0.1))


@st.composite
def scenario(draw):
    n = draw(st.integers(1, 3))
    capacity = draw(st.integers(8, 256))
    mins = draw(st.lists(st.integers(0, capacity // (2 * n)), min_size=n, max_size=n))
    workloads, forecasts, obs = [], {}, {}
    for k in range(n):
        name = f"w{k}"
        workloads.append(WorkloadPolicy(
            name, demand_per_gpu=draw(st.floats(0.5, 20)), gpus_per_replica=draw(st.integers(1, 4)),
            min_gpus=mins[k], max_gpus=draw(st.one_of(st.none(), st.integers(mins[k], capacity))),
            margin_gpus=draw(st.integers(0, 4)), headroom_floor_gpus=draw(st.integers(0, 4))))
        idx = pd.date_range(NOW.floor("h"), periods=H, freq="h")
        lo = np.array(draw(st.lists(value, min_size=H, max_size=H)))
        hi = lo + np.array(draw(st.lists(st.floats(0, 100), min_size=H, max_size=H)))
        if draw(st.booleans()):
            forecasts[name] = pd.DataFrame({0.9: lo, 0.99: hi}, index=idx)
        lag = draw(st.sampled_from([1, 3, 30]))  # hours since the last observation
        hist_idx = pd.date_range(NOW.floor("h") - pd.Timedelta(days=8), NOW.floor("h") - pd.Timedelta(hours=lag - 1), freq="h")
        hist = pd.Series(draw(st.floats(0, 500)), index=hist_idx)
        obs[name] = Observation(draw(st.one_of(st.floats(0, 2000), st.just(float("nan")))), hist)
    jobs = draw(st.lists(st.tuples(st.integers(1, 16), st.floats(10, 1000), st.integers(0, 59)), max_size=6))
    running = tuple(RunningJob(Job(f"r{i}", "t", g, 7200, preemption_seconds=p), NOW - pd.Timedelta(minutes=m))
                    for i, (g, p, m) in enumerate(jobs))
    queued = tuple(Job(f"q{i}", draw(st.sampled_from("ab")), g, 3600, preemption_seconds=p, submitted_at=i)
                   for i, (g, p, _) in enumerate(draw(st.lists(st.tuples(st.integers(1, 16), st.floats(10, 1000), st.just(0)), max_size=6))))
    pol = Policy(capacity, tuple(workloads), teams=(TeamQuota("a", capacity / 2),), horizon_hours=H,
                 non_lendable_gpus=draw(st.integers(0, capacity // 4)) if sum(mins) <= capacity * 3 // 4 else 0)
    return forecasts, Snapshot(obs, running, queued), pol


def check(forecasts, snap, pol):
    p = plan(forecasts, snap, pol, NOW)
    lendable = pol.capacity_gpus - pol.non_lendable_gpus
    deadline = pol.reclaim_deadline.total_seconds()
    mins = {w.name: w.min_gpus for w in pol.workloads}
    for r in p.reservations:
        assert r.gpus >= mins[r.workload] and r.reason
    for h in p.hours:
        assert h.reserved_gpus <= lendable  # never over capacity
        assert h.reserved_gpus + h.slack_gpus == lendable and h.headroom_gpus <= h.slack_gpus
    # headroom invariant for the current hour, after this plan's preemptions and admissions
    stopped = {x.job_id for x in p.preemptions if x.at == NOW}
    jobs = [r.job for r in snap.running if r.job.id not in stopped]
    queued = {j.id: j for j in snap.queued}
    jobs += [queued[a.job_id] for a in p.admissions]
    h0 = p.hours[0]
    assert sum(j.gpus for j in jobs) <= h0.slack_gpus
    idle = h0.slack_gpus - sum(j.gpus for j in jobs)
    fast = sum(j.gpus for j in jobs if j.preemption_seconds <= deadline)
    assert idle + fast >= h0.headroom_gpus
    return p


@settings(max_examples=150, deadline=None)
@given(scenario())
def test_invariants(s):
    check(*s)


@settings(max_examples=30, deadline=None)
@given(scenario())
def test_deterministic(s):
    assert check(*s) == check(*s)
