"""The pure planner: forecasts + cluster snapshot + policy + now -> Plan.

No I/O and no clock: `now` is an argument, so the same inputs always give the
same plan. Every decision carries the reason it was taken.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta

import numpy as np
import pandas as pd

from planning.queue import Job, TeamQuota, allocate

HOUR = pd.Timedelta(hours=1)


@dataclass(frozen=True)
class WorkloadPolicy:
    name: str
    demand_per_gpu: float = 1.0  # demand units one GPU serves
    gpus_per_replica: int = 1
    target_quantile: float = 0.9
    headroom_quantile: float = 0.99
    margin_gpus: int = 0
    min_gpus: int = 0
    max_gpus: int | None = None
    headroom_floor_gpus: int = 0
    lead_time: timedelta = timedelta(minutes=15)


@dataclass(frozen=True)
class Policy:
    capacity_gpus: int
    workloads: tuple[WorkloadPolicy, ...]
    teams: tuple[TeamQuota, ...] = ()
    non_lendable_gpus: int = 0
    reclaim_deadline: timedelta = timedelta(minutes=5)
    horizon_hours: int = 24
    stale_after: timedelta = timedelta(hours=2)

    def __post_init__(self):
        lendable = self.capacity_gpus - self.non_lendable_gpus
        if sum(w.min_gpus for w in self.workloads) > lendable:
            raise ValueError(f"workload minimums exceed the {lendable} usable GPUs")
        if len({w.name for w in self.workloads}) != len(self.workloads):
            raise ValueError("workload names must be unique")


@dataclass(frozen=True)
class Observation:
    current_demand: float
    history: pd.Series  # observed demand (any step), tz-aware UTC; NaN = missing


@dataclass(frozen=True)
class RunningJob:
    job: Job
    last_checkpoint_at: pd.Timestamp


@dataclass(frozen=True)
class Snapshot:
    observations: Mapping[str, Observation]
    running: tuple[RunningJob, ...] = ()
    queued: tuple[Job, ...] = ()


@dataclass(frozen=True)
class Reservation:
    workload: str
    hour: pd.Timestamp
    gpus: int
    headroom_gpus: int
    source: str  # "forecast" | "fallback"
    reason: str


@dataclass(frozen=True)
class HourPlan:
    hour: pd.Timestamp
    reserved_gpus: int
    headroom_gpus: int
    slack_gpus: int


@dataclass(frozen=True)
class Admission:
    job_id: str
    team: str
    gpus: int
    fast_preemptible: bool
    reason: str


@dataclass(frozen=True)
class Preemption:
    job_id: str
    gpus: int
    kind: str  # "planned" | "emergency"
    at: pd.Timestamp
    work_lost_seconds: float
    reason: str


@dataclass(frozen=True)
class Plan:
    now: pd.Timestamp
    reservations: tuple[Reservation, ...]
    hours: tuple[HourPlan, ...]
    admissions: tuple[Admission, ...]
    preemptions: tuple[Preemption, ...]
    notes: tuple[str, ...] = field(default=())


def gpus_for(demand, w: WorkloadPolicy) -> np.ndarray:
    """GPUs that serve `demand`: whole replicas, rounded up."""
    per_replica = w.demand_per_gpu * w.gpus_per_replica
    demand = np.nan_to_num(np.asarray(demand, dtype=float), nan=0.0, posinf=0.0)  # unknown demand needs nothing extra
    replicas = np.ceil(np.maximum(demand, 0.0) / per_replica - 1e-9)
    return replicas.astype(int) * w.gpus_per_replica


def clamp(gpus: np.ndarray, w: WorkloadPolicy, capacity: int) -> np.ndarray:
    top = capacity if w.max_gpus is None else min(w.max_gpus, capacity)
    return np.clip(gpus, w.min_gpus, max(top, w.min_gpus))


def with_lead(gpus: np.ndarray, lead: timedelta) -> np.ndarray:
    """Hour i must already hold the reservation of every hour starting within `lead` of its end."""
    k = math.ceil(pd.Timedelta(lead) / HOUR)
    out = gpus.copy()
    for j in range(1, k + 1):
        out[:-j] = np.maximum(out[:-j], gpus[j:])
    return out


def _minutes(span: timedelta) -> str:
    return f"{pd.Timedelta(span).total_seconds() / 60:g} min"


def weekly_peak(history: pd.Series, hours: pd.DatetimeIndex, now: pd.Timestamp) -> np.ndarray:
    """Conservative fallback: per hour of day, the peak observed over the last week (NaN if none)."""
    if history.dropna().empty:
        return np.full(len(hours), np.nan)
    week = history[(history.index > now - pd.Timedelta(days=7)) & (history.index <= now)].dropna()
    if week.empty:
        return np.full(len(hours), np.nan)
    peak = week.groupby(week.index.hour).max()
    return peak.reindex(hours.hour).to_numpy(dtype=float)


def _workload(w, forecast, obs, hours, now, policy, lendable, notes):
    """Reservation and headroom per hour for one workload, with per-hour reasons."""
    n = len(hours)
    history = obs.history if obs is not None else pd.Series(dtype=float)
    last_seen = history.dropna().index.max() if history.notna().any() else None
    stale = last_seen is None or now - last_seen > pd.Timedelta(policy.stale_after)
    target = np.full(n, np.nan)
    high = np.full(n, np.nan)
    if forecast is not None and not stale:
        cols = {float(c): c for c in forecast.columns}
        if w.target_quantile in cols and w.headroom_quantile in cols:
            f = forecast.reindex(hours)
            target = f[cols[w.target_quantile]].to_numpy(dtype=float)
            high = f[cols[w.headroom_quantile]].to_numpy(dtype=float)
        else:
            notes.append(f"{w.name}: forecast lacks quantiles {w.target_quantile}/{w.headroom_quantile}")
    bad = ~(np.isfinite(target) & (target >= 0) & np.isfinite(high) & (high >= target))
    peak = weekly_peak(history, hours, now)
    # without any observed week the only safe reservation is the maximum
    fallback = np.where(np.isfinite(peak), gpus_for(np.nan_to_num(peak), w), lendable)
    why_bad = "stale history" if stale else "forecast missing/NaN/negative"
    if forecast is None and not stale:
        why_bad = "no forecast"
    if bad.any():
        notes.append(f"{w.name}: {why_bad} for {int(bad.sum())} hour(s); using last week's same-hour peak")
    raw = np.where(bad, fallback, gpus_for(np.nan_to_num(target), w) + w.margin_gpus)
    res = clamp(with_lead(clamp(raw, w, lendable), w.lead_time), w, lendable)
    need_now = int(clamp(gpus_for([obs.current_demand], w), w, lendable)[0]) if obs is not None else 0
    floored = res[0] < need_now
    res[0] = max(res[0], need_now)
    hi = np.where(bad, res, gpus_for(np.nan_to_num(high), w))
    head = np.maximum(hi - res, w.headroom_floor_gpus)
    reasons = []
    for i in range(n):
        if bad[i]:
            r = f"fallback ({why_bad}): last week's peak at this hour -> {res[i]} GPUs"
        else:
            r = (f"q{w.target_quantile:g} forecast {target[i]:.3g} -> {raw[i] - w.margin_gpus} GPUs"
                 f" (+{w.margin_gpus} margin), {res[i]} after lead {_minutes(w.lead_time)} and clamp"
                 f" [{w.min_gpus}, {w.max_gpus if w.max_gpus is not None else lendable}]")
        if i == 0 and floored:
            r += f"; held at {need_now} GPUs because observed demand {obs.current_demand:.3g} still needs them"
        r += f"; headroom {head[i]} GPUs to q{w.headroom_quantile:g}"
        reasons.append(r)
    return res.astype(int), head.astype(int), ~bad, reasons, need_now


def plan(forecasts: Mapping[str, pd.DataFrame], snapshot: Snapshot, policy: Policy, now: pd.Timestamp) -> Plan:
    now = pd.Timestamp(now)
    hours = pd.date_range(now.floor("h"), periods=policy.horizon_hours, freq="h")
    lendable = policy.capacity_gpus - policy.non_lendable_gpus
    deadline = pd.Timedelta(policy.reclaim_deadline).total_seconds()
    notes: list[str] = []
    per = []
    for w in policy.workloads:
        per.append((w, *_workload(w, forecasts.get(w.name), snapshot.observations.get(w.name), hours, now, policy, lendable, notes)))

    # Over capacity: cut workloads later in the policy order first, never below their minimum.
    res = np.array([p[1] for p in per])
    cut_reason = [[""] * len(hours) for _ in per]
    for i in range(len(hours)):
        excess = int(res[:, i].sum()) - lendable
        for k in reversed(range(len(per))):
            if excess <= 0:
                break
            cut = min(excess, int(res[k, i]) - per[k][0].min_gpus)
            if cut > 0:
                res[k, i] -= cut
                excess -= cut
                cut_reason[k][i] = f"; cut by {cut} GPUs: cluster capacity {lendable} exceeded"
    head = np.array([p[2] for p in per])
    total_res = res.sum(axis=0)
    total_head = np.minimum(head.sum(axis=0), lendable - total_res)
    if (total_head < head.sum(axis=0)).any():
        notes.append("headroom capped by cluster capacity in some hours")
    slack = lendable - total_res

    reservations = tuple(
        Reservation(w.name, hours[i], int(res[k, i]), int(head[k, i]), "forecast" if ok[i] else "fallback", reasons[i] + cut_reason[k][i])
        for k, (w, _, _, ok, reasons, _) in enumerate(per)
        for i in range(len(hours))
    )
    hour_plans = tuple(HourPlan(hours[i], int(total_res[i]), int(total_head[i]), int(slack[i])) for i in range(len(hours)))

    preemptions = _preempt(snapshot, per, res, slack, total_head, hours, now, deadline, notes)
    # admission into the current hour: fast jobs anywhere in the slack, slow ones only outside the headroom band
    # A job stopped later (at a checkpoint before a ramp-up) still holds its GPUs now.
    stopped_now = {x.job_id for x in preemptions if x.at <= now}
    holding = [r for r in snapshot.running if r.job.id not in stopped_now]
    held = sum(r.job.gpus for r in holding)
    slow_held = sum(r.job.gpus for r in holding if r.job.preemption_seconds > deadline)
    window = slice(0, min(2, len(hours)))
    free = int(slack[window].min()) - held
    slow_free = int((slack[window] - total_head[window]).min()) - slow_held
    usage: dict[str, int] = {}
    for r in holding:
        usage[r.job.team] = usage.get(r.job.team, 0) + r.job.gpus
    grants = allocate(max(free, 0), max(slow_free, 0), snapshot.queued, usage, policy.teams, deadline)
    admissions = tuple(
        Admission(g.job.id, g.job.team, g.job.gpus, g.job.preemption_seconds <= deadline, g.reason) for g in grants
    )
    return Plan(now, reservations, hour_plans, admissions, preemptions, tuple(notes))


def _victim_order(running, now):
    """Least work lost, then lowest priority, then fastest to preempt."""
    return sorted(running, key=lambda r: ((now - r.last_checkpoint_at).total_seconds(), r.job.priority, r.job.preemption_seconds, r.job.id))


def _preempt(snapshot, per, res, slack, head, hours, now, deadline, notes):
    running = list(snapshot.running)
    out: list[Preemption] = []

    def stop(victims, kind, at, why, lost=None):
        for r in victims:
            work_lost = max((at - r.last_checkpoint_at).total_seconds(), 0.0) if lost is None else lost
            out.append(Preemption(r.job.id, r.job.gpus, kind, at, work_lost, why))
            running.remove(r)

    def pick(need, candidates):
        chosen = []
        for r in candidates:
            if need <= 0:
                break
            chosen.append(r)
            need -= r.job.gpus
        return chosen

    # Emergency: observed demand needs more than the forecast reserved for this hour.
    above = [(p[0].name, p[5]) for k, p in enumerate(per) if p[5] > 0 and p[5] >= res[k, 0]]
    over = sum(r.job.gpus for r in running) - int(slack[0])
    if over > 0:
        kind = "emergency" if above else "planned"
        why = f"training holds {over} GPUs more than this hour's slack {int(slack[0])}"
        if kind == "emergency":
            why += "; observed demand above forecast (" + ", ".join(f"{n} needs {g}" for n, g in above) + ")"
        stop(pick(over, _victim_order(running, now)), kind, now, why)
    # Headroom guarantee: slow-to-preempt jobs may only hold the slack outside the headroom band.
    slow = [r for r in running if r.job.preemption_seconds > deadline]
    over = sum(r.job.gpus for r in slow) - int(slack[0] - head[0])
    if over > 0:
        stop(pick(over, _victim_order(slow, now)), "planned", now,
             f"slow-to-preempt jobs exceed the slack outside the {int(head[0])}-GPU headroom band")
    # Planned reclaim before a forecast ramp-up: stop at the last checkpoint before the GPUs are needed.
    for i in range(1, len(hours)):
        over = sum(r.job.gpus for r in running) - int(slack[i])
        if over <= 0:
            continue
        lead = max(pd.Timedelta(p[0].lead_time) for p in per) if per else pd.Timedelta(0)
        need_at = hours[i] - lead
        for r in _victim_order(running, need_at):
            if over <= 0:
                break
            ready_by = need_at - pd.Timedelta(seconds=r.job.preemption_seconds)
            interval = pd.Timedelta(seconds=r.job.checkpoint_interval_seconds)
            ckpt = r.last_checkpoint_at + interval * max(math.floor((ready_by - r.last_checkpoint_at) / interval), 0)
            why = f"forecast ramp-up at {hours[i]} leaves {int(slack[i])} GPUs of slack; GPUs needed by {need_at}"
            if now <= ckpt and ckpt > r.last_checkpoint_at:
                stop([r], "planned", ckpt, why + f"; stops at its checkpoint {ckpt}", lost=0.0)
            else:  # no checkpoint fits before the deadline: run as long as possible, lose the partial interval
                stop([r], "planned", max(ready_by, now), why + "; no checkpoint before then")
            over -= r.job.gpus
    return tuple(out)
