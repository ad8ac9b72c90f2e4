"""`headroom train`: the configured series, trained and tracked in MLflow."""
from __future__ import annotations

import contextlib
import json
import re
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from adapters.mlflow import Tracker, TrackingError, TrainingLocked
from adapters.prometheus import PrometheusError
from cli.config import Config
from cli.progress import stage_printer
from cli.sources import load_series
from core.errors import BadRequest
from core.settings import SERIES_NAME_PATTERN
from forecast.clock import local_hours
from forecast.global_model import GlobalPool, GlobalSettings
from forecast.history import HistoryError, no_history_file
from training.pipeline import (
    FailedAfterPromoting,
    StoppedAfterPromoting,
    TrainingError,
    TrainSettings,
    train_series,
)


def settings_from_config(cfg: Config) -> TrainSettings:
    """The training the configuration asks for: backtest.*, forecast.quantiles, history's cleaning and training.*."""
    bt, t = cfg.backtest, cfg.training
    return TrainSettings(horizon=bt.horizon, folds=bt.folds, step=bt.step, quantiles=tuple(cfg.forecast.quantiles),
                         statistic=cfg.history.statistic, outlier_factor=cfg.history.outlier_factor,
                         candidates=tuple(t.candidates), objective=t.objective, target_quantile=t.target_quantile,
                         promotion_margin=t.promotion_margin, lock_ttl_seconds=t.lock_ttl_seconds)


def _load_all(jobs: list[tuple[str, str, Callable[[], pd.Series]]]) -> dict[str, pd.Series]:
    """Every series that loads, for the model learned across them (one that fails is reported by its training)."""
    out = {}
    for name, _, load in jobs:
        try:
            out[name] = load()
        except (HistoryError, OSError):
            continue
    return out


def cmd_train(cfg, args) -> int:
    """`headroom train [--config FILE] [--history FILE --name SERIES] [--tracking-uri URI] [--force]`: on stdout one
    JSON result, or a list of them, one per entry of training.series.

    Exit 0 all trained, 1 a training failed (store or Prometheus down, unusable data, locked; or failed after its
    promotion, which stands), 2 no history to train on, 128 + the signal's number when stopped (130 Ctrl-C, 143
    SIGTERM); the champion of a series that failed before its promotion is untouched.
    """
    now = datetime.now(UTC)
    t = cfg.training
    uri = getattr(args, "tracking_uri", None) or t.tracking_uri
    settings = settings_from_config(cfg)
    jobs: list[tuple[str, str, Callable[[], pd.Series]]] = []  # series name, where its history is, its loader
    listed = False  # stdout: a JSON list (training.series) or the one series' object
    h = cfg.history

    def on_the_clock(config) -> pd.Series:
        """The history as read (train_series clips what each fit has by its own bound) on forecast.timezone's
        wall-clock hours: candidates are backtested and fitted on the hours the controller's seasonal clock
        (forecast.clock) serves them on."""
        as_read = config.model_copy(update={"history": config.history.model_copy(update={"outlier_factor": None})})
        return local_hours(load_series(as_read, now)[0], cfg.forecast.timezone)

    def from_file(path, field: str):
        # The configured cleaning, applied to this file instead of history.file.
        if why := no_history_file(Path(path)):  # named by the field that gave it, not as history.file
            raise BadRequest(f"{field} {path}: {why}")
        one = cfg.model_copy(update={"history": h.model_copy(update={"file": Path(path), "prometheus": None})})
        return lambda: on_the_clock(one)

    if getattr(args, "history", None):
        name = getattr(args, "name", None) or Path(args.history).stem
        # only a file's name can be one: --name is checked as configured; fullmatch: '$' matches before a last newline
        if not re.fullmatch(SERIES_NAME_PATTERN, name):
            raise BadRequest(f"--history {args.history}: its file name {name!r} is no series name (a letter or digit, "
                             "then letters, digits, '_', '.' or '-'): give one with --name")
        jobs.append((name, args.history, from_file(args.history, "--history")))
    elif t.series:
        if getattr(args, "name", None):  # it would name nothing: each entry of training.series has its own name
            raise BadRequest(f"--name {args.name}: training.series names each series it trains; --name names the one "
                             "of --history FILE (or of history.file / history.prometheus without training.series)")
        for k, s in enumerate(t.series):
            jobs.append((s.name, str(s.file), from_file(s.file, f"training.series[{k}].file")))
        listed = True  # one result per entry, a list however many: a script's parsing does not turn on the count
    elif h.file is None and h.prometheus is None:
        raise BadRequest("no history: give --history FILE (with --name), or training.series, history.file or "
                         "history.prometheus in --config")
    else:
        where = str(h.file or h.prometheus.query)
        jobs.append((getattr(args, "name", None) or t.name or "demand", where,
                     lambda: on_the_clock(cfg)))
    tracker = Tracker(uri)
    print(f"MLflow store: {tracker.shown}", file=sys.stderr)  # where to look (a flag, the file, the env or ./mlflow.db)
    status, out = 0, []
    say = stage_printer("train")  # on stderr: stdout is the JSON
    with _stopped_by_sigterm():
        try:
            loaded = _load_all(jobs) if len(jobs) > 1 else {}
            pool = GlobalPool(loaded, GlobalSettings(horizon=settings.horizon), settings.outlier_factor) \
                if len(loaded) > 1 else None
            # several series asked for it (README): say why it is missing rather than train without it silently
            unpooled = (f"the model learned across series is not trained: it needs two series that load, and "
                        f"{len(loaded)} of the {len(jobs)} did" if len(jobs) > 1 and pool is None else None)
            for name, where, load in jobs:
                try:
                    result = train_series(name, loaded[name] if name in loaded else load(), settings, tracker, now,
                                          pool=pool, progress=say, timezone=cfg.forecast.timezone,
                                          force=args.force)
                    if unpooled:
                        result.notes.append(unpooled)
                    out.append(result.to_json())
                    # the flag is this command's: the demo and the controller's retraining give the same reason
                    force = " (--force trains again)" if result.already_trained else ""
                    print(f"{name}: {result.selected} {result.objective}={result.score:.4f} {result.outcome}{force}",
                          file=sys.stderr)
                    for note in result.notes:
                        print(f"note: {name}: {note}", file=sys.stderr)
                except FailedAfterPromoting as exc:  # the commit point was passed: said as a stop after it is
                    status = 1
                    out.append(_promoted_then(name, where, exc.version, f"failed: {exc.cause}"))
                except (TrackingError, TrainingError, TrainingLocked, HistoryError, PrometheusError, OSError) as exc:
                    status = 1
                    out.append({"name": name, "history": where, "error": f"{type(exc).__name__}: {exc}"})
                    print(f"{name} ({where}): training failed: {exc}", file=sys.stderr)
                except Exception as exc:  # noqa: BLE001 - a defect met on one series stays with it: the others train
                    status = 1
                    out.append({"name": name, "history": where,
                                "error": f"internal error: {type(exc).__name__}: {exc}"})
                    print(f"{name} ({where}): training failed with an internal error (a defect: please report it):",
                          file=sys.stderr)
                    traceback.print_exc(file=sys.stderr)
        except KeyboardInterrupt as exc:
            # train_series has ended its runs (KILLED, or FINISHED if it promoted its model) and released its lock
            why = f"stopped by {exc}" if str(exc) else "interrupted"
            if isinstance(exc, StoppedAfterPromoting):  # the commit point was passed: the series' training did its work
                where = next(where for name, where, _ in jobs if name == exc.series)
                out.append(_promoted_then(exc.series, where, exc.version, why))
            done = {o["name"] for o in out}
            if unfinished := [(name, where) for name, where, _ in jobs if name not in done]:
                out += [{"name": name, "history": where, "error": why} for name, where in unfinished]
                print(f"training {why} before {', '.join(name for name, _ in unfinished)} finished (its runs are "
                      "marked KILLED): retrain", file=sys.stderr)
            status = 128 + (signal.Signals[str(exc)] if str(exc) else signal.SIGINT)  # as any command stopped
    print(json.dumps(out if listed else out[0], indent=2))
    return status


def _promoted_then(name: str, where: str, version: str, what: str) -> dict:
    """A series whose training passed its commit point (the new version serves) and then stopped or failed: said on
    stderr, and its JSON row."""
    print(f"{name}: v{version} PROMOTED, then {what} (its run ends FINISHED, headroom.cut_short)", file=sys.stderr)
    return {"name": name, "history": where, "version": version, "promoted": True, "status": f"promoted, then {what}"}


@contextlib.contextmanager
def _stopped_by_sigterm() -> Iterator[None]:
    """SIGTERM (how Kubernetes stops the training's pod) as Ctrl-C: the training unwinds, ends its runs and
    releases its lease instead of dying on the spot (a lease left on a tracking server refuses the Job's retry)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
