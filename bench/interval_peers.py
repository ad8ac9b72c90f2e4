"""Issue 13's per-trace coverage target beside the peers' own intervals, on the same folds.

The target asks 80 % and 90 % coverage within ±5 points on every trace, scored on 7 daily folds (5 on a one-week
trace). Whether any method meets that on such few folds is a question the stored runs answer: bench/peers kept
statsforecast's own 80 % / 90 % intervals (lo-/hi-) on the shared traces' folds and on every one-week window
(bench/week_windows.py), and bench/forecast_bench.py kept headroom auto's coverage on the same folds. By days of
history at the origin (the one-week windows' 5 folds have 2-6), headroom's bands are made again (AutoForecaster on
each window's hours before the origin, as forecast_bench does), the peers' read from their stored folds; seconds.

    python bench/interval_peers.py  -> bench/results/interval_peers.json, docs/bench-interval-peers.md
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from week_windows import ORIGINS, week_windows  # noqa: E402

from forecast.backtest import AutoForecaster  # noqa: E402
from forecast.metrics import coverage  # noqa: E402

RESULTS = REPO / "bench" / "results"
DATA = REPO.parent / "shared" / "data"
TRACES = DATA / "traces"
BANDS = {80: (0.1, 0.9), 90: (0.05, 0.95)}
LEVELS = (80, 90)
WITHIN = 0.05
HEADROOM = "headroom auto"


def peer_coverage(actual: np.ndarray, origins: list[int], folds: list | str, horizon: int) -> dict[int, float] | None:
    """A peer's coverage of `actual` over its folds pooled, from its own bounds (coverage skips missing actuals);
    None where it did not finish them all."""
    if isinstance(folds, str) or any(not isinstance(f, dict) or f.get("error") or f"lo-{LEVELS[0]}" not in f
                                     for f in folds):
        return None
    scored = [actual[o:o + horizon] for o in origins]  # the last fold may run past the series' end

    def bound(name: str) -> np.ndarray:
        return np.concatenate([np.asarray(f[name], float)[:len(a)] for a, f in zip(scored, folds)])
    pooled = np.concatenate(scored)
    return {level: coverage(pooled, bound(f"lo-{level}"), bound(f"hi-{level}")) for level in LEVELS}


def rows(peers: dict, forecast: dict) -> pd.DataFrame:
    horizon = peers["protocol"]["horizon"]
    found = []
    for name, trace in peers["traces"].items():
        actual = pd.read_csv(TRACES / trace["file"])["value"].to_numpy(float)
        for model, folds in trace["models"].items():
            if (c := peer_coverage(actual, trace["origin_index"], folds, horizon)) is not None:
                found.append(("shared traces (7 folds)", name, model, c[80], c[90]))
        auto = forecast["traces"][name]["headroom"]["models"]["auto"]
        found.append(("shared traces (7 folds)", name, HEADROOM, auto["coverage_80"], auto["coverage_90"]))
    for name, week in peers["weeks"].items():
        part = f"one-week windows, {week['kind']} (5 folds)"
        for model, folds in week["models"].items():
            c = peer_coverage(np.asarray(week["y"], float), week["origin_index"], folds, horizon)
            if c is not None:
                found.append((part, name, model, c[80], c[90]))
        mine = forecast["weeks"][name]
        found.append((part, name, HEADROOM, mine["coverage_80"], mine["coverage_90"]))
    table = pd.DataFrame(found, columns=["part", "unit", "model", "coverage_80", "coverage_90"])
    for level in LEVELS:
        table[f"within_{level}"] = (table[f"coverage_{level}"] - level / 100).abs() <= WITHIN + 1e-9
    table["within_both"] = table["within_80"] & table["within_90"]
    return table


def by_days(peers: dict) -> pd.DataFrame:
    """Coverage of each one-week window's fold by the days of history before its origin: each peer's from its
    stored bounds, headroom auto's made again on the same hours."""
    horizon = peers["protocol"]["horizon"]
    windows = week_windows(DATA)
    found = []
    for name, week in peers["weeks"].items():
        actual = np.asarray(week["y"], float)
        for model, folds in week["models"].items():
            for o, f in zip(week["origin_index"], [] if isinstance(folds, str) else folds):
                if (c := peer_coverage(actual, [o], [f], horizon)) is not None:
                    found.append((model, o // 24, c[80], c[90]))
        series = windows[name][1]
        for o in ORIGINS:
            model = AutoForecaster(horizon=horizon).fit(series.iloc[:o])
            bands = model.predict(horizon, sorted({*BANDS[80], *BANDS[90]}))
            a = series.to_numpy(dtype=float)[o:o + horizon]  # unrounded (the peers' copy has 6 digits: ties move)
            found.append((HEADROOM, o // 24, *(coverage(a, bands[lo].to_numpy(), bands[hi].to_numpy())
                                               for lo, hi in BANDS.values())))
    return pd.DataFrame(found, columns=["model", "days", "coverage_80", "coverage_90"])


def summary(table: pd.DataFrame) -> pd.DataFrame:
    return table.groupby(["part", "model"], sort=False).agg(
        units=("unit", "size"), within_both=("within_both", "sum"), within_80=("within_80", "sum"),
        within_90=("within_90", "sum"), mean_coverage_80=("coverage_80", "mean"),
        mean_coverage_90=("coverage_90", "mean")).reset_index()


def days_markdown(days: pd.DataFrame) -> list[str]:
    mean = days.groupby(["model", "days"], sort=False)[["coverage_80", "coverage_90"]].mean().unstack("days")
    span = sorted(days["days"].unique())
    lines = ["", "## By days of history (the one-week windows' folds)", "",
             "Each fold of every one-week window by the days of history before its origin; the mean coverage over "
             f"the {days[days.model == HEADROOM].shape[0] // len(span)} windows, 80 % / 90 %.", "",
             "| model | " + " | ".join(f"{d} days" for d in span) + " |", "|---|" + "---|" * len(span)]
    for model, row in mean.iterrows():
        name = f"**{model}**" if model == HEADROOM else model
        lines.append(f"| {name} | " + " | ".join(f"{row[('coverage_80', d)]:.0%} / {row[('coverage_90', d)]:.0%}"
                                                 for d in span) + " |")
    short = []
    for d in span:
        mine = mean.loc[HEADROOM, ("coverage_90", d)]
        if min(mean.loc[HEADROOM, ("coverage_80", d)] - .8, mine - .9) < -WITHIN:
            best = mean[("coverage_90", d)].drop(HEADROOM)
            short.append(f"{d} days ({mine:.0%} at 90 %; the peers {best.min():.0%}-{best.max():.0%}, "
                         f"{best.idxmax()} highest)")
    if short:
        lines += ["", "headroom's bands are more than 5 points short at a level after " + "; ".join(short) + "."]
    return lines


def markdown(table: pd.DataFrame, days: pd.DataFrame) -> str:
    s = summary(table)
    lines = ["# Coverage within ±5 points per trace: headroom and the peers' own intervals", "",
             "Generated by `python bench/interval_peers.py` from bench/results/peers.json (statsforecast's 80 % / "
             "90 % intervals, its own `level=`) and bench/results/forecast.json (headroom auto's bands), on the same "
             "folds: each shared hourly trace's 7 daily origins, and every whole week of the traces as a history of "
             "its own (5 daily origins, as `backtest --folds 7` scores a one-week trace). Issue 13 asks both "
             "coverages within ±5 points on every trace. Per part and model: the units where both are, where the "
             "80 % and the 90 % one is, and the mean coverage over the units. A peer that did not finish every fold "
             "of a unit is not counted there (AutoARIMA past its minute).", "",
             "| part | model | units | both within ±5 | 80 % within | 90 % within | mean cov 80 | mean cov 90 |",
             "|---|---|---|---|---|---|---|---|"]
    for r in s.itertuples():
        name = f"**{r.model}**" if r.model == HEADROOM else r.model
        lines.append(f"| {r.part} | {name} | {r.units} | {r.within_both} | {r.within_80} | {r.within_90} | "
                     f"{r.mean_coverage_80:.1%} | {r.mean_coverage_90:.1%} |")
    mine = s[s.model == HEADROOM].set_index("part")["within_both"]
    best = s[s.model != HEADROOM].groupby("part", sort=False)["within_both"].max()
    lines += ["", "Units within ±5 points at both levels, headroom's bands against the best peer's: "
              + "; ".join(f"{p}: {int(mine[p])} against {int(best[p])}" for p in best.index) + "."]
    narrow = [f"{r.part}: {r.mean_coverage_80:.1%} / {r.mean_coverage_90:.1%}" for r in s[s.model == HEADROOM]
              .itertuples() if min(r.mean_coverage_80 - .8, r.mean_coverage_90 - .9) < -WITHIN]
    if narrow:
        lines.append("headroom's bands cover too little on average (more than 5 points under a level): "
                     + "; ".join(narrow) + ".")
    every = s[(s.units > 3) & (s.within_both == s.units)]
    lines.append("Within ±5 on every unit of a part of more than three units: "
                 + ("; ".join(f"{r.model} ({r.part})" for r in every.itertuples()) if len(every) else
                    "no model here, headroom's or statsforecast's: on 5-7 daily folds a trace's coverage is as much "
                    "the scored days' luck as calibration (docs/bench-forecast.md: the pick's 7-fold windows on "
                    "nasa's 28 earlier days are within ±5 on 36 % / 59 % of them while covering 79.5 % / 92.5 % "
                    "over all)") + ".")
    return "\n".join(lines + days_markdown(days)) + "\n"


def main(argv: list[str] | None = None) -> int:
    # no options, but --help says what the script writes before it is run, and an unknown flag is refused: without a
    # parser `--help` ran it, rewriting the doc and the results
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                            allow_abbrev=False).parse_args(argv)
    peers = json.loads((RESULTS / "peers.json").read_text())
    forecast = json.loads((RESULTS / "forecast.json").read_text())
    table, days = rows(peers, forecast), by_days(peers)
    (RESULTS / "interval_peers.json").write_text(json.dumps(
        {"units": table.to_dict(orient="records"), "summary": summary(table).to_dict(orient="records"),
         "by_days": days.to_dict(orient="records")}, indent=1))
    (REPO / "docs" / "bench-interval-peers.md").write_text(markdown(table, days))
    print(markdown(table, days))
    return 0


if __name__ == "__main__":
    sys.exit(main())
