"""The planner: the one place that decides how many GPUs inference gets, what is lent and what is preempted.

Pure: forecasts, the cluster's state, the policy and `now` in, a plan out; no I/O and no clock, so
the same inputs always give the same plan, whether `headroom run` acts on it or the simulator does.
Every decision carries its reason.

Two stages, so a caller that plans every few minutes does not redo the hourly work:
  * `plan_hours` (once an hour, or when a forecast changes): each workload's reservation and
    preemption headroom for every period of the forecast horizon, the conservative fallback where
    the forecast is unusable, and the cut to the cluster's capacity;
  * `plan_step` (every reconcile): the reservation in force now (the forecast's, `leadTime` ahead,
    and never below the recent observed peak plus the warm buffer), the slack lent to training, the
    quota each training ClusterQueue admits new jobs into (no GPUs a new job could not keep until its
    first checkpoint), and the preemptions due: emergency (demand above the forecast needs the GPUs
    now), planned (training holds more than the slack; slow-to-preempt jobs on GPUs that plausible
    demand may need before they stop; a forecast ramp-up, stopped at the last checkpoint before the
    GPUs are needed).
Times are epoch seconds (floats) inside; `pd.Timestamp` at the edges.
"""
from __future__ import annotations

import bisect
import datetime as dt
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np
import pandas as pd

from core.policy import PolicySpec
from core.units import UTC, WEEK_SECONDS, epoch_seconds, whole_replicas

MAX_GPUS = 2**40  # more GPUs than any cluster holds; far from int64's limit when summed
# A training job that does not say how fast it stops, or how often it checkpoints (and the jobs Kueue may admit next,
# when none runs to tell): assumed slow, and checkpointing every half hour.
UNANNOTATED_PREEMPTION_SECONDS = 600.0
UNANNOTATED_CHECKPOINT_SECONDS = 1800.0
ABOVE_NAMED = 3  # the policies a preemption's reason names among those above their forecast (the furthest above)
NO_DATA = "no data"  # why a plan falls back when nothing was observed in the week before now


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
    warm_buffer_quantile: float | None = None  # the buffer also follows the last week's rises (_rise_buffer)
    timezone: str = UTC  # the wall clock whose hours of day the fallback's same-hour peaks follow

    @classmethod
    def from_spec(cls, name: str, spec: PolicySpec) -> WorkloadPolicy:
        return cls(name, spec.capacity.demand_per_gpu, spec.capacity.gpus_per_replica, spec.target_quantile,
                   spec.headroom_quantile, spec.lead_time_seconds, spec.warm_buffer, spec.scale_in_delay_seconds,
                   spec.min_gpus, spec.max_gpus, spec.margin_gpus, spec.headroom_floor_gpus,
                   spec.reclaim_deadline_seconds, spec.rise_quantile, spec.timezone)

    def gpus(self, demand: float) -> int:
        """GPUs that serve `demand`: whole replicas, rounded up; unknown (NaN) demand needs nothing extra. Demand
        beyond any cluster (infinite, or more than MAX_GPUS) is MAX_GPUS: the clamp to the cluster then reserves
        everything, where an int64 would overflow into a small or negative reservation."""
        if math.isnan(demand) or not demand > 0:
            return 0
        replicas = demand / (self.demand_per_gpu * self.gpus_per_replica)
        if not replicas * self.gpus_per_replica < MAX_GPUS:
            return MAX_GPUS
        return int(math.ceil(replicas - 1e-9)) * self.gpus_per_replica

    def gpus_each(self, demand: np.ndarray) -> np.ndarray:
        """`gpus` of each value (int64), the same arithmetic on a whole array (a plan's periods at once)."""
        with np.errstate(invalid="ignore", over="ignore"):
            replicas = demand / (self.demand_per_gpu * self.gpus_per_replica)
            fits = replicas * self.gpus_per_replica < MAX_GPUS
            whole = np.ceil(np.where(fits, replicas, 0.0) - 1e-9).astype(np.int64) * self.gpus_per_replica
            return np.where(demand > 0, np.where(fits, whole, MAX_GPUS), 0)

    # Every reservation is whole replicas (a target runs ceil(GPUs / gpusPerReplica) of them, and a part-replica
    # reserved would hold GPUs the plan also lends): minGpus and marginGpus round up, maxGpus and the cluster down.
    @property
    def least_gpus(self) -> int:
        """minGpus in whole replicas."""
        return whole_replicas(self.min_gpus, self.gpus_per_replica)

    def top(self, lendable: int) -> int:
        most = lendable if self.max_gpus is None else min(self.max_gpus, lendable)
        return max(most // self.gpus_per_replica * self.gpus_per_replica, self.least_gpus)

    def at_least(self, gpus: int) -> int:
        """`gpus` in whole replicas, never under minGpus."""
        return max(whole_replicas(gpus, self.gpus_per_replica), self.least_gpus)


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
        if sum(w.least_gpus for w in self.workloads) > self.lendable:
            raise ValueError(f"workload minimums (in whole replicas) exceed the {self.lendable} usable GPUs")
        if len({w.name for w in self.workloads}) != len(self.workloads):
            raise ValueError("workload names must be unique")

    @property
    def lendable(self) -> int:
        return self.capacity_gpus - self.non_lendable_gpus

    # read at every step: computed once
    @cached_property
    def reclaim_deadline_seconds(self) -> float:
        return min((w.reclaim_deadline_seconds for w in self.workloads), default=300.0)

    @cached_property
    def longest_lead_seconds(self) -> float:
        return max((w.lead_time_seconds for w in self.workloads), default=0.0)


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
        period = 3600.0
        if len(starts) > 1:
            steps = np.diff(starts)
            period = float(steps[0]) if (steps == steps[0]).all() else float(np.median(steps))  # regular: the median
        labels = frame.columns.tolist()
        where = {round(float(c), 9): k for k, c in enumerate(labels)}
        target, high = where[round(target_quantile, 9)], where[round(headroom_quantile, 9)]
        if len(set(labels)) < len(labels):
            return cls(starts, period, frame[labels[target]].to_numpy(float), frame[labels[high]].to_numpy(float))
        values = frame.to_numpy(float)  # one conversion, not a Series per column
        return cls(starts, period, values[:, target].copy(), values[:, high].copy())


@dataclass(frozen=True)
class History:
    """What the planner needs of a workload's observed demand: the newest sample's time (epoch seconds, None if
    none), and the samples (epoch seconds, ascending, and values; NaN: missing) whose last week the warm buffer's
    rises and, when the forecast is unusable, the fallback's hourly peaks read."""
    newest: float | None
    times: np.ndarray | None = None
    values: np.ndarray | None = None
    now: float = 0.0

    @classmethod
    def of(cls, observed: pd.Series, now: pd.Timestamp) -> History:
        observed = observed if observed.index.is_monotonic_increasing else observed.sort_index()
        seen = observed[observed.index <= now].dropna()
        return cls(seen.index[-1].timestamp() if len(seen) else None, epoch_seconds(observed.index),
                   observed.to_numpy(float), pd.Timestamp(now).timestamp())

    @cached_property
    def last_week(self) -> tuple[np.ndarray, np.ndarray]:
        """The samples of the week before `now` (NaN kept)."""
        if self.times is None or self.values is None:
            return np.zeros(0), np.zeros(0)
        lo = self.times.searchsorted(self.now - WEEK_SECONDS, side="right")
        hi = self.times.searchsorted(self.now, side="right")
        return self.times[lo:hi], self.values[lo:hi]

    def weekly_peak_by_hour(self, zone: str = UTC) -> tuple[np.ndarray, np.ndarray]:
        """Each hour of day's peak in the last week (hours of day as `_hour_of_day` counts them), and whether it is
        that hour of day's own: for an hour of day not seen, the week's highest peak; all NaN when nothing was seen.
        The hour in progress counts as seen only if an earlier one of its hour of day was: its first minutes are not
        its peak, and taking them for it would drop the reservation the unseen hour held from its lead time on, only
        to raise it again for the next unseen hour (a pulse that preempts training every hour)."""
        before = np.zeros(24, dtype=bool)
        if self.newest is None:
            return np.full(24, np.nan), before
        # numpy, not a pandas groupby: a thousand policies falling back at once ask this of every one of them
        times, values = self.last_week
        seen = ~np.isnan(values)
        hours = _hour_of_day(times[seen], zone, self.now)
        peaks = np.full(24, np.nan)
        np.fmax.at(peaks, hours, values[seen])
        before[hours[times[seen] < self.now // 3600 * 3600]] = True  # seen before the clock hour now began
        return (np.where(before, peaks, np.nanmax(peaks)) if seen.any() else peaks), before


def _hour_of_day(times: np.ndarray, zone: str, now: float) -> np.ndarray:
    """Each time's UTC hour of day, moved by as much as `zone`'s clock changed between it and `now`: last week's 09:00
    in Berlin is this week's 09:00 across a daylight saving change, as the forecast's seasons count it
    (forecast/clock.py); in a zone whose offset did not change (UTC), the UTC hour itself."""
    if zone != UTC and len(times):
        moments = pd.to_datetime(np.append(times, now), unit="s", utc=True)
        offsets = (moments.tz_convert(zone).tz_localize(None) - moments.tz_localize(None)).total_seconds().to_numpy()
        times = times + (offsets[:-1] - offsets[-1])
    return (times // 3600 % 24).astype(np.int64)


@dataclass(frozen=True)
class WorkloadHours:
    """One workload's reservation and headroom per period."""
    name: str
    starts: np.ndarray
    period: float
    reserved: np.ndarray       # GPUs, after the lead-free clamp and the capacity cut
    headroom: np.ndarray       # GPUs above the reservation, up to the headroom quantile (and maxGpus)
    from_forecast: np.ndarray  # bool per period; False: the conservative fallback
    target: np.ndarray         # the forecast's target quantile (demand units; NaN under fallback)
    why_fallback: str
    cut: np.ndarray            # GPUs cut by the cluster's capacity per period
    same_hour: np.ndarray      # bool per period; under fallback, True: its hour of day's own peak, False: the week's
    rise_buffer: float = 0.0   # the warm buffer's factor the last week's rises ask for (0: none asked)

    # read several times a step: bisect on a list beats numpy's search, and a list's items are Python numbers
    @cached_property
    def _start_list(self) -> list[float]:
        starts: list[float] = self.starts.tolist()
        return starts

    @cached_property
    def _reserved_list(self) -> list[int]:
        reserved: list[int] = self.reserved.tolist()
        return reserved

    def after(self, t: float) -> int:
        """The index of the first period starting after time t (starts.searchsorted(t, side="right"))."""
        return bisect.bisect_right(self._start_list, t)

    def at(self, t: float) -> int:
        """The period index holding time t (0 before the first, the last after the end)."""
        return min(max(self.after(t) - 1, 0), len(self._start_list) - 1)

    def in_force(self, t0: float, t1: float) -> int:
        """The period whose reservation is in force over [t0, t1]: the largest of the periods overlapping it (an hour's
        reservation is in force `leadTime` before the hour starts); of equals, one from the forecast, whose number it
        is too."""
        i, j = self.at(t0), self.at(t1)
        if i == j:
            return i
        reserved = self._reserved_list
        top = max(reserved[i:j + 1])
        largest = [k for k in range(i, j + 1) if reserved[k] == top]
        return next((k for k in largest if self.from_forecast[k]), largest[0])

    def reason(self, i: int, w: WorkloadPolicy, lendable: int) -> str:
        if not self.from_forecast[i] and self.why_fallback == NO_DATA:
            r = f"fallback ({NO_DATA}): nothing observed in the last week -> minGpus {self.reserved[i]} GPUs"
        elif not self.from_forecast[i]:
            peak = "last week's peak at this hour" if self.same_hour[i] else \
                "the week's highest peak (this hour of day not seen in it)"
            r = (f"fallback ({self.why_fallback}): {peak} -> "
                 f"{self.reserved[i] + self.cut[i]} GPUs (clamp [{w.least_gpus}, {w.top(lendable)}], whole replicas)")
        else:
            margin = whole_replicas(w.margin_gpus, w.gpus_per_replica)
            r = (f"q{w.target_quantile:g} forecast {self.target[i]:.4g} -> {self.reserved[i] + self.cut[i]} GPUs "
                 f"(+{margin} margin, clamp [{w.least_gpus}, {w.top(lendable)}], whole replicas)")
        if self.cut[i]:
            r += f"; cut by {self.cut[i]} GPUs: cluster capacity {lendable} exceeded"
        return r + f"; headroom {self.headroom[i]} GPUs to q{w.headroom_quantile:g}"


@dataclass(frozen=True)
class HourPlan:
    now: float
    workloads: tuple[WorkloadHours, ...]
    slack: np.ndarray  # lendable GPUs minus every reservation, per period
    notes: tuple[str, ...] = ()


def stale(newest: float | None, now: float, policy: ClusterPolicy) -> bool:
    """The history behind a forecast, whose newest sample is at `newest`, is too old to trust it: the plan falls
    back."""
    return newest is None or now - newest > policy.stale_after_seconds


def _periods(now: float, period: float, horizon_hours: int, lead_seconds: float) -> np.ndarray:
    """The horizon's periods from the one holding `now`, and on to any `lead_seconds` after a moment of that period: a
    step in it reserves for the period its lead time ahead, which a horizon shorter than the lead would not hold."""
    first = math.floor(now / period) * period
    reach = math.ceil(lead_seconds / period) + 1
    return first + period * np.arange(max(int(round(horizon_hours * 3600 / period)), reach))


def plan_hours(forecasts: Mapping[str, Forecast | None], histories: Mapping[str, History], policy: ClusterPolicy,
               now: pd.Timestamp) -> HourPlan:
    """Each workload's reservation and headroom over the horizon, cut to the cluster's capacity."""
    t_now = pd.Timestamp(now).timestamp()
    lendable = policy.lendable
    periods = {f.period for f in forecasts.values() if f is not None}
    if len(periods) > 1:
        raise ValueError(f"forecasts of one plan must share one period, got {sorted(periods)} s")
    period = periods.pop() if periods else 3600.0
    starts = _periods(t_now, period, policy.horizon_hours, policy.longest_lead_seconds)
    notes: list[str] = []
    rows = []
    for w in policy.workloads:
        f, h = forecasts.get(w.name), histories.get(w.name, History(None))
        old = stale(h.newest, t_now, policy)
        target, high = np.full((2, len(starts)), np.nan)
        if f is not None and not old:
            k = np.searchsorted(f.starts, starts)
            inside = (k < len(f.starts)) & (f.starts[np.minimum(k, len(f.starts) - 1)] == starts)
            target[inside], high[inside] = f.target[k[inside]], f.high[k[inside]]
        valid = np.isfinite(target) & (target >= 0) & np.isfinite(high) & (high >= 0)
        crossing = valid & (high < target)  # the contract refuses it; a forecast read from a store may still carry it
        usable = valid & ~crossing
        why = "stale history" if old else "no forecast" if f is None else "forecast missing, NaN or negative"
        if crossing.any():
            crossed = f"forecast q{w.headroom_quantile:g} below its q{w.target_quantile:g}"
            why = f"{why}; {crossed}" if (~valid).any() else crossed
        raw = w.gpus_each(target) + whole_replicas(w.margin_gpus, w.gpus_per_replica)
        same_hour = np.ones(len(starts), dtype=bool)
        if not usable.all():
            # An hour of day not seen in the week: the week's highest peak. No week observed at all: minGpus, and
            # plan_step keeps what the target serves now and follows live samples; reserving everything would take
            # the cluster from training and the other policies for a fault that is this policy's own.
            week, own = h.weekly_peak_by_hour(w.timezone)
            if np.isnan(week).all():
                why = NO_DATA
            # each period's hour of day; on a clock half an hour off now's (Lord Howe across its change) an hour holds
            # the ends of two of now's hours of day, and a peak in either may come within it: the higher of the two
            first, last = (_hour_of_day(starts + moment, w.timezone, t_now) for moment in (0.0, period - 1.0))
            peak = np.fmax(week[first], week[last])
            same_hour = own[first] & own[last]  # else the week's highest peak (the higher of the two)
            unseen = int((~usable & ~same_hour).sum())
            source = "minGpus and what the target holds now" if why == NO_DATA else "last week's same-hour peak" + (
                f" (the week's highest in {unseen} whose hour of day it did not see)" if unseen else "")
            notes.append(f"{w.name}: {why} for {int((~usable).sum())} period(s); using {source}")
            raw = np.where(usable, raw, w.gpus_each(peak))  # no data: 0, clamped to minGpus below
        # each within [minGpus, top], as plan_step's at_least and top hold it (np.clip costs ten times as much)
        reserved = np.minimum(np.maximum(raw, w.least_gpus), w.top(lendable))
        high_gpus = np.where(usable, w.gpus_each(high), 0)
        # only up to maxGpus: no takeback raises a reservation beyond it, so headroom there would keep slow jobs out
        # of GPUs inference never takes (beyond the cluster it stays: the status's ask says the cluster is too small)
        headroom = np.minimum(np.maximum(np.where(usable, high_gpus - reserved, 0), w.headroom_floor_gpus),
                              w.top(MAX_GPUS) - reserved)
        rows.append([w, reserved, headroom, usable, target, why, _rise_buffer(w, h), same_hour])
    # Over capacity: cut workloads later in the policy order first, never below their minimum.
    reserved = np.array([r[1] for r in rows], dtype=np.int64).reshape(len(rows), len(starts))
    cut = np.zeros(reserved.shape, np.int64)
    for i in np.nonzero(reserved.sum(axis=0) > lendable)[0]:  # the periods over capacity (a cut changes only its own)
        over_by = int(reserved[:, i].sum()) - lendable
        for row in reversed(range(len(rows))):
            if over_by <= 0:
                break
            w = rows[row][0]  # whole replicas: a part of one cut would still be held
            take = min(whole_replicas(over_by, w.gpus_per_replica), int(reserved[row, i]) - w.least_gpus)
            if take > 0:
                reserved[row, i] -= take
                cut[row, i] = take
                over_by -= take
    slack = lendable - reserved.sum(axis=0) if rows else np.full(len(starts), lendable)
    out = tuple(WorkloadHours(w.name, starts, period, reserved[k], headroom, usable, target, why, cut[k], same_hour,
                              rise)
                for k, (w, _, headroom, usable, target, why, rise, same_hour) in enumerate(rows))
    return HourPlan(t_now, out, slack.astype(np.int64), tuple(notes))


def _window_peaks(values: np.ndarray, behind: int, ahead: int) -> tuple[np.ndarray, np.ndarray]:
    """At each i with whole windows both sides: the peak of values[i:i + behind] and of the `ahead` values after them
    (NaN where a window holds a NaN). A shifted maximum at a time: the warm buffer asks this every hour of a week of
    samples, where numpy's general-purpose window calls would be much of a year's simulation."""
    n = len(values) - behind - ahead + 1
    before, after = values[:n], values[behind:behind + n]
    for k in range(1, behind):
        before = np.maximum(before, values[k:k + n])
    for k in range(1, ahead):
        after = np.maximum(after, values[behind + k:behind + k + n])
    return before, after


def _sampling_step(times: np.ndarray) -> float:
    """The recent sampling step: the middle gap of the last 64 samples (np.median costs ten times as much)."""
    recent = times[-64:]
    gaps = np.sort(recent[1:] - recent[:-1])  # np.diff's wrapper costs more than the subtraction
    return float(gaps[len(gaps) // 2]) if len(gaps) else 0.0


def _rise_buffer(w: WorkloadPolicy, h: History) -> float:
    """The warm buffer's factor b (buffer = b x sqrt(peak GPUs)) that the last week's demand asks for at the policy's
    warmBufferQuantile: that quantile, over every observed sample, of how many GPUs demand rose within the lead time
    above the peak of the scale-in delay before it, per sqrt of that peak. So the buffer follows the bursts the
    demand itself shows, as they grow or fade. 0 (the fixed warmBuffer alone) when off or with no rise seen."""
    q = w.warm_buffer_quantile
    if q is None or h.newest is None:
        return 0.0
    times, values = h.last_week
    if len(times) < 2:
        return 0.0
    step = _sampling_step(times)
    if not step > 0:
        return 0.0
    behind = int(w.scale_in_delay_seconds // step) + 1  # the samples plan_step's peak spans
    ahead = max(int(math.ceil(w.lead_time_seconds / step - 1e-9)), 1)
    n = len(values) - behind - ahead + 1  # the samples with a whole window behind and ahead
    if n < 1:
        return 0.0
    # each window's peak in GPUs
    gpus = w.gpus_each(values)
    finite = np.isfinite(values)
    if finite.all():
        before, after = _window_peaks(gpus, behind, ahead)
    else:  # a missing sample makes its windows NaN: dropped
        before, after = _window_peaks(np.where(finite, gpus, np.nan), behind, ahead)
        seen = np.isfinite(before) & np.isfinite(after)
        before, after = before[seen], after[seen]
    rise = (after - before) / np.sqrt(np.maximum(before, 1))
    if not len(rise):
        return 0.0
    # np.quantile's default (linear between the two nearest order statistics), by a partial sort: a tenth of its cost
    at = q * (len(rise) - 1)
    i = int(at)
    j = min(i + 1, len(rise) - 1)
    ordered = np.partition(rise, [i, j])
    low, high = ordered[i], ordered[j]
    return max(float(low + (high - low) * (at - i)), 0.0)


# --------------------------------------------------------------------------------------------- now
@dataclass(frozen=True)
class Observed:
    """One workload now: recent demand samples (epoch seconds, demand units) and the GPUs it holds."""
    times: np.ndarray
    values: np.ndarray
    held_gpus: int
    degraded: bool = False  # demand data missing or stale: the reservation in force only goes up


NOT_OBSERVED = Observed(np.empty(0), np.empty(0), 0)  # a workload the planner is given nothing of: no demand seen


@dataclass(frozen=True)
class Training:
    """The running training jobs (admitted, active, not being evicted), as columns; `queue` is each job's
    ClusterQueue."""
    ids: tuple[str, ...] = ()
    queue: tuple[str, ...] = ()
    gpus: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    priority: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    preempt_seconds: np.ndarray = field(default_factory=lambda: np.zeros(0))
    checkpoint_interval: np.ndarray = field(default_factory=lambda: np.zeros(0))
    last_checkpoint: np.ndarray = field(default_factory=lambda: np.zeros(0))  # epoch seconds
    terminating_gpus: int = 0  # evicted, still stopping: not reclaimable (on their way to inference, or to the
    # Workload Kueue preempted them for)
    serving_gpus: int = 0  # a policy's inference pods Kueue admitted into a training queue: they hold what is lent
    # there as the jobs do, and are no job (never a victim, never reclaimable)

    # derived, what every plan reads several times: the GPUs the running jobs hold, their longest preemption time
    # and checkpoint interval (0 when none runs)
    running_gpus: int = field(init=False)
    slowest_seconds: float = field(init=False)
    longest_interval: float = field(init=False)

    def __post_init__(self) -> None:
        running = len(self.ids) > 0
        object.__setattr__(self, "running_gpus", int(self.gpus.sum()))
        object.__setattr__(self, "slowest_seconds", float(self.preempt_seconds.max()) if running else 0.0)
        object.__setattr__(self, "longest_interval", float(self.checkpoint_interval.max()) if running else 0.0)

    def with_checkpoints(self, last_checkpoint: np.ndarray) -> Training:
        """The same running jobs with other newest checkpoints (a later moment): what is derived from the jobs is kept,
        not computed again (a simulator asks this at every step)."""
        moved = object.__new__(Training)
        moved.__dict__.update(self.__dict__, last_checkpoint=last_checkpoint)
        return moved


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
    buffer_gpus: int     # warm GPUs the reservation holds above it
    headroom_gpus: int
    from_forecast: bool
    degraded: bool
    cut_gpus: int = 0
    capped_gpus: int = 0  # GPUs the recent peak and warm buffer ask beyond the policy's maxGpus
    period: int = 0       # the hourly plan's period whose reservation is in force (WorkloadHours.in_force)

    @property
    def reason(self) -> str:
        source = "forecast" if self.from_forecast else "fallback"
        r = (f"{self.reserved_gpus} GPUs: {source} reservation {self.forecast_gpus} (lead time included), "
             f"recent peak {self.peak_gpus} + warm buffer {self.buffer_gpus}")
        if self.degraded:
            r += "; demand data degraded: not lowered, never below what the target holds now"
        if self.capped_gpus:
            r += f"; capped at maxGpus: {self.capped_gpus} GPUs fewer than asked"
        if self.cut_gpus:
            r += f"; cut by {self.cut_gpus} GPUs to fit the cluster"
        return r


@dataclass(frozen=True)
class StepPlan:
    now: float
    workloads: tuple[WorkloadStep, ...]
    lent_gpus: int                   # slack lent to training now: what running training may hold
    quotas: Mapping[str, int]        # training ClusterQueue -> nominal quota: what new admissions may fill (at most
                                     # the lent slack), split by weight
    headroom_gpus: int               # the band lent GPUs must come back from within the deadline
    preemptions: tuple[Preemption, ...]
    quota_reason: str = ""           # why the quotas are below the lent slack (empty: they are not)

    def due(self) -> tuple[Preemption, ...]:
        return tuple(p for p in self.preemptions if p.at <= self.now) if self.preemptions else ()


def newest_checkpoint(since: np.ndarray, interval: np.ndarray, now: float | np.ndarray) -> np.ndarray:
    """A job checkpoints every `interval` from `since` (its admission, or the checkpoint it reports): its newest
    checkpoint at or before `now`, or `since` when that is not before `now` (a clock ahead of ours). An infinite
    interval (a job that never checkpoints) keeps `since`."""
    since = np.asarray(since, float)
    interval = np.asarray(interval, float)
    passed = np.floor(np.maximum(now - since, 0.0) / interval)  # whole intervals since then (0: none, or never)
    newest: np.ndarray = since + np.where(passed > 0, interval, 0.0) * passed  # never inf * 0
    return newest


def _next_checkpoint(since: np.ndarray, interval: np.ndarray, now: float) -> np.ndarray:
    """The first checkpoint at or after `now` of a job checkpointing every `interval` from `since` (inf: never)."""
    newest = newest_checkpoint(since, interval, now)
    return np.where(newest < now, newest + np.asarray(interval, float), newest)


def _clock(t: float) -> str:
    """HH:MM (UTC) of epoch seconds, for reasons (datetime: a third of pd.Timestamp's cost; made at many steps)."""
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%H:%M")


def queue_weights(queues: Iterable[str], team_weights: Mapping[str, float]) -> tuple[tuple[str, float], ...]:
    """ClusterPolicy.queue_weights of the training ClusterQueues `queues`, in name order: each its weight in
    `team_weights` (run.team_weights), 1 where it has none."""
    return tuple((q, team_weights.get(q, 1.0)) for q in sorted(set(queues)))


def shares(total: int, weights: Sequence[tuple[str, float]]) -> dict[str, int]:
    """Split `total` GPUs by weight, whole GPUs, largest remainders first (ties by name)."""
    if not weights:
        return {}
    if len(weights) == 1 and 0 < weights[0][1] < math.inf:  # one queue: all of it (what the general case gives)
        return {weights[0][0]: int(total)}
    # scaled by a power of two, which is exact: the largest in [0.5, 1), so huge weights neither sum nor multiply to
    # infinity, and any other weights split exactly as unscaled
    power = math.frexp(max(w for _, w in weights))[1]
    scaled = [(k, math.ldexp(w, -power)) for k, w in weights]
    s = sum(w for _, w in scaled)
    exact = {k: total * w / s for k, w in scaled}
    out = {k: int(math.floor(v)) for k, v in exact.items()}
    for k in sorted(exact, key=lambda k: (out[k] - exact[k], k))[: total - sum(out.values())]:
        out[k] += 1
    return out


def quota_shares(quota: int, lent: int, weights: Sequence[tuple[str, float]]) -> dict[str, int]:
    """The admission `quota` (at most the `lent` slack) split by weight, no queue above its share of the slack lent:
    a team admitted within its nominalQuota is never the one over its share when GPUs are taken back. Largest
    remainders alone would not do (7 GPUs split 0.1:1:1 give the first queue 1, 8 give it 0): what a queue's share of
    the quota has beyond its share of the slack goes, a GPU at a time, to the queue with the most room left below its
    own (ties by name)."""
    cap, out = shares(lent, weights), shares(quota, weights)
    spare = sum(max(g - cap[q], 0) for q, g in out.items())
    out = {q: min(g, cap[q]) for q, g in out.items()}
    for _ in range(spare):  # at most a GPU a queue; the shares of the slack lent hold them all (quota <= lent)
        q = min(out, key=lambda q: (out[q] - cap[q], q))
        out[q] += 1
    return out


def _victims(t: Training, running: np.ndarray, among: np.ndarray, need: int, waste: np.ndarray, lent: int,
             weights: Sequence[tuple[str, float]], in_time: float | None = None, late_need: int = 0) -> np.ndarray:
    """The jobs of `among` that give back `need` GPUs, and `late_need` GPUs of the jobs that cannot stop within
    `in_time` (the headroom band's: they may hold only so much), in one selection: a job stopped for one need counts
    for the other. Taken in this order (headroom's own: Kueue takes nothing from one training queue for another,
    their reclaimWithinCohort being Never; README, "The simulated Kueue"):
      1. with `in_time` (the seconds until the GPUs are needed), the jobs that stop within it: the others come back
         too late to help (inference first);
      2. of the ClusterQueues holding, with all `running` jobs, more than their weighted share of the `lent` GPUs
         (a queue without a weight has no share), so a team within its share keeps its jobs (not Kueue's
         borrowing, above the queue's nominalQuota, which is its share of the admission quota);
      3. lowest priority: a job is never stopped while one of lower priority of the same kind (1 and 2) could free
         the GPUs as well;
      4. least `waste` (per job: the seconds of its GPUs lost to training, stopped as planned);
      5. fastest to preempt, then id (the same jobs in any order give the same victims).
    The first jobs in that order that free `need` GPUs, then the first late ones after them that free what
    `late_need` still lacks, without those the others cover (Kueue's last step: a large job late in the order makes
    earlier small ones unnecessary), returned in that order; or, when those are all of one kind, one job alone of that
    kind, meeting both needs, and of the lowest priority any such job has (no higher than theirs), if it wastes less
    (`waste` times its GPUs) than they do."""
    if not len(among) or (need <= 0 and late_need <= 0):
        return among[:0]
    share = shares(max(lent, 0), weights)
    held: dict[str, int] = {}
    for q, g in zip((t.queue[i] for i in running.tolist()), t.gpus[running].tolist()):
        held[q] = held.get(q, 0) + int(g)
    over_share = np.array([held.get(t.queue[i], 0) > share.get(t.queue[i], 0) for i in among.tolist()], dtype=bool)
    late = t.preempt_seconds[among] > in_time if in_time is not None else np.zeros(len(among), dtype=bool)
    kind = 2 * late.astype(np.int64) + ~over_share  # 0: in time and over its share, the first to go
    gpus, priority = t.gpus[among], t.priority[among]
    wasted = waste[among]
    ids = np.array([t.ids[i] for i in among.tolist()], dtype=object)
    order = np.lexsort((ids, t.preempt_seconds[among], wasted, priority, kind))  # positions in `among`
    first = int(np.searchsorted(np.cumsum(gpus[order]), need)) + 1 if need > 0 else 0
    chosen = list(order[:first])
    late_gpus = np.where(late, gpus, 0)
    lacking = late_need - int(late_gpus[chosen].sum())
    if lacking > 0:
        rest = order[first:][late[order[first:]]]
        chosen += list(rest[: int(np.searchsorted(np.cumsum(gpus[rest]), lacking)) + 1])
    total, total_late = int(gpus[chosen].sum()), int(late_gpus[chosen].sum())
    for k in chosen[::-1]:
        if total - int(gpus[k]) >= need and total_late - int(late_gpus[k]) >= late_need:
            chosen.remove(k)
            total -= int(gpus[k])
            total_late -= int(late_gpus[k])
    kinds = kind[chosen]
    if len(kinds) and (kinds == kinds[0]).all():
        meets = (gpus >= need) & (late_gpus >= late_need)
        alone = order[meets[order] & (kind[order] == kinds[0]) & (priority[order] <= priority[chosen].max())]
        if len(alone):
            alone = alone[priority[alone] == priority[alone].min()]
            cost = wasted * gpus
            best = alone[int(np.argmin(cost[alone]))]  # the first of equals in the order
            if cost[best] < cost[chosen].sum():
                chosen = [best]
    return among[np.array(chosen, dtype=np.int64)]


def plan_step(hours: HourPlan, observed: Mapping[str, Observed], training: Training, policy: ClusterPolicy,
              now: pd.Timestamp | float) -> StepPlan:
    """The decisions due now, from the hourly plan and what the cluster holds."""
    # epoch seconds (int or float) or a timestamp; pd.Timestamp(int) would read nanoseconds
    t_now = float(now) if isinstance(now, (int, float, np.number)) else pd.Timestamp(now).timestamp()
    lendable = policy.lendable
    steps: list[WorkloadStep] = []
    for w, wh in zip(policy.workloads, hours.workloads):
        o = observed.get(w.name, NOT_OBSERVED)
        source = wh.in_force(t_now, t_now + w.lead_time_seconds)  # the forecast's or the fallback's period
        fore = int(wh.reserved[source])
        peak = buffer = 0
        if len(o.times):
            lo = o.times.searchsorted(t_now - w.scale_in_delay_seconds, side="left")
            hi = o.times.searchsorted(t_now, side="right")
            # the largest finite sample (a NaN or infinite one is no demand seen); a few, so as Python floats
            recent = [v for v in o.values[lo:hi].tolist() if math.isfinite(v)]
            if not recent:  # none within scaleInDelay (sampled less often than that, or a gap): demand last seen,
                # unless it is too old to trust
                recent = _last_seen(o, t_now - policy.stale_after_seconds, int(hi))
            if recent:
                peak = w.gpus(float(max(recent)))
                factor = max(w.warm_buffer, wh.rise_buffer)
                if factor > 0:  # whole replicas, as `gpus` gives the peak: the target scales by replicas
                    buffer = w.gpus(factor * math.sqrt(max(peak, 1)) * w.demand_per_gpu)
        asked = w.at_least(max(fore, peak + buffer))
        want = min(asked, w.top(lendable))
        # nothing observed in the week is degraded data whatever the caller's staleness bound (run.stale_after_seconds
        # may be longer than a week): what the target holds now is kept
        degraded = o.degraded or (wh.why_fallback == NO_DATA and not wh.from_forecast[source])
        if degraded:
            want = max(want, min(whole_replicas(o.held_gpus, w.gpus_per_replica), w.top(lendable)))
        # what maxGpus took and what the cluster's size alone took, each said in the reason
        within_max = min(asked, w.top(MAX_GPUS))
        cut = max(within_max - want, 0)
        capped = asked - within_max if w.max_gpus is not None else 0  # no maxGpus: only demand beyond MAX_GPUS
        steps.append(WorkloadStep(w.name, want, fore, peak, _held_buffer(buffer, want, peak),
                                  int(wh.headroom[wh.at(t_now)]), bool(wh.from_forecast[source]), degraded, cut,
                                  capped, source))
    excess = sum(s.reserved_gpus for s in steps) - lendable
    for k in reversed(range(len(steps))):  # later workloads give way first, never below their minimum
        if excess <= 0:
            break
        w = policy.workloads[k]  # whole replicas, as in plan_hours
        take = min(whole_replicas(excess, w.gpus_per_replica), steps[k].reserved_gpus - w.least_gpus)
        if take > 0:
            s = steps[k]
            steps[k] = replace(s, reserved_gpus=s.reserved_gpus - take, cut_gpus=s.cut_gpus + take,
                               buffer_gpus=_held_buffer(s.buffer_gpus, s.reserved_gpus - take, s.peak_gpus))
            excess -= take
    lent = max(lendable - sum(s.reserved_gpus for s in steps), 0)
    band = min(sum(s.headroom_gpus for s in steps), lent)
    slow = training.slowest_seconds > policy.reclaim_deadline_seconds  # any running job that cannot stop in time
    room = _slow_room(hours, steps, observed, training, policy, t_now, lent - band, 0.0) if slow else lent - band
    preemptions = _preemptions(hours, steps, training, policy, t_now, lent, room)
    quota, why = _admission_quota(hours, steps, observed, training, policy, t_now, lent, band, preemptions, slow)
    return StepPlan(t_now, tuple(steps), lent, quota_shares(quota, lent, policy.queue_weights), band, preemptions, why)


def _held_buffer(buffer: int, reserved: int, peak: int) -> int:
    """The warm buffer a reservation holds above the peak: a maximum or the cluster may leave less of it."""
    return min(buffer, max(reserved - peak, 0))


def _last_seen(o: Observed, since: float, hi: int) -> list[float]:
    """The newest finite sample of o's samples before index `hi` taken at or after `since` ([] if none)."""
    values = o.values[o.times.searchsorted(since, side="left"):hi]
    seen = np.flatnonzero(np.isfinite(values))
    return [float(values[seen[-1]])] if len(seen) else []


def _rise(o: Observed, now: float, horizon: float, q: float) -> float:
    """Demand's plausible peak over the next `horizon` seconds: its peak over the last `horizon` plus the q-quantile,
    over the observed samples, of how far one such window's peak rose above the one before (demand units; 0 without
    enough samples). Peaks, not single samples, so that a dip does not make the next hour look quiet."""
    hi = int(np.searchsorted(o.times, now, side="right"))
    times, values = o.times[:hi], o.values[:hi]
    if int(np.isfinite(values).sum()) < 3:
        return 0.0
    step = _sampling_step(times)
    # one sample more: a job kept now is next reconsidered a sample later
    k = max(int(math.ceil(horizon / step - 1e-9)), 1) + 1 if step > 0 else 1
    recent = values[-k:]
    peak = float(np.nanmax(recent)) if np.isfinite(recent).any() else 0.0
    if len(values) < 2 * k:
        return peak
    before, ahead = _window_peaks(values, k, k)  # a missing sample drops its windows (NaN)
    rise = ahead - before
    rise = rise[np.isfinite(rise)]
    return peak + (max(float(np.quantile(rise, q)), 0.0) if len(rise) else 0.0)


def _slow_room(hours: HourPlan, steps: list[WorkloadStep], observed: Mapping[str, Observed], t: Training,
               policy: ClusterPolicy, now: float, outside_band: int, hold: float) -> int:
    """GPUs that jobs unable to stop within the reclaim deadline may hold: what no plausible demand needs before such a
    job, kept `hold` seconds more and then asked to stop, is gone. Per workload, plausible demand over its lead time,
    `hold` and the slowest job's stop time is the most of: its reservation and headroom now; each period's reservation
    and headroom (to the headroom quantile) in force by then; demand's peak over as long a time back plus the headroom
    quantile of how far such a peak rose in the observed history (the forecast's band can miss a burst; the history
    says how large bursts get)."""
    slow = t.preempt_seconds > policy.reclaim_deadline_seconds
    stop = float(t.preempt_seconds[slow].max()) if slow.any() else UNANNOTATED_PREEMPTION_SECONDS
    lendable = policy.lendable
    needed = 0
    for w, wh, s in zip(policy.workloads, hours.workloads, steps):
        horizon = w.lead_time_seconds + hold + stop
        i, j = wh.at(now), wh.at(now + horizon)
        plausible = max(s.reserved_gpus + s.headroom_gpus, int((wh.reserved[i:j + 1] + wh.headroom[i:j + 1]).max()))
        o = observed.get(w.name, NOT_OBSERVED)
        if len(o.times):
            plausible = max(plausible, w.gpus(_rise(o, now, horizon, w.headroom_quantile)))
        needed += min(plausible, w.top(lendable))
    return max(min(lendable - needed, outside_band), 0)


def _admission_quota(hours: HourPlan, steps: list[WorkloadStep], observed: Mapping[str, Observed], t: Training,
                     policy: ClusterPolicy, now: float, lent: int, band: int, preemptions: tuple[Preemption, ...],
                     slow_running: bool) -> tuple[int, str]:
    """What new admissions may fill (the training queues' quota; Kueue counts what running and stopping jobs hold
    against it). A job admitted now holds its GPUs at least until its first checkpoint, one checkpoint interval away
    (stopped earlier, all its work is lost), and then takes its stop time to give them back. So the lent slack, but
      * where the plan takes GPUs back before then, only what leaves that slack to the new job and the running jobs
        that cannot reach a checkpoint in time either (the others stop at theirs, losing nothing);
      * while jobs that cannot stop within the deadline run, only what would leave a new job, were it as slow, within
        the slack no plausible demand needs before then (Kueue cannot tell a slow job from a fast one).
    The running jobs' checkpoint interval and stop time say what the next job is like; with none running, a job
    that says nothing (UNANNOTATED_*) as to its checkpoints (taking it as slow too would keep every job out of the
    plausible demand whenever nothing runs)."""
    quota, why = lent, ""
    if quota <= 0 or not hours.workloads:
        return quota, why
    interval = t.longest_interval if len(t.ids) else UNANNOTATED_CHECKPOINT_SECONDS
    stop = t.slowest_seconds if len(t.ids) else UNANNOTATED_PREEMPTION_SECONDS
    lead = policy.longest_lead_seconds
    window = now + lead + interval + stop
    starts = hours.workloads[0].starts
    i, j = hours.workloads[0].after(now), hours.workloads[0].after(window)
    if j > i:
        # a running job that reaches a checkpoint in time can give its GPUs to the ramp without loss; the new job and
        # the running jobs that cannot must fit in the slack left
        upcoming = None
        for p in range(i, j):
            if int(hours.slack[p]) >= quota:
                continue  # what running jobs free there could only add to it
            # the running jobs' GPUs freed in time, if any run; not those of jobs already stopping: Kueue fills their
            # quota with new jobs as soon as they have stopped, not at the next reconcile
            free = 0
            if len(t.ids):
                if upcoming is None:
                    upcoming = _next_checkpoint(t.last_checkpoint, t.checkpoint_interval, now)
                free += int(t.gpus[upcoming <= starts[p] - lead - t.preempt_seconds].sum())
            if int(hours.slack[p]) + free < quota:
                quota = max(int(hours.slack[p]) + free, 0)
                why = (f"{quota} GPUs admit new training: the ramp at {_clock(starts[p])} leaves {int(hours.slack[p])} "
                       "GPUs of slack, and a job admitted now could not checkpoint and stop before it")
    if slow_running and quota > 0:
        slow = t.preempt_seconds > policy.reclaim_deadline_seconds
        room = _slow_room(hours, steps, observed, t, policy, now, lent - band, interval)
        stopping = {p.job for p in preemptions if p.at <= now}
        gone = np.array([job in stopping for job in t.ids], dtype=bool)
        # what Kueue counts that is neither a slow job staying on nor free soon: fast jobs. Not the jobs stopping now
        # or before: Kueue admits into their quota as soon as they have stopped, not at the next reconcile
        other = int(t.gpus[~slow & ~gone].sum())
        if room + other < quota:
            quota = room + other
            why = (f"{quota} GPUs admit new training: jobs slow to preempt may hold only {room} GPUs that no plausible "
                   "demand needs before a job admitted now could checkpoint and stop")
    return quota, why


def _preemptions(hours: HourPlan, steps: list[WorkloadStep], t: Training, policy: ClusterPolicy, now: float,
                 lent: int, room: int) -> tuple[Preemption, ...]:
    if not t.ids:
        return ()
    running = np.arange(len(t.ids))
    out: list[Preemption] = []
    deadline, weights = policy.reclaim_deadline_seconds, policy.queue_weights
    first = steps[0].name if steps else ""
    waste = np.maximum(now - t.last_checkpoint, 0.0) + t.preempt_seconds  # stopped now: the work since its last
    # checkpoint, and the time it takes to stop

    def stop(victims: np.ndarray, kind: str, at: float, workload: str, why: str, lost: float | None = None) -> None:
        nonlocal running
        for i in victims:
            work_lost = max(at - float(t.last_checkpoint[i]), 0.0) if lost is None else lost
            out.append(Preemption(t.ids[i], int(t.gpus[i]), kind, at, work_lost, workload, why))
        running = np.setdiff1d(running, victims, assume_unique=True)

    # Two takebacks due now, chosen together (_victims: a job stopped for one counts for the other, so neither stops a
    # job the other's victims make unnecessary). Training may hold what is lent now; beyond it, inference needs the GPUs
    # back, from the jobs that can stop within the deadline first, of the ClusterQueues above their weighted share of
    # the lent slack. And the headroom guarantee: slow-to-preempt jobs may only hold what no plausible demand needs
    # before they are gone (the room; none is slow: nothing is over it, never negative).
    over = t.running_gpus + t.serving_gpus - lent
    slow = t.preempt_seconds > deadline
    over_band = int(t.gpus[slow].sum()) + t.serving_gpus - room  # inference pods are never taken back: the slow
    # jobs may hold only what they leave of the room
    if over > 0 or over_band > 0:
        # demand above the forecast takes GPUs only where it raised the reservation (not where maxGpus or the
        # cluster held it at the forecast): then, and only then, an emergency
        above = [s for s in steps if s.forecast_gpus < min(s.peak_gpus + s.buffer_gpus, s.reserved_gpus)]
        kind = "emergency" if over > 0 and above else "planned"
        holders = "training and the inference pods in its queues hold" if t.serving_gpus else "training holds"
        excess = f"{holders} {over} GPUs more than the {lent} lent now"
        band = (f"slow-to-preempt jobs exceed the {room} GPUs no plausible demand needs before they could stop "
                "(outside the headroom band)")
        # the kinds first, then the policies furthest above their forecast: an Event keeps 1 kB of it
        furthest = sorted(above, key=lambda s: s.forecast_gpus - s.peak_gpus - s.buffer_gpus)[:ABOVE_NAMED]
        demand = "observed demand above the forecast: " + ", ".join(
            f"{s.name} peak {s.peak_gpus} + buffer {s.buffer_gpus} > forecast {s.forecast_gpus}" for s in furthest) \
            + (f" and {len(above) - len(furthest)} more" if len(above) > len(furthest) else "")
        workload = above[0].name if over > 0 and above else first
        freed = 0
        # a Workload asking no GPUs frees none: never a victim, even where the jobs that hold GPUs cannot free enough
        # (inference pods in the queues holding more than is lent)
        holding = running[t.gpus[running] > 0]
        for i in _victims(t, running, holding, over, waste, lent, weights, deadline, over_band):
            # in the order taken, the victims that free the `over` GPUs are the excess's (a slow one among them also
            # leaves the band); one after them is a slow job stopped for the band alone: planned, as it would be
            # were nothing held beyond the slack
            for_excess = freed < over
            freed += int(t.gpus[i])
            why = "; ".join(text for text, met in ((excess, for_excess), (band, over_band > 0 and slow[i]),
                                                   (demand, for_excess and bool(above))) if met)
            stop(np.array([i]), kind if for_excess else "planned", now, workload if for_excess else first, why)
    # A forecast ramp-up: stop jobs at their last checkpoint before the GPUs are needed. Only ramps within one
    # checkpoint interval (plus lead and stop times) can need a decision now: later ones pass another checkpoint.
    lead = policy.longest_lead_seconds
    window = now + t.longest_interval + lead + t.slowest_seconds
    starts = hours.workloads[0].starts if hours.workloads else np.zeros(0)
    # the periods starting in (now, window] (a NaN window, from a NaN annotation, holds none)
    begin, end = (hours.workloads[0].after(now), hours.workloads[0].after(window)) \
        if hours.workloads and not math.isnan(window) else (0, 0)
    for p in range(begin, end):
        if t.running_gpus + t.serving_gpus <= int(hours.slack[p]):
            continue  # what still runs holds no more than that
        over = int(t.gpus[running].sum()) + t.serving_gpus - int(hours.slack[p])
        if over <= 0 or not len(running):
            continue
        need_at = float(starts[p]) - lead
        why = f"forecast ramp-up at {_clock(starts[p])} leaves {int(hours.slack[p])} GPUs of slack; GPUs needed by " \
              f"{_clock(need_at)}"
        # each job stopped for it: at the last checkpoint before it must stop to be ready by need_at, losing nothing,
        # or with none in time (or a newest checkpoint said to be after then, from a clock ahead of ours), as late as
        # it can, losing the work since its last
        ready_by = need_at - t.preempt_seconds
        ckpt = newest_checkpoint(t.last_checkpoint, t.checkpoint_interval, ready_by)
        at_ckpt = (now <= ckpt) & (ckpt <= np.maximum(ready_by, now))
        stops = np.where(at_ckpt, ckpt, np.maximum(ready_by, now))
        lost = np.where(at_ckpt, 0.0, np.maximum(stops - t.last_checkpoint, 0.0))
        idle = np.maximum(need_at - stops, t.preempt_seconds)  # stopping, then idle until the GPUs are needed
        # a Workload asking no GPUs frees none; jobs that can stop by need_at go first (the others come back late), of
        # the queues above their share of the slack then
        for i in _victims(t, running, running[t.gpus[running] > 0], over, lost + idle, int(hours.slack[p]), weights,
                          max(need_at - now, 0.0)):
            then = f"; stops at its checkpoint {_clock(ckpt[i])}" if at_ckpt[i] else "; no checkpoint before then"
            stop(np.array([i]), "planned", float(stops[i]), first, why + then, lost=float(lost[i]))
    return tuple(out)
