"""The what-if engine: a demand trace replayed on the embedded cluster under a ReservationPolicy.

It is `headroom run`'s decision path without the API: at every sample of the evaluated days the
clock moves (adapters.embedded.EmbeddedCluster.advance), the controller observes what a reconcile
would (controller.observe), refits the forecast once an hour on complete past hours only, plans
(planning.planner, the one decision-maker), turns the plan into actions (controller.actions) and
applies them; then Kueue admits training. So a number measured here is a number about `headroom run`:
the embedded controller writes the same timeline (tests/test_sameness.py).

Policies: `forecast` (the policy's forecaster, `auto` by default), the baselines `static`, `reactive`
and `seasonal-naive` (a level per hour plus the policy's margin), and two references that know the
future: `oracle` (each step's demand, raised early enough to be warm) and `hourly-oracle` (per clock
hour a constant level chosen in hindsight: the least quantile of that hour's demand meeting the
objective, raised one step early).
"""
from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields

import numpy as np
import pandas as pd

from adapters.embedded import EmbeddedCluster
from controller.actions import Evict, PolicyTarget, Stopped, View, cluster_actions, evicted_gpus, in_write_order
from controller.executor import apply
from controller.observe import (
    MIN_FIT_HOURS,
    DataSettings,
    IssuedForecast,
    default_forecaster,
    degraded_reason,
    hourly_history,
    issue,
)
from core.errors import raise_interrupt_inside
from core.files import replace_whole
from core.objects import ObjectRef
from core.policy import API_VERSION, KIND, PolicySpec, manifest
from core.settings import SIMULATED_POLICIES, WorldSettings
from core.units import epoch_seconds, go_duration
from forecast.base import Forecaster
from forecast.baselines import BASELINES
from forecast.clock import local_hours
from planning.planner import (
    ClusterPolicy,
    Forecast,
    History,
    HourPlan,
    Observed,
    WorkloadPolicy,
    plan_hours,
    plan_step,
    queue_weights,
    stale,
)

POLICIES = SIMULATED_POLICIES
REFERENCES = ("oracle", "hourly-oracle")
TUNABLE = tuple(name for name in POLICIES if name not in REFERENCES)  # a reference has nothing to tune
FORECASTER = {"forecast": "auto", "static": "static", "reactive": "reactive", "seasonal-naive": "seasonal-naive"}
HOURLY_ORACLE_LEVELS = (0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.98, 1.0)  # quantiles of each hour's demand tried
TIMELINE_COLUMNS = ("timestamp", "workload", "demand_gpus", "reserved_gpus", "warm_gpus", "headroom_gpus", "lent_gpus",
                    "preempted_gpus")


@dataclass(frozen=True)
class Scenario:
    """The cluster and what it replays."""
    demand: pd.Series                     # raw samples at the trace's own step (UTC index; NaN = missing)
    gpus: int = 128
    days: float = 7.0                     # evaluated: the last `days`; everything before is history
    jobs: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # a job trace (gpus, work s, arrival offset s)
    world: WorldSettings = WorldSettings()
    data: DataSettings = DataSettings()
    name: str = "default/inference"       # the policy's namespace/name
    training_queues: tuple[str, ...] = ("training",)
    # the controller's settings beside the policy (run.*), which `headroom run` decides with on the same configuration
    non_lendable_gpus: int = 0                         # never lent (run.non_lendable_gpus)
    team_weights: tuple[tuple[str, float], ...] = ()   # training ClusterQueue -> its share (run.team_weights; else 1)

    @property
    def step_seconds(self) -> float:
        return float(np.median(np.diff(epoch_seconds(self.demand.index))))

    @property
    def evaluated(self) -> pd.DatetimeIndex:
        index = pd.DatetimeIndex(self.demand.index)
        # whole seconds: a fractional `days` must compare with an index at second resolution
        return index[index > index[-1] - pd.Timedelta(seconds=round(self.days * 86400))]

    @property
    def replay_seconds(self) -> float:
        """From the first evaluated step to the last: the window a job trace arrives over (trace_jobs)."""
        return (self.evaluated[-1] - self.evaluated[0]).total_seconds()

    @property
    def history(self) -> pd.Series:
        return self.demand[self.demand.index < self.evaluated[0]]


def demand_per_gpu(demand: pd.Series, peak_gpus: float | None = None, per_gpu: float | None = None) -> float:
    """Demand one GPU serves: given, or such that the trace's 99.9th percentile is `peak_gpus` GPUs."""
    if per_gpu is not None:
        return float(per_gpu)
    values = demand.to_numpy(float)
    top = float(np.nanquantile(values, 0.999)) if np.isfinite(values).any() else 0.0
    if not top > 0:  # a trace idle in over 99.9 % of its samples has bursts, but no percentile to scale
        some = int(np.sum(values > 0))
        raise ValueError(f"the demand trace's 99.9th percentile, which peak_gpus scales to GPUs, is 0 (only {some} of "
                         f"its {len(values)} samples are above 0): give per_gpu" if some else
                         "the demand trace has no positive value to scale to GPUs: give per_gpu")
    return top / float(peak_gpus if peak_gpus is not None else 100)


def default_spec(scenario: Scenario, per_gpu: float, **fields_) -> PolicySpec:
    """The policy a scenario runs when none is given: the defaults, on the scenario's trace and cluster."""
    name = scenario.name.split("/", 1)[1]
    base = {"query": f"demand of {name}", "capacity": {"demandPerGpu": per_gpu}, "mode": "active",
            "target": {"kind": "Deployment", "name": name}, "trainingClusterQueues": list(scenario.training_queues)}
    return PolicySpec.model_validate({**base, **fields_})


class SharedFits:
    """Forecasts shared by every simulation of one trace: the hourly history and the model's fit at a moment do
    not depend on what a sweep changes (quantiles, buffers, margins), and they are most of a simulation's time."""

    def __init__(self, make_forecaster: Callable[[], Forecaster]):
        self.make_forecaster = make_forecaster
        self.hourly: dict[tuple, pd.Series] = {}
        self.fits: dict[tuple, Forecaster] = {}

    def history(self, raw: pd.Series, statistic: str, now: pd.Timestamp, outlier_factor: float | None) -> pd.Series:
        key = (statistic, now.floor("h"), len(raw), raw.index[0] if len(raw) else None, outlier_factor)
        if key not in self.hourly:
            self.hourly[key] = hourly_history(raw, statistic, now, outlier_factor)
        return self.hourly[key]

    def model(self, hourly: pd.Series, zone: str) -> _Fitted:
        """The model fitted on `hourly` as controller.observe.issue's seasonal clock hands it over: on the wall-clock
        hours of `zone` (its fit is then a no-op)."""
        key = (zone, len(hourly), hourly.index[-1])
        if key not in self.fits:
            self.fits[key] = self.make_forecaster().fit(local_hours(hourly, zone))
        return _Fitted(self.fits[key])


class _Fitted:
    """A fit made once, whose `fit` is then a no-op (controller.observe.issue calls fit then predict)."""

    def __init__(self, model: Forecaster):
        self.model, self.name = model, model.name
        self.chosen = getattr(model, "chosen", None)

    def fit(self, history: pd.Series) -> _Fitted:
        return self

    def predict(self, horizon: int, quantiles) -> pd.DataFrame:
        return self.model.predict(horizon, quantiles)


@dataclass(frozen=True)
class SimResult:
    policy: dict                      # the spec it ran (tuned values filled in)
    reference: str                    # forecast | static | reactive | seasonal-naive | oracle | hourly-oracle
    utilization: float                # (inference demand served + training GPU-time) / capacity GPU-time
    shortage_within_cluster: float    # unmet demand within the cluster / demand GPU-time
    short_steps: float                # share of steps with any unmet demand within the cluster
    # their standard errors from day to day (leave-one-day-out jackknife): how much a figure measured on these days
    # may differ on others; None with under two days, which cannot tell it (0 would claim certainty)
    shortage_within_cluster_se: float | None
    short_steps_se: float | None
    longest_shortage_minutes: float
    objective_met: bool               # both parts of the policy's objective
    inference_shortage: float         # unmet demand, above the cluster included / demand GPU-time
    shortage_over_capacity: float     # demand above the cluster (no policy can serve it) / demand GPU-time
    shortage_hours: int               # hours with any unmet demand within the cluster
    shortage_hours_share: float       # ...as a share of the evaluated hours
    mean_reserved_gpus: float
    training_gpu_hours: float
    training_goodput: float
    preemptions: int
    planned_preemptions: int          # stopped at a checkpoint ahead of a known ramp-up, or for the band
    reclaim_p99_seconds: float
    headroom_violations: int          # steps where demand inside the band planned before it lacked GPUs idle or
                                      # preemptible within the reclaim deadline
    cost_vs_dedicated: float
    forecast_fallback_hours: int
    warm_buffer: float                # the policy's warmBuffer: the least factor; the last week's rises may ask more
    mean_warm_buffer_gpus: float      # the warm buffer's GPUs the plan held above the recent peak, on the mean step
    steps: int
    sim_seconds: float                # the step loop, refits apart
    refit_seconds: float

    def to_json(self) -> str:
        return json.dumps({f.name: getattr(self, f.name) for f in fields(SimResult)}, sort_keys=True)


@dataclass(frozen=True)
class TimedResult(SimResult):
    timeline: pd.DataFrame | None = None   # TIMELINE_COLUMNS, one row per step and workload
    detail: pd.DataFrame | None = None     # per step: inference/training/idle/unmet GPUs, forecast band
    events: pd.DataFrame | None = None     # one row per preemption: time, gpus, kind


def timeline_frame(rows) -> pd.DataFrame:
    """Timeline rows, as the simulator and the reconciler record them (TIMELINE_COLUMNS, headroom_gpus the preemption
    headroom the plan asks for the workload), as the timeline states them: headroom_gpus is the band the plan keeps,
    that ask up to the GPUs lent. The ask can be more than the cluster holds (the headroom quantile's GPUs above the
    hour's reservation, up to maxGpus, unbounded by the cluster: the policy's status and HeadroomAtRisk compare it with
    what can be reclaimed); GPUs not lent are reserved, nothing to reclaim, so the band, as the planner's
    (StepPlan.headroom_gpus), is at most the lent GPUs, and reserved + headroom never exceeds the cluster."""
    frame = pd.DataFrame(rows, columns=list(TIMELINE_COLUMNS))
    frame["headroom_gpus"] = np.minimum(frame["headroom_gpus"], frame["lent_gpus"])
    return frame


def timeline_csv(rows, header: bool = True) -> str:
    """The timeline (rows of TIMELINE_COLUMNS, or its timeline_frame) as CSV: ISO timestamps, numbers written exactly,
    so `simulate --timeline` and `run --timeline` files compare byte for byte (run writes it a step at a time: each
    value is written alone, so the rows read the same in any chunks)."""
    frame = rows.copy() if isinstance(rows, pd.DataFrame) else timeline_frame(rows)
    frame["timestamp"] = pd.DatetimeIndex(frame["timestamp"]).strftime("%Y-%m-%dT%H:%M:%SZ")
    return frame.to_csv(index=False, header=header, float_format="%.12g")


def write_timeline(rows, path) -> str:
    """The timeline as one CSV file, whole or not at all."""
    replace_whole(path, lambda draft: draft.write_text(timeline_csv(rows), encoding="utf-8"))
    return str(path)


def objective_met(spec: PolicySpec, shortage: float, short_steps: float) -> bool:
    return shortage <= spec.objective.max_shortage + 1e-12 and short_steps <= spec.objective.max_short_steps + 1e-12


def trace_jobs(jobs: pd.DataFrame, span_seconds: float, capacity: int,
               notes: list[str] | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The job trace's last `span_seconds` (up to its newest creation_time; the times on any one clock) as arrivals
    on a `capacity`-GPU cluster: (gpus, work seconds, arrival offset seconds), by arrival. A replay's span is from its
    first step to its last: the trace's newest creation_time is the replay's last step.

    A job's work is the time it ran in the trace, scheduled_time to deletion_time (its queueing before is not work);
    one already running or queued at the window's start arrives at its start with the work left. Left out: pods of 0
    GPUs, pods never scheduled (no run to replay: a blank scheduled_time), jobs larger than the cluster (Kueue never
    admits them; shrunk they would be other jobs) and jobs created at the window's end (they arrive as it ends).
    `notes` is told what was left out, and where the trace is shorter than the span. ValueError when no job is left
    to arrive."""
    end = float(jobs["creation_time"].max())
    window0 = end - span_seconds
    in_window = (jobs["deletion_time"] > window0) & (jobs["num_gpu"] >= 1)
    never_ran = in_window & jobs["scheduled_time"].isna()
    too_big = in_window & ~never_ran & (jobs["num_gpu"] > capacity)
    j = jobs[in_window & ~never_ran & ~too_big]
    arrival = np.maximum(j["creation_time"].to_numpy(float) - window0, 0.0)
    work = j["deletion_time"].to_numpy(float) - np.maximum(j["scheduled_time"].to_numpy(float), window0)
    # a job created at the window's end (the newest creation_time) arrives as the replay ends: nothing of it replays
    at_end = arrival >= span_seconds
    keep = (work > 0) & ~at_end
    gpus = j["num_gpu"].to_numpy(np.int64)
    if notes is not None:
        if never_ran.any():
            notes.append(f"{int(never_ran.sum())} pod(s) of the window never scheduled (blank scheduled_time): left "
                         "out, they ran no work to replay")
        if too_big.any():
            notes.append(f"{int(too_big.sum())} job(s) of more than {capacity} GPUs (up to "
                         f"{int(jobs.loc[too_big, 'num_gpu'].max())}) can never be admitted on the {capacity}-GPU "
                         "cluster: left out")
        covered = end - float(jobs["creation_time"].min())
        if covered < span_seconds:
            notes.append(f"the trace's jobs are created over {_span(covered)}, less than the replay's "
                         f"{_span(span_seconds)} (its first step to its last): the first arrives "
                         f"{_span(span_seconds - covered)} in, with no training before")
    if not keep.any():  # a trace with no scheduled_time at all reads as pods that never ran: say so
        unscheduled = f" ({int(never_ran.sum())} pod(s) there were never scheduled: a blank scheduled_time)" \
            if never_ran.any() else ""
        ending = int((at_end & (work > 0)).sum())
        last = f" before its newest creation_time {end:g}, where the window ends and the replay with it (the " \
            f"{ending} job(s) created then arrive as it ends)" if ending else ""
        raise ValueError(f"no job of 1 to {capacity} GPUs ran in the trace's last {_span(span_seconds)}"
                         f"{last}{unscheduled}")
    order = np.argsort(arrival[keep], kind="stable")
    return gpus[keep][order], work[keep][order], arrival[keep][order]


def _span(seconds: float) -> str:
    """A span of the job trace as headroom writes durations (23h55m), to the second: a `--hours` replay is not days."""
    return go_duration(round(seconds))


class _Future:
    """The references' forecasts: what they know of the future at each refit. Past the trace's end, which no figure
    charges but a reservation's lead time reaches into at its last steps, they hold its last level: a reference
    never falls back to the planner's conservative reservation."""

    def __init__(self, scenario: Scenario, kind: str, level: float = 1.0):
        s = scenario.demand.ffill().fillna(0.0)
        self.kind, self.level = kind, level
        self.step = scenario.step_seconds
        self.times = epoch_seconds(s.index)
        self.values = s.to_numpy(float)
        if kind == "hourly-oracle":  # per clock hour, the level-quantile of the demand of its intervals
            ends = pd.Series(self.values, index=s.index - pd.Timedelta(seconds=self.step))
            self.hourly = ends.groupby(ends.index.floor("h")).quantile(level, interpolation="higher")

    def forecast(self, now: pd.Timestamp, horizon_hours: int, name: str, generation: int) -> IssuedForecast:
        if self.kind == "oracle":  # period [p, p + step) serves the interval ending at p + step
            starts = pd.date_range(now.floor("h"), periods=int(horizon_hours * 3600 / self.step), freq=f"{self.step}s")
            k = np.searchsorted(self.times, epoch_seconds(starts) + self.step)
            values = self.values[np.minimum(k, len(self.values) - 1)]
        else:
            starts = pd.date_range(now.floor("h"), periods=horizon_hours, freq="h")
            values = self.hourly.reindex(starts, method="ffill").to_numpy(float)
        frame = pd.DataFrame({q: values for q in (0.1, 0.5, 0.9, 0.99)}, index=starts)
        model = f"{self.kind}" + (f" q{self.level:g}" if self.kind == "hourly-oracle" else "")
        return IssuedForecast(frame, now, model, generation, float("nan"))


def reference_spec(spec: PolicySpec, reference: str, scenario: Scenario) -> PolicySpec:
    """A reference's policy: no buffer, no scale-in delay, no margin; the oracle raises each step's reservation
    early enough for preempted GPUs to warm up, the hourly oracle one step early."""
    w = scenario.world
    lead = scenario.step_seconds if reference == "hourly-oracle" else \
        math.ceil((w.warmup_seconds + w.preemption_seconds[1]) / scenario.step_seconds) * scenario.step_seconds
    return spec.model_copy(update={"warm_buffer": 0.0, "warm_buffer_quantile": 0.0, "scale_in_delay": "0s",
                                   "margin_gpus": 0, "lead_time": f"{lead:g}s", "target_quantile": 0.9,
                                   "headroom_quantile": 0.99})


def simulate(scenario: Scenario, spec: PolicySpec, make_forecaster: Callable[[], Forecaster] | SharedFits | None = None,
             reference: str = "forecast", timeline: bool = False, detail: bool = False,
             progress: Callable[[int, int], None] | None = None) -> SimResult:
    """Replay `scenario` under `spec` (or a reference). With timeline=True a TimedResult with the per-step
    timeline (and, detail=True, what the plots need)."""
    if reference not in POLICIES:
        raise ValueError(f"unknown policy {reference!r}; one of {', '.join(POLICIES)}")
    if reference == "hourly-oracle":
        return _hourly_oracle(scenario, spec, timeline, detail, progress)
    future = _Future(scenario, "oracle") if reference == "oracle" else None
    if future is not None:
        spec = reference_spec(spec, reference, scenario)
    elif reference != "forecast":
        spec = spec.model_copy(update={"forecaster": FORECASTER[reference], "warm_buffer_quantile": 0.0})
    return _run(scenario, spec, make_forecaster, reference, future, timeline, detail, progress)


def _hourly_oracle(scenario, spec, timeline, detail, progress) -> SimResult:
    ref = reference_spec(spec, "hourly-oracle", scenario)
    for level in HOURLY_ORACLE_LEVELS:  # the least level meeting the objective, in hindsight
        result = _run(scenario, ref, None, "hourly-oracle", _Future(scenario, "hourly-oracle", level), timeline, detail,
                      progress)
        if result.objective_met:
            break
    return result


def _forecaster(spec: PolicySpec, make_forecaster) -> Callable[[], Forecaster] | SharedFits:
    if spec.forecaster != "auto":
        return BASELINES[spec.forecaster]
    return make_forecaster if make_forecaster is not None else default_forecaster


def _run(scenario: Scenario, spec: PolicySpec, make_forecaster, reference: str, future: _Future | None,
         timeline: bool, detail: bool, progress) -> SimResult:
    data, demand = scenario.data, scenario.demand
    evaluated = scenario.evaluated
    step = scenario.step_seconds
    if len(evaluated) < 2:
        raise ValueError("fewer than two evaluated steps: give more days or a finer trace")
    namespace, name = scenario.name.split("/", 1)
    key = scenario.name
    world = EmbeddedCluster(scenario.gpus, [manifest(name, namespace, spec)], {key: demand},
                            start=evaluated[0].timestamp(), settings=scenario.world,
                            jobs=scenario.jobs)
    wp = WorkloadPolicy.from_spec(key, spec)
    weights = queue_weights(spec.training_cluster_queues, dict(scenario.team_weights))
    policy = ClusterPolicy(scenario.gpus, (wp,), weights, scenario.non_lendable_gpus, data.horizon_hours,
                           data.keep_forecast_seconds)
    target = PolicyTarget(key, ObjectRef(API_VERSION, KIND, name, namespace), spec.target.ref(namespace),
                          spec.capacity.gpus_per_replica, spec.mode == "active", spec.inference_cluster_queue,
                          tuple(spec.training_cluster_queues))
    fits = None if future is not None else _forecaster(spec, make_forecaster)
    started = time.perf_counter()
    times_all = epoch_seconds(demand.index)
    values_all = demand.to_numpy(float)
    real = np.isfinite(values_all)
    # per sample, as Python lists (the loop reads single items, which numpy makes slow): the newest real sample at
    # each index, the missing samples before each index, the world's demand (a gap as last seen)
    newest_real = pd.Series(np.where(real, times_all, np.nan)).ffill().tolist()
    missing = np.concatenate([[0], np.cumsum(~real)]).tolist()
    filled = world.demand[key][1]
    rows: list[tuple] = []
    extra: list[tuple] = []
    events: list[tuple] = []
    cached: IssuedForecast | None = None  # the forecast in force
    cached_ns = None                      # its made_at's ns (usable without a Timestamp per step)
    cached_forecast: Forecast | None = None  # ...as the planner reads it, converted once when it is made
    hours: HourPlan | None = None
    hours_key: tuple | None = None
    refit_seconds = loop_seconds = 0.0
    fallback_hours: set[int] = set()
    violations = 0
    band_before = math.inf  # the band (reservation + headroom) the plan held before the step's newest sample
    buffer_gpu_steps = 0  # the warm buffer the plan held, summed over the steps
    deadline = wp.reclaim_deadline_seconds
    keep_seconds = data.keep_forecast_seconds
    # each step's time, clock hour (now.floor("h")) and ns, and where its lookback and its last hour start in the
    # trace, all at once: the loop does no pandas and no search per step
    clock_ns = evaluated.as_unit("ns").asi8.tolist()
    step_times = [round(ns / 10**9, 6) for ns in clock_ns]  # each step's Timestamp.timestamp(), exactly
    stamps = list(evaluated) if timeline else None  # a Timestamp per step only when the rows need one

    def moment(k: int) -> pd.Timestamp:
        return stamps[k] if stamps is not None else evaluated[k]

    at = np.array(step_times)
    his = times_all.searchsorted(at, side="right").tolist()
    los = times_all.searchsorted(at - data.lookback_seconds, side="right").tolist()
    last_hours = times_all.searchsorted(at - 3600, side="right").tolist()
    clock_hours = evaluated.floor("h").as_unit("ns").asi8.tolist()
    newests = [newest_real[hi - 1] if hi else math.nan for hi in his]
    reasons = [_degraded(newest, times_all, missing, lo, hi, max(h0, lo), t, data.stale_after_seconds)
               for newest, lo, hi, h0, t in zip(newests, los, his, last_hours, step_times)]
    made: dict[int, tuple[IssuedForecast, Forecast]] = {}  # step -> the forecast made there, as the planner reads it
    last: IssuedForecast | None = None  # the newest forecast made, and its clock hour
    last_hour = 0
    day = max(int(86400 // step), 1)

    def refit_day(k0: int) -> None:
        """The forecasts made over the day of steps from k0, before they run (a forecast depends on the trace alone;
        the steps run faster on caches a fit has not just flushed)."""
        nonlocal last, last_hour
        for k in range(k0, min(k0 + day, len(step_times))):
            # observe.due(last, now, 0): refitted once an hour
            if reasons[k] is None and (last is None or last_hour < clock_hours[k] or last.generation != 0):
                fresh = _refit(fits, future, demand.iloc[los[k]:his[k]], spec, moment(k), data)
                if fresh is not None:
                    last, last_hour = fresh, clock_hours[k]
                    made[k] = fresh, Forecast.of(fresh.frame, spec.target_quantile, spec.headroom_quantile)

    for k, t_now in enumerate(step_times):
        if k % day == 0:
            t0 = time.perf_counter()
            refit_day(k)
            refit_seconds += time.perf_counter() - t0
        unmet_before = world.accounting.unmet_within.get(key, 0.0) if detail else 0.0
        if k:
            world.advance(t_now)
        hi, lo = his[k], los[k]
        newest, reason, hour = newests[k], reasons[k], clock_hours[k]
        if k in made:
            (cached, cached_forecast), cached_ns = made.pop(k), clock_ns[k]
        # observe.usable: none once older than keep_forecast_seconds (made_at is the step it was made at)
        fc = cached if cached is not None and not (clock_ns[k] - cached_ns) / 1e9 > keep_seconds else None
        forecast = None if fc is None else cached_forecast
        seen_newest = newest if reason is None or not reason.startswith("NoData") else None
        old = stale(seen_newest, t_now, policy)
        if hours is None or hours_key != (hour, id(fc), old):  # as the reconciler keeps it
            hours = plan_hours({key: forecast}, {key: History(seen_newest, times_all[lo:hi], values_all[lo:hi], t_now)},
                               policy, moment(k))
            hours_key = (hour, id(fc), old)
        inf = world.inference[key]
        observed = Observed(times_all[lo:hi], values_all[lo:hi], inf.desired * inf.gpus_per_replica, reason is not None)
        training = world.training()
        plan = plan_step(hours, {key: observed}, training, policy, t_now)
        state = world.target_state(target.target, target.gpus_per_replica)
        warm = state.ready_replicas * target.gpus_per_replica
        view = View({key: state}, world.quotas, training, {},
                    tuple(Stopped(w, None, q) for w, q in world.stopped_by_plan()))
        due_now = plan.due()
        actions = cluster_actions(plan, view, [target], _plan_id(plan) if due_now else "")
        ws = plan.workloads[0]
        if not ws.from_forecast:
            fallback_hours.add(int(t_now // 3600))
        buffer_gpu_steps += ws.buffer_gpus
        # the demand of the interval ending now, as the world accounts it (world.demand_at): the timeline's too
        demand_gpus = (filled[hi - 1] if hi else 0.0) / wp.demand_per_gpu
        need = min(demand_gpus, scenario.gpus)
        if need > warm + 1e-9 and need <= min(band_before, ws.reserved_gpus + ws.headroom_gpus):
            # inside the band planned before this demand was seen, what inference lacks must come from idle GPUs or
            # training preemptible in time (demand above it is a forecast miss, counted as shortage: the plan now
            # made reserves for it at once, and no guarantee covers GPUs nobody planned for)
            if math.ceil(need - warm - 1e-9) > max(world.idle_gpus, 0) + world.fast_preemptible_gpus(deadline):
                violations += 1
        band_before = ws.reserved_gpus + ws.headroom_gpus
        # in the reconciler's order: each write is a Kueue event in the world, another order admits other Workloads
        applied = [a for kind in in_write_order(actions, view.quotas) for a in kind if apply(a, world)]
        for a in applied:
            if isinstance(a, Evict):
                events.append((moment(k), a.gpus, a.kind))
                world.accounting.preemptions[a.kind] = world.accounting.preemptions.get(a.kind, 0) + 1
        if timeline:  # the demand the figures charge; blank where the controller sees no sample in its lookback
            now = moment(k)
            rows.append((now, key, demand_gpus if seen_newest is not None else math.nan, ws.reserved_gpus, warm,
                         ws.headroom_gpus, plan.lent_gpus, evicted_gpus(applied, key)))
            if detail:
                unmet = (world.accounting.unmet_within.get(key, 0.0) - unmet_before) / step  # the step just accounted
                extra.append((now, inf.held_replicas * inf.gpus_per_replica, world.training_gpus, world.idle_gpus,
                              unmet, _band(forecast, now, wp)))
        world.admit()
        if progress is not None and (k % 288 == 0 or k == len(evaluated) - 1):
            progress(k + 1, len(evaluated))
    loop_seconds = time.perf_counter() - started - refit_seconds
    return _result(scenario, spec, reference, world, len(evaluated), step, rows, extra, events, timeline, detail,
                   violations, len(fallback_hours), buffer_gpu_steps, loop_seconds, refit_seconds)


def _degraded(newest: float, times: np.ndarray, missing: list[int], lo: int, hi: int, h0: int, now: float,
              stale_after: float) -> str | None:
    """controller.observe.degraded_reason for the window [lo, hi), whose last hour starts at h0, from prefix counts:
    O(1) a step."""
    in_window = hi > lo and math.isfinite(newest) and newest >= times[lo]
    return degraded_reason(float(newest) if in_window else None, hi - h0, missing[hi] - missing[h0], now, stale_after)


def _refit(fits, future: _Future | None, raw: pd.Series, spec: PolicySpec, now: pd.Timestamp,
           data: DataSettings) -> IssuedForecast | None:
    if future is not None:
        return future.forecast(now, data.horizon_hours, spec.target.name, 0)
    hourly = fits.history(raw, spec.statistic, now, data.outlier_factor) if isinstance(fits, SharedFits) else \
        hourly_history(raw, spec.statistic, now, data.outlier_factor)
    if hourly.notna().sum() < MIN_FIT_HOURS:
        return None
    model = fits.model(hourly, spec.timezone) if isinstance(fits, SharedFits) else fits()
    try:
        return issue(model, spec.forecaster, hourly, now, spec, 0, data.horizon_hours)
    except (ValueError, ArithmeticError, RuntimeError) as exc:
        raise_interrupt_inside(exc)  # Ctrl-C that numpy reported as its own error stops the replay
        return None  # a model that cannot fit: the planner falls back, as the controller's does


def _band(f: Forecast | None, now: pd.Timestamp, wp: WorkloadPolicy) -> tuple[float, float]:
    if f is None:
        return (np.nan, np.nan)
    i = int(np.clip(np.searchsorted(f.starts, now.timestamp(), side="right") - 1, 0, len(f.starts) - 1))
    return (f.target[i] / wp.demand_per_gpu, f.high[i] / wp.demand_per_gpu)


def _plan_id(plan) -> str:
    text = repr((plan.now, [(w.name, w.reserved_gpus) for w in plan.workloads], [(p.job, p.kind) for p in plan.due()]))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def day_to_day_errors(days: Mapping[int, Sequence[float]]) -> tuple[float, float] | tuple[None, None]:
    """Standard errors of the shortage share (unmet / demand) and the short-step share from per-day sums [demand,
    unmet, short steps, steps]: the leave-one-day-out jackknife, since a day's steps are not independent draws
    (shortages come in bursts) while whole days nearly are. None under two days: one day says nothing of the next.

    Each day weighs as its share `w` of the steps (the jackknife for groups of unequal size), so a part-day (a replay
    starting or ending off midnight) counts as the part of a day it is: the plain formula counted it as a whole day,
    and beside whole days a part-day of a tenth of one or less made the variance a quarter to a third too large (steps
    short at random). With whole days (w = 1/n) it is the plain (n - 1) / n * sum((left_out - mean)^2)."""
    sums = np.array(list(days.values()), dtype=float).reshape(-1, 4)
    n = len(sums)
    if n < 2:
        return None, None
    rest = sums.sum(axis=0) - sums  # each row: every day but one
    with np.errstate(invalid="ignore", divide="ignore"):
        shares = np.stack([np.where(rest[:, 0] > 0, rest[:, 1] / rest[:, 0], 0.0), rest[:, 2] / rest[:, 3]], axis=1)
    weight = (1 - sums[:, 3] / sums[:, 3].sum())[:, None]  # 1 - w: how much of the replay is left without the day
    centre = (weight * shares).sum(axis=0) / (n - 1)
    whole_days = 1 / ((1 - weight) ** 2).sum()  # the days the replay is worth: n when all are whole
    shortage, steps = np.sqrt(whole_days / (whole_days - 1) * ((weight * (shares - centre)) ** 2).sum(axis=0))
    return float(shortage), float(steps)


def _result(scenario, spec, reference, world, steps, step, rows, extra, events, timeline, detail, violations,
            fallback_hours, buffer_gpu_steps, loop_seconds, refit_seconds) -> SimResult:
    a = world.accounting
    key = scenario.name
    demand_s = max(a.demand.get(key, 0.0), 1e-12)
    within = a.unmet_within.get(key, 0.0) / demand_s
    over = max(a.demand.get(key, 0.0) - a.within.get(key, 0.0), 0.0) / demand_s
    short = a.short_steps.get(key, 0) / max(a.steps, 1)
    # a day-to-day error takes two days replayed: under them (a day, or one cut in two by midnight) it is unknown
    shortage_se, short_steps_se = day_to_day_errors(a.days.get(key, {})) if steps * step >= 2 * 86400 else (None, None)
    lost = a.training_lost
    capacity_s = scenario.gpus * max(a.seconds, 1e-12)
    # a dedicated inference cluster that does the same work: as large as the replayed days' peak (the history's
    # understated it wherever demand grew, a shared cluster then looking dearer than one that could not serve them),
    # and no larger than the shared cluster, which serves no demand above it either
    replayed = scenario.demand[scenario.evaluated].to_numpy(float)
    peak_gpus = math.ceil(np.nanmax(replayed) / spec.capacity.demand_per_gpu) if np.isfinite(replayed).any() else 0
    static_need = min(peak_gpus, scenario.gpus)
    span_h = max(a.seconds, 1e-12) / 3600
    metrics = dict(
        policy=json.loads(json.dumps(spec.model_dump(mode="json", by_alias=True, exclude_none=True))),
        reference=reference,
        utilization=(a.served.get(key, 0.0) + a.training_alloc) / capacity_s,
        shortage_within_cluster=within, short_steps=short,
        shortage_within_cluster_se=shortage_se, short_steps_se=short_steps_se,
        longest_shortage_minutes=a.longest_short.get(key, 0) * step / 60,
        objective_met=objective_met(spec, within, short),
        inference_shortage=within + over, shortage_over_capacity=over,
        shortage_hours=len(a.short_hours.get(key, ())),
        shortage_hours_share=0.0, mean_reserved_gpus=a.inference_held / max(a.seconds, 1e-12),
        training_gpu_hours=a.training_alloc / 3600,
        training_goodput=(a.training_alloc - lost) / a.training_alloc if a.training_alloc else 1.0,
        preemptions=sum(a.preemptions.values()), planned_preemptions=a.preemptions.get("planned", 0),
        reclaim_p99_seconds=float(np.quantile(a.reclaim_seconds, 0.99)) if a.reclaim_seconds else 0.0,
        headroom_violations=violations,
        cost_vs_dedicated=scenario.gpus / max(static_need + a.training_alloc / 3600 / span_h, 1e-12),
        forecast_fallback_hours=fallback_hours, warm_buffer=spec.warm_buffer,
        mean_warm_buffer_gpus=buffer_gpu_steps / max(steps, 1), steps=steps,
        sim_seconds=loop_seconds, refit_seconds=refit_seconds)
    # over the clock hours the intervals fall in, as shortage_hours counts them (a span of 0.3 days at a 10-minute
    # step touches 8 hours: over ceil(7.2), every hour short was a share of 8/7)
    metrics["shortage_hours_share"] = metrics["shortage_hours"] / max(len(a.hours), 1)
    if not timeline:
        return SimResult(**metrics)
    frame = timeline_frame(rows)
    more = None
    if detail:
        more = pd.DataFrame([(t, i, tr, idle, unmet, band[0], band[1]) for t, i, tr, idle, unmet, band in extra],
                            columns=["timestamp", "inference_gpus", "training_gpus", "idle_gpus", "unmet_gpus",
                                     "target_gpus", "high_gpus"]).set_index("timestamp")
    ev = pd.DataFrame(events, columns=["time", "gpus", "kind"])
    return TimedResult(**metrics, timeline=frame, detail=more, events=ev)


