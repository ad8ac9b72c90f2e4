"""bench/week_windows.py and the forecast bench's one-week summary: whole real weeks, gaps left out, and the
per-window comparison with the best peer counted as issue 13's per-trace target counts it."""
from __future__ import annotations

import math

import numpy as np
import pytest

from tests.conftest import bench_module

bench = bench_module("forecast_bench")  # puts bench/ on the path week_windows imports gpu_gauge from


def test_windows_are_whole_weeks_of_real_hours_and_a_week_with_a_gap_is_left_out(shared_data):
    windows = bench.week_windows(shared_data)
    for name, (_, week) in windows.items():
        assert len(week) == 168 and np.isfinite(week.to_numpy(dtype=float)).all(), name
        assert (week.index[1:] - week.index[:-1] == week.index[1] - week.index[0]).all(), name
    assert {kind for kind, _ in windows.values()} == {"choose", "related", "independent"}
    assert "nasa_http_1995_hourly#w4" not in windows  # the server's outage, 1-3 August 1995
    assert "nasa_http_1995_hourly#w5" in windows
    assert all("_hourly#w" in week.name for week in bench.choose_weeks())
    assert len(bench.choose_weeks()) == sum(kind == "choose" for kind, _ in windows.values())


def _row(auto, sn, peer, picking=None):
    return {"kind": "choose", "auto": auto, "peers": {"SeasonalNaive24": sn, "AutoETS24": peer},
            "candidates": {"a": 1.0, "b": 3.0}, "variants": {bench.PICKING: picking or auto},
            "coverage_80": 0.8, "coverage_90": 0.9}


def test_week_summary_counts_windows_within_1_05_of_their_best_peer():
    summary = bench.week_summary({"s#w0": _row(1.0, 2.0, 0.96, picking=1.5), "s#w1": _row(1.0, 1.0, 0.9),
                                  "s#w2": _row(0.5, 1.0, 0.6)})["choose"]
    assert summary["windows"] == 3
    assert summary["within_1.05"] == 2 and summary["at_or_below"] == 1  # 1.0 vs 0.96 within; 1.0 vs 0.9 not
    assert summary["auto"] == pytest.approx(math.prod([0.5, 1.0, 0.5]) ** (1 / 3))
    assert summary["picking"] == pytest.approx(math.prod([0.75, 1.0, 0.5]) ** (1 / 3))
    assert summary["peers"]["AutoETS24"] == pytest.approx(math.prod([0.48, 0.9, 0.6]) ** (1 / 3))
    assert summary["candidates_median"] == pytest.approx(math.prod([1.0, 2.0, 2.0]) ** (1 / 3))
