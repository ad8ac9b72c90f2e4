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


def test_kinds_summary_keeps_the_choose_on_seed_apart_from_the_test_on_seeds():
    """The synthetic kinds' rows (score_heldout with a kind and a seed) are summarised per kind and part, so the
    seed the protocol chooses on never pools with the seeds it tests on."""
    rows = {f"level shifts/{seed}": {**_row(float(seed), 2.0, 1.0), "kind": "level shifts", "seed": seed,
                                     "variants": {bench.KIND_VARIANTS["inverse"]: 1.0}} for seed in (1, 2, 3)}
    summary = bench.kinds_summary(rows)
    assert set(summary) == {"level shifts (choose-on)", "level shifts (test-on)"}
    assert summary["level shifts (choose-on)"]["windows"] == 1 and summary["level shifts (test-on)"]["windows"] == 2
    assert summary["level shifts (test-on)"]["auto"] == pytest.approx(math.sqrt(1.0 * 1.5))
    chosen_on, tested_on = summary["level shifts (choose-on)"], summary["level shifts (test-on)"]
    assert chosen_on["within_1.05"] == 1 and tested_on["within_1.05"] == 0
    assert chosen_on["le_candidates_median"] == 1 and tested_on["le_candidates_median"] == 1  # median 2: 2 yes, 3 no
    targets = bench.group_targets("kinds", summary, "per_group")
    assert targets["kinds_auto_le_median_of_candidates"] == {
        "per_group": {"level shifts (choose-on)": "1/1", "level shifts (test-on)": "1/2"}, "pass": False}
    assert summary["level shifts (test-on)"]["inverse"] == pytest.approx(0.5)
    text = "\n".join(bench.kinds_markdown(rows))
    assert "| level shifts (test-on) | 2 |" in text and "| level shifts/3 | 3.000 | AutoETS24 1.000 |" in text


def test_the_protocol_ships_round_5s_pick_and_reports_the_pick_with_the_synthetic_kinds_apart():
    """decide(): the shipped pick is the rule's on M4's choose half, the traces and the week and gauge units; the
    synthetic kinds' choose-on seed (round 6, rejected on the test-on part) gives `pick_with_kinds` alone."""
    def row(values: dict) -> dict:
        return {u: {"rel_mase": v} for u, v in values.items()}
    base = {"m4_choose": 0.8, "m4_test": 0.8, "trace:a": 0.6, "trace:b": 0.7, "week:w": 1.0, "gauge:g": 0.8}
    table = {"steady": row({**base, "kind:k": 1.2, "kindtest:k": 1.2}),
             "kind-led": row({**base, "m4_choose": 0.82, "kind:k": 0.8, "kindtest:k": 0.8})}
    out = bench.decide(table)
    assert out["shipped_pick"] == "steady" and out["pick_with_kinds"] == "kind-led"
    assert set(out["leave_one_trace_out"]) == {"a", "b"}
