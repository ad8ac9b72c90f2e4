"""Reservation policies side by side on the real sub-hourly traces.

128 GPUs, trace scaled so its 99.9th percentile is 100 GPUs, the last 7 days
evaluated, saturated training backlog, the simulator's defaults (README).
The forecast policy uses the product's own forecaster (AutoForecaster, fast
candidates), refitted hourly on past data only; its warm buffer b is chosen by
replaying the same engine on the history's last min(7 days, half) (the rest as the
replay's history), the replayed shortage per b written out. The `tune` row: `tune`
swept on the history alone (the same split), its recommended setting then run on the
evaluated week. A loss breakdown (where GPU-time and shortage go) is written for
forecast, oracle and tune, and the step loop's speed on a year of 5-minute steps on
1,000 GPUs with the job trace.

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
JOBS = REPO.parent / "shared" / "data" / "jobs" / "alibaba_openb_pods.csv"
sys.path.insert(0, str(REPO))

from controller.simulate import POLICIES, SharedFits, SimSettings, choose_warm_buffer, replay_days, simulate  # noqa: E402
from controller.tune import tune  # noqa: E402
from forecast.backtest import AutoForecaster  # noqa: E402
from forecast.history import at_own_step, load_history  # noqa: E402

GPUS, PEAK, DAYS, SHORTAGE_TARGET = 128, 100, 7, 0.003
MEAN_UTILIZATION_TARGET, ORACLE_GAP = 0.92, 0.02  # forecast's targets: mean utilization, points below the oracle
TUNE_GRID = dict(target_quantiles=(0.05, 0.1, 0.3, 0.5), lead_times_seconds=(0.0, 900.0, 1800.0),
                 headroom_quantiles=(0.95, 0.99))
COLUMNS = ("utilization", "inference_shortage", "shortage_over_capacity", "shortage_hours", "training_goodput",
           "headroom_violations", "preemptions", "reclaim_p99_seconds", "cost_vs_dedicated", "warm_buffer",
           "sim_seconds", "refit_seconds", "buffer_replay_seconds")


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
        "steps_demand_above_reservation": float(low.mean()),
        "hour_peak_bound_waste": float(np.minimum(hour_peak - s.demand_gpus, GPUS).clip(lower=0).sum() / cap),
    }


def shot_noise_bound(counts: np.ndarray, scale: float, steps_per_hour: int) -> dict:
    """What no policy without step-level foresight can beat, from the evaluated week's own request counts.

    Even knowing each step's arrival rate exactly (here: the centred one-hour mean of the counts themselves, more
    than any forecast knows), the requests in a step arrive at random; at best Poisson, and `dispersion` (variance
    over mean of each step's count around the rate of its neighbours, Poisson = 1) says how much noisier they are.
    Under Poisson noise the least warm capacity that keeps shortage within the cluster at SHORTAGE_TARGET reserves
    the same quantile p of every step's count (equal tail probability is the optimum: the marginal shortage per GPU
    is that probability); `utilization_ceiling` is one minus the warm GPU-time that holds above demand, before any
    warm-up, preemption or idle loss. None where even that reservation misses the target: the steps then
    vary far beyond Poisson noise around the hourly rate, and the bound says nothing.
    """
    from scipy.stats import poisson

    counts = np.maximum(np.asarray(counts, dtype=float), 0.0)
    window = pd.Series(counts).rolling(steps_per_hour + 1, center=True, min_periods=1)
    rate, n = window.mean().to_numpy(), window.count().to_numpy()
    neighbours = (rate * n - counts) / np.maximum(n - 1, 1)  # the rate without the step itself
    busy = neighbours > 0.5
    dispersion = float(np.mean((counts[busy] - neighbours[busy]) ** 2 / neighbours[busy]))
    units, capacity_excess = counts / scale, np.maximum(counts / scale - GPUS, 0.0).sum()

    def reserve(p):
        return np.minimum(np.ceil(poisson.ppf(p, np.maximum(rate, 1e-9)) / scale - 1e-9), GPUS)

    def shortage(p):
        return (np.maximum(units - reserve(p), 0.0).sum() - capacity_excess) / units.sum()

    low, high = 0.5, 1.0 - 1e-9
    for _ in range(50):  # bisection on the common quantile
        low, high = (low, (low + high) / 2) if shortage((low + high) / 2) <= SHORTAGE_TARGET else ((low + high) / 2, high)
    if shortage(high) > SHORTAGE_TARGET:  # steps vary far beyond Poisson around the hourly rate: no bound here
        return {"dispersion": dispersion, "quantile": None, "utilization_ceiling": None}
    warm_idle = float((reserve(high) - np.minimum(units, reserve(high))).sum() / (GPUS * len(units)))
    return {"dispersion": dispersion, "quantile": high, "utilization_ceiling": 1.0 - warm_idle}


def tuned_setting(demand, history_end: int, scale: float) -> tuple[dict, str]:
    """`tune` on the history before the evaluated days only; the setting it recommends (or, if none meets
    the objective, the lowest-shortage one) and what it did."""
    history = demand.iloc[:history_end]
    span_days = (history.index[-1] - history.index[0]).total_seconds() / 86400
    days = replay_days(history, DAYS)
    t = tune(history, forecaster, shortage_objective=SHORTAGE_TARGET, gpus=GPUS, per_gpu=scale, peak_gpus=None,
             days=days, **TUNE_GRID)
    keys = ("target_quantile", "lead_time_seconds", "headroom_quantile")
    rec = t.recommended
    if rec is None:
        best = t.table.sort_values(["inference_shortage", "utilization"], ascending=[True, False]).iloc[0]
        rec = {k: float(best[k]) for k in keys}
    return rec, f"tuned on the {days:.1f} days before the evaluated week ({span_days - days:.1f} days before them as history): {t.reason}"


def speed() -> dict:
    """The step loop on a year of 5-minute steps, 1,000 GPUs, the job trace (refits reported apart): nasa's
    5-minute trace repeated over the year, the forecast policy with the cheap seasonal-naive forecaster and a
    fixed buffer (choosing it replays the history, which is refits and repeated loops, not this loop)."""
    from forecast.models import SeasonalNaive

    nasa = at_own_step(load_history(DATA / "nasa_http_1995_5min.csv")).ffill().fillna(0.0)
    index = pd.date_range("2025-01-01", periods=365 * 288, freq="5min", tz="UTC")
    year = pd.Series(np.resize(nasa.to_numpy(float), len(index)), index=index)
    r = simulate(year, gpus=1000, peak_gpus=800, days=358, jobs=pd.read_csv(JOBS), make_forecaster=SeasonalNaive,
                 settings=SimSettings(warm_buffer=1.0))
    return {"steps": len(index) - 7 * 288, "sim_seconds": r.sim_seconds, "refit_seconds": r.refit_seconds,
            "utilization": r.utilization, "preemptions": r.preemptions}


def main() -> int:
    if not DATA.is_dir():
        print(f"real traces not found at {DATA}", file=sys.stderr)
        return 1
    files = sorted(p for p in DATA.glob("*.csv") if not p.name.endswith("_hourly.csv"))
    results: dict[str, dict[str, dict]] = {}
    losses: dict[str, dict[str, dict]] = {}
    tuned: dict[str, dict] = {}
    buffers: dict[str, dict] = {}
    bounds: dict[str, dict] = {}
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
        # the forecast run chooses its buffer the same way; the fits are shared, so this costs its loops only
        fits = SharedFits(forecaster)
        choice = choose_warm_buffer(demand.iloc[:e0], scale, GPUS, DAYS, fits, SimSettings())
        buffers[path.stem] = {"factor": choice.factor, "replay_days": choice.replay_days,
                              "replayed": [[b, float(x)] for b, x in choice.replayed]}
        runs = [(p, SimSettings()) for p in POLICIES] + [("tune", replace(SimSettings(), **rec))]
        for name, settings in runs:
            started = time.perf_counter()
            r = simulate(demand, gpus=GPUS, peak_gpus=PEAK, policy="forecast" if name == "tune" else name, days=DAYS,
                         make_forecaster=fits if name == "forecast" else forecaster, settings=settings, timeline=True)
            results[path.stem][name] = {**asdict(r), "policy": name}
            del results[path.stem][name]["timeline"]
            if name in ("forecast", "oracle", "tune"):
                losses[path.stem][name] = breakdown(r, step)
            print(f"[bench] {path.stem} {name}: util {r.utilization:.3f} shortage {r.inference_shortage:.4f} "
                  f"({time.perf_counter() - started:.1f} s)", file=sys.stderr, flush=True)
        assert results[path.stem]["forecast"]["warm_buffer"] == choice.factor
        bounds[path.stem] = shot_noise_bound(raw[e0:], scale, int(3600 // step))
    year = speed()
    print(f"[bench] year on 1,000 GPUs: {year['sim_seconds']:.1f} s loop, {year['refit_seconds']:.1f} s refits",
          file=sys.stderr)
    (REPO / "bench" / "results").mkdir(exist_ok=True)
    (REPO / "bench" / "results" / "simulate.json").write_text(json.dumps(
        {"results": results, "losses": losses, "tuned": tuned, "buffers": buffers, "shot_noise_bound": bounds,
         "speed": year}, indent=1,
        sort_keys=True))
    (REPO / "docs" / "bench-simulate.md").write_text(report(results, losses, tuned, buffers, bounds, year))
    return 0


def report(results, losses, tuned, buffers, bounds, year) -> str:
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
        t, b = tuned[trace], buffers[trace]
        curve = ", ".join(f"{f:g}: {x * 100:.3f}%" for f, x in b["replayed"])
        lines += ["", f"forecast warm buffer b = {b['factor']:g}, the first on the grid whose replayed shortage "
                  f"(demand above the cluster excluded) meets {SHORTAGE_TARGET * 100:g}%, replayed on the "
                  f"{b['replay_days']:.1f} days before the evaluated week: {curve}.", "",
                  f"`tune` setting: {t['setting']}; {t['how']} ({t['tune_seconds']:.0f} s).", ""]
    policies = list(next(iter(results.values())))
    mean = {p: {c: float(np.mean([results[t][p][c] for t in results]))
                for c in ("utilization", "inference_shortage", "shortage_over_capacity")} for p in policies}
    lines += ["## Mean over traces", "", "| policy | utilization | inference_shortage | of which over capacity |",
              "|---|---|---|---|"]
    lines += [f"| {p} | {m['utilization']:.3f} | {m['inference_shortage'] * 100:.2f}% | "
              f"{m['shortage_over_capacity'] * 100:.2f}% |" for p, m in mean.items()]
    lines += ["", f"Speed: a year of 5-minute steps ({year['steps']} evaluated) on 1,000 GPUs with the job trace: "
              f"{year['sim_seconds']:.1f} s step loop, refits {year['refit_seconds']:.1f} s apart (seasonal naive)."]
    cols = list(next(iter(next(iter(losses.values())).values())))
    lines += ["", "## Where utilization and shortage go", "",
              "Fractions of capacity GPU-time (warm_idle: serving capacity above demand; warming: GPUs granted to "
              "inference, not yet serving; idle: neither) and of demand (shortage above / within the policy's "
              "reservation; the share over the cluster's capacity is in the tables above). "
              "hour_peak_bound_waste: GPU-time a reservation at each "
              "hour's exact peak (known in advance) would hold above demand: the floor of waste for any policy that "
              "sees the future hourly but not within the hour.", "",
              "| trace | policy | " + " | ".join(cols) + " |", "|---" * (len(cols) + 2) + "|"]
    for trace, rows in losses.items():
        for policy, b in rows.items():
            lines.append(f"| {trace} | {policy} | " + " | ".join(f"{b[c]:.4f}" for c in cols) + " |")
    lines += ["", "## What no policy without step-level foresight can reach", "",
              "Shot noise (bench/simulate_bench.py `shot_noise_bound`): given each step's arrival rate exactly (the "
              "centred one-hour mean of the evaluated week's own counts, more than any forecast knows) and requests "
              "arriving at random (Poisson), the least warm capacity that keeps shortage within the cluster at "
              f"{SHORTAGE_TARGET * 100:g}% reserves the same Poisson quantile of every step; its ceiling is one minus "
              "the warm GPU-time it holds above demand, before any warm-up, preemption or idle loss. dispersion: "
              "variance over mean of each step's count around its neighbours' rate (Poisson = 1; above 1, the real "
              "noise is larger and the real ceiling lower). '-' where even that reservation misses the objective: "
              "the steps vary far beyond Poisson around the hourly rate, and the bound says nothing.", "",
              "| trace | dispersion | utilization ceiling | forecast | oracle | oracle - 2 points |",
              "|---|---|---|---|---|---|"]
    for trace, b in bounds.items():
        ceiling = "-" if b["utilization_ceiling"] is None else f"{b['utilization_ceiling']:.3f}"
        oracle = results[trace]["oracle"]["utilization"]
        lines.append(f"| {trace} | {b['dispersion']:.3g} | {ceiling} | {results[trace]['forecast']['utilization']:.3f} "
                     f"| {oracle:.3f} | {oracle - ORACLE_GAP:.3f} |")
    forecast = {t: rows["forecast"] for t, rows in results.items()}
    over = sum(r["inference_shortage"] - r["shortage_over_capacity"] > SHORTAGE_TARGET for r in forecast.values())
    gaps = ", ".join(f"{t} {(r['utilization'] - results[t]['oracle']['utilization']) * 100:+.1f} points, cost "
                     f"{(r['cost_vs_dedicated'] / results[t]['oracle']['cost_vs_dedicated'] - 1) * 100:+.1f}%"
                     for t, r in forecast.items())
    targets = (f"- Targets (forecast row): mean utilization {mean['forecast']['utilization']:.3f} (>= 0.92); against "
               f"the oracle per trace: {gaps} (within 2 points, cost within 5%); mean shortage "
               f"{mean['forecast']['inference_shortage'] * 100:.2f}% (<= 0.3%; "
               f"{mean['forecast']['shortage_over_capacity'] * 100:.2f}% of it above the cluster, which no policy "
               f"serves); headroom violations {sum(r['headroom_violations'] for r in forecast.values())} (0); "
               f"goodput >= {min(r['training_goodput'] for r in forecast.values()):.3f} (>= 0.95).")
    replay_vs_week = "; ".join(
        f"{t}: b {buffers[t]['factor']:g}, replayed {buffers[t]['replayed'][-1][1] * 100:.2f}%, evaluated "
        f"{(r['inference_shortage'] - r['shortage_over_capacity']) * 100:.2f}%" for t, r in forecast.items())
    lines += ["", "## Findings", "", targets,
              "- How b is chosen: the real engine (forecast floor, lead time, warm-up, preemptions, hourly refits "
              "on the past only) replays the history's last min(7 days, half of it) for b = 0, 0.25, 0.5, ... in "
              "order and keeps the first whose shortage meets the objective. The objective excludes demand above "
              "the cluster's capacity: no b can serve it, and counting it would push b to the grid's end on any "
              "replayed week that overflows the cluster by more than the objective, for no gain (the replayed weeks "
              "here do not overflow it; alibaba's evaluated week does); it is reported on its own "
              "(shortage_over_capacity) and is in inference_shortage. The previous choice, a replay of the recent "
              "peak plus buffer without the forecast floor, chose 2-5.4x larger b (7.15 / 1.35 / 0.85).",
              f"- Shortage the buffer can change (demand above the cluster excluded), replayed at the chosen b "
              f"against the evaluated week: {replay_vs_week}. The replay is an estimate from one earlier week, "
              f"not a bound: on {over} of {len(forecast)} trace(s) the evaluated week rose more steeply than the "
              "replayed one and went over the objective; the replay keeps no margin for that.",
              "- The forecast policy still loses utilization to warm GPUs above demand (warm_idle): the hourly "
              "forecast is flat over the hour while the trace moves every 5 or 10 minutes, and the buffer covers "
              "what it cannot see. Within-hour deviations from the hourly mean are not predictable from the past "
              "on these traces (autocorrelation one hour, one day and one week back within +-0.07; one step back "
              "0.08-0.22); hour_peak_bound_waste is what even perfect hourly foresight holds above demand, and "
              "the oracle knows every 5-minute step. Where rises are steep (alibaba's replayed curve), meeting "
              "the objective takes a large b, and the warm GPUs it keeps are the utilization and cost gap to the "
              "oracle.",
              "- " + shot_noise_finding(results, bounds),
              "- Utilization and shortage trade along one frontier per trace (the replayed curve above); the "
              "objective fixes the point on it from the history alone. Choosing the objective, a margin or the "
              "scale-in delay from the evaluated week's numbers would be tuning on the test; the scale-in delay "
              "stays at its default (sweeping it would multiply the replay, and tune's, by the delays tried).",
              "- `headroom simulate` runs the same replay (choosing b is part of the forecast policy): on these "
              "traces it adds buffer_replay_seconds (one replay week of refits plus one engine loop per b tried) "
              "to a run; SimSettings(warm_buffer=b) fixes b and skips it. tune shares one fit per history across "
              "its grid and every setting's replay.",
              "- In the breakdown the reservation is the hourly forecast floor; the buffer above the recent peak "
              "comes on top, so demand above the reservation is common and mostly served."]
    return "\n".join(lines) + "\n"


def shot_noise_finding(results, bounds) -> str:
    """Where the shot-noise ceiling is below oracle - 2 points: that target is out of reach for any policy."""
    needed = {t: results[t]["oracle"]["utilization"] - ORACLE_GAP for t in bounds}
    out = [f"{t}: ceiling {b['utilization_ceiling']:.3f} < {needed[t]:.3f}" for t, b in bounds.items()
           if b["utilization_ceiling"] is not None and b["utilization_ceiling"] < needed[t]]
    # the best any policy can do per trace: the oracle, or the shot-noise ceiling where it is lower
    best = [min(results[t]["oracle"]["utilization"], b["utilization_ceiling"] or 1.0) for t, b in bounds.items()]
    mean_target = (f" The mean utilization target ({MEAN_UTILIZATION_TARGET:g}) is out of reach with it: the best "
                   f"mean any policy can reach here is {np.mean(best):.3f} (each trace's oracle, or its ceiling where "
                   "lower)." if np.mean(best) < MEAN_UTILIZATION_TARGET else "")
    if not out:
        return "Shot noise alone does not put any trace's within-2-points target out of reach." + mean_target
    return ("Out of reach for any policy without step-level foresight, not only this one (" + "; ".join(out) +
            "): with the step's rate known exactly, random arrivals alone keep that much warm capacity above demand "
            f"at {SHORTAGE_TARGET * 100:g}% shortage, and the oracle's utilization comes from knowing each step's "
            "draw. The within-2-points target assumes hourly foresight suffices; on such traces it does not."
            + mean_target)


if __name__ == "__main__":
    sys.exit(main())
