"""headroom's one configuration file: typed, validated once, every error with its field path.

Unknown keys are errors (a typo must not silently fall back to a default).
Command-line flags are applied onto the parsed YAML *before* validation, so a
bad flag is reported with the same field path as a bad key in the file.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from controller.simulate import POLICIES, SimSettings
from forecast.history import check_statistic

_SIM = SimSettings()  # the simulator's defaults are the config's defaults


class ConfigError(ValueError):
    """The configuration is invalid; `errors` lists 'field.path: message' lines."""

    def __init__(self, source: str, errors: list[str]):
        self.errors = errors
        super().__init__(f"invalid configuration ({source}):\n" + "\n".join(f"  {e}" for e in errors))


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PrometheusConfig(Strict):
    url: str
    query: str
    lookback: str = "28d"
    step: str = "5m"
    bearer_token_file: Path | None = None
    ca_file: Path | None = None
    insecure_skip_verify: bool = False
    timeout_seconds: float = Field(30.0, gt=0)
    retries: int = Field(3, ge=0, le=10)


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


class Config(Strict):
    history: HistoryConfig = HistoryConfig()
    forecast: ForecastConfig = ForecastConfig()
    backtest: BacktestConfig = BacktestConfig()
    simulate: SimulateConfig = SimulateConfig()
    tune: TuneConfig = TuneConfig()
    training: TrainingConfig = TrainingConfig()


def _path(loc: tuple) -> str:
    return ".".join(str(p) for p in loc) or "(top level)"


def _set(tree: dict, dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    for key in parents:
        node = tree.get(key)
        tree[key] = node = dict(node) if isinstance(node, dict) else {}
        tree = node
    tree[leaf] = value


def load_config(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> Config:
    """Parse YAML (if any), apply `{"section.key": value}` overrides, validate once."""
    source = str(path) if path else "defaults"
    tree: Any = {}
    if path is not None:
        try:
            tree = yaml.safe_load(Path(path).read_text()) or {}
        except OSError as exc:
            raise ConfigError(source, [f"cannot read file: {exc.strerror}"]) from None
        except yaml.YAMLError as exc:
            raise ConfigError(source, [f"not valid YAML: {exc}"]) from None
        if not isinstance(tree, dict):
            raise ConfigError(source, ["(top level): must be a mapping of sections"])
    for dotted, value in (overrides or {}).items():
        if value is not None:
            _set(tree, dotted, value)
    try:
        return Config.model_validate(tree)
    except ValidationError as exc:
        errors = [f"{_path(e['loc'])}: {e['msg'].removeprefix('Value error, ')}" for e in exc.errors()]
        raise ConfigError(source, errors) from None
