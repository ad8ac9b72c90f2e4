import math
from datetime import UTC, datetime

import pandas as pd
import pytest

from adapters.prometheus import MAX_POINTS, PrometheusError, PrometheusSource, chunk_ranges, parse_matrix
from core.objects import event_message
from core.settings import PrometheusServer

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize("days, step", [(30, "1min"), (90, "5min"), (1, "1h"), (400, "1min")])
def test_chunks_cover_every_step_once_under_the_limit(days, step):
    step = pd.Timedelta(step)
    end = pd.Timestamp(T0) + pd.Timedelta(days=days)
    ranges = chunk_ranges(T0, end, step)
    points = [int((hi - lo) / step) + 1 for lo, hi in ranges]
    assert max(points) <= MAX_POINTS
    assert ranges[0][0] == pd.Timestamp(T0) and ranges[-1][1] == end
    for (_, hi), (lo, _) in zip(ranges, ranges[1:]):
        assert lo - hi == step  # contiguous, no overlap
    assert sum(points) == int((end - pd.Timestamp(T0)) / step) + 1


def test_parse_matrix_values_and_special_floats():
    result = [{"metric": {}, "values": [[1767225600, "1.5"], [1767225900, "NaN"], [1767226200, "+Inf"]]}]
    series = parse_matrix(result, "q")
    assert series.index[0] == pd.Timestamp(T0) and series.iloc[0] == 1.5
    assert math.isnan(series.iloc[1]) and math.isnan(series.iloc[2])


def test_parse_matrix_refuses_many_series():
    """The refusal says the fix and the labels the series differ in (what to aggregate away), not the labels they
    share."""
    shared = {"job": "vllm", "namespace": "inference"}
    with pytest.raises(PrometheusError) as refused:
        parse_matrix([{"metric": {**shared, "a": "1"}, "values": []}, {"metric": {**shared, "a": "2", "b": "x"},
                                                                       "values": []}], "q")
    assert str(refused.value) == ("query 'q' returned 2 series: refused, aggregate it to one, e.g. sum(...) (a series "
                                  "whose labels change, e.g. a restarted pod's, is two); where they differ: "
                                  "{'a': '1', 'b': None}, {'a': '2', 'b': 'x'}")


@pytest.mark.parametrize("url", ["http://127.0.0.1:9", "http://prometheus.invalid:9090"])
def test_unreachable_prometheus_is_a_clear_error(url):
    """A port nothing listens on, a host name that does not resolve: the error said urllib3's words only, naming the
    pool by the adapter's own class ("Kept(host='127.0.0.1', port=9): Max retries exceeded")."""
    source = PrometheusSource(PrometheusServer(url=url, retries=0, timeout_seconds=2), "up", T0,
                              T0 + pd.Timedelta(hours=1))
    with pytest.raises(PrometheusError) as err:
        source.fetch()
    said = str(err.value)
    assert said.startswith(f"Prometheus at {url} failed for 'up'") and "Kept" not in said
    assert " (nothing answered at this URL: is Prometheus running there, and reachable from here?): " in said


def test_a_failed_read_of_a_long_query_says_what_it_means_in_its_event():
    """The error quoted the whole query, then the client's error (whose URL holds the query again, encoded), then
    what it means: the Event about a 322-character query (1,166 characters) lost "nothing answered at this URL"."""
    query = 'sum(rate(requests_total{service="' + "b" * 300 + '"}[5m]))'
    source = PrometheusSource(PrometheusServer(url="http://127.0.0.1:9", retries=0, timeout_seconds=2), query, T0,
                              T0 + pd.Timedelta(hours=1))
    with pytest.raises(PrometheusError) as err:
        source.fetch()
    said = event_message(f"DemandUnavailable: {err.value}")  # as the controller's Event says it
    assert "(nothing answered at this URL: is Prometheus running there, and reachable from here?)" in said, said
    assert repr(query)[:100] in said


def test_a_url_where_something_else_answers_200_says_it_is_not_prometheus():
    """An auth proxy's login page (or another service) answering 200 with HTML said only 'Expecting value: line 1
    column 1 (char 0)'."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class LoginPage(BaseHTTPRequestHandler):
        def do_GET(self):
            body = b"<html><body>Sign in</body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), LoginPage)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        source = PrometheusSource(PrometheusServer(url=url, retries=0, timeout_seconds=2), "up", T0,
                                  T0 + pd.Timedelta(hours=1))
        with pytest.raises(PrometheusError, match="not Prometheus' JSON") as info:
            source.fetch()
        assert url in str(info.value) and "'up'" in str(info.value)
    finally:
        server.shutdown()
