"""PrometheusSource against a real Prometheus backfilled from the NASA 1995 trace."""
from __future__ import annotations

import json
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta

import numpy as np
import pandas as pd
import pytest

import adapters.prometheus as promsrc
from adapters.prometheus import DeadlinePassed, PrometheusDemand, PrometheusError, PrometheusSource
from cli.config import load_config
from cli.main import main
from cli.sources import load_series
from core.deadline import within
from core.settings import PrometheusServer
from tests.servers import prometheus as prom_servers
from tests.servers.prometheus import METRIC, connections_accepted, range_queries_answered

START = pd.Timestamp("1995-07-01T04:00:00Z")


def history_config(tmp_path, prometheus: dict, **history) -> str:
    """A configuration file whose history is read from Prometheus (`prometheus`: url, query, ...), with the other
    `history` keys; its path (each call a new file)."""
    import yaml

    path = tmp_path / f"prom{len(list(tmp_path.glob('prom*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump({"history": {**history, "prometheus": prometheus}}))
    return str(path)


def queries_sent(monkeypatch) -> list[tuple[str, dict]]:
    """(PromQL, its other arguments) of each range query every client sends from now on."""
    sent: list[tuple[str, dict]] = []
    ask = promsrc.PrometheusConnect.custom_query_range
    monkeypatch.setattr(promsrc.PrometheusConnect, "custom_query_range",
                        lambda self, query, **kw: sent.append((query, kw)) or ask(self, query, **kw))
    return sent


def test_backfilled_series_round_trips_in_several_chunks(prometheus_server, nasa_trace, monkeypatch):
    _, csv = nasa_trace
    end = START + pd.Timedelta(days=31)
    step = pd.Timedelta("60s")
    chunks = promsrc.chunk_ranges(START, end, step)
    assert len(chunks) >= 4  # 31 days at 60 s is ~44,640 points: the 11,000-point limit forces chunking
    calls = []
    original = promsrc.chunk_ranges
    monkeypatch.setattr(promsrc, "chunk_ranges", lambda *a, **k: calls.append(1) or original(*a, **k))

    server = PrometheusServer(url=prometheus_server.url, step="60s", timeout_seconds=20)
    got = PrometheusSource(server, METRIC, START, end).fetch()

    assert calls
    assert len(got) == len(pd.date_range(START, end, freq=step, inclusive="left"))  # [START, end)
    assert got.index.is_monotonic_increasing and not got.index.duplicated().any()
    expected = csv[(csv.index >= START) & (csv.index < end)]
    real = expected.dropna()
    # Every real 5-min sample comes back exactly, at its own timestamp...
    np.testing.assert_array_equal(got.reindex(real.index).to_numpy(), real.to_numpy())
    # ...and the minutes between samples read the latest sample (Prometheus' 5 min look-back).
    between = real.index + pd.Timedelta("2min")
    between = between[between < end]
    np.testing.assert_array_equal(got.reindex(between).to_numpy(),
                                  real.reindex(between - pd.Timedelta("2min")).to_numpy())


def test_gaps_come_back_nan_never_zero(prometheus_server, nasa_trace):
    _, csv = nasa_trace
    gap = csv[csv.isna()]
    assert len(gap) > 10, "the trace has a known outage (1995-07-28 .. 08-01)"
    lo, hi = gap.index[0] - pd.Timedelta("1h"), gap.index[0] + pd.Timedelta("2D")
    got = PrometheusSource(PrometheusServer(url=prometheus_server.url, step="5m"), METRIC, lo, hi).fetch()
    window = csv[(csv.index >= lo) & (csv.index <= hi)]
    # More than the 5-min look-back after the last real sample, a gap is NaN.
    last_real = window.notna().astype(int).cumsum()
    deep = window[window.isna() & (last_real.groupby(last_real).cumcount() >= 2)]
    assert len(deep) > 100
    assert got.reindex(deep.index).isna().all()
    assert not (got.reindex(deep.index) == 0).any()
    real = window.dropna()
    np.testing.assert_array_equal(got.reindex(real.index).to_numpy(), real.to_numpy())


def test_reads_at_wall_clock_times_land_on_one_grid_with_no_empty_twins(prometheus_server, nasa_trace):
    """A controller reads at times with fractions of a second: the client sends whole seconds, so a grid laid from
    the unrounded start once put an empty (NaN) twin beside every sample (half the samples 'missing', every policy
    degraded), and reads a few seconds apart interleaved their samples (a 0.06 s 'step' failed the refit)."""
    _, csv = nasa_trace
    demand = PrometheusDemand(PrometheusServer(url=prometheus_server.url, step="60s"))
    step = pd.Timedelta("60s")
    reads = []
    for offset in ("0.372s", "12.9s", "47.061s"):
        end = START + pd.Timedelta(hours=3) + pd.Timedelta(offset)
        reads.append(demand.read("p", METRIC, end - pd.Timedelta(hours=2), end))
        (together,) = demand.read_many([("p", METRIC, end - pd.Timedelta(hours=2), end)])
        pd.testing.assert_series_equal(together, reads[-1])
    for got in reads:
        assert (got.index == got.index.floor(step)).all()  # on the step grid, whatever the clock
        assert len(got) == 120 and not got.isna().any(), "no twin, no gap: the trace has a sample every 5 minutes"
    pd.testing.assert_series_equal(reads[0], reads[2])  # same grid minutes: the same samples
    stored = csv.reindex(reads[0].index)
    assert stored.notna().sum() == 24 and (reads[0][stored.notna()] == stored.dropna()).all()  # each 5-min sample


def test_demand_reads_from_many_threads_share_a_few_connections(prometheus_server):
    """The controller's reader keeps its connections: 400 reads from 8 threads open at most one per thread (a
    client per read opened 400), and each thread gets its own query's answer."""
    demand = PrometheusDemand(PrometheusServer(url=prometheus_server.url, step="5m"))
    end = pd.Timestamp("1995-07-10T12:00:00Z")
    start = end - pd.Timedelta(hours=1)
    base = demand.read("base", METRIC, start, end)
    assert base.notna().sum() > 6

    def read(i: int) -> pd.Series:
        return demand.read(f"p{i}", f"{METRIC} * {i % 5 + 1}", start, end)

    before = connections_accepted(prometheus_server.url)
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(read, range(400)))
    opened = connections_accepted(prometheus_server.url) - before - 1
    assert opened <= 8, f"{opened} connections for 400 reads"
    for i, series in enumerate(got):
        pd.testing.assert_series_equal(series, base * (i % 5 + 1))


def test_server_stopped_mid_fetch_raises_clear_error(private_prometheus, monkeypatch):
    """The server dies after the first chunk: a PrometheusError naming the server and range, promptly."""
    import prometheus_api_client

    original = prometheus_api_client.PrometheusConnect.custom_query_range
    served = []

    def query_then_die(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        served.append(1)
        if len(served) == 1:
            private_prometheus.stop()
        return result

    monkeypatch.setattr(prometheus_api_client.PrometheusConnect, "custom_query_range", query_then_die)
    source = PrometheusSource(PrometheusServer(url=private_prometheus.url, step="60s", timeout_seconds=2, retries=1),
                              METRIC, START, START + pd.Timedelta(days=30))
    began = time.monotonic()
    with pytest.raises(PrometheusError) as info:
        source.fetch()
    assert time.monotonic() - began < 15
    assert served == [1]
    message = str(info.value)
    assert private_prometheus.url in message and METRIC in message


def test_frozen_server_times_out_instead_of_hanging(private_prometheus):
    """A server that accepts connections but never answers (SIGSTOP) hits the timeout."""
    private_prometheus.process.signal_group(signal.SIGSTOP)
    try:
        source = PrometheusSource(PrometheusServer(url=private_prometheus.url, step="5m", timeout_seconds=1, retries=1),
                                  METRIC, START, START + pd.Timedelta(days=1))
        began = time.monotonic()
        with pytest.raises(PrometheusError, match="failed"):
            source.fetch()
        assert time.monotonic() - began < 15
    finally:
        private_prometheus.process.signal_group(signal.SIGCONT)


def test_report_and_simulate_read_live_history_from_prometheus(prometheus_server, tmp_path, capsys):
    """`headroom report` on a live history: the demand query answered by a real Prometheus over a past window."""
    config = history_config(tmp_path, {"url": prometheus_server.url, "query": METRIC, "lookback": "16d",
                                       "end": "1995-07-24T00:00:00Z"})
    out = tmp_path / "report"
    assert main(["report", "--config", config, "--days", "2", "--out", str(out)]) == 0
    page = (out / "index.html").read_text()
    assert page.count("<img") >= 3 and "data:image/png;base64," in page
    capsys.readouterr()
    assert main(["simulate", "--config", config, "--days", "2", "--policy", "oracle", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["headroom_violations"] == 0 and 0 < result["utilization"] <= 1


def test_many_reads_go_in_few_requests_and_give_what_each_read_gives(prometheus_server, monkeypatch):
    """The reconcile's reads of one range go several to a request (joined by `or`, told apart by a label): each
    policy gets exactly what its own read gives, a query that fails (does not parse, returns two series) fails
    alone, 300 reads of one range take a few requests, not 300, and no request holds more points than a chunk."""
    demand = PrometheusDemand(PrometheusServer(url=prometheus_server.url, step="5m"))
    end = pd.Timestamp("1995-07-10T12:00:00Z")
    start, earlier, lookback = end - pd.Timedelta(hours=1), end - pd.Timedelta(hours=3), end - pd.Timedelta(days=28)
    two = f'label_replace({METRIC}, "copy", "a", "", "") or label_replace({METRIC}, "copy", "b", "", "")'
    special = {40: "sum((", 120: two, 200: f'{METRIC}{{job="no-such-job"}}', 280: "vector(3)",
               290: f"max_over_time({METRIC}[15m])"}
    queries = [special.get(i, f"{METRIC} * {i % 7 + 1}") for i in range(300)]
    reads = [(f"p{i}", q, {7: earlier, 13: lookback}.get(i % 50, start), end) for i, q in enumerate(queries)]
    sent = queries_sent(monkeypatch)
    got = demand.read_many(reads)
    batched = len(sent)
    for query, kw in sent:
        points = int((kw["end_time"] - kw["start_time"]).total_seconds() // 300) + 1
        assert points * max(query.count(promsrc.TAG), 1) <= promsrc.MAX_POINTS
    assert sum(promsrc.TAG not in q and kw["start_time"] < start for q, kw in sent) == 6  # each lookback alone
    for (key, query, lo, hi), answer in zip(reads, got):
        try:
            alone = demand.read(key, query, lo, hi)
        except PrometheusError as exc:
            assert isinstance(answer, PrometheusError) and str(answer) == str(exc), (query, answer)
            continue
        assert not isinstance(answer, Exception), (query, answer)
        pd.testing.assert_series_equal(answer, alone)
    assert isinstance(got[40], PrometheusError) and "sum((" in str(got[40])
    assert isinstance(got[120], PrometheusError) and "2 series" in str(got[120])
    assert got[200].isna().all() and len(got[200]) == 12 and (got[280] == 3).all()
    assert got[0].notna().sum() > 6
    # three ranges, a few batches each (six lookbacks alone); the one with the query that does not parse halved
    # until it fails alone
    assert batched <= 36, f"{batched} requests for {len(reads)} reads"


def test_many_reads_from_an_unreachable_server_fail_each_as_alone_without_asking_again(monkeypatch):
    demand = PrometheusDemand(PrometheusServer(url="http://127.0.0.1:1", step="5m", retries=0, timeout_seconds=2))
    end = pd.Timestamp("1995-07-10T12:00:00Z")
    reads = [(f"p{i}", f"{METRIC} * {i}", end - pd.Timedelta(hours=1), end) for i in range(50)]
    sent = queries_sent(monkeypatch)
    got = demand.read_many(reads)
    assert len(sent) == 1
    for (_, query, start, _), answer in zip(reads, got):
        assert isinstance(answer, PrometheusError)
        assert str(answer).startswith(f"Prometheus at http://127.0.0.1:1 failed for {query!r} [{start.isoformat()}")


def test_a_query_too_slow_for_the_server_fails_alone_and_is_read_alone_after(prometheus_blocks, tmp_path, monkeypatch):
    """A fault stays inside the policy it hits: one policy's query that runs past the server's --query.timeout failed
    the whole request it shared, so every policy read beside it was degraded, at every reconcile. Now the request is
    halved down to the slow query (the other halves read), and that query is read alone from then on."""
    server = prom_servers.start_prometheus(prometheus_blocks, tmp_path / "prom", flags=("--query.timeout=50ms",))
    try:
        demand = PrometheusDemand(PrometheusServer(url=server.url, step="5m", retries=0, timeout_seconds=20))
        end = pd.Timestamp("1995-07-10T12:00:00Z")
        slow = f"max_over_time({METRIC}[4d:100ms])"  # 3.5 million points: 0.5-1 s here, 3 ms for the others
        # (at 200 ms and 2 days, the project's CI once read it in time: its margin is now tenfold and more)
        queries = [slow if i == 5 else f"{METRIC} * {i + 1}" for i in range(8)]
        reads = [(f"p{i}", q, end - pd.Timedelta(hours=1), end) for i, q in enumerate(queries)]
        sent = queries_sent(monkeypatch)
        got = demand.read_many(reads)
        assert len(sent) <= 1 + 2 * 3  # the request, then two halves a level down to the slow query
        assert isinstance(got[5], PrometheusError) and slow in str(got[5]) and "timed out" in str(got[5])
        sent.clear()
        again = demand.read_many(reads)  # the next reconcile: the slow query alone, the others together
        assert isinstance(again[5], PrometheusError) and len(sent) == 2 and slow in [q for q, _ in sent]
        for i in range(8):
            if i != 5:
                assert not isinstance(got[i], Exception), (i, got[i])
                alone = demand.read("p", queries[i], *reads[i][2:])
                pd.testing.assert_series_equal(got[i], alone)
                pd.testing.assert_series_equal(again[i], alone)
    finally:
        server.stop()


@pytest.mark.parametrize("query", ["headroom_no_such_metric", f"{METRIC} offset 3650d"])
def test_a_query_with_no_samples_is_an_error_naming_the_query(prometheus_server, tmp_path, capsys, query):
    """A query that matched no series (a typo in the metric, a window the server does not hold) once failed as
    'history has fewer than two real values', naming neither the server, nor the query, nor the window; then it
    named them but still said 'fewer than two real values', as if the series were there with its samples missing."""
    what = "the query matched no series (a misspelt metric or label"
    config = history_config(tmp_path, {"url": prometheus_server.url, "query": query, "lookback": "3d",
                                       "end": "1995-07-10T00:00:00Z"})
    assert main(["forecast", "--config", config]) == 1
    err = capsys.readouterr().err
    assert what in err and prometheus_server.url in err and repr(query) in err
    assert "1995-07-07T00:00:00+00:00 .. 1995-07-10T00:00:00+00:00" in err


def test_a_query_prometheus_refuses_says_what_prometheus_said(prometheus_server, tmp_path, capsys):
    """A query the server refuses (a string is no range query: 400, bad_data) was said as the answer's bytes as Python
    writes them, b'{"status":"error","errorType":"bad_data","error":"invalid expression type ...' with the quotes in
    the message escaped twice. It says the status, the error's type and its message, as Prometheus wrote them."""
    config = history_config(tmp_path, {"url": prometheus_server.url, "query": '"demand"', "lookback": "3d",
                                       "end": "1995-07-10T00:00:00Z"})
    assert main(["forecast", "--config", config]) == 1
    err = capsys.readouterr().err
    assert 'HTTP Status Code 400, bad_data: invalid expression type "string" for range query, must be Scalar or ' \
        "instant Vector\n" in err, err


def test_a_counter_query_is_refused_and_read_as_increments_with_history_counter(prometheus_server, tmp_path, capsys):
    """A query whose values only rise (here each sample's own timestamp, as a requests_total does) was forecast as
    ever-growing demand. It is an error naming history.counter; with counter: true its increments are read."""
    def config(**history):
        return history_config(tmp_path, {"url": prometheus_server.url, "query": f"timestamp({METRIC})",
                                         "lookback": "4d", "end": "1995-07-10T00:00:00Z"}, **history)

    assert main(["forecast", "--config", config(), "--json"]) == 1
    err = capsys.readouterr().err
    assert "a cumulative counter" in err and "history.counter: true" in err and f"timestamp({METRIC})" in err
    assert main(["forecast", "--config", config(counter=True, statistic="sum"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    # the increments: 300 s per 5-min sample, 12 to the hour, as the forecast of the hourly sum
    assert all(row["q0.5"] == pytest.approx(3600, rel=0.01) for row in out["forecast"])


def test_report_and_tune_name_the_prometheus_query_not_none(prometheus_server, tmp_path, capsys):
    """With the history in Prometheus, report's page and progress said 'demand trace None' / 'simulating None', and
    the manifest tune writes began '# headroom tune None:'."""
    query = f"{METRIC} * 1"
    config = history_config(tmp_path, {"url": prometheus_server.url, "query": query, "lookback": "5d",
                                       "end": "1995-07-10T00:00:00Z"})
    out = tmp_path / "report"
    assert main(["report", "--config", config, "--days", "1", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    page = (out / "index.html").read_text()
    assert "None" not in err and f"simulating query {query!r}" in err
    assert ">None<" not in page and query in page
    policy = tmp_path / "policy.yaml"
    main(["tune", "--config", config, "--days", "1", "--write-policy", str(policy)])
    assert policy.read_text().startswith(f"# headroom tune query {query!r}: ")


@pytest.fixture(scope="module")
def restarted_pod(nasa_trace, prometheus_blocks, tmp_path_factory):
    """A Prometheus holding `churn`: the trace under pod="a" until SWITCH, then (a restart, 10 minutes later) under
    pod="b", as a series a pod name labels changes its labels when the pod is replaced."""
    _, csv = nasa_trace
    work = tmp_path_factory.mktemp("churn")
    blocks = work / "blocks"
    for pod, part in (("a", csv[csv.index < SWITCH]), ("b", csv[csv.index > SWITCH + pd.Timedelta("5min")])):
        text = work / f"{pod}.om"
        prom_servers.write_openmetrics(part, text, metric="churn", labels={"pod": pod})
        prom_servers.backfill(text, blocks)  # a second run adds its own blocks beside the first's
    server = prom_servers.start_prometheus(blocks, work / "prom")
    yield server
    server.stop()


SWITCH = pd.Timestamp("1995-07-12T00:00:00Z")


def test_a_series_whose_labels_change_mid_range_is_refused_however_the_range_is_chunked(restarted_pod):
    """A pod restarted under a new name is a second series. Read in one request it was refused (two series: sum
    them); read in chunks of which one held only the old pod and the next only the new one, the two were stitched
    into one series without a word: the same query's answer depended on where the chunks fell."""
    step = pd.Timedelta("60s")
    start = SWITCH - step * (promsrc.MAX_POINTS - 1)  # the first chunk ends at SWITCH: pod "a" only, the next "b" only
    end = SWITCH + pd.Timedelta(days=2)
    assert promsrc.chunk_ranges(start, end, step)[0][1] == SWITCH
    for step_text in ("60s", "5m"):  # in two chunks, and in one
        source = PrometheusSource(PrometheusServer(url=restarted_pod.url, step=step_text), "churn", start, end)
        with pytest.raises(PrometheusError, match="2 series") as info:
            source.fetch()
        assert "'pod': 'a'" in str(info.value) and "'pod': 'b'" in str(info.value) and "sum(" in str(info.value)
    summed = PrometheusSource(PrometheusServer(url=restarted_pod.url, step="60s"), "sum(churn)", start, end).fetch()
    assert summed.notna().sum() > 2000


# bcrypt of "s3cret" (crypt.crypt("s3cret", crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=16))): Prometheus'
# --web.config.file takes basic-auth passwords only as bcrypt hashes
S3CRET_BCRYPT = "$2b$04$i43FWq5WN9QNxpq41zC5xeQTnETvjvMcJ6A7TUBcKqKHCKAzzVJ.C"


@pytest.fixture(scope="module")
def guarded_prometheus(prometheus_blocks, tmp_path_factory):
    """A Prometheus behind basic auth (user alice, password s3cret), its paths under /prom (--web.route-prefix), as
    behind a proxy that serves several tools on one host."""
    work = tmp_path_factory.mktemp("guarded")
    web = work / "web.yml"
    web.write_text(f"basic_auth_users:\n  alice: '{S3CRET_BCRYPT}'\n")
    server = prom_servers.start_prometheus(prometheus_blocks, work / "prom", flags=(f"--web.config.file={web}",),
                                           route_prefix="/prom", userinfo="alice:s3cret")
    yield server
    server.stop()


def _read_50(url: str, monkeypatch) -> tuple[list, list]:
    demand = PrometheusDemand(PrometheusServer(url=url, step="5m", retries=0))
    end = pd.Timestamp("1995-07-10T12:00:00Z")
    sent = queries_sent(monkeypatch)
    return demand.read_many([(f"p{i}", f"{METRIC} * {i}", end - pd.Timedelta(hours=1), end) for i in range(50)]), sent


@pytest.mark.parametrize("wrong, status, meaning", [
    ("http://alice:s3cret@127.0.0.1:{port}", "404", "is the server's path prefix (--web.route-prefix) in it?"),
    ("http://alice:guess@127.0.0.1:{port}/prom", "401", "the server refused the credentials")])
def test_a_server_that_refuses_every_query_is_asked_once_not_once_per_query(guarded_prometheus, monkeypatch,
                                                                            wrong, status, meaning):
    """A URL without the server's path prefix (404) or with a wrong password (401) fails every query alike. Such a
    refusal was taken for a query the server cannot run and the batch halved down to single queries: 50 policies'
    reads cost 99 requests every reconcile (2,000 at 1,000 policies). Now one; each read fails with the status and
    what it means (a bare '404 page not found' named neither), the password never shown."""
    got, sent = _read_50(wrong.format(port=guarded_prometheus.port), monkeypatch)
    assert len(sent) == 1
    for answer in got:
        assert isinstance(answer, PrometheusError) and f"HTTP Status Code {status}" in str(answer)
        assert meaning in str(answer)
        assert "guess" not in str(answer) and "s3cret" not in str(answer)
    right, sent = _read_50(guarded_prometheus.url, monkeypatch)
    assert len(sent) == 1 and all(not isinstance(r, Exception) and r.notna().sum() == 12 for r in right)


@pytest.mark.parametrize("userinfo, query, status", [("alice:guess", METRIC, 1), ("alice:s3cret", "headroom_none", 1),
                                                     ("alice:s3cret", METRIC, 0)])
def test_a_password_in_the_url_is_used_and_never_shown(guarded_prometheus, tmp_path, capsys, userinfo, query, status):
    """Basic auth in the URL (user:password@host) reaches a Prometheus behind it, under its path prefix (with or
    without a trailing slash); the errors that name the server (a refused password, a query with no samples)
    showed the password on stderr, in logs and in policies' status."""
    url = f"http://{userinfo}@127.0.0.1:{guarded_prometheus.port}/prom/"
    config = history_config(tmp_path, {"url": url, "query": query, "lookback": "3d", "end": "1995-07-10T00:00:00Z",
                                       "retries": 0})
    assert main(["forecast", "--config", config, "--json"]) == status
    err = capsys.readouterr().err
    assert userinfo.split(":")[1] not in err
    if status:
        assert f"Prometheus at http://alice:***@127.0.0.1:{guarded_prometheus.port}/prom" in err


@pytest.mark.parametrize("step", ["1h", "10m", "20m"])
def test_a_window_given_with_a_utc_offset_reads_the_utc_grid(prometheus_server, step):
    """`end: 1995-07-10T05:45:00+05:45` is 00:00 UTC. The step grid was laid on the offset's wall clock: hourly reads
    at :15 past each UTC hour (10 and 20 minutes: off by 5 minutes too), a sample other than the one the same window
    given in UTC reads, so the answer depended on how the time was written."""
    server = PrometheusServer(url=prometheus_server.url, step=step)
    utc_end = pd.Timestamp("1995-07-10T00:00:00Z")
    utc = PrometheusSource(server, METRIC, utc_end - pd.Timedelta(days=2), utc_end).fetch()
    for written in ("1995-07-10T05:45:00+05:45", "1995-07-09T20:00:00-04:00"):
        end = datetime.fromisoformat(written)
        got = PrometheusSource(server, METRIC, end - timedelta(days=2), end).fetch()
        assert (got.index == got.index.floor(pd.Timedelta(step))).all() and str(got.index.tz) == "UTC"
        pd.testing.assert_series_equal(got, utc)


def test_a_window_too_long_for_its_step_is_refused_before_it_is_read(prometheus_server, tmp_path, capsys):
    """`lookback: 2000d` at `step: 1s` (a typo for 20d) is 173 million points: headroom asked for them 11,000 at a
    time, 15,700 requests (still asking after a minute), then laid them on one grid in memory. Now refused at once,
    naming the query, the window and the step."""
    config = history_config(tmp_path, {"url": prometheus_server.url, "query": METRIC, "lookback": "2000d",
                                       "step": "1s", "end": "1995-07-10T00:00:00Z"})
    began = time.monotonic()
    assert main(["forecast", "--config", config]) == 1
    assert time.monotonic() - began < 10
    err = capsys.readouterr().err
    assert f"{METRIC!r} over [1990-01-17T00:00:00+00:00 .. 1995-07-09T23:59:59+00:00] at step 1s" in err
    assert "1.73e+08 points, over the 5e+06 a history may have" in err


def test_an_answer_prometheus_warns_is_partial_is_said(prometheus_blocks, tmp_path, capsys):
    """A 200 answer with `warnings` is a partial one: here the window reaches before the server's oldest sample, into
    what its long-term store (remote_read) holds, and that store is down (as Thanos warns of a store it could not
    reach): the part of the window only it holds is missing. The client dropped the warnings: the forecast was made
    on what was left without a word. Now every command that reads the history says them (the read itself, as
    Prometheus answered it, is kept)."""
    server = prom_servers.start_prometheus(prometheus_blocks, tmp_path / "prom",
                                           more_config="remote_read:\n  - url: http://127.0.0.1:1/read\n")
    try:
        config = history_config(tmp_path, {"url": server.url, "query": METRIC, "lookback": "12d",
                                           "end": "1995-07-10T00:00:00Z"})  # from 06-28
        for command in (["forecast", "--json"], ["simulate", "--days", "1", "--policy", "oracle", "--json"]):
            assert main([command[0], "--config", config, *command[1:]]) == 0
            err = capsys.readouterr().err
            assert f"history query {METRIC!r}: Prometheus warned the answer may be partial:" in err
            assert "remote_read: error sending request" in err and err.count("remote_read") == 1
    finally:
        server.stop()


def test_the_controller_says_once_per_policy_that_prometheus_warned_its_answer_partial(prometheus_blocks, tmp_path,
                                                                                      caplog):
    """The controller's reads (several policies' in one request) dropped the warnings of a partial answer: a policy
    was fitted on a window a failed long-term store left half empty without a word. Each policy's log says it once
    (the store warns at every read, every reconcile)."""
    server = prom_servers.start_prometheus(prometheus_blocks, tmp_path / "prom",
                                           more_config="remote_read:\n  - url: http://127.0.0.1:1/read\n")
    try:
        demand = PrometheusDemand(PrometheusServer(url=server.url, step="5m"))
        end = pd.Timestamp("1995-07-10T00:00:00Z")
        reads = [(f"p{i}", f"{METRIC} * {i + 1}", end - pd.Timedelta(days=12), end) for i in range(3)]
        with caplog.at_level("WARNING", logger="adapters.prometheus"):
            for _ in range(2):
                got = demand.read_many(reads)
                assert all(isinstance(series, pd.Series) and series.notna().any() for series in got), got
            demand.read("p0", reads[0][1], reads[0][2], end)
    finally:
        server.stop()
    said = [m for m in caplog.messages if "Prometheus warned its answer may be partial" in m]
    assert sorted(m.split(":")[0] for m in said) == ["p0", "p1", "p2"], said
    assert all("remote_read" in m for m in said), said


@pytest.mark.parametrize("query, status", [(f"{METRIC} / ({METRIC} % 2)", 0), (f"{METRIC} / 0", 1)])
def test_infinite_values_are_read_as_gaps_and_said(prometheus_server, tmp_path, capsys, query, status):
    """A division by zero in the query answers +Inf: read as a gap (never a demand, never a policy failed for one
    sample), silently; a query that answered nothing but +Inf failed as 'fewer than two real values', as though it
    had matched nothing. Now the gaps are said, with how many."""
    config = history_config(tmp_path, {"url": prometheus_server.url, "query": query, "lookback": "5d",
                                       "end": "1995-07-10T00:00:00Z"})
    assert main(["forecast", "--config", config, "--json"]) == status
    err = capsys.readouterr().err
    assert f"note: history query {query!r}: " in err and " infinite values (a division by zero?) read as gaps" in err
    if status:
        assert "1440 infinite values" in err and "fewer than two real values" in err


@pytest.fixture(scope="module")
def tls_prometheus(prometheus_blocks, tmp_path_factory):
    """A Prometheus serving HTTPS with a certificate of a private CA; yields (server, the CA's certificate)."""
    work = tmp_path_factory.mktemp("tls")
    ca, cert, key = prom_servers.tls_files(work)
    web = work / "web.yml"
    web.write_text(f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n")
    server = prom_servers.start_prometheus(prometheus_blocks, work / "prom", flags=(f"--web.config.file={web}",),
                                           scheme="https")
    yield server, ca
    server.stop()


def test_https_with_a_private_ca_and_with_verification_off(tls_prometheus):
    """`ca_file` verifies the server's certificate; without it the read fails naming the certificate. With
    `insecure_skip_verify: true` urllib3 warned at every request (a controller's log took two lines a request,
    tens a reconcile, for as long as it ran, for a setting chosen in its configuration): now it is quiet."""
    import warnings

    server, ca = tls_prometheus
    end = pd.Timestamp("1995-07-25T00:00:00Z")

    def fetch(**tls) -> pd.Series:
        return PrometheusSource(PrometheusServer(url=server.url, step="60s", retries=0, **tls), METRIC,
                                end - pd.Timedelta(days=20), end).fetch()  # 3 chunks: 3 requests

    trusted = fetch(ca_file=ca)
    assert trusted.notna().sum() > 20_000
    with pytest.raises(PrometheusError, match="CERTIFICATE_VERIFY_FAILED"):
        fetch()
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        pd.testing.assert_series_equal(fetch(insecure_skip_verify=True), trusted)
    assert not [w for w in said if "Unverified HTTPS request" in str(w.message)], [str(w.message) for w in said]


def test_negative_values_from_prometheus_are_refused_naming_the_value_plainly(prometheus_server, tmp_path, capsys):
    """A gauge of demand that answers negative values is refused, as a file's are; the message named the first one
    as 'np.float64(-123.0)'."""
    config = history_config(tmp_path, {"url": prometheus_server.url, "query": f"-{METRIC}", "lookback": "3d",
                                       "end": "1995-07-10T00:00:00Z"})
    assert main(["forecast", "--config", config]) == 1
    err = capsys.readouterr().err
    assert f"query '-{METRIC}'" in err and "demand values are infinite, negative or over 1e+15 (first: -" in err
    assert "np." not in err


@pytest.mark.parametrize("end, now, lookback, hours", [("1995-07-10T00:00:00Z", None, "5d", 120),
                                                      (None, "1995-07-10T00:42:10Z", "5d", 120),
                                                      ("1995-07-10T00:00:00Z", None, "4d23h30m", 119)])
def test_the_history_is_whole_hours_before_its_end_and_the_forecast_begins_there(prometheus_server, nasa_trace,
                                                                                tmp_path, capsys, end, now, lookback,
                                                                                hours):
    """The range query's end is inclusive: `end: ...T00:00Z` read the sample at 00:00, which began an hour of its
    own, one sample long (its sum twelve times that sample, its max the lowest of the hour's), fitted as a whole
    hour, and the forecast began an hour after `end`; with the default end (now) the hour now falls in was as
    partly read. Now the history is the whole hours before its end (as the controller fits on), and the forecast
    begins at the hour `end` falls in. A lookback of whole hours and a half began with half an hour, fitted as a
    whole one: now the whole hours in it."""
    _, csv = nasa_trace
    config = history_config(tmp_path, {"url": prometheus_server.url, "query": METRIC, "lookback": lookback,
                                       **({"end": end} if end else {})}, statistic="sum")
    moment = pd.Timestamp(now or end)
    hour = moment.floor("h")
    series, _ = load_series(load_config(config), moment.to_pydatetime())
    assert series.index[-1] == hour - pd.Timedelta("1h") and series.index[0] == hour - pd.Timedelta(hours=hours)
    for at in (series.index[0], series.index[-1]):
        assert series[at] == csv[(csv.index >= at) & (csv.index < at + pd.Timedelta("1h"))].sum()
    if end:
        assert main(["forecast", "--config", config, "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["forecast"][0]["timestamp"] == hour.isoformat()


def test_a_query_ending_in_a_comment_is_read_in_its_batch(prometheus_server, monkeypatch):
    """PromQL comments run to the end of the line: in a batch, `q # doubled` swallowed the parenthesis and the tag
    after it, the request did not parse, and it was halved down to that query at every reconcile (13 requests for
    50 reads, not one)."""
    demand = PrometheusDemand(PrometheusServer(url=prometheus_server.url, step="5m", retries=0))
    end = pd.Timestamp("1995-07-10T12:00:00Z")
    queries = [f"{METRIC} * 2  # doubled" if i == 17 else f"{METRIC} * {i}" for i in range(50)]
    reads = [(f"p{i}", q, end - pd.Timedelta(hours=1), end) for i, q in enumerate(queries)]
    sent = queries_sent(monkeypatch)
    got = demand.read_many(reads)
    assert len(sent) == 1
    pd.testing.assert_series_equal(got[17], demand.read("p17", queries[17], *reads[17][2:]))
    pd.testing.assert_series_equal(got[17], got[2])


def test_a_query_of_many_series_is_refused_at_its_first_chunk(prometheus_server, monkeypatch):
    """Refused when its first chunk shows two series: the chunks after it, a thousand pods' series each for a query
    that forgot its sum(), would only add to what is refused."""
    two = f'label_replace({METRIC}, "copy", "a", "", "") or label_replace({METRIC}, "copy", "b", "", "")'
    sent = queries_sent(monkeypatch)
    source = PrometheusSource(PrometheusServer(url=prometheus_server.url, step="60s"), two, START,
                              START + pd.Timedelta(days=30))  # 4 chunks
    with pytest.raises(PrometheusError, match="returned 2 series"):
        source.fetch()
    assert len(sent) == 1


def test_a_url_ending_in_a_slash_costs_one_request_a_read(prometheus_server):
    """`url: http://prometheus:9090/` asked for //api/v1/query_range, which Prometheus answers with a redirect:
    every read of every reconcile cost two requests (and a proxy that does not redirect a doubled slash fails it)."""
    demand = PrometheusDemand(PrometheusServer(url=prometheus_server.url + "/", step="5m"))
    answers: list[int] = []
    demand.client._session.hooks["response"].insert(0, lambda response, *a, **k: answers.append(response.status_code))
    end = pd.Timestamp("1995-07-10T12:00:00Z")
    got = demand.read("p", METRIC, end - pd.Timedelta(hours=1), end)
    assert answers == [200] and got.notna().sum() == 12


def test_a_server_s_sample_limit_fails_a_long_read_once_and_splits_a_batch(prometheus_blocks, tmp_path, monkeypatch):
    """--query.max-samples: a read over it is an error naming the query and the limit at the first chunk, asked once
    (a 422, never retried); a batch of reads over it together is split until each part fits, every read answered."""
    server = prom_servers.start_prometheus(prometheus_blocks, tmp_path / "prom", flags=("--query.max-samples=500",))
    try:
        sent = queries_sent(monkeypatch)
        with pytest.raises(PrometheusError, match="too many samples") as info:
            PrometheusSource(PrometheusServer(url=server.url, step="60s"), METRIC, START,
                             START + pd.Timedelta(days=30)).fetch()
        assert repr(METRIC) in str(info.value) and len(sent) == 1
        demand = PrometheusDemand(PrometheusServer(url=server.url, step="5m"))
        end = pd.Timestamp("1995-07-10T12:00:00Z")
        reads = [(f"p{i}", f"{METRIC} * {i}", end - pd.Timedelta(hours=1), end) for i in range(80)]
        sent.clear()
        got = demand.read_many(reads)  # 80 x 12 samples together: over 500
        assert 1 < len(sent) < 20
        for (key, query, lo, hi), answer in zip(reads, got):
            assert not isinstance(answer, Exception), answer
            pd.testing.assert_series_equal(answer, demand.read(key, query, lo, hi))
    finally:
        server.stop()


def test_a_query_that_ran_out_of_time_is_not_asked_again(prometheus_blocks, tmp_path):
    """A query past the server's --query.timeout (a 503 with a JSON error) or the client's timeout_seconds was
    retried `retries` times, each running as long again on a server already too slow: with the defaults (3 retries,
    30 s) a read took two minutes to fail, with Prometheus' own 2-minute timeout eight. Asked once now (a 503 in
    plain text, a server not ready yet, is still asked again)."""
    # 1 ms: a query that evaluates long enough for the server to look at its clock (1.7 million points) is past it
    server = prom_servers.start_prometheus(prometheus_blocks, tmp_path / "prom", flags=("--query.timeout=1ms",))
    try:
        end = pd.Timestamp("1995-07-10T12:00:00Z")
        slow = PrometheusSource(PrometheusServer(url=server.url, step="5m", retries=3),
                                f"max_over_time({METRIC}[2d:100ms])", end - pd.Timedelta(hours=1), end)
        before = range_queries_answered(server.url, "503")
        with pytest.raises(PrometheusError, match="timed out"):
            slow.fetch()
        assert range_queries_answered(server.url, "503") == before + 1
        server.process.signal_group(signal.SIGSTOP)  # accepts connections, never answers: the client times out
        try:
            frozen = PrometheusSource(PrometheusServer(url=server.url, step="5m", retries=5, timeout_seconds=1),
                                      METRIC, end - pd.Timedelta(hours=1), end)
            began = time.monotonic()
            with pytest.raises(PrometheusError, match="Read timed out"):
                frozen.fetch()
            # once: 1 s. Asked again, six times 1 s and the back-off between (0, 1, 2, 4, 8 s): 21 s, bounded by half
            assert time.monotonic() - began < 21 / 2
        finally:
            server.process.signal_group(signal.SIGCONT)
    finally:
        server.stop()


def test_reads_under_a_deadline_end_by_it_and_say_why(private_prometheus):
    """A reconcile's reads of a Prometheus that takes requests in and answers none (SIGSTOP) waited out the request
    timeout (30 s by default) whatever the reconcile's deadline; one that refused connections was asked again, the
    back-off sleeping on past it. Under a deadline (core.deadline) every read ends by it now: batched or alone, each
    fails whole, saying it was cut at its deadline, none marked too slow (it said nothing of the query), and nothing
    is sent after it."""
    end = START + pd.Timedelta(days=2)
    reads = [(f"p{i}", f"{METRIC} * {i + 1}", end - pd.Timedelta(hours=1), end) for i in range(3)]
    reads.append(("long", METRIC, end - pd.Timedelta(days=60), end))  # over MAX_POINTS at 5m: alone, in chunks
    demand = PrometheusDemand(PrometheusServer(url=private_prometheus.url, step="5m", timeout_seconds=30, retries=8))

    def read_within(seconds: float) -> list:
        began = time.monotonic()
        with within(began + seconds):
            got = demand.read_many(reads)
        assert time.monotonic() - began < seconds + 0.5
        return got

    private_prometheus.process.signal_group(signal.SIGSTOP)
    try:
        frozen = read_within(2.0)
    finally:
        private_prometheus.process.signal_group(signal.SIGCONT)
    private_prometheus.stop()  # connections refused: asked again after a back-off of 1, 2, 4, ... s
    refused = read_within(2.0)
    for got in frozen + refused:
        assert isinstance(got, DeadlinePassed) and "cut at its deadline" in str(got), got
    assert demand.slow == set()
