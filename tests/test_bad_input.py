"""Bad input never gives a wrong answer or a traceback (issue 14): every class of bad file, flag and configuration
ends in a clear error naming the file and line, the flag or the field path (exit 2: bad request, 1: the work
failed), or in a stated rule; an exit-0 path gives a correct answer. The history reader is fuzzed with hypothesis."""
import contextlib
import json
import math
import os
import re
import socket
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cli.config import load_config
from cli.main import main
from cli.simulate import load_jobs
from core.errors import BadRequest, ConfigError
from core.yamlfile import manifest_text
from forecast.history import MAX_VALUE, HistoryError, load_history, prepare
from forecast.synthetic import synthetic_demand, write_csv

HOURS = pd.date_range("2026-01-05", periods=24 * 4, freq="h", tz="UTC").as_unit("ns")
VALUES = 10 + 5 * np.sin(np.arange(len(HOURS)) * 2 * np.pi / 24)


# two 5-minute exports concatenated, the second on a grid 2 minutes apart and over the first's last 3 hours
INTERLEAVED = pd.date_range("2026-01-05", periods=24 * 12, freq="5min", tz="UTC").append(
    pd.date_range("2026-01-05T21:02Z", periods=24 * 12, freq="5min"))


def csv_of(path, stamps, values, encoding="utf-8"):
    path.write_text("timestamp,value\n" + "".join(f"{t},{v}\n" for t, v in zip(stamps, values)), encoding=encoding)
    return path


def error_of(call, *args):
    with pytest.raises(HistoryError) as err:
        call(*args)
    return str(err.value)


# ---------------------------------------------------------------------------- timestamps: units by magnitude
@pytest.mark.parametrize("unit, per_second", [("seconds", 1), ("milliseconds", 10**3), ("microseconds", 10**6),
                                              ("nanoseconds", 10**9)])
def test_epoch_units_are_told_by_magnitude_and_stated(tmp_path, unit, per_second):
    seconds = HOURS.asi8 // 10**9
    raw = load_history(csv_of(tmp_path / "h.csv", seconds * per_second, VALUES))
    assert raw.index.equals(HOURS), "never dates in 1970-1973: the same times whatever the unit"
    _, report = prepare(raw)
    assert f"timestamps read as epoch {unit} (told by magnitude)" in report.lines()


@pytest.mark.parametrize("stamps, what", [
    ([0, 300, 600], "not epoch seconds, milliseconds"),            # seconds since a trace's start: not guessed
    ([10**10 * 5, 10**10 * 5 + 300], "not epoch seconds"),        # between the seconds and milliseconds ranges
    ([1767225600, 1767225600300], "mix epoch milliseconds and seconds"),
    (["inf", "1767225600"], "not a finite number"),
])
def test_implausible_or_mixed_epoch_numbers_are_refused_naming_file_and_line(tmp_path, stamps, what):
    path = csv_of(tmp_path / "h.csv", stamps, [1.0] * len(stamps))
    message = error_of(load_history, path)
    assert message.startswith(f"{path}:") and what in message
    assert f"{path}:2:" in message or f"{path}:3:" in message


def test_a_byte_order_mark_is_accepted(tmp_path):
    path = csv_of(tmp_path / "excel.csv", [t.isoformat() for t in HOURS], VALUES, encoding="utf-8-sig")
    assert path.read_bytes().startswith(b"\xef\xbb\xbf")
    raw = load_history(path)
    assert raw.index.equals(HOURS) and np.allclose(raw.to_numpy(), VALUES)


# ---------------------------------------------------------------------------- values
@pytest.mark.parametrize("bad, what", [("1e308", "over 1e+15"), ("inf", "infinite"), ("-inf", "infinite"),
                                       ("-3", "negative"), ("1e400", "infinite"), ("true", "boolean"),
                                       ("0x10", "not a number")])
def test_values_no_demand_can_have_are_refused_with_file_and_line(tmp_path, bad, what):
    values = [str(v) for v in VALUES[:5]]
    values[3] = bad
    path = csv_of(tmp_path / "h.csv", [t.isoformat() for t in HOURS[:5]], values)
    message = error_of(load_history, path)
    assert message.startswith(f"{path}:5:") and what in message


def test_prepare_refuses_what_no_source_may_give():
    """Prometheus answers do not pass through the file reader: prepare checks the values again."""
    for bad in (math.inf, -1.0, 1e300):
        raw = pd.Series(VALUES.copy(), index=HOURS)
        raw.iloc[7] = bad
        assert "infinite, negative or over" in error_of(prepare, raw)


@pytest.mark.parametrize("stamps, values, what", [
    (HOURS[:20], [math.nan] * 20, "fewer than two real values"),                # every value missing
    ([HOURS[0]] * 20, VALUES[:20], "fewer than two real values"),               # one timestamp, twenty times
    (pd.date_range("2025-01-01", periods=20, freq="D", tz="UTC"), VALUES[:20], "coarser than the forecast step"),
    (INTERLEAVED, np.ones(len(INTERLEAVED)), "give each time once"),            # two exports on grids apart
], ids=["all-missing", "one-timestamp", "daily", "interleaved"])
def test_cleaning_refusals_name_the_file(tmp_path, stamps, values, what):
    path = csv_of(tmp_path / "h.csv", [t.isoformat() for t in stamps], values)
    message = error_of(lambda: prepare(load_history(path)))
    assert message.startswith(f"{path}: ") and what in message, message


def test_a_directory_is_named_as_such(tmp_path):
    assert error_of(load_history, tmp_path) == f"{tmp_path}: is a directory, not a history file"


def test_a_history_spanning_centuries_is_refused_not_allocated():
    raw = pd.Series([1.0, 2.0, 3.0, 4.0], index=pd.DatetimeIndex(
        ["1990-01-01T00:00Z", "1990-01-01T00:00:01Z", "1990-01-01T00:00:02Z", "2199-01-01T00:00Z"]))
    assert "points at step" in error_of(prepare, raw, "1s")


# ---------------------------------------------------------------------------- Parquet
def parquet(tmp_path, timestamp, value, name="h.parquet"):
    path = tmp_path / name
    pd.DataFrame({"timestamp": timestamp, "value": value}).to_parquet(path)
    return path


@pytest.mark.parametrize("stamps", [HOURS.asi8, HOURS.asi8 // 10**6, HOURS.asi8 // 10**9,
                                    [t.isoformat().encode() for t in HOURS], [t.isoformat() for t in HOURS]],
                         ids=["epoch-ns-int", "epoch-ms-int", "epoch-s-int", "bytes", "text"])
def test_parquet_timestamps_as_numbers_bytes_or_text(tmp_path, stamps):
    raw = load_history(parquet(tmp_path, stamps, VALUES))
    assert raw.index.equals(HOURS)


@pytest.mark.parametrize("stamps, values, what", [
    (HOURS, VALUES > 10, "booleans"),
    (HOURS.tz_localize(None), VALUES, "no time zone"),
    (np.arange(len(HOURS)), VALUES, "row 1: numeric timestamp 0 is not epoch"),
    ([b"\xff\xfe"] * len(HOURS), VALUES, "row 1: timestamp"),
    (HOURS, np.where(np.arange(len(HOURS)) == 4, -1.0, VALUES), "row 5: value -1.0 is negative"),
    (HOURS, np.where(np.arange(len(HOURS)) == 2, np.inf, VALUES), "row 3: value inf is infinite"),
    ([True] * len(HOURS), VALUES, "booleans"),
    # a time of day (Parquet time64) has a tzinfo attribute as a datetime has: read as one, a TypeError traceback
    ([t.time() for t in HOURS], VALUES, "row 1: timestamp datetime.time(0, 0) (time) is not a time"),
], ids=["bool-values", "naive", "small-ints", "bad-bytes", "negative", "inf", "bool-stamps", "time-of-day"])
def test_parquet_refusals_name_the_file_and_row(tmp_path, stamps, values, what):
    path = parquet(tmp_path, stamps, values)
    message = error_of(load_history, path)
    assert message.startswith(str(path)) and what in message, message


ISO_HOURS = [t.isoformat() for t in HOURS]


@pytest.mark.parametrize("stamps", [
    pd.array([*HOURS[:3].asi8 // 10**9, None, *HOURS[4:].asi8 // 10**9], dtype="Int64"),  # int64 with a null
    np.r_[HOURS[:3].asi8 / 1e9, np.nan, HOURS[4:].asi8 / 1e9],
    ISO_HOURS[:3] + [None] + ISO_HOURS[4:],
    ISO_HOURS[:3] + [""] + ISO_HOURS[4:],
], ids=["int-null", "float-nan", "text-null", "text-blank"])
def test_a_missing_timestamp_is_said_missing_naming_its_row(tmp_path, stamps):
    """An int timestamp column with a null said "row 4: timestamp nan is not a finite number", a text one "timestamp
    None is not a time", a blank one "timestamp '' is not ISO-8601": each is the time missing, said so, as of a
    Parquet datetime column."""
    path = parquet(tmp_path, stamps, VALUES)
    assert error_of(load_history, path) == f"{path}: row 4: timestamp is missing"


def test_a_blank_csv_timestamp_is_said_missing_naming_its_line(tmp_path):
    path = csv_of(tmp_path / "h.csv", ISO_HOURS[:3] + [""] + ISO_HOURS[4:], VALUES)
    assert error_of(load_history, path) == f"{path}:5: timestamp is missing"


@pytest.mark.parametrize("unit", [10**9, 10**6])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_epoch_times_stored_as_short_floats_are_refused(tmp_path, unit, dtype):
    """A float32 holds 24 bits: epoch seconds of 2026 to the nearest 128, milliseconds to the nearest 131 s. 3000
    samples a minute apart stored so were read as 1407 at a step of 2m8s, 1593 dropped as duplicates; refused now."""
    minutes = pd.date_range("2026-01-05", periods=3000, freq="min", tz="UTC").as_unit("ns")
    with np.errstate(over="ignore"):  # float16 holds no epoch time at all: each is infinite
        path = parquet(tmp_path, (minutes.asi8 // unit).astype(dtype), np.ones(len(minutes)))
    assert error_of(load_history, path) == (f"{path}: column 'timestamp' is {np.dtype(dtype)}, too coarse for epoch "
                                            "times (a float32 holds a second of 2026 to the nearest 128): store them "
                                            "as integers or float64")


def test_a_file_that_is_not_parquet(tmp_path):
    path = tmp_path / "h.parquet"
    path.write_bytes(b"PAR1 not really")
    assert "not a readable Parquet file" in error_of(load_history, path)


# ---------------------------------------------------------------------------- the reader fuzzed
def _check_read(path):
    """The reader's contract: a HistoryError naming the file, or samples that are missing or finite in [0, MAX] on
    a UTC index; and prepare then gives a regular, increasing UTC series of such values, or a HistoryError."""
    try:
        raw = load_history(path)
    except HistoryError as exc:
        assert str(path) in str(exc)
        return None
    values = raw.to_numpy(dtype=float)
    assert str(raw.index.tz) == "UTC"
    real = values[~np.isnan(values)]
    assert np.isfinite(real).all() and (real >= 0).all() and (real <= MAX_VALUE).all()
    try:
        series, _ = prepare(raw, step="1h", statistic="max")
    except HistoryError:
        return None
    assert str(series.index.tz) == "UTC" and series.index.is_monotonic_increasing and series.index.is_unique
    out = series.to_numpy(dtype=float)
    out = out[~np.isnan(out)]
    assert len(out) >= 1 and np.isfinite(out).all() and (out >= 0).all()
    return series


# HEADROOM_FUZZ_EXAMPLES=2000 for a longer hunt; 60 keeps the suite quick
FUZZ = settings(max_examples=int(os.environ.get("HEADROOM_FUZZ_EXAMPLES", "60")), deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


@FUZZ
@given(st.binary(max_size=300))
def test_fuzz_random_bytes(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("fuzz") / "h.csv"
    path.write_bytes(data)
    _check_read(path)


def _epochs(unit_ns):
    return st.integers(631152000, 7258118400).map(lambda s: str(s * 10**9 // unit_ns))


STAMP = st.one_of(
    _epochs(10**9), _epochs(10**6), _epochs(10**3), _epochs(1),  # seconds .. nanoseconds
    st.integers(-10**20, 10**20).map(str), st.floats(allow_nan=True).map(str),
    st.datetimes(min_value=pd.Timestamp("1900-01-01").to_pydatetime(), max_value=pd.Timestamp("2300-01-01")
                 .to_pydatetime()).map(lambda d: d.isoformat() + st_zone_suffix(d)),
    st.text(max_size=12))
VALUE = st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(repr), st.integers(-10, 10**20).map(str),
                  st.sampled_from(["", "nan", "NA", "true", "1e308", "-0", "1_000", " 7 "]), st.text(max_size=6))


def st_zone_suffix(moment) -> str:
    return ("Z", "+05:30", "", "-08:00")[moment.microsecond % 4]


@FUZZ
@given(st.lists(st.tuples(STAMP, VALUE), max_size=40), st.sampled_from(["timestamp,value", "value,timestamp",
                                                                        "Timestamp , VALUE", "time,value", "ts"]))
def test_fuzz_rows_and_columns(tmp_path_factory, rows, header):
    path = tmp_path_factory.mktemp("fuzz") / "h.csv"
    flip = header.lower().startswith("value")
    body = "".join(f"{v.replace(',', ';')},{t.replace(',', ';')}\n" if flip else
                   f"{t.replace(',', ';')},{v.replace(',', ';')}\n" for t, v in rows)
    path.write_text(f"{header}\n{body}")
    _check_read(path)


def test_fuzzed_rows_that_are_good_give_the_right_answer(tmp_path):
    """Not only 'no traceback': good rows in every unit read back as the times and values written."""
    rng = np.random.default_rng(7)
    units = rng.choice([1, 10**3, 10**6, 10**9], size=1)[0]
    seconds = HOURS.asi8 // 10**9
    values = rng.uniform(0, 1000, len(HOURS)).round(3)
    raw = load_history(csv_of(tmp_path / "h.csv", seconds * units, values))
    series, _ = prepare(raw, outlier_factor=None)
    assert series.index.equals(HOURS.as_unit(series.index.unit)) and np.allclose(series.to_numpy(), values)


PARQUET_COLUMN = st.sampled_from(["bool", "int-small", "int-ns", "float", "text", "bytes", "naive", "aware",
                                  "time", "none"])


def _parquet_column(kind, n, rng):
    if kind == "bool":
        return rng.integers(0, 2, n).astype(bool)
    if kind == "int-small":
        return rng.integers(-1000, 1000, n)
    if kind == "int-ns":
        return HOURS[:n].asi8
    if kind == "float":
        return rng.choice([0.5, 7.0, np.nan, np.inf, -2.0, 1e300], n)
    if kind == "text":
        return rng.choice(["2026-01-05T00:00:00Z", "x", "", "12", "2026-01-05T01:00:00"], n).tolist()
    if kind == "bytes":
        return [b"2026-01-05T03:00:00Z", b"\xff"][: 1 + int(rng.integers(0, 2))] * n
    if kind == "naive":
        return HOURS[:n].tz_localize(None)
    if kind == "aware":
        return HOURS[:n]
    if kind == "time":
        return [t.time() for t in HOURS[:n]]
    return [None] * n


@FUZZ
@given(PARQUET_COLUMN, PARQUET_COLUMN, st.integers(1, 30), st.integers(0, 2**32 - 1))
def test_fuzz_parquet_columns(tmp_path_factory, t_kind, v_kind, n, seed):
    rng = np.random.default_rng(seed)
    stamps, values = _parquet_column(t_kind, n, rng), _parquet_column(v_kind, n, rng)
    if v_kind == "bytes":
        values = values[:n]
    stamps = stamps[:n]
    path = tmp_path_factory.mktemp("fuzz") / "h.parquet"
    try:
        pd.DataFrame({"timestamp": stamps, "value": values}).to_parquet(path)
    except Exception:  # pyarrow cannot store this mixture: nothing to read
        return
    _check_read(path)


# ---------------------------------------------------------------------------- flags at the edge
@pytest.fixture(scope="module")
def demand(tmp_path_factory):
    path = tmp_path_factory.mktemp("d") / "demand.csv"
    write_csv(synthetic_demand(days=6, step="10min"), path)
    return path


@pytest.fixture(scope="module")
def short(tmp_path_factory):
    path = tmp_path_factory.mktemp("d") / "two_days.csv"
    write_csv(synthetic_demand(days=2, step="10min"), path)
    return path


@pytest.fixture
def examples(tmp_path, monkeypatch):
    import shutil
    from pathlib import Path

    shutil.copytree(Path(__file__).resolve().parents[1] / "examples", tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return tmp_path / "examples" / "headroom.yaml"


def exits(argv, capsys):
    try:
        status = main([str(a) for a in argv])
    except SystemExit as exc:  # argparse's own refusals
        status = exc.code
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return status, captured.err


@pytest.mark.parametrize("argv, flag", [
    (["run", "--now", "abc", "--once"], "--now: 'abc' is not an ISO-8601 time"),
    (["plan", "--now", "abc"], "--now: 'abc'"),
    # read month-first (November 2 day-first) as any text pandas could guess a date from: ISO-8601 only
    (["plan", "--now", "02/11/2026 08:00+00:00"], "--now: '02/11/2026 08:00+00:00' is not an ISO-8601 time"),
    (["run", "--hours", "-3"], "--hours: must be at least 1"),
    (["run", "--hours", "0"], "--hours: must be at least 1"),
    (["plan", "--hours", "0"], "--hours: must be at least 1"),
    (["plan", "--hours", "25"], "--hours 25: the plan covers run.horizon_hours (24) hours"),  # not 24 rows silently
    (["run", "--metrics-port", "9999", "--once"], "--metrics-port: the embedded cluster serves no /metrics"),
    (["run", "--metrics-port", "70000", "--once"], "run.metrics_port"),
    (["run", "--now", "1990-01-01T00:00:00Z", "--once"], "--now 1990-01-01 00:00:00+00:00 is outside the histories"),
    (["run", "--now", "", "--once"], "--now: '' is not an ISO-8601 time"),  # not silently the default
    # a local time was taken as UTC: the plan and replay shifted by the user's offset, as a history's is refused
    (["plan", "--now", "2026-02-11T08:00:00"], "--now: '2026-02-11T08:00:00' has no time zone"),
    (["run", "--now", "2026-02-11T08:00", "--hours", "1"], "--now: '2026-02-11T08:00' has no time zone"),
    (["run", "--hours", "100000000"], "--hours 100000000 is longer than the histories"),  # no Timedelta overflow
    (["run", "--now", "2026-02-15T00:00:00Z", "--hours", "72"], "runs past the histories' end"),
    # the last hour of the history holds 23:00-23:55: a second hour would repeat the last sample as demand
    (["run", "--now", "2026-02-15T23:00:00Z", "--hours", "2"],
     "give at most 1 hour from there, or an --now of 2026-02-15T22:00:00Z or earlier"),
    # the --now to give is the latest the replay fits from (was "at least an hour before it": 22:55, not 23:00, and
    # for --hours 2 one that ran past the end again)
    (["run", "--now", "2026-02-15T23:30:00Z", "--hours", "1"], "give an --now of 2026-02-15T23:00:00Z or earlier"),
    (["run", "--now", "2026-02-15T23:55:00Z", "--hours", "2"], "give an --now of 2026-02-15T22:00:00Z or earlier"),
    (["run", "--gpus", "10000000000000", "--once"], "run.capacity_gpus"),  # not a saturated backlog of 1e13 GPUs
    # replayed 2.5 minutes off its samples: each step charged, and shown, the demand of an interval ended before it
    (["run", "--now", "2026-02-11T08:02:30Z", "--hours", "1"], "--now 2026-02-11 08:02:30+00:00 falls between the 5m "
     "samples of policy inference/chat's history"),
    (["run", "--now", "2026-02-11T08:02:30+00:00", "--once"],
     "give --now 2026-02-11T08:00:00Z or 2026-02-11T08:05:00Z"),
])
def test_bad_flags_of_the_controller_exit_2_naming_the_flag(examples, capsys, argv, flag):
    status, err = exits([*argv, "--config", examples], capsys)
    assert status == 2 and flag in err, err


def _history_and_policy(tmp_path, name: str, times) -> tuple:
    """A history NAME.csv of 30 every step of `times`, and a policy file naming NAME (its target and series)."""
    import pandas as pd

    history, policy = tmp_path / f"{name}.csv", tmp_path / "p.yaml"
    pd.DataFrame({"timestamp": times.strftime("%Y-%m-%dT%H:%M:%SZ"), "value": 30.0}).to_csv(history, index=False)
    policy.write_text(f"""apiVersion: headroom.dev/v1alpha1
kind: ReservationPolicy
metadata: {{name: {name}, namespace: default}}
spec:
  query: demand
  target: {{kind: Deployment, name: {name}}}
  capacity: {{demandPerGpu: 10}}
""")
    return history, policy


@pytest.mark.parametrize("command", [["plan"], ["run", "--once"], ["run", "--hours", "2"]])
def test_histories_that_do_not_overlap_are_refused_at_the_default_now(examples, tmp_path, capsys, command):
    """A policy whose history starts after the others' end: the default --now (the earliest end) was before any of
    its samples, and plan/run planned it on the fallback ("demand now unknown", a note on stderr), exit 0."""
    import pandas as pd

    later, policy = _history_and_policy(tmp_path, "later", pd.date_range("2026-03-20", periods=48 * 12, freq="5min",
                                                                         tz="UTC"))
    status, err = exits([*command, "--config", examples, "--policy-file", policy, "--history", later], capsys)
    assert status == 2 and "the policies' histories do not overlap at the default --now" in err, err
    assert f"default/later's ({later}) starts 2026-03-20 00:00:00+00:00" in err, err


def test_hours_longer_than_the_history_without_now_name_hours_not_now(examples, tmp_path, capsys):
    """A history of 10.5 hours and `run --hours 11` without --now: the replay's default start (11 hours before the
    history's end) fell before its first sample, and the refusal named a flag never given: "--now 2026-03-19
    23:35:00+00:00 is outside the histories (...)"."""
    import pandas as pd

    short, policy = _history_and_policy(tmp_path, "short", pd.date_range("2026-03-20 00:00", "2026-03-20 10:30",
                                                                         freq="5min", tz="UTC"))
    status, err = exits(["run", "--policy-file", policy, "--history", short, "--hours", "11"], capsys)
    assert status == 2 and err.strip().splitlines()[-1] == (
        "headroom: error: --hours 11 is longer than the histories (2026-03-20 00:00:00+00:00 .. 2026-03-20 "
        "10:30:00+00:00: 10.5 hours)"), err


def test_simulate_days_longer_than_the_history(demand, capsys):
    status, err = exits(["simulate", demand, "--days", "30"], capsys)
    assert status == 2 and f"simulate.days 30 (--days) leaves no history: the trace {demand} covers 5.99 days" in err
    # it said "at least a day of history is needed", yet takes --days 5.5 of this trace, as the README says
    assert "(give --days below that, leaving some history before them)" in err, err


def test_backtest_and_tune_on_two_days(short, capsys):
    status, err = exits(["backtest", short], capsys)
    assert status == 1 and "a backtest needs two days to fit plus --horizon (backtest.horizon) 24 h to score" in err
    status, err = exits(["tune", short], capsys)
    assert status == 2 and "simulate.days 7 (--days) leaves no history" in err


def test_a_backtest_of_a_week_with_thirty_hours_of_data_is_refused_not_scored_null(tmp_path, capsys):
    """A week known for its first 10 hours and last 20 ran a minute and scored every model null, exit 0: no fold's
    model had two days to fit on. Refused as a forecast of it is."""
    week = pd.date_range("2026-01-05", periods=168, freq="h", tz="UTC")
    values = 10 + 5 * np.sin(np.arange(168) * 2 * np.pi / 24)
    kept = np.r_[0:10, 148:168]
    path = csv_of(tmp_path / "sparse.csv", [t.isoformat() for t in week[kept]], values[kept])
    status, err = exits(["backtest", path, "--json"], capsys)
    assert status == 1 and f"{path}: 30 hourly points with data of 168; a backtest fits its models on at least 48" \
        in err, err


def test_forecast_of_ten_hours_is_refused_not_collapsed(tmp_path, capsys):
    path = csv_of(tmp_path / "ten.csv", [t.isoformat() for t in HOURS[:10]], VALUES[:10])
    status, err = exits(["forecast", path], capsys)
    assert status == 1 and "a forecast needs at least 48" in err and str(path) in err


@pytest.mark.parametrize("argv, message", [
    (["simulate", "{demand}", "--days", "0.0001"], "simulate.days 0.0001 (--days) covers fewer than two steps"),
    (["simulate", "{demand}", "--days", "nan"], "simulate.days"),
    (["simulate", "{demand}", "--timeline", "{tmp}/missing/t.csv"], "--timeline {tmp}/missing/t.csv: the folder"),
    (["simulate", "{demand}", "--timeline", "{tmp}"], "is a directory"),
    (["tune", "{demand}", "--write-policy", "{tmp}/missing/p.yaml"], "--write-policy"),
    (["demo", "--quick", "--out", "{demand}"], "exists and is not a directory"),
    (["forecast", "{demand}", "--quantiles", "nan"], "forecast.quantiles"),
    (["forecast", "{demand}", "--statistic", "pnan"], "history.statistic"),
    (["simulate", "{demand}", "--peak-gpus", "inf"], "simulate.peak_gpus"),
    (["simulate", "{demand}", "--days", "1", "--per-gpu", "1e-12"],
     "GPUs, over 1,000,000 (is the demand per GPU in the trace's unit"),
    # the scale came from --peak-gpus: that flag is named, not --per-gpu, which was not given
    (["tune", "{demand}", "--days", "1", "--peak-gpus", "2e6"],
     "headroom: error: --peak-gpus 2e+06 (simulate.peak_gpus;"),
])
def test_more_bad_requests_exit_2_before_any_work(demand, tmp_path, capsys, argv, message):
    fill = {"demand": demand, "tmp": tmp_path}
    status, err = exits([a.format(**fill) for a in argv], capsys)
    assert status == 2 and message.format(**fill) in err, err


def test_tune_offers_only_the_policies_it_tunes(demand, tmp_path, capsys):
    """`tune --help` listed the references (oracle, hourly-oracle) among --policy's choices, and tune then refused
    each: a reference knows the future, it has nothing to tune. Every choice listed is taken now (each gets past the
    policy's check to the next refusal, an existing --write-policy file: no sweep is run), and a reference is refused
    as a choice not listed; one the configuration gives is refused by tune, naming the field."""
    with pytest.raises(SystemExit):
        main(["tune", "--help"])
    listed = re.search(r"--policy \{([^}]*)\}", capsys.readouterr().out).group(1).split(",")
    assert "forecast" in listed
    existing = tmp_path / "p.yaml"
    existing.write_text("")
    for policy in listed:
        status, err = exits(["tune", demand, "--policy", policy, "--write-policy", existing], capsys)
        assert status == 2 and "the file exists" in err, (policy, err)
    for reference in ("oracle", "hourly-oracle"):
        status, err = exits(["tune", demand, "--policy", reference], capsys)
        assert status == 2 and f"invalid choice: '{reference}'" in err, err
        config = tmp_path / f"{reference}.yaml"
        config.write_text(f"simulate:\n  policy: {reference}\n")
        status, err = exits(["tune", demand, "--config", config], capsys)
        assert status == 2 and f"simulate.policy {reference} (the configuration): a reference" in err, err


@pytest.mark.parametrize("command", [["report", "{demand}", "--days", "1"], ["demo", "--quick"]])
@pytest.mark.parametrize("out, what", [("{demand}/sub", "Not a directory"), ("/proc/headroom/x", "cannot make")])
def test_an_out_folder_that_cannot_be_made_fails_before_the_work(demand, capsys, command, out, what):
    started = time.perf_counter()
    status, err = exits([a.format(demand=demand) for a in command] + ["--out", out.format(demand=demand)], capsys)
    assert status == 2 and "--out" in err and what in err, err
    assert time.perf_counter() - started < 10, "refused before minutes of simulation, not after"


def test_backtest_of_a_constant_series_says_its_scores_are_undefined(tmp_path, capsys):
    path = csv_of(tmp_path / "zero.csv", [t.isoformat() for t in HOURS], [0.0] * len(HOURS))
    assert main(["backtest", str(path), "--folds", "1"]) == 0
    table = [line.split() for line in capsys.readouterr().out.splitlines()[2:]]
    assert table and all(row[1] == "n/a" for row in table), "MASE of a constant series has no scale: n/a, not a number"


def _policy_file(path, **spec):
    import yaml

    path.write_text(yaml.safe_dump({"apiVersion": "headroom.dev/v1alpha1", "kind": "ReservationPolicy",
                                    "metadata": {"name": "chat"}, "spec": {
                                        "query": "up", "capacity": {"demandPerGpu": 10}, "mode": "active",
                                        "target": {"kind": "Deployment", "name": "chat"}, **spec}}))
    return path


@pytest.mark.parametrize("argv, message", [
    *[([command, "{tmp}/nope.csv"], "history.file {tmp}/nope.csv: no such file")
      for command in ("forecast", "backtest", "simulate", "tune", "report")],
    (["train", "--history", "{tmp}/nope.csv"], "--history {tmp}/nope.csv: no such file"),
    (["run", "--policy-file", "{policy}", "--history", "{tmp}/nope.csv"], "--history {tmp}/nope.csv: no such file"),
    (["plan", "--policy-file", "{policy}", "--history", "{tmp}/nope.csv"], "--history {tmp}/nope.csv: no such file"),
    # a missing policy file said "invalid configuration (nope.yaml): cannot read file: No such file or directory",
    # naming no flag (and simulate's and report's only after reading the whole trace)
    *[([command, "{demand}", "--policy-file", "{tmp}/nope.yaml"], "simulate.policy_file {tmp}/nope.yaml: no such "
       "file (the --policy-file flag, or simulate.policy_file in --config)") for command in ("simulate", "report")],
    *[([command, "--policy-file", "{tmp}/nope.yaml", "--history", "{demand}"], "--policy-file {tmp}/nope.yaml: no such "
       "file") for command in ("run", "plan")],
])
def test_a_missing_input_file_is_a_usage_error_naming_its_field(tmp_path, capsys, argv, message):
    """A missing DEMAND exited 1 (the work failed) where a missing --jobs file exits 2 (a bad request, nothing done):
    both name nothing that can be read."""
    write_csv(synthetic_demand(days=3), tmp_path / "d.csv")
    fill = {"tmp": tmp_path, "policy": _policy_file(tmp_path / "p.yaml"), "demand": tmp_path / "d.csv"}
    status, err = exits([a.format(**fill) for a in argv], capsys)
    assert status == 2 and message.format(**fill) in err, err


@pytest.mark.parametrize("argv, message", [
    *[([command, "{dir}"], "history.file {dir}: is a directory, not a history file (the ")
      for command in ("forecast", "backtest", "simulate", "tune", "report")],
    (["train", "--history", "{dir}"], "--history {dir}: is a directory, not a history file"),
    *[([command, "--policy-file", "{policy}", "--history", "{dir}"], "--history {dir}: is a directory, not a history "
       "file") for command in ("run", "plan")],
    # the other input files, refused so already
    (["simulate", "{demand}", "--days", "1", "--jobs", "{dir}"], "--jobs (simulate.jobs) {dir}: cannot read it: Is a "
     "directory"),
    (["simulate", "{demand}", "--days", "1", "--policy-file", "{dir}"], "invalid configuration ({dir}):\n  cannot "
     "read file: Is a directory"),
    (["run", "--policy-file", "{dir}", "--history", "{demand}"], "invalid configuration ({dir}):\n  cannot read file"),
    (["forecast", "{demand}", "--config", "{dir}"], "invalid configuration ({dir}):\n  cannot read file: Is a "
     "directory"),
])
def test_a_directory_given_as_an_input_file_is_a_usage_error_as_a_missing_file_is(tmp_path, capsys, argv, message):
    """`headroom forecast DIR` exited 1 (the work failed: "is a directory, not a history file") where a missing file
    exits 2, the status README gives a bad input file; so did train, run and plan given a directory as --history."""
    write_csv(synthetic_demand(days=3), tmp_path / "d.csv")
    (tmp_path / "dir").mkdir()
    fill = {"dir": tmp_path / "dir", "policy": _policy_file(tmp_path / "p.yaml"), "demand": tmp_path / "d.csv"}
    status, err = exits([a.format(**fill) for a in argv], capsys)
    assert status == 2 and message.format(**fill) in err, err


@pytest.mark.parametrize("argv, said", [
    (["forecast", "{csv}", "--config", "{csv}"],
     "(top level): must be a mapping of sections (a CSV, a history? --config takes the YAML configuration, e.g. "
     "examples/headroom.yaml; a history is the command's HISTORY or DEMAND argument)"),
    (["simulate", "{csv}", "--days", "1", "--policy-file", "{csv}"],
     "(top level): must be a ReservationPolicy object (a CSV, a history? --policy-file takes a ReservationPolicy "
     "manifest, e.g. the one tune --write-policy writes; the demand is DEMAND, or --history)"),
    (["run", "--policy-file", "{csv}", "--history", "{csv}"], "(top level): must be a ReservationPolicy object (a CSV"),
    (["forecast", "{csv}", "--config", "{text}"], "(top level): must be a mapping of sections\n"),  # no CSV: no guess
], ids=["config", "policy-file", "run-policy-file", "text-config"])
def test_a_history_given_where_a_yaml_file_goes_is_said_to_be_one(tmp_path, capsys, argv, said):
    """The demand CSV given as --config or --policy-file (a new user's swap) read as one YAML string and was refused
    as "(top level): must be a mapping of sections" or "must be a ReservationPolicy object": what was given, and where
    a history goes instead, is now said."""
    write_csv(synthetic_demand(days=3), tmp_path / "d.csv")
    (tmp_path / "t.yaml").write_text("just some text\n")
    status, err = exits([a.format(csv=tmp_path / "d.csv", text=tmp_path / "t.yaml") for a in argv], capsys)
    assert status == 2 and said in err + "\n", err


@pytest.mark.parametrize("command, argument", [("forecast", "HISTORY"), ("backtest", "HISTORY"), ("simulate", "DEMAND"),
                                               ("tune", "DEMAND"), ("report", "DEMAND")])
def test_a_missing_history_is_named_as_the_commands_usage_names_it(tmp_path, monkeypatch, capsys, command, argument):
    """Every command said "give a HISTORY file" and "the command's DEMAND or HISTORY argument", also simulate, tune
    and report, whose usage calls it DEMAND (and forecast's and backtest's usage said "history")."""
    from cli.main import build_parser

    monkeypatch.chdir(tmp_path)
    usage = next(a for a in build_parser()._actions if a.dest == "command").choices[command].format_usage()
    assert f"[{argument}]" in usage, usage
    other = {"HISTORY": "DEMAND", "DEMAND": "HISTORY"}[argument]
    for argv, said in (([command], f"no history: give a {argument} file"),
                       ([command, "nope.csv"], f"no such file (the {argument} argument, or history.file")):
        status, err = exits(argv, capsys)
        assert status == 2 and said in err and other not in err, err


def test_a_list_kubectl_get_writes_is_read_item_by_item(demand, tmp_path, capsys):
    """`kubectl get reservationpolicies -o yaml > p.yaml` writes a List, which kubectl apply takes item by item;
    --policy-file refused it: "kind/apiVersion: must be ReservationPolicy headroom.dev/v1alpha1, got 'List' 'v1'"."""
    import yaml

    policy = yaml.safe_load(_policy_file(tmp_path / "p.yaml").read_text())
    policy["metadata"].update(uid="0b5e", resourceVersion="12", generation=1, creationTimestamp="2026-12-01T00:00:00Z")
    listed = tmp_path / "list.yaml"
    listed.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""},
                                      "items": [policy]}))
    replays = []
    for path in (tmp_path / "p.yaml", listed):
        assert main(["simulate", str(demand), "--days", "1", "--policy-file", str(path), "--json"]) == 0
        replay = json.loads(capsys.readouterr().out)
        replays.append({key: value for key, value in replay.items() if not key.endswith("_seconds")})
    assert replays[0] == replays[1] and replays[1]["policy"]["target"]["name"] == "chat"
    other = {**policy, "metadata": {"name": "other"}, "spec": {**policy["spec"], "minGpu": 1}}
    listed.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [policy, other]}))
    status, err = exits(["run", "--policy-file", listed, "--history", demand], capsys)
    assert status == 2 and "items[1]: spec.minGpu: not a field" in err, err
    listed.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": None}))
    status, err = exits(["run", "--policy-file", listed, "--history", demand], capsys)
    assert status == 2 and "items: a List must have a list of items" in err, err


@pytest.mark.parametrize("command", ["simulate", "report"])
def test_a_forecast_only_policy_file_is_refused_not_simulated_doing_nothing(demand, tmp_path, capsys, command):
    """A manifest without spec.mode (forecast-only, the CRD's default) was replayed changing nothing: shortage 100%,
    utilization 0, training none, exit 0, not a word."""
    path = _policy_file(tmp_path / "p.yaml", mode="forecast-only")
    extra = ["--out", tmp_path / "r"] if command == "report" else ["--json"]
    status, err = exits([command, demand, "--days", "1", "--policy-file", path, *extra], capsys)
    assert status == 2 and f"invalid configuration ({path}):\n  spec.mode: forecast-only (the default when unset) " \
        "changes nothing: set spec.mode: active" in err, err


@pytest.mark.parametrize("command", ["simulate", "report"])
@pytest.mark.parametrize("spec, field", [({"minGpus": 500}, "minGpus: 500"),
                                         ({"capacity": {"demandPerGpu": 10, "gpusPerReplica": 500}},
                                          "capacity.gpusPerReplica: 500")])  # not a cluster left idle, exit 0
def test_a_policy_file_that_cannot_fit_the_cluster_is_refused(demand, tmp_path, capsys, command, spec, field):
    path = _policy_file(tmp_path / "p.yaml", **spec)
    extra = ["--out", tmp_path / "r"] if command == "report" else ["--json"]
    status, err = exits([command, demand, "--days", "1", "--policy-file", path, "--gpus", "16", *extra], capsys)
    assert status == 2 and f"invalid configuration ({path}):\n  spec.{field} does not fit the 16-GPU cluster" in err, \
        err


@pytest.mark.parametrize("non_lendable, said", [
    (16, "run.non_lendable_gpus 16 leaves nothing of the 16-GPU cluster (simulate.gpus, --gpus) to lend"),
    (10, "spec.minGpus: 8 does not fit the 16-GPU cluster (simulate.gpus, --gpus), 10 of them never lent "
         "(run.non_lendable_gpus)")])
def test_gpus_the_controller_never_lends_are_never_lent_in_the_what_if(demand, tmp_path, capsys, non_lendable, said):
    """`headroom run` refuses a policy whose minimum does not fit the GPUs it lends; simulate ignored
    run.non_lendable_gpus and replayed it, lending GPUs the controller keeps."""
    path = _policy_file(tmp_path / "p.yaml", minGpus=8)
    config = tmp_path / "headroom.yaml"
    config.write_text(f"run:\n  non_lendable_gpus: {non_lendable}\n  capacity_gpus: 128\n")
    status, err = exits(["simulate", demand, "--days", "1", "--policy-file", path, "--gpus", "16", "--config", config,
                         "--json"], capsys)
    assert status == 2 and said in err, err


@pytest.mark.parametrize("command", ["simulate", "report"])
def test_a_policy_file_of_several_policies_is_refused_by_the_what_if(demand, tmp_path, capsys, command):
    """The what-if replays one workload; `headroom run` and `plan` take several, sharing the cluster (README: one
    policy, from what-if to cluster). Picking one of them would replay a policy other than the file's."""
    one = _policy_file(tmp_path / "one.yaml").read_text()
    path = tmp_path / "two.yaml"
    path.write_text(one + "---\n" + one.replace("name: chat", "name: search"))
    extra = ["--out", tmp_path / "r"] if command == "report" else ["--json"]
    status, err = exits([command, demand, "--days", "1", "--policy-file", path, *extra], capsys)
    assert status == 2, err
    assert f"invalid configuration ({path}):\n  (top level): holds 2 ReservationPolicies; a replay (simulate, " \
        "report, tune) runs one" in err, err


def test_a_policy_file_with_a_key_given_twice_is_refused_not_run_with_the_last(demand, tmp_path, capsys):
    """kubectl apply refuses the manifest; headroom ran it with the later value (minGpus 40 here), exit 0."""
    path = _policy_file(tmp_path / "p.yaml", minGpus=4)
    path.write_text(path.read_text().replace("  minGpus: 4\n", "  minGpus: 4\n  minGpus: 40\n"))
    status, err = exits(["simulate", demand, "--days", "1", "--policy-file", path], capsys)
    assert status == 2 and f"{path}" in err and "spec.minGpus: given twice (lines" in err, err


@pytest.mark.parametrize("command", ["simulate", "report"])
@pytest.mark.parametrize("flags", [["--per-gpu", "1"], ["--peak-gpus", "5"], ["--max-shortage", "0"],
                                   ["--max-short-steps", "0", "--max-shortage", "0.5"],
                                   ["--timezone", "Europe/Berlin"]])
def test_flags_a_policy_file_holds_are_refused_beside_it_not_dropped(demand, tmp_path, capsys, command, flags):
    path = _policy_file(tmp_path / "p.yaml")
    status, err = exits([command, demand, "--days", "1", "--policy-file", path, *flags, "--out", tmp_path / "r"]
                        if command == "report" else [command, demand, "--days", "1", "--policy-file", path, *flags],
                        capsys)
    assert status == 2 and f"{flags[0]}" in err and f"{path} is run exactly" in err, err


def test_configuration_keys_a_policy_file_holds_are_said_unused_beside_it(demand, tmp_path, capsys):
    """A shared configuration's standing simulate.per_gpu and tune.max_shortage were dropped without a word beside a
    policy file (its flags are refused): the run goes on, and says which keys it did not use."""
    path = _policy_file(tmp_path / "p.yaml")
    config = tmp_path / "headroom.yaml"
    config.write_text("simulate: {per_gpu: 3}\ntune: {max_shortage: 0.01}\n")
    status, err = exits(["simulate", demand, "--days", "1", "--policy-file", path, "--config", config, "--json"],
                        capsys)
    assert status == 0, err
    assert f"simulate.per_gpu, tune.max_shortage of the configuration not used: {path} is run exactly" in err, err


@pytest.mark.parametrize("argv, victim", [
    (["simulate", "{copy}", "--days", "1", "--policy-file", "{policy}", "--timeline", "{policy}"], "{policy}"),
    (["simulate", "{copy}", "--days", "1", "--policy-file", "{policy}", "--timeline", "{copy}"], "{copy}"),
    (["report", "{copy}", "--days", "1", "--out", "{tmp}/r", "--timeline", "{copy}"], "{copy}"),
    (["tune", "{copy}", "--days", "1", "--plot", "{copy}"], "{copy}"),
    (["tune", "{copy}", "--days", "1", "--plot", "{notes}"], "{notes}"),
    (["run", "--policy-file", "{policy}", "--history", "{copy}", "--hours", "1", "--timeline", "{copy}"], "{copy}"),
    (["run", "--policy-file", "{policy}", "--history", "{copy}", "--hours", "1", "--timeline", "{notes}"], "{notes}"),
], ids=["simulate-timeline-over-its-policy", "simulate-timeline-over-its-demand", "report-timeline-over-its-demand",
        "tune-plot-over-its-demand", "tune-plot-over-a-text-file", "run-timeline-over-its-history",
        "run-timeline-over-a-text-file"])
def test_an_output_never_replaces_a_file_that_is_not_one_it_wrote(demand, tmp_path, capsys, monkeypatch, argv, victim):
    """--timeline and --plot replace a timeline or a plot written before (a re-run), never a user's other file: not the
    command's own demand or policy file (a slip of the tab key), not any other."""
    import shutil

    monkeypatch.chdir(tmp_path)  # run keeps its MLflow store in the working directory
    copy = tmp_path / "demand.csv"
    shutil.copy(demand, copy)
    notes = tmp_path / "notes.txt"
    notes.write_text("an SRE's notes\n")
    fill = {"copy": copy, "policy": _policy_file(tmp_path / "p.yaml"), "notes": notes, "tmp": tmp_path}
    victim_path = Path(victim.format(**fill))
    before = victim_path.read_bytes()
    status, err = exits([a.format(**fill) for a in argv], capsys)
    # the command's own input is named as such (tests/test_outputs.py), any other file by what it is not
    refusal = "the command would write over it" if victim_path in (copy, fill["policy"]) else "exists and is not"
    assert status == 2 and refusal in err and str(victim_path) in err, err
    assert victim_path.read_bytes() == before


def test_a_timeline_written_before_is_replaced_by_a_rerun(demand, tmp_path, capsys):
    timeline = tmp_path / "t.csv"
    argv = ["simulate", demand, "--days", "1", "--policy-file", _policy_file(tmp_path / "p.yaml"), "--timeline",
            timeline, "--json"]
    assert exits(argv, capsys)[0] == 0
    first = timeline.read_bytes()
    assert exits(argv, capsys)[0] == 0 and timeline.read_bytes() == first


def test_demand_above_the_cluster_is_said_beside_a_met_objective(demand, tmp_path, capsys):
    status, err = exits(["simulate", demand, "--days", "1", "--policy-file", _policy_file(tmp_path / "p.yaml"),
                         "--gpus", "1"], capsys)
    assert status == 0 and "inference demand GPU-time is above the 1-GPU cluster, which no policy can serve" in err, err


def test_tune_says_when_demand_is_above_the_cluster_beside_its_recommendation(demand, capsys):
    """tune's objective counts only the demand the cluster can hold: on a cluster smaller than the demand it must say
    so beside 'recommended', as simulate does, or a setting that leaves most demand unserved reads as meeting it."""
    status, err = exits(["tune", demand, "--days", "1", "--gpus", "1"], capsys)
    assert status == 0 and "inference demand GPU-time is above the 1-GPU cluster, which no policy can serve" in err, err


def test_simulate_says_when_the_simulated_days_have_no_data(tmp_path, capsys):
    """A blank value is missing data, never zero: the simulator holds the last sample seen through a gap, and its
    numbers are then of made-up demand. report said so; simulate said nothing (with --json, not even in the JSON)."""
    import json

    demand = synthetic_demand(days=6, step="10min")
    demand.iloc[-100:-10] = np.nan  # an outage in the last, simulated day
    path = tmp_path / "gap.csv"
    write_csv(demand, path)
    policy = _policy_file(tmp_path / "p.yaml")
    status, err = exits(["simulate", path, "--days", "1", "--policy-file", policy], capsys)
    assert status == 0 and "no data in the trace for 90 steps: demand taken as the last sample seen" in err, err
    capsys.readouterr()
    assert main(["simulate", str(path), "--days", "1", "--policy-file", str(policy), "--json"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert notes == ["no data in the trace for 90 steps: demand taken as the last sample seen"]


def test_report_out_pointing_at_a_file(demand, tmp_path, capsys):
    out = tmp_path / "report.html"
    out.write_text("mine")
    status, err = exits(["report", demand, "--days", "1", "--out", out], capsys)
    assert status == 2 and "--out" in err and "not a directory" in err and out.read_text() == "mine"


def test_tune_plot_into_a_missing_folder_is_checked_before_the_work(tmp_path, capsys):
    started = time.perf_counter()
    # the history does not even exist: the --plot check comes first, before anything is read or tuned
    status, err = exits(["tune", tmp_path / "nowhere.csv", "--plot", tmp_path / "missing" / "t.png"], capsys)
    assert status == 2 and "--plot" in err and "does not exist" in err
    assert time.perf_counter() - started < 5


def test_an_all_zero_trace_is_refused_unless_per_gpu_given_and_then_utilization_is_a_number(tmp_path, capsys):
    import json

    path = csv_of(tmp_path / "zero.csv", [t.isoformat() for t in HOURS], [0.0] * len(HOURS))
    status, err = exits(["simulate", path, "--days", "1", "--policy", "static"], capsys)
    assert status == 2 and "no positive value to scale to GPUs" in err and "--per-gpu" in err
    assert main(["simulate", str(path), "--days", "1", "--policy", "oracle", "--per-gpu", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert math.isfinite(out["utilization"]) and 0 <= out["utilization"] <= 1
    assert out["inference_shortage"] == 0 and out["mean_reserved_gpus"] == 0
    # shortage_hours counts hours; its share of the evaluated hours is shortage_hours_share
    assert isinstance(out["shortage_hours"], int) and out["shortage_hours_share"] == 0


def test_a_trace_idle_in_nearly_every_sample_is_refused_for_its_percentile_not_said_to_have_no_demand(tmp_path,
                                                                                                     capsys):
    """One burst in four days of 5-minute samples: --peak-gpus scales the 99.9th percentile, which is 0, and the
    refusal said the trace "has no positive value", which it has."""
    stamps = pd.date_range(HOURS[0], HOURS[-1], freq="5min")
    values = np.where(np.arange(len(stamps)) == 500, 40.0, 0.0)
    path = csv_of(tmp_path / "burst.csv", [t.isoformat() for t in stamps], values)
    status, err = exits(["simulate", path, "--days", "1", "--policy", "static"], capsys)
    assert status == 2 and "no positive value" not in err, err
    assert f"the demand trace's 99.9th percentile, which peak_gpus scales to GPUs, is 0 (only 1 of its {len(stamps)} " \
        "samples are above 0): give per_gpu (--per-gpu)" in err, err


# ---------------------------------------------------------------------------- the job trace
JOB_HEADER = "num_gpu,creation_time,scheduled_time,deletion_time\n"


@pytest.mark.parametrize("body, where, what", [
    ("num_gpu,creation_time\n1,0\n", ":1:", "missing column(s) scheduled_time, deletion_time"),
    ("num_gpus,creation_time,scheduled_time,deletion_time\n1,0,0,9\n", ":1:", "missing column(s) num_gpu"),
    (JOB_HEADER + "1,0,0,9\nabc,0,1,100\n", ":3:", "num_gpu 'abc' is not a number"),
    (JOB_HEADER + "-2,0,,100\n", ":2:", "num_gpu '-2' is negative"),
    (JOB_HEADER + "1.5,0,1,100\n", ":2:", "not a whole number"),
    (JOB_HEADER + "1,0,1,1e400\n", ":2:", "deletion_time '1e400' is not a finite number"),
    # epoch milliseconds were read as seconds: every job 1,000 times longer, a week of trace some 19 years
    (JOB_HEADER + "1,1700000000000,1700000000000,1700000060000\n", ":2:",
     "creation_time '1700000000000' is over 1e+11 seconds (the year 5138 as epoch seconds): the times must be "
     "seconds (are they milliseconds?)"),
    # milliseconds from the trace's start stay under that bound: read as seconds, two days spanned 5.48 years
    (JOB_HEADER + "2,86400000,86400000,172800000\n1,0,0,60000\n", ": the trace spans 5.48 years",
     " read as seconds, from creation_time 0 (line 3) to deletion_time 172800000 (line 2): the times must be seconds "
     "(are they milliseconds?"),
    (JOB_HEADER + "1,50,,10\n", ":2:", "deletion_time 10 is before creation_time 50"),
    (JOB_HEADER + "1,0,200,100\n", ":2:", "scheduled_time 200 is not between"),
    (JOB_HEADER + "1,,0,100\n", ":2:", "creation_time is blank"),
    (JOB_HEADER + "NaN,0,0,100\n", ":2:", "num_gpu 'NaN' is missing"),  # was "num_gpu is blank": it is not
    (JOB_HEADER + "1,0,0\n", ":2:", "expected 4 fields"),
    (JOB_HEADER, "", "no job rows"),
    ("name," + JOB_HEADER + "a,1,0,0,9\nb,1,0,0,9\n a ,2,5,5,9\n", ":4:", "name 'a' repeats line 2"),
    ("num_gpu,num_gpu,creation_time,scheduled_time,deletion_time\n1,1,0,0,9\n", ":1:", "num_gpu named more than once"),
    ("", "", "file is empty"),
])
def test_bad_job_traces_name_file_and_line(tmp_path, body, where, what):
    path = tmp_path / "jobs.csv"
    path.write_text(body)
    with pytest.raises(BadRequest) as err:
        load_jobs(path)
    assert f"--jobs (simulate.jobs) {path}{where}" in str(err.value) and what in str(err.value), str(err.value)


@pytest.mark.parametrize("command", ["simulate", "run"])
def test_a_job_trace_whose_jobs_all_arrive_as_the_replay_ends_is_refused(demand, tmp_path, capsys, command):
    """The window ends at the trace's newest creation_time, so jobs created then arrive as the replay ends: a trace of
    one moment's jobs (one row, or all created at once) replayed no training at all, exit 0. It is a trace leaving no
    job to replay, refused as such."""
    path = tmp_path / "jobs.csv"
    path.write_text(JOB_HEADER + "1,0,0,3600\n2,0,0,600\n")
    policy = tmp_path / "p.yaml"
    policy.write_text(manifest_text({"apiVersion": "headroom.dev/v1alpha1", "kind": "ReservationPolicy",
                                     "metadata": {"name": "chat", "namespace": "inference"},
                                     "spec": {"query": "q", "mode": "active", "capacity": {"demandPerGpu": 100},
                                              "target": {"kind": "Deployment", "name": "chat"},
                                              "trainingClusterQueues": ["train"]}}))
    span = ["--days", "1"] if command == "simulate" else ["--hours", "2", "--history", demand]
    status, err = exits([command, *([demand] if command == "simulate" else []), *span, "--gpus", "8", "--policy-file",
                         policy, "--jobs", path], capsys)
    assert status == 2 and f"--jobs (simulate.jobs) {path}: no job of 1 to 8 GPUs ran in the trace's last " in err, err
    assert ("before its newest creation_time 0, where the window ends and the replay with it (the 2 job(s) created "
            "then arrive as it ends)") in err, err


@pytest.mark.parametrize("command", ["simulate", "run"])
def test_a_job_trace_whose_jobs_all_arrive_in_the_replays_last_step_is_refused(demand, tmp_path, capsys, command):
    """Jobs created in the trace's last minute arrive in the replay's last minute: it replayed no training at all
    (training_gpu_hours 0), exit 0, saying only that 'the first arrives 0.999 days in'. Under one step of the replay
    (10 minutes here) is refused, naming the file and what to change."""
    path = tmp_path / "jobs.csv"
    path.write_text(JOB_HEADER + "".join(f"4,{t},{t},{t + 7200}\n" for t in range(0, 61, 10)))
    policy = _policy_file(tmp_path / "p.yaml", trainingClusterQueues=["training"])
    span = ["--days", "1"] if command == "simulate" else ["--hours", "24", "--history", demand]
    status, err = exits([command, *([demand] if command == "simulate" else []), *span, "--gpus", "8", "--policy-file",
                         policy, "--jobs", path], capsys)
    assert status == 2 and f"--jobs (simulate.jobs) {path}: the jobs that ran in the trace's last 23h50m all arrive " \
        "in the replay's last 1m, under one 10m step, up to the trace's newest creation_time 60" in err, err
    assert "Give a trace whose jobs arrive over more of it (are its times seconds? minutes or hours read as seconds " \
        "squeeze a trace so), or drop --jobs" in err, err


def test_run_once_on_an_hourly_history_replays_the_job_running_as_it_starts(tmp_path, capsys):
    """`run --once` replays one step: on an hourly history it has no span from its first step to its last, and the
    trace's window (the replay's span) held no job: refused, exit 2, where a job running as the replay starts is one
    to replay. A replay of one step takes the trace's last step."""
    demand, jobs = tmp_path / "hourly.csv", tmp_path / "jobs.csv"
    write_csv(synthetic_demand(days=4, step="1h"), demand)
    jobs.write_text(JOB_HEADER + "4,0,0,90000\n4,80000,80000,90000\n")
    policy = _policy_file(tmp_path / "p.yaml", trainingClusterQueues=["training"])
    status, err = exits(["run", "--once", "--policy-file", policy, "--history", demand, "--jobs", jobs], capsys)
    assert status == 0, err


@pytest.mark.parametrize("runs", [((0, 7200), (300, 7200), (600, 7200)), ((0, 86500), (86400, 90000), (87000, 90000))])
def test_jobs_created_in_the_traces_last_step_replay_their_training(demand, tmp_path, capsys, runs):
    """The trace's window was `--days` long from the replay's first step, which the replay's last step ends one step
    short of: the trace's newest creation_time fell a step after the replay's end, so jobs created in the trace's last
    step arrived after it ended and a trace of them replayed no training (training_gpu_hours 0), exit 0. The newest
    creation_time is the replay's last step: the trace's last step is its last (a job created a day before the rest,
    running then, arrives at the start as it did)."""
    path = tmp_path / "jobs.csv"
    path.write_text(JOB_HEADER + "".join(f"4,{created},{created},{deleted}\n" for created, deleted in runs))
    status = main(["simulate", str(demand), "--days", "1", "--policy", "oracle", "--jobs", str(path), "--json"])
    figures = json.loads(capsys.readouterr().out)
    assert status == 0 and figures["training_gpu_hours"] >= 4 * 600 / 3600, figures["training_gpu_hours"]


def test_a_job_trace_of_a_year_in_seconds_reads(tmp_path):
    path = tmp_path / "jobs.csv"
    path.write_text(JOB_HEADER + f"1,0,0,60\n1,{365 * 86400 - 60},{365 * 86400 - 60},{365 * 86400}\n")
    assert load_jobs(path)["deletion_time"].max() == 365 * 86400


def test_job_trace_with_bom_and_spaces_reads(tmp_path):
    path = tmp_path / "jobs.csv"
    path.write_text(" Num_GPU , creation_time,scheduled_time,deletion_time,extra,name\n2,0,,60,x,\n\n1,5,6,9,y, \n",
                    encoding="utf-8-sig")
    jobs = load_jobs(path)  # blank names name no pod: not a repeat
    assert jobs["num_gpu"].tolist() == [2, 1] and math.isnan(jobs["scheduled_time"].iloc[0])
    assert jobs["deletion_time"].tolist() == [60.0, 9.0]


def test_a_gzip_job_trace_reads_as_its_plain_file(tmp_path):
    """A gzip --jobs trace was refused as "not a UTF-8 CSV file"; a corrupt one is said to be gzip."""
    import gzip

    plain = tmp_path / "jobs.csv"
    plain.write_text(JOB_HEADER + "2,0,,60\n1,5,6,9\n")
    packed = tmp_path / "jobs.csv.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    pd.testing.assert_frame_equal(load_jobs(packed), load_jobs(plain))
    packed.write_bytes(packed.read_bytes()[:12] + b"garbage" * 4)
    with pytest.raises(BadRequest, match=f"{packed}: not a readable gzip file"):
        load_jobs(packed)


def test_a_job_trace_past_the_lines_a_csv_is_read_with_is_refused(tmp_path):
    """A job trace of any length was read whole (blank lines to the end, to say "no job rows"); it is refused past
    MAX_LINES lines, as a history is."""
    from core.textfile import MAX_LINES

    path = tmp_path / "jobs.csv"
    path.write_text(JOB_HEADER + "\n" * MAX_LINES)
    with pytest.raises(BadRequest, match=f"{path}: over {MAX_LINES:,} lines, the most a file is read with") as refused:
        load_jobs(path)
    assert str(refused.value).endswith("give a shorter part of the job trace"), "a job trace, only too long"


def test_a_job_trace_says_it_was_read_in_seconds_with_its_span_and_median_run(demand, tmp_path, capsys):
    """Milliseconds from the trace's start spanning under 8.8 hours pass every check (no time over 1e11, no span over
    a year) and were replayed, without a word, as a trace 1,000 times longer: these 2 hours of 10-minute jobs as 83
    days of 7-day jobs. Nothing in the numbers tells the two apart, so the reading is said every time, in the JSON's
    notes as on stderr, with the span and median run that show the slip."""
    path = tmp_path / "jobs.csv"
    path.write_text(JOB_HEADER + "".join(f"1,{k * 600_000},{k * 600_000},{(k + 1) * 600_000}\n" for k in range(12)))
    assert main(["simulate", str(demand), "--days", "1", "--gpus", "8", "--policy", "oracle", "--jobs", str(path),
                 "--json"]) == 0
    out, err = capsys.readouterr()
    said = (f"--jobs (simulate.jobs) {path}: times read as seconds: 12 pods over 83.3 days, a median run of 6d22h40m "
            "(milliseconds? divide creation_time, scheduled_time and deletion_time by 1000)")
    assert said in json.loads(out)["notes"] and f"note: {said}" in err, err


def test_simulate_says_what_of_a_job_trace_it_leaves_out(demand, tmp_path, capsys):
    """A 16-GPU job on an 8-GPU cluster was shrunk to 8 GPUs and a pod never scheduled replayed its time in the queue
    as work, both silently; a trace of two hours filled a day without a word. Now they are left out and said; a trace
    leaving no job to replay is an error naming the file (it gave no training at all, with goodput 1). What is left
    out is in the JSON's notes too, as stderr says it (it was said on stderr alone)."""
    path = tmp_path / "jobs.csv"
    path.write_text(JOB_HEADER + "16,0,0,3000\n1,100,,700\n2,3600,3700,9000\n1,7200,7200,9000\n")
    assert main(["simulate", str(demand), "--days", "1", "--gpus", "8", "--policy", "oracle", "--jobs", str(path),
                 "--json"]) == 0
    out, err = capsys.readouterr()
    job_notes = [n for n in json.loads(out)["notes"] if n.startswith(f"--jobs (simulate.jobs) {path}: ")]
    assert len(job_notes) == 4 and all(f"note: {n}" in err for n in job_notes), (job_notes, err)
    assert f"note: --jobs (simulate.jobs) {path}: 1 job(s) of more than 8 GPUs (up to 16)" in err
    assert "1 pod(s) of the window never scheduled" in err
    assert "created over 2h, less than the replay's 23h50m (its first step to its last): the first arrives 21h50m " \
        "in" in err
    path.write_text(JOB_HEADER + "0,0,0,3000\n1,100,,700\n")
    status, err = exits(["simulate", demand, "--days", "1", "--policy", "oracle", "--jobs", path], capsys)
    assert status == 2 and f"--jobs (simulate.jobs) {path}: no job of 1 to 128 GPUs ran in the trace's last 23h50m " \
        "(1 pod(s) there were never scheduled: a blank scheduled_time) (--days, --gpus)" in err, err


def test_report_json_says_what_of_a_job_trace_it_leaves_out(demand, tmp_path, capsys):
    """report --json's notes had the demand above the cluster only: what the job trace left out was said on stderr
    alone, as simulate --json's notes once did."""
    jobs = tmp_path / "jobs.csv"
    jobs.write_text(JOB_HEADER + "16,0,0,3000\n1,100,,700\n2,3600,3700,9000\n1,7200,7200,9000\n")
    policy = _policy_file(tmp_path / "p.yaml", trainingClusterQueues=["training"])  # where the jobs wait
    assert main(["report", str(demand), "--days", "1", "--gpus", "8", "--policy-file", str(policy), "--jobs",
                 str(jobs), "--json", "--out", str(tmp_path / "r")]) == 0
    out, err = capsys.readouterr()
    job_notes = [n for n in json.loads(out)["notes"] if n.startswith(f"--jobs (simulate.jobs) {jobs}: ")]
    assert len(job_notes) == 4 and all(err.count(f"note: {n}") == 1 for n in job_notes), (job_notes, err)


@pytest.mark.parametrize("command", ["simulate", "report", "run"])
def test_a_job_trace_with_no_training_queue_to_wait_in_is_refused(demand, tmp_path, capsys, monkeypatch, command):
    """A policy lending to no training ClusterQueue, given --jobs: the jobs arrive in turn into each training queue,
    and with none simulate, report and the embedded run ended in an IndexError traceback."""
    jobs = tmp_path / "jobs.csv"
    jobs.write_text(JOB_HEADER + "2,0,0,3000\n1,100,200,7000\n")
    policy = _policy_file(tmp_path / "p.yaml", trainingClusterQueues=[])
    given = ["--history", demand, "--hours", "6"] if command == "run" else [demand, "--days", "1"]
    extra = {"report": ["--out", tmp_path / "r"], "simulate": ["--json"], "run": []}[command]
    monkeypatch.chdir(tmp_path)  # the embedded run keeps its MLflow store in the working directory
    status, err = exits([command, *given, "--policy-file", policy, "--jobs", jobs, *extra], capsys)
    assert status == 2 and f"--jobs (simulate.jobs) {jobs}: no policy names a training ClusterQueue " \
        "(spec.trainingClusterQueues) for the trace's jobs to wait in" in err, err


@pytest.mark.parametrize("command", ["run", "plan"])
def test_a_policy_outside_the_namespace_the_controller_reads_is_refused(demand, tmp_path, capsys, monkeypatch, command):
    """With run.namespace the controller reads that namespace's policies alone: the embedded run replayed a policy
    of another namespace doing nothing (an empty --timeline, exit 0) and plan planned nothing, exit 0."""
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "headroom.yaml"
    config.write_text("run:\n  namespace: prod\n")
    policy = _policy_file(tmp_path / "p.yaml")  # metadata.namespace unset: default
    status, err = exits([command, "--config", config, "--policy-file", policy, "--history", demand, "--hours", "1"],
                        capsys)
    assert status == 2 and "run.namespace prod: the controller reads only that namespace's policies, and " \
        "default/chat is outside it" in err, err


def test_tune_neither_takes_nor_reads_a_job_trace_it_does_not_replay(short, tmp_path, capsys):
    """tune replays the history with a saturated backlog, yet took --jobs, read the file (refusing a bad one) and
    never used it: the flag is simulate's and report's, the configuration's key said unused."""
    jobs = tmp_path / "jobs.csv"
    jobs.write_text("not,a,job,trace\n")
    status, err = exits(["tune", short, "--jobs", jobs], capsys)
    assert status == 2 and "unrecognized arguments: --jobs" in err, err
    config = tmp_path / "c.yaml"
    config.write_text(f"simulate:\n  jobs: {jobs}\n")
    status, err = exits(["tune", short, "--config", config], capsys)
    assert "note: simulate.jobs of the configuration not used: tune replays the history with a saturated" in err
    assert status == 2 and "simulate.days 7 (--days) leaves no history" in err and "missing column" not in err, err


def test_the_real_job_trace_reads(shared_data):
    jobs = load_jobs(shared_data / "jobs" / "alibaba_openb_pods.csv")
    assert len(jobs) > 1000 and (jobs["num_gpu"] >= 0).all() and jobs["scheduled_time"].isna().any()


# ---------------------------------------------------------------------------- configuration
def test_the_tune_section_is_validated_and_every_error_listed(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("tune:\n  target_quantiles: [0.5, 1.5]\n  lead_times: ['-5m', 15m]\n  margins_gpus: [-1]\n"
                    "  warm_buffers: [.nan]\n  forecasters: [bogus]\n  scale_in_delays: [2d]\n  max_shortage: 2\n"
                    "run:\n  metrics_address: everywhere\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    paths = {line.split(":")[0] for line in err.value.errors}
    assert {"tune.target_quantiles[1]", "tune.lead_times", "tune.margins_gpus[0]", "tune.warm_buffers[0]",
            "tune.forecasters[0]", "tune.scale_in_delays", "tune.max_shortage", "run.metrics_address"} <= paths, paths


def test_cross_field_checks_are_listed_alongside_field_errors(tmp_path):
    """A check comparing two fields still runs when another field of the same section failed."""
    path = tmp_path / "c.yaml"
    path.write_text("run:\n  capacity_gpus: 8\n  non_lendable_gpus: 8\n  interval_seconds: -1\n"
                    "history:\n  file: a.csv\n  prometheus: {url: 'http://x', query: up}\n  statistic: p101\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    text = "\n".join(err.value.errors)
    assert "run.interval_seconds" in text and "non_lendable_gpus must leave some of capacity_gpus" in text
    assert "history.statistic" in text and "either file or prometheus" in text


@pytest.mark.parametrize("text, errors", [
    (b"\xff\xfe\x00garbage", ["(file): not a UTF-8 text file"]),
    ("history: {step: banana}", ["history.step: 'banana' is not a duration"]),
    ("history: {step: 30m}", ["history.step: 30m: the forecast step is 1h"]),
    ("history: {prometheus: {url: 'not a url', query: up, step: 0s, bearer_token_file: /nonexistent/token}}",
     ["history.prometheus.url: 'not a url' is not an http:// or https:// URL",
      "history.prometheus.step: 0s is not a positive duration",
      "history.prometheus.bearer_token_file: /nonexistent/token is not a file"]),
    ("run: {keep_forecast_seconds: .inf, stale_after_seconds: .nan, team_weights: {a: .inf, b: -1}}",
     ["run.keep_forecast_seconds: Input should be a finite number", "run.stale_after_seconds: Input should be a finite",
      "run.team_weights.a: Input should be a finite number", "run.team_weights.b: Input should be greater than 0"]),
    ("simulate: {world: {checkpoint_interval_seconds: .inf, hpa_scale_down_seconds: .inf}}",
     ["simulate.world.checkpoint_interval_seconds: Input should be a finite number",
      "simulate.world.hpa_scale_down_seconds: Input should be a finite number"]),
    ("training: {candidates: [profile, prophet]}\nforecast: {horizon: 0}",
     ["training.candidates: unknown model(s) ['prophet']", "forecast.horizon"]),
    # tune writes its grid's durations into a ReservationPolicy: a Go duration the CRD takes, not a day as 1d
    ("tune: {scale_in_delays: [10m, 1d], lead_times: [0w]}",
     ["tune.scale_in_delays: '1d' is not a Go duration", "tune.lead_times: '0w' is not a Go duration"]),
    # sent as 1s, its chunks sized for 1.5 s held more points than the server allows (an HTTP 400 naming no field);
    # 500ms went as 0s; 2h was refused only after the read, as a history coarser than the hour
    ("history: {prometheus: {url: 'http://x', query: up, step: 1500ms}}\nrun: {prometheus: {url: 'http://x', "
     "step: 500ms}}", ["history.prometheus.step: 1500ms: the step of a range query is whole seconds from 1s to 1h",
                       "run.prometheus.step: 500ms: the step of a range query is whole seconds"]),
    ("history: {prometheus: {url: 'http://x', query: up, step: 2h}}",
     ["history.prometheus.step: 2h: the step of a range query is whole seconds from 1s to 1h"]),
    # a port that is no number failed at the first read, exit 1; a ?query or #fragment had the API's path appended
    # to it (an HTML page came back: "Expecting value: line 1 column 1"); a password was shown
    ("history: {prometheus: {url: 'http://prom:9O90', query: up}}\nrun: {prometheus: {url: 'http://prom/?org=1'}}",
     ["history.prometheus.url: 'http://prom:9O90': the port is not a number from 0 to 65535",
      "run.prometheus.url: 'http://prom/?org=1': the server's URL (a path prefix, if any) takes no ?query"]),
    ("history: {prometheus: {url: 'prometheus://alice:s3cret@prom:9090', query: up}}",
     ["history.prometheus.url: 'prometheus://alice:***@prom:9090' is not an http:// or https:// URL"]),
    # an API URL pasted from a curl line: queried at /api/v1/query/api/v1/query_range, a 404 or nothing at all
    ("history: {prometheus: {url: 'http://prom:9090/api/v1/query', query: up}}\nrun: {prometheus: {url: "
     "'https://prom/monitoring/api/v1'}}",
     ["history.prometheus.url: 'http://prom:9090/api/v1/query': give the server's URL (with its path prefix, if "
      "any), not its API's: headroom adds /api/v1/query_range",
      "run.prometheus.url: 'https://prom/monitoring/api/v1': give the server's URL"]),
    # 1 or 2 steps of 45m in an hour, 8 or 9 of 7m: on a real Prometheus, hourly sums of a counter's increments read
    # 16 % and 3 % over the real ones, exit 0
    ("history: {prometheus: {url: 'http://x', query: up, step: 45m}}\nrun: {prometheus: {url: 'http://x', step: 7m}}",
     ["history.prometheus.step: 45m: the step of a range query is whole seconds from 1s to 1h that divide the hour",
      "run.prometheus.step: 7m: the step of a range query is whole seconds from 1s to 1h that divide the hour"]),
    # sent to the server as it was, exit 1 with the server's words, as if the server had failed
    ("history: {prometheus: {url: 'http://x', query: ''}}",
     ["history.prometheus.query: String should have at least 1 character"]),
], ids=["binary", "step-not-a-duration", "step-not-hourly", "prometheus", "infinite-seconds", "infinite-world",
        "candidates", "tune-durations-the-crd-refuses", "prometheus-step-fraction", "prometheus-step-over-an-hour",
        "prometheus-url", "prometheus-url-password", "prometheus-api-url", "prometheus-step-not-dividing-the-hour",
        "prometheus-empty-query"])
def test_configuration_errors_name_every_field(tmp_path, text, errors):
    path = tmp_path / "c.yaml"
    path.write_bytes(text) if isinstance(text, bytes) else path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    listed = "\n".join(err.value.errors)
    for error in errors:
        assert error.removeprefix("(file): ") in listed, listed


def test_a_section_with_every_key_commented_out_takes_its_defaults(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("\ufeffforecast:\n  # horizon: 12\ntune:\n")
    cfg = load_config(path)
    assert cfg.forecast.horizon == 48 and cfg.tune.target_quantiles == [0.5, 0.7, 0.8, 0.9, 0.95]


@pytest.mark.parametrize("token, what", [(b"\x1f\x8b\x08\x00", "not UTF-8 text (byte 1): a token is expected"),
                                         (b"timestamp,value\n2026-01-01T00:00:00Z,5\n", "holds 2 line(s), with spaces "
                                          "or control characters: a bearer token is one word"),
                                         (b"\n", "is empty: a bearer token is expected")],
                         ids=["binary", "several-lines", "empty"])
def test_a_bearer_token_file_that_holds_no_token_is_named_not_blamed_on_the_answer(tmp_path, capsys, token, what):
    """A binary token file failed every read as "the answer is not Prometheus' JSON: another service at this URL?"
    (its UnicodeDecodeError is a ValueError, as a JSON error is); several lines were sent as one header, refused by
    the HTTP client as the same. The file is named, and what is wrong with it."""
    path = tmp_path / "token"
    path.write_bytes(token)
    config = tmp_path / "headroom.yaml"
    config.write_text(f"history:\n  prometheus: {{url: 'http://127.0.0.1:9', query: up, bearer_token_file: {path}}}\n")
    status, err = exits(["forecast", "--config", config], capsys)
    assert status == 1 and f"bearer_token_file {path}: {what}" in err and "JSON" not in err, err


# ---------------------------------------------------------------------------- the metrics server
def test_metrics_server_closes_idle_connections_and_bounds_them():
    """Over the bound a connection is refused at once; an idle one is closed after the timeout and its slot comes
    back. Each claim has its own server: the 0.5 s timeout that the closing is seen within also freed the three
    slots whenever a busy machine held this test up for longer between filling them and the connection over them."""
    from controller import metrics as m
    from controller.state import ControllerState, StateHolder

    def serve(timeout: float):
        return m.serve(StateHolder(ControllerState()), 0, lambda: True, lambda: True, host="127.0.0.1",
                       max_connections=3, timeout=timeout)

    def connect(server) -> socket.socket:
        return socket.create_connection(("127.0.0.1", server.port), timeout=60)

    slow = serve(timeout=60)  # idle connections hold their slots for longer than this test takes
    idle = [connect(slow) for _ in range(3)]  # accepted before the next one: accept() takes them in order
    try:
        with connect(slow) as extra:
            assert extra.recv(100).startswith(b"HTTP/1.0 503"), "over the bound: refused at once, no thread"
    finally:
        for conn in idle:
            conn.close()
        slow.shutdown()

    def scrape(server) -> bytes:
        """Its answer, or b"" when the server dropped it (a test held up for longer than the 0.5 s timeout)."""
        reply = b""
        with connect(server) as conn, contextlib.suppress(ConnectionError):
            conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            while chunk := conn.recv(4096):  # HTTP/1.0: the server closes after one answer
                reply += chunk
        return reply

    quick = serve(timeout=0.5)
    try:
        idle = [connect(quick) for _ in range(3)]
        for conn in idle:  # idle connections are closed by the server after the timeout
            assert conn.recv(100) == b""
            conn.close()
        # their slots come back, each just after its close: a scrape is served, if refused 503 a moment before
        deadline = time.monotonic() + 60
        while not (reply := scrape(quick)).startswith(b"HTTP/1.0 200"):
            assert time.monotonic() < deadline, f"no scrape served 60 s after the idle connections closed: {reply!r}"
            time.sleep(0.05)
        assert reply.endswith(b"ok\n"), reply
    finally:
        quick.shutdown()


# ---------------------------------------------------------------------------- the MLflow store
def test_an_unwritable_mlflow_store_fails_at_once():
    from adapters.mlflow import Tracker, TrackingError

    started = time.perf_counter()
    for uri in ("sqlite:////proc/mlflow.db", "sqlite:////proc/no/such/mlflow.db"):  # /proc takes no new files
        with pytest.raises(TrackingError, match="is not writable"):
            Tracker(uri).connect()
    assert time.perf_counter() - started < 10, "no minutes of retries"


def test_a_sqlite_store_naming_a_directory_fails_at_once(tmp_path):
    """`--tracking-uri sqlite:////some/dir` (a folder, not a file) passed the writable check and mlflow retried opening
    it for 1m45s before 'unable to open database file'."""
    from adapters.mlflow import Tracker, TrackingError

    started = time.perf_counter()
    with pytest.raises(TrackingError, match=f"{tmp_path} is a directory, not a sqlite file: name a file, e.g. "
                                            f"sqlite:///{tmp_path}/mlflow.db"):
        Tracker(f"sqlite:///{tmp_path}").connect()
    assert time.perf_counter() - started < 10, "no minutes of retries"


# ---------------------------------------------------------------------------- one policy's fault stays its own
def test_a_history_without_samples_or_an_impossible_policy_affects_only_that_policy(examples, capsys):
    import yaml

    config = yaml.safe_load(examples.read_text())
    chat = config["run"]["policies"][0]
    (examples.parent / "empty.csv").write_text("timestamp,value\n")  # a new workload: nothing observed yet
    ghost = {**chat, "name": "ghost", "history_file": "empty.csv",
             "spec": {**chat["spec"], "target": {"kind": "Deployment", "name": "ghost"}}}
    huge = {**chat, "name": "huge", "spec": {**chat["spec"], "minGpus": 500,
                                             "target": {"kind": "Deployment", "name": "huge"}}}
    config["run"]["policies"] += [ghost, huge]
    config["run"]["retrain_every_seconds"] = 0
    examples.write_text(yaml.safe_dump(config))
    assert main(["run", "--config", str(examples), "--hours", "1", "--now", "2026-02-11T08:00:00Z"]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[2].rstrip(":"): line for line in out.splitlines() if line.startswith("2026-02-11 08:00")}
    assert "model auto" in lines["inference/chat"] and "FALLBACK" not in lines["inference/chat"]
    assert "FALLBACK" in lines["inference/ghost"] and "DEGRADED" in lines["inference/ghost"]
    assert "NOT PLANNED: minGpus 500 does not fit" in lines["inference/huge"]
    assert main(["plan", "--config", str(examples), "--now", "2026-02-11T08:00:00Z", "--json"]) == 0
    import json

    plan = json.loads(capsys.readouterr().out)["policies"]
    assert plan["inference/chat"]["hours"] and "error" in plan["inference/huge"]


def test_no_data_reserves_min_gpus_and_what_the_target_holds_and_leaves_the_others_alone(examples, tmp_path, capsys):
    """A policy with no history at all reserves its minGpus (never everything up to maxGpus: that would take the
    cluster from training and from the other policies) and says why; one whose data stops keeps what its target
    holds (never starves what inference serves); a valid neighbour plans exactly as it does alone."""
    import json

    import yaml

    config = yaml.safe_load(examples.read_text())
    config["run"]["retrain_every_seconds"] = 0
    chat = config["run"]["policies"][0]
    demand = pd.read_csv(examples.parent / "demand_5min.csv")
    stops = demand[pd.to_datetime(demand["timestamp"]) <= pd.Timestamp("2026-02-11T08:30:00Z")]
    stops.assign(value=stops["value"] / 4).to_csv(examples.parent / "fading.csv", index=False)

    def policy(name, history, **spec):
        return {**chat, "name": name, "history_file": history,
                "spec": {**chat["spec"], **spec, "target": {"kind": "Deployment", "name": name}}}

    def run(policies, name):
        config["run"]["policies"] = policies
        examples.write_text(yaml.safe_dump(config))
        timeline = tmp_path / f"{name}.csv"
        assert main(["run", "--config", str(examples), "--gpus", "128", "--now", "2026-02-11T08:00:00Z",
                     "--hours", "2", "--timeline", str(timeline)]) == 0
        return pd.read_csv(timeline), capsys.readouterr().out

    alone, _ = run([chat], "alone")
    (examples.parent / "empty.csv").write_text("timestamp,value\n")  # a new workload: nothing observed yet
    both, out = run([chat, policy("ghost", "empty.csv", minGpus=2, maxGpus=64),
                     policy("fading", "fading.csv", minGpus=1)], "both")
    mine = both[both["workload"] == "inference/chat"].reset_index(drop=True)
    for column in ("reserved_gpus", "demand_gpus"):
        assert mine[column].tolist() == alone[column].tolist(), column
    # the same headroom asked, kept within the GPUs lent, fewer beside the neighbours' reservations
    assert (mine["lent_gpus"] <= alone["lent_gpus"]).all()
    assert mine["headroom_gpus"].tolist() == np.minimum(alone["headroom_gpus"], mine["lent_gpus"]).tolist()
    ghost = both[both["workload"] == "inference/ghost"]
    assert (ghost["reserved_gpus"] == 2).all(), "no data: minGpus, not maxGpus 64"
    assert all("inference/ghost" not in line or ("reserved 2 GPUs" in line and "FALLBACK DEGRADED" in line)
               for line in out.splitlines())
    fading = both[both["workload"] == "inference/fading"]
    stale = fading[pd.to_datetime(fading["timestamp"]) >= pd.Timestamp("2026-02-11T09:00:00Z")]["reserved_gpus"]
    assert stale.min() > 1 and stale.is_monotonic_increasing, "degraded: never below what the target holds"
    assert main(["plan", "--config", str(examples), "--now", "2026-02-11T08:00:00Z", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)["policies"]["inference/ghost"]
    assert plan["reserved_now"] == 2 and "never below what the target holds now" in plan["why_now"]
    assert all(h["reason"].startswith("fallback (no data): nothing observed in the last week -> minGpus 2")
               for h in plan["hours"])


@pytest.mark.parametrize("command", [["run", "--once"], ["plan"]])
def test_a_policy_history_file_that_does_not_exist_is_a_configuration_error(examples, capsys, command):
    """run.policies[].history_file names a file that is not there when run or plan starts: a typo in the
    configuration, refused naming its field path (exit 2, as README promises for a missing input file), not replayed
    as a policy with no data (exit 0) or refused as unusable data (exit 1)."""
    import yaml

    config = yaml.safe_load(examples.read_text())
    chat = config["run"]["policies"][0]
    config["run"]["policies"].append({**chat, "name": "ghost", "history_file": "missing.csv",
                                      "spec": {**chat["spec"], "target": {"kind": "Deployment", "name": "ghost"}}})
    examples.write_text(yaml.safe_dump(config))
    status, err = exits([*command, "--config", examples, "--now", "2026-02-11T08:00:00Z"], capsys)
    assert status == 2, err
    assert f"invalid configuration ({examples}):\n  run.policies[1].history_file: {examples.parent / 'missing.csv'}: " \
        "no such file" in err, err
    config["run"]["policies"] = [{**chat, "history_file": "missing.csv"}]  # the only one: not exit 1 either
    examples.write_text(yaml.safe_dump(config))
    status, err = exits([*command, "--config", examples, "--now", "2026-02-11T08:00:00Z"], capsys)
    assert status == 2 and "  run.policies[0].history_file: " in err, err
    (examples.parent / "folder").mkdir()  # a directory is no file either: it exited 1, the policy's data unusable
    config["run"]["policies"] = [{**chat, "history_file": "folder"}]
    examples.write_text(yaml.safe_dump(config))
    status, err = exits([*command, "--config", examples, "--now", "2026-02-11T08:00:00Z"], capsys)
    assert status == 2 and f"  run.policies[0].history_file: {examples.parent / 'folder'}: is a directory" in err, err


def test_run_once_decides_where_and_as_plan_does(examples, capsys):
    """Without --now, the embedded `run --once` reconciled at the first step of the histories' last hour, where
    `plan` decides at their end: the two answers differed, and `run --once --now <the last sample>` was refused
    (--hours 1 from there ran past the end). `run --once` is one step, at the end by default, as `plan`."""
    assert main(["plan", "--config", str(examples), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    end = pd.Timestamp(plan["now"])
    said = []
    for when in ([], ["--now", f"{end:%Y-%m-%dT%H:%M:%SZ}"]):
        assert main(["run", "--config", str(examples), "--once", *when]) == 0
        said += [line for line in capsys.readouterr().out.splitlines() if "inference/chat:" in line]
    assert len(said) == 2 and all(line.startswith(f"{end:%Y-%m-%d %H:%M} ") for line in said), said
    reserved = {int(re.search(r"-> reserved (\d+) GPUs", line).group(1)) for line in said}
    assert reserved == {plan["policies"]["inference/chat"]["reserved_now"]}, (reserved, plan["policies"])
    status, err = exits(["run", "--config", examples, "--once", "--hours", "2"], capsys)
    assert status == 2 and "--hours 2: --once replays one step, at --now" in err, err


def test_a_history_that_ended_before_now_is_that_policys_missing_data_only(examples, capsys):
    """--now past one policy's history: that policy falls back (its data stopped), the run and the others go on."""
    import yaml

    config = yaml.safe_load(examples.read_text())
    chat = config["run"]["policies"][0]
    demand = pd.read_csv(examples.parent / "demand_5min.csv")
    demand[pd.to_datetime(demand["timestamp"]) < pd.Timestamp("2026-02-09T00:00:00Z")].to_csv(
        examples.parent / "ended.csv", index=False)
    config["run"]["policies"].append({**chat, "name": "ended", "history_file": "ended.csv",
                                      "spec": {**chat["spec"], "target": {"kind": "Deployment", "name": "ended"}}})
    config["run"]["retrain_every_seconds"] = 0
    examples.write_text(yaml.safe_dump(config))
    assert main(["run", "--config", str(examples), "--once", "--now", "2026-02-11T08:00:00Z"]) == 0
    lines = {line.split()[2].rstrip(":"): line for line in capsys.readouterr().out.splitlines()
             if line.startswith("2026-02-11 08:00")}
    assert "FALLBACK" not in lines["inference/chat"] and "FALLBACK DEGRADED" in lines["inference/ended"]


@pytest.mark.parametrize("metadata, error", [
    ({"name": "Bad_Name"}, "metadata.name: 'Bad_Name' is not a lowercase DNS label"),
    ({"name": "ok", "namespace": "a/b"}, "metadata.namespace: 'a/b' is not a lowercase DNS label"),
    ({"name": 7}, "metadata.name: required"),
    ({"name": "ok", "labelz": {"a": "b"}}, "metadata.labelz: not a field of an object's metadata"),
    ({"name": "ok", "labels": {"a": "b"}, "extra": 1}, "extra: not a field of a ReservationPolicy"),
])
def test_a_policy_files_metadata_is_checked_as_kubernetes_would(tmp_path, metadata, error):
    import yaml

    from core.policy import load_manifests

    path = tmp_path / "p.yaml"
    spec = {"query": "up", "capacity": {"demandPerGpu": 1}, "target": {"kind": "Deployment", "name": "x"}}
    extra = {"extra": metadata.pop("extra")} if "extra" in metadata else {}
    path.write_text(yaml.safe_dump({"apiVersion": "headroom.dev/v1alpha1", "kind": "ReservationPolicy",
                                    "metadata": metadata, "spec": spec, **extra}))
    with pytest.raises(ConfigError) as err:
        load_manifests(path)
    assert err.value.errors == [error + (" (a-z, 0-9, '-')" if "DNS" in error else "")]


def test_a_replay_where_no_policy_fits_the_cluster_is_refused_not_run_idle(examples, capsys):
    import yaml

    config = yaml.safe_load(examples.read_text())
    config["run"]["policies"][0]["spec"]["minGpus"] = 500
    examples.write_text(yaml.safe_dump(config))
    for command in (["run", "--once"], ["plan"]):  # plan printed "NOT PLANNED" and "nothing", exit 0
        status, err = exits([*command, "--config", examples], capsys)
        assert status == 2 and "no policy fits the cluster: inference/chat: minGpus 500 > the 128 GPUs it lends" \
            in err, (command, err)


def test_two_policies_of_one_name_or_one_target_are_refused_before_anything_runs(examples, capsys):
    """They would undo each other's decisions: refused with the policies named, in the file and across
    --policy-file and run.policies alike (not a reconcile that fails every step with exit status 0)."""
    import yaml

    config = yaml.safe_load(examples.read_text())
    chat = config["run"]["policies"][0]
    config["run"]["policies"].append({**chat, "name": "other"})  # another name, the same Deployment chat
    examples.write_text(yaml.safe_dump(config))
    status, err = exits(["run", "--config", examples, "--once"], capsys)
    assert status == 2 and "run: Deployment chat is the target of 2 policies" in err, err
    config["run"]["policies"].pop()
    examples.write_text(yaml.safe_dump(config))
    manifest = examples.parent / "chat.yaml"
    manifest.write_text(yaml.safe_dump({"apiVersion": "headroom.dev/v1alpha1", "kind": "ReservationPolicy",
                                        "metadata": {"name": "chat", "namespace": "inference"}, "spec": chat["spec"]}))
    status, err = exits(["run", "--config", examples, "--policy-file", manifest, "--history",
                         examples.parent / "demand_5min.csv", "--once"], capsys)
    assert status == 2 and "policy inference/chat is given 2 times" in err, err
    # a file given twice, and no run.policies: it said "--policy-file with run.policies: ..." of a configuration
    # that has none
    status, err = exits(["plan", "--policy-file", manifest, "--policy-file", manifest, "--history",
                         examples.parent / "demand_5min.csv"], capsys)
    assert status == 2 and "headroom: error: --policy-file: policy inference/chat is given 2 times" in err, err


# ---------------------------------------------------------------------------- the configuration and job reader fuzzed
SECTION_KEYS = {
    "history": ["file", "statistic", "step", "counter", "outlier_factor", "prometheus"],
    "forecast": ["horizon", "quantiles"],
    "backtest": ["horizon", "folds", "step"],
    "simulate": ["gpus", "peak_gpus", "per_gpu", "policy", "days", "world"],
    "tune": ["max_shortage", "target_quantiles", "warm_buffers", "lead_times", "margins_gpus", "forecasters"],
    "run": ["cluster", "capacity_gpus", "non_lendable_gpus", "metrics_port", "metrics_address", "team_weights",
            "interval_seconds", "prometheus", "keep_forecast_seconds", "stale_after_seconds"],
    "bogus": ["x"],
}
SCALAR = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True),
                   st.sampled_from([math.inf, -math.inf, math.nan]),
                   st.text(max_size=8), st.sampled_from(["15m", "-5m", "p95", "max", "0.0.0.0", "2d", "forecast"]))
ANY_VALUE = st.recursive(SCALAR, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                         st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                         max_leaves=8)
CONFIG = st.dictionaries(st.sampled_from(sorted(SECTION_KEYS)), st.just(None), max_size=4).flatmap(
    lambda sections: st.fixed_dictionaries({s: st.dictionaries(st.sampled_from(SECTION_KEYS[s]), ANY_VALUE,
                                                               max_size=4) for s in sections}))


@FUZZ
@given(CONFIG)
def test_fuzz_configuration(tmp_path_factory, tree):
    import yaml

    path = tmp_path_factory.mktemp("cfg") / "c.yaml"
    path.write_text(yaml.safe_dump(tree))
    try:
        cfg = load_config(path)
    except ConfigError as exc:
        assert exc.errors and all(": " in line for line in exc.errors)
        return
    # what validated is usable as validated: no NaN or infinity anywhere
    def numbers(node):
        if isinstance(node, dict):
            return [x for v in node.values() for x in numbers(v)]
        if isinstance(node, list | tuple):
            return [x for v in node for x in numbers(v)]
        return [node] if isinstance(node, float) else []

    assert all(math.isfinite(x) for x in numbers(cfg.model_dump()))
    assert all(0 < q < 1 for q in cfg.forecast.quantiles) and all(0 < q < 1 for q in cfg.tune.target_quantiles)
    assert math.isfinite(cfg.simulate.days) and cfg.simulate.days > 0
    assert cfg.run.non_lendable_gpus < cfg.run.capacity_gpus


JOB_CELL = st.one_of(st.integers(-5, 10**7).map(str), st.floats(allow_nan=True).map(repr),
                     st.sampled_from(["", "nan", "1.5", " 3 ", "x"]))


@FUZZ
@given(st.lists(st.tuples(JOB_CELL, JOB_CELL, JOB_CELL, JOB_CELL), max_size=20))
def test_fuzz_job_trace(tmp_path_factory, rows):
    path = tmp_path_factory.mktemp("jobs") / "jobs.csv"
    path.write_text(JOB_HEADER + "".join(",".join(c.replace(",", ";") for c in row) + "\n" for row in rows))
    try:
        jobs = load_jobs(path)
    except BadRequest as exc:
        assert f"--jobs (simulate.jobs) {path}" in str(exc)
        return
    assert (jobs["num_gpu"] >= 0).all() and np.isfinite(jobs[["creation_time", "deletion_time"]].to_numpy()).all()
    assert (jobs["creation_time"] <= jobs["deletion_time"]).all()
    scheduled = jobs["scheduled_time"].dropna()
    assert (scheduled >= jobs.loc[scheduled.index, "creation_time"]).all()


@pytest.mark.parametrize("name", ["bad name/with slash", ""])
def test_a_series_name_train_cannot_register_is_an_invalid_request(demand, tmp_path, capsys, name):
    """Refused before any work as training.name (exit 2), not a training that fails (1) or a silent file stem."""
    status, err = exits(["train", "--history", demand, "--name", name, "--tracking-uri",
                         f"sqlite:///{tmp_path}/ml.db"], capsys)
    assert status == 2 and "training.name: String should match pattern" in err, err
    assert not (tmp_path / "ml.db").exists()


def test_tune_with_a_configured_policy_file_names_the_configuration_key(demand, tmp_path, capsys):
    """tune has no --policy-file; a configuration shared with simulate may set simulate.policy_file. The refusal
    named --policy-file, a flag tune does not take."""
    policy_file = _policy_file(tmp_path / "p.yaml")
    config = tmp_path / "headroom.yaml"
    config.write_text(f"simulate:\n  policy_file: {policy_file}\n")
    status, err = exits(["tune", demand, "--days", "1", "--config", config], capsys)
    assert status == 2 and f"simulate.policy_file {policy_file} (the configuration): tune sweeps" in err, err
    assert "--policy-file," not in err and "not --policy-file" not in err


def test_a_demand_per_gpu_that_leaves_the_peak_under_one_gpu_is_said(demand, capsys):
    """The other side of the 'would need N GPUs' refusal: run (a tiny service is possible), but said."""
    status, err = exits(["simulate", demand, "--days", "1", "--per-gpu", "1e300", "--policy", "oracle"], capsys)
    assert status == 0 and "e-298 of one GPU, so every policy holds its minimum" in err, err


def test_plan_with_a_kubernetes_configuration_says_what_it_reads(tmp_path, capsys):
    config = tmp_path / "headroom.yaml"
    config.write_text("run:\n  cluster: kubernetes\n  prometheus: {url: 'http://127.0.0.1:9'}\n")
    status, err = exits(["plan", "--config", config], capsys)
    assert status == 2 and "it does not read a cluster's ReservationPolicies" in err, err


def train_given_tracking_uri(where: str, given: str, demand, tmp_path, monkeypatch, capsys) -> tuple[int, str, str]:
    """`train` in an empty folder with the tracking URI `given` where `where` says (the flag, MLFLOW_TRACKING_URI or
    a configuration key): its exit status, its stderr and the field its error should name."""
    import yaml

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    argv = ["train", "--history", demand, "--name", "chat"]
    field = where
    if where == "flag":
        argv += ["--tracking-uri", given]
        field = "training.tracking_uri"
    elif where == "MLFLOW_TRACKING_URI":
        monkeypatch.setenv(where, given)
    else:
        section, key = where.split(".")
        (tmp_path / "headroom.yaml").write_text(yaml.safe_dump({section: {key: given}}))
        argv += ["--config", tmp_path / "headroom.yaml"]
    status, err = exits(argv, capsys)
    return status, err, field


@pytest.mark.parametrize("where, given", [("flag", "mlflow.db"), ("flag", "file:///tmp/mlruns"),
                                          ("run.tracking_uri", "mlflow.db"), ("training.tracking_uri", "./ml/runs"),
                                          ("MLFLOW_TRACKING_URI", "mlflow.db")])
def test_a_tracking_uri_that_is_a_path_is_refused_naming_where_it_was_given(demand, tmp_path, monkeypatch, capsys,
                                                                          where, given):
    """A bare path (or file: URI) is MLflow's filesystem store, which MLflow no longer opens: train failed with
    MLflow's own "maintenance mode" error (exit 1) after it had started. Refused before any work, naming the field
    (or the variable) and the sqlite URI to give instead."""
    status, err, field = train_given_tracking_uri(where, given, demand, tmp_path, monkeypatch, capsys)
    path = given.removeprefix("file://")
    assert status == 2, err
    assert f"{field}: '{given}' is a path, not a tracking URI" in err and f"sqlite:///{path}" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == (["headroom.yaml"] if "." in where else []), "nothing made"


@pytest.mark.parametrize("where", ["flag", "MLFLOW_TRACKING_URI"])
@pytest.mark.parametrize("given", ["sqlite:///", "sqlite://", "sqlite:///:memory:", "sqlite:///?mode=memory",
                                   "sqlite:mlflow.db", "sqlite://host/mlflow.db"])
def test_a_sqlite_uri_naming_no_file_is_refused_not_trained_into_memory(demand, tmp_path, monkeypatch, capsys, where,
                                                                       given):
    """sqlite:///, sqlite:// and sqlite:///:memory: are a database in memory: train printed "PROMOTED", exit 0, and
    the runs, the model and the champion were gone as it ended (its locks made in the working directory's parent).
    Refused before any work, naming where it was given and the URI to give."""
    status, err, field = train_given_tracking_uri(where, given, demand, tmp_path, monkeypatch, capsys)
    assert status == 2 and f"{field}: '{given}' names no sqlite file" in err and "sqlite:///mlflow.db" in err, err
    assert not list(tmp_path.iterdir()) and not (tmp_path.parent / ".headroom-locks").exists(), "nothing made"


@pytest.mark.parametrize("where", ["flag", "MLFLOW_TRACKING_URI"])
@pytest.mark.parametrize("given", ["http://", "https://", "http:///mlflow", "http://user:secret@:5000"])
def test_an_http_uri_naming_no_host_is_refused_before_any_work(demand, tmp_path, monkeypatch, capsys, where, given):
    """http:// with no host passed the check and failed only once a training tried to log to it (exit 1, "no host
    given"): a mistyped setting, refused as one (exit 2) naming where it was given, its password not shown."""
    status, err, field = train_given_tracking_uri(where, given, demand, tmp_path, monkeypatch, capsys)
    assert status == 2 and f"{field}: " in err and "names no tracking server host" in err, err
    assert "secret" not in err and not list(tmp_path.iterdir()), err


@pytest.mark.parametrize("where", ["flag", "MLFLOW_TRACKING_URI", "run.tracking_uri"])
@pytest.mark.parametrize("given", ["http://127.0.0.1:5000x", "https://user:secret@mlflow:50OO", "http://mlflow:99999"])
def test_an_http_uri_with_a_mistyped_port_is_refused_before_any_work(demand, tmp_path, monkeypatch, capsys, where,
                                                                     given):
    """A port that is no number (`:5000x`) passed the check and was a traceback at the first request
    (http.client.InvalidURL: nonnumeric port: '5000x'), exit 1: refused as a mistyped setting (exit 2) naming where
    it was given, its password not shown."""
    status, err, field = train_given_tracking_uri(where, given, demand, tmp_path, monkeypatch, capsys)
    assert status == 2 and f"{field}: " in err and "names no valid port" in err, err
    assert "Traceback" not in err and "secret" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == (["headroom.yaml"] if "." in where else []), "nothing made"


@pytest.mark.parametrize("uri", ["sqlite:///mlflow.db", "sqlite:////abs/mlflow.db", "http://mlflow:5000",
                                 "https://user:pw@mlflow.example/prefix", "postgresql://u@db/mlflow", "databricks"])
def test_a_tracking_uri_mlflow_opens_is_taken_as_given(uri):
    """The check refuses paths only: every store URI MLflow opens (databricks is its one without a scheme)."""
    cfg = load_config(None, {"training.tracking_uri": uri, "run.tracking_uri": uri})
    assert cfg.training.tracking_uri == cfg.run.tracking_uri == uri


@pytest.mark.parametrize("flag, what", [("--jobs", "a line longer than"), ("--policy-file", "longer than"),
                                        ("--config", "longer than")])
def test_a_device_given_as_an_input_file_is_refused_not_read_forever(flag, what, tmp_path):
    """/dev/zero as --config or --policy-file was read into memory until the machine killed headroom (exit 137), as
    --jobs was read forever: every text file a user names is now read with a bound, and refused past it."""
    import subprocess
    import sys

    history = tmp_path / "h.csv"
    write_csv(synthetic_demand(days=3, seed=1), history)
    done = subprocess.run([sys.executable, "-m", "cli.main", "simulate", str(history), "--days", "1", flag,
                           "/dev/zero"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "/dev/zero" in done.stderr and what in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


# ---------------------------------------------------------------------------- names of the objects a policy acts on
def _kubernetes_takes(name: str) -> bool:
    """A DNS-1123 subdomain, as Kubernetes names a Deployment, an HPA or a ClusterQueue: at most 253 characters, labels
    joined by '.', each of lowercase letters, digits and '-', starting and ending with a letter or digit."""
    ends = set("abcdefghijklmnopqrstuvwxyz0123456789")
    return 0 < len(name) <= 253 and all(label and label[0] in ends and label[-1] in ends and set(label) <= ends | {"-"}
                                        for label in name.split("."))


# never "training", the queue beside them (a repeated one has its own error)
NAMES = st.one_of(st.text(st.sampled_from("ab09-._Z /ä\n"), max_size=8), st.integers(250, 256).map(lambda n: "a" * n))
SPEC = {"query": "up", "capacity": {"demandPerGpu": 10}, "mode": "active"}


@settings(max_examples=300, deadline=None)
@given(name=NAMES, field=st.sampled_from(["inferenceClusterQueue", "trainingClusterQueues", "Deployment",
                                          "HorizontalPodAutoscaler", "ClusterQueue"]))
def test_a_name_kubernetes_cannot_hold_is_refused_naming_its_field(name, field):
    """`trainingClusterQueues: [training, Bad_Q]` simulated fine (exit 0) while on a cluster it could only be
    QueueMissing: a ClusterQueue's, a Deployment's and an HPA's name is a DNS-1123 subdomain, checked in the spec as
    the CRD's pattern checks it, the error at the field's path."""
    from core.policy import parse_policy_spec

    spec = {**SPEC, "target": {"kind": "Deployment", "name": "chat"}, "trainingClusterQueues": ["training"]}
    if field == "inferenceClusterQueue":
        spec[field], path = name, "spec.inferenceClusterQueue"
    elif field == "trainingClusterQueues":
        spec[field], path = ["training", name], "spec.trainingClusterQueues[1]"
    else:
        spec["target"], path = {"kind": field, "name": name}, "spec.target.name"
    try:
        parse_policy_spec(spec, "p.yaml")
    except ConfigError as exc:
        assert not _kubernetes_takes(name) and [e.partition(": ")[0] for e in exc.errors] == [path], exc.errors
    else:
        assert _kubernetes_takes(name), f"{name!r} taken as {field}"


def test_the_what_if_refuses_a_clusterqueue_name_a_cluster_cannot_hold(demand, tmp_path, capsys):
    path = _policy_file(tmp_path / "p.yaml", trainingClusterQueues=["training", "Bad_Q"])
    status, err = exits(["simulate", demand, "--days", "1", "--policy-file", path, "--json"], capsys)
    assert status == 2 and "spec.trainingClusterQueues[1]: 'Bad_Q' is not a ClusterQueue name (a DNS-1123 " \
        "subdomain: at most 253 lowercase letters, digits, '-' and '.', starting and ending with a letter or digit)" \
        in err, err


def test_a_stored_policy_naming_a_bad_clusterqueue_is_invalid_spec():
    """An object stored before the CRD had the names' pattern: the controller refuses it as InvalidSpec, naming the
    field, as any spec error; the policy beside it goes on. What it holds still counts: its target runs on, and its
    other training queue is lent into (the misnamed one is no queue); its whole holding was dropped, so its
    Deployment's GPUs were lendable."""
    from controller.reconcile import ParsedSpecs, identified, invalid_holdings, parse_policies

    def stored(name: str, **spec) -> dict:
        return {"metadata": {"name": name, "namespace": "ml", "uid": name, "generation": 1},
                "spec": {**SPEC, "target": {"kind": "Deployment", "name": name}, **spec}}

    objects = identified([stored("chat", trainingClusterQueues=["training", "Bad_Q"], inferenceClusterQueue="Bad_I"),
                          stored("search", inferenceClusterQueue="search")])
    valid, invalid = parse_policies(objects)
    assert [p.ref.name for p in valid] == ["search"]
    (message,) = invalid.values()
    assert "spec.trainingClusterQueues[1]: 'Bad_Q' is not a ClusterQueue name" in message, message
    holdings = invalid_holdings(objects, invalid, valid, ParsedSpecs())
    assert [(p.target().target.name, p.spec.training_cluster_queues, p.spec.inference_cluster_queue)
            for p in holdings.holders] == [("chat", ["training"], None)], holdings.holders
