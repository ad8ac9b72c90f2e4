"""`headroom report`: one self-contained HTML page (plots embedded as PNG data URIs, and the
PNGs written beside it) that tells a new user what the simulated cluster did.

The rendering functions take values (a TimedResult, a TuneResult, a comparison table), so
`headroom demo` reuses them; only `cmd_report` reads configuration and files.
"""
from __future__ import annotations

import base64
import html
import textwrap
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from controller.simulate import REFERENCES, Scenario, SimResult, TimedResult, simulate
from controller.tune import TuneResult, plot_tradeoff
from core.files import replace_whole
from core.policy import PolicySpec
from core.units import UTC
from forecast.base import Forecaster

# The files render_report writes into its folder (a re-run replaces them)
PAGE, DEMAND_PNG, USAGE_PNG, PREEMPTIONS_PNG, TRADEOFF_PNG = REPORT_FILES = (
    "index.html", "demand.png", "gpus_by_use.png", "preemptions.png", "tradeoff.png")

# How a page render_report writes begins (its title "headroom report", or the demo's "headroom demo"): `report --out`
# replaces such a page, never another index.html (cli.outputs)
PAGE_HEAD = '<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>headroom '

# What the comparison table shows, with the header a reader sees and how to format it.
COLUMNS = {
    "utilization": ("utilization", "{:.1%}"),
    "shortage_within_cluster": ("shortage", "{:.3%}"),
    "short_steps": ("short steps", "{:.2%}"),
    "objective_met": ("objective met", "{}"),
    "longest_shortage_minutes": ("longest shortage (min)", "{:.0f}"),
    "training_goodput": ("training goodput", "{:.1%}"),
    "cost_vs_dedicated": ("cost vs dedicated", "{:.3f}"),
    "mean_reserved_gpus": ("mean inference GPUs", "{:.1f}"),
    "mean_warm_buffer_gpus": ("mean warm buffer GPUs", "{:.1f}"),
    "training_gpu_hours": ("training GPU-hours", "{:,.0f}"),
    "preemptions": ("preemptions", "{:d}"),
    "headroom_violations": ("headroom violations", "{:d}"),
}

POLICY_NOTES = {
    "forecast": "headroom: forecast quantile reserved ahead of demand plus a warm buffer",
    "static": "the lookback's peak all the time, plus a margin",
    "reactive": "the last hour's peak, an hour late, plus a margin",
    "seasonal-naive": "the same hour last week, plus a margin",
    "oracle": "knows every step's demand: the physical limit",
    "hourly-oracle": "knows each hour's demand: the least constant level per hour meeting the objective",
}


@dataclass(frozen=True)
class Figure:
    title: str
    caption: str  # one sentence: what to look for
    path: Path


def compare_policies(scenario: Scenario, specs: Mapping[str, PolicySpec], timeline_policy: str = "forecast",
                     progress: Callable[[str], None] | None = None,
                     make_forecaster: Callable[[], Forecaster] | None = None) -> dict[str, SimResult]:
    """Each policy of `specs` (name -> the spec it runs) on the same scenario; `timeline_policy` also records its
    timeline for the plots. `make_forecaster`: what `forecaster: auto` serves (the one it was tuned with)."""
    if timeline_policy not in specs:
        raise ValueError(f"unknown policy {timeline_policy!r}; one of {', '.join(specs)}")
    out = {}
    for policy, spec in specs.items():
        started = time.perf_counter()
        timed = policy == timeline_policy
        out[policy] = simulate(scenario, spec, make_forecaster, reference=policy, timeline=timed, detail=timed)
        if progress:
            progress(f"simulated {policy} in {time.perf_counter() - started:.1f} s")
    return out


def comparison_table(results: Mapping[str, SimResult]) -> pd.DataFrame:
    """One row per policy (index), the columns of COLUMNS."""
    return pd.DataFrame([{c: getattr(r, c) for c in COLUMNS} for r in results.values()],
                        index=pd.Index(list(results), name="policy"))


def _formatted(table: pd.DataFrame) -> pd.DataFrame:
    """The table as display strings under the readers' headers."""
    return pd.DataFrame({COLUMNS[c][0]: table[c].map(COLUMNS[c][1].format) for c in table.columns}, index=table.index)


def format_table(table: pd.DataFrame) -> str:
    """The comparison table as aligned text for a terminal."""
    return _formatted(table).to_string()


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> Path:
    fig.autofmt_xdate()
    fig.tight_layout()
    replace_whole(path, lambda draft: fig.savefig(draft, dpi=100))
    _pyplot().close(fig)
    return path


def _timed(result: SimResult) -> tuple[TimedResult, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The result with its timeline, per-step detail and preemption events (simulated with timeline and detail)."""
    if not isinstance(result, TimedResult) or result.timeline is None or result.detail is None \
            or result.events is None:
        raise ValueError(f"the {result.reference} result has no timeline: simulate it with timeline=True, detail=True")
    return result, result.timeline, result.detail, result.events


def timeline_of(result: SimResult) -> pd.DataFrame:
    """The steps of a result simulated with its timeline (TIMELINE_COLUMNS), as `simulate --timeline` writes them."""
    return _timed(result)[1]


def above_cluster_note(result: SimResult, gpus: int) -> str:
    """What a cluster smaller than the demand leaves out of the table ('' when demand fits it)."""
    if result.shortage_over_capacity <= 0:
        return ""
    return (f"{result.shortage_over_capacity:.2%} of inference demand GPU-time is above the {gpus}-GPU cluster, "
            "which no policy can serve: shortage within the cluster, short steps and the objective count only the "
            "demand the cluster can hold (inference_shortage counts it)")


def missing_steps(scenario: Scenario) -> pd.DatetimeIndex:
    """The simulated steps the trace has no sample for (the simulator takes the last sample seen for them)."""
    evaluated = scenario.demand.reindex(scenario.evaluated)
    return pd.DatetimeIndex(evaluated.index[evaluated.isna()])


def missing_note(missing: pd.DatetimeIndex | None) -> str:
    """What the trace's gaps in the simulated days are taken as ('' without any)."""
    if missing is None or not len(missing):
        return ""
    return f"no data in the trace for {len(missing)} steps: demand taken as the last sample seen"


def fallback_note(result: SimResult) -> str:
    """In how many hours the plan fell back, not planning from its forecast or level ('' in none)."""
    if not result.forecast_fallback_hours:
        return ""
    return (f"the {result.reference} policy's plan fell back in {result.forecast_fallback_hours} simulated hours (too "
            "little or stale history): there it reserved the planner's conservative fallback, not its own plan")


def notes(result: SimResult, gpus: int, missing: pd.DatetimeIndex | None) -> list[str]:
    """What a result's figures leave out: demand above the cluster, and the steps the trace has no sample for."""
    return [n for n in (above_cluster_note(result, gpus), missing_note(missing)) if n]


def page_notes(result: SimResult, gpus: int, missing: pd.DatetimeIndex | None) -> list[str]:
    """What the report's page says under its headline: `notes`, and the hours the plotted plan fell back (which its
    demand plot shades; simulate's and tune's figures say them already)."""
    return [*notes(result, gpus, missing), *filter(None, [fallback_note(result)])]


def _step(index: pd.DatetimeIndex) -> pd.Timedelta:
    """The step of a timeline's rows (the replay's evenly spaced steps; a replay has two at least)."""
    return index[1] - index[0]


def _through_last_step(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with its last row again one step later: a step line drawn from each row's time to the next
    (where='post') draws a row only up to the next row's time, so the last row needs one."""
    last = frame.iloc[[-1]]
    return pd.concat([frame, last.set_axis(last.index + _step(frame.index))])


def _span(ax, index: pd.DatetimeIndex) -> None:
    """The time axis of a run's plot: its steps, each whole, from the first row's time to one step past the last row's
    (a row's plan and the GPUs it held last until the next row's time). The same on every plot of one run, so one
    moment lies at one place on each; matplotlib's own limits followed what each plot drew, a step short on some."""
    ax.set_xlim(index[0], index[-1] + _step(index))


def _shade(ax, starts: pd.DatetimeIndex, step: pd.Timedelta, **style) -> None:
    """Shade the steps beginning at `starts`, each over its whole step, as one legend entry (fill_between's `where`
    drew each run of steps one step short, so a step alone not at all)."""
    if not len(starts):
        return
    breaks = [0, *(i for i in range(1, len(starts)) if starts[i] - starts[i - 1] != step), len(starts)]
    for n, (a, b) in enumerate(zip(breaks, breaks[1:])):
        ax.axvspan(starts[a], starts[b - 1] + step, lw=0, **(style if n == 0 else {**style, "label": "_nolegend_"}))


def _shade_missing(ax, index: pd.DatetimeIndex, missing: pd.DatetimeIndex | None, **style) -> None:
    """Shade the intervals whose demand the trace has no sample for (a row's demand is the interval ending at its
    time), said in the legend: the demand drawn there is the last sample seen."""
    if missing_note(missing):
        assert missing is not None
        step = _step(index)
        _shade(ax, index[index.isin(missing)] - step, step, label=missing_note(missing), **style)


# Lines that may lie on one another (at --gpus 1 the reservation, the warm GPUs and the demand the cluster holds are
# all the cluster's size): the wider drawn under the narrower, so each shows around the one on top of it.
CAPACITY_LINE = {"color": "red", "lw": 4.0, "alpha": 0.4, "linestyle": "--", "zorder": 2.0}
RESERVED_LINE = {"color": "tab:blue", "lw": 2.4, "zorder": 2.1}
WARM_LINE = {"color": "tab:green", "lw": 1.3, "zorder": 2.2}
DEMAND_LINE = {"color": "black", "lw": 0.6, "zorder": 2.3}
# A cluster under this share of the demand plot's height gets a second panel of its own range: beside demand of 100
# GPUs, a 1-GPU cluster's reservation was a line along the foot of the axis
ZOOM_BELOW = 0.25


def _from_zero(ax) -> None:
    """GPUs from 0, at least 1 high: an all-zero demand had an axis from -0.04 to 0.04 GPUs, its lines along the
    middle."""
    ax.set_ylim(0, max(ax.get_ylim()[1], 1))


def _time_axis(result: SimResult) -> str:
    """The plots' time axis label: matplotlib draws every timestamp in UTC, while a policy on another clock
    (spec.timezone) plans its hours of day on that one, which the hourly band and the business hours follow."""
    zone = result.policy.get("timezone", UTC)
    return "time (UTC)" if zone == UTC else f"time (UTC; the policy's hours of day are on {zone}'s clock)"


def plot_demand(result: SimResult, path: Path, gpus: int | None = None,
                missing: pd.DatetimeIndex | None = None) -> Figure:
    """Demand vs the forecast band vs the reservation, shortages marked (and the cluster's size, when `gpus` is
    given and demand goes above it; the steps of `missing`, shaded, where the trace has no sample). Each row's plan
    is drawn over its step, from its time to the next; its demand over the interval ending at its time."""
    plt = _pyplot()
    r, timeline, d, _ = _timed(result)
    s = timeline.set_index("timestamp")
    step = _step(s.index)
    spec = r.policy
    top = pd.concat([s["demand_gpus"], d["high_gpus"], s["reserved_gpus"]]).max()
    zoom = gpus is not None and gpus < ZOOM_BELOW * top
    fig, axes = plt.subplots(2 if zoom else 1, 1, sharex=True, squeeze=False, figsize=(11, 7.4 if zoom else 4.2),
                             height_ratios=[1.4, 1] if zoom else None)
    ax = axes[0, 0]
    # only the forecast policy has forecast quantiles: a baseline's or a reference's is the level it plans for
    forecast = r.reference == "forecast"
    statistic = spec.get("statistic", PolicySpec.model_fields["statistic"].default)
    band = f"forecast of each hour's {statistic}, q{spec['targetQuantile']:g} to q{spec['headroomQuantile']:g}" \
        if forecast else \
        f"what {r.reference} plans for ({POLICY_NOTES.get(r.reference, 'its own rule')})"
    plan = _through_last_step(pd.concat([d[["target_gpus", "high_gpus"]], s[["reserved_gpus", "warm_gpus"]]], axis=1))
    no_band = d["target_gpus"].isna()
    # the steps the simulator counted short (the table's "short steps"), marked at the demand observed then
    short = s[d["unmet_gpus"].reindex(s.index, fill_value=0.0) > 1e-9]  # as the simulator counts a short step
    accounted = len(s) - 1  # the first row's interval ends as the replay starts: no figure counts it (README)
    for panel, held in ((ax, None), *(((axes[1, 0], gpus),) if zoom else ())):
        if plan["target_gpus"].notna().any():
            panel.fill_between(plan.index, plan["target_gpus"], plan["high_gpus"], step="post", color="tab:blue",
                               alpha=0.18, label=band)
        # a missing band is said, not left blank: the plan there is the planner's fallback
        _shade(panel, d.index[no_band], step, color="tab:orange", alpha=0.12,
               label=f"no {'forecast' if forecast else 'planned level'} for {no_band.sum()} of {len(d)} steps: the "
                     "planner's fallback")
        demand = s["demand_gpus"] if held is None else s["demand_gpus"].clip(upper=held)
        panel.plot(s.index, demand, drawstyle="steps-pre", **DEMAND_LINE,
                   label="demand" if held is None else f"demand, up to the {held}-GPU cluster")
        panel.step(plan.index, plan["reserved_gpus"], where="post", **RESERVED_LINE, label=f"{r.reference} reservation")
        panel.step(plan.index, plan["warm_gpus"], where="post", alpha=0.8, **WARM_LINE, label="warm, serving GPUs")
        panel.scatter(short.index, demand[short.index], color="red", s=10, zorder=3,
                      label=f"unmet demand within the cluster ({len(short)} of {accounted} steps)")
        _shade_missing(panel, s.index, missing, color="grey", alpha=0.25)
        panel.set_ylabel("GPUs")
    # the cluster's size, when demand or the band goes above it: nothing above it can be reserved
    if gpus is not None and (s["demand_gpus"] > gpus + 1e-9).any():
        ax.axhline(gpus, **CAPACITY_LINE,
                   label=f"capacity {gpus} GPUs: demand above it cannot be served ({r.shortage_over_capacity:.1%})")
    elif gpus is not None and (d["high_gpus"] > gpus + 1e-9).any():
        ax.axhline(gpus, **CAPACITY_LINE, label=f"capacity {gpus} GPUs: no reservation goes above it")
    _from_zero(ax)
    _span(ax, s.index)
    if not (s["demand_gpus"] > 0).any():  # lines along the foot of the axis: say that is all there is
        ax.text(0.5, 0.5, "no inference demand in the simulated days: the trace is 0 throughout", ha="center",
                va="center", transform=ax.transAxes, bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8})
    if zoom:
        assert gpus is not None
        below = axes[1, 0]
        below.axhline(gpus, **CAPACITY_LINE)
        below.set_ylim(0, gpus * 1.3)
        below.set_title(f"The same within the {gpus}-GPU cluster: demand drawn up to its size", fontsize=10)
    axes[-1, 0].set_xlabel(_time_axis(r))
    kind = "reference: knows the future, not deployable" if r.reference in REFERENCES else "policy"
    ax.set_title(f"Inference demand, {'forecast band' if forecast else 'planned level'} and reservation "
                 f"({r.reference} {kind})")
    # beside the axes, each label wrapped: over the data it hid some, and a wide one ran off the figure
    handles, labels = ax.get_legend_handles_labels()
    ax.legend(handles, [textwrap.fill(label, 48) for label in labels], loc="upper left", bbox_to_anchor=(1.01, 1),
              fontsize=8)
    caption = ("Black is demand in GPUs; the blue line is what the policy reserved ahead of it and green what was warm "
               "and serving when the step began. The shaded band is what the plan was made from: the forecast of each "
               "hour's demand (its hourly statistic, as the legend says) from the target to the headroom quantile, or "
               "for a baseline or a reference the level it plans for. Demand should stay below its top; a step's "
               "demand under an hourly peak's forecast runs below the band most of the time. Red dots are the steps "
               "where part of it went unserved (the table's short steps).")
    if zoom:
        caption += (f" The lower panel is the {gpus}-GPU cluster's own range, where the reservation would be a line "
                    "along the foot of the upper one.")
    return Figure("Demand, forecast and reservation", caption, _save(fig, path))


# Over the colours of a stack, steps without a sample are hatched, not filled grey (idle is grey there)
HATCHED = {"fill": False, "hatch": "///", "edgecolor": "0.25", "alpha": 0.6}


def plot_usage(result: SimResult, gpus: int, path: Path, missing: pd.DatetimeIndex | None = None) -> Figure:
    """GPUs by use over time as a stacked area (the steps of `missing`, hatched, where the trace has no sample)."""
    plt = _pyplot()
    _, timeline, d, _ = _timed(result)
    fig, ax = plt.subplots(figsize=(11, 4.2))
    held = _through_last_step(d[["inference_gpus", "training_gpus", "idle_gpus"]])  # the last row's too
    ax.stackplot(held.index, held["inference_gpus"], held["training_gpus"], held["idle_gpus"].clip(lower=0),
                 labels=["inference held (serving, warm buffer, warming)", "training (lent slack)", "idle"],
                 colors=["tab:blue", "tab:orange", "lightgrey"], step="post")
    # utilization counts the demand served, not the GPUs held for it: the line shows the difference (a row's demand
    # is the interval ending at it, so drawn over the interval before, as the stack's previous row holds it)
    served = timeline.set_index("timestamp")["demand_gpus"].clip(upper=gpus) - d["unmet_gpus"]
    ax.plot(d.index, served, drawstyle="steps-pre", **DEMAND_LINE, label="inference demand served")
    ax.axhline(gpus, **CAPACITY_LINE, label=f"capacity {gpus} GPUs")
    _shade_missing(ax, d.index, missing, **HATCHED)  # utilization counts the last sample seen there as demand
    ax.set_ylim(0, gpus * 1.32)  # room above the cluster for the legend's two rows: it hides none of the stack
    _span(ax, d.index)
    ax.set_xlabel(_time_axis(result))
    ax.set_ylabel("GPUs")
    ax.set_title(f"GPUs by use ({result.reference} policy): utilization {result.utilization:.1%}, demand served and "
                 "training over capacity")
    handles, labels = ax.get_legend_handles_labels()
    ax.legend(handles, [textwrap.fill(label, 48) for label in labels], loc="upper left", fontsize=8, ncol=3)
    caption = ("Every GPU is held for inference (blue: serving, the warm buffer, replicas warming up), running "
               "training on lent slack (orange), or idle (grey). The black line is the inference demand served: blue "
               "above it is held ready but unused, and utilization counts only what is under it plus orange. Orange "
               "filling the night-time troughs is the point of headroom.")
    if missing_note(missing):
        caption += (" Hatched steps have no sample in the trace: the demand served there is the last sample seen, as "
                    "utilization counts it.")
    return Figure("GPUs by use", caption, _save(fig, path))


def plot_preemptions(result: SimResult, path: Path, missing: pd.DatetimeIndex | None = None) -> Figure:
    """Preemptions per hour by kind, over demand (the steps of `missing`, hatched, where the trace has no sample)."""
    plt = _pyplot()
    r, timeline, _, ev = _timed(result)
    s = timeline.set_index("timestamp")
    fig, ax = plt.subplots(figsize=(11, 3.6))
    hours = pd.date_range(s.index[0].floor("h"), s.index[-1].floor("h"), freq="h")
    bottom = pd.Series(0.0, index=hours)
    width = pd.Timedelta(minutes=50)
    for kind, color in (("planned", "tab:green"), ("emergency", "tab:red")):
        mine = ev[ev["kind"] == kind]
        per_hour = mine.groupby(pd.DatetimeIndex(mine["time"]).floor("h"))["gpus"].sum().reindex(hours, fill_value=0)
        ax.bar(hours, per_hour, width=width, bottom=bottom, align="edge", color=color,
               label=f"{kind}: {len(mine)} jobs, {int(per_hour.sum())} GPUs")
        bottom += per_hour
    _shade_missing(ax, s.index, missing, **HATCHED)
    # from 0 (an axis without bars ran negative), with room above the bars for the legend, a row per entry (the two
    # kinds, and the steps without data): it hides none of them
    ax.set_ylim(0, max(bottom.max(), 1) * (1 + 0.15 * len(ax.get_legend_handles_labels()[1])))
    if ev.empty:  # an empty chart said nothing: say there was nothing to draw
        ax.text(0.5, 0.5, f"no training job was preempted under the {r.reference} policy", transform=ax.transAxes,
                ha="center", va="center", bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8})
    _span(ax, s.index)  # bars start on the hour: the part of the first one before the run is cut
    ax.set_xlabel(_time_axis(r))
    ax.set_ylabel("GPUs preempted per hour")
    demand = ax.twinx()
    demand.plot(s.index, s["demand_gpus"], drawstyle="steps-pre", color="black", lw=0.6, alpha=0.5)
    demand.set_ylabel("demand (GPUs, black line)")
    _from_zero(demand)
    reclaim = f"reclaim p99 {r.reclaim_p99_seconds:.0f} s" if not ev.empty else "no preemptions"
    ax.set_title(f"Training preemptions ({r.reference} policy; {reclaim})")
    ax.legend(loc="upper left", fontsize=8)
    caption = ("Green bars are the GPUs of training jobs stopped ahead of a forecast ramp-up (at a checkpoint "
               "where one fits); red bars are GPUs taken back at once because inference needed more than planned "
               "(demand noise or a ramp faster than forecast). Each preemption loses the work since the job's last "
               "checkpoint (none for one stopped at a checkpoint) and the GPU-time it takes to stop (the table's "
               "training goodput counts both). Green should line up with the ramps of the black demand line.")
    if missing_note(missing):
        caption += " Hatched steps have no sample in the trace: the demand line there is the last sample seen."
    return Figure("Preemptions on the timeline", caption, _save(fig, path))


def plot_tune(result: TuneResult, path: Path) -> Figure:
    plot_tradeoff(result, path)
    # what the plot shows: no dot when nothing was swept, the closest dashed when no setting met the objective
    if result.table.empty:
        caption = f"Nothing was swept, so there is no setting to show: {result.reason}."
    else:
        caption = ("Each dot is one setting of the forecast policy (whichever policy the plots above follow) tried on "
                   "the history (target quantile, warm buffer, ...): right is more shortage, up is more utilization; "
                   "hollow ones miss the objective (shortage or short steps), and settings of equal figures are rings "
                   "one around the other. " + (f"The circled one is recommended: {result.reason}." if result.met else
                                               "No setting meets the objective: the dashed circle is the closest, "
                                               f"which the forecast policy ran with: {result.reason}."))
    return Figure("Tuning trade-off of the forecast policy", caption, path)


def _data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def _html_table(table: pd.DataFrame) -> str:
    shown = _formatted(table)
    head = "".join(f"<th>{html.escape(c)}</th>" for c in shown.columns)
    rows = []
    for policy, row in shown.iterrows():
        cells = "".join(f"<td>{html.escape(v)}</td>" for v in row)
        note = html.escape(POLICY_NOTES.get(policy, ""))
        rows.append(f'<tr><th title="{note}">{html.escape(str(policy))}<br><small>{note}</small></th>{cells}</tr>')
    return f"<table><thead><tr><th>policy</th>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


# Marks the page so a headless browser (tests/test_report.py) can see that it loaded and every plot decoded.
_SELF_CHECK = """<script>
window.onerror = function (msg) { document.body.dataset.errors = (document.body.dataset.errors || "") + msg + ";"; };
window.addEventListener("load", function () {
  var imgs = Array.prototype.slice.call(document.images);
  document.body.dataset.images = imgs.length;
  document.body.dataset.imagesOk = imgs.filter(function (i) { return i.complete && i.naturalWidth > 0; }).length;
});
</script>"""

_STYLE = """body{font-family:system-ui,sans-serif;max-width:1150px;margin:2em auto;padding:0 1em;color:#222}
figure{margin:2em 0}img{max-width:100%}figcaption{color:#444}table{border-collapse:collapse;font-size:.9em}
th,td{border:1px solid #ccc;padding:.3em .6em;text-align:right}thead th,tbody th{text-align:left}
small{color:#666;font-weight:normal}
dl{display:grid;grid-template-columns:max-content auto;gap:.2em 1em}dt{color:#666}"""


def render_report(out_dir: Path, results: Mapping[str, SimResult], timeline_policy: str,
                  gpus: int, facts: Mapping[str, str], tuned: TuneResult | None = None,
                  what: str = "report", missing: pd.DatetimeIndex | None = None) -> Path:
    """Write the PNGs and index.html (titled "headroom `what`") into `out_dir`; returns the HTML path. `tuned`: the
    forecast policy's tuning; `missing`: the simulated steps the trace has no sample for (missing_steps), shown and
    said."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    timed = results[timeline_policy]
    figures = [plot_demand(timed, out_dir / DEMAND_PNG, gpus, missing),
               plot_usage(timed, gpus, out_dir / USAGE_PNG, missing),
               plot_preemptions(timed, out_dir / PREEMPTIONS_PNG, missing)]
    if tuned is not None:
        figures.append(plot_tune(tuned, out_dir / TRADEOFF_PNG))
    table = comparison_table(results)
    f, best = results.get("forecast"), results.get("hourly-oracle")
    headline = ""
    if f is not None and best is not None:
        verdict = "met" if f.objective_met else "missed"
        headline = (f"<p><b>In one line:</b> the forecast policy kept {f.utilization:.1%} of the GPUs busy "
                    f"(the hourly oracle, knowing each hour in advance, {best.utilization:.1%}), left "
                    f"{f.shortage_within_cluster:.3%} of inference demand unmet in {f.short_steps:.2%} of steps "
                    f"(objective {verdict}), lent {f.training_gpu_hours:,.0f} GPU-hours to training at "
                    f"{f.training_goodput:.1%} goodput, and broke the headroom guarantee {f.headroom_violations} "
                    f"time(s).</p>")
    tuning = ("every policy's free parameters were tuned on the history before the simulated days, to the same "
              "objective" if tuned is not None else "every policy ran with the fields it was given, nothing tuned")
    for note in page_notes(timed, gpus, missing):
        headline += f"<p><b>Note:</b> {html.escape(note)}.</p>"
    reference = "" if timeline_policy not in REFERENCES else (
        f" It is a reference, not a policy anyone can deploy: it {html.escape(POLICY_NOTES[timeline_policy])}, so "
        "what it does is a bound on what a deployable policy can do.")
    facts_html = "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>" for k, v in facts.items())
    figs_html = "".join(
        f'<figure><h2>{html.escape(fig.title)}</h2><img src="{_data_uri(fig.path)}" alt="{html.escape(fig.title)}">'
        f'<figcaption>{html.escape(fig.caption)} <a href="{fig.path.name}">PNG</a></figcaption></figure>'
        for fig in figures)
    title = f"headroom {what}"
    page = f"""{PAGE_HEAD}{html.escape(what)}</title><style>{_STYLE}</style>
{_SELF_CHECK}</head>
<body><h1>{html.escape(title)}</h1>
<p>headroom reserves GPUs for inference ahead of forecast demand and lends the rest to a training queue, keeping
enough fast-preemptible training to take GPUs back within the reclaim deadline. This page replays a demand trace on
a simulated cluster under headroom's forecast policy, three baselines and two references that know the future;
{tuning}.</p>
{headline}<dl>{facts_html}</dl>
<h2>Policies compared</h2>
<p>Utilization is (inference served + training allocated) GPU-time over capacity; shortage is unmet demand within
the cluster over demand, short steps the share of steps with any; goodput is useful training over allocated (work
lost to preemption excluded: since the job's last checkpoint, and its time stopping); cost vs dedicated is the
shared cluster's GPUs over what two dedicated clusters need for the same work (inference at the days' peak, up to
the cluster's GPUs, plus the training GPU-hours delivered per hour): below 1 the shared cluster is cheaper. Higher
utilization at near-zero shortage is better; a policy that misses the objective is not comparable on utilization.</p>
{_html_table(table)}
<h2>What the {html.escape(timeline_policy)} policy did</h2>
<p>The plots below follow the {html.escape(timeline_policy)} policy step by step over the simulated days.{reference}</p>
{figs_html}
</body></html>
"""
    return replace_whole(out_dir / PAGE, lambda draft: draft.write_text(page, encoding="utf-8"))


