"""`headroom demo`: the whole product on embedded defaults, no servers.

history (forecast.synthetic) -> training tracked in MLflow (sqlite) -> the champion -> the policy tuned on
the history for the default objective, written as a ReservationPolicy manifest -> what the controller
would do now with it (the embedded cluster, nothing changed) -> the last days simulated under that policy,
the tuned baselines and the references -> the report.
"""
from __future__ import annotations

import copy
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

NAMESPACE, NAME = "default", "inference"  # the policy it writes, runs and plans
SERIES = f"{NAMESPACE}.{NAME}"  # the series the controller serves that policy the champion of (namespace.name)
HISTORY, STORE, POLICY, REPORT, MARKER = "demand_5min.csv", "mlflow.db", "policy.yaml", "report", ".headroom-demo"
# what the demo writes into --out: its own files, and what the MLflow adapter keeps beside its sqlite store
WRITES = (HISTORY, STORE, POLICY, REPORT, "mlartifacts", ".headroom-locks", MARKER)
POLICY_COMMENT = "headroom demo:"  # how the policy the demo writes begins (# and this): a re-run replaces only that
# the marker's text, written before any other file: a folder holding it is the demo's, also one a demo cut off midway
# left (a history or store begins as anyone's does)
MARKER_TEXT = "headroom demo: this folder is the demo's own; the next `headroom demo --out` here replaces its files\n"


# what the demo makes itself (its history, its training, the days it simulates, the policies it compares), so a
# configuration's keys for them are not read: said on stderr, not dropped without a word
NOT_READ = {"history": ("file", "prometheus", "statistic", "counter"), "forecast": ("horizon", "quantiles", "timezone"),
            "backtest": ("horizon", "folds", "step"), "simulate": ("policy", "policy_file", "days", "jobs"),
            "training": ("tracking_uri", "name", "series", "candidates", "objective", "target_quantile",
                         "promotion_margin", "lock_ttl_seconds", "drift_factor", "drift_window"),
            "run": ("capacity_gpus", "namespace", "policies")}


def unread_keys(cfg) -> list[str]:
    """The keys of NOT_READ the configuration sets."""
    return [f"{section}.{key}" for section, keys in NOT_READ.items() for key in keys
            if key in getattr(cfg, section).model_fields_set]


@dataclass(frozen=True)
class DemoSize:
    history_days: int
    simulated_days: float
    folds: int


FULL = DemoSize(history_days=42, simulated_days=7, folds=4)
QUICK = DemoSize(history_days=15, simulated_days=2, folds=2)


def run_demo(out: Path, quick: bool, cfg, say) -> dict:
    """Every stage in order; returns where things went and what came out."""
    from adapters.mlflow import Tracker
    from cli.config import load_config
    from cli.run import describe, embedded
    from cli.simulate import WhatIf, controller_settings, every_policy
    from cli.sources import load_series
    from controller.forecasts import Models
    from controller.reconcile import Reconciler
    from controller.simulate import Scenario, default_spec, demand_per_gpu
    from controller.tune import write_policy
    from core.files import replace_whole
    from core.settings import EmbeddedPolicy
    from dashboards.report import compare_policies, comparison_table, format_table, render_report
    from forecast.history import FileSource, at_own_step
    from forecast.synthetic import synthetic_demand, write_csv
    from training.pipeline import TrainSettings, train_series

    size = QUICK if quick else FULL
    c = cfg.simulate
    replace_whole(out / MARKER, lambda draft: draft.write_text(MARKER_TEXT, encoding="utf-8"))  # before any other

    say(f"history: {size.history_days} days of 5-minute demand from forecast.synthetic (daily and weekly cycles, "
        "noise, bursts, a scrape gap)")
    history_file = out / HISTORY
    demand = synthetic_demand(days=size.history_days)
    replace_whole(history_file, lambda draft: write_csv(demand, draft))
    native = at_own_step(FileSource(history_file).fetch())
    scenario = Scenario(native, c.gpus, size.simulated_days, None, c.world, **controller_settings(cfg))
    spec = default_spec(scenario, demand_per_gpu(native, None if c.per_gpu else c.peak_gpus, c.per_gpu))
    # the forecaster sees the hourly peak of the history before the simulated days, as the controller would
    # as read: the training clips the hours each fit has by their own bound, never by one that saw the simulated days
    load_cfg = load_config(None, {"history.file": str(history_file), "history.statistic": spec.statistic,
                                  "history.outlier_factor": None})
    end = scenario.evaluated[0]
    hourly, cleaning = load_series(load_cfg, end.to_pydatetime(), say=False)
    hourly = hourly[hourly.index < end.floor("h")]
    say(f"cleaned: {'; '.join(cleaning.lines())}")

    uri = f"sqlite:///{out / STORE}"
    say(f"training: backtest of candidates, tracked in MLflow at {uri}")
    trained = train_series(SERIES, hourly, TrainSettings(folds=size.folds, statistic=spec.statistic,
                                                         quantiles=(0.1, 0.5, 0.9, 0.99),
                                                         outlier_factor=cfg.history.outlier_factor), Tracker(uri),
                           end.to_pydatetime())
    say(f"trained: {trained.selected} {trained.objective}={trained.score:.3f} {trained.outcome}")
    champion, model_name, refused = Models(uri).for_series(SERIES)
    say(f"forecast: {model_name} of headroom-{SERIES}, refitted every hour on past data only"
        + (f" ({refused})" if refused else ""))

    def forecaster():
        return copy.deepcopy(champion)

    say("tuning the policy on the history for the default objective (and each baseline's margin)")
    specs, tuned = every_policy(cfg, WhatIf(scenario, spec, False), progress=say, make_forecaster=forecaster)
    policy = specs["forecast"]
    verdict = "recommended" if tuned.met else "closest (does not meet the objective)"
    say(f"{verdict}: targetQuantile {policy.target_quantile:g}, warmBuffer {policy.warm_buffer:g}: {tuned.reason}")
    policy_file = write_policy(policy, out / POLICY, NAME, NAMESPACE,
                               f"{POLICY_COMMENT} {tuned.reason}", replace=True)  # an earlier demo's, if any

    now = scenario.evaluated[0]
    r = cfg.run.model_copy(update={"capacity_gpus": c.gpus, "namespace": None, "policies": [
        EmbeddedPolicy(name=NAME, namespace=NAMESPACE, history_file=history_file, spec=policy)]})
    # its history is the gauge it wrote, whatever history.counter says of the configuration's own
    gauge = cfg.model_copy(update={"history": cfg.history.model_copy(update={"counter": None})})
    cluster, demand = embedded(gauge, r, now)
    state = Reconciler(cluster, demand, r, models=Models(uri), dry_run=True,
                       outlier_factor=cfg.history.outlier_factor).reconcile(now)
    ps = state.policies[f"{NAMESPACE}/{NAME}"]
    hours, step = ps.hours, ps.step
    if hours is None or step is None:  # an invalid policy or a failed reconcile plans nothing
        from core.errors import HeadroomError

        raise HeadroomError(f"demo: no plan for {ps.name}: {ps.error or 'the reconcile failed'}")
    say(f"plan at {now:%Y-%m-%d %H:%M} UTC on the embedded {c.gpus}-GPU cluster")
    print(f"plan at {now:%Y-%m-%d %H:%M} UTC ({c.gpus} GPUs), policy {policy_file}:")
    print(f"  model: {ps.model}")
    print(f"  now: {step.reason}")
    print(f"  {'hour (UTC)':<17}{'reserved':>9}{'headroom':>9}")
    for k in range(min(6, len(hours.starts))):
        hour = pd.Timestamp(hours.starts[k], unit="s", tz="UTC")
        print(f"  {hour:%Y-%m-%d %H:%M}{int(hours.reserved[k]):>9}{int(hours.headroom[k]):>9}")
    for action in state.actions:
        print(f"  would {describe(action)}")

    say(f"simulating the last {size.simulated_days:g} day(s) with a training backlog: the tuned policy, the tuned "
        "baselines and the references")
    results = compare_policies(scenario, specs, progress=say, make_forecaster=forecaster)
    table = comparison_table(results)
    print("\npolicies compared:")
    print(format_table(table))
    facts = {"demand trace": f"{history_file} (forecast.synthetic, {size.history_days} days)",
             "cluster": f"{c.gpus} GPUs; one GPU serves {spec.capacity.demand_per_gpu:.3g} requests per step",
             "simulated": f"last {size.simulated_days:g} day(s); everything before is history",
             "training": "saturated backlog",
             "forecaster": f"MLflow {model_name} of headroom-{SERIES}: {trained.selected}, refitted every hour",
             "policy": f"{policy_file}: {tuned.reason}",
             "MLflow store": uri}
    report = render_report(out / REPORT, results, "forecast", c.gpus, facts, tuned, what="demo")
    say("report written")
    return {"report": report, "tracking_uri": uri, "history": history_file, "table": table, "policy": policy_file,
            "trained": trained, "tuned": tuned}


def _left_by_a_demo_killed(name: str) -> bool:
    """A file a demo killed outright leaves in its folder beside its own: a draft of one of them (core.files), or the
    sqlite store's journal (rolled back when the store is next opened: never to be removed by hand)."""
    from core.files import is_draft_of

    return (any(is_draft_of(name, own) for own in WRITES)
            or name in (f"{STORE}-journal", f"{STORE}-wal", f"{STORE}-shm"))


def check_demo_folder(path: str, inputs) -> Path:
    """--out: a new or empty folder, or an earlier demo's (the demo replaces its own files there), also one a demo cut
    off midway left; one that holds anything else is someone's folder, where the demo's policy.yaml, history and store
    do not belong, and so is one holding a policy.yaml or report/ page the demo did not write."""
    from cli.outputs import check_output_dir, make_output_dir
    from core.errors import BadRequest
    from dashboards.report import REPORT_FILES

    check_output_dir(path, "--out", WRITES, inputs)
    folder = Path(path)
    others = sorted(p.name for p in folder.iterdir() if p.name not in WRITES) if folder.is_dir() else []
    if (folder / MARKER).is_file() and (folder / MARKER).read_bytes() == MARKER_TEXT.encode():
        others = [name for name in others if not _left_by_a_demo_killed(name)]
    if others:
        raise BadRequest(f"--out {path}: the folder holds files the demo did not write ({', '.join(others[:5])}); "
                         f"the demo writes {', '.join(WRITES[:4])} there: name a new or empty folder")
    check_output_dir(path, "--out", [POLICY, MARKER], own={POLICY: ("a demo policy", f"# {POLICY_COMMENT}".encode()),
                                                          MARKER: ("a demo marker", MARKER_TEXT.encode())})
    # a history or store cannot tell the demo's from an SRE's by how it begins: the demo's marker beside them can
    # (the demo writes it first), or its policy (written last, by demos older than the marker)
    unvouched = [name for name in (HISTORY, STORE) if (folder / name).exists()]
    if unvouched and not (folder / MARKER).exists() and not (folder / POLICY).exists():
        raise BadRequest(f"--out {path}: the folder holds {' and '.join(unvouched)} but no {POLICY} the demo wrote "
                         f"(nor its {MARKER}), so they may be your data; they are not replaced: remove them or name a "
                         "new or empty folder")
    check_output_dir(folder / REPORT, "--out", REPORT_FILES, inputs)
    return make_output_dir(path, "--out")


def cmd_demo(cfg, args) -> int:
    from cli.outputs import command_inputs, writing
    from cli.progress import stage_printer

    out = check_demo_folder(args.out, command_inputs(cfg, args))
    unread = unread_keys(cfg)
    if unread:
        print(f"headroom: note: {', '.join(unread)} of the configuration not used: the demo makes its own history, "
              "training and scenario (docs/report.md)", file=sys.stderr)
    with writing("--out", args.out):  # its history, policy, report and MLflow store
        done = run_demo(out, args.quick, cfg, stage_printer("demo"))
    print(f"\nreport:       {done['report']}\n"
          f"  open it:    xdg-open {done['report']}   (or open that path in a browser)\n"
          f"policy:       {done['policy']}\n"
          f"  run it:     MLFLOW_TRACKING_URI={done['tracking_uri']} headroom run --policy-file {done['policy']} "
          f"--history {done['history']}   (serves the champion trained here)\n"
          f"MLflow store: {done['tracking_uri']}\n"
          f"  open it:    mlflow ui --backend-store-uri {done['tracking_uri']}   (then http://127.0.0.1:5000)")
    return 0
