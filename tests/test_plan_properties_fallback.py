"""Invariants of the planner's fallback (README: "Prometheus down or stale ..."): hours without a usable forecast,
demand data degraded, nothing observed in the last week; over random histories (a week, a day, part of an hour,
gaps, stale), forecasts short of the horizon or with NaN hours, and what the target holds."""
import numpy as np
import pandas as pd
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from planning.planner import ClusterPolicy, Forecast, History, Observed, Training, WorkloadPolicy
from tests.test_plan_properties import BASE, H, plan

DAY = pd.Timedelta(days=1)


@st.composite
def fallback_scenario(draw):
    """One policy: a forecast that is whole, short, late, has NaN hours or none; a history of any length up to 8 days
    ending `lag` before now, with gaps; degraded data or not; a target holding any GPUs."""
    now = BASE + pd.Timedelta(seconds=draw(st.integers(0, 3599)))
    capacity = draw(st.integers(8, 128))
    w = WorkloadPolicy("ns/w0", demand_per_gpu=draw(st.floats(0.5, 20)), gpus_per_replica=draw(st.integers(1, 4)),
                       lead_time_seconds=draw(st.sampled_from([0.0, 900.0, 3000.0, 5400.0])),
                       warm_buffer=draw(st.sampled_from([0.0, 1.0])),
                       scale_in_delay_seconds=draw(st.sampled_from([0.0, 600.0])),
                       min_gpus=draw(st.integers(0, capacity // 4)),
                       max_gpus=draw(st.one_of(st.none(), st.integers(capacity // 4 + 1, capacity))),
                       headroom_floor_gpus=draw(st.integers(0, 3)))
    forecasts = {}
    kind = draw(st.sampled_from(["full", "short", "late", "holes", "none"]))
    if kind != "none":
        start = now.floor("h") + pd.Timedelta(hours=1 if kind == "late" else 0)
        periods = draw(st.integers(1, H - 1)) if kind == "short" else H
        lo = np.array(draw(st.lists(st.floats(0, 500), min_size=periods, max_size=periods)))
        if kind == "holes":
            lo[np.array(draw(st.lists(st.booleans(), min_size=periods, max_size=periods)))] = np.nan
        hi = lo + np.array(draw(st.lists(st.floats(0, 100), min_size=periods, max_size=periods)))
        forecasts[w.name] = Forecast.of(pd.DataFrame({0.9: lo, 0.99: hi}, index=pd.date_range(
            start, periods=periods, freq="h")), 0.9, 0.99)
    histories, times, values = {}, np.empty(0), np.empty(0)
    if draw(st.booleans()):
        length = draw(st.sampled_from([pd.Timedelta(minutes=20), pd.Timedelta(hours=5), DAY, 8 * DAY]))
        lag = draw(st.sampled_from([pd.Timedelta(0), pd.Timedelta(hours=1), pd.Timedelta(hours=3), 8 * DAY]))
        index = pd.date_range(now - lag - length, now - lag, freq="5min")
        level = draw(st.floats(0, 500))
        series = pd.Series(level * (1 + np.sin(np.arange(len(index)) / 40)), index=index)
        gap = draw(st.floats(0, 1))
        series[(np.arange(len(index)) / max(len(index), 1) >= gap) & (np.arange(len(index)) % 3 == 0)] = np.nan
        histories[w.name] = History.of(series, now)
        times, values = histories[w.name].times, histories[w.name].values
    degraded = draw(st.booleans())
    observed = {w.name: Observed(times, values, draw(st.integers(0, capacity)), degraded)}
    t = now.timestamp()
    jobs = draw(st.lists(st.tuples(st.integers(1, 16), st.sampled_from([30.0, 60.0, 900.0]),
                                   st.sampled_from([600.0, 1800.0]), st.floats(0, 1)), max_size=6))
    training = Training(tuple(f"training/j{i}" for i in range(len(jobs))), ("team-a",) * len(jobs),
                        np.array([j[0] for j in jobs], np.int64), np.zeros(len(jobs), np.int64),
                        np.array([j[1] for j in jobs], float), np.array([j[2] for j in jobs], float),
                        np.array([t - j[3] * j[2] for j in jobs], float))
    return forecasts, histories, observed, training, ClusterPolicy(capacity, (w,), (("team-a", 1.0),),
                                                                   horizon_hours=H), now


def _forecast_ending_before_the_lead_time():
    """A forecast of the hour now alone (4 GPUs) and last week's peak of 26 GPUs in the next hour, 10 minutes before it
    with a lead time of 15: the next hour's fallback reservation is in force."""
    w = WorkloadPolicy("ns/w0", demand_per_gpu=2.0, lead_time_seconds=900.0)
    now = BASE + pd.Timedelta(minutes=50)
    index = pd.date_range(now - 8 * DAY, now, freq="h")
    seen = pd.Series(np.where(index.hour == (BASE.hour + 1) % 24, 52.0, 8.0), index=index)
    frame = pd.DataFrame({0.9: [8.0], 0.99: [9.0]}, index=[BASE])
    return ({w.name: Forecast.of(frame, 0.9, 0.99)}, {w.name: History.of(seen, now)}, {}, Training(),
            ClusterPolicy(64, (w,), horizon_hours=H), now)


@settings(max_examples=300, deadline=None)
@given(fallback_scenario())
@example(_forecast_ending_before_the_lead_time())  # 26 GPUs of the fallback's, said 'forecast reservation 26'
def test_a_step_says_fallback_exactly_when_its_reservation_is_the_fallbacks(s):
    """The reservation in force now is an hour's within the lead time ahead: the step's source (its reason,
    FallbackActive) is that hour's, the forecast's or the fallback's."""
    _, _, _, _, policy, now = s
    hours, step = plan(*s)
    (w,), (wh,), (ws,) = policy.workloads, hours.workloads, step.workloads
    t = now.timestamp()
    window = range(wh.at(t), wh.at(t + w.lead_time_seconds) + 1)
    assert ws.period in window and ws.forecast_gpus == int(wh.reserved[ws.period]) == max(wh.reserved[window])
    assert ws.from_forecast == bool(wh.from_forecast[ws.period])
    assert ("fallback reservation" in ws.reason) != ws.from_forecast
    assert wh.reason(ws.period, w, policy.lendable).startswith("fallback") != ws.from_forecast


def _a_day_from_the_next_hour_of_day_yesterday():
    """A day of history from 14:00 yesterday (10 everywhere, 80 at 03:00), no forecast, at 13:07: the 13:00 hour of day
    was not seen before it began."""
    w = WorkloadPolicy("ns/w0", demand_per_gpu=2.0, gpus_per_replica=2)
    now = BASE + pd.Timedelta(minutes=7)
    index = pd.date_range(now - pd.Timedelta(hours=23, minutes=7), now, freq="5min")
    seen = pd.Series(np.where(index.hour == 3, 80.0, 10.0), index=index)
    return {}, {w.name: History.of(seen, now)}, {}, Training(), ClusterPolicy(64, (w,), horizon_hours=H), now


@settings(max_examples=300, deadline=None)
@given(fallback_scenario())
@example(_a_day_from_the_next_hour_of_day_yesterday())  # "last week's peak at this hour -> 40 GPUs" of a 10 there
def test_a_fallback_hour_reserves_and_says_the_peak_the_readme_names(s):
    """README: the conservative fallback is "each hour's peak of the last week ...; an hour of day not seen that week:
    the week's highest peak, through the whole hour" (one first seen as it runs keeps it); nothing observed in the
    week: minGpus. Each fallback hour's reservation is that peak's GPUs within the policy's bounds, and its reason
    names which of them it is."""
    _, histories, _, _, policy, now = s
    hours, _ = plan(*s)
    (w,), (wh,) = policy.workloads, hours.workloads
    h = histories.get(w.name)
    times, values = (h.times, h.values) if h else (np.empty(0), np.empty(0))
    week = pd.Series(values, index=pd.to_datetime(times, unit="s", utc=True)).dropna()
    week = week[(week.index > now - 7 * DAY) & (week.index <= now)]
    for i in np.flatnonzero(~wh.from_forecast):
        reason = wh.reason(i, w, policy.lendable)
        if week.empty:
            assert wh.why_fallback == "no data" and wh.reserved[i] == w.least_gpus
            assert "nothing observed in the last week" in reason
            continue
        hour = pd.Timestamp(wh.starts[i], unit="s", tz="UTC").hour
        own = week[week.index.hour == hour]
        seen_before = bool((own.index < now.floor("h")).any())
        peak = own.max() if seen_before else week.max()
        held = min(w.at_least(w.gpus(float(peak))), w.top(policy.lendable))
        assert int(wh.reserved[i] + wh.cut[i]) == held, (i, reason)
        assert ("last week's peak at this hour" in reason) == seen_before, reason
        assert ("the week's highest peak" in reason) != seen_before, reason


def _a_week_old_history_not_called_degraded():
    """The newest sample 9 days old, and the caller's staleness bound longer than that (run.stale_after_seconds
    900000): not degraded to it; the target holds 20 GPUs."""
    w = WorkloadPolicy("ns/w0", demand_per_gpu=2.0, min_gpus=2)
    index = pd.date_range(BASE - 17 * DAY, BASE - 9 * DAY, freq="h")
    return ({}, {w.name: History.of(pd.Series(9.0, index=index), BASE)},
            {w.name: Observed(np.empty(0), np.empty(0), 20, False)}, Training(),
            ClusterPolicy(64, (w,), horizon_hours=H), BASE)


@settings(max_examples=300, deadline=None)
@given(fallback_scenario())
@example(_a_week_old_history_not_called_degraded())  # 2 GPUs, minGpus alone, of a target holding 20
def test_degraded_data_never_lowers_and_no_data_never_takes_more_than_it_sees(s):
    """README: "while the data is degraded the reservation only goes up, never below what the target holds now. A
    policy with nothing observed in the last week ... reserves its minGpus and what its target holds now, and follows
    live samples (recent peak + warm buffer) ... It never takes the whole cluster"."""
    _, _, observed, _, policy, _ = s
    hours, step = plan(*s)
    (w,), (wh,), (ws,), o = policy.workloads, hours.workloads, step.workloads, observed[policy.workloads[0].name]
    no_data = wh.why_fallback == "no data"
    held = min(w.at_least(o.held_gpus), w.top(policy.lendable)) if o.degraded or no_data else 0
    assert w.least_gpus <= ws.reserved_gpus <= w.top(policy.lendable)
    if o.degraded or no_data:
        assert ws.reserved_gpus >= held and ws.degraded and "never below what the target holds now" in ws.reason
    if no_data:
        assert not wh.from_forecast.any() and (wh.reserved == w.least_gpus).all()
        assert ws.reserved_gpus <= max(w.at_least(ws.peak_gpus + ws.buffer_gpus), held), ws


@settings(max_examples=300, deadline=None)
@given(fallback_scenario())
def test_no_job_is_stopped_whose_gpus_are_not_needed(s):
    """README: "No more are stopped than needed". Training that fits in what is lent now and in every hour's slack
    until the jobs could next checkpoint and stop, none of it slow to preempt, is never stopped, fallback or not."""
    _, _, _, training, policy, now = s
    hours, step = plan(*s)
    t = now.timestamp()
    assume(not (training.preempt_seconds > policy.reclaim_deadline_seconds).any())
    window = t + training.longest_interval + policy.longest_lead_seconds + training.slowest_seconds
    ahead = [i for i, start in enumerate(hours.workloads[0].starts) if t < start <= window]
    if training.running_gpus <= min([step.lent_gpus, *(int(hours.slack[i]) for i in ahead)]):
        assert step.preemptions == (), step.preemptions
