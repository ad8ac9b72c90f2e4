"""bench/gpu_gauge.py: the GPU-in-use gauge built from a job trace counts exactly the GPUs of the pods running."""
from __future__ import annotations

import csv

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import bench_module

gauge = bench_module("gpu_gauge")
HOUR = gauge.HOUR

pod = st.tuples(st.integers(0, 72 * HOUR), st.integers(1, 48 * HOUR), st.integers(0, 8), st.integers(1, 1000),
                st.booleans())


@settings(max_examples=60, deadline=None)
@given(st.lists(pod, min_size=1, max_size=30))
def test_each_hour_holds_the_gpus_of_the_pods_running_then(tmp_path_factory, pods):
    path = tmp_path_factory.mktemp("jobs") / "pods.csv"
    with open(path, "w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(["name", "num_gpu", "gpu_milli", "creation_time", "deletion_time", "scheduled_time"])
        for k, (start, length, n, milli, scheduled) in enumerate(pods):
            out.writerow([f"pod-{k}", n, milli, start, start + length, start if scheduled else ""])
    days = 2
    ran = [p for p in pods if p[4]]
    if not ran:  # nothing ever scheduled: no end to anchor the gauge to
        with pytest.raises(ValueError, match="no pod was ever scheduled"):
            gauge.gpus_in_use(path, days=days)
        return
    values = gauge.gpus_in_use(path, days=days)
    assert len(values) == days * 24
    last = max(start + length for start, length, *_ in ran) // HOUR * HOUR
    for k, value in enumerate(values):
        t = last - (days * 24 - 1 - k) * HOUR
        want = sum((milli / 1000 if n == 1 else n) for start, length, n, milli, _ in ran if start <= t < start + length)
        assert abs(value - want) < 1e-9, (k, t)


def test_timestamps_are_consecutive_utc_hours():
    ts = gauge.timestamps(26)
    assert ts[0] == "2024-01-01T00:00:00+00:00" and ts[25] == "2024-01-02T01:00:00+00:00"
