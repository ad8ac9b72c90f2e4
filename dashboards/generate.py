"""Grafana dashboards built from code over the metric names in controller.metrics.

`python -m dashboards.generate` rewrites dashboards/*.json (committed; tests check they
are current, type-check them against @grafana/schema and check that every metric they
query is one headroom exports). Each board takes its Prometheus data source from a
`${datasource}` variable, so it imports into any Grafana with no edits.

Two replicas export metrics and only the leader reconciles, so gauges are read from the
leader (`leader(...)`); counters need no filter: each process counts only its own work.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from controller import metrics as m
from controller.metrics import Metric

OUT = Path(__file__).resolve().parent
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
SCHEMA_VERSION = 39
WIDTH = 24  # Grafana's grid is 24 columns wide
POLICY = '{policy=~"$policy"}'
TEAM = '{team=~"$team"}'
ONE_POLICY = '{policy="$policy"}'


def leader(selector: str) -> str:
    """Only the series exported by the replica that holds the leader lease."""
    return f"({selector} and on(instance) {m.LEADER.name} == 1)"


def sel(metric: Metric, matchers: str = "") -> str:
    return metric.name + matchers


def active(selector: str) -> str:
    """Only the series of active policies: a forecast-only policy's reservation is what it would reserve, not GPUs it
    holds (its target keeps the replicas it has)."""
    return f'({selector} and on(instance, policy) {m.POLICY_INFO.name}{{mode="active"}})'


def gpus_of_demand(matchers: str = POLICY) -> str:
    """Observed demand in GPUs, per policy."""
    return f"{leader(sel(m.DEMAND, matchers))} / {sel(m.DEMAND_PER_GPU, matchers)}"


class Board:
    """Panels placed left to right, wrapping at the grid's width, with ids in order."""

    def __init__(self, uid: str, title: str, description: str, variables: list[dict]):
        self.uid, self.title, self.description, self.variables = uid, title, description, variables
        self.panels: list[dict] = []
        self._x = self._y = self._row_h = 0

    def add(self, kind: str, title: str, description: str, targets: list[tuple[str, str]], w: int, h: int,
            unit: str = "short", options: dict | None = None, custom: dict | None = None,
            units: dict[str, str] | None = None, **defaults) -> None:
        """`units`: legend -> unit of a series whose unit is not the panel's (Grafana gives it an axis of its own)."""
        if self._x + w > WIDTH:
            self._x, self._y, self._row_h = 0, self._y + self._row_h, 0
        field = {"unit": unit, **defaults}
        if custom:
            field["custom"] = custom
        self.panels.append({
            "id": len(self.panels) + 1,
            "type": kind,
            "title": title,
            "description": description,
            "datasource": DATASOURCE,
            "gridPos": {"x": self._x, "y": self._y, "w": w, "h": h},
            "targets": [{"refId": chr(ord("A") + i), "datasource": DATASOURCE, "expr": expr, "legendFormat": legend,
                         "range": True} for i, (expr, legend) in enumerate(targets)],
            "fieldConfig": {"defaults": field, "overrides": [
                {"matcher": {"id": "byName", "options": legend}, "properties": [{"id": "unit", "value": u}]}
                for legend, u in (units or {}).items()]},
            "options": options or (TIMESERIES_OPTIONS if kind == "timeseries" else STAT_OPTIONS),
        })
        self._x += w
        self._row_h = max(self._row_h, h)

    def json(self) -> dict:
        return {
            "id": None,
            "uid": self.uid,
            "title": self.title,
            "description": self.description,
            "tags": ["headroom"],
            "editable": True,
            "graphTooltip": 1,  # shared crosshair
            "schemaVersion": SCHEMA_VERSION,
            "version": 1,
            "time": {"from": "now-7d", "to": "now"},
            "refresh": "1m",
            "timezone": "browser",
            "annotations": {"list": []},
            "links": [{"title": "headroom", "type": "dashboards", "tags": ["headroom"], "asDropdown": True,
                       "icon": "external link", "includeVars": True, "keepTime": True, "targetBlank": False,
                       "tooltip": "the other headroom boards"}],
            "templating": {"list": self.variables},
            "panels": self.panels,
        }


TIMESERIES_OPTIONS: dict[str, dict[str, Any]] = {
    "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
    "tooltip": {"mode": "multi", "sort": "none"}}
STAT_OPTIONS = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                "colorMode": "value", "graphMode": "area", "justifyMode": "auto", "orientation": "auto",
                "textMode": "auto"}
BARS_OPTIONS = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                "orientation": "horizontal", "displayMode": "gradient", "showUnfilled": True}
STACKED = {"stacking": {"mode": "normal", "group": "A"}, "fillOpacity": 60, "lineWidth": 1}
BAND = {"fillOpacity": 10, "lineWidth": 1}


def datasource_variable() -> dict:
    return {"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus",
            "hide": 0, "refresh": 1, "regex": "", "options": []}


def label_variable(name: str, metric: Metric, label: str) -> dict:
    """A multi-value variable over the values `label` takes on `metric`."""
    return {"name": name, "label": name, "type": "query", "datasource": DATASOURCE,
            "query": f"label_values({metric.name}, {label})", "refresh": 2, "sort": 1,
            "includeAll": True, "multi": True, "allValue": ".*", "hide": 0, "options": []}


def cost_variable() -> dict:
    price = "2.50"
    return {"name": "gpu_hour_cost", "label": "cost of one GPU-hour", "type": "textbox", "query": price,
            "current": {"text": price, "value": price}, "options": [{"selected": True, "text": price, "value": price}],
            "hide": 0}


def overview() -> Board:
    b = Board("headroom-overview", "headroom: overview",
              "What the cluster's GPUs do: reserved for inference ahead of demand, lent to training, idle; "
              "and what lending saved against a dedicated training cluster.",
              [datasource_variable(), cost_variable()])
    capacity = f"sum({leader(m.CAPACITY.name)})"
    reserved = f"sum({leader(active(m.RESERVED.name))})"
    training = f"sum({leader(m.TRAINING.name)})"
    busy = f"(sum({gpus_of_demand('')}) + {training})"
    # training on capacity headroom lent (an active policy's queues), not in queues only forecast-only policies name
    used_gpu_hours = f"sum(increase({m.TEAM_ON_LENT_SECONDS.name}[$__range])) / 3600"
    b.add("stat", "Cluster utilization", "GPUs doing work (inference demand in GPUs + training) over capacity, now.",
          [(f"{busy} / {capacity}", "utilization")], 6, 5, unit="percentunit", min=0, max=1)
    b.add("stat", "GPUs lent to training", "The forecast slack lent to the training queues now.",
          [(f"sum({leader(m.SLACK.name)})", "slack")], 6, 5, unit="short")
    b.add("stat", "Training GPU-hours on lent capacity", "GPU-hours training ran on the inference cluster's "
          "slack over the dashboard's time range (in the training queues of active policies: headroom lends nothing "
          "to a queue only forecast-only policies name): what a dedicated training cluster would have had to run.",
          [(used_gpu_hours, "GPU-hours")], 6, 5, unit="short", decimals=0)
    b.add("stat", "Cost saved vs dedicated clusters", "Those GPU-hours at $gpu_hour_cost a GPU-hour (the variable "
          "above): the training cluster that lending made unnecessary.",
          [(f"{used_gpu_hours} * $gpu_hour_cost", "saved")], 6, 5, unit="currencyUSD", decimals=0)
    b.add("timeseries", "GPUs by use", "Inference (reserved by the active policies), training (in every training "
          "queue a policy names, a forecast-only one's too) and the rest, stacked to the cluster's capacity. The rest "
          "is idle, but for what headroom does not plan: a forecast-only policy's target, which keeps the replicas it "
          "has (its reservation is only what it would reserve).",
          [(reserved, "inference (reserved)"), (training, "training"),
           (f"{capacity} - {reserved} - {training}", "idle or not planned")], 16, 9, custom=STACKED, min=0)
    b.add("timeseries", "Cluster utilization", "Busy GPUs over capacity.",
          [(f"{busy} / {capacity}", "utilization")], 8, 9, unit="percentunit", min=0, max=1)
    b.add("timeseries", "Preemption headroom guarantee", "GPUs reclaimable within the deadline must stay at or "
          "above the headroom band, the lent GPUs that must come back in time: below it, a demand spike could not be "
          "served in time (ReclaimableBelowHeadroom). Where the headroom quantiles ask for more than the band, more "
          "than is lent (HeadroomAboveCapacity), demand up to them cannot be served whatever comes back.",
          [(f"max({leader(m.RECLAIMABLE.name)})", "reclaimable within deadline"),
           (f"max({leader(m.HEADROOM_BAND.name)})", "headroom band"),
           (f"max({leader(m.HEADROOM_WANTED.name)})", "headroom quantiles ask")], 12, 8, min=0)
    b.add("timeseries", "Headroom at risk", "1 while the HeadroomAtRisk condition is True or Unknown, by its reason: "
          "ReclaimableBelowHeadroom (too little training stops within the deadline), HeadroomAboveCapacity (the "
          "headroom quantile asks for more than is lent), CohortLends (another ClusterQueue, or a Kueue Cohort's "
          "quota up the training cohort's parent chain, lends training GPUs beside headroom: the message names each "
          "and its fix), CohortCycle (a training cohort's parentName chain loops), CohortsUnreadable (Unknown: the "
          "Cohorts and ClusterQueues could not be read, so what else lends to training is not known). 0 with reason "
          "CohortReclaims: the headroom is covered, but a ClusterQueue of a training cohort's tree of Cohorts has "
          "reclaimWithinCohort (or borrowWithinCohort) other than Never, so Kueue itself preempts training at "
          "headroom's quota cuts, uncounted in the preemption panels; the message names the queue, its cohort and "
          "the way to the training cohort. The plan summary ConfigMap has the message.",
          [(f"max by (reason) ({leader(m.HEADROOM_AT_RISK.name)})", "{{reason}}")], 24, 5, min=0, max=1)
    b.add("timeseries", "Preemptions and work lost", "Training workloads headroom preempted per hour (not "
          "Kueue's own preemptions), planned (training beyond the slack while demand is within the forecast, slow "
          "jobs out of the headroom band, or at a checkpoint before a forecast ramp) vs emergency (demand above the "
          "forecast needs the GPUs now), and GPU-hours of work lost.",
          [(f"sum by (kind) (increase({m.PREEMPTIONS.name}[1h]))", "{{kind}} preemptions / h"),
           (f"sum by (kind) (increase({m.LOST_WORK.name}[1h])) / 3600", "{{kind}} GPU-hours lost / h")], 12, 8)
    b.add("timeseries", "Saved per hour", "Training GPUs on lent capacity (in the training queues of active "
          "policies, averaged over the rate interval) times the GPU-hour cost.",
          [(f"sum(rate({m.TEAM_ON_LENT_SECONDS.name}[$__rate_interval])) * $gpu_hour_cost", "saved / h")], 24, 6,
          unit="currencyUSD", min=0)
    return b


def forecast_quality() -> Board:
    # the policies that were planned (an invalid one exports only headroom_policy_valid: its panels would be empty)
    b = Board("headroom-forecast", "headroom: forecast quality",
              "Forecast bands against what happened, realized error per horizon and interval coverage.",
              [datasource_variable(), label_variable("policy", m.POLICY_INFO, "policy")])
    band = leader(sel(m.FORECAST, '{policy="$policy", horizon="1h"}'))
    b.add("timeseries", "Forecast 1 h ahead vs actual: $policy", "Each quantile of the forecast for the current hour "
          "(made from the hours before it), the latest observed sample, and the demand the reservation serves; "
          "demand in the policy's query unit. The forecast is of the hour's statistic: for statistic: max, the hour's "
          "peak, so single samples mostly sit below its median (the coverage panel scores it). When demand goes "
          "above the reservation line it leans on preemption headroom; above the top band (the headroom quantile) it "
          "is beyond the headroom.",
          [(band, "q{{quantile}} forecast"),
           (leader(sel(m.DEMAND, ONE_POLICY)), "actual (latest sample)"),
           (f"{leader(sel(m.RESERVED, ONE_POLICY))} * {sel(m.DEMAND_PER_GPU, ONE_POLICY)}",
            "reservation serves")], 24, 10, custom=BAND, min=0,
          options={**TIMESERIES_OPTIONS, "legend": {**TIMESERIES_OPTIONS["legend"], "displayMode": "table"}})
    b.panels[-1]["repeat"], b.panels[-1]["repeatDirection"] = "policy", "v"
    naive = ("scaled by the mean absolute error of the naive forecast that repeats the same hour the day before "
             "(over the fitting window): below 1 beats it")
    b.add("timeseries", "Realized scaled error", f"Mean absolute error of the median per horizon, {naive}.",
          [(leader(sel(m.FORECAST_ERROR, POLICY)), "{{policy}} {{horizon}}"), ("vector(1)", "naive")], 12, 8, min=0)
    b.add("timeseries", "Coverage of the q0.1–q0.9 band", "Share of actuals inside the 80% band; calibrated "
          "forecasts sit near 0.8.",
          [(leader(sel(m.FORECAST_COVERAGE, POLICY)), "{{policy}} {{horizon}}"), ("vector(0.8)", "target")], 12, 8,
          unit="percentunit", min=0, max=1)
    b.add("stat", "Scaled error now", f"Latest realized error per policy and horizon, {naive}.",
          [(leader(sel(m.FORECAST_ERROR, POLICY)), "{{policy}} {{horizon}}")], 12, 5, decimals=2)
    b.add("stat", "Forecast age", "Age of the forecast each policy uses; it grows while demand data is missing. "
          "A policy on its fallback (no forecast usable) has none: see Fallback and degraded on the controller board.",
          [(leader(sel(m.FORECAST_AGE, POLICY)), "{{policy}}")], 12, 5, unit="s")
    b.add("timeseries", "Reservation utilization", "Observed demand over what the reservation serves: "
          "above 100%, demand outran the reservation.",
          [(leader(sel(m.RESERVATION_UTILIZATION, POLICY)), "{{policy}}")], 16, 7, unit="percentunit", min=0)
    b.add("table", "Mode and model", "Each policy's mode (active or forecast-only) and the model forecasting it.",
          [(leader(sel(m.POLICY_INFO, POLICY)), "")], 8, 7,
          options={"showHeader": True, "cellHeight": "sm"})
    b.panels[-1]["targets"][0].update(format="table", instant=True, range=False)
    b.panels[-1]["transformations"] = [{"id": "organize", "options": {
        "excludeByName": {"Time": True, "Value": True, "__name__": True, "instance": True, "job": True}}}]
    b.add("timeseries", "Reservation and preemption headroom", "GPUs each policy reserves now (a forecast-only one: "
          "would reserve) and the preemption headroom its headroom quantile asks above that; the cluster's band, "
          "what is lent of the active policies' headroom, is on the overview board.",
          [(leader(sel(m.RESERVED, POLICY)), "{{policy}} reserved"),
           (leader(sel(m.HEADROOM, POLICY)), "{{policy}} headroom")], 24, 7, min=0)
    return b


def teams() -> Board:
    b = Board("headroom-teams", "headroom: per team",
              "Each training team's queue: quota, GPUs used, borrowed from and lent to the cohort, preemptions.",
              [datasource_variable(), label_variable("team", m.TEAM_QUOTA, "team")])
    b.add("timeseries", "Quota and usage", "GPUs each team's admitted workloads hold, against its quota.",
          [(leader(sel(m.TEAM_QUOTA, TEAM)), "{{team}} quota"), (leader(sel(m.TEAM_USED, TEAM)), "{{team}} used")],
          12, 8, min=0)
    b.add("timeseries", "Utilization of quota", "Used over quota: above 100% the team borrows idle quota.",
          [(leader(sel(m.TEAM_UTILIZATION, TEAM)), "{{team}}")], 12, 8, unit="percentunit", min=0)
    b.add("timeseries", "Borrowed", "GPUs used beyond the quota.",
          [(leader(sel(m.TEAM_BORROWED, TEAM)), "{{team}}")], 12, 7, custom=STACKED, min=0)
    b.add("timeseries", "Lent", "Quota the team leaves to the cohort.",
          [(leader(sel(m.TEAM_LENT, TEAM)), "{{team}}")], 12, 7, custom=STACKED, min=0)
    b.add("bargauge", "GPU-hours used", "Over the dashboard's time range.",
          [(f"sum by (team) (increase({sel(m.TEAM_GPU_SECONDS, TEAM)}[$__range])) / 3600", "{{team}}")], 8, 7,
          options=BARS_OPTIONS, min=0, decimals=0)
    b.add("bargauge", "GPU-hours borrowed", "Over the dashboard's time range.",
          [(f"sum by (team) (increase({sel(m.TEAM_BORROWED_SECONDS, TEAM)}[$__range])) / 3600", "{{team}}")], 8, 7,
          options=BARS_OPTIONS, min=0, decimals=0)
    b.add("bargauge", "Workloads preempted", "By headroom (not Kueue's own preemptions), over the dashboard's "
          "time range.",
          [(f"sum by (team) (increase({sel(m.TEAM_PREEMPTIONS, TEAM)}[$__range]))", "{{team}}")], 8, 7,
          options=BARS_OPTIONS, min=0, decimals=0)
    return b


def controller_health() -> Board:
    b = Board("headroom-controller", "headroom: controller health",
              "Is the controller reconciling, how fast, with which errors, and which policies run on a fallback.",
              [datasource_variable(), label_variable("policy", m.POLICY_VALID, "policy")])
    duration = m.RECONCILE_DURATION.name
    b.add("stat", "Leader", "Replicas holding the leader lease: exactly 1 when healthy.",
          [(f"sum({m.LEADER.name})", "leaders")], 6, 5)
    # any replica's newest reconcile: with the lease held by no one, the age must keep growing, not vanish
    b.add("stat", "Since the last reconcile", "Seconds since a replica last finished a reconcile (it grows while "
          "no replica leads).",
          [(f"time() - max({m.LAST_RECONCILE.name})", "age")], 6, 5, unit="s")
    # headroom_policy_valid is 0 for each refusal, not only an invalid spec: a missing target is no spec to fix
    b.add("stat", "Policies not planned", "ReservationPolicies that take no part in the plan, their Ready condition "
          "False with the reason and the fix: InvalidSpec (a field of its spec is refused), PlanInfeasible (its "
          "minimum does not fit beside the older policies') or TargetMissing (its Deployment, HPA or ClusterQueue "
          "not found).",
          [(f"count({leader(sel(m.POLICY_VALID, POLICY))} == 0) or vector(0)", "not planned")], 6, 5)
    b.add("stat", "Policies on fallback or degraded", "Policies reserving last week's peak, or running on stale "
          "demand data.",
          [(f"sum({leader(sel(m.FALLBACK, POLICY))})", "fallback"),
           (f"sum({leader(sel(m.DEGRADED, POLICY))})", "degraded")], 6, 5)
    b.add("timeseries", "Reconcile duration", "Quantiles from the histogram, and the mean.",
          [(f"histogram_quantile(0.5, sum by (le) (rate({duration}_bucket[$__rate_interval])))", "p50"),
           (f"histogram_quantile(0.99, sum by (le) (rate({duration}_bucket[$__rate_interval])))", "p99"),
           (f"sum(rate({duration}_sum[$__rate_interval])) / sum(rate({duration}_count[$__rate_interval]))", "mean")],
          12, 8, unit="s", min=0)
    lag = m.STATUS_LAG.name
    b.add("timeseries", "Statuses written beside", "On Kubernetes the policies' statuses are written after the "
          "reconcile that decided them: how long after (p99), and how many wait. A lag that grows, or statuses that "
          "do not drain between reconciles, say the API server is not keeping up.",
          [(f"histogram_quantile(0.99, sum by (le) (rate({lag}_bucket[$__rate_interval])))", "lag p99"),
           (f"max({leader(m.STATUSES_WAITING.name)})", "waiting")], 12, 8, min=0, units={"lag p99": "s"})
    b.add("timeseries", "Reconciles and errors", "Reconciles finished and errors per stage, per minute.",
          [(f"sum(rate({m.RECONCILES.name}[$__rate_interval])) * 60", "reconciles / min"),
           (f"sum by (stage) (rate({m.RECONCILE_ERRORS.name}[$__rate_interval])) * 60", "{{stage}} errors / min")],
          12, 8, min=0)
    b.add("timeseries", "Fallback and degraded", "1 while a policy is on its conservative fallback or on stale data.",
          [(leader(sel(m.FALLBACK, POLICY)), "{{policy}} fallback"),
           (leader(sel(m.DEGRADED, POLICY)), "{{policy}} degraded")], 12, 7, min=0, max=1)
    b.add("timeseries", "Leader by replica", "Which replica held the lease over time.",
          [(m.LEADER.name, "{{instance}}")], 12, 7, min=0, max=1)
    return b


BOARDS = {"headroom-overview.json": overview, "headroom-forecast.json": forecast_quality,
          "headroom-teams.json": teams, "headroom-controller.json": controller_health}


def render(board: Board) -> str:
    return json.dumps(board.json(), indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write headroom's Grafana dashboards as JSON.")
    parser.add_argument("--out", type=Path, default=OUT, help="directory to write into (default: %(default)s)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for filename, build in BOARDS.items():
        (args.out / filename).write_text(render(build()))
        print(args.out / filename)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
