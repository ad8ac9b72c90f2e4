import math
from datetime import UTC, datetime

import pandas as pd
import pytest

from adapters.prometheus import MAX_POINTS, PrometheusError, PrometheusSource, chunk_ranges, parse_matrix
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
    with pytest.raises(PrometheusError, match="sum"):
        parse_matrix([{"metric": {"a": "1"}, "values": []}, {"metric": {"a": "2"}, "values": []}], "q")


def test_unreachable_prometheus_is_a_clear_error():
    source = PrometheusSource(PrometheusServer(url="http://127.0.0.1:9", retries=0, timeout_seconds=2), "up", T0,
                              T0 + pd.Timedelta(hours=1))
    with pytest.raises(PrometheusError, match="127.0.0.1:9"):
        source.fetch()
