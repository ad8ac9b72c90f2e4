"""Accuracy over time: forecasts issued earlier vs the actuals that arrived since.

For each issued forecast and each horizon h (default 1, 6, 24 hours ahead) the
target is the h-th hour from the one it was issued in (issued at 08:00 or 08:05, 1
hour ahead is 08:00-09:00: a forecast's first step is the hour after the complete
hours it was fitted on, as a backtest fold's first step is its origin's hour), read
by its time, not by its row: a forecast whose last complete hours were missing
begins before its issue hour (controller.observe.issue lengthens it by them). Once
its actual is known we record the absolute
error of the median, that error scaled by a seasonal-24 scale (so it is
comparable with the backtest MASE: the forecast's own fitting window's, which it
carries as `frame.attrs[SCALE]`, as the backtest scales each fold by the window it
fitted on; else the `scale` given, by default the champion's training scale),
whether the actual fell inside the 80% interval (q0.1..q0.9), and whether it was
at or below each quantile the forecast has (the policy's target and headroom
quantiles among them: what is reserved). They go to a long-lived "accuracy" run
per series as metric history on one time axis (`time_axis`: step = hours since
the epoch, timestamp = the target hour), beside the served champion's backtest
MASE at each scored hour and each training's backtest scores at its hour, so
MLflow charts live accuracy against the backtest across retrains and restarts.

Drift: when the mean scaled error over the last `window` targets of a horizon
exceeds `factor` x the backtest MASE, a DriftEvent is returned and logged.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from adapters.mlflow import Tracker, experiment_name, registered_name
from core.cluster import FORECAST_SCALE as SCALE
from core.cluster import FORECAST_TAKEN_UP_BY
from core.files import replace_whole
from core.settings import held_series_name
from forecast.backtest import below_key

HORIZONS = (1, 6, 24)
LAST_TAG = "headroom.accuracy.last_target"
RECOMMENDED_TAG = "headroom.retrain_recommended"  # "true" while the last window drifts
log = logging.getLogger(__name__)
_SAID_BEHIND: set[tuple[str, str]] = set()  # (store, series) whose replay behind the store was said, once a process


@dataclass(frozen=True)
class DriftEvent:
    series: str
    horizon: int
    realized: float      # mean scaled error over the window
    baseline: float      # backtest MASE
    factor: float
    window: int
    at: str              # the latest target time in the window

    @property
    def message(self) -> str:
        return (f"{self.series}: {self.horizon}h-ahead realized scaled error {self.realized:.3f} over the last "
                f"{self.window} targets exceeds {self.factor:g} x backtest MASE {self.baseline:.3f}: "
                "retrain recommended")


FORECAST_FILES = "[0-9]*.csv"  # not a draft core.files leaves beside them (".NAME.….part.csv") when killed
HEADER = "# "  # a forecast file's first lines: "# key: value" per attrs key of its frame (scale, and what it is taken
# up by: core.cluster.FORECAST_TAKEN_UP_BY)


class ForecastLog:
    """Forecasts by issue time: <root>/<series>/<issued_at epoch s>.csv quantile frames (<series>: the folder name
    core.settings.held_series_name gives it, the series itself up to 100 characters)."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def _folder(self, series: str) -> Path:
        return self.root / held_series_name(series)

    def record(self, series: str, issued_at: pd.Timestamp, frame: pd.DataFrame) -> Path:
        folder = self._folder(series)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{int(pd.Timestamp(issued_at).timestamp())}.csv"

        def write(draft: Path) -> None:
            with open(draft, "w") as out:
                if SCALE in frame.attrs:
                    out.write(f"{HEADER}{SCALE}: {float(frame.attrs[SCALE])!r}\n")
                for key in FORECAST_TAKEN_UP_BY:
                    if key in frame.attrs:  # JSON: a model's name on one line whatever it holds
                        out.write(f"{HEADER}{key}: {json.dumps(frame.attrs[key])}\n")
                frame.to_csv(out, index_label="timestamp")

        return replace_whole(path, write)

    def prune(self, series: str, before: pd.Timestamp) -> int:
        """Delete forecasts of `series` issued before `before` (a long-running controller's log stays bounded), and
        its folder once that holds nothing else (every forecast of a policy deleted)."""
        folder = self._folder(series)
        old = [p for p in self._forecasts(series) if int(p.stem) < pd.Timestamp(before).timestamp()]
        for path in old:
            path.unlink()
        # emptied now or before (a record that failed after making it, a prune killed before removing it)
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
        return len(old)

    def _forecasts(self, series: str) -> list[Path]:
        """The files of `series` that `record` names (<issued_at epoch s>.csv), not another beside them (a user's
        2024-notes.csv)."""
        return [p for p in self._folder(series).glob(FORECAST_FILES) if p.stem.isdigit()]

    def load(self, series: str, since: pd.Timestamp | None = None) -> dict[pd.Timestamp, pd.DataFrame]:
        """Forecasts of `series` by issue time (only those issued at or after `since`, if given; a file that does not
        parse is left out, with a warning)."""
        out = {}
        for path in sorted(self._forecasts(series)):
            if since is not None and int(path.stem) < pd.Timestamp(since).timestamp():
                continue
            try:
                with open(path) as text:
                    attrs = _header(text)
                    frame = pd.read_csv(text, index_col="timestamp")
                frame.index = pd.DatetimeIndex(pd.to_datetime(frame.index, utc=True))
                frame.columns = [float(c) for c in frame.columns]
            except ValueError as exc:  # edited or left by another version: it alone is lost, not the hour's refit
                log.warning("%s: the forecast file %s does not parse, left out: %s", series, path, exc)
                continue
            frame.attrs.update(attrs)
            out[pd.Timestamp(int(path.stem), unit="s", tz="UTC")] = frame
        return out


def _header(text) -> dict:
    """The attrs of a forecast file's header lines (ForecastLog.record), read up to its CSV; a line that does not
    parse is left out (the forecast stays readable for realized error)."""
    attrs: dict = {}
    while True:
        at = text.tell()
        line = text.readline()
        if not line.startswith(HEADER):
            text.seek(at)
            return attrs
        key, _, value = line.removeprefix(HEADER).rstrip("\n").partition(": ")
        try:
            attrs[key] = float(value) if key == SCALE else json.loads(value)
        except ValueError:
            continue


def time_axis(at: pd.Timestamp | datetime) -> tuple[int, int]:
    """(step, timestamp in ms) of `at` in MLflow: the step counts hours since the epoch, so every run and every
    restart of a series logs on one axis, never from step 0 again."""
    seconds = pd.Timestamp(at).timestamp()
    return int(seconds // 3600), int(seconds * 1000)


def _col(frame: pd.DataFrame, q: float) -> float | None:
    cols = [float(c) for c in frame.columns]
    return min(cols, key=lambda c: abs(c - q)) if cols else None


def realized_errors(forecasts: Mapping[pd.Timestamp, pd.DataFrame], actuals: pd.Series, scale: float,
                    horizons: Sequence[int] = HORIZONS) -> pd.DataFrame:
    """One row per (issued forecast, horizon) whose target hour (module docstring) the forecast has and whose actual is
    known; the error scaled by the forecast's own fitting window's scale (`frame.attrs[SCALE]`), else by `scale`."""
    rows = []
    actuals = actuals.dropna()
    for issued, frame in sorted(forecasts.items()):
        own = float(frame.attrs.get(SCALE, scale))
        frame = frame[~frame.index.duplicated()]  # a period given twice (a store edited by hand): its first row
        frame.columns = [float(c) for c in frame.columns]
        mid, lo, hi = _col(frame, 0.5), _col(frame, 0.1), _col(frame, 0.9)
        first = pd.Timestamp(issued).floor("h")
        for h in horizons:
            target = first + pd.Timedelta(hours=h - 1)
            if target not in frame.index or target not in actuals.index:
                continue
            actual, row = float(actuals.loc[target]), frame.loc[target]
            point = float(row[mid])
            err = abs(actual - point)
            rows.append({"issued_at": issued, "target": target, "horizon": h, "forecast": point, "actual": actual,
                         "abs_error": err, "scaled_error": err / own if own and np.isfinite(own) else np.nan,
                         "inside_80": float(row[lo] <= actual <= row[hi]),
                         **{below_key(q): float(actual <= row[q]) for q in frame.columns}})
    below = sorted({k for row in rows for k in row if k.startswith("below_q")})  # NaN where a forecast lacks one
    return pd.DataFrame(rows, columns=["issued_at", "target", "horizon", "forecast", "actual", "abs_error",
                                       "scaled_error", "inside_80", *below])


def detect_drift(series: str, errors: pd.DataFrame, baseline: float, factor: float, window: int) -> list[DriftEvent]:
    events: list[DriftEvent] = []
    if not np.isfinite(baseline) or baseline <= 0:
        return events
    for h, group in errors.groupby("horizon"):
        recent = group.sort_values("target").tail(window)
        if len(recent) < window:
            continue
        realized = float(np.nanmean(recent["scaled_error"]))
        if realized > factor * baseline:
            events.append(DriftEvent(series, int(h), realized, float(baseline), factor, window,
                                     recent["target"].iloc[-1].isoformat()))
    return events


def accuracy_run(tracker: Tracker, series: str) -> str:
    """The long-lived accuracy run of a series (created on first use, left RUNNING). Two processes may create it at
    once (the controller and a training): the first created is the series' one, and the other, still empty, is
    deleted, so accuracy over time is never split between two runs."""
    exp = tracker.experiment(experiment_name(series))
    run = tracker.find_run(exp, "headroom.kind", "accuracy")
    if run is not None:
        return run
    mine = tracker.start_run(exp, "accuracy", tags={"headroom.kind": "accuracy", "headroom.series": series})
    first = tracker.find_run(exp, "headroom.kind", "accuracy") or mine
    if first != mine:
        tracker.delete_run(mine)
    return first


def _tag_number(series: str, version: Any, key: str) -> float:
    """The number the champion `version`'s tag `key` holds, else NaN (no drift is judged on it, the live error is
    logged all the same): a tag edited by hand to no number is said, not the end of the series' accuracy logging."""
    text = None if version is None else version.tags.get(key)
    if text is None:
        return float("nan")
    try:
        return float(text)
    except ValueError:
        log.warning("%s: champion v%s's tag %s is %r, no number (the training wrote one): taken as unknown, no drift "
                    "is judged on it", series, version.version, key, text)
        return float("nan")


def log_realized(series: str, forecasts: Mapping[pd.Timestamp, pd.DataFrame], actuals: pd.Series,
                 tracker: Tracker, scale: float | None = None, baseline: float | None = None,
                 factor: float = 1.5, window: int = 24, horizons: Sequence[int] = HORIZONS
                 ) -> tuple[pd.DataFrame, list[DriftEvent]]:
    """Log new realized errors as metric history; return (all errors, drift events).

    `scale`/`baseline` default to the champion version's tags (headroom.scale,
    headroom.backtest_mase); baseline still comes from the champion when only `scale` is given. Targets already
    logged (tag LAST_TAG) are not logged again, so calling this every hour is idempotent.
    """
    tracker.connect()
    if scale is None or baseline is None:
        mv = tracker.champion(registered_name(series))
        scale = scale if scale is not None else _tag_number(series, mv, "headroom.scale")
        baseline = baseline if baseline is not None else _tag_number(series, mv, "headroom.backtest_mase")
    errors = realized_errors(forecasts, actuals, scale, horizons)
    run = accuracy_run(tracker, series)
    current = tracker.run_tags(run)
    last = current.get(LAST_TAG)
    new = errors if last is None else errors[errors["target"] > pd.Timestamp(last)]
    if last is not None and len(errors) and errors["target"].max() < pd.Timestamp(last) and \
            (tracker.uri, series) not in _SAID_BEHIND:  # a clock behind the store: a replay re-run, or of earlier hours
        _SAID_BEHIND.add((tracker.uri, series))
        log.warning("%s: MLflow store %s already holds this series' live accuracy up to %s: no hour before it is "
                    "logged (a re-run's hours are there already, earlier hours stay out), and the trainings at those "
                    "hours add their runs, versions and backtest points beside the earlier ones; to keep a replay's "
                    "record apart, give it a store of its own (run.tracking_uri)", series, tracker.shown, last)
    rows = []
    below = [k for k in new.columns if k.startswith("below_q")]
    for r in new.to_dict("records"):
        step, ts = time_axis(r["target"])
        rows += [(f"{k}_{r['horizon']}h", r[k], step, ts) for k in ("abs_error", "scaled_error", "inside_80", *below)]
    # the baseline beside the live error at each hour: one chart shows the champion's live accuracy vs its backtest
    rows += [("champion_backtest_mase", baseline, *time_axis(t)) for t in new["target"].unique()]
    events = detect_drift(series, errors, baseline, factor, window)
    for e in events:
        rows.append((f"drift_{e.horizon}h", e.realized / e.baseline, *time_axis(pd.Timestamp(e.at))))
    tracker.log_metrics(run, rows)
    tags = {}
    if len(new):
        tags[LAST_TAG] = new["target"].max().isoformat()
    if events or current.get(RECOMMENDED_TAG) == "true":  # a drift that is over is said over, not left "true"
        tags["headroom.drift"] = "; ".join(e.message for e in events) or "none"
        tags[RECOMMENDED_TAG] = str(bool(events)).lower()
    if tags:
        tracker.set_tags(run, tags)
    return errors, events
