"""headroom's one configuration file: typed, validated once, every error with its field path.

Unknown keys are errors (a typo must not silently fall back to a default).
Command-line flags are applied onto the parsed YAML *before* validation, so a
bad flag is reported with the same field path as a bad key in the file.
"""
from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic.alias_generators import to_camel
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from core.errors import ConfigError

from controller.simulate import POLICIES, SimSettings
from forecast.history import check_statistic

_SIM = SimSettings()  # the simulator's defaults are the config's defaults


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def duration(value: str):
    """A Go/Prometheus-style duration ("90s", "10m", "1h30m", "28d") as a pandas Timedelta."""
    import re

    import pandas as pd

    if not re.fullmatch(r"(\d+(\.\d+)?(ms|s|m|h|d|w))+", value):
        raise ValueError(f"{value!r} is not a duration like 90s, 10m, 1h30m or 28d")
    return pd.Timedelta(re.sub(r"(\d)d", r"\1D", value.replace("w", "W")))


def _check_duration(value: str) -> str:
    duration(value)
    return value


class PrometheusServer(Strict):
    """How to reach Prometheus (the query comes from the history section or from each policy)."""
    url: str
    lookback: str = "28d"
    step: str = "5m"
    bearer_token_file: Path | None = None
    ca_file: Path | None = None
    insecure_skip_verify: bool = False
    timeout_seconds: float = Field(30.0, gt=0)
    retries: int = Field(3, ge=0, le=10)

    @field_validator("lookback", "step")
    @classmethod
    def _duration(cls, value: str) -> str:
        return _check_duration(value)


class PrometheusConfig(PrometheusServer):
    query: str
    end: datetime | None = None  # the history ends here (e.g. to replay a past week); default: now

    @field_validator("end")
    @classmethod
    def _zoned(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("give the time zone, e.g. 2026-05-04T00:00:00Z")
        return value


class HistoryConfig(Strict):
    file: Path | None = None
    prometheus: PrometheusConfig | None = None
    statistic: str = "mean"
    step: str = "1h"
    counter: bool = False
    outlier_factor: float | None = Field(3.0, gt=1)

    @field_validator("statistic")
    @classmethod
    def _statistic(cls, value: str) -> str:
        return check_statistic(value)

    @model_validator(mode="after")
    def _one_source(self):
        if self.file is not None and self.prometheus is not None:
            raise ValueError("give either file or prometheus, not both")
        return self


def _quantiles(values: list[float]) -> list[float]:
    if sorted(set(values)) != list(values):
        raise ValueError("quantiles must be strictly increasing")
    return values


class ForecastConfig(Strict):
    horizon: int = Field(48, ge=1, le=24 * 14)
    quantiles: list[float] = Field(default_factory=lambda: [0.5, 0.9, 0.99], min_length=1)

    @field_validator("quantiles")
    @classmethod
    def _q(cls, values: list[float]) -> list[float]:
        for q in values:
            if not 0 < q < 1:
                raise ValueError(f"quantile {q} is not strictly between 0 and 1")
        return _quantiles(values)


class BacktestConfig(Strict):
    horizon: int = Field(24, ge=1, le=24 * 14)
    folds: int = Field(7, ge=1, le=365)
    step: int = Field(24, ge=1)


class SimulateConfig(Strict):
    """The simulated cluster (see controller/simulate.py SimSettings for what each knob does)."""
    gpus: int = Field(128, ge=1)
    peak_gpus: float | None = Field(100, gt=0)
    per_gpu: float | None = Field(None, gt=0)
    policy: Literal[POLICIES] = "forecast"
    days: float = Field(7, gt=0)
    jobs: Path | None = None
    target_quantile: float = Field(_SIM.target_quantile, gt=0, lt=1)
    headroom_quantile: float = Field(_SIM.headroom_quantile, gt=0, lt=1)
    lead_time_seconds: float = Field(_SIM.lead_time_seconds, ge=0, lt=3600)
    warmup_seconds: float = Field(_SIM.warmup_seconds, ge=0)
    reclaim_deadline_seconds: float = Field(_SIM.reclaim_deadline_seconds, gt=0)
    checkpoint_interval_seconds: float = Field(_SIM.checkpoint_interval_seconds, gt=0)

    @model_validator(mode="after")
    def _quantiles(self):
        if self.headroom_quantile < self.target_quantile:
            raise ValueError("headroom_quantile must be at least target_quantile")
        return self


class TuneConfig(Strict):
    target_quantiles: list[float] = Field(default_factory=lambda: [0.3, 0.5, 0.7, 0.9], min_length=1)
    lead_times_seconds: list[float] = Field(default_factory=lambda: [0, 900, 1800], min_length=1)
    headroom_quantiles: list[float] = Field(default_factory=lambda: [0.95, 0.99], min_length=1)
    shortage_objective: float = Field(0.001, ge=0, le=1)


class TrainingSeries(Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
    file: Path


class TrainingConfig(Strict):
    tracking_uri: str | None = None  # else MLFLOW_TRACKING_URI, else sqlite:///<cwd>/mlflow.db
    name: str | None = None          # series name when training from history.*
    series: list[TrainingSeries] = []
    candidates: list[str] = Field(default_factory=lambda: ["snaive24", "snaive168", "profile"], min_length=1)
    objective: Literal["mase", "pinball"] = "mase"
    target_quantile: float = Field(0.9, gt=0, lt=1)
    promotion_margin: float = Field(0.02, ge=0, lt=1)
    lock_ttl_seconds: float = Field(7200, gt=0)
    drift_factor: float = Field(1.5, gt=1)
    drift_window: int = Field(24, ge=1)


class Camel(Strict):
    """A Kubernetes-style spec: camelCase keys, the same in a CRD object and in this file."""
    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True)


class CapacitySpec(Camel):
    demand_per_gpu: float = Field(gt=0)
    gpus_per_replica: int = Field(1, ge=1)


class TargetSpec(Camel):
    kind: Literal["Deployment", "HorizontalPodAutoscaler", "ClusterQueue"]
    name: str = Field(min_length=1, max_length=253)
    namespace: str | None = None  # default: the policy's namespace (not used for a ClusterQueue)


class PolicySpec(Camel):
    """One inference workload's reservation policy: the spec of a ReservationPolicy object."""
    query: str = Field(min_length=1)
    statistic: str = "mean"
    capacity: CapacitySpec
    target_quantile: float = Field(0.9, gt=0, lt=1)
    headroom_quantile: float = Field(0.99, gt=0, lt=1)
    lead_time: str = "10m"
    min_gpus: int = Field(0, ge=0)
    max_gpus: int | None = Field(None, ge=1)
    margin_gpus: int = Field(0, ge=0)
    headroom_floor_gpus: int = Field(0, ge=0)
    reclaim_deadline: str = "5m"
    target: TargetSpec
    inference_cluster_queue: str | None = Field(None, min_length=1)  # its GPU quota follows the reservation too
    training_cluster_queues: list[str] = Field(default_factory=list, max_length=64)
    mode: Literal["forecast-only", "active"] = "forecast-only"

    @field_validator("statistic")
    @classmethod
    def _statistic(cls, value: str) -> str:
        return check_statistic(value)

    @field_validator("lead_time", "reclaim_deadline")
    @classmethod
    def _duration(cls, value: str) -> str:
        return _check_duration(value)

    @model_validator(mode="after")
    def _consistent(self):
        if self.headroom_quantile < self.target_quantile:
            raise ValueError("headroomQuantile must be at least targetQuantile")
        if self.max_gpus is not None and self.max_gpus < self.min_gpus:
            raise ValueError("maxGpus must be at least minGpus")
        if self.inference_cluster_queue in self.training_cluster_queues:
            raise ValueError("inferenceClusterQueue cannot also be a training ClusterQueue")
        return self


class EmbeddedPolicy(Strict):
    """A policy of the embedded (simulated) cluster: the ReservationPolicy's name and spec, and the file
    its demand query is answered from."""
    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    namespace: str = "default"
    history_file: Path
    spec: PolicySpec


class LeaseConfig(Strict):
    namespace: str = "headroom-system"
    name: str = "headroom"
    duration_seconds: int = Field(15, ge=2)


class RunConfig(Strict):
    """`headroom run`: the long-running controller."""
    cluster: Literal["simulated", "kubernetes"] = "simulated"
    kubeconfig: Path | None = None   # kubernetes: this file, else in-cluster credentials
    namespace: str | None = None     # watch policies in one namespace (default: all)
    capacity_gpus: int = Field(128, ge=1)
    non_lendable_gpus: int = Field(0, ge=0)
    interval_seconds: float = Field(60, gt=0)
    horizon_hours: int = Field(24, ge=2, le=24 * 14)
    prometheus: PrometheusServer | None = None
    stale_after_seconds: float = Field(1800, gt=0)     # demand older than this is stale: fall back
    keep_forecast_seconds: float = Field(7200, gt=0)  # a fetch failure keeps the last good forecast this long
    metrics_port: int = Field(9108, ge=0, le=65535)
    lease: LeaseConfig = LeaseConfig()
    forecast_log_dir: Path = Path("headroom-forecasts")
    tracking_uri: str | None = None   # MLflow: champion models, realized error, retraining (default: training.tracking_uri)
    retrain_every_seconds: float = Field(86400, ge=0)  # 0: never on a schedule (drift still recommends)
    team_weights: dict[str, float] = {}   # training ClusterQueue -> share of the slack (default equal)
    policies: list[EmbeddedPolicy] = []

    @model_validator(mode="after")
    def _where_demand_comes_from(self):
        if self.cluster == "simulated" and self.prometheus is not None:
            raise ValueError("the simulated cluster reads each policy's history_file; remove prometheus")
        if self.cluster == "kubernetes" and self.prometheus is None:
            raise ValueError("a kubernetes controller needs prometheus: {url: ...} for the policies' queries")
        if len({(p.namespace, p.name) for p in self.policies}) != len(self.policies):
            raise ValueError("policy names must be unique per namespace")
        for team, weight in self.team_weights.items():
            if not weight > 0:
                raise ValueError(f"team_weights.{team} must be > 0")
        return self


class Config(Strict):
    history: HistoryConfig = HistoryConfig()
    forecast: ForecastConfig = ForecastConfig()
    backtest: BacktestConfig = BacktestConfig()
    simulate: SimulateConfig = SimulateConfig()
    tune: TuneConfig = TuneConfig()
    training: TrainingConfig = TrainingConfig()
    run: RunConfig = RunConfig()


def field_errors(exc: ValidationError, prefix: str = "") -> list[str]:
    """'field.path: message' per error, paths starting at `prefix`."""
    out = []
    for e in exc.errors():
        path = ".".join(str(p) for p in (prefix.split(".") if prefix else []) + list(e["loc"])) or "(top level)"
        out.append(f"{path}: {e['msg'].removeprefix('Value error, ')}")
    return out


def parse_policy_spec(spec: Any, source: str) -> PolicySpec:
    """A ReservationPolicy object's spec, validated as the CRD promises (errors name spec.* paths)."""
    try:
        return PolicySpec.model_validate(spec)
    except ValidationError as exc:
        raise ConfigError(source, field_errors(exc, "spec")) from None
