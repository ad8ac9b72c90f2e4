"""The benchmark's M4 scorer (forecast.metrics + our Naive2) reproduces the published M4 hourly rows."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import bench_module

DATA = Path(__file__).parents[1] / ".." / "shared" / "data"
M4 = DATA / "m4"

pytestmark = pytest.mark.skipif(
    not (M4 / "Hourly-train.csv").exists(),
    reason=f"M4 hourly data not found at {M4} (../shared/data is absent); the scorer check needs the real set")


@pytest.fixture(scope="module")
def bench():
    return bench_module("forecast_bench")


@pytest.fixture(scope="module")
def scored(bench):
    ids, train, test = bench.load_m4(DATA)
    assert len(ids) == 414
    return bench.m4_benchmarks(train, test), bench.published_m4(DATA)


def test_snaive_reproduces_published(scored):
    ours, published = scored
    assert published["sNaive"]["smape"] == 13.912 and published["sNaive"]["mase"] == 1.193
    assert ours["sNaive"]["smape"] == pytest.approx(13.912, abs=5e-4)
    assert ours["sNaive"]["mase"] == pytest.approx(1.193, abs=5e-4)
    assert ours["sNaive"]["owa"] == pytest.approx(0.627, abs=5e-4 + 1e-4)


def test_naive2_reproduces_published(scored):
    ours, published = scored
    assert ours["Naive2"]["smape"] == pytest.approx(published["Naive2"]["smape"], abs=5e-4)
    assert ours["Naive2"]["mase"] == pytest.approx(published["Naive2"]["mase"], abs=5e-4)


def test_owa_of_naive2_is_one(bench, scored):
    ours, _ = scored
    assert bench.owa(ours["Naive2"], ours["Naive2"]) == pytest.approx(1.0)


def test_the_interval_peers_table_is_what_the_stored_runs_say():
    """docs/bench-interval-peers.md is regenerated from bench/results alone: a changed scorer or stored run shows."""
    peers = bench_module("interval_peers")
    if not (peers.TRACES / "nasa_http_1995_hourly.csv").exists():
        pytest.skip(f"the shared traces are not at {peers.TRACES}")
    table = peers.rows(json.loads((peers.RESULTS / "peers.json").read_text()),
                       json.loads((peers.RESULTS / "forecast.json").read_text()))
    assert set(table["model"]) >= {peers.HEADROOM, "AutoETS24", "MSTL24"}
    assert ((table["coverage_80"] <= table["coverage_90"] + 1e-9) | (table["model"] != peers.HEADROOM)).all()
    days = peers.by_days(json.loads((peers.RESULTS / "peers.json").read_text()))
    assert set(days["days"]) == {o // 24 for o in peers.ORIGINS}
    assert peers.markdown(table, days) == (peers.REPO / "docs" / "bench-interval-peers.md").read_text()


def test_the_forecast_doc_is_what_the_bench_writes_from_its_stored_results(bench):
    """docs/bench-forecast.md is bench/forecast_bench.py's rendering of bench/results/forecast.json: round 16's record
    was written into the doc alone (034d8b4), so the next run of the bench would have dropped it."""
    stored = json.loads((bench.RESULTS / "forecast.json").read_text())
    assert bench.markdown(stored) == (bench.REPO / "docs" / "bench-forecast.md").read_text()
