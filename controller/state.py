"""What the controller knows after its last reconcile: the one thing /metrics reads.

The reconciler (controller/reconcile.py) is the only writer. It builds a new
`ControllerState` value at the end of every reconcile and swaps it in whole
(`StateHolder.publish`), so a scrape never sees half a reconcile and nothing
goes stale between scrapes. Counters and histograms are cumulative since the
process started.
"""
from __future__ import annotations

import threading
from collections.abc import Container, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pandas as pd

from core.objects import Condition
from planning.planner import WorkloadHours, WorkloadStep

RECONCILE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
PREEMPTION_KINDS = ("planned", "emergency")
# Where a reconcile can fail (the label set of the error counter is bounded by this)
ERROR_STAGES = ("cluster", "demand", "forecast", "actuate", "preempt", "status", "events", "mlflow", "internal")

Key = TypeVar("Key")


def forget_absent(present: Container[Key], *by_policy: MutableMapping[Key, Any]) -> None:
    """What each map `by_policy` holds of a policy not `present` (deleted) is forgotten: a thousand come and go over a
    controller's life. In place: such a map may be shared (the Reconciler's demand samples, with its forecasts)."""
    for held in by_policy:
        for key in [key for key in held if key not in present]:
            del held[key]


@dataclass(frozen=True)
class Histogram:
    """Seconds observed, as a Prometheus histogram counts them: cumulative counts per bucket (le RECONCILE_BUCKETS),
    the count and the sum."""
    buckets: tuple[int, ...] = (0,) * len(RECONCILE_BUCKETS)
    count: int = 0
    sum: float = 0.0

    def observe(self, seconds: float) -> Histogram:
        return Histogram(tuple(n + (seconds <= le) for n, le in zip(self.buckets, RECONCILE_BUCKETS, strict=True)),
                         self.count + 1, self.sum + seconds)


@dataclass(frozen=True)
class PolicyState:
    """One ReservationPolicy (one inference workload)."""
    name: str                         # "namespace/name"
    mode: str                         # "active" | "forecast-only"
    valid: bool                       # False: the spec is invalid (see `error`); nothing else is set
    error: str | None = None
    now: pd.Timestamp | None = None   # the plan's clock (a replay's clock is not the wall clock)
    hours: WorkloadHours | None = None  # its reservation and headroom per hour
    step: WorkloadStep | None = None  # what the plan decided for it now, with the reason
    forecast: pd.DataFrame | None = None  # hourly quantile frame: index = hour starts (UTC), columns = quantiles
    model: str = ""
    observed_demand: float | None = None  # latest sample, in the query's unit
    demand_per_gpu: float = 1.0
    reserved_gpus: int = 0            # reservation in force now (what was applied, or would be in forecast-only)
    headroom_gpus: int = 0            # headroom H the plan requires now
    reclaimable_gpus: int = 0         # idle GPUs + GPUs of training preemptible within the deadline, now
    fallback: bool = False            # the conservative reservation is in use
    degraded: bool = False            # demand data missing/stale; last good forecast or fallback in use
    forecast_age_seconds: float = 0.0
    realized_error: Mapping[int, float] = field(default_factory=dict)    # horizon h -> mean scaled |error| (MASE-like)
    realized_coverage_80: Mapping[int, float] = field(default_factory=dict)  # horizon h -> share inside q0.1..q0.9


@dataclass(frozen=True)
class TeamState:
    """One training ClusterQueue that receives slack."""
    team: str
    quota_gpus: int        # nominal quota headroom gave it
    used_gpus: int         # GPUs of its admitted, active workloads
    borrowed_gpus: int     # used beyond its quota (borrowed from the cohort)
    lent_gpus: int         # quota it did not use (lendable to the cohort)
    gpu_seconds_total: float  # cumulative GPU-seconds used
    borrowed_gpu_seconds_total: float
    preempted_total: int   # workloads of this team headroom evicted
    on_lent_gpu_seconds_total: float  # cumulative GPU-seconds used while headroom lent to it (an active policy's queue)


@dataclass(frozen=True)
class ControllerState:
    capacity_gpus: int = 0
    leader: bool = False
    policies: Mapping[str, PolicyState] = field(default_factory=dict)
    teams: Mapping[str, TeamState] = field(default_factory=dict)
    slack_gpus: int = 0                      # lent to training now (whole cluster)
    training_gpus: int = 0                   # held by training now
    reclaimable_gpus: int = 0                # idle GPUs + GPUs of training preemptible within the deadline, now
    headroom_band_gpus: int = 0              # the policies' headroom within what is lent: must be reclaimable in time
    headroom_wanted_gpus: int = 0            # the policies' headroom to their headroom quantile
    headroom_at_risk: Condition | None = None  # HeadroomAtRisk for the whole cluster, with its numbers
    plan_id: str = ""
    slack_by_hour: tuple[tuple[pd.Timestamp, int], ...] = ()  # (hour start, GPUs lendable then), the plan's horizon
    preemptions_total: Mapping[str, int] = field(default_factory=dict)        # kind ("planned"|"emergency") -> count
    lost_gpu_seconds_total: Mapping[str, float] = field(default_factory=dict)  # kind -> GPU-seconds of work lost
    reconcile_total: int = 0
    reconcile_errors_total: Mapping[str, int] = field(default_factory=dict)   # stage (ERROR_STAGES) -> count
    reconcile_seconds: Histogram = Histogram()  # how long each reconcile took
    status_lag_seconds: Histogram = Histogram()  # from a reconcile's end to each status it decided, written beside
    statuses_waiting: int = 0                # statuses decided and not yet written (written beside)
    last_reconcile_timestamp: float = 0.0    # epoch seconds of the last finished reconcile
    actions: tuple = ()                      # what the last reconcile asked of the cluster (controller.actions)
    notes: tuple[str, ...] = ()              # the plan's notes (fallbacks, cuts)


class StateHolder:
    """The latest state, swapped whole; safe to read from the metrics thread."""

    def __init__(self, state: ControllerState | None = None):
        self._lock = threading.Lock()
        self._state = state or ControllerState()

    def publish(self, state: ControllerState) -> None:
        with self._lock:
            self._state = state

    def get(self) -> ControllerState:
        with self._lock:
            return self._state
