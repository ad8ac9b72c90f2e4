"""bench/controller_scale.py's quick mode as a test: 10 and 100 ReservationPolicies on a real kube-apiserver (Kueue's
genuine CRDs) and a real Prometheus (the NASA trace), `headroom run`'s reconciler in a process of its own.

It holds the controller to issue 12's targets at the sizes a test can afford (the 1,000-policy row is the bench's):
a steady reconcile's p99 within 5 s, API requests no more than a small constant plus 2 per object written, memory
under 1 GiB, a demand jump's Workloads deactivated on the API server within 30 s (the reconcile interval included),
and the hourly refit of every series done beside the reconciles, none of them held up past the interval."""
from __future__ import annotations

import json

import pytest

from tests.conftest import bench_module
from tests.servers import kube as kube_servers
from tests.servers import prometheus as prom_servers
from tests.servers import unavailable
from tests.servers.fixtures import NASA_TRACE


@pytest.fixture(scope="module")
def bench():
    return bench_module("controller_scale")


@pytest.fixture(scope="module")
def scale_rows(bench, tmp_path_factory):
    missing = [n for n, p in {**kube_servers.binaries(), **prom_servers.binaries()}.items() if not p]
    if missing:
        message = f"{', '.join(missing)} not installed (run scripts/install-servers.sh)"
        unavailable(message)
    if not NASA_TRACE.is_file():
        pytest.skip(f"real trace not found at {NASA_TRACE} (../shared/data beside the repo)")
    if not kube_servers.KUEUE_CRDS.is_dir():
        pytest.skip(f"Kueue's CRDs not found at {kube_servers.KUEUE_CRDS} (../shared/kueue beside the repo)")
    work = tmp_path_factory.mktemp("scale")
    out = work / "controller-scale.json"
    rows = bench.run(bench.QUICK, minutes=12, jumps=2, out=out, work=work, pace=0.0)  # back to back: stricter
    return rows, json.loads(out.read_text())


def test_quick_rows_are_written_with_every_field(scale_rows):
    rows, written = scale_rows
    assert [r["policies"] for r in written["rows"]] == [10, 100]
    for r in written["rows"]:
        assert {"policies", "workloads", "reconcile_p99_seconds", "api_requests_per_reconcile", "rss_bytes",
                "reclaim_p99_seconds"} <= set(r)
        assert r["reconcile_errors"] == {} and r["policies_in_fallback"] == 0, r


def test_steady_reconcile_meets_the_targets(bench, scale_rows):
    rows, _ = scale_rows
    for r in rows:
        assert r["reconciles_without_refit"] >= bench.QUIET_RECONCILES, r
        # steady state, as the target has it: no refit beside; at these sizes those beside it are held to it too
        assert r["reconcile_p99_seconds"] <= 5.0 and r["reconcile_p99_with_refit_seconds"] <= 5.0, r
        assert r["rss_bytes"] <= 2**30, r
        # every request beyond a small constant is one of the (at most) two a written object costs
        assert r["requests_beyond_2_per_changed_max"] <= 10, r
    small, big = rows
    assert big["api_requests_per_reconcile"] < 10 * small["api_requests_per_reconcile"] + 20  # not one per policy


def test_demand_jumps_are_reclaimed_within_30_seconds(scale_rows):
    rows, _ = scale_rows
    for r in rows:
        assert r["reclaims_measured"] >= 1, r  # the jumps did take GPUs back from training
        assert r["reclaim_p99_seconds"] <= 30.0, r


def test_the_hourly_refit_runs_beside_the_reconciles(scale_rows):
    rows, _ = scale_rows
    for r in rows:
        assert r["hourly_refit_seconds"] < 3600, r
        during = r["reconcile_max_during_refit_seconds"]
        assert during is None or during <= r["interval_seconds"], r
