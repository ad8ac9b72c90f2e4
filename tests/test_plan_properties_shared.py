"""Invariants of the planner when several inference policies share one cluster, and of the reasons it gives."""
import numpy as np
import pandas as pd
from hypothesis import example, given, settings

from planning.planner import MAX_GPUS, ClusterPolicy, Forecast, History, Observed, Training, WorkloadPolicy
from tests.test_plan_properties import BASE, H, plan, scenario


@settings(max_examples=300, deadline=None)
@given(scenario())
def test_later_policies_are_cut_first(s):
    """README: several policies "share the cluster (the later ones cut first: in a file's order ...)"; planner: "Over
    capacity: cut workloads later in the policy order first, never below their minimum"."""
    _, _, _, _, policy, _ = s
    hours, step = plan(*s)
    for k, wh in enumerate(hours.workloads):
        for i in np.nonzero(wh.cut)[0]:
            assert all(hours.workloads[j].reserved[i] == w.least_gpus
                       for j, w in enumerate(policy.workloads) if j > k), (k, i)


def _capped_at_max_gpus():
    """One policy of maxGpus 1 whose recent peak is 2 GPUs (a forecast of nothing)."""
    w = WorkloadPolicy("ns/w0", demand_per_gpu=1.0, lead_time_seconds=0.0, max_gpus=1)
    frame = pd.DataFrame({0.9: [0.0] * H, 0.99: [0.0] * H}, index=pd.date_range(BASE, periods=H, freq="h"))
    seen = Observed(np.array([BASE.timestamp()]), np.array([2.0]), 0)
    policy = ClusterPolicy(8, (w,), horizon_hours=H)
    return {w.name: Forecast.of(frame, 0.9, 0.99)}, {}, {w.name: seen}, Training(), policy, BASE


@settings(max_examples=300, deadline=None)
@given(scenario())
@example(_capped_at_max_gpus())  # reserved 1 of a peak of 2, the reason silent on maxGpus
def test_a_reservation_below_its_recent_peak_says_why(s):
    """Every decision carries its reason (planner docstring); README: the reservation "never below the recent observed
    peak plus the warm buffer" unless the cluster or the policy's own bounds say otherwise, so a reservation below the
    recent peak says what bound it."""
    _, _, _, _, policy, _ = s
    _, step = plan(*s)
    for w, ws in zip(policy.workloads, step.workloads):
        if ws.reserved_gpus < ws.peak_gpus:
            assert ws.cut_gpus > 0 or "maxGpus" in ws.reason, ws
        if "maxGpus" in ws.reason:  # only when the cap bound
            assert ws.capped_gpus > 0 and ws.reserved_gpus + ws.cut_gpus == w.top(MAX_GPUS), ws


def _demand_above_a_forecast_at_max_gpus():
    """A forecast of 10 GPUs at maxGpus 10 and a recent peak of 16, on 16 GPUs: training holds 8 of the 6 lent."""
    w = WorkloadPolicy("ns/w0", demand_per_gpu=1.0, lead_time_seconds=0.0, max_gpus=10)
    frame = pd.DataFrame({0.9: [10.0] * H, 0.99: [10.0] * H}, index=pd.date_range(BASE, periods=H, freq="h"))
    seen = pd.Series(10.0, index=pd.date_range(BASE - pd.Timedelta(days=8), BASE, freq="h"))
    t = BASE.timestamp()
    training = Training(("t/j",), ("a",), np.array([8]), np.zeros(1, np.int64), np.array([60.0]), np.array([1800.0]),
                        np.array([t - 100.0]))
    return ({w.name: Forecast.of(frame, 0.9, 0.99)}, {w.name: History.of(seen, BASE)},
            {w.name: Observed(np.array([t]), np.array([16.0]), 10)}, training,
            ClusterPolicy(16, (w,), (("a", 1.0),), horizon_hours=H), BASE)


@settings(max_examples=300, deadline=None)
@given(scenario())
@example(_demand_above_a_forecast_at_max_gpus())  # stopped as an emergency, demand above the forecast taking nothing
def test_an_emergency_is_demand_above_the_forecast_taking_gpus(s):
    """docs/observability.md: preemptions are "planned (training beyond the slack while demand is within the
    forecast, ...) or emergency (demand above the forecast needs the GPUs now)": an emergency only where some
    policy's reservation now is above its forecast's, and its reason names only such policies."""
    _, step = plan(*s)
    raised = {ws.name for ws in step.workloads if ws.reserved_gpus > ws.forecast_gpus}
    for p in step.preemptions:
        if p.kind == "emergency":
            assert p.workload in raised, (p, step.workloads)
        assert not any(f"{ws.name} peak" in p.reason for ws in step.workloads if ws.name not in raised), p


def _fallback_at_max_gpus():
    """No forecast, last week's peak 16 GPUs every hour, maxGpus 10."""
    w = WorkloadPolicy("ns/w0", demand_per_gpu=1.0, lead_time_seconds=0.0, max_gpus=10)
    seen = pd.Series(16.0, index=pd.date_range(BASE - pd.Timedelta(days=8), BASE, freq="h"))
    return {}, {w.name: History.of(seen, BASE)}, {}, Training(), ClusterPolicy(64, (w,), horizon_hours=H), BASE


@settings(max_examples=200, deadline=None)
@given(scenario())
@example(_fallback_at_max_gpus())  # "last week's peak at this hour -> 10 GPUs", silent on the cap
def test_an_hour_reason_states_the_bounds_that_held_it(s):
    """Every decision carries its reason (planner docstring): an hour's reservation from the forecast or from last
    week's peak states the policy's bounds [minGpus, maxGpus or the cluster] it was held to, and the cluster's cut."""
    _, _, _, _, policy, _ = s
    hours, _ = plan(*s)
    for w, wh in zip(policy.workloads, hours.workloads):
        for i in range(len(wh.starts)):
            reason = wh.reason(i, w, policy.lendable)
            if wh.why_fallback != "no data" or wh.from_forecast[i]:
                assert f"clamp [{w.least_gpus}, {w.top(policy.lendable)}]" in reason, reason
            assert ("cut by" in reason) == bool(wh.cut[i]), reason
