"""One reconcile of the controller: demand in, plan, act on the cluster, publish what it did.

One reconcile, at a `now` the caller passes in:
  1. read the ReservationPolicies; an invalid one gets its status and a Warning
     event, and takes no part in the plan (it cannot break the others);
  2. per policy: read demand (Prometheus or a file), refit the forecast once per
     hour (the MLflow champion's model, else automatic selection), record it in
     the forecast log; on a failed read keep the last good forecast for a bounded
     time, then let the planner fall back to a conservative reservation;
  3. snapshot the training workloads of the policies' ClusterQueues and plan all
     workloads at once (planning.planner, pure);
  4. act, for `active` policies only: the inference reservation (Deployment
     replicas, HPA minReplicas or ClusterQueue quota), the training queues'
     quota (the slack), and the preemptions due now -- each re-validated by
     planning again on a fresh snapshot just before the eviction;
  5. write status and events, realized forecast error (and drift) to MLflow,
     and publish a ControllerState for /metrics.
Data missing never lowers the reservation in force: while degraded, the
reservation only goes up. Every write is idempotent (read, compare, write), so a
restart in the middle of a reconcile does not preempt twice.
"""
from __future__ import annotations

import hashlib
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import pandas as pd

from controller.demand import DemandReader
from controller.forecasts import CachedForecast, Models
from controller.state import ERROR_STAGES, RECONCILE_BUCKETS, ControllerState, PolicyState, StateHolder, TeamState
from core.cluster import Cluster
from core.errors import ClusterError, ConfigError
from core.objects import Condition, ObjectRef, PolicyStatus, WorkloadInfo
from core.settings import PolicySpec, RunConfig, duration, parse_policy_spec
from forecast.history import HistoryError, prepare
from forecast.metrics import seasonal_scale
from adapters.prometheus import PrometheusError
from planning.planner import Observation, Plan, Policy, RunningJob, Snapshot, WorkloadPolicy, plan
from planning.queue import Job, TeamQuota
from training.realized import HORIZONS, log_realized, realized_errors

log = logging.getLogger(__name__)

UNANNOTATED_PREEMPTION_SECONDS = 600.0  # a job that does not say how fast it stops is assumed slow
EXTRA_QUANTILES = (0.1, 0.5, 0.9)        # always forecast: realized error and the 80% interval need them
STATUS_HOURS = 6                         # hours ahead shown in a policy's status
READ_OVERLAP = pd.Timedelta(minutes=15)  # re-read this much before the newest sample: late samples fill in
FORECAST_LOG_KEPT = pd.Timedelta(days=7)  # issued forecasts kept on disk (realized error needs the last day or two)


# --------------------------------------------------------------------------- policies
@dataclass(frozen=True)
class PolicyObject:
    """A ReservationPolicy as read from the cluster, its spec validated."""
    ref: ObjectRef
    generation: int
    spec: PolicySpec
    status: Mapping

    @property
    def key(self) -> str:
        return _ref_key(self.ref)

    @property
    def series(self) -> str:  # its forecast series in MLflow and the forecast log
        return f"{self.ref.namespace}.{self.ref.name}"

    @property
    def active(self) -> bool:
        return self.spec.mode == "active"


def parse_policies(objects: list[dict]) -> tuple[list[PolicyObject], dict[ObjectRef, str]]:
    """Valid policies, and the invalid ones with every error (field paths) in one message."""
    valid, invalid = [], {}
    for obj in objects:
        obj = {"apiVersion": "headroom.dev/v1alpha1", "kind": "ReservationPolicy", **obj}
        ref = ObjectRef.of(obj)
        try:
            spec = parse_policy_spec(obj.get("spec"), f"ReservationPolicy {ref.namespace}/{ref.name}")
        except ConfigError as exc:
            invalid[ref] = "; ".join(exc.errors)
            continue
        valid.append(PolicyObject(ref, int(obj["metadata"].get("generation", 0) or 0), spec, obj.get("status") or {}))
    return valid, invalid


# --------------------------------------------------------------------------- the reconciler
@dataclass
class _PolicyRun:
    """One policy's inputs to this reconcile."""
    policy: PolicyObject
    observation: Observation
    forecast: CachedForecast | None
    hourly: pd.Series           # complete hours (mean statistic of the spec) for realized error
    degraded: str | None        # why the demand data is not trustworthy, if it is not


def _shares(total: int, weights: Mapping[str, float]) -> dict[str, int]:
    """Split `total` GPUs by weight, whole GPUs, largest remainders first."""
    if not weights:
        return {}
    s = sum(weights.values())
    exact = {k: total * w / s for k, w in weights.items()}
    out = {k: int(math.floor(v)) for k, v in exact.items()}
    for k in sorted(exact, key=lambda k: (out[k] - exact[k], k))[: total - sum(out.values())]:
        out[k] += 1
    return out


def _utc(moment) -> pd.Timestamp:
    """A timestamp in UTC; one without a zone is taken as UTC."""
    moment = pd.Timestamp(moment)
    return moment.tz_convert("UTC") if moment.tzinfo else moment.tz_localize("UTC")


def _ref_key(ref: ObjectRef) -> str:
    return f"{ref.namespace}/{ref.name}"


def _job(w: WorkloadInfo, queue: str) -> Job:
    return Job(id=f"{w.namespace}/{w.name}", team=queue, gpus=w.gpus, duration_seconds=math.inf, priority=w.priority,
               submitted_at=w.creation.timestamp() if w.creation else 0.0,
               checkpoint_interval_seconds=w.checkpoint_interval_seconds or 1800.0,
               preemption_seconds=w.preemption_seconds if w.preemption_seconds is not None
               else UNANNOTATED_PREEMPTION_SECONDS)


class Reconciler:
    def __init__(self, cluster: Cluster, demand: DemandReader, cfg: RunConfig, holder: StateHolder | None = None,
                 models: Models | None = None, forecast_log=None, tracker=None,
                 retrain: Callable[[str, pd.Series, pd.Timestamp], None] | None = None,
                 drift_factor: float = 1.5, drift_window: int = 24):
        self.cluster, self.demand, self.cfg = cluster, demand, cfg
        self.holder = holder or StateHolder()
        self.models = models or Models()
        self.forecast_log, self.tracker, self.retrain = forecast_log, tracker, retrain
        self.drift_factor, self.drift_window = drift_factor, drift_window
        self._forecasts: dict[str, CachedForecast] = {}
        self._raw: dict[str, pd.Series] = {}
        self._full_read: dict[str, pd.Timestamp] = {}
        self._invalid_reported: dict[ObjectRef, str] = {}
        self._last_trained: dict[str, pd.Timestamp] = {}
        self._accuracy: dict[str, tuple[pd.Timestamp, dict, dict]] = {}
        self._preemptions: dict[str, int] = {}
        self._lost: dict[str, float] = {}
        self._errors: dict[str, int] = {}
        self._team_seconds: dict[str, tuple[float, float, int]] = {}
        self._buckets = [0] * len(RECONCILE_BUCKETS)
        self._sum, self._total = 0.0, 0
        self._last_now: pd.Timestamp | None = None

    # -- bookkeeping
    def _error(self, stage: str, what: str, exc: Exception) -> None:
        assert stage in ERROR_STAGES, stage
        self._errors[stage] = self._errors.get(stage, 0) + 1
        log.warning("%s: %s: %s", stage, what, exc)

    def _event(self, about: ObjectRef, reason: str, message: str, type: str = "Normal") -> None:
        try:
            self.cluster.emit_event(about, reason, message, type=type)
        except ClusterError as exc:
            self._error("events", f"{about.kind} {about.name}", exc)

    # -- 2. demand and forecast
    def _observe(self, p: PolicyObject, now: pd.Timestamp) -> _PolicyRun:
        lookback = duration(self.cfg.prometheus.lookback if self.cfg.prometheus else "28d")
        degraded = None
        try:
            raw = self._read(p, now, lookback)
            if raw.notna().any():
                self._raw[p.key] = raw
            else:
                degraded = "NoData: the query returned no samples"
        except (PrometheusError, HistoryError, OSError) as exc:
            self._error("demand", p.key, exc)
            degraded = f"DemandUnavailable: {exc}"
        raw = self._raw.get(p.key, pd.Series(dtype=float, index=pd.DatetimeIndex([], tz="UTC")))
        seen = raw.dropna()
        if degraded is None and (seen.empty or now - seen.index[-1] > pd.Timedelta(seconds=self.cfg.stale_after_seconds)):
            degraded = f"StaleData: newest sample {seen.index[-1] if len(seen) else 'none'}"
        last_hour = raw[raw.index > now - pd.Timedelta(hours=1)]
        if degraded is None and len(last_hour) and last_hour.isna().mean() > 0.5:
            degraded = f"PartialData: {last_hour.isna().mean():.0%} of the last hour's samples are missing"
        fresh = degraded is None
        hourly = prepare(raw, step="1h", statistic=p.spec.statistic)[0] if len(seen) else raw.iloc[:0]
        hourly = hourly[hourly.index < now.floor("h")]
        cached = self._forecasts.get(p.key)
        stale_cache = (cached is None or cached.made_at.floor("h") < now.floor("h") or cached.generation != p.generation)
        if fresh and stale_cache and hourly.notna().sum() >= 48:
            try:
                model, name = self.models.for_series(p.series)
                quantiles = sorted({*EXTRA_QUANTILES, p.spec.target_quantile, p.spec.headroom_quantile})
                missing = int((now.floor("h") - hourly.index[-1]) / pd.Timedelta(hours=1)) - 1
                frame = model.fit(hourly).predict(self.cfg.horizon_hours + max(missing, 0), quantiles)
                if getattr(model, "chosen", None):  # automatic selection says what it picked
                    name = f"{name}: {model.chosen}"
                cached = CachedForecast(frame, now, name, p.generation, float(seasonal_scale(hourly.to_numpy())))
                self._forecasts[p.key] = cached
                if self.forecast_log is not None:
                    self.forecast_log.record(p.series, now, frame)
            except (ValueError, ArithmeticError, RuntimeError) as exc:  # a model that cannot fit: fall back
                self._error("forecast", p.key, exc)
                degraded = f"ForecastFailed: {exc}"
        if cached is not None and (now - cached.made_at).total_seconds() > self.cfg.keep_forecast_seconds:
            cached = None  # too old to trust: the planner falls back to the conservative reservation
        current = float(seen.iloc[-1]) if fresh else float("nan")
        return _PolicyRun(p, Observation(current, raw), cached, hourly, degraded)

    def _read(self, p: PolicyObject, now: pd.Timestamp, lookback: pd.Timedelta) -> pd.Series:
        """The whole lookback once an hour (when the forecast is refitted); in between only the samples
        since the newest one held, so a reconcile a minute does not re-read weeks of history."""
        held = self._raw.get(p.key)
        if held is None or self._full_read.get(p.key) != now.floor("h") or held.index[-1] > now:
            raw = self.demand.read(p.key, p.spec.query, now - lookback, now).astype(float)
            self._full_read[p.key] = now.floor("h")
            return raw
        # whole steps back from the newest sample, so the new samples land on the same grid
        overlap = 3 * duration(self.cfg.prometheus.step) if self.cfg.prometheus else READ_OVERLAP
        fresh = self.demand.read(p.key, p.spec.query, held.index[-1] - overlap, now).astype(float)
        kept = held[(held.index > now - lookback) & (held.index < (fresh.index[0] if len(fresh) else now))]
        return pd.concat([kept, fresh])

    # -- 3. snapshot and plan
    def _snapshot(self, runs: list[_PolicyRun], queues: list[str], now: pd.Timestamp) -> tuple[Snapshot, dict]:
        running, queued, infos = [], [], {}
        for q in queues:
            for w in self.cluster.list_workloads(q):
                if not w.active:
                    continue
                job = _job(w, q)
                infos[job.id] = (w, q)
                if w.cluster_queue == q:
                    at = _utc(w.last_checkpoint or w.creation or now)
                    # a job checkpoints every interval: its newest checkpoint is the last one before now
                    interval = pd.Timedelta(seconds=job.checkpoint_interval_seconds)
                    if now > at:
                        at += interval * ((now - at) // interval)
                    running.append(RunningJob(job, at))
                else:
                    queued.append(job)
        observations = {r.policy.key: r.observation for r in runs}
        return Snapshot(observations, tuple(running), tuple(queued)), infos

    def _weights(self, queues) -> dict[str, float]:
        return {q: self.cfg.team_weights.get(q, 1.0) for q in queues}

    def _policy(self, runs: list[_PolicyRun], queues: list[str]) -> Policy:
        weights = self._weights(queues)
        quota = _shares(self.cfg.capacity_gpus - self.cfg.non_lendable_gpus, weights)
        workloads = tuple(WorkloadPolicy(
            name=r.policy.key, demand_per_gpu=r.policy.spec.capacity.demand_per_gpu,
            gpus_per_replica=r.policy.spec.capacity.gpus_per_replica, target_quantile=r.policy.spec.target_quantile,
            headroom_quantile=r.policy.spec.headroom_quantile, margin_gpus=r.policy.spec.margin_gpus,
            min_gpus=r.policy.spec.min_gpus, max_gpus=r.policy.spec.max_gpus,
            headroom_floor_gpus=r.policy.spec.headroom_floor_gpus,
            lead_time=duration(r.policy.spec.lead_time).to_pytimedelta()) for r in runs)
        deadline = min((duration(r.policy.spec.reclaim_deadline) for r in runs), default=pd.Timedelta(minutes=5))
        return Policy(capacity_gpus=self.cfg.capacity_gpus, workloads=workloads,
                      teams=tuple(TeamQuota(q, quota[q], weights[q]) for q in queues),
                      non_lendable_gpus=self.cfg.non_lendable_gpus, reclaim_deadline=deadline.to_pytimedelta(),
                      horizon_hours=self.cfg.horizon_hours,
                      # the planner trusts a forecast until the history behind it is this old
                      stale_after=pd.Timedelta(seconds=self.cfg.keep_forecast_seconds).to_pytimedelta())

    # -- the whole reconcile
    def reconcile(self, now) -> ControllerState:
        now = _utc(now)
        started = time.monotonic()
        try:
            state = self._reconcile(now)
        except ClusterError as exc:  # the API server is down or refusing: nothing was half-applied we cannot redo
            self._error("cluster", "reconcile", exc)
            state = replace(self.holder.get(), leader=True)
        except Exception as exc:  # noqa: BLE001 - a bug must not stop the loop: log it whole, count it, go on
            log.exception("reconcile at %s failed", now)
            self._error("internal", "reconcile", exc)
            state = replace(self.holder.get(), leader=True)
        elapsed = time.monotonic() - started
        for i, bound in enumerate(RECONCILE_BUCKETS):
            self._buckets[i] += elapsed <= bound
        self._sum, self._total = self._sum + elapsed, self._total + 1
        state = replace(state, reconcile_total=self._total, reconcile_errors_total=dict(self._errors),
                        reconcile_seconds_buckets=tuple(self._buckets), reconcile_seconds_count=self._total,
                        reconcile_seconds_sum=self._sum, last_reconcile_timestamp=time.time(),
                        preemptions_total=dict(self._preemptions), lost_gpu_seconds_total=dict(self._lost))
        self.holder.publish(state)
        return state

    def _reconcile(self, now: pd.Timestamp) -> ControllerState:
        policies, invalid = parse_policies(self.cluster.list_reservation_policies(self.cfg.namespace))
        states: dict[str, PolicyState] = {}
        for ref, message in invalid.items():
            states[_ref_key(ref)] = PolicyState(_ref_key(ref), "", False, message)
            if self._invalid_reported.get(ref) != message:  # one event per new error, not one per reconcile
                self._event(ref, "InvalidSpec", message, "Warning")
                self._status(ref, PolicyStatus(0, 0, 0, (Condition("Ready", "False", "InvalidSpec", message),)))
                self._invalid_reported[ref] = message
        for p in policies:
            self._invalid_reported.pop(p.ref, None)
        runs = [self._observe(p, now) for p in policies]
        queues = sorted({q for p in policies for q in p.spec.training_cluster_queues})
        if not runs:
            return ControllerState(self.cfg.capacity_gpus, True, states)
        try:
            policy = self._policy(runs, queues)
        except ValueError as exc:  # e.g. the minimums add up to more than the cluster
            for r in runs:
                self._status(r.policy.ref, PolicyStatus(0, 0, 0, (Condition("Ready", "False", "PlanInfeasible", str(exc)),)))
                states[r.policy.key] = PolicyState(r.policy.key, r.policy.spec.mode, False, str(exc))
            return ControllerState(self.cfg.capacity_gpus, True, states)
        forecasts = {r.policy.key: r.forecast.frame for r in runs if r.forecast is not None}
        snapshot, infos = self._snapshot(runs, queues, now)
        the_plan = plan(forecasts, snapshot, policy, now)
        plan_id = hashlib.sha256(repr((now.isoformat(), the_plan.reservations, the_plan.preemptions)).encode()).hexdigest()[:12]
        hour0 = {r.workload: r for r in the_plan.reservations if r.hour == the_plan.hours[0].hour}
        slack = the_plan.hours[0].slack_gpus
        # each training queue an active policy lends to, and the (first) policy its events are reported on
        owners = {q: r.policy.ref for r in reversed(runs) if r.policy.active for q in r.policy.spec.training_cluster_queues}

        # 4. act: inference first (it must never wait for training), then the lent quota, then preemptions.
        applied: dict[str, int] = {}
        failures: dict[str, str] = {}
        for r in runs:
            res = hour0[r.policy.key]
            before = r.policy.status.get("reservedGpus")
            gpus = res.gpus if r.degraded is None or before is None else max(res.gpus, int(before))
            applied[r.policy.key] = gpus
            if r.policy.active:
                try:
                    if self._apply_reservation(r.policy, gpus) and before != gpus:
                        self._event(r.policy.ref, "ReservationChanged",
                                    f"reserved {before} -> {gpus} GPUs on {r.policy.spec.target.kind} "
                                    f"{r.policy.spec.target.name}: {res.reason}")
                except ClusterError as exc:
                    self._error("actuate", r.policy.key, exc)
                    failures[r.policy.key] = str(exc)
                    self._event(r.policy.ref, "ActuationFailed", str(exc), "Warning")
        inference_quota: dict[str, int] = {}
        for r in runs:
            if r.policy.active and r.policy.spec.inference_cluster_queue:
                q = r.policy.spec.inference_cluster_queue
                inference_quota[q] = inference_quota.get(q, 0) + applied[r.policy.key]
        for q, gpus in inference_quota.items():
            try:
                self.cluster.set_cluster_queue_quota(q, gpus)
            except ClusterError as exc:
                self._error("actuate", f"ClusterQueue {q}", exc)
        held_back = sum(applied.values()) - sum(res.gpus for res in hour0.values())  # degraded: lend less
        for q, gpus in _shares(max(slack - held_back, 0), self._weights(sorted(owners))).items():
            try:
                if self.cluster.set_cluster_queue_quota(q, gpus):
                    self._event(owners[q], "SlackLent", f"ClusterQueue {q} quota -> {gpus} GPUs (slack {slack})")
            except ClusterError as exc:
                self._error("actuate", f"ClusterQueue {q}", exc)
        self._preempt(the_plan, runs, forecasts, policy, queues, infos, owners, now, plan_id)

        # 5. report
        snapshot, infos = self._snapshot(runs, queues, now)  # after evictions
        deadline = pd.Timedelta(policy.reclaim_deadline).total_seconds()
        held = sum(x.job.gpus for x in snapshot.running)
        fast = sum(x.job.gpus for x in snapshot.running if x.job.preemption_seconds <= deadline)
        lendable = self.cfg.capacity_gpus - self.cfg.non_lendable_gpus
        reclaimable = max(lendable - sum(applied.values()) - held, 0) + fast
        # at risk when the band the forecast asks for (even beyond what the cluster can hold) is not reclaimable
        wanted = sum(res.headroom_gpus for res in hour0.values())
        for r in runs:
            states[r.policy.key] = self._report(r, the_plan, hour0[r.policy.key], applied[r.policy.key], slack,
                                                reclaimable, wanted, failures.get(r.policy.key), plan_id, now)
        return ControllerState(self.cfg.capacity_gpus, True, states, self._teams(snapshot, queues, policy, now),
                               slack_gpus=slack, training_gpus=held)

    def _apply_reservation(self, p: PolicyObject, gpus: int) -> bool:
        t = p.spec.target
        replicas = math.ceil(gpus / p.spec.capacity.gpus_per_replica)
        if t.kind == "Deployment":
            return self.cluster.scale_deployment(t.namespace or p.ref.namespace, t.name, replicas)
        if t.kind == "HorizontalPodAutoscaler":
            return self.cluster.set_hpa_min_replicas(t.namespace or p.ref.namespace, t.name, max(replicas, 1))
        return self.cluster.set_cluster_queue_quota(t.name, gpus)

    def _preempt(self, the_plan: Plan, runs, forecasts, policy, queues, infos, owners, now, plan_id) -> None:
        """Evict what the plan stops now -- only if a plan on a fresh snapshot still stops it."""
        due = [x for x in the_plan.preemptions if x.at <= now and infos[x.job_id][1] in owners]
        if not due:
            return
        fresh_snapshot, fresh_infos = self._snapshot(runs, queues, now)
        still = {x.job_id: x for x in plan(forecasts, fresh_snapshot, policy, now).preemptions if x.at <= now}
        for x in due:
            if x.job_id not in still or x.job_id not in fresh_infos:
                log.info("preemption of %s dropped: a fresh plan no longer needs it", x.job_id)
                continue
            w, q = fresh_infos[x.job_id]
            try:
                if not self.cluster.evict_workload(w.namespace, w.name, x.reason, plan_id):
                    continue
            except ClusterError as exc:
                self._error("preempt", x.job_id, exc)
                continue
            self._preemptions[x.kind] = self._preemptions.get(x.kind, 0) + 1
            self._lost[x.kind] = self._lost.get(x.kind, 0.0) + x.work_lost_seconds * x.gpus
            seconds, borrowed_seconds, preempted = self._team_seconds.get(q, (0.0, 0.0, 0))
            self._team_seconds[q] = (seconds, borrowed_seconds, preempted + 1)
            message = f"{x.kind} preemption of {x.gpus} GPUs ({x.work_lost_seconds:.0f} s of work lost): {x.reason}"
            self._event(ObjectRef("kueue.x-k8s.io/v1beta1", "Workload", w.name, w.namespace), "Preempted", message)
            self._event(owners[q], "Preempted", f"Workload {x.job_id}: {message}")

    def _teams(self, snapshot: Snapshot, queues: list[str], policy: Policy, now: pd.Timestamp) -> dict[str, TeamState]:
        dt = (now - self._last_now).total_seconds() if self._last_now is not None else 0.0
        self._last_now = now
        teams = {}
        for q in queues:
            try:
                quota = self.cluster.get_cluster_queue_quota(q)
            except ClusterError:
                quota = next(t.quota_gpus for t in policy.teams if t.team == q)
            used = sum(x.job.gpus for x in snapshot.running if x.job.team == q)
            seconds, borrowed_seconds, preempted = self._team_seconds.get(q, (0.0, 0.0, 0))
            seconds, borrowed_seconds = seconds + used * dt, borrowed_seconds + max(used - quota, 0) * dt
            self._team_seconds[q] = (seconds, borrowed_seconds, preempted)
            teams[q] = TeamState(q, int(quota), used, max(used - int(quota), 0), max(int(quota) - used, 0),
                                 seconds, borrowed_seconds, preempted)
        return teams

    def _report(self, r: _PolicyRun, the_plan: Plan, res, gpus, slack, reclaimable, wanted, failure,
                plan_id, now) -> PolicyState:
        p = r.policy
        headroom = min(res.headroom_gpus, the_plan.hours[0].headroom_gpus)  # what the cluster can hold
        errors, coverage = self._realized(r, now)
        conditions = [
            Condition("Ready", "False" if failure else "True",
                      "ActuationFailed" if failure else ("Active" if p.active else "ForecastOnly"), failure or ""),
            Condition("ForecastDegraded", "True" if r.degraded else "False",
                      r.degraded.split(":")[0] if r.degraded else "DemandFresh", r.degraded or ""),
            Condition("FallbackActive", "True" if res.source == "fallback" else "False",
                      "ConservativeReservation" if res.source == "fallback" else "ForecastInUse",
                      res.reason if res.source == "fallback" else ""),
            Condition("HeadroomAtRisk", "True" if reclaimable < wanted else "False",
                      "ReclaimableBelowHeadroom" if reclaimable < wanted else "HeadroomCovered",
                      f"{reclaimable} GPUs reclaimable within the deadline; the forecast's headroom asks for {wanted}"
                      f" (the plan holds {the_plan.hours[0].headroom_gpus} within capacity)")]
        mine = [x for x in the_plan.reservations if x.workload == p.key][:STATUS_HOURS]
        slack_by_hour = {h.hour: h.slack_gpus for h in the_plan.hours}
        target = None
        if r.forecast is not None and res.hour in r.forecast.frame.index:
            target = float(r.forecast.frame.loc[res.hour, p.spec.target_quantile])
        model = r.forecast.model if r.forecast is not None else "fallback"
        self._status(p.ref, PolicyStatus(
            reserved_gpus=gpus, slack_gpus=slack, headroom_gpus=headroom, conditions=tuple(conditions),
            plan_id=plan_id, forecast_demand=target, observed_generation=p.generation, model=model,
            next_hours=tuple({"hour": x.hour.strftime("%Y-%m-%dT%H:%M:%SZ"), "reservedGpus": x.gpus,
                              "headroomGpus": x.headroom_gpus, "slackGpus": slack_by_hour[x.hour]} for x in mine),
            realized_error={f"{h}h": v for h, v in errors.items()}))
        return PolicyState(
            p.key, p.spec.mode, True, None, the_plan, r.forecast.frame if r.forecast is not None else None, model,
            r.observation.current_demand if math.isfinite(r.observation.current_demand) else None,
            p.spec.capacity.demand_per_gpu, gpus, headroom, reclaimable, res.source == "fallback",
            r.degraded is not None,
            (now - r.forecast.made_at).total_seconds() if r.forecast is not None else 0.0, errors, coverage)

    def _status(self, ref: ObjectRef, status: PolicyStatus) -> None:
        try:
            self.cluster.patch_policy_status(ref.namespace, ref.name, status)
        except ClusterError as exc:
            self._error("status", _ref_key(ref), exc)

    # -- accuracy over time
    def _realized(self, r: _PolicyRun, now: pd.Timestamp) -> tuple[dict[int, float], dict[int, float]]:
        """Recent realized error per horizon (and 80% coverage); to MLflow, with drift, when tracking is on."""
        if self.forecast_log is None or r.forecast is None or r.hourly.dropna().empty:
            return {}, {}
        hour = now.floor("h")
        done = self._accuracy.get(r.policy.series)
        if done is not None and done[0] == hour:  # actuals arrive hourly: once per hour is enough
            return done[1], done[2]
        since = now - pd.Timedelta(hours=max(HORIZONS) + self.drift_window + 1)
        self.forecast_log.prune(r.policy.series, before=now - FORECAST_LOG_KEPT)
        issued = self.forecast_log.load(r.policy.series, since=since)
        table = None
        if self.tracker is not None:
            try:
                # the status's scale, so MLflow and the status report one error (drift's baseline: the champion's)
                table, events = log_realized(r.policy.series, issued, r.hourly, self.tracker, scale=r.forecast.scale,
                                             factor=self.drift_factor, window=self.drift_window, horizons=HORIZONS)
            except Exception as exc:  # noqa: BLE001 - MLflow down must not stop the controller
                self._error("mlflow", r.policy.series, exc)
                events = []
            for e in events:
                retrain = self.retrain is not None and r.policy.active
                self._event(r.policy.ref, "ForecastDrift", e.message + ("; retraining" if retrain else ""), "Warning")
            self._maybe_retrain(r, now, drifted=bool(events))
        if table is None:  # no tracking, or MLflow failed: the same errors, computed here
            table = realized_errors(issued, r.hourly, r.forecast.scale, HORIZONS)
        errors, coverage = {}, {}
        for h, group in table.groupby("horizon"):
            recent = group.sort_values("target").tail(self.drift_window)
            errors[int(h)], coverage[int(h)] = float(recent["scaled_error"].mean()), float(recent["inside_80"].mean())
        self._accuracy[r.policy.series] = (hour, errors, coverage)
        return errors, coverage

    def _maybe_retrain(self, r: _PolicyRun, now: pd.Timestamp, drifted: bool) -> None:
        if self.retrain is None:
            return
        last = self._last_trained.setdefault(r.policy.series, now)  # the schedule counts from start-up
        every = self.cfg.retrain_every_seconds
        due = (every > 0 and (now - last).total_seconds() >= every) or (drifted and r.policy.active)
        if due:
            self._last_trained[r.policy.series] = now
            self.retrain(r.policy.series, r.hourly, now)
