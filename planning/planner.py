"""The planner: the one place that decides how many GPUs inference gets, what is lent and what is preempted.

Pure: forecasts, the cluster's state, the policy and `now` in, a plan out; no I/O and no clock, so
the same inputs always give the same plan, whether `headroom run` acts on it or the simulator does.
Every decision carries its reason.

Two stages, so a caller that plans every few minutes does not redo the hourly work:
  * `plan_hours` (once an hour, or when a forecast changes): each workload's reservation and
    preemption headroom for every period of the forecast horizon, the conservative fallback where
    the forecast is unusable, and the cut to the cluster's capacity;
  * `plan_step` (every reconcile): the reservation in force now (the forecast's, `leadTime` ahead,
    and never below the recent observed peak plus the warm buffer), the slack lent to each training
    ClusterQueue, and the preemptions due: emergency (demand above the forecast needs the GPUs now),
    planned (training holds more than the slack; slow-to-preempt jobs inside the headroom band; a
    forecast ramp-up, stopped at the last checkpoint before the GPUs are needed).
Times are epoch seconds (floats) inside; `pd.Timestamp` at the edges.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pandas as pd

from core.policy import PolicySpec
from core.units import epoch_seconds

WEEK = 7 * 86400.0


@dataclass(frozen=True)
class WorkloadPolicy:
    """One ReservationPolicy's spec in the planner's units (seconds, GPUs)."""
    name: str
    demand_per_gpu: float
    gpus_per_replica: int = 1
    target_quantile: float = 0.9
    headroom_quantile: float = 0.99
    lead_time_seconds: float = 900.0
    warm_buffer: float = 0.0
    scale_in_delay_seconds: float = 0.0
    min_gpus: int = 0
    max_gpus: int | None = None
    margin_gpus: int = 0
    headroom_floor_gpus: int = 0
    reclaim_deadline_seconds: float = 300.0

    @classmethod
    def from_spec(cls, name: str, spec: PolicySpec) -> WorkloadPolicy:
        return cls(name, spec.capacity.demand_per_gpu, spec.capacity.gpus_per_replica, spec.target_quantile,
                   spec.headroom_quantile, spec.lead_time_seconds, spec.warm_buffer, spec.scale_in_delay_seconds,
                   spec.min_gpus, spec.max_gpus, spec.margin_gpus, spec.headroom_floor_gpus,
                   spec.reclaim_deadline_seconds)

    def gpus(self, demand: float) -> int:
        """GPUs that serve `demand`: whole replicas, rounded up; unknown demand needs nothing extra."""
        if not demand > 0 or not math.isfinite(demand):
            return 0
        per_replica = self.demand_per_gpu * self.gpus_per_replica
        return int(math.ceil(demand / per_replica - 1e-9)) * self.gpus_per_replica

    def top(self, lendable: int) -> int:
        return max(lendable if self.max_gpus is None else min(self.max_gpus, lendable), self.min_gpus)

    def clamp(self, gpus: int, lendable: int) -> int:
        return min(max(gpus, self.min_gpus), self.top(lendable))


@dataclass(frozen=True)
class ClusterPolicy:
    """The cluster every workload shares."""
    capacity_gpus: int
    workloads: tuple[WorkloadPolicy, ...]
    queue_weights: tuple[tuple[str, float], ...] = ()  # training ClusterQueue -> share of the slack
    non_lendable_gpus: int = 0
    horizon_hours: int = 24
    stale_after_seconds: float = 7200.0  # a forecast is trusted until the history behind it is this old

    def __post_init__(self) -> None:
        if sum(w.min_gpus for w in self.workloads) > self.lendable:
            raise ValueError(f"workload minimums exceed the {self.lendable} usable GPUs")
        if len({w.name for w in self.workloads}) != len(self.workloads):
            raise ValueError("workload names must be unique")

    @property
    def lendable(self) -> int:
        return self.capacity_gpus - self.non_lendable_gpus

    @property
    def reclaim_deadline_seconds(self) -> float:
        return min((w.reclaim_deadline_seconds for w in self.workloads), default=300.0)


# --------------------------------------------------------------------------------------------- hours
@dataclass(frozen=True)
class Forecast:
    """A forecast's periods (start epoch seconds, length) and its target and headroom quantiles there."""
    starts: np.ndarray
    period: float
    target: np.ndarray
    high: np.ndarray

    @classmethod
    def of(cls, frame: pd.DataFrame, target_quantile: float, headroom_quantile: float) -> Forecast:
        """From a quantile frame (index: period starts, UTC; columns: quantiles). KeyError if a quantile is missing."""
        starts = epoch_seconds(frame.index)
        period = float(np.median(np.diff(starts))) if len(starts) > 1 else 3600.0
        cols = {round(float(c), 9): c for c in frame.columns}
        return cls(starts, period, frame[cols[round(target_quantile, 9)]].to_numpy(float),
                   frame[cols[round(headroom_quantile, 9)]].to_numpy(float))


@dataclass(frozen=True)
class History:
    """What the planner needs of a workload's observed demand: the newest sample's time (epoch seconds, None if
    none), and, only when the forecast is unusable, each hour-of-day's peak over the week before `now`."""
    newest: float | None
    observed: pd.Series | None = None  # raw samples, UTC index
    now: float = 0.0

    @classmethod
    def of(cls, observed: pd.Series, now: pd.Timestamp) -> History:
        seen = observed[observed.index <= now].dropna()
        return cls(seen.index[-1].timestamp() if len(seen) else None, observed, pd.Timestamp(now).timestamp())

    @cached_property
    def weekly_peak_by_hour(self) -> np.ndarray:
        """24 values, NaN for an hour of day not seen in the last week."""
        if self.observed is None or self.newest is None:
            return np.full(24, np.nan)
        now = pd.Timestamp(self.now, unit="s", tz="UTC")
        week = self.observed[(self.observed.index > now - pd.Timedelta(days=7)) & (self.observed.index <= now)].dropna()
        return week.groupby(week.index.hour).max().reindex(range(24)).to_numpy(float)


@dataclass(frozen=True)
class WorkloadHours:
    """One workload's reservation and headroom per period."""
    name: str
    starts: np.ndarray
    period: float
    reserved: np.ndarray       # GPUs, after the lead-free clamp and the capacity cut
    headroom: np.ndarray       # GPUs above the reservation, up to the headroom quantile
    from_forecast: np.ndarray  # bool per period; False: the conservative fallback
    target: np.ndarray         # the forecast's target quantile (demand units; NaN under fallback)
    why_fallback: str
    cut: np.ndarray            # GPUs cut by the cluster's capacity per period

    def at(self, t: float) -> int:
        """The period index holding time t (0 before the first, the last after the end)."""
        return int(min(max(np.searchsorted(self.starts, t, side="right") - 1, 0), len(self.starts) - 1))

    def reserved_over(self, t0: float, t1: float) -> int:
        """The largest reservation of the periods overlapping [t0, t1]: an hour's reservation is in force
        `leadTime` before the hour starts."""
        i, j = self.at(t0), self.at(t1)
        return int(self.reserved[i:j + 1].max())

    def reason(self, i: int, w: WorkloadPolicy, lendable: int) -> str:
        if not self.from_forecast[i]:
            r = f"fallback ({self.why_fallback}): last week's peak at this hour -> {self.reserved[i]} GPUs"
        else:
            top = w.max_gpus if w.max_gpus is not None else lendable
            r = (f"q{w.target_quantile:g} forecast {self.target[i]:.4g} -> {self.reserved[i] + self.cut[i]} GPUs "
                 f"(+{w.margin_gpus} margin, clamp [{w.min_gpus}, {top}])")
        if self.cut[i]:
            r += f"; cut by {self.cut[i]} GPUs: cluster capacity {lendable} exceeded"
        return r + f"; headroom {self.headroom[i]} GPUs to q{w.headroom_quantile:g}"


@dataclass(frozen=True)
class HourPlan:
    now: float
    workloads: tuple[WorkloadHours, ...]
    slack: np.ndarray  # lendable GPUs minus every reservation, per period
    notes: tuple[str, ...] = ()


def stale(history: History, now: float, policy: ClusterPolicy) -> bool:
    """The history behind a forecast is too old to trust it: the plan falls back."""
    return history.newest is None or now - history.newest > policy.stale_after_seconds


def _periods(now: float, period: float, horizon_hours: int) -> np.ndarray:
    first = math.floor(now / period) * period
    return first + period * np.arange(max(int(round(horizon_hours * 3600 / period)), 1))


def plan_hours(forecasts: Mapping[str, Forecast | None], histories: Mapping[str, History], policy: ClusterPolicy,
               now: pd.Timestamp) -> HourPlan:
    """Each workload's reservation and headroom over the horizon, cut to the cluster's capacity."""
    t_now = pd.Timestamp(now).timestamp()
    lendable = policy.lendable
    periods = {f.period for f in forecasts.values() if f is not None}
    if len(periods) > 1:
        raise ValueError(f"forecasts of one plan must share one period, got {sorted(periods)} s")
    period = periods.pop() if periods else 3600.0
    starts = _periods(t_now, period, policy.horizon_hours)
    hour_of_day = ((starts // 3600) % 24).astype(int)
    notes: list[str] = []
    rows = []
    for w in policy.workloads:
        f, h = forecasts.get(w.name), histories.get(w.name, History(None))
        old = stale(h, t_now, policy)
        target, high = np.full(len(starts), np.nan), np.full(len(starts), np.nan)
        if f is not None and not old:
            k = np.searchsorted(f.starts, starts)
            inside = (k < len(f.starts)) & (f.starts[np.minimum(k, len(f.starts) - 1)] == starts)
            target[inside], high[inside] = f.target[k[inside]], f.high[k[inside]]
        usable = np.isfinite(target) & (target >= 0) & np.isfinite(high) & (high >= target)
        why = "stale history" if old else ("no forecast" if f is None else "forecast missing, NaN or negative")
        if not usable.all():
            notes.append(f"{w.name}: {why} for {int((~usable).sum())} period(s); using last week's same-hour peak")
        # without any observed week the only safe reservation is everything
        peak = h.weekly_peak_by_hour[hour_of_day] if not usable.all() else np.zeros(len(starts))
        fallback = [w.gpus(p) if np.isfinite(p) else lendable for p in peak]
        raw = [w.gpus(t) + w.margin_gpus if ok else fb for t, ok, fb in zip(target, usable, fallback)]
        reserved = np.array([w.clamp(g, lendable) for g in raw], dtype=np.int64)
        high_gpus = np.array([w.gpus(x) if ok else 0 for x, ok in zip(high, usable)], dtype=np.int64)
        headroom = np.maximum(np.where(usable, high_gpus - reserved, 0), w.headroom_floor_gpus)
        rows.append([w, reserved, headroom, usable, target, why])
    # Over capacity: cut workloads later in the policy order first, never below their minimum.
    reserved = np.array([r[1] for r in rows], dtype=np.int64).reshape(len(rows), len(starts))
    cut = np.zeros_like(reserved)
    for i in range(len(starts)):
        excess = int(reserved[:, i].sum()) - lendable
        for k in reversed(range(len(rows))):
            if excess <= 0:
                break
            take = min(excess, int(reserved[k, i]) - rows[k][0].min_gpus)
            if take > 0:
                reserved[k, i] -= take
                cut[k, i] = take
                excess -= take
    slack = lendable - reserved.sum(axis=0) if rows else np.full(len(starts), lendable)
    out = tuple(WorkloadHours(w.name, starts, period, reserved[k], headroom, usable, target, why, cut[k])
                for k, (w, _, headroom, usable, target, why) in enumerate(rows))
    return HourPlan(t_now, out, slack.astype(np.int64), tuple(notes))


# --------------------------------------------------------------------------------------------- now
@dataclass(frozen=True)
class Observed:
    """One workload now: recent demand samples (epoch seconds, demand units) and the GPUs it holds."""
    times: np.ndarray
    values: np.ndarray
    held_gpus: int
    degraded: bool = False  # demand data missing or stale: the reservation in force only goes up


@dataclass(frozen=True)
class Training:
    """The running training jobs (admitted, active), as columns; `queue` is each job's ClusterQueue."""
    ids: tuple[str, ...] = ()
    queue: tuple[str, ...] = ()
    gpus: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    priority: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    preempt_seconds: np.ndarray = field(default_factory=lambda: np.zeros(0))
    checkpoint_interval: np.ndarray = field(default_factory=lambda: np.zeros(0))
    last_checkpoint: np.ndarray = field(default_factory=lambda: np.zeros(0))  # epoch seconds
    terminating_gpus: int = 0  # evicted, still stopping: already on their way to inference


@dataclass(frozen=True)
class Preemption:
    job: str
    gpus: int
    kind: str            # "planned" | "emergency"
    at: float            # when it stops (epoch seconds); due when at <= now
    work_lost_seconds: float
    workload: str        # on whose behalf (events and the timeline attribute it there)
    reason: str


@dataclass(frozen=True)
class WorkloadStep:
    name: str
    reserved_gpus: int   # the reservation in force now: what the target is scaled to
    forecast_gpus: int   # the forecast's part (leadTime ahead)
    peak_gpus: int       # the recent observed peak's GPUs
    buffer_gpus: int     # warm GPUs above it
    headroom_gpus: int
    from_forecast: bool
    degraded: bool
    cut_gpus: int = 0

    @property
    def reason(self) -> str:
        source = "forecast" if self.from_forecast else "fallback"
        r = (f"{self.reserved_gpus} GPUs: {source} reservation {self.forecast_gpus} (lead time included), "
             f"recent peak {self.peak_gpus} + warm buffer {self.buffer_gpus}")
        if self.degraded:
            r += "; demand data degraded: not lowered"
        if self.cut_gpus:
            r += f"; cut by {self.cut_gpus} GPUs to fit the cluster"
        return r


@dataclass(frozen=True)
class StepPlan:
    now: float
    workloads: tuple[WorkloadStep, ...]
    lent_gpus: int                   # slack lent to training now
    quotas: Mapping[str, int]        # training ClusterQueue -> nominal quota (the lent slack split by weight)
    headroom_gpus: int               # the band lent GPUs must come back from within the deadline
    preemptions: tuple[Preemption, ...]

    def due(self) -> tuple[Preemption, ...]:
        return tuple(p for p in self.preemptions if p.at <= self.now)


def newest_checkpoint(since: np.ndarray, interval: np.ndarray, now: float) -> np.ndarray:
    """A job checkpoints every `interval` from `since` (its admission, or the checkpoint it reports): its newest
    checkpoint at or before `now`."""
    since = np.asarray(since, float)
    interval = np.asarray(interval, float)
    return np.where(now > since, since + interval * np.floor((now - since) / interval), since)


def shares(total: int, weights: Sequence[tuple[str, float]]) -> dict[str, int]:
    """Split `total` GPUs by weight, whole GPUs, largest remainders first (ties by name)."""
    if not weights:
        return {}
    s = sum(w for _, w in weights)
    exact = {k: total * w / s for k, w in weights}
    out = {k: int(math.floor(v)) for k, v in exact.items()}
    for k in sorted(exact, key=lambda k: (out[k] - exact[k], k))[: total - sum(out.values())]:
        out[k] += 1
    return out


def _victim_order(t: Training, among: np.ndarray, at: float) -> np.ndarray:
    """Least work lost, then lowest priority, then fastest to preempt, then id."""
    if not len(among):
        return among
    lost = at - t.last_checkpoint[among]
    ids = np.array([t.ids[i] for i in among], dtype=object)
    return among[np.lexsort((ids, t.preempt_seconds[among], t.priority[among], lost))]


def plan_step(hours: HourPlan, observed: Mapping[str, Observed], training: Training, policy: ClusterPolicy,
              now: pd.Timestamp | float) -> StepPlan:
    """The decisions due now, from the hourly plan and what the cluster holds."""
    # epoch seconds (int or float) or a timestamp; pd.Timestamp(int) would read nanoseconds
    t_now = float(now) if isinstance(now, (int, float, np.number)) else pd.Timestamp(now).timestamp()
    lendable = policy.lendable
    steps: list[WorkloadStep] = []
    for w, wh in zip(policy.workloads, hours.workloads):
        o = observed.get(w.name)
        fore = wh.reserved_over(t_now, t_now + w.lead_time_seconds)
        peak = buffer = 0
        if o is not None and len(o.times):
            lo = np.searchsorted(o.times, t_now - w.scale_in_delay_seconds, side="left")
            hi = np.searchsorted(o.times, t_now, side="right")
            recent = o.values[lo:hi]
            recent = recent[np.isfinite(recent)]
            if len(recent):
                peak = w.gpus(float(recent.max()))
                if w.warm_buffer > 0:
                    buffer = int(math.ceil(w.warm_buffer * math.sqrt(max(peak, 1)) - 1e-9))
        want = w.clamp(max(fore, peak + buffer), lendable)
        degraded = o is not None and o.degraded
        if degraded:
            want = max(want, min(o.held_gpus, w.top(lendable)))
        steps.append(WorkloadStep(w.name, want, fore, peak, buffer, int(wh.headroom[wh.at(t_now)]),
                                  bool(wh.from_forecast[wh.at(t_now)]), degraded))
    excess = sum(s.reserved_gpus for s in steps) - lendable
    for k in reversed(range(len(steps))):  # later workloads give way first, never below their minimum
        if excess <= 0:
            break
        take = min(excess, steps[k].reserved_gpus - policy.workloads[k].min_gpus)
        if take > 0:
            s = steps[k]
            steps[k] = WorkloadStep(s.name, s.reserved_gpus - take, s.forecast_gpus, s.peak_gpus, s.buffer_gpus,
                                    s.headroom_gpus, s.from_forecast, s.degraded, take)
            excess -= take
    lent = max(lendable - sum(s.reserved_gpus for s in steps), 0)
    band = min(sum(s.headroom_gpus for s in steps), lent)
    preemptions = _preemptions(hours, steps, training, policy, t_now, lent, band)
    return StepPlan(t_now, tuple(steps), lent, shares(lent, policy.queue_weights), band, preemptions)


def _preemptions(hours: HourPlan, steps: list[WorkloadStep], t: Training, policy: ClusterPolicy, now: float,
                 lent: int, band: int) -> tuple[Preemption, ...]:
    running = np.arange(len(t.ids))
    if not len(running):
        return ()
    out: list[Preemption] = []
    deadline = policy.reclaim_deadline_seconds
    first = steps[0].name if steps else ""

    def stop(victims: np.ndarray, kind: str, at: float, workload: str, why: str, lost: float | None = None) -> None:
        nonlocal running
        for i in victims:
            work_lost = max(at - float(t.last_checkpoint[i]), 0.0) if lost is None else lost
            out.append(Preemption(t.ids[i], int(t.gpus[i]), kind, at, work_lost, workload, why))
        running = np.setdiff1d(running, victims, assume_unique=True)

    def enough(order: np.ndarray, need: int) -> np.ndarray:
        return order[: int(np.searchsorted(np.cumsum(t.gpus[order]), need)) + 1]

    # Training may hold what is lent now; beyond it, inference needs the GPUs back.
    over = int(t.gpus.sum()) - lent
    if over > 0:
        above = [s for s in steps if s.peak_gpus + s.buffer_gpus > s.forecast_gpus and s.reserved_gpus > 0]
        kind = "emergency" if above else "planned"
        why = f"training holds {over} GPUs more than the {lent} lent now"
        if above:
            why += "; observed demand above the forecast (" + ", ".join(
                f"{s.name} peak {s.peak_gpus} + buffer {s.buffer_gpus} > forecast {s.forecast_gpus}"
                for s in above) + ")"
        workload = above[0].name if above else first
        stop(enough(_victim_order(t, running, now), over), kind, now, workload, why)
    # The headroom guarantee: slow-to-preempt jobs may only hold the slack outside the band.
    slow = running[t.preempt_seconds[running] > deadline]
    over = int(t.gpus[slow].sum()) - (lent - band)
    if over > 0:
        stop(enough(_victim_order(t, slow, now), over), "planned", now, first,
             f"slow-to-preempt jobs exceed the slack outside the {band}-GPU headroom band")
    # A forecast ramp-up: stop jobs at their last checkpoint before the GPUs are needed. Only ramps within one
    # checkpoint interval (plus lead and stop times) can need a decision now: later ones pass another checkpoint.
    lead = max((w.lead_time_seconds for w in policy.workloads), default=0.0)
    window = now + float(t.checkpoint_interval.max()) + lead + float(t.preempt_seconds.max())
    starts = hours.workloads[0].starts if hours.workloads else np.zeros(0)
    for p in np.flatnonzero((starts > now) & (starts <= window)):
        over = int(t.gpus[running].sum()) - int(hours.slack[p])
        if over <= 0 or not len(running):
            continue
        need_at = float(starts[p]) - lead
        why = f"forecast ramp-up at {pd.Timestamp(starts[p], unit='s', tz='UTC'):%H:%M} leaves {int(hours.slack[p])} " \
              f"GPUs of slack; GPUs needed by {pd.Timestamp(need_at, unit='s', tz='UTC'):%H:%M}"
        for i in _victim_order(t, running, need_at):
            if over <= 0:
                break
            ready_by = need_at - float(t.preempt_seconds[i])
            interval, last = float(t.checkpoint_interval[i]), float(t.last_checkpoint[i])
            ckpt = last + interval * max(math.floor((ready_by - last) / interval), 0)
            # a checkpoint still to come before ready_by, or the one taken just now: stopping there loses nothing
            if ckpt >= now:
                stop(np.array([i]), "planned", ckpt, first,
                     why + f"; stops at its checkpoint {pd.Timestamp(ckpt, unit='s', tz='UTC'):%H:%M}", lost=0.0)
            else:  # no checkpoint fits before then: run as long as possible, lose the partial interval
                stop(np.array([i]), "planned", max(ready_by, now), first, why + "; no checkpoint before then")
            over -= int(t.gpus[i])
    return tuple(out)
