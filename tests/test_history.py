import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

from core.textfile import MAX_LINE
from core.units import go_duration
from forecast.history import (
    JITTER_ROUNDED,
    MIN_STRETCH,
    HistoryError,
    Stretch,
    at_own_step_reported,
    load_history,
    prepare,
    sampling_step,
    sampling_stretches,
)
from forecast.synthetic import synthetic_demand, write_csv


def write(tmp_path, text, name="h.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_blank_value_is_missing_not_zero(tmp_path):
    raw = load_history(write(tmp_path, "timestamp,value\n2026-01-01T00:00:00Z,5\n2026-01-01T01:00:00Z,\n"
                                       "2026-01-01T02:00:00Z,7\n"))
    assert raw.iloc[0] == 5 and math.isnan(raw.iloc[1]) and raw.iloc[2] == 7


def test_epoch_seconds_and_offsets_agree(tmp_path):
    iso = load_history(write(tmp_path, "timestamp,value\n2026-01-01T01:00:00+01:00,1\n", "a.csv"))
    epoch = load_history(write(tmp_path, "timestamp,value\n1767225600,1\n", "b.csv"))
    assert iso.index[0] == epoch.index[0] == pd.Timestamp("2026-01-01T00:00:00Z")


@pytest.mark.parametrize("body, where, what", [
    ("timestamp,value\n2026-01-01T00:00:00Z,5\n2026-01-01T01:00:00Z,abc\n", ":3:", "abc"),
    ("timestamp,value\n2026-01-01T00:00:00,5\n", ":2:", "time zone"),
    ("timestamp,value\n2026-01-01T00:00:00Z,5,9\n", ":2:", "expected 2 fields"),
    ("time,val\n1,2\n", ":1:", "header"),
    ("", "", "empty"),
])
def test_malformed_file_names_file_and_line(tmp_path, body, where, what):
    path = write(tmp_path, body)
    with pytest.raises(HistoryError) as err:
        load_history(path)
    assert str(path) in str(err.value) and where in str(err.value) and what in str(err.value)


def test_a_date_written_day_first_is_refused_not_guessed_row_by_row(tmp_path):
    """ISO-8601 only: pandas' free-form parser read 12/01/2026 as December 1 and 13/01/2026 as January 13 (it guesses
    each row's date order alone), a day-first file read as a jumble of days, exit 0. RFC 3339's lower-case t and z
    still read."""
    path = write(tmp_path, "timestamp,value\n12/01/2026 00:00:00+00:00,5\n13/01/2026 00:00:00+00:00,7\n")
    with pytest.raises(HistoryError, match=re.escape(f"{path}:2: timestamp '12/01/2026 00:00:00+00:00' is not "
                                                     "ISO-8601")):
        load_history(path)
    lower = load_history(write(tmp_path, "timestamp,value\n2026-01-12t00:00:00z,5\n", "lower.csv"))
    assert lower.index[0] == pd.Timestamp("2026-01-12T00:00:00Z")


def test_a_file_without_line_ends_is_refused_as_its_first_line_grows_not_read_whole(tmp_path):
    """`headroom forecast /dev/zero` read forever (an endless line, read whole before csv's field limit applied);
    a large file of one line was read whole first. Both are refused once a line passes MAX_LINE."""
    import subprocess
    import sys

    blob = tmp_path / "blob.csv"
    blob.write_text("timestamp,value\n" + "1" * (MAX_LINE + 10))
    with pytest.raises(HistoryError, match=f"{blob}: a line longer than {MAX_LINE} characters"):
        load_history(blob)
    done = subprocess.run([sys.executable, "-m", "cli.main", "forecast", "/dev/zero"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 1 and "/dev/zero: a line longer than" in done.stderr, done.stderr


def test_a_gzip_history_reads_as_its_plain_file_and_a_gzip_bomb_is_refused_as_it_grows(tmp_path):
    """`headroom forecast f.csv.gz` said "not a UTF-8 text file (byte 1)". A gzip CSV is told by its magic bytes, not
    its name, and read with the plain file's bounds on its decompressed text: a bomb's endless line is refused, and so
    is one of short rows, as it decompresses past 250 times its compressed size."""
    import gzip

    plain = tmp_path / "h.csv"
    write_csv(synthetic_demand(days=3, step="10min"), plain)
    for name in ("h.csv.gz", "h-gzipped.csv"):
        (tmp_path / name).write_bytes(gzip.compress(plain.read_bytes()))
        pd.testing.assert_series_equal(load_history(tmp_path / name), load_history(plain))
    bomb = tmp_path / "bomb.csv.gz"
    with gzip.open(bomb, "wb", compresslevel=1) as out:  # 16 MiB of digits, no line end, in under 1 MiB
        out.write(b"timestamp,value\n")
        for _ in range(16):
            out.write(b"1" * (1 << 20))
    assert bomb.stat().st_size < 1 << 20
    with pytest.raises(HistoryError, match=f"{bomb}: a line longer than {MAX_LINE} characters"):
        load_history(bomb)
    rows = tmp_path / "rows.csv.gz"
    with gzip.open(rows, "wb") as out:  # 8 MiB of one short row repeated, some 400 times its compressed size
        out.write(b"timestamp,value\n" + b"2026-01-01T00:00:00Z,1\n" * ((8 << 20) // 23))
    with pytest.raises(HistoryError, match=f"{rows}: gzip decompressing to over 250 times its size"):
        load_history(rows)
    cut = tmp_path / "cut.csv.gz"
    cut.write_bytes((tmp_path / "h.csv.gz").read_bytes()[:-100])
    with pytest.raises(HistoryError, match=f"{cut}: not a readable gzip file: Compressed file ended"):
        load_history(cut)


def test_a_csv_past_its_lines_or_characters_is_refused_as_it_is_read_not_read_whole(tmp_path, monkeypatch):
    """A CSV of any size was read whole into memory (a stream of one row repeated held 2 GB after a minute and grew
    on; 40 million blank lines gzipped under the bomb ratio were read for a minute to say "no data rows"). Past
    MAX_LINES lines, blank ones too, or MAX_CSV_CHARS characters, it is refused as it is read, naming the file."""
    import gzip

    from core import textfile

    blanks = tmp_path / "blanks.csv"
    blanks.write_text("timestamp,value\n" + "\n" * textfile.MAX_LINES)
    packed = tmp_path / "blanks.csv.gz"  # blank lines, a space or a comma each at random: no gzip bomb
    pick = np.random.default_rng(0).integers(0, 2, textfile.MAX_LINES)
    lines = np.frombuffer(b" \n,\n", dtype=np.uint8).reshape(2, 2)[pick]
    packed.write_bytes(gzip.compress(b"timestamp,value\n" + lines.tobytes(), compresslevel=1))
    for path in (blanks, packed):
        with pytest.raises(HistoryError, match=f"{path}: over {textfile.MAX_LINES:,} lines, the most a file is read "
                                               "with .*: give its latest part, or its samples at a coarser step"):
            load_history(path)
    monkeypatch.setattr(textfile, "MAX_CSV_CHARS", 1 << 20)  # as 1 GiB would be, with 1 GiB less to write
    wide = tmp_path / "wide.csv"
    wide.write_text("timestamp,value,labels\n" + "".join(f"2026-01-05T{h:02d}:00:00Z,1,{'x' * 100_000}\n"
                                                         for h in range(24)))
    with pytest.raises(HistoryError, match=f"{wide}: over 1,048,576 characters by line 12, the most a file is read"):
        load_history(wide)


def test_a_parquet_history_past_the_rows_a_history_is_read_with_is_refused_unread(tmp_path, monkeypatch):
    """A Parquet history of any size was read whole (6 million ISO-8601 text timestamps: still reading after 300 s,
    at 1.2 GB). One past MAX_LINES rows is refused from its footer, before a row is read, as a CSV is."""
    from core.textfile import MAX_LINES

    path = tmp_path / "h.parquet"
    pd.DataFrame({"timestamp": pd.date_range("2026-01-05", periods=MAX_LINES + 1, freq="s", tz="UTC"),
                  "value": 1.0}).to_parquet(path)
    monkeypatch.setattr(pd, "read_parquet", None)  # not called: a row read would be a TypeError
    with pytest.raises(HistoryError, match=f"{path}: 5,000,001 rows, over 5,000,000, the most a file is read with "
                                           r"\(its rows are held in memory\): give its latest part"):
        load_history(path)


def test_parquet_text_timestamps_are_read_as_a_column_as_a_csv_s_are(tmp_path, monkeypatch):
    """Timestamps stored as text in a Parquet file were parsed one row at a time: a million rows took 210 s (the same
    rows as a CSV, 13 s). Clean text, ISO-8601 or epoch integers, is read as a column, as a CSV's is: the same
    times, not one parsed alone."""
    import forecast.history as history

    def alone(*args):
        raise AssertionError("a timestamp parsed alone")

    stamps = pd.date_range("2026-01-05", periods=500, freq="5min", tz="UTC")
    texts = {"ISO-8601": stamps.strftime("%Y-%m-%dT%H:%M:%SZ"),
             "offset": stamps.tz_convert("Asia/Kolkata").strftime("%Y-%m-%dT%H:%M:%S+05:30"),
             "epoch seconds (told by magnitude)": stamps.as_unit("s").asi8.astype(str)}
    monkeypatch.setattr(history, "_parse_timestamp", alone)
    for k, (how, text) in enumerate(texts.items()):
        path = tmp_path / f"h{k}.parquet"
        pd.DataFrame({"timestamp": text, "value": 1.0}).to_parquet(path)
        read = load_history(path)
        assert read.index.equals(stamps) and read.attrs["timestamps"] == how.replace("offset", "ISO-8601")


def test_a_parquet_history_with_its_index_named_as_a_column_is_refused_naming_it(tmp_path):
    """`frame.set_index("timestamp", drop=False).to_parquet()`: the index restored beside the column of its name was a
    ValueError traceback, "cannot insert timestamp, already exists"."""
    hours = pd.date_range("2026-01-05", periods=48, freq="h", tz="UTC")
    path = tmp_path / "h.parquet"
    pd.DataFrame({"timestamp": hours, "value": 1.0}).set_index("timestamp", drop=False).to_parquet(path)
    with pytest.raises(HistoryError) as refused:
        load_history(path)
    assert str(refused.value) == f"{path}: a column is named twice: ['timestamp', 'timestamp', 'value']"


def test_a_blank_sample_never_supersedes_a_value_at_its_time(tmp_path):
    """Two exports of one series, the second over the first's last 12 hours, its first row blank (a grid exported
    with a blank where it had no sample): the later sample of a time given twice won, so the value the first export
    gave at that hour was dropped and the hour read missing. A blank says nothing of a time: the value is kept, and
    said; a later value still supersedes an earlier one."""
    hours = pd.date_range("2026-01-05", periods=72, freq="h", tz="UTC")
    values = 10 + np.arange(72) % 24.0
    later = [""] + [str(v + 1) for v in values[-11:]]
    path = write(tmp_path, "timestamp,value\n" + "".join(f"{t.isoformat()},{v}\n" for t, v in zip(hours, values))
                 + "".join(f"{t.isoformat()},{v}\n" for t, v in zip(hours[-12:], later)))
    series, report = prepare(load_history(path), counter=False)
    expected = values.copy()
    expected[-11:] += 1
    np.testing.assert_array_equal(series.to_numpy(), expected)
    assert "12 duplicate timestamps (the later sample of each kept; at 1, the later sample blank, the value)" in \
        report.repairs()


def test_parquet_round_trip(tmp_path):
    series = synthetic_demand(days=3, step="10min")
    frame = pd.DataFrame({"timestamp": series.index, "value": series.to_numpy()})
    frame.to_parquet(tmp_path / "h.parquet")
    loaded = load_history(tmp_path / "h.parquet")
    assert loaded.index.equals(series.index)
    np.testing.assert_array_equal(loaded.to_numpy(), series.to_numpy())


def test_aggregation_statistics_and_gaps():
    index = pd.date_range("2026-01-01", periods=24, freq="5min", tz="UTC")
    raw = pd.Series(np.arange(24, dtype=float), index=index)
    raw.iloc[12:] = np.nan  # the whole second hour is missing
    for statistic, expected in [("mean", 5.5), ("max", 11.0), ("p50", 5.5)]:
        series, report = prepare(raw, statistic=statistic)
        assert series.iloc[0] == pytest.approx(expected)
        assert math.isnan(series.iloc[1]), "an hour with no samples is missing, not zero"
        assert report.missing_steps == 1 and series.index.freq == pd.Timedelta("1h")
        assert "1 missing points at step 1h (kept missing, never scored)" in report.lines()
    # read at its own step (what simulate replays), the same gap is 12 points: each count says its step
    _, own = prepare(raw, step=None)
    assert own.repairs() == ["12 missing points at step 5m (kept missing, never scored)"]


def test_duplicates_out_of_order_and_resets_are_repaired_and_reported():
    index = pd.DatetimeIndex(["2026-01-01T00:00Z", "2026-01-01T00:20Z", "2026-01-01T00:10Z",
                              "2026-01-01T00:20Z", "2026-01-01T00:30Z", "2026-01-01T00:40Z"])
    # A cumulative counter that resets to 0 between 00:20 and 00:30.
    raw = pd.Series([100.0, 999.0, 110.0, 120.0, 5.0, 15.0], index=index)
    series, report = prepare(raw, step="1h", statistic="sum", counter=True, outlier_factor=None)
    assert report.out_of_order == 1 and report.duplicates == 1 and report.counter_resets == 1
    # increments: 10, 10, 5 (after the reset the new value counts), 10; four of the hour's six 10-min steps, so the
    # hour's sum is theirs scaled to six (the two missing are not zero demand)
    assert series.iloc[0] == pytest.approx(35.0 * 6 / 4) and report.partial_sums == 1


def test_outliers_are_clipped_and_reported_but_real_peaks_are_kept():
    series = synthetic_demand(days=14, step="1h")
    glitch = series.copy()
    glitch.iloc[100] = series.max() * 50
    cleaned, report = prepare(glitch, outlier_factor=3.0)
    assert report.outliers == [glitch.index[100].isoformat()]
    # clipped to the factor times the series' own 99th percentile, every other hour as it was
    assert cleaned.iloc[100] == pytest.approx(3.0 * np.nanpercentile(glitch.to_numpy(), 99), rel=1e-12)
    np.testing.assert_array_equal(cleaned.drop(cleaned.index[100]).to_numpy(), series.drop(series.index[100]))
    untouched, report = prepare(series, outlier_factor=3.0)
    assert report.outliers == []


def test_a_mostly_zero_history_keeps_its_bursts_and_does_not_report_them_clipped():
    """A token trace idle 99 % of hours has a 99th percentile of 0: no bound to clip at, so its bursts are kept as
    demand, and the report said "N outliers clipped" for values it left as they were."""
    index = pd.date_range("2026-01-05", periods=14 * 24, freq="h", tz="UTC")
    raw = pd.Series(0.0, index=index)
    raw.iloc[[40, 200]] = [5.0, 9.0]
    cleaned, report = prepare(raw, outlier_factor=3.0)
    assert cleaned.equals(raw.rename("demand").set_axis(cleaned.index)) and report.outliers == []
    assert "0 outliers clipped" in " ".join(report.lines())


def test_coarser_history_than_step_is_refused():
    raw = pd.Series([1.0, 2.0, 3.0], index=pd.date_range("2026-01-01", periods=3, freq="2h", tz="UTC"))
    with pytest.raises(HistoryError, match="coarser"):
        prepare(raw)


def test_negative_values_are_refused_with_a_hint():
    raw = pd.Series([1.0, -2.0, 3.0], index=pd.date_range("2026-01-01", periods=3, freq="h", tz="UTC"))
    with pytest.raises(HistoryError, match="counter"):
        prepare(raw)


def test_example_history_round_trips(tmp_path):
    series = synthetic_demand(days=7)
    write_csv(series, tmp_path / "d.csv")
    loaded = load_history(tmp_path / "d.csv")
    np.testing.assert_allclose(loaded.to_numpy(), series.to_numpy(), equal_nan=True)
    assert series.isna().any(), "the example carries a gap on purpose"


def test_real_traces_load(shared_data):
    for path in sorted((shared_data / "traces").glob("*.csv")):
        series, report = prepare(load_history(path), statistic="max")
        assert series.index.freq == pd.Timedelta("1h") and len(series) > 24 * 7, path


@given(step_minutes=st.sampled_from([1, 5, 10, 60]), kept=st.lists(st.booleans(), min_size=20, max_size=300),
       pattern=st.booleans())
def test_the_step_of_a_sampler_with_gaps_is_its_step(step_minutes, kept, pattern):
    """Every third sample missing (1 h and 2 h intervals alike often) once read as a 1.5 h step and was refused as
    coarser than the hourly forecast; the step is the most common interval, gaps or not."""
    if pattern:
        kept = [i % 3 != 2 for i in range(len(kept))]
    kept = [True, True, True, *kept]  # the sampler's step seen at least twice
    index = pd.date_range("2026-01-05", periods=len(kept), freq=f"{step_minutes}min", tz="UTC")[np.array(kept)]
    gaps = np.diff(index.asi8) // (step_minutes * 60 * 10**9)
    if (gaps == 1).sum() >= max((gaps == g).sum() for g in set(gaps)):  # the step the most common interval
        assert sampling_step(index) == pd.Timedelta(minutes=step_minutes)


def test_an_hourly_history_missing_every_third_hour_is_prepared_at_the_hour():
    index = pd.date_range("2026-01-05", periods=199, freq="h", tz="UTC")
    raw = pd.Series(np.arange(199.0) % 24, index)[np.arange(199) % 3 != 2]  # a daily cycle (only rising: a counter)
    series, report = prepare(raw, step="1h")
    assert report.input_step == "1h" and len(series) == 199 and series.isna().sum() == 66


# ----------------------------------------------------------------------- epoch times in scientific notation
START = 1767571200  # 2026-01-05T00:00:00Z, epoch seconds
PER_SECOND = {"s": 1, "ms": 10**3, "us": 10**6}


def scientific_csv(tmp_path, texts, name="h.csv"):
    return write(tmp_path, "timestamp,value\n" + "".join(f"{text},10\n" for text in texts), name)


@pytest.mark.parametrize("form, line, resolution", [("{:.6e}", 4, "16m40s"), ("{:g}", 3, "2h46m40s")])
def test_epoch_seconds_written_with_fixed_too_few_digits_are_refused_not_read_at_a_made_up_step(tmp_path, form, line,
                                                                                               resolution):
    # a week of 5-minute samples: at 1,000 s (or 10,000 s) 1,410 (or 1,955) of them met and were dropped, the rest
    # read 16m40s (or 2h46m40s, then refused as a step outside 1s .. 1h) apart
    path = scientific_csv(tmp_path, [form.format(START + 300 * k) for k in range(2016)])
    with pytest.raises(HistoryError) as error:
        load_history(path)
    message = str(error.value)
    assert message.startswith(f"{path}: line {line}: timestamp ")
    assert f"meets line {line - 1}'s" in message
    assert f"scientific notation to the nearest {resolution}" in message
    assert "write epoch times in full, e.g. %d or %.3f" in message


def test_r_s_epoch_milliseconds_with_trailing_zeros_dropped_read_exactly(tmp_path):
    # as R's as.character writes them: 1.7675712e+12 (exact, as its dropped digits are zeros) among longer ones, 10 s
    # apart, as fine as the longest is written
    times = [(START + 10 * k) * 1000 for k in range(400)]
    texts = [np.format_float_scientific(float(t), unique=True) for t in times]
    assert "1.7675712e+12" in texts and "1.76757121e+12" in texts
    raw = load_history(scientific_csv(tmp_path, texts))
    assert raw.index.equals(pd.DatetimeIndex(pd.to_datetime(times, unit="ms", utc=True), name="timestamp"))


@pytest.mark.parametrize("binary", [False, True])
def test_parquet_text_epoch_times_written_too_coarsely_are_refused_naming_the_row(tmp_path, binary):
    path = tmp_path / "h.parquet"
    texts = [f"{(START + 60 * k) * 1000:.7e}" for k in range(100)]
    pd.DataFrame({"timestamp": [text.encode() for text in texts] if binary else texts, "value": 1.0}).to_parquet(path)
    with pytest.raises(HistoryError, match=r": row 3: timestamp '1\.7675713e\+12' meets row 2's .* nearest 1m40s"):
        load_history(path)


def test_several_series_of_exact_scientific_times_are_told_as_several_series(tmp_path):
    texts = [np.format_float_scientific(float((START + 10 * k) * 1000), unique=True) for k in range(100)]
    path = write(tmp_path, "timestamp,value,workload\n" + "".join(f"{text},1,{name}\n" for text in texts
                                                                    for name in ("chat", "code")))
    with pytest.raises(HistoryError, match="column 'workload' tells several series apart"):
        load_history(path)


@given(unit=st.sampled_from(sorted(PER_SECOND)), step=st.sampled_from([1, 5, 10, 15, 60, 300, 3600]),
       digits=st.integers(3, 15), offset=st.integers(0, 86_399), exact=st.booleans())
def test_epoch_times_read_within_the_precision_written_or_are_refused(tmp_path_factory, unit, step, digits, offset,
                                                                       exact):
    """A writer of fixed precision (%.{digits}e) states each time to a resolution: one finer than the step reads every
    row, each within half of it; one coarser is refused. A writer of variable digits (shortest exact) always reads."""
    times = [(START + offset + step * k) * PER_SECOND[unit] for k in range(50)]
    resolution = 10.0 ** (len(str(times[0])) - 1 - digits) / PER_SECOND[unit]  # seconds
    assume(exact or not step < resolution < 2 * step)  # in between, only enough rows meet (the rule is proven below)
    texts = [np.format_float_scientific(float(t), unique=True) if exact else f"{t:.{digits}e}" for t in times]
    path = scientific_csv(tmp_path_factory.mktemp("sci"), texts)
    if not exact and resolution > step:
        with pytest.raises(HistoryError, match=f"scientific notation to the nearest {go_duration(resolution)},"):
            load_history(path)
        return
    read = load_history(path).index.asi8 / 1e9
    assert not pd.Index(read).has_duplicates
    assert np.abs(read - np.array(times) / PER_SECOND[unit]).max() <= (0 if exact else resolution / 2) + 1e-6


def test_fixed_precision_just_coarser_than_the_step_is_refused_once_rows_meet(tmp_path):
    # 999 s samples at 1,000 s: every thousandth pair meets
    path = scientific_csv(tmp_path, [f"{START + 999 * k:.6e}" for k in range(2000)])
    with pytest.raises(HistoryError, match="nearest 16m40s"):
        load_history(path)


# ---------------------------------------------------------------------------- several series in one file
@given(workloads=st.lists(st.text(alphabet="abcxyz-", min_size=1, max_size=6), min_size=2, max_size=4, unique=True),
       hours=st.integers(2, 30), parquet=st.booleans(), column=st.sampled_from(["workload", "Model", "pod"]))
def test_a_file_of_several_series_is_refused_naming_the_column(tmp_path_factory, workloads, hours, parquet, column):
    """One row per workload and timestamp (a long-format export) once read as duplicates of one series: the later
    workload's row won at every timestamp and the others vanished without a word. It is refused, naming the
    column that tells the series apart."""
    index = pd.date_range("2026-01-05", periods=hours, freq="h", tz="UTC")
    frame = pd.concat([pd.DataFrame({"timestamp": index, "value": float(k + 1), column: name})
                       for k, name in enumerate(workloads)]).sort_values("timestamp", kind="stable")
    path = tmp_path_factory.mktemp("multi") / ("h.parquet" if parquet else "h.csv")
    if parquet:
        frame.to_parquet(path, index=False)
    else:
        frame.assign(timestamp=frame["timestamp"].map(pd.Timestamp.isoformat)).to_csv(path, index=False)
    with pytest.raises(HistoryError) as err:
        load_history(path)
    message = str(err.value)
    assert str(path) in message and repr(column.lower() if parquet else column) in message
    assert "one series per file" in message


def test_an_extra_column_that_does_not_tell_series_apart_is_ignored(tmp_path):
    """Extra columns are allowed; a duplicate timestamp with the same labels is a correction (the later wins)."""
    raw = load_history(write(tmp_path, "timestamp,value,workload\n2026-01-01T00:00:00Z,5,chat\n"
                                       "2026-01-01T01:00:00Z,6,chat\n2026-01-01T01:00:00Z,7,chat\n"))
    series, report = prepare(raw, outlier_factor=None)
    assert report.duplicates == 1 and series.tolist() == [5.0, 7.0]


# ---------------------------------------------------------------------------- sums over a step with samples missing
@given(step_minutes=st.sampled_from([1, 5, 7, 10, 13, 15, 25]), level=st.floats(0.5, 1e6),
       kept=st.lists(st.booleans(), min_size=130, max_size=300))
def test_a_sum_over_an_hour_with_samples_missing_is_not_a_smaller_demand(step_minutes, level, kept):
    """`--statistic sum` of a steady demand: an hour with samples missing (a missed scrape, a gap, a history
    starting mid-hour) once summed only the samples it had, as if the missing ones were zero demand, and the
    forecast reserved for less; at a sampling step that does not divide the hour (7 minutes: hours of 8 and 9
    samples) an hour of 9 was summed whole, 5 % over. Every hour with a sample sums to the steady hourly total, and
    the report says how many were made whole."""
    kept = [True, True, *kept]
    # most samples there, so the sampler's step is its most common interval (three samples in two hours have no
    # step to read: refused, or before stretches were read, summed as 2 where 60 were due)
    assume(np.mean(kept) >= 0.5)
    index = pd.date_range("2026-01-05T00:00Z", periods=len(kept), freq=f"{step_minutes}min")[np.array(kept)]
    raw = pd.Series(level, index=index)
    series, report = prepare(raw, statistic="sum", outlier_factor=None)
    real = series.dropna()
    np.testing.assert_allclose(real.to_numpy(), level * 60 / step_minutes, rtol=1e-9)
    counts = raw.resample("1h").count()
    # samples missing: a whole sample's time absent (under 8 of 7-minute samples, under 12 of 5-minute ones)
    assert report.partial_sums == int(((counts > 0) & (counts < 60 // step_minutes)).sum())
    assert (report.partial_sums > 0) == any("sums over a step with samples missing" in line for line in report.lines())
    uneven = (counts >= 60 // step_minutes) & (counts * step_minutes != 60)
    assert report.uneven_sums == int(uneven.sum())
    assert (report.uneven_sums > 0) == any("the sampling step does not divide" in line for line in report.repairs())


# ---------------------------------------------------------------------------- a cumulative counter read as demand
@given(step_minutes=st.sampled_from([1, 5, 15, 60]), days=st.floats(2.1, 6),
       increments=st.lists(st.floats(0.0, 1e4), min_size=8, max_size=8), resets=st.integers(0, 2))
def test_a_cumulative_counter_is_refused_unless_history_counter_says_so(step_minutes, days, increments, resets):
    """A requests_total counter given where demand is expected (a Prometheus query without rate(), an exporter's raw
    column) was forecast as ever-growing demand: the forecast reserved for the total since the counter started.
    It is refused, naming history.counter; with counter: true its increments are the demand."""
    index = pd.date_range("2026-01-05", periods=int(days * 1440 / step_minutes), freq=f"{step_minutes}min", tz="UTC")
    steps = np.resize(np.array(increments) + 1.0, len(index))  # every step counts something
    total = np.cumsum(steps)
    for k in range(1, resets + 1):  # a restart: the counter starts again from zero
        at = k * len(index) // (resets + 2)
        total[at:] -= total[at - 1]
    raw = pd.Series(total, index=index)
    with pytest.raises(HistoryError, match="history.counter: true") as refused:
        prepare(raw)
    # its span as a duration is written everywhere else ("3d23h55m"), not pandas' "3 days 23:55:00"
    assert re.search(r"changes over (\d+[dhms]+)+: ", str(refused.value)), str(refused.value)
    series, report = prepare(raw, counter=True, outlier_factor=None)
    assert report.counter_resets == resets and (series.dropna() > 0).all()


@given(step_minutes=st.sampled_from([1, 5, 15, 60]), rate=st.floats(0.5, 1e6),
       outages=st.lists(st.tuples(st.integers(1, 12 * 72 - 1), st.integers(1, 300)), max_size=4),
       blank=st.booleans(), statistic=st.sampled_from(["mean", "max", "sum"]))
@example(step_minutes=5, rate=100.0, outages=[(12 * 10 + 5, 1), (12 * 30, 36)], blank=False, statistic="mean")
@example(step_minutes=15, rate=1.0, outages=[(1, 285)], blank=False, statistic="mean")  # two intervals: 15 m, 71 h
def test_a_counter_at_a_steady_rate_reads_as_that_rate_whatever_samples_are_missing(step_minutes, rate, outages,
                                                                                     blank, statistic):
    """The first sample of a counter after a gap (missed scrapes, an outage: rows absent or values blank) holds the
    increase of every step it spans, and was taken as one step's: a 5-minute counter rising 100 a step read mean 400
    (sum 4800) in the hour after a 3-hour outage, a burst forecast and reserved for. Each increment is shared among
    the steps it spans, and said: every hour with an increment reads the steady rate, every other is missing."""
    index = pd.date_range("2026-01-05", periods=3 * 1440 // step_minutes, freq=f"{step_minutes}min", tz="UTC")
    lost = np.zeros(len(index), dtype=bool)
    for first, length in outages:
        lost[first % len(index) or 1:][:length] = True  # the first sample stays: increments start from it
    assume((~lost).sum() >= 3)
    raw = pd.Series(rate * np.arange(1, len(index) + 1), index=index)
    raw = raw.where(~lost) if blank else raw[~lost]
    series, report = prepare(raw, statistic=statistic, counter=True, outlier_factor=None)
    per_hour = rate * 60 / step_minutes if statistic == "sum" else rate
    counted = index[~lost][1:].floor("h").unique()  # the hours holding an increment
    assert series[counted].tolist() == pytest.approx([per_hour] * len(counted), rel=1e-9)
    assert series.drop(counted).isna().all()
    assert report.counter_gaps == int((~lost[1:] & lost[:-1]).sum())


def test_a_gauge_that_only_rose_is_read_as_it_is_when_history_counter_is_false(tmp_path, capsys):
    """GPUs in use over a ramp-up week, one more every four hours and none released, only rise: refused as a
    counter, and neither way out it named (counter: true, a rate) reads a gauge. history.counter: false does."""
    from cli.main import main

    index = pd.date_range("2026-01-05", periods=7 * 24, freq="h", tz="UTC")
    ramp = pd.Series(np.minimum(10 + np.maximum(np.arange(len(index)) - 48, 0) // 4, 40).astype(float), index)
    with pytest.raises(HistoryError, match="history.counter: false if it is a gauge that only rose"):
        prepare(ramp)
    series, _ = prepare(ramp, counter=False)
    assert series.equals(ramp.rename("demand").set_axis(series.index))
    pd.DataFrame({"timestamp": index.strftime("%Y-%m-%dT%H:%M:%SZ"), "value": ramp}).to_csv(tmp_path / "gpus.csv",
                                                                                          index=False)
    (tmp_path / "gauge.yaml").write_text("history:\n  counter: false\n")
    # at --horizon 24 its pick is the one this test was written on (the 48 h default picks on 48-hour inner folds)
    assert main(["forecast", str(tmp_path / "gpus.csv"), "--config", str(tmp_path / "gauge.yaml"), "--json",
                 "--horizon", "24"]) == 0
    assert 35 <= json.loads(capsys.readouterr().out)["forecast"][0]["q0.5"] <= 45


@given(level=st.floats(1, 1e6), trend=st.floats(0, 0.5), noise=st.floats(0, 0.2), seed=st.integers(0, 100))
def test_a_growing_demand_gauge_is_not_taken_for_a_counter(level, trend, noise, seed):
    """A gauge of demand growing fast, with its daily cycle, is read as it is."""
    index = pd.date_range("2026-01-05", periods=14 * 288, freq="5min", tz="UTC")
    t = np.arange(len(index)) / 288
    rng = np.random.default_rng(seed)
    values = level * (1 + trend * t) * (1.2 + np.sin(2 * np.pi * t)) * (1 + noise * rng.random(len(t)))
    series, _ = prepare(pd.Series(values, index=index))
    assert series.notna().sum() == 14 * 24


# ---------------------------------------------------------------------- Parquet as pandas and SQL engines write it
@given(index_written=st.booleans(), decimal=st.booleans(), hours=st.integers(2, 60))
def test_parquet_with_timestamps_as_index_or_decimal_values_reads_as_written(tmp_path_factory, index_written, decimal,
                                                                             hours):
    """`series.to_frame("value").to_parquet()` (the timestamps as the index) was refused as 'missing columns
    ['timestamp']', and a decimal(p, s) value column (as SQL engines export) as 'Decimal is not a number'."""
    from decimal import Decimal

    import pyarrow as pa
    import pyarrow.parquet as pq

    index = pd.date_range("2026-01-05", periods=hours, freq="h", tz="UTC", name="timestamp")
    values = np.round(np.random.default_rng(hours).uniform(0, 1000, hours), 2)
    path = tmp_path_factory.mktemp("pq") / "h.parquet"
    if decimal:
        pq.write_table(pa.table({"timestamp": pa.array(index.to_pydatetime(), pa.timestamp("us", tz="UTC")),
                                 "value": pa.array([Decimal(f"{v:.2f}") for v in values], pa.decimal128(12, 2))}),
                       path)
    frame = pd.DataFrame({"value": values}, index=index)
    if index_written:
        frame.to_parquet(path)
    elif not decimal:
        frame.reset_index().to_parquet(path, index=False)
    raw = load_history(path)
    assert raw.index.equals(index.as_unit("ns").rename("timestamp"))
    np.testing.assert_allclose(raw.to_numpy(), values)


def test_a_history_from_a_pipe_is_read(tmp_path):
    """`headroom forecast <(zcat demand.csv.gz)` names a pipe, which exists but is no regular file: it was refused
    as 'no such file'."""
    import os
    import threading

    text = "timestamp,value\n2026-01-01T00:00:00Z,5\n2026-01-01T01:00:00Z,7\n"
    read_end, write_end = os.pipe()
    writer = threading.Thread(target=lambda: (os.write(write_end, text.encode()), os.close(write_end)))
    writer.start()
    try:
        raw = load_history(f"/dev/fd/{read_end}")
    finally:
        writer.join()
        os.close(read_end)
    assert raw.tolist() == [5.0, 7.0]
    with pytest.raises(HistoryError, match="no such file"):
        load_history(tmp_path / "missing.csv")


# ---------------------------------------------------------------------------- a long history, read at once
ZONES = st.sampled_from(["Z", "+00:00", "+05:30", "-08:00", "+14:00", "-12:00"])


@given(st.lists(st.tuples(st.datetimes(min_value=pd.Timestamp("1901-01-01").to_pydatetime(),
                                       max_value=pd.Timestamp("2199-12-30").to_pydatetime()),
                          ZONES, st.sampled_from(["T", " "]), st.sampled_from([0, 3, 6, 9])), min_size=1, max_size=30),
       st.sampled_from([None, 1, 10**3, 10**6, 10**9]))
def test_timestamps_read_at_once_are_those_read_row_by_row(moments, epoch_ns):
    """A CSV's timestamps are read as a column when every row is plain ISO-8601 with a zone or an epoch integer (a
    year of 10-second samples took a minute row by row, without a word): the times are exactly those the
    row-by-row reader gives, which also stays the reader of anything else and names a bad row."""
    from forecast.history import _rows_one_by_one, _stamps_at_once

    def iso(moment, zone, sep, digits):
        text = pd.Timestamp(moment).strftime(f"%Y-%m-%d{sep}%H:%M:%S")
        fraction = f"{pd.Timestamp(moment).microsecond:06d}{'000'}"[:digits]
        return text + (f".{fraction}" if digits else "") + zone

    if epoch_ns is None:
        texts = [iso(*m) for m in moments]
    else:
        texts = [str(int(pd.Timestamp(m[0], tz="UTC").value // epoch_ns)) for m in moments
                 if pd.Timestamp("1990-01-01") <= pd.Timestamp(m[0]) < pd.Timestamp("2200-01-01")] or ["1767225600"]
    rows = [(k + 2, [text, "1"]) for k, text in enumerate(texts)]
    try:
        expected, _, units = _rows_one_by_one(Path("h.csv"), rows, 2, 0, 1)
    except HistoryError:
        assert _stamps_at_once(texts) is None  # out of range after the offset: left to the row-by-row reader
        return
    at_once = _stamps_at_once(texts)
    assert at_once is not None and at_once[0].equals(expected) and at_once[1] == units


# ---------------------------------------------------------------------------- a sampling step that changes partway
def _sampled(demand: pd.Series, window: str, statistic: str) -> pd.Series:
    """`demand` as a sampler at `window` reports it: each sample at its window's start, the window's statistic."""
    return getattr(demand.resample(window, origin="epoch"), statistic)()


@given(fine_seconds=st.sampled_from([30, 60, 120, 300]), ratio=st.sampled_from([2, 3, 4, 5, 6, 10]),
       coarse_windows=st.integers(MIN_STRETCH + 1, 60), fine_windows=st.integers(MIN_STRETCH + 1, 200),
       offset=st.integers(0, 11), coarse_first=st.booleans(), statistic=st.sampled_from(["sum", "mean", "max"]),
       seed=st.integers(0, 2 ** 16))
def test_a_history_whose_step_changes_reads_as_the_same_demand_sampled_uniformly(
        fine_seconds, ratio, coarse_windows, fine_windows, offset, coarse_first, statistic, seed):
    """A scrape interval changed (or two exports concatenated): the file at 5 min then 1 min was read at one step,
    the finer, for the whole file: the 5-minute part read as 4 samples in 5 missing, and `--statistic sum` scaled
    each of its hours by 5 (five times the demand, exit 0). Each stretch is now read at its own step: the hourly
    series is the one of the same demand sampled at the finer step throughout, and the report says where the step
    changed, and to what."""
    fine, coarse = pd.Timedelta(seconds=fine_seconds), pd.Timedelta(seconds=fine_seconds * ratio)
    if pd.Timedelta("1h") % coarse:  # a coarse window inside one hour: its statistic is the hour's part of it
        return
    start = pd.Timestamp("2026-01-05T00:00Z") + offset * coarse
    parts = [coarse_windows * coarse, fine_windows * fine]
    spans = parts if coarse_first else parts[::-1]
    change = start + spans[0]
    change = change.ceil(coarse)  # a coarse window is whole on its side of the change
    end = change + spans[1]
    rng = np.random.default_rng(seed)
    index = pd.date_range(start, end, freq=fine, inclusive="left")
    demand = pd.Series(np.round(rng.gamma(2.0, 50.0, len(index)), 3), index=index)  # the underlying demand
    before, after = demand[demand.index < change], demand[demand.index >= change]
    first, second = (coarse, fine) if coarse_first else (fine, coarse)
    changed = pd.concat([_sampled(before, first, statistic), _sampled(after, second, statistic)])
    uniform = _sampled(demand, fine, statistic)

    series, report = prepare(changed, statistic=statistic, outlier_factor=None)
    expected, expected_report = prepare(uniform, statistic=statistic, outlier_factor=None)
    assert series.index.equals(expected.index)
    np.testing.assert_allclose(series.to_numpy(), expected.to_numpy(), rtol=1e-9)
    assert (report.partial_sums, report.missing_steps) == (expected_report.partial_sums, expected_report.missing_steps)
    assert report.step_changes == [f"{go_duration(first)} to {go_duration(second)} at {change.isoformat()}"]
    said = f"sampling step changes from {go_duration(first)} to {go_duration(second)} at {change.isoformat()}"
    assert any(said in line for line in report.repairs())
    if statistic == "mean":  # replayed at the coarser step: the finer stretch's mean over each coarse window
        own, own_report = at_own_step_reported(changed)
        pd.testing.assert_series_equal(own, prepare(uniform, step=str(coarse), outlier_factor=None)[0], rtol=1e-9)
        assert own_report.missing_steps == 0


@given(step_seconds=st.sampled_from([15, 60, 300, 3600]), jitter_ms=st.integers(50, 999),
       missing=st.floats(0.0, 0.3), seed=st.integers(0, 2 ** 16))
@example(step_seconds=300, jitter_ms=900, missing=0.0, seed=0)
def test_timestamps_with_milliseconds_of_jitter_read_as_the_samples_without_it(step_seconds, jitter_ms, missing, seed):
    """A scraper's samples (Prometheus' raw ones) fall a few hundred milliseconds after each whole-second step. Their
    most common interval was one jittered value, 5m0.021s, and the history was replayed at that step: its steps 4
    minutes off the clock (23:56:09, 00:01:09, ...), intervals holding two samples and their neighbours none
    (reported missing), `run --now 00:00:00Z` refused as between samples. Read at their whole-second step, they are
    the history without the jitter, gaps and all."""
    rng = np.random.default_rng(seed)
    index = pd.date_range("2026-01-05", periods=2000, freq=f"{step_seconds}s", tz="UTC")
    kept = np.r_[True, rng.random(len(index) - 1) >= missing]
    clean = pd.Series(rng.uniform(1, 100, len(index)), index=index)[kept]
    jittered = clean.set_axis(clean.index + pd.to_timedelta(rng.integers(0, jitter_ms, len(clean)), unit="ms"))
    read, report = at_own_step_reported(jittered)
    expected, _ = at_own_step_reported(clean)
    pd.testing.assert_series_equal(read, expected)
    assert report.input_step == go_duration(step_seconds)


@given(step_seconds=st.sampled_from([15, 60, 300, 3600]), jitter_ms=st.integers(1, 499),
       missing=st.floats(0.0, 0.3), seed=st.integers(0, 2 ** 16))
@example(step_seconds=300, jitter_ms=3, missing=0.0, seed=0)
def test_timestamps_milliseconds_either_side_of_the_step_read_as_the_samples_without_them(step_seconds, jitter_ms,
                                                                                         missing, seed):
    """5m ± 3 ms: read at step 5m, but a sample 3 ms before its step fell in the step before it, so that a quarter of
    the steps read missing and their neighbours held two samples (an hour's sum of 13 or 11 of them). Read at their
    nearest whole seconds, they are the history without the jitter, gaps and all, whatever the statistic."""
    rng = np.random.default_rng(seed)
    index = pd.date_range("2026-01-05", periods=2000, freq=f"{step_seconds}s", tz="UTC")
    kept = np.r_[True, rng.random(len(index) - 1) >= missing]
    clean = pd.Series(rng.uniform(1, 100, len(index)), index=index)[kept]
    jitter = pd.to_timedelta(rng.integers(-jitter_ms, jitter_ms + 1, len(clean)), unit="ms")
    jittered = clean.set_axis(clean.index + jitter)
    read, report = at_own_step_reported(jittered)
    expected, expected_report = at_own_step_reported(clean)
    pd.testing.assert_series_equal(read, expected)
    assert (report.input_step, report.missing_steps) == (go_duration(step_seconds), expected_report.missing_steps)
    summed, summed_report = prepare(jittered, statistic="sum")
    expected, expected_report = prepare(clean, statistic="sum")
    pd.testing.assert_series_equal(summed, expected)
    assert summed_report.lines() == expected_report.lines() + [f"{int((jitter != pd.Timedelta(0)).sum())} "
                                                               f"{JITTER_ROUNDED}"]


def test_a_step_change_under_milliseconds_of_jitter_is_read_and_said_as_without_them():
    """A 5-minute export then a 10-minute one, each timestamp ± 3 ms: with no run of one exact interval the change was
    not seen, the whole read at 10 minutes (the 5-minute part two samples a step, some hours' sums of 13 of them) and
    no change said. Read at their nearest whole seconds, the change is read and said as in the file without jitter;
    5 and 10 minutes are never rounded into one step."""
    five = pd.date_range("2026-01-05", periods=600, freq="5min", tz="UTC")
    index = five.append(pd.date_range(five[-1] + pd.Timedelta("10min"), periods=600, freq="10min", tz="UTC"))
    clean = pd.Series(np.random.default_rng(0).uniform(1, 100, len(index)), index=index)
    jitter = pd.to_timedelta(np.random.default_rng(1).integers(-3, 4, len(index)), unit="ms")
    jittered = clean.set_axis(index + jitter)
    for statistic in ("mean", "sum"):
        read, report = prepare(jittered, statistic=statistic)
        expected, expected_report = prepare(clean, statistic=statistic)
        pd.testing.assert_series_equal(read, expected)
        assert [line for line in report.lines() if JITTER_ROUNDED not in line] == expected_report.lines()
        assert report.step_changes == [f"5m to 10m at {five[-1].isoformat()}"]
    pd.testing.assert_series_equal(at_own_step_reported(jittered)[0], at_own_step_reported(clean)[0])


@given(step_seconds=st.sampled_from([1, 2, 15, 300]), late_ms=st.tuples(st.integers(1, 999), st.integers(1, 999)),
       missing=st.floats(0.0, 0.3), seed=st.integers(0, 2 ** 16))
@example(step_seconds=1, late_ms=(597, 603), missing=0.0, seed=0)
@example(step_seconds=1, late_ms=(497, 503), missing=0.0, seed=0)
@example(step_seconds=1, late_ms=(500, 999), missing=0.0, seed=0)
@example(step_seconds=1, late_ms=(1, 934), missing=0.0, seed=0)  # their mean put those furthest from it a step off
def test_timestamps_jittered_around_a_sub_second_offset_read_as_the_samples_at_it(step_seconds, late_ms, missing,
                                                                                  seed):
    """12:00:00.6, 12:00:01.6, ... ± 3 ms at a 1-second step: each timestamp was rounded to its nearest whole second,
    the offset they share taken for jitter, so every sample was read a step late (the file without the jitter is
    read as stamped); at .5 ± 3 ms neighbours met at one second and one of each pair was dropped as a duplicate.
    Jittered anywhere from 1 to 999 ms late, the samples are read as the file without it, each in its own step, where
    their spread leaves a part of the second none falls in to lay the grid by (50 ms here; jitter over the whole
    second leaves none: samples that meet are read as duplicates, and said)."""
    assume(abs(late_ms[1] - late_ms[0]) <= 950)
    rng = np.random.default_rng(seed)
    index = pd.date_range("2026-01-05", periods=2000, freq=f"{step_seconds}s", tz="UTC")
    kept = np.r_[True, rng.random(len(index) - 1) >= missing]
    clean = pd.Series(rng.uniform(1, 100, len(index)), index=index)[kept]
    late = pd.to_timedelta(rng.integers(min(late_ms), max(late_ms) + 1, len(clean)), unit="ms")
    jittered = clean.set_axis(clean.index + late)
    read, report = at_own_step_reported(jittered)
    expected, expected_report = at_own_step_reported(clean)
    pd.testing.assert_series_equal(read, expected)
    assert (report.duplicates, report.missing_steps) == (0, expected_report.missing_steps)
    for statistic in ("sum", "max"):
        pd.testing.assert_series_equal(prepare(jittered, statistic=statistic)[0],
                                       prepare(clean, statistic=statistic)[0])


def test_a_history_without_a_stretch_of_one_step_keeps_its_one_step():
    """Timestamps with jitter (59-61 s apart) have no stretch of one step: read at their median step as before."""
    rng = np.random.default_rng(1)
    index = pd.DatetimeIndex(pd.Timestamp("2026-01-05T00:00Z") + pd.to_timedelta(
        np.cumsum(rng.integers(59, 62, 2000)), unit="s"))
    assert sampling_stretches(index) == [Stretch(index[0], sampling_step(index))]
    _, report = prepare(pd.Series(1.0, index=index), statistic="sum")
    assert report.step_changes == [] and report.input_step == go_duration(sampling_step(index))


@given(regular_minutes=st.sampled_from([5, 10, 15]), jitter=st.integers(1, 5), first=st.booleans(),
       seed=st.integers(0, 2 ** 16))
def test_a_regular_stretch_beside_timestamps_with_jitter_at_another_step_is_refused(regular_minutes, jitter, first,
                                                                                    seed):
    """A 5-minute export beside a longer 1-minute one whose timestamps jitter (no stretch of one step in it): read at
    the jitter's step, the regular part read as 4 samples in 5 missing, and summed 5 times its demand (exit 0)."""
    rng = np.random.default_rng(seed)
    regular = pd.date_range("2026-01-05", periods=288, freq=f"{regular_minutes}min", tz="UTC")
    jittery = pd.to_timedelta(np.cumsum(rng.integers(60 - jitter, 61 + jitter, 3000)), unit="s")
    index = regular.append(regular[-1] + jittery) if first else (regular[0] - jittery[::-1]).append(regular)
    with pytest.raises(HistoryError, match=rf"apart in a stretch from {re.escape(regular[0].isoformat())}, and "
                                           "elsewhere irregular"):
        prepare(pd.Series(1.0, index=index), statistic="sum")


def test_timestamps_with_jitter_out_of_order_are_not_taken_for_interleaved_exports():
    """A run of equal intervals inside a jittery history (61 s among 59-61 s, most often 60 s) is the one sampler's,
    not a second export: with two rows swapped (the file then read in its own order too) it is still read."""
    intervals = np.r_[np.resize([59, 60, 60, 61], 400), np.full(13, 61), np.resize([59, 60, 60, 61], 400)]
    index = pd.Timestamp("2026-01-05T00:00Z") + pd.to_timedelta(np.r_[0, np.cumsum(intervals)], unit="s")
    raw = pd.Series(1.0, index=index)
    raw = pd.concat([raw.iloc[:100], raw.iloc[[101, 100]], raw.iloc[102:]])
    series, report = prepare(raw, statistic="sum")
    assert report.out_of_order == 1 and report.input_step == "1m" and series.notna().all()


def test_a_gap_is_not_a_step_change():
    """A 5-minute sampler with gaps (a missed scrape, an hour down) stays one stretch at 5 minutes."""
    index = pd.date_range("2026-01-05", periods=600, freq="5min", tz="UTC")
    index = index.delete(list(range(100, 112)) + [300, 301, 450])
    assert sampling_stretches(index) == [Stretch(index[0], pd.Timedelta("5min"))]


def test_a_stretch_coarser_than_the_forecast_step_is_refused_naming_where():
    index = pd.date_range("2026-01-05", periods=40, freq="30min", tz="UTC").append(
        pd.date_range("2026-01-06", periods=40, freq="2h", tz="UTC"))
    with pytest.raises(HistoryError, match=r"history step 2h \(from 2026-01-06T00:00:00\+00:00\) is "
                                           "coarser than the forecast step"):
        prepare(pd.Series(1.0, index=index))


@given(fine_seconds=st.sampled_from([60, 120, 300]), ratio=st.sampled_from([2, 5, 6]), coarse_first=st.booleans(),
       overlap=st.integers(0, 6), meet=st.booleans(), early_first=st.booleans(),
       statistic=st.sampled_from(["sum", "mean", "max"]), seed=st.integers(0, 2 ** 16))
def test_two_exports_at_different_steps_overlapping_read_as_the_demand_they_both_sampled(
        fine_seconds, ratio, coarse_first, overlap, meet, early_first, statistic, seed):
    """Two exports concatenated, at 5 and 1 minutes, overlapping (or meeting at one timestamp, an inclusive end):
    a timestamp given by both kept the later sample in the file, and a 5-minute sum kept among 1-minute samples
    counted as one of them (`--statistic sum` 5x that minute, exit 0). The sample at the step of the stretch the
    time falls in is kept: the hourly series is that of the demand sampled at the finer step throughout."""
    fine, coarse = pd.Timedelta(seconds=fine_seconds), pd.Timedelta(seconds=fine_seconds * ratio)
    if pd.Timedelta("1h") % coarse:
        return
    start = pd.Timestamp("2026-01-05T00:00Z")
    first, second = (coarse, fine) if coarse_first else (fine, coarse)
    change = (start + 20 * first).ceil(coarse)
    end = (change + 20 * max(coarse, MIN_STRETCH * fine)).ceil("1h")
    index = pd.date_range(start, end, freq=fine, inclusive="left")
    demand = pd.Series(np.round(np.random.default_rng(seed).gamma(2.0, 50.0, len(index)), 3), index=index)
    early_end = change + overlap * coarse  # the early export goes on into the late one's time (meet: to a sample)
    early = _sampled(demand[demand.index < early_end + (first if meet else pd.Timedelta(0))], first, statistic)
    late = _sampled(demand[demand.index >= change], second, statistic)
    exports = [early, late] if early_first else [late, early]

    series, report = prepare(pd.concat(exports), statistic=statistic, outlier_factor=None)
    expected, _ = prepare(_sampled(demand, fine, statistic), statistic=statistic, outlier_factor=None)
    pd.testing.assert_series_equal(series, expected, rtol=1e-9)
    assert report.duplicates == overlap + meet
    at = change if coarse_first else early_end
    assert report.step_changes == [f"{go_duration(first)} to {go_duration(second)} at {at.isoformat()}"]


@given(step_minutes=st.sampled_from([1, 5, 10, 15]), offset=st.floats(0.1, 0.9), hours=st.integers(2, 30),
       later_first=st.booleans(), statistic=st.sampled_from(["sum", "mean", "max", "p90"]),
       seed=st.integers(0, 2 ** 16))
def test_two_exports_of_the_same_times_on_grids_apart_are_refused_not_mixed(step_minutes, offset, hours, later_first,
                                                                           statistic, seed):
    """Two exports at one step on grids apart (:00, :05, ... and :02, :07, ...) concatenated, overlapping: their
    samples interleave, no timestamp given twice, and `--statistic sum` counted the overlap's demand twice (exit 0;
    at a half-step apart they read as one sampler at half the step). Refused, naming a time in the overlap (or,
    where the overlap is most of the file, as irregular beside the regular stretches)."""
    step = pd.Timedelta(minutes=step_minutes)
    shift = pd.Timedelta(seconds=round(offset * step.total_seconds()))
    rng = np.random.default_rng(seed)
    first = pd.date_range("2026-01-05T00:00Z", "2026-01-07T00:00Z", freq=step, inclusive="left")
    second = pd.date_range(first[-1] - pd.Timedelta(hours=hours) + shift, periods=len(first), freq=step)
    exports = [pd.Series(rng.gamma(2.0, 5.0, len(times)), index=times) for times in (first, second)]
    with pytest.raises(HistoryError, match="give each time once|no one step reads both") as refused:
        prepare(pd.concat(exports[::-1] if later_first else exports), statistic=statistic)
    if "give each time once" in str(refused.value):
        named = pd.Timestamp(re.search(r"the first,? (?:at )?(\S+?)[:)]? ", str(refused.value)).group(1))
        assert second[0].floor("1h") <= named <= first[-1], str(refused.value)


@given(step_minutes=st.sampled_from([1, 5, 15]), seed=st.integers(0, 2 ** 16), missing=st.sampled_from([0.4, 0.5, 0.6]))
def test_a_sampler_that_missed_many_samples_is_read_not_taken_for_two_exports(step_minutes, seed, missing):
    """Stretches are read from runs of one interval, and a sampler that missed half its samples or more has few: its
    other intervals (2, 3, ... steps) read as timestamps with jitter beside a regular stretch, and its most common
    interval can be twice its step, so its hours seemed to hold twice the time; both were refused as two exports."""
    rng = np.random.default_rng(seed)
    grid = pd.date_range("2026-01-05T00:00Z", periods=60 // step_minutes * 72, freq=f"{step_minutes}min")
    kept = rng.random(len(grid)) >= missing
    kept[:2] = True
    assume(kept.sum() >= 12)
    series, report = prepare(pd.Series(1.0, index=grid[kept]), statistic="max", outlier_factor=None)
    assert (series.dropna() == 1.0).all() and len(series.dropna()) > 0


def test_a_sparse_sampler_whose_most_common_interval_is_twice_its_step_is_not_refused():
    """Found by the sum property: 15-minute samples, most missing, their most common interval 30 minutes; an hour
    with all four samples seemed to hold two hours and was refused as two exports overlapping. An hour of three
    (a whole 30-minute sample over its room) is summed as it is too, not scaled down to the two it seems to hold."""
    grid = pd.date_range("2026-01-05T00:00Z", periods=132, freq="15min")
    index = grid[[0, 1, 79, 81, 92, 94, 96, 98, 100, 101, 102, 103, 104, 106, 107, 110, 112, 114]]
    series, _ = prepare(pd.Series(1.0, index=index), statistic="sum", outlier_factor=None)
    assert series[pd.Timestamp("2026-01-06T01:00Z")] == 4.0  # the hour with all four samples, summed as they are
    assert series[pd.Timestamp("2026-01-06T02:00Z")] == 3.0


# ---------------------------------------------------------------------------- one history, however it is written
WRITTEN_AS = {"iso-z": lambda t: t.strftime("%Y-%m-%dT%H:%M:%SZ"), "offset": lambda t: t.tz_convert("Asia/Kolkata")
              .isoformat(), "dst-zone": lambda t: t.tz_convert("America/New_York").isoformat(),
              "epoch-s": lambda t: str(t.value // 10**9), "epoch-ms": lambda t: str(t.value // 10**6),
              "epoch-ns": lambda t: str(t.value)}


@st.composite
def written_histories(draw):
    """Samples at a regular step (a few missing, some values blank), and a file of them: its rows in any order, some
    given twice alike, its timestamps in one of the ways headroom reads them, a BOM and Windows line ends or not."""
    step = pd.Timedelta(seconds=draw(st.sampled_from([1, 60, 300, 420, 3600])))
    start = pd.Timestamp("2026-03-01", tz="UTC") + pd.Timedelta(minutes=draw(st.integers(0, 60 * 24 * 30)))
    stamps = pd.date_range(start, periods=draw(st.integers(3, 300)), freq=step).as_unit("ns")
    stamps = stamps[np.array(draw(st.lists(st.booleans(), min_size=len(stamps), max_size=len(stamps)))) | (
        np.arange(len(stamps)) < 2)]
    values = draw(st.lists(st.floats(0, 1e6) | st.just(math.nan), min_size=len(stamps), max_size=len(stamps)))
    rnd = draw(st.randoms(use_true_random=False))
    order = list(range(len(stamps))) + [rnd.randrange(len(stamps)) for _ in range(draw(st.integers(0, 20)))]
    rnd.shuffle(order)
    how = draw(st.sampled_from(sorted(WRITTEN_AS)))
    text = "timestamp,value\n" + "".join(f"{WRITTEN_AS[how](stamps[k])},{_cell(values[k])}\n" for k in order)
    return pd.Series(values, index=stamps), text, draw(st.booleans())


def _cell(value: float) -> str:
    return "" if math.isnan(value) else repr(value)  # blank: missing


def _prepared(path, statistic):
    try:
        return prepare(load_history(path), step="1h", statistic=statistic)[0]
    except HistoryError as exc:
        return str(exc).replace(str(path), "FILE")


@given(written_histories(), st.sampled_from(["mean", "max", "sum", "p90"]))
def test_a_history_reads_the_same_however_its_file_orders_repeats_and_writes_it(tmp_path_factory, history, statistic):
    """Any order of a file's rows, rows given twice alike, its timestamps as ISO-8601 with any offset or as epoch
    seconds, milliseconds or nanoseconds, a byte-order mark and CRLF line ends, and the same samples as Parquet: one
    prepared series (or one refusal), that of the samples written in order."""
    samples, text, windows = history
    folder = tmp_path_factory.mktemp("written")
    plain, written, stored = folder / "plain.csv", folder / "written.csv", folder / "stored.parquet"
    plain.write_text("timestamp,value\n" + "".join(f"{t.strftime('%Y-%m-%dT%H:%M:%SZ')},{_cell(v)}\n"
                                                   for t, v in samples.items()))
    written.write_bytes((text.replace("\n", "\r\n") if windows else text).encode("utf-8-sig" if windows else "utf-8"))
    pd.DataFrame({"timestamp": samples.index, "value": samples.to_numpy()}).to_parquet(stored)
    expected = _prepared(plain, statistic)
    for path in (written, stored):
        got = _prepared(path, statistic)
        if isinstance(expected, str):
            assert isinstance(got, str), (path.name, got)
        else:
            assert not isinstance(got, str), (path.name, got)
            pd.testing.assert_series_equal(got, expected, check_freq=False)
