"""The values the controller and every cluster implementation exchange: object references, training
Workloads as the controller sees them, and what it reports on a ReservationPolicy."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

CONDITION_TYPES = ("Ready", "ForecastDegraded", "FallbackActive", "HeadroomAtRisk")


@dataclass(frozen=True)
class ObjectRef:
    """What an Event is about."""
    api_version: str
    kind: str
    name: str
    namespace: str | None = None
    uid: str | None = None

    @classmethod
    def of(cls, obj: dict) -> "ObjectRef":
        meta = obj.get("metadata", {})
        return cls(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"), meta.get("uid"))


@dataclass(frozen=True)
class WorkloadInfo:
    namespace: str
    name: str
    queue_name: str | None
    cluster_queue: str | None  # status.admission.clusterQueue when admitted
    active: bool
    priority: int
    creation: datetime | None
    gpus: int  # sum over podSets of count x GPU requests in the pod template
    evicted_by_plan: str | None
    preemption_seconds: float | None = None
    checkpoint_interval_seconds: float | None = None
    last_checkpoint: datetime | None = None


@dataclass(frozen=True)
class Condition:
    type: str
    status: str  # "True" | "False" | "Unknown"
    reason: str
    message: str = ""

    def __post_init__(self) -> None:
        if self.type not in CONDITION_TYPES:
            raise ValueError(f"condition type must be one of {CONDITION_TYPES}, got {self.type!r}")
        if self.status not in ("True", "False", "Unknown"):
            raise ValueError(f"condition status must be True, False or Unknown, got {self.status!r}")


@dataclass(frozen=True)
class PolicyStatus:
    """What the controller reports on a ReservationPolicy."""
    reserved_gpus: int
    slack_gpus: int
    headroom_gpus: int
    conditions: tuple[Condition, ...] = ()
    plan_id: str | None = None
    forecast_demand: float | None = None
    observed_generation: int | None = None
    model: str | None = None
    next_hours: tuple[dict, ...] = ()        # {"hour", "reservedGpus", "headroomGpus", "slackGpus"}
    realized_error: dict[str, float] | None = None  # "1h"/"6h"/"24h" ahead -> mean scaled error
