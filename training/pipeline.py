"""Train one series: rolling-origin backtest of every candidate, pick by objective, refit, track, promote.

A training only ever *adds* to the store (runs, a model version); the
"champion" alias moves last, after everything else succeeded, and only when
the new model beats the current champion re-scored on the same folds by
`promotion_margin`. So a failed training never replaces a working champion.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import re
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from adapters.mlflow import Tracker, TrackingError, experiment_name, registered_name
from core import units
from core.errors import interrupt_inside, raise_interrupt_inside
from core.settings import MAX_HORIZON_HOURS, SERIES_NAME_PATTERN, TrainingConfig
from forecast.backtest import (
    POOLED,
    AutoForecaster,
    clipped_before,
    fallback_note,
    null_scores,
    pinball_key,
    score_folds,
    summarize,
    unscored_note,
)
from forecast.base import Forecaster, check_quantile_frame
from forecast.calibrate import Calibrated
from forecast.calibrate import origins as fold_origins
from forecast.global_model import GlobalForecaster, GlobalPool
from forecast.history import clip_outliers
from forecast.metrics import finite_or_none, seasonal_scale
from forecast.models import MODELS
from training.realized import accuracy_run, time_axis

if TYPE_CHECKING:
    from matplotlib.figure import Figure

DAY = 24
_DEFAULTS = TrainingConfig()  # the configuration's defaults are the library's (one definition of each)
log = logging.getLogger(__name__)
LEARNED_ACROSS = "global"  # scored and logged beside the candidates, never promoted: why is NOT_SERVED
NOT_SERVED = ("learned across series, never promoted: the controller refits each series alone, so it could not serve "
              "the model scored")
_NAME = re.compile(SERIES_NAME_PATTERN)


class TrainingError(RuntimeError):
    """The training could not produce a usable model (the champion is untouched)."""


class ModelRefused(TrainingError):
    """A registered model version that cannot be trusted or read: the reason names what is wrong."""


class StoppedAfterPromoting(KeyboardInterrupt):
    """A stop (SIGINT, SIGTERM; its message the signal's name, as the stop's) that cut short a training of `series`
    after it promoted `version`: the promotion stands (the run ends FINISHED, headroom.cut_short), the rest did not
    run."""

    def __init__(self, stop: BaseException, series: str, version: str):
        super().__init__(*stop.args)
        self.series, self.version = series, version


class FailedAfterPromoting(RuntimeError):
    """A failure (`cause`, its type and message) that cut short a training of `series` after it promoted `version`:
    the promotion stands (the run ends FINISHED, headroom.cut_short), the rest did not run."""

    def __init__(self, failure: Exception, series: str, version: str):
        self.series, self.version, self.cause = series, version, f"{type(failure).__name__}: {failure}"
        super().__init__(f"{series}: v{version} promoted, then failed: {self.cause}")


MODEL_FORMAT = "headroom.model/v1"
CARD_SHA_TAG = "headroom.card_sha256"
TRAINING_KEY_TAG = "headroom.training_key"  # a training run's inputs but the champion (training_key)
TRAINING_KINDS = ("training", "candidate")  # headroom.kind of a training's runs (the accuracy run lives on)
FORCED_TAG = "headroom.forced"  # "true": trained though an earlier training had the same key (train --force)
# on a version: the hour its training's points sit at on the accuracy run (training.realized.time_axis)
FIRST_HOUR_TAG = "headroom.first_forecast_hour"
# a training's verdict, on the version it registers (from birth) and on its run
VERDICT_TAGS = ("headroom.promoted", "headroom.reason", "headroom.champion_version")
# The code that makes a model: the forecasters and the backtest that picks one (forecast/), the training (training/)
MODEL_CODE = (Path(__file__).resolve().parents[1] / "forecast", Path(__file__).resolve().parent)


class ModelCard(BaseModel):
    """A trained model as data: which forecaster (a name in forecast.models.MODELS), what it was trained on and how
    well it did. The controller refits the named forecaster on fresh history every hour, so nothing fitted (and
    nothing executable) needs to be stored; a card is validated when it is loaded."""
    # strict: a type the training never writes (a `true` or "24" horizon, a NaN score) is a card changed by hand
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)
    format: str
    series: str
    model: str
    horizon: int = Field(ge=1, le=MAX_HORIZON_HOURS)  # auto's inner backtest horizon (backtest.horizon's bounds)
    quantiles: list[float]
    objective: str
    score: float | None
    backtest_mase: float | None
    scale: float | None
    trained_at: str
    history_start: str
    history_end: str
    history_points: int
    history_sha256: str
    candidates: list[str] = []   # `auto` only: the models its inner backtest chooses among

    @field_validator("format")
    @classmethod
    def _format(cls, value: str) -> str:
        if value != MODEL_FORMAT:
            raise ValueError(f"unknown model format {value!r} (this headroom reads {MODEL_FORMAT})")
        return value

    def to_bytes(self) -> bytes:
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":")).encode()



@dataclass(frozen=True)
class Champion:
    """The registry's champion of a series: its card, version and version tags."""
    card: ModelCard
    version: str
    tags: Mapping[str, str]

    def make(self) -> Forecaster:
        """A fresh, unfitted forecaster of the card's kind (the controller fits it on fresh history)."""
        if self.card.model == "auto":
            return _auto(self.card.candidates, self.card.horizon)()
        return MODELS[self.card.model]()


def read_card(raw: bytes, expected_sha256: str | None,
              known: Mapping[str, Callable[[], Forecaster]] = MODELS) -> ModelCard:
    """A model card from its stored bytes: checksum against the registry's tag, then JSON, then the schema, then
    the forecaster it names must be one of `known`."""
    digest = hashlib.sha256(raw).hexdigest()
    if not expected_sha256:
        raise ModelRefused(f"the version has no {CARD_SHA_TAG} tag (a model not written by this headroom, or a "
                           "pickled model from an older one: retrain)")
    if digest != expected_sha256:
        raise ModelRefused(f"model card checksum {digest[:12]} does not match the registry's {expected_sha256[:12]} "
                           "(the artifact was changed after it was registered)")
    try:
        card = ModelCard.model_validate_json(raw)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'card'}: {e['msg']}" for e in exc.errors())
        raise ModelRefused(f"invalid model card: {problems}") from None
    unknown = [m for m in [card.model, *card.candidates] if m not in known and m != "auto"]
    if unknown:
        raise ModelRefused(f"the card names unknown forecaster(s) {unknown} (known: {', '.join(known)})")
    if "auto" in card.candidates:
        raise ModelRefused("the card's candidates (what auto chooses among) name auto itself")
    return card


@dataclass(frozen=True)
class TrainSettings:
    horizon: int = 24
    folds: int = 4
    step: int = 24
    candidates: tuple[str, ...] = tuple(_DEFAULTS.candidates)
    objective: str = _DEFAULTS.objective                  # "mase" or "pinball" (at target_quantile)
    target_quantile: float = _DEFAULTS.target_quantile
    promotion_margin: float = _DEFAULTS.promotion_margin  # new must score < champion * (1 - margin)
    quantiles: tuple[float, ...] = (0.5, 0.9, 0.99)
    statistic: str = "mean"
    lock_ttl_seconds: float = _DEFAULTS.lock_ttl_seconds
    # the series is given as read; each fit clips the hours it has by their own bound (None: nothing clipped)
    outlier_factor: float | None = None

    def __post_init__(self):
        if self.objective not in ("mase", "pinball"):
            raise ValueError(f"objective must be 'mase' or 'pinball', got {self.objective!r}")
        if not 0 < self.target_quantile < 1:
            raise ValueError("target_quantile must be strictly between 0 and 1")
        if not 0 <= self.promotion_margin < 1:
            raise ValueError("promotion_margin must be in [0, 1)")

    @property
    def objective_key(self) -> str:
        return "mase" if self.objective == "mase" else pinball_key(self.target_quantile)


@dataclass
class TrainResult:
    name: str
    run_id: str
    experiment_id: str
    selected: str
    objective: str
    score: float
    scores: dict[str, dict[str, float]]
    version: str
    promoted: bool
    reason: str
    champion_version: str | None = None
    champion_score: float | None = None
    origins: list[str] = field(default_factory=list)
    failed_candidates: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # fallbacks, folds without actuals, a better global not served
    model: Any = None
    already_trained: bool = False  # an earlier training's result: the same inputs against the same champion
    forced: bool = False  # trained whatever an earlier training with the same inputs did (train --force)

    @property
    def outcome(self) -> str:
        """What the training did, as said to its user: the version it made and whether it serves, or the earlier
        training it is."""
        if self.already_trained:
            return self.reason
        return f"-> v{self.version} {'PROMOTED' if self.promoted else 'not promoted'}: {self.reason}"

    def to_json(self) -> dict:
        out = asdict(self)
        out.pop("model")
        # a score that is not finite (a champion that could not be re-scored) is null: NaN is not JSON
        return json.loads(json.dumps(out, default=lambda v: None), parse_constant=lambda _: None)


def _score(make: Callable[[], Forecaster], series: pd.Series, clipped: pd.Series, origins: Sequence[int],
           settings: TrainSettings, progress: Callable[[int], None] | None = None) -> list[dict]:
    """forecast.backtest's per-fold evaluation, with the pinball loss at the objective's quantile: each fold fits the
    hours as read before its origin clipped by their own bound, and is scored against the whole series `clipped`
    (by its bound), so that a glitch does not pick the champion."""
    return score_folds(make, series, origins, settings.horizon, settings.quantiles, settings.target_quantile,
                       progress=progress, outlier_factor=settings.outlier_factor, actuals=clipped)


def series_sha256(series: pd.Series) -> str:
    h = hashlib.sha256()
    h.update(series.index.asi8.tobytes())
    h.update(series.to_numpy(dtype=float).tobytes())
    return h.hexdigest()


@functools.cache
def code_digest(roots: tuple[Path, ...] = MODEL_CODE) -> str:
    """The code a model comes from: every Python source under `roots` (by path and content), the versions of the
    distributions headroom requires (numpy, pandas, statsmodels, scikit-learn fit the models: an upgrade changes a fit
    as an edit does) and Python's. The package's version is no such mark: it stays 0.1.0 as the code changes. Read
    once a process (some 200 KB, a few milliseconds)."""
    h = hashlib.sha256()
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            source = path.read_bytes()
            h.update(f"{root.name}/{path.relative_to(root).as_posix()} {len(source)}\n".encode())
            h.update(source)
    required = [r for r in metadata.requires("headroom") or () if "extra" not in r]  # "numpy>=1.26": its name
    for name in sorted(re.split(r"[^A-Za-z0-9._-]", r, maxsplit=1)[0] for r in required):
        try:
            h.update(f"{name}=={metadata.version(name)}\n".encode())
        except metadata.PackageNotFoundError:
            h.update(f"{name} absent\n".encode())
    h.update(sys.version.encode())
    return h.hexdigest()


def training_key(series: pd.Series, settings: TrainSettings, timezone: str, pool: GlobalPool | None,
                 code: str) -> str:
    """What a training's outcome turns on, the champion it is judged against aside: the history, the settings, the
    clock, the series trained beside it (the model learned across them) and the code that trains (code_digest)."""
    inputs = {"history": series_sha256(series.astype(float)), "settings": asdict(settings), "timezone": timezone,
              "pool": None if pool is None else {k: series_sha256(v.astype(float)) for k, v in pool.series.items()},
              "format": MODEL_FORMAT, "code": code}
    return hashlib.sha256(json.dumps(inputs, sort_keys=True, default=str).encode()).hexdigest()


def _trained_before(tracker: Tracker, experiment: str, name: str, key: str,
                    known: Mapping[str, Callable[[], Forecaster]]) -> tuple[TrainResult | None, str | None]:
    """(the earlier training on the same inputs, if it is what this one would do: judged against the champion of
    now, or made it, whose card can still be re-scored; else None and, if there was one, why this one trains again).
    A re-run adds no run, version or accuracy point for what is there already."""
    run = tracker.last_finished(experiment, TRAINING_KEY_TAG, key)
    tags, params = ({}, {}) if run is None else (run.data.tags, run.data.params)
    if not {"headroom.version", "headroom.promoted", "headroom.reason"} <= tags.keys() or \
            not {"candidates", "model", "objective"} <= params.keys():  # none, or not one this code finished
        return None, None
    version, then = tags["headroom.version"], tags.get("headroom.champion_version", "")
    current = tracker.champion(registered_name(name))
    champion = "" if current is None else str(current.version)
    before = f"trained on this history, these settings and this code before as v{version}"
    if champion != version and (tags["headroom.promoted"] == "true" or then != champion):
        judged = f"champion v{then}" if then else "no champion"
        return None, (f"{before}, against {judged}; the champion is now {f'v{champion}' if champion else 'none'}: "
                      "trained again against it")
    if current is not None:  # a champion whose card is gone or changed since is beaten now: not what was done then
        try:
            read_card(tracker.load_model_card(current.run_id), current.tags.get(CARD_SHA_TAG), known)
        except (TrackingError, ModelRefused) as exc:
            return None, f"{before}; champion v{champion} cannot be re-scored now ({exc}): trained again"
    candidates = params["candidates"].split(",")
    scores = {c: {k.removeprefix(f"{c}."): v for k, v in run.data.metrics.items() if k.startswith(f"{c}.")}
              for c in candidates}
    scores = {c: s for c, s in scores.items() if s}  # a candidate that failed logged none
    selected, objective = params["model"], params["objective"]
    score = scores.get(selected, {}).get(objective, float("nan"))
    state = "the champion" if champion == version else f"not promoted: {tags['headroom.reason']}"
    return TrainResult(name=name, run_id=run.info.run_id, experiment_id=experiment, selected=selected,
                       objective=objective, score=score, scores=scores, version=version,
                       promoted=False, reason=f"already trained on this history, these settings and this code: "
                                          f"v{version} ({state}); nothing new is logged",
                       champion_version=champion or None, already_trained=True), None


def _hyperparameters(model: Any) -> dict[str, Any]:
    out = {}
    for k, v in vars(model).items():
        if not k.startswith("_") and not k.endswith("_") and isinstance(v, (int, float, str, bool, tuple)):
            out[f"hp.{k}"] = v
    return out


# What the forecast plot draws for the last backtest fold and the forecast alike: the median, and the 80% interval
# whose coverage the backtest reports (coverage_80: the share of actuals within q0.1 to q0.9)
PLOTTED_QUANTILES = (0.1, 0.5, 0.9)


def forecast_figure(history: pd.Series, fold_frame: pd.DataFrame, future: pd.DataFrame, title: str, statistic: str,
                    coverage_80: float, clock: str = units.UTC) -> Figure:
    """The last week of `history` with the last backtest fold's and the forecast's median and 80% interval (frames
    holding PLOTTED_QUANTILES), as a matplotlib Figure. `clock`: the wall clock the timestamps are on."""
    import matplotlib.figure  # not pyplot: no global figure to close, no backend to choose

    lo, mid, hi = PLOTTED_QUANTILES
    fig = matplotlib.figure.Figure(figsize=(11, 4))
    ax = fig.subplots()
    tail = history.iloc[-7 * DAY:]
    ax.plot(tail.index, tail.to_numpy(), color="black", lw=1, label="actual")
    covered = f"backtest coverage_80 {coverage_80:.0%}" if np.isfinite(coverage_80) else "no backtest coverage_80"
    for frame, color, label in ((fold_frame, "tab:orange", "last backtest fold"), (future, "tab:blue", "forecast")):
        ax.fill_between(frame.index, frame[lo], frame[hi], color=color, alpha=0.25,
                        label=f"{label} q{lo:g} to q{hi:g} (80% interval; {covered})")
        ax.plot(frame.index, frame[mid], color=color, lw=1.5, label=f"{label} q{mid:g}")
    ax.set_title(title)
    # matplotlib draws timestamps in UTC (rcParams timezone); a history on another zone's wall clock (local_hours)
    # is labelled UTC, so its hours are drawn as that zone's
    ax.set_xlabel("time (UTC)" if clock == units.UTC else f"time ({clock} wall clock)")
    ax.set_ylabel(f"demand (hourly {statistic}, the history's units)")
    ax.legend(loc="upper left", fontsize=8)
    fig.autofmt_xdate()
    fig.tight_layout()
    return fig


def _inner_candidates(candidates: Sequence[str]) -> list[str]:
    """What `auto` (forecast.backtest's inner-backtest selector) chooses among when trained as a candidate."""
    return [c for c in candidates if c not in ("auto", "ensemble")]


def _auto(candidates: Sequence[str], horizon: int) -> Callable[[], Forecaster]:
    return lambda: AutoForecaster(candidates=list(candidates) or "fast", horizon=horizon)


def _factories(candidates: Sequence[str], factories: Mapping[str, Callable[[], Forecaster]] | None,
               horizon: int = DAY):
    factories = MODELS if factories is None else factories
    if "auto" in candidates and "auto" not in factories:
        factories = {**factories, "auto": _auto(_inner_candidates(candidates), horizon)}
    missing = [c for c in candidates if c not in factories]
    if missing:
        raise TrainingError(f"unknown candidate models {missing}; known: {sorted(factories)}")
    return {c: factories[c] for c in candidates}


def _global_candidate(name: str, pool: GlobalPool | None, horizon: int) -> dict[str, Callable[[], Forecaster]]:
    """The model learned across series (forecast/global_model.py), where several are trained together: scored on
    the same folds as every candidate and logged to MLflow beside them, never promoted (`LEARNED_ACROSS`)."""
    if pool is None or len(pool.series) < 2:
        log.debug("%s: the global model is not offered: it learns across series and this training has one", name)
        return {}
    return {LEARNED_ACROSS: lambda: Calibrated(GlobalForecaster(pool, name), horizon=horizon)}


def train_series(name: str, series: pd.Series, settings: TrainSettings, tracker: Tracker,
                 now: datetime | None = None,
                 factories: Mapping[str, Callable[[], Forecaster]] | None = None,
                 pool: GlobalPool | None = None, progress: Callable[[str], None] | None = None,
                 timezone: str = units.UTC, force: bool = False,
                 code_roots: tuple[Path, ...] = MODEL_CODE) -> TrainResult:
    """Backtest, select, refit, log to MLflow, register a version, maybe promote it to champion. `pool`: the series
    trained together (this one among them), for the global candidate; `progress`: told each candidate's folds as
    they are scored (the global model refits across every series at each origin: minutes a series); `timezone`: the
    clock whose wall-clock hours label the series (cli.train fits on forecast.timezone's, forecast.clock.local_hours).
    An earlier training on the same history, settings and code (`code_roots`' code_digest), judged against the same
    champion, is returned as it was, logging nothing; `force` trains again whatever it did.

    On the series' time axis (training.realized.time_axis) the training's scores sit at the first hour its model
    forecasts, the hour after the history's last, and each fold's at its origin, in UTC: the forecast's time, beside
    the live accuracy of those hours, not the wall clock `now` it ran at (a history from a file may end long before)."""
    if not _NAME.fullmatch(name):  # not match: its '$' matches before a last newline, which the configuration refuses
        raise TrainingError(f"series name {name!r} must match {_NAME.pattern}")
    now = now or datetime.now(UTC)
    makers = {**_factories(settings.candidates, factories, settings.horizon),
              **_global_candidate(name, pool, settings.horizon)}
    series = series.astype(float)
    origins = fold_origins(len(series), settings.horizon, settings.folds, settings.step)
    if not origins:
        raise TrainingError(f"{name}: {len(series)} hourly points; a backtest needs two days to fit plus the "
                            f"{settings.horizon} h horizon to score ({2 * DAY + settings.horizon} points at least)")
    tracker.connect()  # TrackingError before any work
    with tracker.lock(name, settings.lock_ttl_seconds):
        exp = tracker.experiment(experiment_name(name))
        # under the lock no other training of the series runs: one still RUNNING lost the store or its process
        abandoned, _ = _end_unfinished(tracker, exp, name, "FAILED", "abandoned: its training lost the tracking "
                                       "store or was killed before it could end the run")
        if abandoned:
            log.warning("%s: marked %d abandoned run(s) FAILED: %s", name, len(abandoned), ", ".join(abandoned))
        key = training_key(series, settings, timezone, pool, code_digest(code_roots))
        earlier, again = _trained_before(tracker, exp, name, key, {**MODELS, **makers})
        if earlier is not None and not force:
            earlier.origins = [_on_utc(series.index[o], timezone).isoformat() for o in origins]
            return earlier
        if earlier is not None:
            again = f"forced (--force): trained again, as v{earlier.version} was on this history, these settings and " \
                "this code"
        with _not_left_running(tracker, exp, name):
            parent = tracker.start_run(exp, f"train-{now:%Y%m%dT%H%M%SZ}", tags={
                "headroom.kind": "training", "headroom.series": name, TRAINING_KEY_TAG: key,
                FORCED_TAG: str(force).lower()})
            result = _train(name, series, settings, tracker, now, timezone, makers, origins, exp, parent, progress)
            result.notes += [again] if again else []
            result.forced = force
            tracker.end_run(parent, "FINISHED")
        return result


@contextlib.contextmanager
def _not_left_running(tracker: Tracker, exp: str, series: str) -> Iterator[None]:
    """A stop (SIGINT, SIGTERM) or a failure inside the block ends this training's runs in experiment `exp` as
    _end_unfinished does, KILLED or FAILED, never left RUNNING; the original is raised, a stop after the promotion as
    StoppedAfterPromoting and a failure after it as FailedAfterPromoting (neither was of the promotion). Its runs (and
    versions) are found in the store, not by the ids the training was told: a stop landing while a run is created (the
    store has made it, its id is not back yet) leaves a run no id names. Under the series' lock every other such run
    was ended before."""
    try:
        yield
    except BaseException as exc:
        promoted = None
        with contextlib.suppress(Exception):  # the original failure is the one reported
            _, promoted = _end_unfinished(tracker, exp, series, "FAILED" if isinstance(exc, Exception) else "KILLED",
                                          f"{type(exc).__name__}: {exc}")
        if promoted is not None and isinstance(exc, KeyboardInterrupt):
            raise StoppedAfterPromoting(exc, series, promoted) from exc
        if promoted is not None and isinstance(exc, Exception):
            raise FailedAfterPromoting(exc, series, promoted) from exc
        raise


def _first_hour(registered: str, version) -> pd.Timestamp | None:
    """The hour a version's model first forecast (its FIRST_HOUR_TAG); None if it has none, or if the tag (no checksum
    covers it) was edited to no time with a zone: said, and its `promoted` point is not logged rather than logged at
    a wrong hour."""
    text = version.tags.get(FIRST_HOUR_TAG)
    if not text:
        return None
    try:
        hour = pd.Timestamp(text)
    except ValueError:
        hour = pd.NaT
    if pd.isna(hour) or hour.tzinfo is None:
        log.warning("%s: v%s's %s tag is %r, no time with a zone: its promoted point is not logged", registered,
                    version.version, FIRST_HOUR_TAG, text)
        return None
    return hour


def _end_unfinished(tracker: Tracker, exp: str, series: str, status: str,
                    why: str) -> tuple[list[str], str | None]:
    """End the training runs left RUNNING in experiment `exp` (a training stopped, failed or gone) `status`, `why` in
    their headroom.error tag; their ids, and the version one of them promoted (None: none did). The promotion is a
    training's commit point: one whose version is the champion of series `series` (the controller serves it) did what
    it is for, and ends FINISHED with its verdict, saying what cut its end short, its `promoted` 1 on the accuracy run
    logged if it had not been; one that registered a version to promote and did not promote it tags the version not
    promoted and why (it read as a model judged and kept, and the next training registers another)."""
    registered, running = registered_name(series), tracker.running(exp, TRAINING_KINDS)
    promoted, finished = None, set()
    for run_id in (run_id for run_id, kind in running.items() if kind == "training"):
        versions = tracker.versions_of_run(registered, run_id)
        champion = tracker.champion(registered) if versions else None  # read only where a version may be it
        for version in versions:
            if champion is not None and str(version.version) == str(champion.version):
                log.warning("%s: v%s was promoted before its training was cut short (%s): its run ends FINISHED",
                            registered, version.version, why)
                if (hour := _first_hour(registered, version)) is not None:  # before the run ends: else no one logs it
                    tracker.log_metrics(accuracy_run(tracker, series), [("promoted", 1.0, *time_axis(hour))])
                tracker.set_tags(run_id, {"headroom.version": str(version.version),
                                          **{k: v for k, v in version.tags.items() if k in VERDICT_TAGS},
                                          "headroom.cut_short": f"after promoting v{version.version}: {why}"})
                tracker.end_run(run_id, "FINISHED")
                promoted = str(version.version)
                finished.add(run_id)
            elif version.tags.get("headroom.promoted") != "false":
                log.warning("%s: v%s is abandoned: its training was cut short before promoting it (%s)",
                            registered, version.version, why)
                tracker.set_version_tags(registered, str(version.version), {
                    "headroom.promoted": "false",
                    "headroom.outcome": f"abandoned: its training was cut short before promoting it ({why})"})
    unfinished = [run_id for run_id in running if run_id not in finished]
    tracker.end_runs(unfinished, status, why)
    return unfinished, promoted


def _on_utc(wall: pd.Timestamp, zone: str) -> pd.Timestamp:
    """The UTC hour of a wall-clock hour of `zone` labelled UTC (as forecast.clock.local_hours labels them, floored:
    the UTC hour starts within it, at its start in a zone a whole number of hours off UTC)."""
    local = wall.tz_localize(None).tz_localize(zone, ambiguous=True, nonexistent="shift_forward")
    return local.tz_convert(UTC).ceil("h")


def _train(name, series, settings, tracker, now, timezone, makers, origins, exp, parent, progress=None) -> TrainResult:
    key = settings.objective_key
    first_hour = _on_utc(series.index[-1] + pd.Timedelta(hours=1), timezone)  # the first its model forecasts
    at = time_axis(first_hour)

    def per_fold_metrics(rows: list[dict], keys) -> list[tuple[str, float, int, int]]:
        """Each fold's scores at its origin's hour: the backtest as accuracy over time."""
        return [(f"fold_{k}", r[k], *time_axis(_on_utc(pd.Timestamp(r["origin"]), timezone)))
                for r in rows for k in keys]

    factor = settings.outlier_factor  # the champion fits, and every candidate is scored against, the series clipped
    clipped, outliers = (series, []) if factor is None else clip_outliers(series, factor)
    per_fold: dict[str, list[dict]] = {}
    failed: dict[str, str] = {}
    for cand, make in makers.items():
        child = tracker.start_run(exp, cand, parent=parent, tags={
            "headroom.kind": "candidate", **({"headroom.not_served": NOT_SERVED} if cand == LEARNED_ACROSS else {})})
        try:
            tick = None if progress is None else (
                lambda i, cand=cand: progress(f"{name}: {cand} fold {i}/{len(origins)} scored"))
            rows = _score(make, series, clipped, origins, settings, tick)
        except BaseException as exc:  # noqa: BLE001 - one bad candidate is not a failed training
            if (stop := interrupt_inside(exc)) is not None:  # SIGINT, SIGTERM: the training stops, not the candidate
                raise stop from None
            failed[cand] = f"{type(exc).__name__}: {exc}"
            tracker.set_tags(child, {"headroom.error": failed[cand]})
            tracker.end_run(child, "FAILED")
            continue
        per_fold[cand] = rows
        summary = summarize(rows)
        tracker.log_params(child, {"model": cand, **_hyperparameters(make())})
        tracker.log_metrics(child, [(k, v, *at) for k, v in summary.items()] + per_fold_metrics(rows, summary))
        tracker.end_run(child)
    if not per_fold:
        raise TrainingError(f"{name}: every candidate failed: {failed}")
    scores = {c: summarize(rows) for c, rows in per_fold.items()}
    servable = [c for c in scores if c != LEARNED_ACROSS]
    if not servable:
        raise TrainingError(f"{name}: every candidate the controller can serve failed: {failed}")
    winner = min(servable, key=lambda c: scores[c][key] if np.isfinite(scores[c][key]) else float("inf"))
    if not np.isfinite(scores[winner][key]):
        # the scores' own reason, before each fold's origin (a history idle until its last day has none either)
        why = null_scores(clipped.to_numpy(dtype=float), origins, settings.horizon)
        raise TrainingError(f"{name}: no candidate has a finite {key}" + (f": {why[0]}: there is nothing to train"
                                                                          if why else ""))

    model = makers[winner]().fit(clipped)
    future = model.predict(settings.horizon, list(settings.quantiles))
    notes = [note for cand, rows in per_fold.items() if (note := fallback_note(cand, rows))]
    if note := unscored_note(clipped, origins, settings.horizon):
        notes.append(note)
    if outliers:
        notes.append(f"{len(outliers)} outliers clipped (over {factor:g}x the 99th percentile of the whole series; "
                     "each fold fitted its hours before its origin clipped by their own bound)")
    if scores.get(LEARNED_ACROSS, {}).get(key, np.inf) < scores[winner][key]:
        notes.append(f"{LEARNED_ACROSS} scored a lower {key} than {winner} "
                     f"({scores[LEARNED_ACROSS][key]:.4g} against {scores[winner][key]:.4g}): {NOT_SERVED}")
    if reason := getattr(model, "fallback_reason", None):
        notes.append(f"{winner} fitted on the whole history: fallback to seasonal naive ({reason})")
    check_quantile_frame(future, settings.horizon, list(settings.quantiles))
    scale = seasonal_scale(clipped.to_numpy(dtype=float), DAY)

    span = {"history_start": _on_utc(series.index[0], timezone).isoformat(),
            "history_end": _on_utc(series.index[-1], timezone).isoformat(),
            "history_points": len(series), "history_sha256": series_sha256(clipped)}
    tracker.log_params(parent, {"model": winner, **_hyperparameters(model), "horizon": settings.horizon,
                                "statistic": settings.statistic, "quantiles": ",".join(map(str, settings.quantiles)),
                                "objective": key, "folds": len(origins), "fold_step": settings.step,
                                "promotion_margin": settings.promotion_margin,
                                "candidates": ",".join(makers), **span})
    metrics: list[tuple[str, float, int, int | None]] = []
    for cand, s in scores.items():
        metrics += [(f"{cand}.{k}", v, *at) for k, v in s.items()]
    metrics += per_fold_metrics(per_fold[winner], scores[winner])
    metrics += [(k, scores[winner][k], *at) for k in scores[winner]]
    tracker.log_metrics(parent, metrics)

    champ_name = registered_name(name)
    card = ModelCard(format=MODEL_FORMAT, series=name, model=winner, horizon=settings.horizon,
                     quantiles=list(settings.quantiles), objective=key, score=finite_or_none(scores[winner][key]),
                     backtest_mase=finite_or_none(scores[winner]["mase"]), scale=finite_or_none(scale),
                     trained_at=now.isoformat(),
                     candidates=_inner_candidates(settings.candidates) if winner == "auto" else [], **span).to_bytes()
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        table = pd.DataFrame([{"model": c, **r} for c, rs in per_fold.items() for r in rs])
        table.to_csv(tmp / "backtest_folds.csv", index=False)
        pd.DataFrame(scores).T.rename_axis("model").to_csv(tmp / "backtest.csv")
        last = origins[-1]
        # one interval for both, whatever settings.quantiles holds (at 0.5, 0.9, 0.99 the forecast's band was q0.5
        # to q0.9 beside the fold's q0.1 to q0.9)
        fold_frame = makers[winner]().fit(clipped_before(series, last, factor)).predict(
            settings.horizon, list(PLOTTED_QUANTILES))
        fig = forecast_figure(clipped, fold_frame, model.predict(settings.horizon, list(PLOTTED_QUANTILES)),
                              f"{name}: {winner} ({key} {scores[winner][key]:.3f})", settings.statistic,
                              scores[winner]["coverage_80"], timezone)
        fig.savefig(tmp / "forecast_vs_actual.png", dpi=90)
        future.to_csv(tmp / "forecast.csv", index_label="timestamp")
        for f in ("backtest.csv", "backtest_folds.csv", "forecast_vs_actual.png", "forecast.csv"):
            tracker.log_artifact(parent, tmp / f)
    source = tracker.log_model(parent, card)

    # Re-score the current champion on exactly these folds, then decide.
    current = tracker.champion(champ_name)
    champ_score, champ_version = None, None
    if current is None:
        promote, reason = True, "no champion yet"
    else:
        champ_version = str(current.version)
        try:
            try:
                raw = tracker.load_model_card(current.run_id)
            except TrackingError as exc:
                tracker.connect()  # the store answers (else TrackingError: the training fails, the champion stays)
                # ... so the card itself is unreadable: the controller refuses this champion, so must the promotion
                raise ModelRefused(f"cannot read its model card: {exc}") from None
            current_card = read_card(raw, current.tags.get(CARD_SHA_TAG), known={**MODELS, **makers})
            champion = Champion(current_card, str(current.version), {})
            make = makers.get(current_card.model, champion.make) if current_card.model != "auto" else champion.make
            champ_rows = _score(make, series, clipped, origins, settings)
            champ_score = summarize(champ_rows)[key]
        except TrackingError:
            raise
        except Exception as exc:  # noqa: BLE001 - an unscorable champion is beaten by a scorable one
            raise_interrupt_inside(exc)
            champ_score = float("nan")
            reason_fail = f"champion v{champ_version} could not be re-scored: {type(exc).__name__}: {exc}"
        else:
            reason_fail = ""
        new = scores[winner][key]
        if not np.isfinite(champ_score):
            promote, reason = True, reason_fail or f"champion v{champ_version} {key} is not finite"
        else:
            bar = champ_score * (1 - settings.promotion_margin)
            promote = new < bar
            verdict = "beats" if promote else "does not beat"
            reason = (f"{winner} {key}={new:.4f} {verdict} champion v{champ_version} {key}={champ_score:.4f} "
                      f"by margin {settings.promotion_margin:g} (needs < {bar:.4f}) on the same {len(origins)} folds")
    verdict_tags = dict(zip(VERDICT_TAGS, (str(promote).lower(), reason, champ_version or ""), strict=True))
    # the verdict is made with the version, in one request: a version no stop can leave without its reason
    version = tracker.create_version(champ_name, source, parent, tags={
        "headroom.model": winner, "headroom.objective": key, "headroom.score": f"{scores[winner][key]:.6g}",
        "headroom.backtest_mase": f"{scores[winner]['mase']:.6g}", "headroom.scale": f"{scale:.6g}",
        "headroom.history_sha256": span["history_sha256"], "headroom.history_end": span["history_end"],
        FIRST_HOUR_TAG: first_hour.isoformat(),
        CARD_SHA_TAG: hashlib.sha256(card).hexdigest(), **verdict_tags,
        "headroom.champion_score": "" if champ_score is None else f"{champ_score:.6g}"})
    # on the series' time axis beside the live accuracy: each training's backtest, and whether it serves
    accuracy = accuracy_run(tracker, name)
    tracker.log_metrics(accuracy, [
        *((f"backtest_{k}", scores[winner][k], *at) for k in ("mase", *POOLED)),
        (f"champion_rescored_{key}", champ_score, *at), *([] if promote else [("promoted", 0.0, *at)])])
    if promote:  # last, the commit point: a training cut short before this changed no champion (_end_unfinished)
        tracker.promote(champ_name, version)
        tracker.log_metrics(accuracy, [("promoted", 1.0, *at)])  # once the alias moved: not said before it is so
    tracker.set_tags(parent, {"headroom.version": version, **verdict_tags})
    return TrainResult(name=name, run_id=parent, experiment_id=exp, selected=winner, objective=key,
                       score=scores[winner][key], scores=scores, version=version, promoted=promote, reason=reason,
                       champion_version=champ_version, champion_score=champ_score,
                       origins=[_on_utc(series.index[o], timezone).isoformat() for o in origins],
                       failed_candidates=failed, notes=notes,
                       model=model)


def load_champion(name: str, tracking_uri: str | None = None) -> Champion:
    """The champion of series `name`, from the URI alone. TrainingError if there is none, ModelRefused (with the
    reason) if its card is unreadable, tampered with or invalid, TrackingError if the store cannot be reached."""
    tracker = Tracker(tracking_uri).connect()
    mv = tracker.champion(registered_name(name))
    if mv is None:
        raise TrainingError(f"no champion for series {name!r} in {tracker.shown} "
                            f"(registered model {registered_name(name)})")
    tags = dict(mv.tags)
    try:
        raw = tracker.load_model_card(mv.run_id)
    except TrackingError as exc:
        raise ModelRefused(f"champion v{mv.version}: cannot read its model card: {exc}") from None
    try:
        card = read_card(raw, tags.get(CARD_SHA_TAG))
    except ModelRefused as exc:
        raise ModelRefused(f"champion v{mv.version} refused: {exc}") from None
    return Champion(card, str(mv.version), tags)
