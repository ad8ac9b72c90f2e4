"""`headroom report`: a simulation of DEMAND under every policy, as one HTML page with plots."""
from __future__ import annotations

import json
from pathlib import Path

from cli.simulate import native_series, simulation
from controller.simulate import POLICIES
from controller.tune import tune
from cli.progress import stage_printer
from dashboards.report import compare_policies, comparison_table, format_table, render_report


def cmd_report(cfg, args) -> int:
    """`headroom report DEMAND [--out DIR] [--policy P] [--tune/--no-tune] [--json] ...` (simulate's options).

    --policy is the policy whose timeline is plotted; the table always compares all of them."""
    say = stage_printer("report")
    settings, kwargs = simulation(cfg)
    demand = native_series(cfg)
    say(f"simulating {cfg.history.file} under {len(POLICIES)} policies")
    results = compare_policies(demand, settings, timeline_policy=cfg.simulate.policy, progress=say, **kwargs)
    tuned = None
    if args.tune:
        t = cfg.tune
        say("tuning sweep (skip it with --no-tune)")
        tuned = tune(demand, kwargs.pop("make_forecaster"), target_quantiles=t.target_quantiles,
                     lead_times_seconds=t.lead_times_seconds, headroom_quantiles=t.headroom_quantiles,
                     shortage_objective=t.shortage_objective, base=settings, **kwargs)
    c = cfg.simulate
    facts = {"demand trace": str(cfg.history.file), "cluster": f"{c.gpus} GPUs",
             "scaling": f"{c.per_gpu} demand per GPU" if c.per_gpu else f"99.9th percentile = {c.peak_gpus:g} GPUs",
             "simulated": f"last {c.days:g} days (everything before is history)",
             "training": f"job trace {c.jobs}" if c.jobs else "saturated backlog",
             "forecast policy": f"target q{settings.target_quantile:g}, headroom q{settings.headroom_quantile:g}, "
                                f"lead {settings.lead_time_seconds:g} s, reclaim deadline "
                                f"{settings.reclaim_deadline_seconds:g} s"}
    path = render_report(Path(args.out), results, cfg.simulate.policy, settings, c.gpus, facts, tuned)
    table = comparison_table(results)
    if args.json:
        print(json.dumps({"report": str(path.resolve()), "policies": table.to_dict(orient="index")}))
        return 0
    print(format_table(table))
    print(f"report: {path.resolve()} (open it with: xdg-open {path.resolve()})")
    return 0
