"""Tuning: sweep target quantile x lead time x headroom quantile in the simulator
and recommend the setting with the highest utilization that meets the shortage objective."""
from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace

import pandas as pd

from controller.simulate import SharedFits, SimSettings, simulate
from forecast.base import Forecaster


@dataclass(frozen=True)
class TuneResult:
    table: pd.DataFrame  # one row per setting: the grid values and the SimResult fields
    recommended: dict | None  # the grid values of the best row, None if no row meets the objective
    shortage_objective: float
    reason: str


def tune(
    demand: pd.Series,
    make_forecaster: Callable[[], Forecaster],
    target_quantiles: Sequence[float] = (0.5, 0.7, 0.9),
    lead_times_seconds: Sequence[float] = (0.0, 900.0, 1800.0),
    headroom_quantiles: Sequence[float] = (0.95, 0.99),
    shortage_objective: float = 0.001,
    base: SimSettings = SimSettings(),
    **simulate_kwargs,
) -> TuneResult:
    rows = []
    make_forecaster = SharedFits(make_forecaster)  # also shared by each setting's warm-buffer replay
    for q, lead, hq in itertools.product(target_quantiles, lead_times_seconds, headroom_quantiles):
        if hq < q:  # headroom quantile below the target would be no headroom at all
            continue
        settings = replace(base, target_quantile=q, lead_time_seconds=lead, headroom_quantile=hq)
        r = simulate(demand, policy="forecast", make_forecaster=make_forecaster, settings=settings, **simulate_kwargs)
        rows.append({"target_quantile": q, "lead_time_seconds": lead, "headroom_quantile": hq, **asdict(r)})
    table = pd.DataFrame(rows)
    ok = table[(table["inference_shortage"] <= shortage_objective) & (table["headroom_violations"] == 0)]
    if ok.empty:
        best = table.sort_values(["inference_shortage", "utilization"], ascending=[True, False]).iloc[0]
        return TuneResult(table, None, shortage_objective,
                          f"no setting meets shortage <= {shortage_objective:g}; lowest is {best.inference_shortage:.4g}"
                          f" at target q{best.target_quantile:g}")
    best = ok.sort_values(["utilization", "inference_shortage"], ascending=[False, True]).iloc[0]
    rec = {k: float(best[k]) for k in ("target_quantile", "lead_time_seconds", "headroom_quantile")}
    return TuneResult(table, rec, shortage_objective,
                      f"highest utilization {best.utilization:.3f} among {len(ok)} setting(s) with shortage <= {shortage_objective:g}")


def plot_tradeoff(result: TuneResult, path: str) -> str:
    """Shortage vs utilization for every setting, the recommendation marked; writes a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = result.table
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for q, g in t.groupby("target_quantile"):
        ax.scatter(g["inference_shortage"] * 100, g["utilization"] * 100, label=f"target q{q:g}")
    if result.recommended is not None:
        r = t[(t["target_quantile"] == result.recommended["target_quantile"])
              & (t["lead_time_seconds"] == result.recommended["lead_time_seconds"])
              & (t["headroom_quantile"] == result.recommended["headroom_quantile"])].iloc[0]
        ax.scatter([r.inference_shortage * 100], [r.utilization * 100], s=200, facecolors="none", edgecolors="k",
                   label="recommended")
    ax.axvline(result.shortage_objective * 100, color="grey", linestyle="--", label="shortage objective")
    ax.set_xlabel("inference shortage (% of demand GPU-time)")
    ax.set_ylabel("utilization (%)")
    ax.set_title("headroom trade-off: utilization vs shortage")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
