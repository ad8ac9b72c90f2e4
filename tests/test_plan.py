"""The pure planner (planning.planner): plan_hours (reservation and headroom per period, fallback, capacity cut)
and plan_step (reservation in force now, lent slack, preemptions), each decision with its reason."""
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from core.policy import PolicySpec
from forecast.history import load_history
from planning.planner import (
    ClusterPolicy,
    Forecast,
    History,
    Observed,
    Training,
    WorkloadPolicy,
    newest_checkpoint,
    plan_hours,
    plan_step,
    shares,
)

NOW = pd.Timestamp("2026-01-08 10:07", tz="UTC")
HOUR = pd.Timestamp("2026-01-08 10:00", tz="UTC")


def at(hhmm: str) -> float:
    return pd.Timestamp(f"2026-01-08 {hhmm}", tz="UTC").timestamp()


def history(value=10.0, days=8, end=NOW) -> pd.Series:
    idx = pd.date_range(end.floor("h") - pd.Timedelta(days=days), end.floor("h"), freq="h")
    return pd.Series(value, index=idx, dtype=float)


def forecast(values, hi_extra=5.0, start=HOUR) -> Forecast:
    idx = pd.date_range(start, periods=len(values), freq="h")
    v = np.asarray(values, dtype=float)
    return Forecast.of(pd.DataFrame({0.5: v / 2, 0.9: v, 0.99: v + hi_extra}, index=idx), 0.9, 0.99)


def workload(name="chat", **kw) -> WorkloadPolicy:
    base = dict(demand_per_gpu=2.0, gpus_per_replica=2, min_gpus=2, max_gpus=60, lead_time_seconds=900.0,
                warm_buffer=0.0, scale_in_delay_seconds=0.0)
    return WorkloadPolicy(name, **{**base, **kw})


def cluster(*workloads, capacity=64, weights=(("train-a", 1.0),), **kw) -> ClusterPolicy:
    return ClusterPolicy(capacity, workloads or (workload(),), weights, horizon_hours=kw.pop("horizon_hours", 4), **kw)


def hours_of(values, pol=None, hist=None, now=NOW, **fkw):
    pol = pol or cluster()
    name = pol.workloads[0].name
    return plan_hours({name: forecast(values, **fkw)}, {name: History.of(history() if hist is None else hist, now)},
                      pol, now)


def observed(*samples, held=0, degraded=False) -> Observed:
    """Demand samples as (epoch seconds, value)."""
    times = np.array([t for t, _ in samples], float)
    return Observed(times, np.array([v for _, v in samples], float), held, degraded)


def training(*jobs, terminating=0) -> Training:
    """jobs: dicts with id, gpus and optionally queue, priority, preempt, interval, last (epoch seconds)."""
    col = lambda key, default, dtype=float: np.array([j.get(key, default) for j in jobs], dtype)  # noqa: E731
    return Training(tuple(j["id"] for j in jobs), tuple(j.get("queue", "train-a") for j in jobs),
                    col("gpus", 0, np.int64), col("priority", 0, np.int64), col("preempt", 60.0),
                    col("interval", 1800.0), col("last", NOW.timestamp()), terminating)


# --------------------------------------------------------------------------------------------- hours
def test_capacity_model_rounds_up_to_whole_replicas_and_carries_reasons():
    h = hours_of([9, 9, 9, 9])
    (w,) = h.workloads
    assert w.reserved[0] == 6  # 9 demand / 2 per GPU = 4.5 GPUs -> 3 replicas of 2
    assert w.headroom[0] == 8 - 6  # q0.99 = 14 -> 7 GPUs -> 4 replicas = 8
    assert h.slack[0] == 64 - 6
    assert w.from_forecast.all() and not h.notes
    reason = w.reason(0, cluster().workloads[0], 64)
    assert "q0.9" in reason and "6 GPUs" in reason and "headroom 2" in reason


def test_every_reservation_is_whole_replicas_so_no_gpu_is_both_reserved_and_lent():
    """A target runs ceil(reserved / gpusPerReplica) replicas: 9 GPUs reserved of 8-GPU replicas run 16, and lending
    the cluster's other 55 would count 7 GPUs twice. So minGpus and marginGpus round up to whole replicas, maxGpus,
    the cluster and a capacity cut down."""
    now = NOW.timestamp()
    for kw, demand, want in ((dict(margin_gpus=1), 8, 16), (dict(max_gpus=30), 1000, 24), (dict(min_gpus=6), 0, 8),
                             ({}, 1000, 56)):
        w = workload(**{**dict(demand_per_gpu=1.0, gpus_per_replica=8, min_gpus=0, max_gpus=None), **kw})
        pol = cluster(w, capacity=60)
        s = plan_step(hours_of([demand] * 4, pol=pol), {"chat": observed((now, demand))}, training(), pol, now)
        assert s.workloads[0].reserved_gpus == want, kw
        assert s.workloads[0].reserved_gpus + s.lent_gpus <= 60
    odd = cluster(workload(demand_per_gpu=1.0, gpus_per_replica=8, min_gpus=6, margin_gpus=1), capacity=64)
    reason = hours_of([8] * 4, pol=odd).workloads[0].reason(0, odd.workloads[0], 64)
    assert "-> 16 GPUs (+8 margin, clamp [8, 56], whole replicas)" in reason  # the reason says what is reserved
    # cut to the cluster: the later workload gives way by whole replicas
    a, b = workload("a", demand_per_gpu=1.0, gpus_per_replica=1), workload("b", demand_per_gpu=1.0, gpus_per_replica=8,
                                                                           min_gpus=0)
    pol = cluster(a, b, capacity=60)
    f = {"a": forecast([30] * 4), "b": forecast([32] * 4)}
    hours = plan_hours(f, {"a": History.of(history(), NOW), "b": History.of(history(), NOW)}, pol, NOW)
    assert list(hours.workloads[1].reserved) == [24] * 4 and list(hours.workloads[1].cut) == [8] * 4
    assert list(hours.slack) == [6] * 4
    s = plan_step(hours, {"a": observed((now, 40.0))}, training(), pol, now)  # a's peak: 4 GPUs over, a replica of b
    assert [w.reserved_gpus for w in s.workloads] == [40, 16] and s.lent_gpus == 4
    # a minimum that whole replicas take over the cluster is refused, naming it
    with pytest.raises(ValueError, match="whole replicas"):
        cluster(workload(gpus_per_replica=4, min_gpus=5), capacity=7)


def test_hour_plan_starts_at_the_current_period_and_spans_the_horizon():
    h = hours_of([9] * 8, pol=cluster(horizon_hours=6))
    (w,) = h.workloads
    assert w.starts[0] == HOUR.timestamp() and len(w.starts) == 6 and w.period == 3600.0
    assert w.at(NOW.timestamp()) == 0 and w.at(at("11:00")) == 1 and w.at(at("23:00")) == 5


def test_clamps_min_max_and_margin():
    assert list(hours_of([0, 0.5, 9, 500]).workloads[0].reserved) == [2, 2, 6, 60]  # min 2, max 60
    margin = cluster(workload(margin_gpus=3))  # 3 GPUs of margin are 2 replicas of 2
    assert list(hours_of([0, 9, 9, 500], pol=margin).workloads[0].reserved) == [0 + 4, 6 + 4, 10, 60]
    unbounded = cluster(workload(max_gpus=None, min_gpus=0))
    assert list(hours_of([0, 9, 500, 500], pol=unbounded).workloads[0].reserved) == [0, 6, 64, 64]  # top: lendable
    lendable = cluster(workload(max_gpus=None), non_lendable_gpus=8)
    assert hours_of([500] * 4, pol=lendable).workloads[0].reserved.max() == 56


def test_over_capacity_later_workloads_give_way_first_never_below_their_minimum():
    a, b = workload("a", min_gpus=2), workload("b", min_gpus=2)
    pol = cluster(a, b, capacity=20)
    fc = {"a": forecast([28, 28, 12, 12]), "b": forecast([28, 20, 28, 12])}
    hist = {n: History.of(history(), NOW) for n in ("a", "b")}
    h = plan_hours(fc, hist, pol, NOW)
    ra, rb = h.workloads
    # hour 0: both want 14 -> b cut to 6; hour 1: a 14 + b 10 -> b cut to 6; hour 2: 6 + 14 fits exactly
    assert list(ra.reserved) == [14, 14, 6, 6] and list(ra.cut) == [0, 0, 0, 0]
    assert list(rb.reserved) == [6, 6, 14, 6] and list(rb.cut) == [8, 4, 0, 0]
    assert (ra.reserved + rb.reserved <= 20).all() and list(h.slack) == [0, 0, 0, 8]
    assert "cut by 8 GPUs" in rb.reason(0, b, 20) and "cut" not in ra.reason(0, a, 20)
    # b's minimum holds: a is cut once b is at its minimum
    pol = cluster(workload("a", min_gpus=2), workload("b", min_gpus=10), capacity=20)
    h = plan_hours(fc, hist, pol, NOW)
    assert h.workloads[1].reserved[0] == 10 and h.workloads[0].reserved[0] == 10 and h.workloads[0].cut[0] == 4


def test_minimums_that_do_not_fit_and_duplicate_names_are_refused():
    with pytest.raises(ValueError, match="minimums"):
        ClusterPolicy(10, (workload("a", min_gpus=6), workload("b", min_gpus=6)))
    with pytest.raises(ValueError, match="minimums"):
        ClusterPolicy(16, (workload("a", min_gpus=12),), non_lendable_gpus=6)
    with pytest.raises(ValueError, match="unique"):
        ClusterPolicy(64, (workload("a"), workload("a")))


@pytest.mark.parametrize("bad", [np.nan, -3.0, "high-below-target"])
def test_bad_forecast_periods_fall_back_to_last_weeks_same_hour_peak(bad):
    h = history(4.0)
    h[h.index.hour == 10] = 50.0  # last week's peak at this hour of day
    values = [0.0, 4, 4, 4] if bad == "high-below-target" else [bad, 4, 4, 4]
    frame = pd.DataFrame({0.9: values, 0.99: [-1.0, 9, 9, 9] if bad == "high-below-target" else np.add(values, 5)},
                         index=pd.date_range(HOUR, periods=4, freq="h"))
    p = plan_hours({"chat": Forecast.of(frame, 0.9, 0.99)}, {"chat": History.of(h, NOW)}, cluster(), NOW)
    (w,) = p.workloads
    assert list(w.from_forecast) == [False, True, True, True]
    assert w.reserved[0] == 26 and w.headroom[0] == 0  # 50 / 2 = 25 GPUs -> 13 replicas; no headroom from a fallback
    assert list(w.reserved[1:]) == [2, 2, 2]
    assert any("last week" in n and "1 period" in n for n in p.notes)
    assert w.reason(0, cluster().workloads[0], 64).startswith("fallback (forecast missing, NaN or negative)")


def test_crossing_forecast_quantiles_fall_back_saying_they_cross():
    """The forecast contract refuses a q0.99 below the q0.9, but one read from the controller's store may carry it:
    the hour falls back, and the reason says what was wrong (nothing there is missing, NaN or negative)."""
    h = history(4.0)
    h[h.index.hour == 10] = 50.0
    frame = pd.DataFrame({0.9: [8.0, 4, 4, 4], 0.99: [3.0, 9, 9, np.nan]},
                         index=pd.date_range(HOUR, periods=4, freq="h"))
    (w,) = plan_hours({"chat": Forecast.of(frame, 0.9, 0.99)}, {"chat": History.of(h, NOW)}, cluster(), NOW).workloads
    assert list(w.from_forecast) == [False, True, True, False] and w.reserved[0] == 26
    assert w.reason(0, cluster().workloads[0], 64).startswith(
        "fallback (forecast missing, NaN or negative; forecast q0.99 below its q0.9): last week's peak")
    frame[0.99] = [3.0, 9, 9, 9]
    (w,) = plan_hours({"chat": Forecast.of(frame, 0.9, 0.99)}, {"chat": History.of(h, NOW)}, cluster(), NOW).workloads
    assert w.why_fallback == "forecast q0.99 below its q0.9" and list(w.from_forecast) == [False, True, True, True]


def test_missing_forecast_periods_and_no_forecast_fall_back():
    h = history(16.0)
    short = plan_hours({"chat": forecast([4, 4])}, {"chat": History.of(h, NOW)}, cluster(), NOW).workloads[0]
    assert list(short.from_forecast) == [True, True, False, False] and list(short.reserved) == [2, 2, 8, 8]
    late = forecast([4, 4, 4, 4], start=HOUR + pd.Timedelta(hours=1))
    w = plan_hours({"chat": late}, {"chat": History.of(h, NOW)}, cluster(), NOW).workloads[0]
    assert list(w.from_forecast) == [False, True, True, True]
    none = plan_hours({"chat": None}, {"chat": History.of(h, NOW)}, cluster(), NOW)
    assert not none.workloads[0].from_forecast.any() and list(none.workloads[0].reserved) == [8] * 4
    assert none.workloads[0].why_fallback == "no forecast"


def test_stale_history_falls_back_and_no_observed_week_reserves_min_gpus_and_what_the_target_holds():
    old = history(20.0, end=NOW - pd.Timedelta(hours=5))  # the newest sample is 5 h old: the forecast is not trusted
    p = plan_hours({"chat": forecast([1, 1, 1, 1])}, {"chat": History.of(old, NOW)}, cluster(), NOW)
    (w,) = p.workloads
    assert not w.from_forecast.any() and w.why_fallback == "stale history" and list(w.reserved) == [10] * 4
    assert "stale" in w.reason(0, cluster().workloads[0], 64)
    fresh_enough = plan_hours({"chat": forecast([1, 1, 1, 1])}, {"chat": History.of(old, NOW)},
                              cluster(stale_after_seconds=6 * 3600), NOW)
    assert fresh_enough.workloads[0].from_forecast.all()
    # nothing observed in the week: minGpus, never everything (that would take the cluster from training and from
    # the other policies for this policy's own fault), and the reason says so
    for pol in (cluster(workload(min_gpus=6)), cluster(workload(min_gpus=6, max_gpus=None), non_lendable_gpus=4)):
        for hist in ({}, {"chat": History.of(history(9.0, end=NOW - pd.Timedelta(days=8)), NOW)}):
            p = plan_hours({}, hist, pol, NOW)
            (w,) = p.workloads
            assert list(w.reserved) == [6] * 4 and list(p.slack) == [64 - pol.non_lendable_gpus - 6] * 4
            assert w.why_fallback == "no data" and "nothing observed in the last week -> minGpus 6" in w.reason(
                0, pol.workloads[0], pol.lendable)
            # the step layer: never below what the target serves now, never more; live samples drive it
            for held, want in ((20, 20), (3, 6), (90, 60)):
                s = plan_step(p, {"chat": observed(held=held, degraded=True)}, training(), pol, NOW).workloads[0]
                assert s.reserved_gpus == min(want, pol.workloads[0].top(pol.lendable))
                assert "never below what the target holds now" in s.reason
            live = plan_step(p, {"chat": observed((NOW.timestamp(), 30.0), held=0)}, training(), pol, NOW)
            assert live.workloads[0].reserved_gpus == 16  # 30 demand / 2 per GPU, whole 2-GPU replicas
    # an hour of day not seen in an observed week: the week's highest peak for that hour
    gappy = history(4.0)
    gappy[gappy.index.hour == 11] = np.nan
    gappy[gappy.index.hour == 3] = 20.0
    w = plan_hours({}, {"chat": History.of(gappy, NOW)}, cluster(), NOW).workloads[0]
    assert list(w.reserved) == [2, 10, 2, 2] and w.why_fallback == "no forecast"



def test_an_hour_first_seen_in_progress_keeps_the_unseen_hours_reservation_not_a_pulse():
    """Twelve hours of history (00:00-11:55, peak 80 at 03:00), then the evening: each hour of day is first seen as it
    runs. Its first samples are not its peak: the hour keeps the week's highest peak it was planned with from its
    lead time on, so the reservation is a level, not a rise at each :45 and a drop a few minutes after the hour."""
    index = pd.date_range("2026-01-08 00:00", "2026-01-08 19:55", freq="5min", tz="UTC")
    demand = pd.Series(np.where(index.hour < 12, 10.0, 4.0), index=index)
    demand[index.hour == 3] = 80.0
    pol = cluster()
    level = pol.workloads[0].gpus(80.0)

    def reserved(now: str) -> int:
        t = pd.Timestamp(f"2026-01-08 {now}", tz="UTC")
        hours = plan_hours({}, {"chat": History.of(demand[demand.index <= t], t)}, pol, t)
        return plan_step(hours, {"chat": observed()}, training(), pol, t).workloads[0].reserved_gpus

    assert [reserved(t) for t in ("18:45", "19:00", "19:05", "19:40", "19:55")] == [level] * 5
    # what the hour in progress shows still counts toward the week's highest peak that an unseen hour reserves
    demand[index == pd.Timestamp("2026-01-08 19:50", tz="UTC")] = 100.0
    assert reserved("19:55") == pol.workloads[0].gpus(100.0)

def test_the_fallback_keeps_the_same_hour_on_the_policys_wall_clock_across_a_daylight_saving_change():
    """Berlin, busy 09:00-17:00 on weekdays; clocks go forward on Sunday 29 March and the data stopped at midnight.
    On Monday the fallback's 'same hour last week' is the Berlin hour (07:00 UTC, was 08:00 UTC), as the forecast's
    seasons count it under spec.timezone: on UTC hours it reserved the idle level for 09:00-10:00."""
    idx = pd.date_range("2026-03-20", "2026-03-29 23:00", freq="h", tz="UTC")
    local = idx.tz_convert("Europe/Berlin")
    busy = (local.hour >= 9) & (local.hour < 17) & (local.day_of_week < 5)
    hist = pd.Series(np.where(busy, 40.0, 4.0), index=idx)
    now = pd.Timestamp("2026-03-30 06:30", tz="UTC")  # Monday 08:30 in Berlin
    berlin = workload(demand_per_gpu=1.0, gpus_per_replica=1, min_gpus=0, timezone="Europe/Berlin")
    for w, want in ((berlin, [4, 40, 40]), (replace(berlin, timezone="UTC"), [4, 4, 40])):
        pol = cluster(w, horizon_hours=12)
        (h,) = plan_hours({}, {"chat": History.of(hist, now)}, pol, now).workloads
        assert list(h.reserved[:3]) == want, w.timezone  # 08:00, 09:00, 10:00 in Berlin
        assert list(h.reserved[8:11]) == ([40, 4, 4] if w is berlin else [40, 40, 4])  # 16:00, 17:00, 18:00
    # the spec's zone reaches the planner
    spec = PolicySpec.model_validate({"query": "q", "capacity": {"demandPerGpu": 1}, "timezone": "Europe/Berlin",
                                      "target": {"kind": "Deployment", "name": "d"}})
    assert WorkloadPolicy.from_spec("ns/p", spec).timezone == "Europe/Berlin"


def test_the_fallback_covers_a_wall_clock_peak_across_a_half_hour_change_of_the_clock():
    """Lord Howe's clock goes from +11:00 to +10:30 at 2026-04-05 02:00; demand peaks daily at 11:10 there. Planned
    the evening before, the hour 00:00-01:00 UTC after the change (10:30-11:30 there) holds the 11:10 peak, but each
    period took the one hour of day its start fell in on the evening's clock (10:00-11:00): it reserved the idle level
    and the next hour, 11:30-12:30, the peak, after it had come. An hour on a clock half an hour off the planning one's
    holds parts of two of its hours of day: the higher peak of both."""
    zone = "Australia/Lord_Howe"
    idx = pd.date_range("2026-03-27", "2026-04-04 12:00", freq="5min", tz="UTC")
    local = idx.tz_convert(zone)
    hist = pd.Series(np.where((local.hour == 11) & (local.minute == 10), 40.0, 4.0), index=idx)
    now = pd.Timestamp("2026-04-04 12:00", tz="UTC")  # 23:00 in Lord Howe, +11:00
    w = workload(demand_per_gpu=1.0, gpus_per_replica=1, min_gpus=0, timezone=zone)
    (h,) = plan_hours({}, {"chat": History.of(hist, now)}, cluster(w, horizon_hours=16), now).workloads
    reserved = dict(zip(pd.to_datetime(h.starts, unit="s", utc=True), h.reserved))
    peak_hour = pd.Timestamp("2026-04-05 11:10").tz_localize(zone).tz_convert("UTC").floor("h")
    assert peak_hour == pd.Timestamp("2026-04-05 00:00", tz="UTC")
    assert reserved[peak_hour] == 40
    # away from the peak the idle level, as before: only the hours of day a period holds count
    assert [reserved[peak_hour + pd.Timedelta(hours=k)] for k in (-2, -1, 2, 3)] == [4, 4, 4, 4]


def test_fallback_covers_every_sample_of_last_week_on_a_real_trace(shared_data):
    """NASA's web logs stop on 1995-08-01 (Hurricane Erin): a day later the forecast is stale, and the plan for the
    next day must cover, hour by hour, every 5-minute sample of the week before."""
    raw = load_history(shared_data / "traces" / "nasa_http_1995_5min.csv")
    now = pd.Timestamp("1995-08-02 12:30", tz="UTC")
    seen = raw[raw.index <= now].dropna()
    assert now - seen.index[-1] > pd.Timedelta(hours=2), "the trace's gap moved: pick another moment"
    per_gpu = float(raw.quantile(0.99)) / 40
    w = WorkloadPolicy("nasa", demand_per_gpu=per_gpu, min_gpus=1)
    pol = ClusterPolicy(128, (w,), horizon_hours=24)
    fc = Forecast(np.array([now.floor("h").timestamp() + 3600 * i for i in range(24)]), 3600.0,
                  np.ones(24), np.ones(24) * 2)  # a forecast issued on stale data: ignored
    (h,) = plan_hours({"nasa": fc}, {"nasa": History.of(raw, now)}, pol, now).workloads
    assert not h.from_forecast.any() and h.why_fallback == "stale history"
    week = seen[seen.index > now - pd.Timedelta(days=7)]
    assert len(week) > 500
    hour_of_day = pd.DatetimeIndex(pd.to_datetime(h.starts, unit="s", utc=True)).hour
    for i, hod in enumerate(hour_of_day):
        samples = week[week.index.hour == hod]
        assert len(samples), f"no sample at {hod}:00 in the week"
        assert h.reserved[i] * per_gpu >= samples.max() - 1e-6  # covers the peak...
        assert (h.reserved[i] - 1) * per_gpu < samples.max()    # ...with no GPU to spare
    assert len(set(h.reserved.tolist())) > 3  # it follows the daily cycle


# --------------------------------------------------------------------------------------------- now
def test_the_reservation_is_in_force_lead_time_ahead_of_the_hour():
    h = hours_of([4, 40, 4, 4])
    assert list(h.workloads[0].reserved) == [2, 20, 2, 2]  # the hourly plan itself has no lead
    pol = cluster()
    for t, want in (("10:07", 2), ("10:44:59", 2), ("10:45", 20), ("11:30", 20), ("11:44:59", 20), ("11:45", 20),
                    ("12:00", 2)):
        step = plan_step(h, {"chat": observed()}, training(), pol, at(t))
        assert step.workloads[0].reserved_gpus == want, t
        assert step.workloads[0].forecast_gpus == want and step.workloads[0].from_forecast
    longer = cluster(workload(lead_time_seconds=3600.0))
    assert plan_step(h, {}, training(), longer, at("10:00:01")).workloads[0].reserved_gpus == 20
    # plan_step takes epoch seconds as int, float or a Timestamp alike
    assert plan_step(h, {}, training(), pol, int(at("10:45"))).workloads[0].reserved_gpus == 20
    stamp = pd.Timestamp("2026-01-08 10:45", tz="UTC")
    assert plan_step(h, {}, training(), pol, stamp).workloads[0].reserved_gpus == 20


def test_recent_observed_peak_and_warm_buffer_block_scale_in():
    h = hours_of([4, 4, 4, 4])
    now = NOW.timestamp()
    demand = observed((now - 300, 30.0), (now, 6.0))
    kept = cluster(workload(scale_in_delay_seconds=600.0))
    s = plan_step(h, {"chat": demand}, training(), kept, now).workloads[0]
    assert (s.reserved_gpus, s.peak_gpus, s.forecast_gpus) == (16, 16, 2)  # 30 / 2 = 15 GPUs -> 8 replicas
    assert "recent peak 16" in s.reason
    short = cluster(workload(scale_in_delay_seconds=120.0))  # the 30 is older than the delay: only the 6 counts
    assert plan_step(h, {"chat": demand}, training(), short, now).workloads[0].reserved_gpus == 4
    exactly = cluster(workload(scale_in_delay_seconds=300.0))  # the 30 is as old as the delay: it still counts
    assert plan_step(h, {"chat": demand}, training(), exactly, now).workloads[0].reserved_gpus == 16
    buffered = cluster(workload(scale_in_delay_seconds=600.0, warm_buffer=1.0))
    s = plan_step(h, {"chat": demand}, training(), buffered, now).workloads[0]
    assert (s.buffer_gpus, s.reserved_gpus) == (4, 20)  # 1.0 x sqrt(16)
    odd = cluster(workload(scale_in_delay_seconds=600.0, warm_buffer=1.25))
    s = plan_step(h, {"chat": demand}, training(), odd, now).workloads[0]
    assert (s.buffer_gpus, s.reserved_gpus) == (6, 22)  # 1.25 x sqrt(16) = 5 GPUs: 3 whole replicas of 2
    future = observed((now + 60, 500.0))  # a sample after now is not seen
    assert plan_step(h, {"chat": future}, training(), kept, now).workloads[0].reserved_gpus == 2
    capped = plan_step(h, {"chat": observed((now, 1000.0))}, training(), kept, now).workloads[0]
    assert capped.reserved_gpus == 60  # the maximum holds


def test_demand_last_seen_counts_when_no_sample_falls_within_the_scale_in_delay():
    """A Prometheus step (60 s) longer than scaleInDelay (0 s, 10 s), or a reconcile between two samples: the newest
    sample is demand now until a newer one says otherwise; one older than the plan trusts (stale) is not."""
    h = hours_of([4, 4, 4, 4])
    now = NOW.timestamp()
    jumped = observed((now - 90, 4.0), (now - 30, 30.0))  # demand rose to 15 GPUs at the scrape 30 s ago
    for delay in (0.0, 10.0):
        s = plan_step(h, {"chat": jumped}, training(), cluster(workload(scale_in_delay_seconds=delay)), now)
        assert (s.workloads[0].peak_gpus, s.workloads[0].reserved_gpus) == (16, 16), delay
    buffered = cluster(workload(warm_buffer=1.0))
    assert plan_step(h, {"chat": jumped}, training(), buffered, now).workloads[0].reserved_gpus == 20
    gap = observed((now - 120, 30.0), (now, float("nan")))  # a gap sample (an infinite value read as missing)
    assert plan_step(h, {"chat": gap}, training(), cluster(), now).workloads[0].reserved_gpus == 16
    pol = cluster()
    old = observed((now - pol.stale_after_seconds - 1, 30.0))
    assert plan_step(h, {"chat": old}, training(), pol, now).workloads[0].reserved_gpus == 2


def test_degraded_data_never_lowers_the_reservation():
    h = hours_of([4, 4, 4, 4])
    pol, now = cluster(), NOW.timestamp()
    assert plan_step(h, {"chat": observed(held=30)}, training(), pol, now).workloads[0].reserved_gpus == 2
    s = plan_step(h, {"chat": observed(held=30, degraded=True)}, training(), pol, now).workloads[0]
    assert s.reserved_gpus == 30 and s.degraded and "not lowered" in s.reason
    up = plan_step(hours_of([40, 40, 40, 40]), {"chat": observed(held=10, degraded=True)}, training(), pol, now)
    assert up.workloads[0].reserved_gpus == 20  # ...but still goes up
    top = plan_step(h, {"chat": observed(held=64, degraded=True)}, training(), pol, now)
    assert top.workloads[0].reserved_gpus == 60


def test_step_cut_to_capacity_later_workloads_first():
    a, b = workload("a", min_gpus=2), workload("b", min_gpus=4)
    pol = cluster(a, b, capacity=40)
    fc = {"a": forecast([4] * 4), "b": forecast([4] * 4)}
    hist = {n: History.of(history(), NOW) for n in ("a", "b")}
    h = plan_hours(fc, hist, pol, NOW)
    now = NOW.timestamp()
    s = plan_step(h, {"a": observed((now, 60.0)), "b": observed((now, 60.0))}, training(), pol, now)
    assert [w.reserved_gpus for w in s.workloads] == [30, 10] and [w.cut_gpus for w in s.workloads] == [0, 20]
    assert "cut by 20" in s.workloads[1].reason and s.lent_gpus == 0
    s = plan_step(h, {"a": observed((now, 90.0)), "b": observed((now, 60.0))}, training(), pol, now)
    assert [w.reserved_gpus for w in s.workloads] == [36, 4]  # b at its minimum, a cut


def test_a_reservation_the_cluster_is_too_small_for_says_it_was_cut():
    """A cluster of 2 GPUs holds no replica of 8 or of 6: the step reserves nothing and lends the 2 GPUs. Its reasons
    said "recent peak 8", "recent peak 18" and nothing of a cut (only the cut that fits several workloads together
    was said), so a shortage read as the policy's own choice, and the property that a bigger cluster never lends less
    (test_plan_guarantees) found 2 lent on 2 GPUs, 0 on 26, with no cut to explain it."""
    now = NOW.timestamp()
    w0, w1 = (WorkloadPolicy(f"ns/{n}", 0.5, g, reclaim_deadline_seconds=1.0, lead_time_seconds=0.0)
              for n, g in (("w0", 8), ("w1", 6)))
    seen = {"ns/w0": observed((now, 1.0)), "ns/w1": observed((now, 7.0))}
    for capacity, cut in ((2, [8, 18]), (26, [0, 0]), (20, [0, 6])):
        pol = ClusterPolicy(capacity, (w0, w1))
        s = plan_step(plan_hours({}, {}, pol, NOW), seen, training(), pol, now)
        assert [w.cut_gpus for w in s.workloads] == cut, capacity
        assert [w.reserved_gpus + w.cut_gpus for w in s.workloads] == [8, 18]
        assert all((f"cut by {c} GPUs to fit the cluster" in w.reason) == (c > 0) for w, c in zip(s.workloads, cut))


def test_slack_split_by_team_weight_with_largest_remainders():
    assert shares(10, [("a", 1), ("b", 1), ("c", 1)]) == {"a": 4, "b": 3, "c": 3}  # ties by name
    assert shares(7, [("a", 2), ("b", 1)]) == {"a": 5, "b": 2}   # 4.67 / 2.33
    assert shares(10, [("x", 1), ("y", 3), ("z", 6)]) == {"x": 1, "y": 3, "z": 6}
    assert shares(5, [("b", 1), ("a", 1)]) == {"a": 3, "b": 2}  # ties by name, whatever the order given
    assert shares(9, []) == {}
    pol = cluster(weights=(("research", 3.0), ("vision", 1.0)))
    s = plan_step(hours_of([9, 9, 9, 9], pol=pol), {}, training(), pol, NOW.timestamp())
    assert s.lent_gpus == 58 and s.quotas == {"research": 44, "vision": 14}  # 43.5 / 14.5: tie by name


def test_no_team_is_given_more_quota_than_its_share_of_the_slack_lent():
    """While a slow job holds admissions back (7 of the 8 GPUs lent), no team's quota is above its share of the slack
    lent: a job it admits within its quota never makes it the team over its share, the first to lose jobs when GPUs
    are taken back. Largest remainders alone split 7 GPUs 0.1:1:1 as 1, 3, 3, and 8 as 0, 4, 4."""
    pol = cluster(workload(min_gpus=0, gpus_per_replica=1, headroom_floor_gpus=1), capacity=8,
                  weights=(("a", 0.1), ("b", 1.0), ("c", 1.0)))
    slow = training({"id": "slow", "gpus": 1, "preempt": 900.0, "queue": "b"})
    s = plan_step(hours_of([0] * 4, pol=pol, hi_extra=0.0), {}, slow, pol, NOW.timestamp())
    assert (s.lent_gpus, s.headroom_gpus, s.quotas) == (8, 1, {"a": 0, "b": 4, "c": 3})


def test_headroom_band_and_its_floor():
    pol = cluster()
    s = plan_step(hours_of([4] * 4, hi_extra=40), {}, training(), pol, NOW.timestamp())
    assert (s.workloads[0].headroom_gpus, s.headroom_gpus, s.lent_gpus) == (20, 20, 62)  # q0.99 44 -> 22 GPUs
    floor = cluster(workload(headroom_floor_gpus=30))
    s = plan_step(hours_of([4] * 4, hi_extra=40, pol=floor), {}, training(), floor, NOW.timestamp())
    assert s.headroom_gpus == 30
    # the band is never more than what is lent
    tight = cluster(workload(max_gpus=None, headroom_floor_gpus=30), capacity=40)
    s = plan_step(hours_of([60] * 4, pol=tight), {}, training(), tight, NOW.timestamp())
    assert (s.lent_gpus, s.headroom_gpus) == (10, 10)


# --------------------------------------------------------------------------------------------- preemptions
def test_emergency_preemption_when_observed_demand_exceeds_the_forecast_least_work_lost_first():
    jobs = training(*({"id": f"j{i}", "gpus": 20, "last": NOW.timestamp() - m * 60} for i, m in enumerate([25, 2, 10])))
    now = NOW.timestamp()
    s = plan_step(hours_of([4] * 4), {"chat": observed((now, 60.0))}, jobs, cluster(), now)
    # 30 GPUs for the observed demand leave 34 for 60 GPUs of jobs: the two that lose least go, now
    assert [(x.job, x.kind, x.gpus) for x in s.preemptions] == [("j1", "emergency", 20), ("j2", "emergency", 20)]
    assert s.due() == s.preemptions and all(x.at == now and x.workload == "chat" for x in s.preemptions)
    assert [x.work_lost_seconds for x in s.preemptions] == [120.0, 600.0]
    assert "observed demand above the forecast" in s.preemptions[0].reason and "26 GPUs more" in s.preemptions[0].reason
    # training within the slack: nothing is preempted
    light = training({"id": "j", "gpus": 34})
    assert plan_step(hours_of([4] * 4), {"chat": observed((now, 60.0))}, light, cluster(), now).preemptions == ()


def test_planned_preemption_when_the_reservation_rises_on_forecast():
    jobs = training({"id": "a", "gpus": 30, "last": at("10:40")}, {"id": "b", "gpus": 30, "last": at("10:30")})
    s = plan_step(hours_of([4, 40, 4, 4]), {}, jobs, cluster(), at("10:45"))
    (x,) = s.preemptions
    assert (x.job, x.kind, x.at, x.work_lost_seconds) == ("a", "planned", at("10:45"), 300.0)  # 60 > 44 lent
    assert "training holds 16 GPUs more than the 44 lent" in x.reason and "observed" not in x.reason


def test_ramp_up_preemption_is_planned_at_the_last_checkpoint_before_the_gpus_are_needed():
    ramp = hours_of([4, 40, 40, 40])  # 11:00: 20 GPUs reserved, slack 44; needed by 10:45
    job = {"id": "j", "gpus": 60, "interval": 600.0, "preempt": 60.0}
    s = plan_step(ramp, {}, training({**job, "last": at("10:30")}), cluster(), at("10:35"))
    (x,) = s.preemptions
    assert (x.kind, x.at, x.work_lost_seconds) == ("planned", at("10:40"), 0.0)  # ready by 10:44: checkpoint 10:40
    assert s.due() == () and "ramp-up at 11:00" in x.reason and "checkpoint 10:40" in x.reason
    # at that checkpoint it is due, still losing nothing
    s = plan_step(ramp, {}, training({**job, "last": at("10:40")}), cluster(), at("10:40"))
    assert [(p.job, p.at, p.work_lost_seconds) for p in s.due()] == [("j", at("10:40"), 0.0)]
    # no checkpoint before the GPUs are needed: it runs as long as it can and loses the partial interval
    s = plan_step(ramp, {}, training({**job, "interval": 3600.0, "last": at("10:00")}), cluster(), at("10:07"))
    (x,) = s.preemptions
    assert (x.at, x.work_lost_seconds) == (at("10:44"), 44 * 60.0) and "no checkpoint before then" in x.reason
    # a newest checkpoint said to be after then (a clock ahead of ours) is no checkpoint in time: it stops by then
    s = plan_step(ramp, {}, training({**job, "interval": 3600.0, "last": at("11:30")}), cluster(), at("10:07"))
    (x,) = s.preemptions
    assert x.at == at("10:44") and "no checkpoint before then" in x.reason
    # slower to stop (within a 20-minute reclaim deadline): ready earlier, so an earlier checkpoint
    patient = cluster(workload(reclaim_deadline_seconds=1200.0))
    s = plan_step(ramp, {}, training({**job, "preempt": 900.0, "last": at("10:20")}), patient, at("10:25"))
    assert [(p.at, p.work_lost_seconds) for p in s.preemptions] == [(at("10:30"), 0.0)]
    # only as many as the ramp needs: 16 GPUs over, the 20-GPU job with least work lost at 10:45 goes
    three = training({"id": "x", "gpus": 20, "interval": 600.0, "last": at("10:30")},
                     {"id": "y", "gpus": 20, "interval": 600.0, "last": at("10:32")},
                     {"id": "z", "gpus": 20, "interval": 1800.0, "last": at("10:20")})
    s = plan_step(ramp, {}, three, cluster(), at("10:35"))
    assert [(p.job, p.at, p.work_lost_seconds) for p in s.preemptions] == [("y", at("10:42"), 0.0)]
    # what a job loses is counted as it would stop: x reaches a checkpoint at 10:40 and loses nothing (its GPUs then
    # wait 5 minutes for the ramp), y has none before 10:44 and would lose 14 minutes, though its last is newer
    two = training({"id": "x", "gpus": 20, "interval": 600.0, "last": at("10:20")},
                   {"id": "y", "gpus": 20, "interval": 3600.0, "last": at("10:30")},
                   {"id": "z", "gpus": 20, "interval": 3600.0, "last": at("10:25")})
    assert [(p.job, p.at, p.work_lost_seconds) for p in plan_step(ramp, {}, two, cluster(), at("10:35")).preemptions
            ] == [("x", at("10:40"), 0.0)]
    # a Workload asking no GPUs (CPU only, in the same queue) frees none: never stopped for a ramp
    cpu = training({**job, "id": "cpu", "gpus": 0, "last": at("10:35")}, {**job, "last": at("10:30")})
    assert [p.job for p in plan_step(ramp, {}, cpu, cluster(), at("10:35")).preemptions] == ["j"]
    # a ramp beyond a checkpoint interval (plus lead and stop time) is decided later
    later = hours_of([4, 4, 40, 40])
    assert plan_step(later, {}, training({**job, "last": at("10:00")}), cluster(), at("10:07")).preemptions == ()


def test_a_ramp_takes_jobs_that_can_stop_by_the_time_the_gpus_are_needed_first():
    """Ramp at 11:00, GPUs needed by 10:45, planned at 10:40 (a 20-minute deadline: no job is slow): x stops in 10
    minutes, so stopped now it holds its GPUs until 10:50 whatever it loses; y stops in 30 s. Least waste alone
    would stop x (checkpointed just now) and leave inference 16 GPUs short from 10:45 to 10:50."""
    ramp = hours_of([4, 40, 40, 40])  # slack 44 at 11:00
    patient = cluster(workload(reclaim_deadline_seconds=1200.0))
    jobs = training({"id": "x", "gpus": 20, "preempt": 600.0, "interval": 3600.0, "last": at("10:40")},
                    {"id": "y", "gpus": 20, "preempt": 30.0, "interval": 3600.0, "last": at("10:20")},
                    {"id": "z", "gpus": 20, "preempt": 30.0, "interval": 3600.0, "last": at("10:00")})
    s = plan_step(ramp, {}, jobs, patient, at("10:40"))
    assert [(p.job, p.at) for p in s.preemptions] == [("y", at("10:44:30"))]
    # only when no job can stop in time is a late one taken (at once, as late as it is)
    late = training({"id": "x", "gpus": 20, "preempt": 600.0, "interval": 3600.0, "last": at("10:40")},
                    {"id": "y", "gpus": 40, "preempt": 600.0, "interval": 3600.0, "last": at("10:20")})
    assert [(p.job, p.at) for p in plan_step(ramp, {}, late, patient, at("10:40")).preemptions] == [("x", at("10:40"))]


def test_slow_to_preempt_jobs_are_kept_out_of_the_headroom_band():
    h = hours_of([4] * 4, hi_extra=40)  # lent 62, band 20: slow jobs may hold 42
    now = NOW.timestamp()
    jobs = training({"id": "slow1", "gpus": 30, "preempt": 900.0, "last": now - 600},
                    {"id": "slow2", "gpus": 30, "preempt": 900.0, "last": now - 60},
                    {"id": "fast", "gpus": 2, "preempt": 30.0, "last": now - 30})
    s = plan_step(h, {}, jobs, cluster(), now)
    (x,) = s.preemptions
    assert (x.job, x.kind, x.at) == ("slow2", "planned", now) and "headroom band" in x.reason
    fits = training({"id": "slow", "gpus": 42, "preempt": 900.0}, {"id": "fast", "gpus": 20, "preempt": 30.0})
    assert plan_step(h, {}, fits, cluster(), now).preemptions == ()
    deadline = cluster(workload(reclaim_deadline_seconds=1200.0))  # 900 s is fast enough under a 20-minute deadline
    assert plan_step(hours_of([4] * 4, hi_extra=40, pol=deadline), {}, jobs, deadline, now).preemptions == ()


def test_slow_jobs_stay_out_of_the_next_hours_band_within_lead_and_stop_time():
    # 11:00: 20 GPUs reserved, q0.99 45 -> 24 GPUs: slack 40 outside the band; now (10:00) slack 62, band 4
    h = hours_of([4, 40, 40, 40])
    slow = training({"id": "slow", "gpus": 42, "preempt": 900.0, "last": at("10:25")})
    # at 10:30 a job asked to stop would be gone by 10:45, plus the 15-minute lead time: 11:00's band is plausible
    (x,) = plan_step(h, {}, slow, cluster(), at("10:30")).preemptions
    assert (x.job, x.kind, x.at) == ("slow", "planned", at("10:30")) and "40 GPUs no plausible demand" in x.reason
    # at 10:00 the band that far ahead is not yet 11:00's; and a job that stops within the deadline may stay
    assert plan_step(h, {}, slow, cluster(), at("10:00")).preemptions == ()
    fast = training({"id": "fast", "gpus": 42, "preempt": 60.0, "last": at("10:25")})
    assert plan_step(h, {}, fast, cluster(), at("10:30")).preemptions == ()


def bursty(now: float, days: float = 2.0, base: float = 10.0, burst: float = 50.0):
    """5-minute samples up to `now`: `base`, and `burst` on every hour."""
    times = now - 300.0 * np.arange(int(days * 288))[::-1]
    values = np.where(times % 3600 == 0, burst, base)
    return observed(*zip(times, values))


def test_slow_jobs_stay_out_of_bursts_the_observed_history_has_seen_even_when_the_forecast_misses_them():
    now = at("10:40")
    h = hours_of([4] * 4)  # the forecast (q0.99 9 -> 6 GPUs) knows nothing of the hourly bursts
    seen = bursty(now)  # the last 35 minutes were quiet (10 -> 6 GPUs): the reservation is 6, 58 lent, band 4
    # bursts of +40 (20 GPUs) within the 30 minutes a slow job takes, plus a sample: quiet 10 + 40 -> 26 GPUs
    slow = training({"id": "slow", "gpus": 40, "preempt": 900.0, "last": now})
    (x,) = plan_step(h, {"chat": seen}, slow, cluster(), now).preemptions
    assert x.job == "slow" and "the 38 GPUs no plausible demand needs" in x.reason
    # 38 GPUs fit; without the history (the newest sample only) the forecast's band alone is kept out: 54 GPUs
    fits = training({"id": "slow", "gpus": 38, "preempt": 900.0, "last": now})
    assert plan_step(h, {"chat": seen}, fits, cluster(), now).preemptions == ()
    big = training({"id": "slow", "gpus": 54, "preempt": 900.0, "last": now})
    assert plan_step(h, {"chat": observed((now, 10.0))}, big, cluster(), now).preemptions == ()
    # jobs that stop within the deadline come back in time: they may hold all that is lent
    fast = training({"id": "fast", "gpus": 58, "preempt": 60.0, "last": now})
    assert plan_step(h, {"chat": seen}, fast, cluster(), now).preemptions == ()


def test_quota_admits_new_slow_jobs_only_where_plausible_demand_leaves_them_until_their_checkpoint():
    now = at("10:40")
    h = hours_of([4] * 4)
    seen = bursty(now)
    # a new job holds its GPUs a checkpoint interval, then stops: over 65 minutes a burst (50 -> 26 GPUs) is plausible
    jobs = training({"id": "slow", "gpus": 30, "preempt": 900.0, "last": now},
                    {"id": "fast", "gpus": 10, "preempt": 60.0, "last": now})
    s = plan_step(h, {"chat": seen}, jobs, cluster(), now)
    assert s.preemptions == () and s.lent_gpus == 58
    # Kueue counts the fast job too: 38 GPUs for slow jobs + 10
    assert s.quotas == {"train-a": 48} and "slow to preempt may hold only 38 GPUs" in s.quota_reason
    # only fast jobs running: the whole slack is lent to new admissions
    fast = plan_step(h, {"chat": seen}, training({"id": "fast", "gpus": 10, "preempt": 60.0, "last": now}), cluster(),
                     now)
    assert fast.quotas == {"train-a": 58} and fast.quota_reason == ""


def test_quota_opens_no_room_for_slow_jobs_when_a_stopping_job_is_gone():
    """Kueue admits whenever quota frees, not at the controller's next reconcile: a ClusterQueue "admits Workloads if
    and only if" they fit its unused quota (../shared/kueue/docs/cluster_queue.md). So the GPUs of a job still
    stopping are quota Kueue fills, with a job as slow as any, the moment it is gone. Counted as room beside the 38
    GPUs slow jobs may hold, a stopping 10-GPU job made the quota 58: once it had stopped, Kueue admitted 18 GPUs
    beside the 30 slow + 10 fast running, 48 GPUs of slow jobs, into what plausible demand needs."""
    now = at("10:40")
    h = hours_of([4] * 4)
    jobs = training({"id": "slow", "gpus": 30, "preempt": 900.0, "last": now},
                    {"id": "fast", "gpus": 10, "preempt": 60.0, "last": now}, terminating=10)
    s = plan_step(h, {"chat": bursty(now)}, jobs, cluster(), now)
    assert s.preemptions == () and s.lent_gpus == 58
    assert s.quotas == {"train-a": 48} and "slow to preempt may hold only 38 GPUs" in s.quota_reason


def test_quota_admits_nothing_the_plan_takes_back_before_a_new_job_could_checkpoint_and_stop():
    ramp = hours_of([4, 40, 40, 40])  # 10:00 slack 62; 11:00 slack 44, in force from 10:45
    job = {"id": "j", "gpus": 10, "preempt": 60.0, "interval": 1800.0, "last": at("10:00")}
    # at 10:07 a job admitted now checkpoints at 10:37 and is gone by 10:38, before 10:45: all 62 may be admitted
    s = plan_step(ramp, {}, training(job), cluster(), at("10:07"))
    assert (s.lent_gpus, s.quotas, s.quota_reason) == (62, {"train-a": 62}, "")
    # at 10:20 it could not: it and the jobs that cannot checkpoint and stop before 10:45 must fit in the ramp's 44
    # GPUs; the running job checkpoints at 10:30 and can leave then, losing nothing: 44 + 10, while running training
    # may still hold all that is lent
    s = plan_step(ramp, {}, training(job), cluster(), at("10:20"))
    assert (s.lent_gpus, s.quotas) == (62, {"train-a": 54}) and "could not checkpoint and stop before it" in \
        s.quota_reason and s.preemptions == ()
    # a job admitted at 10:15 checkpoints first at 10:45: it has to stay, and new jobs get only the ramp's slack
    s = plan_step(ramp, {}, training({**job, "last": at("10:15")}), cluster(), at("10:20"))
    assert s.quotas == {"train-a": 44}
    # jobs that checkpoint every 10 minutes can still be admitted then
    quick = plan_step(ramp, {}, training({**job, "interval": 600.0}), cluster(), at("10:20"))
    assert quick.quotas == {"train-a": 62}
    # nothing running tells what the next job is like: one that says nothing (30-minute checkpoints, 10 minutes to
    # stop): admitted at 10:00 it is gone by 10:55; at 10:07 not before 11:02
    assert plan_step(ramp, {}, training(), cluster(), at("10:00")).quotas == {"train-a": 62}
    assert plan_step(ramp, {}, training(), cluster(), at("10:07")).quotas == {"train-a": 44}


def test_quota_before_a_ramp_holds_no_room_in_the_gpus_of_jobs_still_stopping():
    """Kueue admits whenever quota frees (a ClusterQueue admits a Workload "if and only if" it fits its unused quota:
    ../shared/kueue/docs/cluster_queue.md), not at the controller's next reconcile: once a stopping job is gone, its
    quota takes a new job, which could not checkpoint and stop before the ramp either. Counted as freed for the ramp,
    8 GPUs stopping made the quota 52: once they were gone, Kueue admitted 42 beside the job that must stay, 52 GPUs
    where the ramp leaves 44."""
    ramp = hours_of([4, 40, 40, 40])  # 10:00 slack 62; 11:00 slack 44, in force from 10:45
    stays = {"id": "j", "gpus": 10, "preempt": 60.0, "interval": 1800.0, "last": at("10:15")}  # next checkpoint 10:45
    s = plan_step(ramp, {}, training(stays, terminating=8), cluster(), at("10:20"))
    assert s.lent_gpus == 62 and s.quotas == {"train-a": 44} and "could not checkpoint and stop" in s.quota_reason


def test_gpus_taken_back_come_from_the_teams_above_their_share_of_the_slack():
    """8 GPUs lent to two teams of equal weight: 4 each. Team a borrowed 12 while b was idle; b holds its 4. Taking
    back 8 from the jobs that lose least would stop b's job and leave a 8 (twice its share, b none); Kueue too
    takes back from borrowing queues first."""
    pol = cluster(weights=(("a", 1.0), ("b", 1.0)))
    h = hours_of([112] * 4)  # 56 GPUs reserved: 8 lent
    now = NOW.timestamp()
    jobs = training(*({"id": f"a{k}", "gpus": 4, "queue": "a", "last": now - 600} for k in range(3)),
                    {"id": "b0", "gpus": 4, "queue": "b", "last": now - 300})
    s = plan_step(h, {}, jobs, pol, now)
    assert s.lent_gpus == 8 and s.quotas == {"a": 4, "b": 4}
    assert sorted(p.job for p in s.preemptions) == ["a0", "a1"]
    # ...unless only the other team's jobs can stop within the deadline: inference first (no band here: slow jobs may
    # hold all 8 lent GPUs)
    slow_a = training(*({"id": f"a{k}", "gpus": 4, "queue": "a", "preempt": 900.0, "last": now} for k in range(2)),
                      {"id": "b0", "gpus": 4, "queue": "b", "last": now - 300})
    late = plan_step(hours_of([112] * 4, hi_extra=0), {}, slow_a, pol, now)
    assert [p.job for p in late.preemptions] == ["b0"] and "4 GPUs more than the 8 lent" in late.preemptions[0].reason


def test_one_selection_takes_back_the_gpus_lent_beyond_the_slack_and_keeps_slow_jobs_out_of_the_band():
    """Two takebacks due at once are one choice of victims: a job stopped to keep slow jobs out of the headroom band
    frees GPUs training holds beyond the slack too. Chosen apart, the slack's took the fast job and the band's the
    slow one, where the slow one alone met both: a preemption, and its lost work, for nothing."""
    now = NOW.timestamp()
    unbound = cluster(workload(max_gpus=None))  # headroom stops at maxGpus
    h = hours_of([120] * 4, pol=unbound, hi_extra=3)  # 60 reserved: 4 lent, band 2: slow jobs may hold 2
    jobs = training({"id": "j1", "gpus": 2, "preempt": 60.0, "last": now - 600},
                    {"id": "j2", "gpus": 4, "preempt": 900.0, "last": now - 300})
    s = plan_step(h, {}, jobs, unbound, now)
    assert (s.lent_gpus, s.headroom_gpus) == (4, 2)
    (x,) = s.preemptions  # 2 GPUs over the 4 lent, and 4 slow GPUs over the 2 they may hold: j2 alone does both
    assert (x.job, x.kind, x.at) == ("j2", "planned", now)
    assert "training holds 2 GPUs more than the 4 lent now" in x.reason and "headroom band" in x.reason
    # two teams of 4 GPUs' share each: a's three slow jobs hold 12, 8 more than the band leaves them, b's fast job its
    # 4. Two of a's free the 8 GPUs held beyond the slack as well: b keeps its job (apart, b0 went too)
    pol = cluster(weights=(("a", 1.0), ("b", 1.0)))
    slow_a = training(*({"id": f"a{k}", "gpus": 4, "queue": "a", "preempt": 900.0, "last": now} for k in range(3)),
                      {"id": "b0", "gpus": 4, "queue": "b", "last": now - 300})
    s = plan_step(hours_of([112] * 4), {}, slow_a, pol, now)
    assert (s.lent_gpus, s.headroom_gpus) == (8, 4)
    assert [p.job for p in s.preemptions] == ["a0", "a1"]
    assert all("8 GPUs more than the 8 lent" in p.reason and "headroom band" in p.reason for p in s.preemptions)


def test_gpus_a_ramp_or_the_headroom_band_takes_back_come_from_the_teams_above_their_share():
    """As above, but the GPUs are taken back for a forecast ramp (11:00 leaves 8 GPUs of slack: 4 for each team) and
    to keep slow jobs out of the headroom band: b's job, which loses least, is within b's share and stays."""
    pol = cluster(weights=(("a", 1.0), ("b", 1.0)))
    ramp = hours_of([4, 112, 112, 112], pol=pol)  # 62 lent now; 11:00: 56 reserved, GPUs needed by 10:45
    jobs = training(*({"id": f"a{k}", "gpus": 4, "queue": "a", "last": at("10:20")} for k in range(3)),
                    {"id": "b0", "gpus": 4, "queue": "b", "last": at("10:30")})
    assert sorted(p.job for p in plan_step(ramp, {}, jobs, pol, at("10:35")).preemptions) == ["a0", "a1"]
    # lent 62, band 20: slow jobs may hold 42, 31 of them each team's share; a holds 42 of 56 slow GPUs
    band = hours_of([4] * 4, pol=pol, hi_extra=40)
    now = NOW.timestamp()
    slow = training(*({"id": f"a{k}", "gpus": 14, "queue": "a", "preempt": 900.0, "last": now - 600} for k in range(3)),
                    {"id": "b0", "gpus": 14, "queue": "b", "preempt": 900.0, "last": now - 60})
    (x,) = plan_step(band, {}, slow, pol, now).preemptions
    assert x.job == "a0" and "headroom band" in x.reason


def test_a_higher_priority_job_is_stopped_only_when_no_lower_priority_one_would_do():
    """Kueue takes its candidates from the lowest priority up: a priority-100 job 9 minutes past its checkpoint stays,
    the priority-0 job 10 minutes past its own goes, whichever stage takes GPUs back."""
    now = NOW.timestamp()
    jobs = training({"id": "high", "gpus": 24, "priority": 100, "last": now - 540},
                    {"id": "low", "gpus": 24, "priority": 0, "last": now - 600})
    s = plan_step(hours_of([4] * 4), {"chat": observed((now, 40.0))}, jobs, cluster(), now)  # 20 reserved: 44 lent
    assert [x.job for x in s.preemptions] == ["low"]
    ramp = hours_of([4, 40, 40, 40])  # 11:00: slack 44
    jobs = training({"id": "high", "gpus": 24, "priority": 100, "last": at("10:20")},
                    {"id": "low", "gpus": 24, "priority": 0, "last": at("10:19")})
    assert [x.job for x in plan_step(ramp, {}, jobs, cluster(), at("10:35")).preemptions] == ["low"]
    # a lower-priority job that cannot stop in time does not spare one that can
    late = training({"id": "high", "gpus": 24, "priority": 100, "last": now - 540},
                    {"id": "low", "gpus": 24, "priority": 0, "preempt": 900.0, "last": now - 600})
    s = plan_step(hours_of([4] * 4), {"chat": observed((now, 40.0))}, late, cluster(), now)
    assert [x.job for x in s.preemptions if "more than the" in x.reason] == ["high"]


def test_emergency_takes_jobs_that_stop_within_the_deadline_first():
    now = NOW.timestamp()
    jobs = training({"id": "slow", "gpus": 20, "preempt": 900.0, "last": now - 60},
                    {"id": "fast1", "gpus": 20, "preempt": 60.0, "last": now - 600},
                    {"id": "fast2", "gpus": 20, "preempt": 60.0, "last": now - 1200})
    s = plan_step(hours_of([4] * 4), {"chat": observed((now, 60.0))}, jobs, cluster(), now)
    # 26 GPUs over the 34 lent: the slow job loses least but would come back after the deadline
    assert [(x.job, x.kind) for x in s.preemptions] == [("fast1", "emergency"), ("fast2", "emergency")]


def test_a_slow_job_stopped_only_for_the_headroom_band_is_planned_beside_an_emergency():
    """Demand above the forecast needs 18 GPUs training holds beyond the 34 lent: the fast job frees them, an
    emergency. The slow job frees too few for that (16), but holds 2 GPUs more than the 14 slow jobs may (outside the
    band): it is stopped for the band alone, planned, as it is when nothing is held beyond the slack."""
    now = NOW.timestamp()
    jobs = training({"id": "fast", "gpus": 36, "preempt": 60.0, "last": now - 600},
                    {"id": "slow", "gpus": 16, "preempt": 900.0, "last": now - 60})
    s = plan_step(hours_of([4] * 4, hi_extra=40), {"chat": observed((now, 60.0))}, jobs, cluster(), now)
    assert (s.lent_gpus, s.headroom_gpus) == (34, 20)
    fast, slow = s.preemptions
    assert (fast.job, fast.kind, slow.job, slow.kind) == ("fast", "emergency", "slow", "planned")
    assert "18 GPUs more than the 34 lent" in fast.reason and "observed demand above the forecast" in fast.reason
    assert "headroom band" in slow.reason and "lent" not in slow.reason
    # the slow job alone freeing the excess as well (14 GPUs over): it is the excess's, an emergency
    jobs = training({"id": "fast", "gpus": 32, "preempt": 60.0, "last": now - 600},
                    {"id": "slow", "gpus": 16, "preempt": 900.0, "last": now - 60})
    (x,) = plan_step(hours_of([4] * 4, hi_extra=40), {"chat": observed((now, 60.0))}, jobs, cluster(), now).preemptions
    assert (x.job, x.kind) == ("slow", "emergency") and "lent" in x.reason and "headroom band" in x.reason


def test_preempts_no_more_than_it_needs():
    now = NOW.timestamp()
    filler = {"id": "filler", "gpus": 54, "last": now - 1500}
    # 1 GPU over the 62 lent: the 1-GPU job (60 s since its checkpoint) wastes less than 8 GPUs stopping
    jobs = training({"id": "big", "gpus": 8, "last": now}, {"id": "small", "gpus": 1, "last": now - 60}, filler)
    (x,) = plan_step(hours_of([4] * 4), {}, jobs, cluster(), now).preemptions
    assert (x.job, x.gpus, x.work_lost_seconds) == ("small", 1, 60.0)
    # 8 GPUs over: the big job alone, not the small one before it as well
    jobs = training({"id": "big", "gpus": 8, "last": now - 60}, {"id": "small", "gpus": 1, "last": now},
                    {**filler, "gpus": 61})
    (x,) = plan_step(hours_of([4] * 4), {}, jobs, cluster(), now).preemptions
    assert (x.job, x.gpus) == ("big", 8)


def test_a_workload_asking_no_gpus_is_never_taken_back_for_gpus():
    """Inference pods Kueue admitted into a training queue may hold more than is lent: every job there is then over
    the slack, or every slow one over the room the band leaves. A Workload asking no GPUs (CPU only) frees none of
    them: it runs on, as it does through a ramp."""
    now = NOW.timestamp()
    hours = hours_of([4] * 4)  # 62 lent, 58 of them outside the 4-GPU band
    cpu = {"id": "cpu", "gpus": 0, "last": now - 600}
    over = replace(training(cpu, {"id": "j", "gpus": 10, "last": now - 600}), serving_gpus=60)
    assert [p.job for p in plan_step(hours, {}, over, cluster(), now).preemptions] == ["j"]
    slow = replace(training({**cpu, "preempt": 900.0}), serving_gpus=61)
    assert plan_step(hours, {}, slow, cluster(), now).preemptions == ()


@pytest.mark.parametrize("jobs, first", [
    # lowest priority first
    ([dict(id="a", priority=5), dict(id="b", priority=1, last=-900), dict(id="c", priority=3, last=-60)], "b"),
    # equal priority: least work lost first
    ([dict(id="a", last=-600), dict(id="b", last=-60), dict(id="c", last=-300)], "b"),
    # equal work lost and priority: fastest to preempt first
    ([dict(id="a", preempt=120.0), dict(id="b", preempt=90.0), dict(id="c", preempt=30.0)], "c"),
    # all equal: by id
    ([dict(id="c"), dict(id="a"), dict(id="b")], "a"),
])
def test_victim_order(jobs, first):
    now = NOW.timestamp()
    t = training(*({**j, "gpus": 24, "last": now + j.get("last", -120)} for j in jobs))
    s = plan_step(hours_of([4] * 4), {"chat": observed((now, 12.0))}, t, cluster(), now)  # 6 reserved: 58 lent
    assert [x.job for x in s.preemptions] == [first]


def test_newest_checkpoint():
    since = np.array([0.0, 100.0, 500.0])
    assert list(newest_checkpoint(since, np.array([60.0, 60.0, 60.0]), 400.0)) == [360.0, 400.0, 500.0]
    # a job that never checkpoints (an infinite interval) has none after `since`, whenever asked (it gave NaN)
    assert list(newest_checkpoint(since, np.full(3, np.inf), 400.0)) == [0.0, 100.0, 500.0]


def test_a_job_that_never_checkpoints_is_planned_as_one_whose_next_checkpoint_is_beyond_any_ramp():
    """The ramp worked out each job's last checkpoint before it must stop with its own copy of newest_checkpoint's
    arithmetic, which gave NaN for an infinite interval (inf * 0): a job that never checkpoints, whose newest
    checkpoint is said to be at 10:30 (a clock ahead of ours), was stopped at 10:44 losing 14 minutes, where the same
    job checkpointing once in 30 years stops at that checkpoint, losing nothing. The admission quota's next checkpoint
    is newest_checkpoint's too."""
    ramp = hours_of([4, 40, 40, 40])  # 11:00: 20 GPUs reserved, slack 44; needed by 10:45, so ready by 10:44
    plans = [plan_step(ramp, {}, training({"id": "j", "gpus": 60, "interval": interval, "last": at("10:30")}),
                       cluster(), at(now)) for interval in (np.inf, 1e9) for now in ("10:07", "10:20", "10:35")]
    never, rarely = plans[:3], plans[3:]
    assert [(p.preemptions, p.quotas) for p in never] == [(p.preemptions, p.quotas) for p in rarely]
    (x,) = never[0].preemptions
    assert (x.at, x.work_lost_seconds) == (at("10:30"), 0.0) and "stops at its checkpoint 10:30" in x.reason


def test_workload_policy_from_a_reservation_policy_spec():
    spec = PolicySpec.model_validate({
        "query": "q", "capacity": {"demandPerGpu": 3.5, "gpusPerReplica": 4}, "leadTime": "20m",
        "scaleInDelay": "1h", "reclaimDeadline": "90s", "warmBuffer": 0.5, "minGpus": 4, "maxGpus": 32,
        "marginGpus": 2, "headroomFloorGpus": 3, "targetQuantile": 0.8, "headroomQuantile": 0.95,
        "target": {"kind": "Deployment", "name": "d"}})
    w = WorkloadPolicy.from_spec("ns/p", spec)
    # warmBufferQuantile unset: the rises the objective lets go short (1 - maxShortSteps); 0: off
    assert w == WorkloadPolicy("ns/p", 3.5, 4, 0.8, 0.95, 1200.0, 0.5, 3600.0, 4, 32, 2, 3, 90.0, 0.99)
    assert WorkloadPolicy.from_spec("ns/p", spec.model_copy(update={"warm_buffer_quantile": 0.0})) == replace(
        w, warm_buffer_quantile=None)
    strict = PolicySpec.model_validate({**spec.model_dump(), "objective": {"maxShortSteps": 0.005}})
    assert WorkloadPolicy.from_spec("ns/p", strict).warm_buffer_quantile == pytest.approx(0.995)
    assert w.gpus(14.0) == 4 and w.gpus(14.1) == 8 and w.gpus(float("nan")) == 0 and w.gpus(-1) == 0


def test_demand_beyond_any_cluster_reserves_everything_and_nan_nothing_extra():
    """1e308 or infinite demand must not overflow an int64 into a small reservation (issue 14)."""
    from planning.planner import MAX_GPUS, WorkloadPolicy

    w = WorkloadPolicy("w", demand_per_gpu=1e-3)
    assert w.gpus(1e308) == w.gpus(float("inf")) == MAX_GPUS
    assert min(w.at_least(w.gpus(1e308)), w.top(128)) == 128
    assert w.gpus(float("nan")) == 0 and w.gpus(-5.0) == 0 and w.gpus(2.5e-3) == 3


def _rises_by_time(times, values, w: WorkloadPolicy, q: float) -> float:
    """_rise_buffer written out by time instead of sample counts: at each sample, demand's peak over the scale-in
    delay up to it, and its peak within the lead time after it, both in GPUs; the rise per sqrt of the peak."""
    rises = []
    for t in times:
        before = values[(times >= t - w.scale_in_delay_seconds) & (times <= t)]
        after = values[(times > t) & (times <= t + w.lead_time_seconds)]
        if len(after) < round(w.lead_time_seconds / 300) or np.isnan(before).any() or np.isnan(after).any():
            continue  # the window runs past the newest sample, or a sample is missing
        peak = w.gpus(float(before.max()))
        rises.append((w.gpus(float(after.max())) - peak) / np.sqrt(max(peak, 1)))
    return max(float(np.quantile(rises, q)), 0.0)


def test_warm_buffer_quantile_follows_the_demands_own_rises():
    """warmBufferQuantile: the buffer's factor is the quantile of the last week's rises within the lead time above the
    recent peak, per sqrt(peak); it grows with the bursts, never lowers the fixed warmBuffer, and is off unset."""
    rng = np.random.default_rng(7)
    idx = pd.date_range(NOW - pd.Timedelta(days=8), NOW, freq="5min", inclusive="left")
    t = idx.as_unit("s").asi8.astype(float)
    calm = 60.0 + rng.normal(0, 3, len(idx))
    bursts = calm + np.where(rng.random(len(idx)) < 0.04, 40.0, 0.0)
    w = workload(scale_in_delay_seconds=600.0, warm_buffer_quantile=0.95, gpus_per_replica=1)
    week = t > NOW.timestamp() - 7 * 86400
    factors = {}
    for name, values in (("calm", calm), ("bursts", bursts)):
        values = values.copy()
        values[100] = np.nan  # a missing sample drops its windows
        h = plan_hours({"chat": forecast([4, 4, 4, 4])}, {"chat": History.of(pd.Series(values, idx), NOW)},
                       cluster(w), NOW)
        factors[name] = h.workloads[0].rise_buffer
        assert factors[name] == pytest.approx(_rises_by_time(t[week], values[week], w, 0.95))
        now_ = NOW.timestamp()
        s = plan_step(h, {"chat": observed((now_ - 300, 60.0), (now_, 60.0))}, training(), cluster(w), now_)
        s = s.workloads[0]
        assert s.peak_gpus == 30 and s.buffer_gpus == int(np.ceil(factors[name] * np.sqrt(30) - 1e-9))
        assert s.reserved_gpus == min(30 + s.buffer_gpus, 60)
    assert factors["bursts"] > factors["calm"] + 1  # 20-GPU bursts within the lead time at 0.04 x 3 > 5% of samples
    # the fixed warmBuffer stays the floor; unset, the rises are not read; a short history asks for nothing
    floor = workload(scale_in_delay_seconds=600.0, warm_buffer_quantile=0.95, warm_buffer=50.0, max_gpus=None)
    big = cluster(floor, capacity=256)
    h = plan_hours({"chat": forecast([4, 4, 4, 4])}, {"chat": History.of(pd.Series(bursts, idx), NOW)}, big, NOW)
    assert plan_step(h, {"chat": observed((NOW.timestamp(), 8.0))}, training(), big,
                     NOW.timestamp()).workloads[0].buffer_gpus == 100  # 50 x sqrt(4)
    # the buffer said is the one held: maxGpus 60 leaves 56 above the peak of 4 (mean_warm_buffer_gpus sums it)
    capped = cluster(replace(floor, max_gpus=60), capacity=256)
    s = plan_step(h, {"chat": observed((NOW.timestamp(), 8.0))}, training(), capped, NOW.timestamp()).workloads[0]
    assert (s.reserved_gpus, s.peak_gpus, s.buffer_gpus) == (60, 4, 56) and "recent peak 4 + warm buffer 56" in s.reason
    for pol, series in ((workload(scale_in_delay_seconds=600.0), bursts), (w, bursts[-10:])):
        h = plan_hours({"chat": forecast([4, 4, 4, 4])}, {"chat": History.of(pd.Series(series, idx[-len(series):]),
                                                                             NOW)}, cluster(pol), NOW)
        assert h.workloads[0].rise_buffer == 0.0


def test_a_reservation_capped_at_max_gpus_says_so():
    """A recent peak of 16 GPUs on a policy of maxGpus 10 reserves 10: the reason said "10 GPUs: forecast reservation
    2 (lead time included), recent peak 16 + warm buffer 0" and nothing of the cap, as if the policy chose to serve
    less than it saw; it names maxGpus and what it left out, and only when the cap bound."""
    h = hours_of([4, 4, 4, 4])
    now = NOW.timestamp()
    capped = cluster(workload(max_gpus=10))
    s = plan_step(h, {"chat": observed((now, 30.0))}, training(), capped, now).workloads[0]
    assert (s.reserved_gpus, s.peak_gpus, s.capped_gpus, s.cut_gpus) == (10, 16, 6, 0)
    assert "capped at maxGpus: 6 GPUs fewer than asked" in s.reason
    s = plan_step(h, {"chat": observed((now, 20.0))}, training(), capped, now).workloads[0]
    assert (s.reserved_gpus, s.capped_gpus) == (10, 0) and "maxGpus" not in s.reason  # 10 GPUs asked: not bound


def test_a_takeback_is_no_emergency_where_demand_above_the_forecast_took_no_gpus():
    """docs/observability.md: planned "training beyond the slack while demand is within the forecast", emergency
    "demand above the forecast needs the GPUs now". A recent peak of 16 GPUs on a policy of maxGpus 10 reserves its
    forecast of 10 all the same: the 2 GPUs training holds beyond the 6 lent are the forecast's. The old plan
    stopped the job as an emergency, "observed demand above the forecast: ns/w0 peak 16 + buffer 0 > forecast 10"."""
    now = NOW.timestamp()
    pol = cluster(workload(max_gpus=10, min_gpus=0, gpus_per_replica=1, demand_per_gpu=1.0, lead_time_seconds=0.0),
                  capacity=16, weights=(("train-a", 1.0),))
    h = hours_of([10] * 4, pol=pol, hist=history(), hi_extra=0)
    job = training({"id": "t/j", "gpus": 8, "last": now - 100})
    s = plan_step(h, {"chat": observed((now, 16.0))}, job, pol, now)
    assert (s.workloads[0].reserved_gpus, s.workloads[0].forecast_gpus, s.lent_gpus) == (10, 10, 6)
    assert [(p.job, p.kind) for p in s.due()] == [("t/j", "planned")]
    assert "above the forecast" not in s.due()[0].reason
    s = plan_step(h, {"chat": observed((now, 12.0))}, job, replace(pol, workloads=(replace(
        pol.workloads[0], max_gpus=12),)), now)  # the peak raises the reservation to 12: an emergency
    assert [(p.job, p.kind) for p in s.due()] == [("t/j", "emergency")]


def test_a_fallback_hour_held_by_max_gpus_says_its_bounds():
    """Last week's peak of 16 GPUs on a policy of maxGpus 10: the fallback hour's reason said "last week's peak at
    this hour -> 10 GPUs", 6 below that peak and nothing of the cap; it gives the clamp as a forecast hour's reason
    does."""
    w = WorkloadPolicy("w", 1.0, lead_time_seconds=0.0, max_gpus=10)
    pol = ClusterPolicy(64, (w,), horizon_hours=2)
    h = plan_hours({}, {"w": History.of(history(16.0, end=NOW.floor("h")), NOW)}, pol, NOW).workloads[0]
    assert h.reserved[0] == 10 and "-> 10 GPUs (clamp [0, 10], whole replicas)" in h.reason(0, w, 64)


def test_headroom_stops_at_max_gpus():
    """No takeback raises a reservation beyond maxGpus, so no headroom is kept above it (q0.99 at 22 GPUs, maxGpus 10,
    the reservation held there). Before, a band of 12 kept a job that cannot stop within the deadline out of GPUs
    inference can never take: the 54-GPU job was preempted, and the status asked for 12 GPUs of headroom."""
    pol = cluster(workload(max_gpus=10), capacity=64)
    slow = training({"id": "slow", "gpus": 54, "preempt": 900.0})
    h = hours_of([20] * 4, pol=pol, hi_extra=24)
    assert list(h.workloads[0].headroom) == [0] * len(h.workloads[0].headroom)
    s = plan_step(h, {}, slow, pol, NOW.timestamp())
    assert (s.workloads[0].reserved_gpus, s.workloads[0].headroom_gpus, s.headroom_gpus) == (10, 0, 0)
    assert s.preemptions == ()
    floor = cluster(workload(max_gpus=10, headroom_floor_gpus=6), capacity=64)
    s = plan_step(hours_of([16] * 4, pol=floor, hi_extra=0), {}, training(), floor, NOW.timestamp())
    assert (s.workloads[0].reserved_gpus, s.workloads[0].headroom_gpus) == (8, 2)  # the floor, too, stops there


def test_a_step_names_the_source_of_the_hour_whose_reservation_it_holds():
    """The forecast ends with the 10:00 hour; at 10:50 the 11:00 hour, last week's peak of 50 (26 GPUs), is in force,
    its lead time begun. The step said 'forecast reservation 26' and from_forecast (FallbackActive False), though
    the 26 GPUs are the fallback's; and the other way round, a fallback hour now beside a forecast hour ahead that
    gives the reservation said 'fallback'."""
    h = history(4.0)
    h[h.index.hour == 11] = 50.0
    now = pd.Timestamp("2026-01-08 10:50", tz="UTC")
    pol = cluster()
    hours = plan_hours({"chat": forecast([4])}, {"chat": History.of(h[h.index <= now], now)}, pol, now)
    assert list(hours.workloads[0].from_forecast) == [True, False, False, False]
    s = plan_step(hours, {"chat": observed()}, training(), pol, now).workloads[0]
    assert s.reserved_gpus == s.forecast_gpus == 26 and not s.from_forecast and s.period == 1
    assert s.reason.startswith("26 GPUs: fallback reservation 26")
    assert hours.workloads[0].reason(s.period, pol.workloads[0], pol.lendable).startswith("fallback (forecast missing")
    ahead = plan_hours({"chat": forecast([40, 40], start=HOUR + pd.Timedelta(hours=1))},
                       {"chat": History.of(history(4.0), now)}, pol, now)
    s = plan_step(ahead, {"chat": observed()}, training(), pol, now).workloads[0]
    assert s.reserved_gpus == 20 and s.from_forecast and s.reason.startswith("20 GPUs: forecast reservation 20")
    # before the lead time the hour now is in force, from the fallback
    early = plan_step(hours, {"chat": observed()}, training(), pol, now - pd.Timedelta(minutes=10)).workloads[0]
    assert early.reserved_gpus == 2 and early.from_forecast and early.period == 0


def test_a_fallback_hour_whose_hour_of_day_the_week_did_not_see_says_it_holds_the_weeks_highest_peak():
    """A day of history from 11:00 yesterday (10 everywhere, 80 at 03:00), no forecast, at 10:07: the 10:00 hour of day
    was not seen before it began, so it holds the week's highest peak (40 GPUs); its reason said "last week's peak at
    this hour -> 40 GPUs", untrue of an hour last week showed 10 at. The hours seen hold their own peak and say so."""
    index = pd.date_range(NOW - pd.Timedelta(hours=23, minutes=7), NOW, freq="5min")
    demand = pd.Series(np.where(index.hour == 3, 80.0, 10.0), index=index)
    pol = cluster()
    p = plan_hours({}, {"chat": History.of(demand, NOW)}, pol, NOW)
    (w,) = p.workloads
    assert list(w.reserved) == [40, 6, 6, 6]
    reasons = [w.reason(i, pol.workloads[0], pol.lendable) for i in range(4)]
    assert reasons[0].startswith("fallback (no forecast): the week's highest peak (this hour of day not seen in it) "
                                 "-> 40 GPUs")
    assert all(r.startswith("fallback (no forecast): last week's peak at this hour -> 6 GPUs") for r in reasons[1:])
    assert p.notes == ("chat: no forecast for 4 period(s); using last week's same-hour peak (the week's highest in 1 "
                       "whose hour of day it did not see)",)


def test_a_fallback_hours_band_is_the_floor_and_slow_jobs_still_leave_the_observed_bursts():
    """README: a fallback hour's headroom is headroomFloorGpus alone (no quantile to reach; the hour reserves the
    week's highest demand at it), and jobs slow to preempt still hold only what no plausible demand needs, the
    observed history's bursts at the headroom quantile included. Demand 10 (6 GPUs) at 10:00 every day of the week,
    bursts to 50 at 03:30: the band is the floor, yet a slow job may hold only 64 - 26 GPUs, a fast one all that is
    lent."""
    index = pd.date_range(NOW - pd.Timedelta(days=8), NOW, freq="5min")
    demand = pd.Series(np.where((index.hour == 3) & (index.minute >= 30), 50.0, 10.0), index=index)
    for floor in (0, 4):
        pol = cluster(workload(headroom_floor_gpus=floor))
        hours = plan_hours({}, {"chat": History.of(demand, NOW)}, pol, NOW)
        (w,) = hours.workloads
        assert list(w.reserved) == [6] * 4 and list(w.headroom) == [floor] * 4
        seen = Observed(index.asi8 / 1e9, demand.to_numpy(), 0)
        for preempt, stopped in ((60.0, []), (900.0, [("slow", "planned")])):
            job = training({"id": "slow", "gpus": 50, "preempt": preempt, "last": NOW.timestamp() - 100})
            step = plan_step(hours, {"chat": seen}, job, pol, NOW)
            assert step.lent_gpus == 58 and step.headroom_gpus == floor
            assert [(p.job, p.kind) for p in step.preemptions] == stopped
            assert all("exceed the 38 GPUs no plausible demand needs" in p.reason for p in step.preemptions)


def test_nothing_observed_in_the_week_keeps_what_the_target_holds_though_the_caller_does_not_call_it_degraded():
    """README: a policy with nothing observed in the last week reserves its minGpus and what its target holds now.
    With run.stale_after_seconds over a week (900000 was accepted until the setting was bounded; the planner holds to
    it whatever its caller says) a history whose newest sample is 9 days old was not degraded data to the controller:
    the step reserved minGpus, 2 GPUs of a target holding 20 (headroom plan: "2 GPUs: fallback reservation 2"),
    though the hour plan's note said "using minGpus and what the target holds now"."""
    old = History.of(history(9.0, end=NOW - pd.Timedelta(days=9)), NOW)
    pol = cluster()
    hours = plan_hours({}, {"chat": old}, pol, NOW)
    assert hours.workloads[0].why_fallback == "no data"
    s = plan_step(hours, {"chat": observed(held=20, degraded=False)}, training(), pol, NOW).workloads[0]
    assert s.reserved_gpus == 20 and s.degraded and "never below what the target holds now" in s.reason
    live = plan_step(hours, {"chat": observed((NOW.timestamp(), 30.0), held=0)}, training(), pol, NOW).workloads[0]
    assert live.reserved_gpus == 16  # live samples still drive it
