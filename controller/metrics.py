"""headroom's Prometheus metrics: a collector over the last published ControllerState, and /metrics.

The only module that imports prometheus_client. Values are read from
`StateHolder.get()` at scrape time (nothing is cached between scrapes), so a
scrape shows exactly the last finished reconcile. Units are in the names: GPUs
(`_gpus`), seconds and GPU-seconds (`_seconds`, `_gpu_seconds_total`), ratios
(`_ratio`); demand is in the unit of the policy's demand query. Every label has
a bounded set of values: policy and team names come from the cluster's
objects, quantiles from the configuration, horizons from `FORECAST_HORIZONS`,
kinds and stages from the controller's own fixed sets.

The dashboards (dashboards/generate.py) build their queries from the `Metric`
constants below, so a renamed metric cannot leave a board querying nothing.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pandas as pd
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.core import Metric as Family
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from controller.state import (
    ERROR_STAGES,
    PREEMPTION_KINDS,
    RECONCILE_BUCKETS,
    ControllerState,
    Histogram,
    PolicyState,
    StateHolder,
)
from training.realized import HORIZONS

# Horizon h is the forecast's h-th hour counting the current one as the first, as for the realized
# error (training.realized): "1h" is the forecast for this hour, which the reservation in force uses.
FORECAST_HORIZONS = HORIZONS


@dataclass(frozen=True)
class Metric:
    """One exported metric. `name` is what PromQL uses (counters end in `_total`)."""
    name: str
    kind: str  # "gauge" | "counter" | "histogram"
    help: str
    labels: tuple[str, ...] = ()

    def family(self) -> GaugeMetricFamily | CounterMetricFamily | HistogramMetricFamily:
        if self.kind == "gauge":
            return GaugeMetricFamily(self.name, self.help, labels=self.labels)
        if self.kind == "counter":  # the family drops `_total`; its sample carries it again
            return CounterMetricFamily(self.name, self.help, labels=self.labels)
        return HistogramMetricFamily(self.name, self.help, labels=self.labels)


P = ("policy",)
POLICY_VALID = Metric("headroom_policy_valid", "gauge", "1 if the ReservationPolicy is valid and planned; one that takes no part (invalid, not fitting, its target missing) exports only this (0)", P)
POLICY_INFO = Metric("headroom_policy_info", "gauge", "Always 1: the policy's mode (active or forecast-only) and the model that forecast it", ("policy", "mode", "model"))
FORECAST = Metric("headroom_forecast_demand", "gauge", "Forecast demand (the demand query's unit) per quantile, for the forecast's horizon-th hour (1h: the current hour)", ("policy", "quantile", "horizon"))
FORECAST_AGE = Metric("headroom_forecast_age_seconds", "gauge", "Age of the forecast in use; no series while the fallback reservation has none", P)
DEMAND = Metric("headroom_demand", "gauge", "Latest observed demand (the demand query's unit)", P)
DEMAND_PER_GPU = Metric("headroom_demand_per_gpu", "gauge", "Demand one GPU serves: demand / this = GPUs of demand", P)
RESERVED = Metric("headroom_reserved_gpus", "gauge", "GPUs reserved for inference now (applied, or that would be in forecast-only mode)", P)
RESERVATION_UTILIZATION = Metric("headroom_reservation_utilization_ratio", "gauge", "Observed demand over what the reservation serves (above 1: demand beyond the reservation)", P)
HEADROOM = Metric("headroom_preemption_headroom_gpus", "gauge", "Preemption headroom the policy's headroom quantile asks for now: GPUs above its reservation, up to maxGpus (on the conservative fallback, which has no quantile: its headroomFloorGpus); the cluster's band (headroom_headroom_band_gpus) is their sum within what is lent", P)
RECLAIMABLE = Metric("headroom_reclaimable_gpus", "gauge", "The cluster's GPUs reclaimable within the deadline now: idle ones plus the training in the active policies' queues preemptible in time (while every policy is forecast-only, headroom preempts none: the idle ones only, beside their targets as they are; the same on every policy: take max, not sum)", P)
FALLBACK = Metric("headroom_policy_fallback", "gauge", "1 while the conservative (last week's peak) reservation is in use", P)
DEGRADED = Metric("headroom_policy_degraded", "gauge", "1 while demand data is missing or stale (last good forecast or fallback in use)", P)
FORECAST_ERROR = Metric("headroom_forecast_scaled_error_ratio", "gauge", "Realized mean absolute error of the forecast's median at this horizon over the last training.drift_window scored hours, scaled by the naive forecast's (MASE-like; below 1 beats naive)", ("policy", "horizon"))
FORECAST_COVERAGE = Metric("headroom_forecast_coverage_ratio", "gauge", "Realized share of actuals inside the forecast's q0.1..q0.9 band at this horizon over the last training.drift_window scored hours (target 0.8)", ("policy", "horizon"))

CAPACITY = Metric("headroom_capacity_gpus", "gauge", "GPUs in the cluster headroom manages")
SLACK = Metric("headroom_slack_gpus", "gauge", "GPUs lent to training now (the whole cluster's slack); 0 while every policy is forecast-only, which lends nothing")
TRAINING = Metric("headroom_training_gpus", "gauge", "GPUs held by training now, in every training queue a policy names (a forecast-only one's too)")
HEADROOM_BAND = Metric("headroom_headroom_band_gpus", "gauge", "The headroom band now: GPUs lent to training that must come back within the reclaim deadline (the active policies' headroom, at most what is lent; 0 while every policy is forecast-only); headroom is at risk while headroom_reclaimable_gpus is below it")
HEADROOM_WANTED = Metric("headroom_headroom_wanted_gpus", "gauge", "The headroom the plan's policies ask for now: the sum of their headroom_preemption_headroom_gpus, of the active policies (0 while every policy is forecast-only: what one would ask is its own headroom_preemption_headroom_gpus); above the band it asks for more than is lent (HeadroomAboveCapacity)")
HEADROOM_AT_RISK = Metric("headroom_headroom_at_risk", "gauge", "1 while the cluster's headroom is at risk or cannot be checked (the HeadroomAtRisk condition True or Unknown), by its reason: ReclaimableBelowHeadroom, HeadroomAboveCapacity, CohortLends, CohortCycle, CohortsUnreadable; else 0, reason HeadroomCovered, or CohortReclaims when a queue of a training cohort's tree of Cohorts lets Kueue preempt training itself", ("reason",))
PREEMPTIONS = Metric("headroom_preemptions_total", "counter", "Training workloads headroom preempted (not Kueue's own preemptions), planned (training beyond the slack while demand is within the forecast, slow jobs out of the headroom band, or at a checkpoint before a forecast ramp) or emergency (demand above the forecast needs the GPUs now)", ("kind",))
LOST_WORK = Metric("headroom_preemption_lost_gpu_seconds_total", "counter", "GPU-seconds of training work lost to headroom's preemptions (since the last checkpoint)", ("kind",))

T = ("team",)
TEAM_QUOTA = Metric("headroom_team_quota_gpus", "gauge", "The team's training ClusterQueue's nominal quota: what headroom lends it, but what inference pods running there hold beyond what is lent (a queue only forecast-only policies name: the quota it has, of which headroom lends none)", T)
TEAM_USED = Metric("headroom_team_used_gpus", "gauge", "GPUs of the team's running workloads (admitted, active, not being evicted)", T)
TEAM_BORROWED = Metric("headroom_team_borrowed_gpus", "gauge", "GPUs the team uses beyond its quota (borrowed from the cohort)", T)
TEAM_LENT = Metric("headroom_team_lent_gpus", "gauge", "Quota the team does not use (lendable to the cohort)", T)
TEAM_UTILIZATION = Metric("headroom_team_utilization_ratio", "gauge", "GPUs used over quota for the team's queue", T)
TEAM_GPU_SECONDS = Metric("headroom_team_used_gpu_seconds_total", "counter", "GPU-seconds the team's training used", T)
TEAM_ON_LENT_SECONDS = Metric("headroom_team_used_on_lent_gpu_seconds_total", "counter", "GPU-seconds the team's training used on capacity headroom lent: while an active policy names its queue (not while only forecast-only policies do, or every policy is forecast-only: headroom lends nothing then)", T)
TEAM_BORROWED_SECONDS = Metric("headroom_team_borrowed_gpu_seconds_total", "counter", "GPU-seconds the team used beyond its quota", T)
TEAM_PREEMPTIONS = Metric("headroom_team_preemptions_total", "counter", "The team's workloads headroom preempted", T)

LEADER = Metric("headroom_leader", "gauge", "1 if this replica holds the leader lease and reconciles")
RECONCILES = Metric("headroom_reconciles_total", "counter", "Reconciles finished")
RECONCILE_ERRORS = Metric("headroom_reconcile_errors_total", "counter", "Reconcile errors per stage", ("stage",))
RECONCILE_DURATION = Metric("headroom_reconcile_duration_seconds", "histogram",
                            "Duration of one reconcile: deciding and acting (statuses and Events are written beside)")
STATUS_LAG = Metric("headroom_status_write_lag_seconds", "histogram",
                    "From the end of a reconcile to each policy status it decided, written beside it")
STATUSES_WAITING = Metric("headroom_statuses_waiting", "gauge",
                          "Policy statuses decided and not yet written (written beside the reconciles)")
LAST_RECONCILE = Metric("headroom_last_reconcile_timestamp_seconds", "gauge", "Unix time of the last finished reconcile")

METRICS = tuple(v for v in globals().copy().values() if isinstance(v, Metric))


def _bool(flag: bool) -> float:
    return 1.0 if flag else 0.0


def _horizon(h: int) -> str:
    return f"{h}h"


def _forecast_samples(p: PolicyState, now: pd.Timestamp) -> Iterator[tuple[list[str], float]]:
    """The forecast for hour h (the current hour is 1), per quantile; horizons past the forecast are left out."""
    frame = p.forecast
    if frame is None or frame.empty:
        return
    for h in FORECAST_HORIZONS:
        hour = now.floor("h") + pd.Timedelta(hours=h - 1)
        if hour not in frame.index:
            continue
        row = frame.loc[hour]
        for q in frame.columns:
            if pd.notna(row[q]):
                yield [p.name, f"{float(q):g}", _horizon(h)], float(row[q])


class HeadroomCollector(Collector):
    """Every headroom metric, read from the holder's current state at each scrape."""

    def __init__(self, holder: StateHolder):
        self._holder = holder

    def collect(self) -> Iterator[Family]:
        state = self._holder.get()
        fams = {m: m.family() for m in METRICS}

        def add(metric: Metric, labels: list[str], value: float) -> None:
            family = fams[metric]
            if isinstance(family, HistogramMetricFamily):
                raise TypeError(f"{metric.name} is a histogram: it takes buckets, not one value")
            family.add_metric(labels, value)

        self._policies(state, add)
        self._cluster(state, add)
        self._teams(state, add)
        for metric, seen in ((RECONCILE_DURATION, state.reconcile_seconds), (STATUS_LAG, state.status_lag_seconds)):
            family = fams[metric]
            if not isinstance(family, HistogramMetricFamily):
                raise TypeError(f"{metric.name} must be a histogram")
            family.add_metric([], self._buckets(metric, seen), seen.sum)
        yield from (f for f in fams.values() if f.samples)  # a metric with no series yet is left out

    @staticmethod
    def _policies(state: ControllerState, add) -> None:
        wall = pd.Timestamp(state.last_reconcile_timestamp, unit="s", tz="UTC")
        for p in state.policies.values():
            add(POLICY_VALID, [p.name], _bool(p.valid))
            if not p.valid:
                continue
            add(POLICY_INFO, [p.name, p.mode, p.model], 1.0)
            # horizons count from the plan's clock (a replay's clock is not the wall clock)
            for labels, value in _forecast_samples(p, p.now if p.now is not None else wall):
                add(FORECAST, labels, value)
            if p.forecast is not None:  # on the fallback there is no forecast: an age of 0 would read as fresh
                add(FORECAST_AGE, [p.name], p.forecast_age_seconds)
            if p.observed_demand is not None:
                add(DEMAND, [p.name], p.observed_demand)
                if p.reserved_gpus > 0:
                    add(RESERVATION_UTILIZATION, [p.name], p.observed_demand / (p.reserved_gpus * p.demand_per_gpu))
            add(DEMAND_PER_GPU, [p.name], p.demand_per_gpu)
            add(RESERVED, [p.name], p.reserved_gpus)
            add(HEADROOM, [p.name], p.headroom_gpus)
            add(RECLAIMABLE, [p.name], p.reclaimable_gpus)
            add(FALLBACK, [p.name], _bool(p.fallback))
            add(DEGRADED, [p.name], _bool(p.degraded))
            for h, err in sorted(p.realized_error.items()):
                add(FORECAST_ERROR, [p.name, _horizon(h)], err)
            for h, cov in sorted(p.realized_coverage_80.items()):
                add(FORECAST_COVERAGE, [p.name, _horizon(h)], cov)

    @staticmethod
    def _cluster(state: ControllerState, add) -> None:
        add(CAPACITY, [], state.capacity_gpus)
        add(SLACK, [], state.slack_gpus)
        add(TRAINING, [], state.training_gpus)
        add(HEADROOM_BAND, [], state.headroom_band_gpus)
        add(HEADROOM_WANTED, [], state.headroom_wanted_gpus)
        if state.headroom_at_risk is not None:  # a reconcile that planned says it (one series: the reason now)
            add(HEADROOM_AT_RISK, [state.headroom_at_risk.reason], _bool(state.headroom_at_risk.status != "False"))
        add(LEADER, [], _bool(state.leader))
        # Both kinds always present, so rate() over a first preemption starts from 0, not from nothing.
        for kind in sorted({*PREEMPTION_KINDS, *state.preemptions_total}):
            add(PREEMPTIONS, [kind], state.preemptions_total.get(kind, 0))
            add(LOST_WORK, [kind], state.lost_gpu_seconds_total.get(kind, 0.0))
        add(RECONCILES, [], state.reconcile_total)
        for stage in sorted({*ERROR_STAGES, *state.reconcile_errors_total}):  # zeros too: rate() needs a start
            add(RECONCILE_ERRORS, [stage], state.reconcile_errors_total.get(stage, 0))
        add(STATUSES_WAITING, [], state.statuses_waiting)
        add(LAST_RECONCILE, [], state.last_reconcile_timestamp)

    @staticmethod
    def _teams(state: ControllerState, add) -> None:
        for t in state.teams.values():
            add(TEAM_QUOTA, [t.team], t.quota_gpus)
            add(TEAM_USED, [t.team], t.used_gpus)
            add(TEAM_BORROWED, [t.team], t.borrowed_gpus)
            add(TEAM_LENT, [t.team], t.lent_gpus)
            if t.quota_gpus > 0:
                add(TEAM_UTILIZATION, [t.team], t.used_gpus / t.quota_gpus)
            add(TEAM_GPU_SECONDS, [t.team], t.gpu_seconds_total)
            add(TEAM_ON_LENT_SECONDS, [t.team], t.on_lent_gpu_seconds_total)
            add(TEAM_BORROWED_SECONDS, [t.team], t.borrowed_gpu_seconds_total)
            add(TEAM_PREEMPTIONS, [t.team], t.preempted_total)

    @staticmethod
    def _buckets(metric: Metric, seen: Histogram) -> list[tuple[str, float]]:
        if len(seen.buckets) != len(RECONCILE_BUCKETS):
            raise ValueError(f"{metric.name} has {len(seen.buckets)} bucket counts, RECONCILE_BUCKETS "
                             f"{len(RECONCILE_BUCKETS)}")
        les = [(floatToGoString(le), float(n)) for le, n in zip(RECONCILE_BUCKETS, seen.buckets)]
        return [*les, ("+Inf", float(seen.count))]


def registry_for(holder: StateHolder) -> CollectorRegistry:
    """A registry holding only headroom's collector (no process or platform collectors)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(HeadroomCollector(holder))
    return registry


# A scrape is one short request: a connection that sends nothing, or reads nothing, for this long is closed.
REQUEST_TIMEOUT_SECONDS = 10.0
# Connections served at once (one thread each); more are answered 503 and closed at once, so idle or slow clients
# cannot pile up threads. Prometheus and the kubelet's probes need a handful.
MAX_CONNECTIONS = 32
_BUSY = b"HTTP/1.0 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


class MetricsServer(ThreadingHTTPServer):
    """/metrics, /healthz and /readyz, served from a daemon thread; `port` is the bound port.

    Bounded: at most `max_connections` connections are served at once (more get 503), and each is closed after
    `REQUEST_TIMEOUT_SECONDS` without progress (the handler's socket timeout); HTTP/1.0, one request per
    connection, so no connection stays open idle."""
    daemon_threads = True

    def __init__(self, address, handler, max_connections: int = MAX_CONNECTIONS):
        self.max_connections = max_connections
        self._slots = threading.BoundedSemaphore(max_connections)
        super().__init__(address, handler)

    @property
    def port(self) -> int:
        return self.server_address[1]

    def process_request(self, request, client_address) -> None:
        if not self._slots.acquire(blocking=False):
            try:
                request.settimeout(1.0)
                request.sendall(_BUSY)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def shutdown(self) -> None:
        super().shutdown()
        self.server_close()


def _probe(check: Callable[[], bool], failing: str) -> tuple[int, str]:
    try:
        ok = check()
    except Exception as exc:  # a probe that crashes is a failing probe, with its reason
        return 503, f"{failing}: {type(exc).__name__}: {exc}\n"
    return (200, "ok\n") if ok else (503, f"{failing}\n")


def serve(holder: StateHolder, port: int, healthy: Callable[[], bool], ready: Callable[[], bool],
          host: str = "0.0.0.0", max_connections: int = MAX_CONNECTIONS,
          timeout: float = REQUEST_TIMEOUT_SECONDS) -> MetricsServer:
    """Start serving the holder's metrics and the probes on `host` (run.metrics_address; every interface by default,
    as a pod's own network namespace is what Prometheus and the kubelet reach: deploy/base/networkpolicy.yaml
    admits only the monitoring namespace); port 0 picks a free port."""
    registry = registry_for(holder)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"  # one request per connection: nothing is kept open between scrapes

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, generate_latest(registry), CONTENT_TYPE_LATEST)
            elif path == "/healthz":
                self._text(*_probe(healthy, "not healthy"))
            elif path == "/readyz":
                self._text(*_probe(ready, "not ready"))
            else:
                self._text(404, "not found: try /metrics, /healthz or /readyz\n")

        def _text(self, status: int, body: str) -> None:
            self._send(status, body.encode(), "text/plain; charset=utf-8")

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:  # scrapes every few seconds would flood the controller's log
            pass

    Handler.timeout = timeout  # socketserver sets it on the connection: a silent or stalled client is dropped
    server = MetricsServer((host, port), Handler, max_connections=max_connections)
    threading.Thread(target=server.serve_forever, name="headroom-metrics", daemon=True).start()
    return server
