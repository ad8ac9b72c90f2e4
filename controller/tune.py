"""`headroom tune`: the policy's own fields swept on the history alone, against an SRE's objective.

The history's last days are replayed (the days before them are the forecaster's history, so nothing is
seen ahead) under each setting; the recommendation is the highest-utilization setting whose shortage
and short steps meet the objective with their day-to-day standard error to spare (a setting that meets
it only by the replayed days' luck misses it on the days it then runs), re-checked by replaying the
policy exactly as it is written out (a ReservationPolicy manifest that `kubectl apply`, `headroom run`
and `headroom simulate --policy-file` take unchanged). When nothing meets the objective it names the
closest setting and what stands in the way. The sweep is ordered so it stops early: along the warm
buffer (or a baseline's margin), shortage only falls and utilization only falls, so the first setting
that meets the objective is the best of its line.
"""
from __future__ import annotations

import dataclasses
import math
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from controller.observe import MIN_FIT_HOURS, default_forecaster
from controller.simulate import FORECASTER, REFERENCES, Scenario, SharedFits, SimResult, simulate
from core.files import create_whole, replace_whole
from core.policy import ObjectiveSpec, PolicySpec, load_manifests, manifest
from core.settings import TuneConfig
from core.yamlfile import KubectlLoader, documents, manifest_text
from forecast.base import Forecaster

MIN_REPLAY_DAYS = 1.0  # a replay day at least
# before the replay, the hours the forecaster needs: a replay under the planner's fallback would tune a policy other
# than the one that runs (the evaluated days have their forecast)
FORECASTER_DAYS = MIN_FIT_HOURS / 24


@dataclass(frozen=True)
class TuneResult:
    table: pd.DataFrame        # one row per setting tried: the fields swept and the replay's metrics
    recommended: PolicySpec    # what to run: the best setting, else the closest (see `met`), else the defaults
    chosen: int | None         # the table's row of `recommended` (None: nothing swept)
    met: bool                  # the recommendation meets the objective on the replay, a standard error to spare
    reason: str
    in_the_way: str            # when nothing meets the objective: what stands in the way (in `reason` too), else ""
    replay: Scenario | None    # the history's last days the settings were replayed on (None: too little history)
    recheck: SimResult | None  # the written policy, replayed again

    @property
    def replay_days(self) -> float:
        return 0.0 if self.replay is None else self.replay.days


def replay_scenario(scenario: Scenario) -> Scenario | None:
    """The history as its own evaluation: its last min(days, half of it, what follows the forecaster's first
    FORECASTER_DAYS), or None if that is under a day."""
    history = scenario.history
    if len(history) < 2:
        return None
    span = ((history.index[-1] - history.index[0]).total_seconds() + scenario.step_seconds) / 86400  # its last step too
    days = min(scenario.days, span / 2, span - FORECASTER_DAYS)
    if days < MIN_REPLAY_DAYS:
        return None
    return dataclasses.replace(scenario, demand=history, days=days, jobs=None)


def baseline(reference: str) -> dict:
    """A baseline's own fields (to update a spec with): its level plus a margin, nothing reactive."""
    return {"forecaster": FORECASTER[reference], "warm_buffer": 0.0, "warm_buffer_quantile": 0.0,
            "scale_in_delay": "0s"}


def setting_lines(base: PolicySpec, grid: TuneConfig, reference: str):
    """The grid's settings (fields to update `base` with), one line at a time, each line ordered from the least to
    the most conservative: the first setting of a line to meet the objective is that line's best."""
    if reference == "forecast":
        for forecaster in grid.forecasters:
            for q in grid.target_quantiles:
                for delay in grid.scale_in_delays:
                    for lead in grid.lead_times:
                        for level in grid.warm_buffer_quantiles:
                            yield [{"forecaster": forecaster, "target_quantile": q, "headroom_quantile": max(
                                base.headroom_quantile, q), "scale_in_delay": delay, "lead_time": lead,
                                "warm_buffer_quantile": level, "warm_buffer": b} for b in grid.warm_buffers]
    else:
        yield [{**baseline(reference), "margin_gpus": m} for m in grid.margins_gpus]


def _margins(r: SimResult) -> tuple[float, float]:
    """What the shortage and the short steps must meet the objective with to spare: their day-to-day standard
    errors. One day replayed has none (it takes two days or more): each figure is then its own margin, the error a
    shortage all on one day has (a week short on one day only has an error as large as its shortage), so the
    objective is met within half its bounds."""
    if r.shortage_within_cluster_se is None or r.short_steps_se is None:
        return r.shortage_within_cluster, r.short_steps
    return r.shortage_within_cluster_se, r.short_steps_se


def _excess(r: SimResult, objective: ObjectiveSpec) -> float:
    """How far a replay is from meeting the objective with a standard error to spare (<= 1: it does). The
    replayed days are a sample: the setting that just meets the objective on them is, as often as not, one that
    was lucky there, and misses it on the days it is then run on."""
    shortage_margin, steps_margin = _margins(r)
    return max((r.shortage_within_cluster + shortage_margin) / max(objective.max_shortage, 1e-12),
               (r.short_steps + steps_margin) / max(objective.max_short_steps, 1e-12))


def meets(r: SimResult, objective: ObjectiveSpec) -> bool:
    return _excess(r, objective) <= 1 + 1e-9 and r.headroom_violations == 0


def objective_of(grid: TuneConfig) -> ObjectiveSpec:
    """The objective an SRE asked for (tune.max_shortage, tune.max_short_steps, or their flags)."""
    return ObjectiveSpec(max_shortage=grid.max_shortage, max_short_steps=grid.max_short_steps)


def tune(scenario: Scenario, base: PolicySpec, grid: TuneConfig = TuneConfig(),
         make_forecaster: Callable[[], Forecaster] | SharedFits | None = None, reference: str = "forecast",
         progress: Callable[[str], None] | None = None) -> TuneResult:
    if reference in REFERENCES:
        raise ValueError(f"{reference} is a reference that knows the future: there is nothing to tune")
    objective = objective_of(grid)
    base = base.model_copy(update={"objective": objective})
    replay = replay_scenario(scenario)
    if replay is None:
        hours = len(scenario.history) * scenario.step_seconds / 3600
        # the replay is no longer than the evaluated days: under a day of them, no history is long enough
        why = f"the evaluated days ({scenario.days:g}, simulate.days) are under the day a replay needs, and tune " \
            "replays no more of the history than them (give --days 1 or more)" if scenario.days < MIN_REPLAY_DAYS \
            else f"too little history to tune on ({hours:.0f} h before the evaluated days; tuning needs " \
            f"{FORECASTER_DAYS + MIN_REPLAY_DAYS:g} days: a day to replay after the {MIN_FIT_HOURS} hours the " \
            "forecaster needs)"
        # a baseline's stated defaults are still the baseline's: its level and its stated margin, nothing reactive
        stated = base if reference == "forecast" else base.model_copy(update=baseline(reference))
        return TuneResult(pd.DataFrame(), stated, None, False, f"{why}: the policy's stated defaults are used (the "
                          f"forecast falls back to the last day's same-hour peak until {MIN_FIT_HOURS} hours are "
                          "seen)", "", None, None)
    fits = make_forecaster if isinstance(make_forecaster, SharedFits) else \
        SharedFits(make_forecaster or default_forecaster)  # a caller's SharedFits: its fits serve its runs too
    rows = []
    for line in setting_lines(base, grid, reference):
        for fields_ in line:
            spec = base.model_copy(update=fields_)
            r = simulate(replay, PolicySpec.model_validate(spec.model_dump()), fits, reference="forecast")
            rows.append((fields_, spec, r))
            if progress:
                progress(f"{_describe(fields_, objective)}: utilization {r.utilization:.3f}, shortage "
                         f"{r.shortage_within_cluster:.3%}, short steps {r.short_steps:.2%}")
            if meets(r, objective):
                break
    table = pd.DataFrame([{**f, **{k: getattr(r, k) for k in ("utilization", "shortage_within_cluster",
                                                                  "short_steps", "longest_shortage_minutes",
                                                                  "shortage_over_capacity", "headroom_violations",
                                                                  "training_goodput", "objective_met")},
                           "meets_with_margin": meets(r, objective)} for f, _, r in rows])
    met = [k for k, (_, _, r) in enumerate(rows) if meets(r, objective)]
    in_the_way = ""
    if met:
        chosen = max(met, key=lambda k: (rows[k][2].utilization, -rows[k][2].shortage_within_cluster))
        fields_, spec, best = rows[chosen]
        reason = (f"highest utilization {best.utilization:.3f} of {len(met)} setting(s) meeting shortage <= "
                  f"{objective.max_shortage:.3%} and short steps <= {objective.max_short_steps:.2%} on the "
                  f"history's last {_replayed(replay)}, {_spare(best, figures=True)}" + _thin(best, replay.days)
                  + _fell_back(best))
    else:
        chosen = min(range(len(rows)), key=lambda k: (_excess(rows[k][2], objective), -rows[k][2].utilization))
        fields_, spec, best = rows[chosen]
        in_the_way = _in_the_way(best, replay, reference, spec)
        broke = " and without a headroom violation" if best.headroom_violations else ""  # meets() asks both
        reason = (f"no setting meets the objective {_spare(best)}{broke} on the history's "
                  f"last {_replayed(replay)}; the closest, "
                  f"{_describe(fields_, objective)}, is short {best.shortage_within_cluster:.3%} of demand in "
                  f"{best.short_steps:.2%} of steps. " + in_the_way)
    return TuneResult(table, spec, chosen, bool(met), reason, in_the_way, replay, recheck(replay, spec, fits, best))


def _replayed(replay: Scenario) -> str:
    """The replayed days, and when they were: an SRE checks which days a setting was chosen on."""
    steps = replay.evaluated
    return f"{replay.days:g} days ({steps[0]:%Y-%m-%d %H:%M} .. {steps[-1]:%Y-%m-%d %H:%M} UTC)"


def _spare(r: SimResult, figures: bool = False) -> str:
    """The margin the objective is met with (see `_margins`), as the reason says it; `figures`: with the figures."""
    if r.shortage_within_cluster_se is None or r.short_steps_se is None:
        shown = (f"short {r.shortage_within_cluster:.3%} of demand, in {r.short_steps:.2%} of steps; "
                 if figures else "")
        return (f"within half its bounds ({shown}one day replayed has no day-to-day standard error, which takes two "
                "days or more: each figure is taken as its own error, the error a shortage all on one day has)")
    shown = (f" (short {r.shortage_within_cluster:.3%} ± {r.shortage_within_cluster_se:.3%} of demand, in "
             f"{r.short_steps:.2%} ± {r.short_steps_se:.2%} of steps)" if figures else "")
    return "with a day-to-day standard error to spare" + shown


def _thin(r: SimResult, days: float) -> str:
    """What a replay cannot show: a week's shortage is often one spike (docs/bench-simulate.md), and a replay with
    no short step, or shorter than a week, may simply not hold one; its standard error does not say so."""
    if r.short_steps > 0 and days >= 7:
        return ""
    why = "no step of it was short, so its standard error says nothing" if r.short_steps == 0 else \
        "it is under a week"
    return (f"; the evidence is thin ({why}): a spike rarer than once in {days:g} days is not in the replay, "
            "and one such step can hold most of a week's shortage")


def _fell_back(r: SimResult) -> str:
    """Hours the replay planned on the planner's fallback (no data, stale data): there the setting was measured on a
    policy other than the one that runs on its forecast."""
    if not r.forecast_fallback_hours:
        return ""
    return (f"; the forecast fell back in {r.forecast_fallback_hours} replayed hours (no data or stale data there), "
            "and in those the setting was measured on the fallback, not on its forecast")


def rises_level_said(level: float | None, objective: ObjectiveSpec) -> str:
    """A warmBufferQuantile as the level it stands for: unset is 1 - the objective's maxShortSteps (the rises the
    objective lets go short), not "None", which reads as no buffer for the rises (that is 0)."""
    return f"{1 - objective.max_short_steps:g} (unset)" if level is None or math.isnan(level) else f"{level:g}"


def _describe(fields_: dict, objective: ObjectiveSpec) -> str:
    return ", ".join(f"{k} {rises_level_said(v, objective) if k == 'warm_buffer_quantile' else v}"
                     for k, v in fields_.items())


def _in_the_way(r: SimResult, replay: Scenario, reference: str, spec: PolicySpec) -> str:
    if _excess(r, spec.objective) <= 1 + 1e-9:  # the objective is met: the headroom guarantee is what failed
        return (f"the headroom guarantee failed in {r.headroom_violations} replayed steps: demand inside the band "
                "planned before it found too few GPUs idle or lent to training that comes back within "
                f"reclaimDeadline {spec.reclaim_deadline} (training's checkpoint and termination take longer: "
                "simulate.world.preemption_seconds); keep idle GPUs with headroomFloorGpus, or allow a longer "
                "reclaimDeadline")
    if r.shortage_over_capacity > 0:
        return (f"{r.shortage_over_capacity:.3%} of demand is above the cluster's {replay.gpus} GPUs (no policy serves "
                "it; it is not counted in the objective), and the steps around it leave too little to grow into")
    if r.forecast_fallback_hours:
        return (f"the forecast fell back in {r.forecast_fallback_hours} replayed hours (too little or stale history); "
                "more history would help")
    # what the sweep grows to cover a rise: the forecast policy's warm buffer, a baseline's margin (setting_lines)
    field, grid = ("warm buffer", "tune.warm_buffers") if reference == "forecast" else ("margin", "tune.margins_gpus")
    return (f"demand moves faster within a step than any {field} on the grid covers: widen {grid}, or relax the "
            "objective")


def recheck(replay: Scenario, spec: PolicySpec, fits, expected: SimResult) -> SimResult:
    """Replay the policy exactly as a manifest carries it; its numbers must be the sweep's."""
    namespace, name = replay.name.split("/", 1)
    text = manifest_text(manifest(name, namespace, spec))
    (loaded,) = [PolicySpec.model_validate(o["spec"]) for o in documents(text, KubectlLoader)]
    again = simulate(replay, loaded, fits)
    for k in ("utilization", "shortage_within_cluster", "short_steps"):
        if not math.isclose(getattr(again, k), getattr(expected, k), rel_tol=1e-9, abs_tol=1e-12):
            raise RuntimeError(f"tune's re-check by replay differs in {k}: {getattr(again, k)} vs "
                               f"{getattr(expected, k)} (the written policy is not the one swept)")
    return again


def write_policy(spec: PolicySpec, path: str | Path, name: str, namespace: str, comment: str,
                 replace: bool = False) -> Path:
    """The recommendation as a ReservationPolicy manifest, read back to be sure it is one. A new file unless
    `replace` (the demo's own): FileExistsError if `path` exists, which is left as it is (an SRE's manifest: its
    spec.query and spec.target are theirs)."""
    text = "".join(f"# {line}\n" for line in comment.splitlines()) + manifest_text(manifest(name, namespace, spec))

    def write(draft: Path) -> None:
        draft.write_text(text, encoding="utf-8")
        load_manifests(draft)  # only a manifest that reads back takes the name

    return (replace_whole if replace else create_whole)(path, write)


def plot_tradeoff(result: TuneResult, path: str | Path) -> Path:
    """Shortage vs utilization for every setting tried, the objective and the recommendation marked; a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = result.table
    fig, ax = plt.subplots(figsize=(7, 4.5))
    if not t.empty:
        group = "target_quantile" if "target_quantile" in t else "forecaster"
        groups = list(t.groupby(group))
        for i, (value, g) in enumerate(groups):
            # each group drawn smaller than the one before: settings of equal figures show as rings, none hidden
            size, color, met = 16 + 20 * (len(groups) - 1 - i), f"C{i}", g["objective_met"].astype(bool)
            ax.scatter(g["shortage_within_cluster"] * 100, g["utilization"] * 100, s=size, color=color,
                       facecolors=[color if m else "none" for m in met], label=f"{group} {value}")
        if not t["objective_met"].all():
            ax.scatter([], [], facecolors="none", edgecolors="grey", label="hollow: misses the objective")
        r = result.recommended
        # the row tune chose, by its place (settings of the same figures are not it; an unset warmBufferQuantile,
        # NaN in the table, matched no field of it)
        assert result.chosen is not None  # a sweep chooses a row
        chosen = t.iloc[[result.chosen]]
        if result.met:
            ax.scatter(chosen["shortage_within_cluster"] * 100, chosen["utilization"] * 100, s=200, facecolors="none",
                       edgecolors="k", label=f"recommended (buffer {r.warm_buffer:g}, margin {r.margin_gpus})")
        else:  # none meets the objective: the closest is what tune writes, marked as such
            ax.scatter(chosen["shortage_within_cluster"] * 100, chosen["utilization"] * 100, s=200,
                       facecolors="none", edgecolors="k", linestyles="--",
                       label=f"closest, missing the objective (buffer {r.warm_buffer:g}, margin {r.margin_gpus})")
    else:  # an empty chart said nothing: say why nothing was swept
        ax.text(0.5, 0.5, textwrap.fill(f"nothing swept: {result.reason}", 70), transform=ax.transAxes,
                ha="center", va="center", fontsize=8)
    ax.axvline(result.recommended.objective.max_shortage * 100, color="grey", linestyle="--",
               label="shortage objective")
    ax.set_xlabel("shortage within the cluster (% of demand GPU-time)")
    ax.set_ylabel("utilization (%)")
    ax.set_title("headroom tune: utilization vs shortage on the history")
    ax.legend(fontsize=7)
    fig.tight_layout()
    replace_whole(path, lambda draft: fig.savefig(draft, dpi=120))
    plt.close(fig)
    return Path(path)
