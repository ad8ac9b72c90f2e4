"""headroom's one configuration file, typed: each section's fields, defaults and checks, defined once.

Unknown keys are errors (a typo must not silently fall back to a default), and every error names its
field path. The CLI (cli/config.py) is the only reader: it applies command-line flags onto the parsed
YAML before validating, so a bad flag is reported with the same path as a bad key in the file. The
reservation policy itself is core.policy.PolicySpec (a ReservationPolicy's spec).
"""
from __future__ import annotations

import hashlib
import re
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal, get_args
from urllib.parse import urlsplit, urlunsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PositiveFloat,
    field_validator,
    model_validator,
)
from pydantic import Strict as StrictTypes

from core.crosschecks import CrossCheck, CrossChecked
from core.policy import NAME_PATTERN, DurationText, Forecaster, ObjectiveSpec, PolicySpec, policy_duration
from core.units import WEEK_SECONDS, check_statistic, check_timezone, duration


def home_expanded(path: Path) -> Path:
    """`~` and `~user` as a shell reads them."""
    try:
        return path.expanduser()
    except RuntimeError:  # pathlib's word for a ~user this machine has no home directory for
        raise ValueError(f"{path}: {path.parts[0]} is no user's home directory on this machine") from None


def _path_text(value: Any) -> Any:
    if value == "":  # Path("") is ".", the working directory: never a file anyone named
        raise ValueError("an empty path")
    return value


def checked_tracking_uri(value: str) -> str:
    """An MLflow store the MLflow adapter opens: a database URI (sqlite:///mlflow.db) or a tracking server's http(s)
    URL. A bare path or a file: URI is MLflow's filesystem store, which MLflow no longer opens (its "maintenance
    mode" error, after the command had started)."""
    scheme = urlsplit(value).scheme
    if scheme in ("", "file") and value != "databricks":  # MLflow's one URI without a scheme
        path = value.removeprefix("file://") if scheme else value
        raise ValueError(f"{value!r} is a path, not a tracking URI (MLflow's filesystem store is not supported): "
                         f"give a sqlite store, sqlite:///{path}, or a tracking server's http:// URL")
    if scheme == "sqlite":
        # sqlite:///, sqlite:// and sqlite:///:memory: open a database in memory: a training was promoted there, exit
        # 0, and every run, model and champion was gone as the command ended
        parts = urlsplit(value)
        in_memory = parts.path in ("", "/", "/:memory:") or parts.path.startswith("/file::memory:") \
            or "mode=memory" in parts.query
        if in_memory or parts.netloc or not value.startswith("sqlite:///"):
            raise ValueError(f"{value!r} names no sqlite file (a store in memory loses every run as the command "
                             "ends): give sqlite:///PATH, e.g. sqlite:///mlflow.db or sqlite:////abs/mlflow.db")
    if scheme in ("http", "https"):
        parts = urlsplit(value)
        if not parts.hostname:  # found only once a training tried to log
            raise ValueError(f"{shown_url(value)!r} names no tracking server host: give http://HOST:PORT, e.g. "
                             "http://127.0.0.1:5000")
        try:
            parts.port  # noqa: B018 - reading it checks it
        except ValueError:  # a mistyped port was a traceback (http.client.InvalidURL) at the first request
            raise ValueError(f"{shown_url(value)!r} names no valid port (a number from 0 to 65535 after the host): "
                             "give http://HOST:PORT, e.g. http://127.0.0.1:5000") from None
    return value


TrackingUri = Annotated[str, Field(min_length=1), AfterValidator(checked_tracking_uri)]


def _no_number(value: Any) -> Any:
    # pydantic reads a number, or numeric text, as epoch seconds or milliseconds by its size: 20260504 is 1970-08-23
    if isinstance(value, int | float) or isinstance(value, str) and re.fullmatch(r"[-+]?[0-9._eE]+", value.strip()):
        raise ValueError(f"{value!r} is not a time: give it as ISO-8601 with its zone, e.g. 2026-05-04T00:00:00Z")
    return value


# Numbers and booleans are strict (a YAML `true` is no horizon, a quoted "0.9" no quantile): these are read from the
# text a file or flag gives (paths, times) and the lists YAML writes for pairs. `~` is the user's home, as a shell
# would read it (a config file or `--flag=~/x` is not expanded by one).
FilePath = Annotated[Path, StrictTypes(False), BeforeValidator(_path_text), AfterValidator(home_expanded)]
Time = Annotated[datetime, StrictTypes(False), BeforeValidator(_no_number)]

LOOKBACK = "28d"  # the history a forecast is fitted on
SimulatedPolicy = Literal["forecast", "static", "reactive", "seasonal-naive", "oracle", "hourly-oracle"]
SIMULATED_POLICIES: tuple[str, ...] = get_args(SimulatedPolicy)
_OBJECTIVE = ObjectiveSpec()
MAX_CLUSTER_GPUS = 1_000_000  # the largest cluster (or job) taken: more is a typo or a unit error, not a cluster
MAX_HORIZON_HOURS = 24 * 14  # the longest forecast, backtest or plan horizon: two weeks of hours


def existing_file(value: Path | None) -> Path | None:
    """A credentials file named in the configuration: checked with it, so a typo is a bad request (exit 2)."""
    if value is not None and not value.is_file():
        raise ValueError(f"{value} is not a file")
    return value


class Strict(BaseModel):
    # NaN and infinity are refused in every number: no setting means "forever" or "unknown"
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=True)


# items checked one by one, so each error names its item's index (forecast.quantiles.1), then the list's order
Quantile = Annotated[float, Field(gt=0, lt=1)]
WarmBuffer = Annotated[float, Field(ge=0, le=100)]
BufferQuantile = Annotated[float, Field(ge=0, lt=1)]  # 0: the fixed warm buffer alone
MarginGpus = Annotated[int, Field(ge=0)]


def _increasing(values: list[float]) -> list[float]:
    for before, after in zip(values, values[1:]):
        if not before < after:
            raise ValueError(f"must be strictly increasing ({before:g} then {after:g})")
    return values


def shown_url(url: str) -> str:
    """`url` as a message shows it: its password (basic auth, user:password@host) as ***, since messages reach logs,
    Events and policies' status."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return urlunsplit(parts._replace(netloc=f"{parts.username}:***@{parts.netloc.rpartition('@')[2]}"))


class PrometheusServer(Strict):
    """How to reach Prometheus (the query comes from the history section or from each policy)."""
    url: str
    lookback: DurationText = LOOKBACK
    step: DurationText = "5m"
    bearer_token_file: FilePath | None = None
    ca_file: FilePath | None = None
    insecure_skip_verify: bool = False
    timeout_seconds: float = Field(30.0, gt=0)
    retries: int = Field(3, ge=0, le=10)

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"{shown_url(value)!r} is not an http:// or https:// URL")
        try:
            parts.port  # noqa: B018 -- reading it checks it
        except ValueError:  # http://host:9O90 failed at the first read, exit 1, as a server that failed
            raise ValueError(f"{shown_url(value)!r}: the port is not a number from 0 to 65535") from None
        if parts.query or parts.fragment:  # the API's path was appended to them: HTML came back, "Expecting value"
            raise ValueError(f"{shown_url(value)!r}: the server's URL (a path prefix, if any) takes no ?query or "
                             "#fragment")
        if "/api/v1" in parts.path:  # an API URL pasted from a curl line: the API's path went on after it, a 404
            raise ValueError(f"{shown_url(value)!r}: give the server's URL (with its path prefix, if any), not its "
                             "API's: headroom adds /api/v1/query_range")
        return value

    @field_validator("bearer_token_file", "ca_file")
    @classmethod
    def _readable(cls, value: Path | None) -> Path | None:
        return existing_file(value)

    @field_validator("lookback", "step")
    @classmethod
    def _duration(cls, value: str) -> str:
        if duration(value) <= duration("0s"):
            raise ValueError(f"{value} is not a positive duration")
        return value

    @field_validator("step")
    @classmethod
    def _step(cls, value: str) -> str:
        # a range query's step is sent in whole seconds (1500ms went as 1s: chunks sized for 1.5 s held more points
        # than the server allows; 500ms as 0s, refused), a step over the forecast's hour has nothing to aggregate,
        # and one that does not divide the hour puts 1 or 2 steps (45m), 8 or 9 (7m), in an hour: an hourly sum of
        # them read 16 % (45m), 3 % (7m) over the real one
        step = duration(value)
        if step > duration("0s") and (step % duration("1s") or not duration("1s") <= step <= duration("1h")
                                      or duration("1h") % step):
            raise ValueError(f"{value}: the step of a range query is whole seconds from 1s to 1h that divide the hour "
                             "(e.g. 30s, 1m, 5m, 15m)")
        return value


class PrometheusConfig(PrometheusServer):
    query: str = Field(min_length=1)  # an empty one went to the server, exit 1, as a server that failed
    end: Time | None = None  # the history ends here (e.g. to replay a past week); default: now

    @field_validator("end")
    @classmethod
    def _zoned(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("give the time zone, e.g. 2026-05-04T00:00:00Z")
        return value


class HistoryConfig(Strict, CrossChecked):
    file: FilePath | None = None
    prometheus: PrometheusConfig | None = None
    statistic: str = "mean"
    step: DurationText = "1h"
    counter: bool | None = None  # None: a gauge unless its values only rise (refused as a counter: say which it is)
    outlier_factor: float | None = Field(3.0, gt=1)

    @field_validator("statistic")
    @classmethod
    def _statistic(cls, value: str) -> str:
        return check_statistic(value)

    @field_validator("step")
    @classmethod
    def _hourly(cls, value: str) -> str:
        if duration(value) != duration("1h"):
            raise ValueError(f"{value}: the forecast step is 1h (the forecasters' seasons are counted in hours)")
        return value

    @classmethod
    def cross_checks(cls) -> list[CrossCheck]:
        return [CrossCheck(("file", "prometheus"), lambda file, prom: "give either file or prometheus, not both"
                           if file is not None and prom is not None else None)]


class ForecastConfig(Strict):
    horizon: int = Field(48, ge=1, le=MAX_HORIZON_HOURS)
    quantiles: list[Quantile] = Field(default_factory=lambda: [0.5, 0.9, 0.99], min_length=1)
    # the wall-clock hours `forecast`, `backtest` and `train` count seasons in (a policy's spec.timezone)
    timezone: str = PolicySpec.model_fields["timezone"].default

    @field_validator("timezone")
    @classmethod
    def _timezone(cls, value: str) -> str:
        return check_timezone(value)

    @field_validator("quantiles")
    @classmethod
    def _q(cls, values: list[float]) -> list[float]:
        return _increasing(values)


class BacktestConfig(Strict):
    horizon: int = Field(24, ge=1, le=MAX_HORIZON_HOURS)
    folds: int = Field(7, ge=1, le=365)
    step: int = Field(24, ge=1)


class WorldSettings(Strict):
    """The simulated cluster around the controller (adapters.embedded): what real clusters take time for."""
    warmup_seconds: float = Field(180.0, ge=0, le=3600)  # a new replica serves this long after it gets GPUs
    # a training job's checkpoint + termination, uniform; at most an hour, as warm-up (the oracle's lead covers both)
    preemption_seconds: Annotated[tuple[float, float], StrictTypes(False)] = (30.0, 120.0)
    checkpoint_interval_seconds: float = Field(1800.0, gt=0)
    backlog_job_gpus: Annotated[tuple[int, ...], StrictTypes(False)] = (1, 1, 2, 4, 8)
    backlog_job_hours: Annotated[tuple[float, float], StrictTypes(False)] = (1.0, 8.0)
    hpa_scale_down_seconds: float = Field(300.0, ge=0)   # the HPA's scale-down stabilization window
    # the ClusterQueues whose spec.queueingStrategy is StrictFIFO (the others BestEffortFIFO, Kueue's default)
    strict_fifo_queues: Annotated[tuple[str, ...], StrictTypes(False)] = ()
    seed: int = Field(0, ge=0)  # numpy's generators take no negative seed

    @field_validator("preemption_seconds")
    @classmethod
    def _preemption(cls, pair: tuple[float, float]) -> tuple[float, float]:
        if not 0 <= pair[0] <= pair[1] <= 3600:
            raise ValueError("preemption_seconds must be [low, high] with 0 <= low <= high <= 3600")
        return pair

    @field_validator("backlog_job_gpus")
    @classmethod
    def _gpus(cls, sizes: tuple[int, ...]) -> tuple[int, ...]:
        if not sizes or min(sizes) < 1:
            raise ValueError("backlog_job_gpus must be whole GPUs, at least 1")
        return sizes

    @field_validator("backlog_job_hours")
    @classmethod
    def _hours(cls, pair: tuple[float, float]) -> tuple[float, float]:
        if not 0 < pair[0] <= pair[1]:
            raise ValueError("backlog_job_hours must be [low, high] with 0 < low <= high")
        return pair


class SimulateConfig(Strict):
    """`simulate`, `tune`, `report`: the simulated cluster and what it replays."""
    gpus: int = Field(128, ge=1, le=MAX_CLUSTER_GPUS)
    # the trace's scale: its 99.9th percentile is peak_gpus GPUs, unless per_gpu (the demand one GPU serves) is given
    peak_gpus: float = Field(100, gt=0)
    per_gpu: float | None = Field(None, gt=0)
    policy: SimulatedPolicy = "forecast"
    policy_file: FilePath | None = None   # a ReservationPolicy manifest to run exactly (default: tuned on the history)
    days: float = Field(7, gt=0, le=3660)
    jobs: FilePath | None = None  # a training job trace, replayed instead of the backlog (and by the embedded run)
    world: WorldSettings = WorldSettings()

    @model_validator(mode="after")
    def _one_scale(self) -> SimulateConfig:
        if self.per_gpu is not None and "peak_gpus" in self.model_fields_set:
            raise ValueError("give peak_gpus or per_gpu, not both (per_gpu would win)")
        return self


class TuneConfig(Strict):
    """`tune`: the objective and the grid of the policy's own fields it sweeps on the history."""
    max_shortage: float = Field(_OBJECTIVE.max_shortage, ge=0, le=1)
    max_short_steps: float = Field(_OBJECTIVE.max_short_steps, ge=0, le=1)
    target_quantiles: list[Quantile] = Field(default_factory=lambda: [0.5, 0.7, 0.8, 0.9, 0.95], min_length=1)
    warm_buffers: list[WarmBuffer] = Field(
        default_factory=lambda: [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0], min_length=1)
    # None: the objective's level (1 - max_short_steps); 0: the fixed warm buffer alone
    warm_buffer_quantiles: list[BufferQuantile | None] = Field(default_factory=lambda: list[float | None]([None]),
                                                               min_length=1)
    scale_in_delays: list[DurationText] = Field(default_factory=lambda: ["10m"], min_length=1)
    lead_times: list[DurationText] = Field(default_factory=lambda: ["15m"], min_length=1)
    margins_gpus: list[MarginGpus] = Field(default_factory=lambda: [0, 1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64],
                                           min_length=1)
    forecasters: list[Forecaster] = Field(default_factory=lambda: list[Forecaster](["auto"]), min_length=1)

    @field_validator("target_quantiles", "warm_buffers", "margins_gpus")
    @classmethod
    def _sorted(cls, values: list[float]) -> list[float]:
        return _increasing(values)

    @field_validator("scale_in_delays", "lead_times")
    @classmethod
    def _durations(cls, values: list[str]) -> list[str]:
        return [policy_duration(v) for v in values]  # each is written into the manifest tune writes


# A series name: a policy's namespace.name (Kubernetes' names: a namespace of up to 63 characters, a policy of up to
# 253), or the one a training is given. MLflow and the file system hold it as held_series_name says.
SERIES_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,316}$"
SERIES_NAME_HELD_WHOLE = 100


def held_series_name(series: str) -> str:
    """The name a series is held under in MLflow (its experiment, registered model and training lease) and in file
    names (a sqlite store's lock, the forecast log's folder): the series itself up to SERIES_NAME_HELD_WHOLE
    characters, else its first 83 and the first 16 hex digits of its SHA-256, 100 in all. MLflow keeps a registered
    model's and an experiment's name in a 256-character column (PostgreSQL and MySQL refuse more; sqlite takes it) and
    a file name is at most 255 bytes: a policy's series may be 317 characters."""
    if len(series) <= SERIES_NAME_HELD_WHOLE:
        return series
    digest = hashlib.sha256(series.encode()).hexdigest()[:16]
    return f"{series[:SERIES_NAME_HELD_WHOLE - len(digest) - 1]}-{digest}"


class TrainingSeries(Strict):
    name: str = Field(pattern=SERIES_NAME_PATTERN)
    file: FilePath


class TrainingConfig(Strict):
    # else MLFLOW_TRACKING_URI, else sqlite:///<cwd>/mlflow.db; never "" (an unset variable's expansion: not a default)
    tracking_uri: TrackingUri | None = None
    name: str | None = Field(None, pattern=SERIES_NAME_PATTERN)  # series name when training from history.*
    series: list[TrainingSeries] = []
    # `auto` alone: the champion is the forecaster the benchmarks measure and `headroom simulate` replays, so a
    # retraining never changes what `headroom run` serves. More candidates: the training picks among them by objective
    candidates: list[str] = Field(default_factory=lambda: ["auto"], min_length=1)
    objective: Literal["mase", "pinball"] = "mase"
    target_quantile: float = Field(0.9, gt=0, lt=1)
    promotion_margin: float = Field(0.02, ge=0, lt=1)
    lock_ttl_seconds: float = Field(7200, gt=0)
    drift_factor: float = Field(1.5, gt=1)
    drift_window: int = Field(24, ge=1)

    @field_validator("series")
    @classmethod
    def _one_entry_per_name(cls, series: list[TrainingSeries]) -> list[TrainingSeries]:
        twice = sorted(n for n, k in Counter(s.name for s in series).items() if k > 1)
        if twice:  # each name is one experiment and one registered model
            raise ValueError(f"series {', '.join(map(repr, twice))} given more than once")
        return series


class EmbeddedPolicy(Strict):
    """A policy of the embedded cluster: the ReservationPolicy's name and spec, and the file its demand query is
    answered from."""
    name: str = Field(pattern=NAME_PATTERN)
    namespace: str = Field("default", pattern=NAME_PATTERN)
    history_file: FilePath
    spec: PolicySpec


def duplicate_policies(policies: list[EmbeddedPolicy]) -> str | None:
    """Two policies of one namespace/name, or two scaling one target, would undo each other's decisions."""
    names = Counter((p.namespace, p.name) for p in policies)
    targets = Counter(p.spec.target.ref(p.namespace) for p in policies)
    errors = [f"policy {namespace}/{name} is given {n} times" for (namespace, name), n in names.items() if n > 1]
    errors += [f"{t.kind} {t.name} is the target of {n} policies" for t, n in targets.items() if n > 1]
    return "; ".join(errors) or None


def _ip_address(value: str) -> str:
    import ipaddress

    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise ValueError(f"{value!r} is not an IP address (0.0.0.0: every interface, 127.0.0.1: this machine)") \
            from None
    return value


class LeaseConfig(Strict):
    namespace: str = Field("headroom-system", pattern=NAME_PATTERN)
    name: str = "headroom"
    duration_seconds: int = Field(15, ge=2, le=2**31 - 1)  # the Lease stores it as an int32


class RunConfig(Strict, CrossChecked):
    """`headroom run`: the long-running controller."""
    cluster: Literal["simulated", "kubernetes"] = "simulated"
    kubeconfig: FilePath | None = None   # kubernetes: this file; unset: a pod's own credentials, else $KUBECONFIG's
    namespace: str | None = Field(None, pattern=NAME_PATTERN)  # watch policies in one namespace (default: all)
    capacity_gpus: int = Field(128, ge=1, le=MAX_CLUSTER_GPUS)
    non_lendable_gpus: int = Field(0, ge=0)
    interval_seconds: float = Field(60, gt=0)
    # the forecast's and the plan's hours; a leadTime beyond them is planned on last week's same-hour peaks
    horizon_hours: int = Field(24, ge=2, le=MAX_HORIZON_HOURS)
    prometheus: PrometheusServer | None = None
    # demand older than this is stale: fall back. At most a week: older demand is the fallback's past, not demand now
    # (a larger bound read a 9-day-old sample as the demand now)
    stale_after_seconds: float = Field(1800, gt=0, le=WEEK_SECONDS)
    keep_forecast_seconds: float = Field(7200, gt=0)  # a fetch failure keeps the last good forecast this long
    metrics_port: int = Field(9108, ge=0, le=65535)
    # the address /metrics listens on: every interface by default (in a pod, the pod's own; the NetworkPolicy in
    # deploy/base admits only the monitoring namespace), 127.0.0.1 to keep it on the machine
    metrics_address: str = "0.0.0.0"
    lease: LeaseConfig = LeaseConfig()
    forecast_log_dir: FilePath = Path("headroom-forecasts")
    # MLflow: champion models, realized error, retraining (default: training.tracking_uri)
    tracking_uri: TrackingUri | None = None
    retrain_every_seconds: float = Field(86400, ge=0)  # 0: never on a schedule (drift still recommends)
    team_weights: dict[str, PositiveFloat] = {}   # training ClusterQueue -> share of the slack (default equal)
    policies: list[EmbeddedPolicy] = []

    @field_validator("metrics_address")
    @classmethod
    def _address(cls, value: str) -> str:
        return _ip_address(value)

    @field_validator("kubeconfig")
    @classmethod
    def _kubeconfig(cls, value: Path | None) -> Path | None:
        return existing_file(value)

    @classmethod
    def cross_checks(cls) -> list[CrossCheck]:
        return [
            CrossCheck(("cluster", "prometheus"), lambda cluster, prom: "the simulated cluster reads each policy's "
                       "history_file; remove prometheus" if cluster == "simulated" and prom is not None else None),
            # a flag (--kubeconfig, --in-cluster) makes it kubernetes, and no flag gives the URL: say where it goes
            CrossCheck(("cluster", "prometheus"), lambda cluster, prom: "a kubernetes controller (--kubeconfig, "
                       "--in-cluster or run.cluster: kubernetes) reads its policies' spec.query from Prometheus: set "
                       "run.prometheus.url in the --config file (no flag sets it)"
                       if cluster == "kubernetes" and prom is None else None),
            CrossCheck(("policies",), duplicate_policies),
            CrossCheck(("non_lendable_gpus", "capacity_gpus"), lambda non, cap: "non_lendable_gpus must leave some of "
                       "capacity_gpus to lend" if non >= cap else None),
        ]


class Config(Strict):
    history: HistoryConfig = HistoryConfig()
    forecast: ForecastConfig = ForecastConfig()
    backtest: BacktestConfig = BacktestConfig()
    simulate: SimulateConfig = SimulateConfig()
    tune: TuneConfig = TuneConfig()
    training: TrainingConfig = TrainingConfig()
    run: RunConfig = RunConfig()
