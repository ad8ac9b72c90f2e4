"""Simulated cluster and what-if engine: one step loop, several reservation policies.

Every policy produces a per-step warm-capacity target for inference (its
*reservation*) and a headroom band above it; the same engine then plays the
demand against it. Inference scales up reactively from idle GPUs first and then
by preempting training (least work lost, fastest first); those GPUs serve only
after the preemption and the replica warm-up. Training fills whatever inference
does not hold. Forecasters see only complete hours before `now` (no look-ahead).

Demand is converted to GPU units (value / scale, scale so that the 99.9th
percentile equals `peak_gpus`, or a fixed `per_gpu` rate); GPUs needed = ceil.
"""
from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, fields, replace

import numpy as np
import pandas as pd

from planning.planner import HOUR, WorkloadPolicy, clamp, gpus_for, weekly_peak
from forecast.base import Forecaster, check_quantile_frame

POLICIES = ("forecast", "static", "reactive", "seasonal-naive", "oracle")
# warm buffer factors b the history replay tries, in order (b * sqrt(peak) GPUs; sqrt(128) ~ 11 is a whole cluster)
BUFFER_GRID = (0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0, 7.0, 8.0, 10.0)


@dataclass(frozen=True)
class SimSettings:
    # low on purpose: the hourly forecast pre-warms ramps, the rise buffer covers within-hour noise (5-min
    # deviations are not predictable; docs/bench-simulate.md); `tune` on the history may choose lower
    target_quantile: float = 0.3
    headroom_quantile: float = 0.99
    lead_time_seconds: float = 900.0
    warmup_seconds: float = 180.0
    reclaim_deadline_seconds: float = 300.0
    checkpoint_interval_seconds: float = 1800.0
    preemption_seconds: tuple[float, float] = (30.0, 120.0)  # checkpoint + terminate, uniform
    margin_gpus: int = 0
    headroom_floor_gpus: int = 0
    scale_in_delay_seconds: float = 600.0  # observed demand keeps its GPUs this long
    refit_hours: int = 1
    history_statistic: str = "max"  # hourly statistic the forecaster sees: "max" or "mean"
    backlog_job_gpus: tuple[int, ...] = (1, 1, 2, 4, 8)
    backlog_job_hours: tuple[float, float] = (1.0, 8.0)
    # forecast policy: warm GPUs kept above the recent observed peak, b * sqrt(peak) (request noise grows with the
    # square root of the level). warm_buffer fixes b; None chooses it by replaying this engine on the history alone
    # (choose_warm_buffer): the least b on BUFFER_GRID whose replayed shortage, demand above the cluster excluded,
    # is within buffer_shortage_objective of demand (None: no buffer); 0.003 is the benchmarks' shortage target
    buffer_shortage_objective: float | None = 0.003
    warm_buffer: float | None = None
    admit_lookahead: bool = False  # True: keep GPUs a known ramp-up needs within a checkpoint interval free
    seed: int = 0


@dataclass(frozen=True)
class SimResult:
    policy: str
    utilization: float
    inference_shortage: float
    shortage_hours: float
    mean_reserved_gpus: float
    training_gpu_hours: float
    training_goodput: float
    preemptions: int
    planned_preemptions: int  # of which stopped at a checkpoint ahead of a known ramp-up (no work lost)
    reclaim_p99_seconds: float
    headroom_violations: int
    cost_vs_dedicated: float
    forecast_fallback_hours: int
    shortage_over_capacity: float  # demand above the cluster (no policy can serve it) / demand GPU-time
    warm_buffer: float  # the forecast policy's b (0 for the others)
    sim_seconds: float
    refit_seconds: float
    buffer_replay_seconds: float  # choosing b by replaying the history (refits included)

    def to_json(self) -> str:
        # the metrics only: a TimedResult's timeline is for plots, not for JSON
        return json.dumps({f.name: getattr(self, f.name) for f in fields(SimResult)}, sort_keys=True)


@dataclass(frozen=True)
class Timeline:
    """What happened, for plots (simulate(..., timeline=True)); all in GPUs.

    steps: per evaluated step: demand_gpus (demand in GPU units), reserved_gpus (the policy's
      target), headroom_gpus, inference_gpus (held by inference, warm or warming), warm_gpus
      (serving), training_gpus (allocated to training), idle_gpus, unmet_gpus.
    hours: per evaluated hour, the forecast's target and headroom quantiles (forecast policy only,
      else empty): target_gpus, high_gpus.
    events: one row per preemption: time, gpus, kind ("planned": stopped at a checkpoint ahead of a
      known ramp-up; "emergency": taken back to serve inference now).
    """
    steps: pd.DataFrame
    hours: pd.DataFrame
    events: pd.DataFrame


@dataclass(frozen=True)
class TimedResult(SimResult):
    timeline: Timeline | None = None


class _Jobs:
    """Training jobs as numpy columns (index = job id); capacity doubles when a backlog adds jobs."""

    COLUMNS = ("gpus", "work", "arrival", "preempt", "progress", "credited")  # credited = progress at last checkpoint

    def __init__(self, gpus, work, arrival, preempt):
        self.size = len(gpus)
        self.gpus = np.asarray(gpus, dtype=np.int64)
        self.work = np.asarray(work, dtype=float)
        self.arrival = np.asarray(arrival, dtype=float)
        self.preempt = np.asarray(preempt, dtype=float)
        self.progress = np.zeros(self.size)
        self.credited = np.zeros(self.size)

    def extend(self, gpus, work, preempt, now):
        m, start = len(gpus), self.size
        if start + m > len(self.gpus):
            cap = max(2 * len(self.gpus), start + m)
            for c in self.COLUMNS:
                old = getattr(self, c)
                grown = np.zeros(cap, dtype=old.dtype)
                grown[:start] = old[:start]
                setattr(self, c, grown)
        for c, v in (("gpus", gpus), ("work", work), ("arrival", now), ("preempt", preempt), ("progress", 0.0), ("credited", 0.0)):
            getattr(self, c)[start:start + m] = v
        self.size = start + m


def trace_jobs(jobs: pd.DataFrame, span_seconds: float, capacity: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Replay the trace's last `span_seconds`: (gpus, work seconds, arrival offset seconds)."""
    j = jobs[jobs["num_gpu"] >= 1].copy()
    start = j["scheduled_time"].fillna(j["creation_time"])
    window0 = float(j["creation_time"].max()) - span_seconds
    j = j[j["deletion_time"] > window0]
    start = start.loc[j.index]
    arrival = np.maximum(j["creation_time"].to_numpy(float) - window0, 0.0)
    work = j["deletion_time"].to_numpy(float) - np.maximum(start.to_numpy(float), window0)
    keep = work > 0
    gpus = np.minimum(j["num_gpu"].to_numpy(int), capacity)
    order = np.argsort(arrival[keep], kind="stable")
    return gpus[keep][order], work[keep][order], arrival[keep][order]


class SharedFits:
    """A forecaster factory whose fits are made once per history and shared by every simulation that uses it: the
    settings a sweep changes (quantiles, buffer) change what is asked of a fit, not the fit (refits are most of a
    simulation's time)."""

    def __init__(self, make_forecaster: Callable[[], Forecaster]):
        self.make_forecaster = make_forecaster
        self.fits: dict[tuple[int, pd.Timestamp], Forecaster] = {}

    def __call__(self) -> "SharedFits":
        return self

    def fit(self, history: pd.Series) -> Forecaster:
        key = (len(history), history.index[-1])
        if key not in self.fits:
            self.fits[key] = self.make_forecaster().fit(history)
        return self.fits[key]


def replay_days(history: pd.Series, days: float) -> float:
    """How much of a history to replay as its own evaluation: as many days as are evaluated, at most half of it
    (the rest is the replay's history)."""
    span = (history.index[-1] - history.index[0]).total_seconds() / 86400
    return min(days, span / 2)


@dataclass(frozen=True)
class BufferChoice:
    factor: float  # the chosen b
    replayed: tuple[tuple[float, float], ...]  # (b, replayed shortage excluding demand above the cluster), as tried
    replay_days: float
    seconds: float


def choose_warm_buffer(history: pd.Series, per_gpu: float, gpus: int, days: float,
                       make_forecaster: Callable[[], Forecaster], settings: SimSettings) -> BufferChoice:
    """The forecast policy's warm buffer factor b, chosen on `history` alone by this engine: replay its last
    replay_days(history, days) under the forecast policy (forecast floor, warm-up, preemptions, refits on the past
    only) for each b on BUFFER_GRID in order, and keep the first whose shortage, demand above the cluster excluded
    (no b can serve it), is within settings.buffer_shortage_objective; if none is, the largest. The fits are shared
    across the grid."""
    started = time.perf_counter()
    objective = settings.buffer_shortage_objective
    if objective is None:
        return BufferChoice(0.0, (), 0.0, 0.0)
    fits = make_forecaster if isinstance(make_forecaster, SharedFits) else SharedFits(make_forecaster)
    span = replay_days(history, days)
    replayed = []
    for b in BUFFER_GRID:
        r = simulate(history, gpus=gpus, peak_gpus=None, per_gpu=per_gpu, days=span, make_forecaster=fits,
                     settings=replace(settings, warm_buffer=b))
        replayed.append((b, r.inference_shortage - r.shortage_over_capacity))
        if replayed[-1][1] <= objective:
            break
    return BufferChoice(b, tuple(replayed), span, time.perf_counter() - started)


def _hourly(units: np.ndarray, index: pd.DatetimeIndex, statistic: str) -> pd.Series:
    s = pd.Series(units, index=index).resample("1h")
    return (s.max() if statistic == "max" else s.mean())


def _forecast_targets(hourly: pd.Series, h0: int, n_hours: int, s: SimSettings, make_forecaster, cap):
    """GPU units for each evaluated hour k: (target, high) for hour k and for hour k+1,
    both from the last refit at or before hour k on complete hours only."""
    out = np.full((n_hours, 2, 2), np.nan)  # hour, (this, next), (target, high)
    fallbacks, refit = 0, 0.0
    qs = [s.target_quantile, s.headroom_quantile]
    for k0 in range(0, n_hours, s.refit_hours):
        i = h0 + k0
        horizon = s.refit_hours + 1
        t0 = time.perf_counter()
        try:
            f = make_forecaster().fit(hourly.iloc[:i]).predict(horizon, qs)
            check_quantile_frame(f, horizon, qs)
            fv = f.to_numpy(float)
        except ValueError:  # includes ForecastError: treat as no forecast
            fv = np.full((horizon, 2), np.nan)
        refit += time.perf_counter() - t0
        bad = ~np.isfinite(fv).all(axis=1)
        if bad.any():
            # safety, the planner's rule: an unusable forecast falls back to last week's same-hour peak, else all
            last = hourly.index[i - 1]
            peak = weekly_peak(hourly.iloc[:i], pd.date_range(last + HOUR, periods=horizon, freq="h"), last)
            fv[bad] = np.where(np.isfinite(peak[bad]), peak[bad], cap)[:, None]
            fallbacks += int(bad[:s.refit_hours].sum())
        for j in range(min(s.refit_hours, n_hours - k0)):
            out[k0 + j, 0] = fv[j]
            out[k0 + j, 1] = fv[j + 1]
    return out, fallbacks, refit


def _reservations(policy, units, need, index, e0, s, w, make_forecaster, cap):
    """Per-step reservation and headroom (GPUs) for the evaluated steps, plus counters."""
    n = len(units) - e0
    step = (index[1] - index[0]).total_seconds()
    hourly = _hourly(units, index, s.history_statistic)
    hour_of = ((index[e0:] - hourly.index[0]) // pd.Timedelta(hours=1)).to_numpy()
    h0 = int(hour_of[0])
    n_hours = int(hour_of[-1]) - h0 + 1
    hv = hourly.to_numpy(float)
    fallbacks, refit = 0, 0.0
    lead = s.lead_time_seconds
    bands = None
    if policy == "forecast":
        f, fallbacks, refit = _forecast_targets(hourly, h0, n_hours, s, make_forecaster, cap)
        bands = pd.DataFrame(f[:, 0, :], index=hourly.index[h0:h0 + n_hours], columns=["target_gpus", "high_gpus"])
        res_h = gpus_for(f[:, :, 0], w) + w.margin_gpus
        head_h = gpus_for(f[:, :, 1], w)
    else:
        if policy == "static":  # the history's peak, all the time
            cur = np.full(n_hours + 1, float(need[:e0].max()))
        elif policy == "reactive":  # last complete hour's peak +10%: an hour late, no lead
            peaks = pd.Series(need, index=index).resample("1h").max().to_numpy(float)
            cur = np.ceil(1.1 * peaks[h0 - 1:h0 + n_hours] - 1e-9)
            cur = np.append(cur, cur[-1])
            lead = 0.0
        elif policy == "seasonal-naive":  # same hour last week +10%, known a week ahead
            cur = np.ceil(1.1 * hv[h0 - 168:h0 + n_hours + 1 - 168] - 1e-9)
        elif policy == "oracle":  # exact future need, early enough to be warm in time
            k = math.ceil((s.warmup_seconds + s.preemption_seconds[1]) / step)
            fut = pd.Series(need[e0:][::-1]).rolling(k + 1, min_periods=1).max().to_numpy()[::-1]
            return np.minimum(fut, cap).astype(np.int64), np.zeros(n, np.int64), 0, 0.0, None
        else:
            raise ValueError(f"unknown policy {policy!r}; one of {POLICIES}")
        res_h = np.stack([cur[:n_hours], cur[1:n_hours + 1]], axis=1)
        head_h = res_h.copy()
    res_h = clamp(np.nan_to_num(res_h, nan=cap), w, cap)
    head_h = np.maximum(np.nan_to_num(head_h) - res_h, w.headroom_floor_gpus)
    here = hour_of - h0
    # the next hour's reservation must be in place `lead` before it starts: plan.with_lead's rule at the
    # trace's own step (with_lead holds it for the whole hour, which at 5-min steps reserves idle GPUs)
    ahead = ((index[e0:] + pd.Timedelta(seconds=lead) - hourly.index[0]) // pd.Timedelta(hours=1)).to_numpy() - h0 > here
    res = np.where(ahead, np.maximum(res_h[here, 0], res_h[here, 1]), res_h[here, 0])
    head = np.where(ahead, np.maximum(head_h[here, 0], head_h[here, 1]), head_h[here, 0])
    head = np.minimum(head, cap - res)
    return res.astype(np.int64), head.astype(np.int64), fallbacks, refit, bands


def simulate(
    demand: pd.Series,
    gpus: int = 128,
    peak_gpus: float | None = 100,
    per_gpu: float | None = None,
    policy: str = "forecast",
    days: float = 7,
    jobs: pd.DataFrame | None = None,
    make_forecaster: Callable[[], Forecaster] | None = None,
    settings: SimSettings = SimSettings(),
    timeline: bool = False,
) -> SimResult:
    """Replay `demand` under `policy`; with timeline=True a TimedResult that also carries the Timeline."""
    s = settings
    if policy == "forecast" and make_forecaster is None:
        raise ValueError("the forecast policy needs make_forecaster")
    index = pd.DatetimeIndex(demand.index)
    step = (index[1] - index[0]).total_seconds()
    raw = demand.to_numpy(float)
    raw = pd.Series(raw).ffill().fillna(0.0).to_numpy()  # a gap in the trace: demand as last seen
    scale = per_gpu if per_gpu is not None else np.quantile(raw, 0.999) / peak_gpus
    units = np.maximum(raw, 0.0) / scale
    # the planner's capacity model, in GPU units: one GPU serves one unit
    w = WorkloadPolicy("simulated", margin_gpus=s.margin_gpus, headroom_floor_gpus=s.headroom_floor_gpus)
    need = gpus_for(units, w).astype(np.int64)
    # whole seconds: a fractional `days` must compare with an index at second resolution
    e0 = int(np.searchsorted(index, index[-1] - pd.Timedelta(seconds=round(days * 86400)), side="right"))
    if s.lead_time_seconds >= 3600:
        raise ValueError("lead_time_seconds must be under an hour (plans look one hour ahead)")
    choose_buffer = policy == "forecast" and s.warm_buffer is None and s.buffer_shortage_objective is not None
    # seasonal-naive looks a week back; choosing the buffer replays the history's second half on its first
    min_history = 7 if policy == "seasonal-naive" else 2 if choose_buffer else 1
    if e0 * step < min_history * 86400:
        why = " (one to choose the warm buffer on, one before it)" if choose_buffer else ""
        raise ValueError(f"the {policy} policy needs at least {min_history} day(s) of history before the evaluated "
                         f"days{why}")
    if choose_buffer:
        choice = choose_warm_buffer(demand.iloc[:e0], scale, gpus, days, make_forecaster, s)
        buffer, replay_s = choice.factor, choice.seconds
    else:
        buffer, replay_s = (s.warm_buffer or 0.0) if policy == "forecast" else 0.0, 0.0
    res, head, fallbacks, refit, bands = _reservations(policy, units, need, index, e0, s, w, make_forecaster, gpus)

    t_start = time.perf_counter()
    n = len(units) - e0
    u, nd = units[e0:], need[e0:]
    rng = np.random.default_rng(s.seed)
    lo, hi = s.preemption_seconds
    if jobs is not None:
        g, w, a = trace_jobs(jobs, n * step, gpus)
        J = _Jobs(g, w, a, rng.uniform(lo, hi, len(g)))
    else:
        J = _Jobs([], [], [], [])
    backlog = jobs is None
    warm_steps = math.ceil(s.warmup_seconds / step - 1e-9)
    max_delay_steps = math.ceil((hi + s.warmup_seconds) / step)  # latest a granted GPU can start serving
    ci = s.checkpoint_interval_seconds
    hold = max(int(s.scale_in_delay_seconds // step), 0)
    deadline = s.reclaim_deadline_seconds

    def ahead_max(steps):  # max reservation over the next `steps` steps (what the planner already knows)
        return pd.Series(res[::-1]).rolling(steps + 1, min_periods=1).max().to_numpy()[::-1].astype(np.int64)

    ckpt_steps = 0 if policy == "reactive" else max(int(ci // step), 1)  # reactive does not know the next hour
    ckpt_guard = ahead_max(ckpt_steps).tolist()
    # don't start jobs on GPUs a known ramp-up takes back before their first checkpoint
    admit_guard = ahead_max(max(ckpt_steps, warm_steps + 1) if s.admit_lookahead else warm_steps + 1).tolist()
    res_l, head_l, nd_l, u_l = res.tolist(), head.tolist(), nd.tolist(), u.tolist()
    alloc = 0  # GPUs held by inference (warm or warming)
    warm_ready = np.zeros(n + max_delay_steps + 2, np.int64)  # GPUs serving from the start of each step on
    partial = np.zeros(n + max_delay_steps + 2)  # GPU-fractions of a step served by GPUs that warm up inside it
    warm = 0
    running = np.zeros(0, np.int64)
    waiting: list[int] = []
    next_arrival = 0
    train_alloc_s = lost_s = served_s = unmet = 0.0
    short_steps = np.zeros(n, bool)
    reclaims: list[float] = []
    preempted = violations = planned = 0
    alloc_sum = 0
    recent = np.zeros(hold + 1, np.int64)
    # timeline: per step (inference held, serving, training), per preemption (step, GPUs, planned?)
    held_l, serving_l, train_l, events = ([], [], [], []) if timeline else (None,) * 4

    def arrive(t, g, delay):
        # GPUs granted at the start of step t serve once `delay` seconds have passed
        k, frac = divmod(delay / step, 1.0)
        k = int(k)
        if frac > 1e-9:
            partial[t + k] += g * (1.0 - frac)
            k += 1
        warm_ready[t + k] += g

    def release(victims, t, kind):
        nonlocal running, lost_s, train_alloc_s, preempted
        gl = J.gpus[victims]
        if events is not None:
            events.append((t, int(gl.sum()), kind, len(victims)))
        # work since the last checkpoint is lost; the GPUs sit idle while checkpointing/terminating
        lost_s += float(((J.progress[victims] - J.credited[victims]) * gl).sum() + (J.preempt[victims] * gl).sum())
        train_alloc_s += float((J.preempt[victims] * gl).sum())
        J.progress[victims] = J.credited[victims]
        running = np.setdiff1d(running, victims, assume_unique=True)
        waiting[:0] = victims.tolist()  # preempted jobs resume first
        preempted += len(victims)
        reclaims.extend(J.preempt[victims].tolist())

    for t in range(n):
        warm += warm_ready[t]
        train = int(J.gpus[running].sum()) if running.size else 0
        recent[t % (hold + 1)] = nd[t]
        peak = int(recent.max())
        desired = min(max(res_l[t], peak + math.ceil(buffer * math.sqrt(max(peak, 1)) - 1e-9)), gpus)
        if desired > alloc:
            want = desired - alloc
            idle = gpus - alloc - train
            take = min(want, idle)
            if take:
                arrive(t, take, s.warmup_seconds)
            want -= take
            if warm < nd_l[t] <= res_l[t] + head_l[t]:
                # within the band, what inference lacks must come from idle or fast-preemptible GPUs
                fast = int(J.gpus[running][J.preempt[running] <= deadline].sum()) if running.size else 0
                if nd_l[t] - alloc - idle > fast:
                    violations += 1
            got = take
            if want > 0 and running.size:
                lost_now = J.progress[running] - J.credited[running]
                order = running[np.lexsort((J.preempt[running], lost_now))]
                cum = np.cumsum(J.gpus[order])
                victims = order[: int(np.searchsorted(cum, want)) + 1]
                freed = int(J.gpus[victims].sum())
                for v in victims:
                    arrive(t, int(J.gpus[v]), J.preempt[v] + s.warmup_seconds)
                release(victims, t, "emergency")
                train -= freed
                got += freed
                want = max(want - freed, 0)
            alloc += got
        elif desired < alloc:
            drop = alloc - desired
            # release GPUs still warming first, then warm replicas
            for k in range(t + 1, t + 2 + max_delay_steps):
                d = min(drop, warm_ready[k])
                if d:
                    partial[k - 1] -= partial[k - 1] * d / warm_ready[k]
                warm_ready[k] -= d
                drop -= d
            warm -= min(drop, warm)
            alloc = desired
        serving = warm + partial[t]
        ut = u_l[t]
        served_s += min(ut, serving)
        if ut > serving + 1e-9:
            unmet += ut - serving
            short_steps[t] = True
        alloc_sum += alloc
        if held_l is not None:
            held_l.append(alloc)
            serving_l.append(serving)

        # training: arrivals, admission into GPUs neither inference nor its planned next target needs
        now_s = t * step
        while next_arrival < J.size and J.arrival[next_arrival] <= now_s:
            waiting.append(next_arrival)
            next_arrival += 1
        free = gpus - max(alloc, admit_guard[t]) - train
        if backlog and free > 0 and len(waiting) < 8:
            m = 64
            J.extend(rng.choice(s.backlog_job_gpus, m), rng.uniform(*s.backlog_job_hours, m) * 3600, rng.uniform(lo, hi, m), now_s)
            waiting.extend(range(J.size - m, J.size))
            next_arrival = J.size
        if free > 0 and waiting:
            admitted = []
            slow_room = free - head_l[t]
            cand = np.array(waiting[:64], np.int64)
            cg = J.gpus[cand]
            if cg.min() <= free:  # FIFO with backfill over the head of the queue
                for pos, (gj, pj) in enumerate(zip(cg.tolist(), J.preempt[cand].tolist())):
                    if gj <= free and (pj <= deadline or gj <= slow_room):
                        admitted.append(pos)
                        free -= gj
                        slow_room -= gj if pj > deadline else 0
                        if free <= 0:
                            break
            if admitted:
                new = np.array([waiting[p] for p in admitted], np.int64)
                for p in reversed(admitted):
                    del waiting[p]
                running = np.concatenate([running, new])
                train += int(J.gpus[new].sum())
        if train_l is not None:
            train_l.append(train)
        if running.size:
            r = running
            p, w = J.progress[r] + step, J.work[r]
            J.progress[r] = p
            train_alloc_s += train * step
            cred = np.minimum(np.floor(p / ci) * ci, w)
            # planned reclaim: a job that just checkpointed stops now if a known ramp-up would preempt it anyway
            short = ckpt_guard[t + 1] - (gpus - train) if t + 1 < n else 0
            checkpointed = cred > J.credited[r] if short > 0 else None
            done = p >= w
            J.credited[r] = np.where(done, w, cred)
            if done.any():
                # finished mid-step: GPUs idle for the rest of it
                train_alloc_s -= float(((p[done] - w[done]) * J.gpus[r[done]]).sum())
                train -= int(J.gpus[r[done]].sum())
                running = r[~done]
            if short > 0:
                ck = r[checkpointed & ~done]
                if ck.size:
                    ck = ck[np.argsort(J.preempt[ck], kind="stable")]
                    victims = ck[: int(np.searchsorted(np.cumsum(J.gpus[ck]), short)) + 1]
                    train -= int(J.gpus[victims].sum())
                    release(victims, t, "planned")
                    planned += len(victims)

    useful = train_alloc_s - lost_s
    hours = n * step / 3600
    train_h = train_alloc_s / 3600
    static_res = float(need[:e0].max())
    per_hour = pd.Series(short_steps).groupby(np.arange(n) * step // 3600).any()
    metrics = dict(
        policy=policy,
        utilization=(served_s * step + train_alloc_s) / (gpus * n * step),
        inference_shortage=unmet / max(u.sum(), 1e-12),
        shortage_hours=float(per_hour.mean()),
        mean_reserved_gpus=alloc_sum / n,
        training_gpu_hours=train_h,
        training_goodput=useful / train_alloc_s if train_alloc_s else 1.0,
        preemptions=preempted,
        planned_preemptions=planned,
        reclaim_p99_seconds=float(np.quantile(reclaims, 0.99)) if reclaims else 0.0,
        headroom_violations=violations,
        cost_vs_dedicated=gpus / (static_res + train_h / hours),
        forecast_fallback_hours=fallbacks,
        shortage_over_capacity=float(np.maximum(u - gpus, 0.0).sum() / max(u.sum(), 1e-12)),
        warm_buffer=buffer,
        sim_seconds=time.perf_counter() - t_start,
        refit_seconds=refit,
        buffer_replay_seconds=replay_s,
    )
    if not timeline:
        return SimResult(**metrics)
    steps = pd.DataFrame({"demand_gpus": u, "reserved_gpus": res, "headroom_gpus": head, "inference_gpus": held_l,
                          "warm_gpus": serving_l, "training_gpus": train_l}, index=index[e0:])
    steps["idle_gpus"] = gpus - steps["inference_gpus"] - steps["training_gpus"]
    steps["unmet_gpus"] = np.maximum(steps["demand_gpus"] - steps["warm_gpus"], 0.0)
    ev = pd.DataFrame(events, columns=["step", "gpus", "kind", "jobs"])
    ev.insert(0, "time", index[e0:][ev.pop("step").to_numpy(int)])
    hours = bands if bands is not None else pd.DataFrame(columns=["target_gpus", "high_gpus"], dtype=float)
    return TimedResult(**metrics, timeline=Timeline(steps, hours, ev))
