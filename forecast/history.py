"""Demand history: read it, check it, clean it, aggregate it to the forecast step.

Sources follow one small interface (`HistorySource.fetch() -> pd.Series`): a
CSV/Parquet file is the embedded default, Prometheus the real one
(adapters/prometheus.py). Whatever the source, `prepare()` turns the raw
samples into a regular series at the forecast step and reports every repair.
"""
from __future__ import annotations

import csv
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Protocol

import numpy as np
import pandas as pd

from core.textfile import HELD, MAX_LINES, BadGzip, TooBig, TooLong, bounded_lines, open_csv
from core.units import check_statistic, go_duration, iso_time


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


# Numeric timestamps are epoch seconds, milliseconds, microseconds or nanoseconds, told apart by magnitude: the unit
# that puts the time between EPOCH_RANGE's bounds. The four ranges do not overlap, so the guess is never ambiguous;
# a number that fits none of them (e.g. seconds since a trace's start, read as 1970) is refused, never guessed.
EPOCH_RANGE = (pd.Timestamp("1990-01-01", tz="UTC"), pd.Timestamp("2200-01-01", tz="UTC"))
EPOCH_UNITS = (("s", "seconds", 1e9), ("ms", "milliseconds", 1e6), ("us", "microseconds", 1e3),
               ("ns", "nanoseconds", 1.0))
# Largest demand value read: a larger one is a unit or parsing error, and sums of it would overflow to infinity
# (NaN quantiles downstream). Far above any request rate or GPU count, below float overflow of any aggregate.
MAX_VALUE = 1e15
# A written-out (ISO-8601) time may be older than epoch numbers are guessed to be, but not outside this range.
ISO_RANGE = (pd.Timestamp("1900-01-01", tz="UTC"), EPOCH_RANGE[1])
# Points of a prepared series: as many as a history file's rows (570 years hourly); more is a wrong timestamp
MAX_POINTS = MAX_LINES
# What a history file too large to read (core.textfile.MAX_LINES) can be given as instead
SMALLER = "give its latest part, or its samples at a coarser step (5 million reach back 57 days at 1 s, a year at 7 s)"


def epoch_unit(number: float) -> str:
    """The unit ("s", "ms", "us" or "ns") whose epoch reading of `number` falls inside EPOCH_RANGE."""
    if not math.isfinite(number):
        raise ValueError(f"timestamp {number!r} is not a finite number")
    lo, hi = (t.value for t in EPOCH_RANGE)  # nanoseconds
    for unit, _, ns in EPOCH_UNITS:
        if lo <= number * ns < hi:
            return unit
    raise ValueError(f"numeric timestamp {number:.17g} is not epoch seconds, milliseconds, microseconds or "
                     f"nanoseconds of a time between {EPOCH_RANGE[0]:%Y} and {EPOCH_RANGE[1]:%Y}")


_UNIT_NAMES = {unit: name for unit, name, _ in EPOCH_UNITS}
_NS_PER_UNIT = {unit: ns for unit, _, ns in EPOCH_UNITS}


def _unit_name(unit: str) -> str:
    return _UNIT_NAMES[unit]


def _read_as(units: set[str]) -> str:
    """How a column's timestamps were read: the epoch unit told by magnitude, else ISO-8601 text."""
    return f"epoch {_unit_name(next(iter(units)))} (told by magnitude)" if units else "ISO-8601"


def _epoch(number: float, unit: str) -> pd.Timestamp:
    ns = _NS_PER_UNIT[unit]
    if number == int(number) and abs(number) < 2 ** 63:
        return pd.Timestamp(int(number) * int(ns), unit="ns", tz="UTC")
    return pd.Timestamp(round(number * ns), unit="ns", tz="UTC")


MISSING_TIMESTAMP = "timestamp is missing"


def _parse_timestamp(text: str, units: set[str]) -> pd.Timestamp:
    """An ISO-8601 time with a zone, or an epoch number (its unit, by magnitude, is added to `units`)."""
    text = text.strip()
    if not text:
        raise ValueError(MISSING_TIMESTAMP)
    try:
        number = float(text)
    except ValueError:
        number = None
    if number is not None:
        unit = epoch_unit(number)
        units.add(unit)
        try:
            return pd.Timestamp(int(text), unit=unit, tz="UTC")  # an integer exactly (nanoseconds overflow a float)
        except ValueError:
            return _epoch(number, unit)
    try:
        stamp = iso_time(text)
    except (ValueError, TypeError, OverflowError):
        raise ValueError(f"timestamp {text!r} is not ISO-8601 (e.g. 2026-05-04T09:00:00Z) nor an epoch number") \
            from None
    if stamp.tzinfo is None:
        raise ValueError(f"timestamp {text!r} has no time zone (use ISO-8601 with Z or an offset, or epoch seconds)")
    return _in_range(stamp.tz_convert("UTC"), text)


def _in_range(stamp: pd.Timestamp, text: object) -> pd.Timestamp:
    if not ISO_RANGE[0] <= stamp < ISO_RANGE[1]:
        raise ValueError(f"timestamp {text!r} is outside {ISO_RANGE[0]:%Y} .. {ISO_RANGE[1]:%Y}")
    return stamp


def check_value(value: float, text: object = None) -> float:
    """A demand value as read: NaN (missing) or finite, >= 0 and <= MAX_VALUE; anything else is refused."""
    shown = repr(text) if text is not None else f"{value!r}"
    if math.isnan(value):
        return value
    if math.isinf(value):
        raise ValueError(f"value {shown} is infinite")
    if value < 0:
        raise ValueError(f"value {shown} is negative: demand cannot be (a counter's raw value never is either)")
    if value > MAX_VALUE:
        raise ValueError(f"value {shown} is over {MAX_VALUE:g}, the largest demand value read (a unit or parsing "
                         "error?)")
    return value


def _parse_value(text: str) -> float:
    text = text.strip()
    if text == "" or text.lower() in {"nan", "na", "null"}:
        return float("nan")  # missing data, never zero
    if text.lower() in {"true", "false"}:
        raise ValueError(f"value {text!r} is a boolean, not a number")
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"value {text!r} is not a number") from None
    return check_value(value, text)


def _one_unit(path: Path, units: set[str], where: str) -> None:
    if len(units) > 1:
        raise HistoryError(f"{path}{where}: numeric timestamps mix epoch "
                           f"{' and '.join(_unit_name(u) for u in sorted(units))}: give one unit")


def _one_series(path: Path, stamps: pd.DatetimeIndex, extra: pd.DataFrame, where: list[str]) -> None:
    """A file holds one series: rows that share a timestamp but differ in another column (`workload`, `model`, a
    label) are several series in one file, and keeping the later of each would silently drop all but one of them.
    `where[k]` names row k ("line 7" of a CSV, "row 6" of a Parquet file)."""
    if extra.empty or not stamps.has_duplicates:
        return
    extra = extra.reset_index(drop=True)
    first = pd.Series(np.arange(len(stamps)), index=stamps).groupby(level=0).transform("first").to_numpy()
    for column in extra.columns:
        cells = extra[column].astype(str).to_numpy()
        differs = np.flatnonzero(cells != cells[first])
        if len(differs):
            k = int(differs[0])
            shown = sorted(set(cells[:100_000].tolist()))
            raise HistoryError(f"{path}: {where[k]}: timestamp {stamps[k].isoformat()} again, with {column} "
                               f"{cells[k]!r} ({where[first[k]]} has {cells[first[k]]!r}): column {column!r} tells "
                               f"several series apart ({', '.join(map(repr, shown[:5]))}"
                               f"{', ...' if len(shown) > 5 else ''}); headroom reads one series per file: give "
                               f"each {column} a file of its own, or the total per timestamp")


# Timestamps read a column at once when every row is one of these (else row by row, which names the bad row): an
# ISO-8601 time with its zone, or an epoch integer. Row by row, a year of 10-second samples took a minute to read.
_ISO_ZONED = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:\d{2})")
_EPOCH_INTEGER = re.compile(r"\d{1,19}")


def _epoch_integers(numbers: np.ndarray) -> tuple[pd.DatetimeIndex, str] | None:
    """Epoch integers read at once in the first one's unit (ValueError: it has none), and that unit; None when any is
    outside that unit's range (in another unit, or out of range: the row-by-row reader names it)."""
    unit = epoch_unit(float(numbers[0]))
    scale = int(_NS_PER_UNIT[unit])
    lo, hi = (t.value // scale for t in EPOCH_RANGE)
    if not ((numbers >= lo) & (numbers < hi)).all():
        return None
    return pd.DatetimeIndex(pd.to_datetime(numbers, unit=unit, utc=True)).as_unit("ns"), unit


def _stamps_at_once(texts: list[str]) -> tuple[pd.DatetimeIndex, set[str]] | None:
    """The timestamps of clean rows read as a column, as the row-by-row reader reads them; None when any row is not
    plainly one kind or is out of range (the row-by-row reader then finds and names it)."""
    column = pd.Series(texts, dtype=object)
    try:
        if column.str.fullmatch(_ISO_ZONED).all():
            index = pd.DatetimeIndex(pd.to_datetime(column, format="ISO8601", utc=True)).as_unit("ns")
            if ((index < ISO_RANGE[0]) | (index >= ISO_RANGE[1])).any():
                return None
            return index, set()
        if column.str.fullmatch(_EPOCH_INTEGER).all():
            read = _epoch_integers(column.astype("int64").to_numpy())
            return None if read is None else (read[0], {read[1]})
    except (ValueError, OverflowError, TypeError):
        return None
    return None


# An epoch number in scientific notation: its mantissa's digits after the point and its exponent say how finely it is
# written ("1.767571e+09" to 1,000 s; "1.7675712e+12" to 100,000 ms)
_SCIENTIFIC = re.compile(r"[+-]?\d*(?:\.(\d*))?[eE]([+-]?\d+)")


def _written_finely_enough(path: Path, texts: list[str], index: pd.DatetimeIndex, where: Callable[[int], str]) -> None:
    """Refuse epoch times written in scientific notation too coarsely to tell the rows apart. A writer with fixed
    precision (%.6e, %g) rounds each time to 10^(exponent - digits after the point) of its unit; one with variable
    digits (R, Python's repr) drops only trailing zeros, so its short mantissas are exact and the time written with the
    most digits shows the resolution it wrote to. Which wrote a file its text cannot tell, but its rows can: at the
    finest resolution any of them is written to, a span holds at most span / resolution + 1 distinct times, so more rows
    than that are rounded onto each other (an exact writer's distinct times are at least that far apart), and the step
    read from them would be the resolution, not the sampling step. An exact file of rows that resolution apart
    throughout that repeats a time is refused too: its text is that of a rounded one. `where(k)` names row k."""
    finest, rows = math.inf, []
    for k, text in enumerate(texts):
        written = _SCIENTIFIC.fullmatch(text.strip())
        if written:
            finest = min(finest, 10.0 ** (int(written[2]) - len(written[1] or "")))
            rows.append(k)
    if len(rows) < 2:
        return
    unit = epoch_unit(float(texts[rows[0]]))  # one unit for all (the reader refuses a mix)
    resolution = finest * _NS_PER_UNIT[unit]
    stamps = index[rows]
    span = stamps.max().value - stamps.min().value
    met = np.flatnonzero(stamps.duplicated())
    if (len(rows) - 1) * resolution <= span or not len(met):
        return
    k = rows[int(met[0])]
    first = rows[int(np.flatnonzero(stamps == index[k])[0])]
    raise HistoryError(
        f"{path}: {where(k)}: timestamp {texts[k].strip()!r} meets {where(first)}'s ({texts[first].strip()!r}): "
        f"the epoch {_unit_name(unit)} are written in scientific notation to the nearest "
        f"{go_duration(resolution / 1e9)}, and {len(rows)} rows over {go_duration(span / 1e9)} are closer together "
        "than that, so rounded times meet (samples lost) and the step read would be the rounding's: write epoch "
        "times in full, e.g. %d or %.3f")


def _read_csv(path: Path) -> pd.Series:
    rows: list[tuple[int, list[str]]] = []  # (line, fields) of each non-blank row
    broken: HistoryError | None = None  # the file stops being readable after `rows`
    try:
        with open_csv(path) as handle:
            reader = csv.reader(bounded_lines(handle))
            header = next(reader, None)
            if header is None:
                raise HistoryError(f"{path}: file is empty (expected a header 'timestamp,value')")
            names = [h.strip().lower() for h in header]
            if "timestamp" not in names or "value" not in names:
                raise HistoryError(f"{path}:1: header must name columns 'timestamp' and 'value', got {header}")
            if len(set(names)) != len(names):
                raise HistoryError(f"{path}:1: header names a column twice: {header}")
            try:
                for row in reader:
                    if row and any(cell.strip() for cell in row):
                        rows.append((reader.line_num, row))
            except UnicodeDecodeError as exc:
                broken = _not_utf8(path, exc)
            except csv.Error as exc:
                broken = HistoryError(f"{path}: not a readable CSV: {exc}")
    except UnicodeDecodeError as exc:
        raise _not_utf8(path, exc) from None
    except csv.Error as exc:
        raise HistoryError(f"{path}: not a readable CSV: {exc}") from None
    except TooBig as exc:
        raise HistoryError(f"{path}: {exc}: {SMALLER}") from None
    except TooLong as exc:
        raise HistoryError(f"{path}: {exc}: not a 'timestamp,value' CSV") from None
    except BadGzip as exc:
        raise HistoryError(f"{path}: not a readable gzip file: {exc}") from None
    except OSError as exc:
        raise HistoryError(f"{path}: cannot read: {exc.strerror or exc}") from None
    t_col, v_col = names.index("timestamp"), names.index("value")
    other = [k for k in range(len(names)) if k not in (t_col, v_col)]
    read = _rows_at_once(rows, len(names), t_col, v_col) if broken is None else None
    index, values, units = read if read is not None else _rows_one_by_one(path, rows, len(names), t_col, v_col)
    if broken is not None:  # every row before it read: the file's own fault comes next
        raise broken
    if not len(values):
        raise HistoryError(f"{path}: no data rows")
    index = index.rename("timestamp")
    if other and index.has_duplicates:  # else no rows to tell apart (and no frame of the other columns to build)
        _one_series(path, index, pd.DataFrame([[row[k].strip() for k in other] for _, row in rows],
                                              columns=[header[k].strip() for k in other]),
                    [f"line {line}" for line, _ in rows])
    if read is None and index.has_duplicates:  # read as a column, they are integers or ISO-8601, none scientific
        _written_finely_enough(path, [row[t_col] for _, row in rows], index, lambda k: f"line {rows[k][0]}")
    series = pd.Series(values, index=index, name="value", dtype=float)
    series.attrs["timestamps"] = _read_as(units)
    return series


def _not_utf8(path: Path, exc: UnicodeDecodeError) -> HistoryError:
    return HistoryError(f"{path}: not a UTF-8 text file (byte {exc.start}): a CSV with columns timestamp,value is "
                        "expected")


def _rows_at_once(rows: list[tuple[int, list[str]]], width: int, t_col: int,
                  v_col: int) -> tuple[pd.DatetimeIndex, list[float], set[str]] | None:
    """The rows read with their timestamps as a column: None when a row is not clean (then read one by one)."""
    if any(len(row) != width for _, row in rows):
        return None
    try:
        values = [_parse_value(row[v_col]) for _, row in rows]
    except ValueError:
        return None
    stamps = _stamps_at_once([row[t_col].strip() for _, row in rows])
    return None if stamps is None else (stamps[0], values, stamps[1])


def _rows_one_by_one(path: Path, rows: list[tuple[int, list[str]]], width: int, t_col: int,
                     v_col: int) -> tuple[pd.DatetimeIndex, list[float], set[str]]:
    """The rows read one by one: the first bad one is an error naming its line."""
    stamps, values, units = [], [], set[str]()
    for line, row in rows:
        if len(row) != width:
            raise HistoryError(f"{path}:{line}: expected {width} fields, got {len(row)}: {row[:5]}")
        try:
            stamps.append(_parse_timestamp(row[t_col], units))
            values.append(_parse_value(row[v_col]))
        except ValueError as exc:
            raise HistoryError(f"{path}:{line}: {exc}") from None
        _one_unit(path, units, f":{line}")
    return pd.DatetimeIndex(stamps).as_unit("ns"), values, units


def _parquet_timestamps(path: Path, column: pd.Series) -> tuple[pd.DatetimeIndex, str]:
    """The timestamp column of a Parquet file: zoned datetimes, epoch numbers (unit by magnitude) or ISO text."""
    if pd.api.types.is_datetime64_any_dtype(column):
        if getattr(column.dt, "tz", None) is None:
            raise HistoryError(f"{path}: column 'timestamp' has no time zone (store it as a UTC timestamp)")
        if column.isna().any():
            raise HistoryError(f"{path}: row {int(np.flatnonzero(column.isna().to_numpy())[0]) + 1}: "
                               f"{MISSING_TIMESTAMP}")
        index = pd.DatetimeIndex(column).tz_convert("UTC")
        outside = (index < ISO_RANGE[0]) | (index >= ISO_RANGE[1])
        if outside.any():
            k = int(np.flatnonzero(outside)[0])
            raise HistoryError(f"{path}: row {k + 1}: timestamp {index[k]} is outside {ISO_RANGE[0]:%Y} .. "
                               f"{ISO_RANGE[1]:%Y}")
        return index.as_unit("ns"), "timestamps"
    if pd.api.types.is_bool_dtype(column):
        raise HistoryError(f"{path}: column 'timestamp' holds booleans, not times")
    if pd.api.types.is_float_dtype(column) and column.dtype.itemsize < 8:
        # read, 1-minute samples met as duplicates, more than half dropped, the rest at a step of 2m8s
        raise HistoryError(f"{path}: column 'timestamp' is {column.dtype}, too coarse for epoch times (a float32 holds "
                           "a second of 2026 to the nearest 128): store them as integers or float64")
    if pd.api.types.is_integer_dtype(column) and not column.isna().any() and len(column):
        try:
            read = _epoch_integers(column.to_numpy(dtype=np.int64))
        except ValueError as exc:
            raise HistoryError(f"{path}: row 1: {exc}") from None
        if read is not None:
            return read[0], _read_as({read[1]})
    items = column.tolist()
    if all(isinstance(item, str) for item in items):  # text, as a CSV's: read as a column when it is clean
        read_text = _stamps_at_once([item.strip() for item in items])
        if read_text is not None:
            return read_text[0], _read_as(read_text[1])
    stamps, units = [], set()
    for row, item in enumerate(items, start=1):
        try:
            if pd.api.types.is_scalar(item) and pd.isna(item):  # a null: NaN in a float column, None in a text one
                raise ValueError(MISSING_TIMESTAMP)
            if isinstance(item, bool | np.bool_):
                raise ValueError(f"timestamp {item!r} is not a time")
            if isinstance(item, bytes):
                try:
                    item = item.decode("utf-8")
                except UnicodeDecodeError:
                    raise ValueError(f"timestamp {item[:40]!r} is not UTF-8 text") from None
            if isinstance(item, int | float | np.integer | np.floating):
                unit = epoch_unit(float(item))
                units.add(unit)
                stamp = (pd.Timestamp(int(item), unit=unit, tz="UTC") if isinstance(item, int | np.integer)
                         else _epoch(float(item), unit))
            elif isinstance(item, str):
                stamp = _parse_timestamp(item, units)
            elif isinstance(item, datetime):  # a pd.Timestamp too; not a date or a time of day, which are no time
                stamp = pd.Timestamp(item)
                if stamp.tzinfo is None:
                    raise ValueError(f"timestamp {item!r} has no time zone")
                stamp = _in_range(stamp.tz_convert("UTC"), item)
            else:
                raise ValueError(f"timestamp {item!r} ({type(item).__name__}) is not a time")
        except (ValueError, OverflowError) as exc:
            raise HistoryError(f"{path}: row {row}: {exc}") from None
        _one_unit(path, units, f": row {row}")
        stamps.append(stamp)
    return pd.DatetimeIndex(stamps).as_unit("ns"), _read_as(units)


def _parquet_values(path: Path, column: pd.Series) -> np.ndarray:
    if pd.api.types.is_bool_dtype(column):
        raise HistoryError(f"{path}: column 'value' holds booleans (true/false), not demand: refusing to read them "
                           "as 0/1")
    if pd.api.types.is_numeric_dtype(column):
        numbers = column.to_numpy(dtype=float, na_value=np.nan)
        with np.errstate(invalid="ignore"):
            bad = ~np.isnan(numbers) & ~((numbers >= 0) & (numbers <= MAX_VALUE))
        if not bad.any():
            return numbers
        k = int(np.flatnonzero(bad)[0])
        try:
            check_value(float(numbers[k]))
        except ValueError as exc:
            raise HistoryError(f"{path}: row {k + 1}: {exc}") from None
    out = np.empty(len(column), dtype=float)
    for row, item in enumerate(column.tolist(), start=1):
        try:
            if item is None:
                out[row - 1] = math.nan
            elif isinstance(item, bool | np.bool_):
                raise ValueError(f"value {item!r} is a boolean, not a number")
            elif isinstance(item, str):
                out[row - 1] = _parse_value(item)
            elif isinstance(item, int | float | np.integer | np.floating | Decimal):  # Decimal: a decimal(p, s) column
                out[row - 1] = check_value(float(item), item)
            else:
                raise ValueError(f"value {item!r} ({type(item).__name__}) is not a number")
        except (ValueError, OverflowError) as exc:
            raise HistoryError(f"{path}: row {row}: {exc}") from None
    return out


def _not_parquet(path: Path, exc: Exception) -> HistoryError:
    return HistoryError(f"{path}: not a readable Parquet file: {type(exc).__name__}: {exc}")


def _read_parquet(path: Path) -> pd.Series:
    import pyarrow.parquet as pq

    # pyarrow raises many kinds (ArrowInvalid, OSError, ...): all mean "not readable"
    try:
        rows = pq.read_metadata(path).num_rows  # from the file's footer: a file too large is refused unread
    except Exception as exc:
        raise _not_parquet(path, exc) from None
    if rows > MAX_LINES:
        raise HistoryError(f"{path}: {rows:,} rows, over {MAX_LINES:,}, {HELD}: {SMALLER}")
    try:
        frame = pd.read_parquet(path)
    except Exception as exc:
        raise _not_parquet(path, exc) from None
    if not isinstance(frame.index, pd.RangeIndex):  # a frame written with its timestamps as the index (pandas keeps
        # the index in the file's metadata and restores it here); one named as a column is, too, refused below
        frame = frame.reset_index(allow_duplicates=True)
    names = [str(c).strip().lower() for c in frame.columns]
    missing = {"timestamp", "value"} - set(names)
    if missing:
        raise HistoryError(f"{path}: missing columns {sorted(missing)} (has {list(frame.columns)[:10]})")
    if len(set(names)) != len(names):
        raise HistoryError(f"{path}: a column is named twice: {list(frame.columns)}")
    frame.columns = names
    if frame.empty:
        raise HistoryError(f"{path}: no data rows")
    index, how = _parquet_timestamps(path, frame["timestamp"])
    _one_series(path, index, frame.drop(columns=["timestamp", "value"]),
                [f"row {k}" for k in range(1, len(frame) + 1)] if index.has_duplicates else [])
    if index.has_duplicates:  # a number or a time is held as exactly as it was stored: only text can be rounded
        _written_finely_enough(path, [item.decode() if isinstance(item, bytes) else item if isinstance(item, str)
                                      else "" for item in frame["timestamp"].tolist()], index,
                               lambda k: f"row {k + 1}")
    series = pd.Series(_parquet_values(path, frame["value"]), index=pd.DatetimeIndex(index, name="timestamp"),
                       name="value")
    series.attrs["timestamps"] = how
    return series


def no_history_file(path: Path) -> str | None:
    """Why `path` names no file a history could be read from, or None. Where a flag or a configuration field gave
    it, a usage error (exit 2), a missing file's and a directory's alike."""
    if path.is_dir():
        return "is a directory, not a history file"
    if not path.exists():  # a pipe (bash's <(...), /dev/stdin) is no regular file, but a CSV streams from it
        return "no such file"
    return None


def load_history(path: str | Path) -> pd.Series:
    """Read `timestamp,value` samples from CSV (gzip-compressed or not) or Parquet, in file order.

    Values are NaN (missing) or finite in [0, MAX_VALUE]; timestamps are UTC; an error names the file and the line
    (CSV) or row (Parquet). `series.attrs["timestamps"]` says how the timestamps were read (epoch unit guessed by
    magnitude, or ISO-8601)."""
    path = Path(path)
    if why := no_history_file(path):
        raise HistoryError(f"{path}: {why}")
    series = _read_parquet(path) if path.suffix.lower() in {".parquet", ".pq"} else _read_csv(path)
    series.attrs["source"] = str(path)  # prepare's errors name the file too
    return series


COUNTER_GAPS = "counter increments over a gap, each shared evenly among the sampling steps it spans"
JITTER_ROUNDED = ("timestamps with milliseconds of jitter around a whole-second step, each read at its step (its "
                  "nearest whole second, or the offset from one they share)")
UNEVEN_SUMS = ("sums over a step the sampling step does not divide, scaled to the whole step by the time its samples "
               "stand for")


@dataclass
class CleaningReport:
    """What `prepare` repaired, so nothing happens silently."""
    input_points: int = 0
    input_step: str = ""
    out_of_order: int = 0
    duplicates: int = 0
    duplicates_at_step: int = 0  # of them, timestamps whose kept sample is not the later: the one at the local step
    duplicates_blank: int = 0  # timestamps whose later sample is blank beside a value: the value kept
    counter_resets: int = 0
    counter_gaps: int = 0  # a counter's increments over a gap, each shared among the steps it spans
    jitter_rounded: int = 0  # timestamps moved to their step (a scraper's milliseconds of jitter: _jitter_removed)
    outliers: list[str] = field(default_factory=list)
    missing_steps: int = 0
    partial_sums: int = 0  # steps summed (statistic sum) from fewer samples than they hold: scaled to the whole step
    uneven_sums: int = 0  # steps summed from samples standing for a little more or less than the step (a sampling
    #                       step that does not divide it): scaled to the whole step
    step_changes: list[str] = field(default_factory=list)  # where the sampling step changes: "5 min to 1 min at T"
    output_step: str = ""
    output_points: int = 0
    timestamps: str = ""  # how the timestamps were read (e.g. "epoch milliseconds (told by magnitude)")

    def lines(self) -> list[str]:
        return [
            f"{self.input_points} samples at step {self.input_step} -> {self.output_points} points",
            f"{self.out_of_order} out-of-order, {self.duplicates} duplicate timestamps{self._kept_note()}",
            f"{self.counter_resets} counter resets, {len(self.outliers)} outliers clipped",
            f"{self.missing_steps} {self._missing()}",
        ] + self._step_note() \
          + ([f"{self.partial_sums} sums over a step with samples missing, taken at its samples' mean for the "
              "missing ones (never as zero demand)"] if self.partial_sums else []) \
          + ([f"{self.uneven_sums} {UNEVEN_SUMS}"] if self.uneven_sums else []) \
          + ([f"{self.counter_gaps} {COUNTER_GAPS}"] if self.counter_gaps else []) \
          + ([f"{self.jitter_rounded} {JITTER_ROUNDED}"] if self.jitter_rounded else []) \
          + self._epoch_note()

    def repairs(self) -> list[str]:
        """What cleaning changed, and the points it kept missing, one phrase each: empty when the history was used as
        it was read (what a command that prints no cleaning report says on stderr)."""
        said = [(self.out_of_order, "samples out of order (sorted)"),
                (self.duplicates, f"duplicate timestamps (the later sample of each kept{self._kept_note()})"),
                (self.counter_resets, "counter resets"), (self.counter_gaps, COUNTER_GAPS),
                (self.jitter_rounded, JITTER_ROUNDED),
                (len(self.outliers), "outliers clipped"),
                (self.partial_sums, "sums over a step with samples missing (taken at its samples' mean)"),
                (self.uneven_sums, UNEVEN_SUMS),
                (self.missing_steps, self._missing())]
        return self._step_note() + [f"{n} {what}" for n, what in said if n] + self._epoch_note()

    def _missing(self) -> str:
        """Missing points at the step they are counted at: one file's gap is 3 hourly points to forecast, 36 of
        5 minutes to simulate, and said without the step the two commands seemed to disagree."""
        step = f" at step {self.output_step}" if self.output_step else ""
        return f"missing points{step} (kept missing, never scored)"

    def _kept_note(self) -> str:
        """Where the sample kept of a timestamp given twice is not the later."""
        return (f"; at {self.duplicates_at_step}, given by stretches at two steps, the sample at its stretch's step"
                if self.duplicates_at_step else "") + \
               (f"; at {self.duplicates_blank}, the later sample blank, the value" if self.duplicates_blank else "")

    def _step_note(self) -> list[str]:
        """Where the sampling step changes, said wherever the report is: each stretch is read at its own step."""
        if not self.step_changes:
            return []
        shown = self.step_changes[:MAX_CHANGES_SAID]
        more = len(self.step_changes) - len(shown)
        return [f"sampling step changes from {', then from '.join(shown)}{f' and {more} more times' if more else ''}"
                f" (each sample weighed by its own stretch's step, aggregated to {self.output_step})"]

    def _epoch_note(self) -> list[str]:
        """How epoch timestamps were read (their unit, told by magnitude): said wherever the report is."""
        return [f"timestamps read as {self.timestamps}"] if self.timestamps.startswith("epoch") else []


def _aggregate(series: pd.Series, step: pd.Timedelta, statistic: str, stretches: list[Stretch],
               report: CleaningReport) -> pd.Series:
    def by_step(values: pd.Series):
        return values.resample(step, origin="epoch")

    bins = by_step(series)
    # A history whose step changes: each sample stands for its own stretch's step, so a mean is weighed by it and a
    # sum is whole when its samples stand for the whole step (else each sample stands for the history's one step)
    seconds = _sample_seconds(series, stretches) if len(stretches) > 1 else None
    count = bins.count()
    covered = count * stretches[0].step.total_seconds() if seconds is None else by_step(seconds).sum()
    _no_overlap(covered, step, count, stretches, series.index)
    if statistic == "mean":
        out = bins.mean() if seconds is None else by_step(series * seconds).sum(min_count=1) / covered
    elif statistic == "max":
        out = bins.max()
    elif statistic == "sum":
        out = bins.sum(min_count=1)  # an empty bin is missing, not zero
        # A step's sum is scaled to the whole step by the time its samples stand for (each at its stretch's step):
        # a step with samples missing (a gap, a missed scrape, the history's first or last hour) does not count them
        # as zero demand, and where the sampling step does not divide it (7-minute samples: hours of 8 and 9) an
        # hour holding 63 minutes of samples is not 5 % more demand than one holding 60. A step holding a whole
        # sample more than it has room for is summed as it is: its samples' step was read as a multiple of their own
        # (a sparse sampler, _no_overlap), so the time they seem to stand for is not theirs
        whole, sample = step.total_seconds(), min(s.step for s in stretches).total_seconds()
        scaled = (covered > 0) & (covered != whole) & (covered < whole + sample)
        out = out.where(~scaled, out * (whole / covered))
        missing = scaled & (covered <= whole - sample)
        report.partial_sums = int(missing.sum())
        report.uneven_sums = int((scaled & ~missing).sum())
    else:  # a percentile of the samples, each counted once (a step of one stretch: its samples at their step)
        out = bins.quantile(float(statistic[1:]) / 100.0)
    return out.asfreq(step)


# A step whose samples stand for more than this times its length, and one sample more, holds the same time twice
# (timestamps with jitter come within a few percent of it, or one sample over where a step holds one or two)
OVERLAP = 1.25


def _no_overlap(covered: pd.Series, step: pd.Timedelta, count: pd.Series, stretches: list[Stretch],
                index: pd.DatetimeIndex) -> None:
    """Refuses samples that stand for more time than their step has: two exports of the same times on grids apart
    (:00, :05, ... and :02, :07, ...) interleaved, or a burst of finer samples too short to be a stretch of its own,
    which a sum would count twice and a mean would weigh as much as the rest of the step. Only where a stretch's
    step is known from a run of it (MIN_STRETCH intervals): a sampler that missed many samples has none, and its
    step, read from its most common interval, can be a multiple of its own (a sparse 15-minute history's can be
    30 minutes), so its hours would seem to hold twice the time."""
    over = covered > OVERLAP * step.total_seconds() + max(s.step for s in stretches).total_seconds()
    if not over.any():  # the usual case: no run is scanned for
        return
    intervals = np.diff(index.as_unit("ns").asi8)
    firsts, lengths = _runs(intervals)
    run_steps = intervals[firsts[lengths >= MIN_STRETCH]]
    if np.isin([s.step.value for s in stretches], run_steps).any():
        at = covered.index[over][0]
        raise HistoryError(f"{int(over.sum())} steps of {go_duration(step)} hold samples standing for over "
                           f"{OVERLAP:g} times the step and a sample (the first, {at.isoformat()}: {int(count[at])} "
                           f"samples standing for {go_duration(covered[at])}): two exports of the same times "
                           "overlapping, or a burst of finer samples? give each time once")


def _step_of(stretches: list[Stretch], times: pd.DatetimeIndex) -> pd.TimedeltaIndex:
    """The step of the stretch each of `times` falls in."""
    starts = pd.DatetimeIndex([s.start for s in stretches])
    return pd.TimedeltaIndex([s.step for s in stretches])[np.maximum(starts.searchsorted(times, side="right") - 1, 0)]


def _sample_seconds(series: pd.Series, stretches: list[Stretch]) -> pd.Series:
    """The seconds each real sample stands for: its stretch's step (NaN where the value is missing)."""
    return pd.Series(_step_of(stretches, series.index).total_seconds(), index=series.index).where(series.notna())


def _undo_counter_resets(series: pd.Series, stretches: list[Stretch], report: CleaningReport) -> pd.Series:
    """Cumulative counter -> increments per sampling step; after a reset the new value is the increment (as PromQL's
    increase()). An increment over a gap (missed scrapes, an outage: samples missing or blank) is the increase of
    every step it spans, so each of them is its share: taken whole, the first sample after a 3-hour gap of a
    5-minute counter was 37 steps' demand, its hour's mean 4 times the others'."""
    values = series.to_numpy(dtype=float)
    prev = pd.Series(values).ffill().shift(1).to_numpy()
    delta = values - prev
    resets = delta < 0
    report.counter_resets = int(resets.sum())
    delta[resets] = values[resets]
    times = series.index.as_unit("ns").asi8.astype(float)
    since = times - pd.Series(np.where(np.isnan(values), np.nan, times)).ffill().shift(1).to_numpy()
    spans = np.maximum(np.rint(since / _step_of(stretches, series.index).as_unit("ns").asi8), 1)
    report.counter_gaps = int(((spans > 1) & ~np.isnan(delta)).sum())
    return pd.Series(delta / spans, index=series.index).iloc[1:]


# A history whose values only rise, over this long and this many changes, is a cumulative counter read as demand
COUNTER_SPAN = pd.Timedelta("2D")
COUNTER_CHANGES = 24
COUNTER_FALLS = (0.01, 2)  # changes that fall (counter resets): at most this share of them, or this many


def _cumulative(series: pd.Series) -> str | None:
    """Why `series` looks like a cumulative counter (requests_total): its values rise at (nearly) every change for
    days, which no demand gauge does (its daily cycle falls every night). None when it does not."""
    real = series.dropna()
    if len(real) < 2 or real.index[-1] - real.index[0] < COUNTER_SPAN:
        return None
    changes = np.diff(real.to_numpy())
    changes = changes[changes != 0]
    rises = int((changes > 0).sum())
    if len(changes) < COUNTER_CHANGES or len(changes) - rises > max(COUNTER_FALLS[0] * len(changes), COUNTER_FALLS[1]):
        return None
    span = go_duration(real.index[-1] - real.index[0])
    return (f"values rise at {rises} of their {len(changes)} changes over {span}: a cumulative counter (e.g. "
            "requests_total), not demand; set history.counter: true to read its increments, or give its rate (PromQL "
            "rate(...[5m])); history.counter: false if it is a gauge that only rose (GPUs in use over a ramp-up)")


def clip_outliers(series: pd.Series, factor: float) -> tuple[pd.Series, list[str]]:
    """`series` with its outliers clipped (`_clip_outliers`), and the times of those clipped."""
    report = CleaningReport()
    return _clip_outliers(series, factor, report), report.outliers


def _clip_outliers(series: pd.Series, factor: float, report: CleaningReport) -> pd.Series:
    """Clip glitches: values over `factor` x the series' own 99th percentile.

    A global bound on purpose: demand with near-zero night hours makes any
    local rule clip real morning ramps. Clipping (not deleting) keeps the point
    as demand, only less extreme. A 99th percentile of zero (a trace idle nearly every hour) gives no bound: its
    bursts are its demand, kept and not reported.
    """
    limit = factor * float(series.quantile(0.99))
    if not limit > 0:
        return series
    over = (series > limit).to_numpy()
    report.outliers = [ts.isoformat() for ts in series.index[over]]
    return series.clip(upper=limit)


def check_values(series: pd.Series) -> None:
    """Demand is finite, >= 0 and <= MAX_VALUE where it is not missing (NaN); a HistoryError names the first other."""
    values = series.to_numpy(dtype=float)
    bad = ~np.isnan(values) & ~((values >= 0) & (values <= MAX_VALUE))
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise HistoryError(f"{int(bad.sum())} demand values are infinite, negative or over {MAX_VALUE:g} (first: "
                           f"{float(values[k])!r} at {series.index[k]}; is this a counter? use counter: true)")


OUTLIER_FACTOR = 3.0  # values over this many times a series' 99th percentile are clipped (history.outlier_factor)


def prepare(raw: pd.Series, step: str | None = "1h", statistic: str = "mean", counter: bool | None = None,
            outlier_factor: float | None = OUTLIER_FACTOR) -> tuple[pd.Series, CleaningReport]:
    """Raw samples -> a regular series at `step` (tz-aware UTC, freq set, NaN = missing); `step` None: the history's
    own (its coarsest stretch's, sampling_stretches). `counter`: True, a cumulative counter read as its increments;
    False, a gauge read as it is; None, a gauge unless its values only rise (refused as a counter: `_cumulative`). An
    error names the file the samples were read from (`raw.attrs["source"]`, set by load_history)."""
    try:
        return _prepare(raw, step, statistic, counter, outlier_factor)
    except HistoryError as exc:
        where = raw.attrs.get("source")
        raise HistoryError(f"{where}: {exc}" if where else str(exc)) from None


def _prepare(raw: pd.Series, step: str | None, statistic: str, counter: bool | None,
             outlier_factor: float | None) -> tuple[pd.Series, CleaningReport]:
    check_statistic(statistic)
    report = CleaningReport(input_points=len(raw), timestamps=str(raw.attrs.get("timestamps", "")))
    if not isinstance(raw.index, pd.DatetimeIndex) or raw.index.tz is None:
        raise HistoryError("timestamps must be time-zone aware")
    series = raw.astype(float)
    check_values(series)
    series.index = _jitter_removed(series.index.tz_convert("UTC"), report)
    # the file's own runs, in its order: where it gives a time twice or goes back in time (two exports concatenated)
    runs = _run_steps(series.index) if series.index.has_duplicates or not series.index.is_monotonic_increasing \
        else None
    if not series.index.is_monotonic_increasing:
        report.out_of_order = int((series.index.to_series().diff() < pd.Timedelta(0)).sum())
        order = np.argsort(series.index.as_unit("ns").asi8, kind="stable")
        series = series.iloc[order]
        runs = (runs[0][order], runs[1][order]) if runs is not None else None
    # a blank sample at a time the file also gives a value says nothing of it (a grid exported with a blank where
    # it had no sample): dropped, never superseding the value
    blank = series.isna().to_numpy() & series.index.isin(series.index[series.notna().to_numpy()])
    report.duplicates_blank = int((blank & ~series.index.duplicated(keep="last")).sum())
    series = series[~blank]
    runs = (runs[0][~blank], runs[1][~blank]) if runs is not None else None
    dup, report.duplicates_at_step = (series.index.duplicated(), 0) if runs is None else \
        _superseded(series.index, runs[0])
    report.duplicates = int(dup.sum() + blank.sum())
    series = series[~dup]
    if series.notna().sum() < 2:
        raise HistoryError("history has fewer than two real values")
    stretches = sampling_stretches(series.index)
    if runs is not None:
        _not_interleaved(series.index, runs[0][~dup], runs[1][~dup], stretches)
    steps = [s.step for s in stretches]
    target = pd.Timedelta(step) if step is not None else max(steps)
    report.input_step = go_duration(steps[0]) if len(steps) == 1 else \
        f"{go_duration(min(steps))} to {go_duration(max(steps))} (it changes)"
    report.step_changes = [f"{go_duration(before.step)} to {go_duration(after.step)} at {after.start.isoformat()}"
                           for before, after in zip(stretches, stretches[1:])]
    report.output_step = go_duration(target)
    for stretch in stretches:
        since = f" (from {stretch.start.isoformat()})" if len(stretches) > 1 else ""
        if stretch.step > target:
            raise HistoryError(f"history step {go_duration(stretch.step)}{since} is coarser than the forecast step "
                               f"{go_duration(target)}")
        if not pd.Timedelta("1s") <= stretch.step <= pd.Timedelta("1h"):
            raise HistoryError(f"history step {go_duration(stretch.step)}{since} is outside 1s .. 1h")
    points = (series.index[-1] - series.index[0]) / target + 1
    if points > MAX_POINTS:
        raise HistoryError(f"history spans {series.index[0]} .. {series.index[-1]}: {points:.3g} points at step "
                           f"{go_duration(target)}, over the {MAX_POINTS:g} a history may have (a wrong timestamp?)")
    if counter:
        series = _undo_counter_resets(series, stretches, report)
    elif counter is None and (why := _cumulative(series)):
        raise HistoryError(why)
    series = _aggregate(series, target, statistic, stretches, report)
    if not np.isfinite(series.dropna().to_numpy()).all():
        raise HistoryError(f"aggregating to {go_duration(target)} with {statistic} overflows: values too large")
    if outlier_factor is not None:
        series = _clip_outliers(series, outlier_factor, report)
    series.name = "demand"
    report.missing_steps = int(series.isna().sum())
    report.output_points = len(series)
    return series, report


SECOND = 1_000_000_000  # ns


def _jitter_removed(index: pd.DatetimeIndex, report: CleaningReport) -> pd.DatetimeIndex:
    """`index`, each timestamp moved to its point on a grid of whole seconds where they jitter by milliseconds around a
    whole-second step (a scraper's, Prometheus' raw samples): there their intervals in whole seconds repeat more than
    twice as often as the most common exact one. Read as stamped, their most common interval was one jittered value
    (5m0.021s), the replay's steps laid 4 minutes off the clock; and a sample a few milliseconds before its step
    (5m - 3 ms) fell in the step before it, a quarter of the steps read missing and their neighbours holding two
    samples. The grid is the whole seconds where the timestamps fall either side of them (5m ± 3 ms), else the whole
    seconds plus an offset they share (`_grid_offset`): a constant offset is no jitter, and 12:00:00.6, 12:00:01.6,
    ... ± 3 ms at a 1-second step, rounded to their whole seconds, were each read a step late, and at .5 ± 3 ms
    neighbours met at one second, one of them dropped as a duplicate. Samples that meet at a point of the grid are
    one step's (two exports overlapping), read as duplicates. A regular step (a 1.5 s one too, or at a constant
    offset), a sparse sampler's multiples and whole-second jitter are left as they are. How many timestamps moved is
    said (`report`)."""
    stamped = index.as_unit("ns").asi8
    times = np.unique(stamped)
    intervals = pd.Series(np.diff(times))
    counts = intervals.value_counts()
    whole = (np.rint(intervals / SECOND) * SECOND).astype(np.int64).value_counts()
    if whole.empty or whole.index[0] == 0 or whole.iloc[0] <= 2 * counts.iloc[0]:
        return index
    offset = _grid_offset(times)
    moved = (stamped - offset + SECOND // 2) // SECOND * SECOND + offset
    report.jitter_rounded = int((moved != stamped).sum())
    # in their own unit: a finer offset is cut to it alike for every sample
    return pd.DatetimeIndex(pd.to_datetime(moved, unit="ns", utc=True), name=index.name).as_unit(index.unit)


def _grid_offset(times: np.ndarray) -> int:
    """The offset (ns, within the second) from whole seconds of the grid the epoch nanoseconds `times` jitter around:
    0 where they fall either side of whole seconds, else the middle of the part of the second they fall in (all of it
    but the widest stretch none falls in). Their mean is no such middle: 1 to 934 ms late, theirs is 467 ± 36 ms,
    and those furthest from it passed for their neighbours."""
    within = np.unique(times % SECOND)
    gaps = np.diff(within, append=within[0] + SECOND)  # from each to the next, the last around to the first
    widest = int(np.argmax(gaps))
    first, last = within[(widest + 1) % len(within)], within[widest]  # they fall from `first` on around to `last`
    if first == 0 or first > last:  # the whole second is among them
        return 0
    return int(first + last) // 2


def sampling_step(index: pd.DatetimeIndex) -> pd.Timedelta:
    """The history's own step: the most common interval between its (sorted) samples, the shortest of equally common
    ones, since a regular sampler with gaps has most intervals at its step (a median of 1 h and 2 h intervals
    would be 1.5 h, no step at all); with no interval repeated (timestamps with jitter), their lower median: a gap
    only lengthens an interval (two intervals, 15 m and a 71 h outage, are a 15-minute step, not a 36-hour one)."""
    intervals = index.to_series().diff().dropna()
    if intervals.empty:
        return pd.NaT
    counts = intervals[intervals > pd.Timedelta(0)].value_counts()
    if counts.empty or counts.iloc[0] < 2:
        return intervals.sort_values().iloc[(len(intervals) - 1) // 2]
    return min(counts.index[counts == counts.iloc[0]])


# A stretch of one sampling step holds at least this many consecutive intervals of that step: a gap (one longer
# interval), a missed scrape or a stray timestamp never starts one
MIN_STRETCH = 12
MAX_CHANGES_SAID = 3  # step changes a report names (a history whose step changes more often is named by its first)


@dataclass(frozen=True)
class Stretch:
    start: pd.Timestamp  # its first sample
    step: pd.Timedelta


def sampling_stretches(index: pd.DatetimeIndex) -> list[Stretch]:
    """The history's stretches of one sampling step, in time order, each from its first sample, consecutive ones at
    different steps: a history whose step changes partway (a scrape interval changed, two exports concatenated) is
    read at each stretch's own step, never at one step for the whole file.

    `index`: sorted, no duplicates. A stretch starts at a run of at least MIN_STRETCH consecutive intervals of its
    step (the run's first sample); the samples between runs (after a gap, a stray timestamp) belong to the stretch
    before them, and the first stretch starts at the first sample. One stretch at `sampling_step` when the step
    never changes, and when such runs hold less than half the intervals (timestamps with jitter, which have no
    stretch of one step)."""
    whole = [Stretch(index[0], sampling_step(index))]
    intervals = np.diff(index.as_unit("ns").asi8)
    firsts, lengths = _runs(intervals)
    long = lengths >= MIN_STRETCH
    if 2 * lengths[long].sum() < len(intervals):
        _no_regular_stretch_apart(index, firsts[long], intervals[firsts[long]], intervals[~np.repeat(long, lengths)])
        return whole
    firsts = firsts[long]
    steps = intervals[firsts]
    changes = np.flatnonzero(steps[1:] != steps[:-1]) + 1
    if not len(changes):
        return whole
    firsts, steps = np.r_[0, firsts[changes]], np.r_[steps[0], steps[changes]]
    return [Stretch(index[k], pd.Timedelta(int(ns), unit="ns")) for k, ns in zip(firsts, steps, strict=True)]


# The share of a history's irregular intervals that are whole multiples of a regular stretch's step above which they
# are that sampler's missed samples (timestamps with jitter are almost never whole multiples; a junction between two
# exports is one interval)
SAME_SAMPLER_SHARE = 0.9


def _no_regular_stretch_apart(index: pd.DatetimeIndex, firsts: np.ndarray, steps: np.ndarray,
                              irregular: np.ndarray) -> None:
    """Refuses timestamps with jitter (`irregular`: the intervals in no run of one step) beside a regular stretch at
    a step far from theirs, such as a 5-minute export concatenated with a 1-minute one with jitter: at one step, the
    other would read as gaps or (summed) as several times its demand. Not a sampler at the stretch's step that
    missed samples: its other intervals are whole multiples of that step (half the samples of a 1-minute history
    missing at random leave 1-minute runs among intervals of 2, 3, ... minutes)."""
    typical = int(np.median(irregular))
    missed = np.array([np.mean(irregular % step == 0) >= SAME_SAMPLER_SHARE for step in steps], dtype=bool)
    apart = np.flatnonzero(_far_apart(steps, typical) & ~missed)
    if len(apart):
        k = apart[0]
        raise HistoryError(f"the samples are {go_duration(pd.Timedelta(int(steps[k])))} apart in a stretch from "
                           f"{index[firsts[k]].isoformat()}, and elsewhere irregular, "
                           f"{go_duration(pd.Timedelta(typical))} apart at the median: no one step reads both; give "
                           "the file at one regular step (resample the irregular part)")


def _far_apart(steps: np.ndarray, others: np.ndarray | int) -> np.ndarray:
    """Whether steps (ns) are more than 1.5 times apart: different samplers, not one sampler's jitter."""
    return (steps > 1.5 * others) | (1.5 * steps < others)


def _runs(intervals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each run of one interval starts in `intervals`, and how many intervals it holds."""
    firsts = np.flatnonzero(np.r_[True, intervals[1:] != intervals[:-1]])
    return firsts, np.diff(np.r_[firsts, len(intervals)])


def _run_steps(index: pd.DatetimeIndex) -> tuple[np.ndarray, np.ndarray]:
    """The step (ns) of the run of at least MIN_STRETCH equal intervals each sample of `index`, in its order, starts,
    ends or is inside (the larger of two it joins), 0 for a sample in none (a correction appended, a stray one); and
    whether it is inside one (not at its ends)."""
    intervals = np.diff(index.as_unit("ns").asi8)
    firsts, lengths = _runs(intervals)
    long = (lengths >= MIN_STRETCH) & (intervals[firsts] > 0)
    run_step = np.repeat(np.where(long, intervals[firsts], 0), lengths)
    run_id = np.repeat(np.arange(len(firsts)), lengths)
    inside = np.r_[False, (run_id[1:] == run_id[:-1]) & (run_step[1:] > 0), False]
    return np.maximum(np.r_[0, run_step], np.r_[run_step, 0]), inside


def _superseded(index: pd.DatetimeIndex, run_steps: np.ndarray) -> tuple[np.ndarray, int]:
    """Which samples of the sorted `index` (given by file runs at `run_steps`, _run_steps in file order) are dropped,
    and at how many timestamps that was not the later sample. Of a timestamp given twice the later sample is kept
    (a correction), unless the samples come from stretches of the file at different steps (two exports overlapping,
    or meeting at one timestamp): then the later of those at the step of the stretch the time falls in, since a
    5-minute sum kept among 1-minute samples would count as one of them."""
    dropped = index.duplicated(keep="last")
    given = np.flatnonzero(index.duplicated(keep=False))
    times = index[given].as_unit("ns").asi8
    local = _step_of(sampling_stretches(index[~index.duplicated()]), index[given]).as_unit("ns").asi8
    fits = (run_steps[given] == 0) | (run_steps[given] == local)  # a sample in no run (a correction) fits any step
    # per timestamp, the last row after ordering by (time, fits, row): the later of those that fit, else the later
    last = pd.DataFrame({"time": times, "fits": fits, "row": given}).sort_values(["time", "fits", "row"]) \
        .groupby("time")["row"].last().to_numpy()
    kept = np.zeros(len(index), dtype=bool)
    kept[last] = True
    not_later = int((dropped & kept).sum())
    dropped[given] = ~kept[given]
    return dropped, not_later


def _not_interleaved(index: pd.DatetimeIndex, run_steps: np.ndarray, inside: np.ndarray,
                     stretches: list[Stretch]) -> None:
    """Refuses samples inside a run of the file at one step that, sorted, fall in a stretch at another: two exports
    of the same times on grids apart (:00, :01, ... and :00:30, :01:30, ...) interleave into what reads as a finer
    sampler, and every statistic would mix the two (a sum would count their demand twice)."""
    local = _step_of(stretches, index).as_unit("ns").asi8
    apart = np.flatnonzero(inside & _far_apart(run_steps, local))
    if len(apart):
        k = apart[0]
        raise HistoryError(f"{len(apart)} samples (the first at {index[k].isoformat()}) are inside a stretch of the "
                           f"file {go_duration(pd.Timedelta(int(run_steps[k])))} apart, but sorted among samples "
                           f"{go_duration(pd.Timedelta(int(local[k])))} apart: two exports of the same times on "
                           "grids apart, interleaved? give each time once")


def at_own_step(raw: pd.Series) -> pd.Series:
    """Sorted, deduplicated samples on a regular index at the history's own step, gaps kept (for replay)."""
    return at_own_step_reported(raw)[0]


def at_own_step_reported(raw: pd.Series, counter: bool | None = None) -> tuple[pd.Series, CleaningReport]:
    """at_own_step, with what its cleaning repaired; a cumulative `counter` as its increments per step. A history
    whose step changes is read at its coarsest stretch's step (a finer stretch averaged into it, time-weighted):
    one regular step to replay, never the finer step with gaps between a coarser stretch's samples."""
    return prepare(raw, step=None, statistic="mean", counter=counter, outlier_factor=None)
