"""Demand history: read it, check it, clean it, aggregate it to the forecast step.

Sources follow one small interface (`HistorySource.fetch() -> pd.Series`): a
CSV/Parquet file is the embedded default, Prometheus the real one
(adapters/prometheus.py). Whatever the source, `prepare()` turns the raw
samples into a regular series at the forecast step and reports every repair.
"""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np
import pandas as pd

from core.units import check_statistic


class HistoryError(ValueError):
    """Unusable history; the message names the file and line where it can."""


class HistorySource(Protocol):
    def fetch(self) -> pd.Series:
        """Raw samples: float values on a tz-aware UTC DatetimeIndex, NaN = missing."""
        ...


@dataclass(frozen=True)
class FileSource:
    path: Path

    def fetch(self) -> pd.Series:
        return load_history(self.path)


def _parse_timestamp(text: str) -> pd.Timestamp:
    text = text.strip()
    try:
        seconds = float(text)
    except ValueError:
        stamp = pd.Timestamp(text)
        if stamp.tzinfo is None:
            raise ValueError(f"timestamp {text!r} has no time zone (use ISO-8601 with Z or an offset, or epoch seconds)")
        return stamp.tz_convert("UTC")
    if not math.isfinite(seconds):
        raise ValueError(f"timestamp {text!r} is not a number of seconds")
    return pd.Timestamp(seconds, unit="s", tz="UTC")


def _parse_value(text: str) -> float:
    text = text.strip()
    if text == "" or text.lower() in {"nan", "na", "null"}:
        return float("nan")  # missing data, never zero
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"value {text!r} is infinite")
    return value


def _read_csv(path: Path) -> pd.Series:
    stamps, values = [], []
    with path.open(newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if header is None:
            raise HistoryError(f"{path}: file is empty (expected a header 'timestamp,value')")
        names = [h.strip().lower() for h in header]
        if "timestamp" not in names or "value" not in names:
            raise HistoryError(f"{path}:1: header must name columns 'timestamp' and 'value', got {header}")
        t_col, v_col = names.index("timestamp"), names.index("value")
        for row in reader:
            line = reader.line_num
            if not row or all(not cell.strip() for cell in row):
                continue
            if len(row) != len(names):
                raise HistoryError(f"{path}:{line}: expected {len(names)} fields, got {len(row)}: {row}")
            try:
                stamps.append(_parse_timestamp(row[t_col]))
                values.append(_parse_value(row[v_col]))
            except ValueError as exc:
                raise HistoryError(f"{path}:{line}: {exc}") from None
    if not stamps:
        raise HistoryError(f"{path}: no data rows")
    return pd.Series(values, index=pd.DatetimeIndex(stamps, name="timestamp"), name="value", dtype=float)


def _read_parquet(path: Path) -> pd.Series:
    frame = pd.read_parquet(path)
    missing = {"timestamp", "value"} - set(frame.columns)
    if missing:
        raise HistoryError(f"{path}: missing columns {sorted(missing)}")
    stamps = frame["timestamp"]
    if pd.api.types.is_numeric_dtype(stamps):
        index = pd.to_datetime(stamps, unit="s", utc=True)
    elif pd.api.types.is_datetime64_any_dtype(stamps) and getattr(stamps.dt, "tz", None) is None:
        raise HistoryError(f"{path}: column 'timestamp' has no time zone")
    else:
        index = pd.to_datetime(stamps, utc=True)
    values = pd.to_numeric(frame["value"], errors="coerce").to_numpy(dtype=float)
    bad = np.flatnonzero(frame["value"].notna().to_numpy() & np.isnan(values))
    if len(bad):
        raise HistoryError(f"{path}: row {bad[0]}: value {frame['value'].iloc[bad[0]]!r} is not a number")
    return pd.Series(values, index=pd.DatetimeIndex(index, name="timestamp"), name="value")


def load_history(path: str | Path) -> pd.Series:
    """Read `timestamp,value` samples from CSV or Parquet, in file order."""
    path = Path(path)
    if not path.is_file():
        raise HistoryError(f"{path}: no such file")
    if path.suffix.lower() in {".parquet", ".pq"}:
        return _read_parquet(path)
    return _read_csv(path)


@dataclass
class CleaningReport:
    """What `prepare` repaired, so nothing happens silently."""
    input_points: int = 0
    input_step: str = ""
    out_of_order: int = 0
    duplicates: int = 0
    counter_resets: int = 0
    outliers: list[str] = field(default_factory=list)
    missing_steps: int = 0
    output_points: int = 0

    def lines(self) -> list[str]:
        return [
            f"{self.input_points} samples at step {self.input_step} -> {self.output_points} points",
            f"{self.out_of_order} out-of-order, {self.duplicates} duplicate timestamps",
            f"{self.counter_resets} counter resets, {len(self.outliers)} outliers clipped",
            f"{self.missing_steps} missing points (kept missing, never scored)",
        ]


def _aggregate(series: pd.Series, step: pd.Timedelta, statistic: str) -> pd.Series:
    bins = series.resample(step, origin="epoch")
    if statistic == "mean":
        out = bins.mean()
    elif statistic == "max":
        out = bins.max()
    elif statistic == "sum":
        out = bins.sum(min_count=1)  # an empty bin is missing, not zero
    else:
        out = bins.quantile(float(statistic[1:]) / 100.0)
    return out.asfreq(step)


def _undo_counter_resets(series: pd.Series, report: CleaningReport) -> pd.Series:
    """Cumulative counter -> increments; after a reset the new value is the increment (as PromQL's increase())."""
    values = series.to_numpy(dtype=float)
    prev = pd.Series(values).ffill().shift(1).to_numpy()
    delta = values - prev
    resets = delta < 0
    report.counter_resets = int(resets.sum())
    delta[resets] = values[resets]
    return pd.Series(delta, index=series.index).iloc[1:]


def _clip_outliers(series: pd.Series, factor: float, report: CleaningReport) -> pd.Series:
    """Clip glitches: values over `factor` x the series' own 99th percentile.

    A global bound on purpose: demand with near-zero night hours makes any
    local rule clip real morning ramps. Clipping (not deleting) keeps the point
    as demand, only less extreme.
    """
    limit = factor * float(series.quantile(0.99))
    over = (series > limit).to_numpy()
    report.outliers = [ts.isoformat() for ts in series.index[over]]
    return series.clip(upper=limit) if limit > 0 else series


def prepare(raw: pd.Series, step: str = "1h", statistic: str = "mean",
            counter: bool = False, outlier_factor: float | None = 3.0) -> tuple[pd.Series, CleaningReport]:
    """Raw samples -> a regular series at `step` (tz-aware UTC, freq set, NaN = missing)."""
    check_statistic(statistic)
    report = CleaningReport(input_points=len(raw))
    if raw.index.tz is None:
        raise HistoryError("timestamps must be time-zone aware")
    series = raw.astype(float)
    series.index = series.index.tz_convert("UTC")
    if not series.index.is_monotonic_increasing:
        report.out_of_order = int((series.index.to_series().diff() < pd.Timedelta(0)).sum())
        series = series.sort_index(kind="stable")
    dup = series.index.duplicated(keep="last")
    report.duplicates = int(dup.sum())
    series = series[~dup]  # the later sample of a timestamp is the correction
    if series.notna().sum() < 2:
        raise HistoryError("history has fewer than two real values")
    target = pd.Timedelta(step)
    input_step = series.index.to_series().diff().median()
    report.input_step = str(input_step)
    if input_step > target:
        raise HistoryError(f"history step {input_step} is coarser than the forecast step {target}")
    if not pd.Timedelta("1s") <= input_step <= pd.Timedelta("1h"):
        raise HistoryError(f"history step {input_step} is outside 1 s .. 1 h")
    if counter:
        series = _undo_counter_resets(series, report)
    if (series < 0).any():
        raise HistoryError(f"{int((series < 0).sum())} negative demand values (is this a counter? use counter: true)")
    series = _aggregate(series, target, statistic)
    if outlier_factor is not None:
        series = _clip_outliers(series, outlier_factor, report)
    series.name = "demand"
    report.missing_steps = int(series.isna().sum())
    report.output_points = len(series)
    return series, report


def at_own_step(raw: pd.Series) -> pd.Series:
    """Sorted, deduplicated samples on a regular index at the history's own step, gaps kept (for replay)."""
    step = raw.sort_index().index.to_series().diff().median()
    return prepare(raw, step=str(step), statistic="mean", outlier_factor=None)[0]
