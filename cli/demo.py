"""`headroom demo`: the whole product on embedded defaults, no servers.

history (forecast.synthetic) -> training tracked in MLflow (sqlite) -> the champion's forecast
-> the plan for the next hours -> a simulated week on a simulated cluster with a training backlog,
forecast policy against the baselines -> the tuning trade-off -> the report.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import numpy as np
import pandas as pd

SERIES = "demo"


@dataclass(frozen=True)
class DemoSize:
    history_days: int
    simulated_days: float
    folds: int
    tune_target_quantiles: tuple[float, ...]


FULL = DemoSize(history_days=42, simulated_days=7, folds=4, tune_target_quantiles=(0.3, 0.5, 0.7))
QUICK = DemoSize(history_days=15, simulated_days=1, folds=2, tune_target_quantiles=(0.3, 0.7))


def backlog(now: pd.Timestamp, settings, seed: int = 0):
    """The simulated cluster's training side: two teams, jobs running since their last checkpoint and a queue.

    Sizes and durations are the simulator's backlog defaults; one job in four is slow to
    preempt (longer than the reclaim deadline) so the plan shows the headroom rule at work."""
    from planning.planner import RunningJob
    from planning.queue import Job, TeamQuota

    rng = np.random.default_rng(seed)
    lo, hi = settings.backlog_job_hours
    jobs = [Job(id=f"{team}-{i}", team=team, gpus=int(rng.choice(settings.backlog_job_gpus)),
                duration_seconds=float(rng.uniform(lo, hi) * 3600), priority=int(i % 3 == 0), submitted_at=float(i),
                checkpoint_interval_seconds=settings.checkpoint_interval_seconds,
                preemption_seconds=600.0 if i % 4 == 3 else float(rng.uniform(*settings.preemption_seconds)))
            for i in range(24) for team in ("research", "product")]
    running = tuple(RunningJob(j, now - pd.Timedelta(minutes=10 + 5 * k)) for k, j in enumerate(jobs[:10]))
    teams = (TeamQuota("research", 64.0), TeamQuota("product", 64.0))
    return running, tuple(jobs[10:]), teams


def plan_summary(p, hours: int = 6) -> list[str]:
    """A few lines a person reads: the next hours, the first reason, who got GPUs, what gets taken back."""
    lines = [f"  {'hour (UTC)':<17}{'reserved':>9}{'headroom':>9}{'slack':>7}"]
    lines += [f"  {h.hour:%Y-%m-%d %H:%M}{h.reserved_gpus:>9}{h.headroom_gpus:>9}{h.slack_gpus:>7}" for h in p.hours[:hours]]
    lines.append(f"  why (this hour): {p.reservations[0].reason}")
    by_team: dict[str, list[int]] = {}
    for a in p.admissions:
        by_team.setdefault(a.team, []).append(a.gpus)
    if p.admissions:
        lines.append("  admitted: " + ", ".join(f"{t} {len(g)} jobs / {sum(g)} GPUs" for t, g in sorted(by_team.items()))
                     + f"; e.g. {p.admissions[0].job_id}: {p.admissions[0].reason}")
    kinds = pd.Series([x.kind for x in p.preemptions], dtype=object).value_counts().to_dict()
    if p.preemptions:
        first = p.preemptions[0]
        lines.append("  preemptions: " + ", ".join(f"{n} {k}" for k, n in kinds.items())
                     + f"; first {first.job_id} at {first.at:%H:%M}: {first.reason}")
    lines += [f"  note: {n}" for n in p.notes]
    return lines


def run_demo(out: Path, quick: bool, cfg, say) -> dict:
    """Every stage in order; returns where things went and what came out."""
    from cli.simulate import simulation
    from cli.sources import load_series
    from cli.config import load_config
    from planning.planner import Observation, Policy, Snapshot, WorkloadPolicy, plan
    from controller.tune import tune
    from dashboards.report import compare_policies, comparison_table, format_table, render_report
    from forecast.history import FileSource, at_own_step
    from forecast.synthetic import synthetic_demand, write_csv
    from training.pipeline import TrainSettings, load_champion, train_series
    from adapters.mlflow import Tracker

    size = QUICK if quick else FULL
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    settings, sim_kwargs = simulation(cfg)

    say(f"history: {size.history_days} days of 5-minute demand from forecast.synthetic (daily and weekly cycles, "
        "noise, bursts, a scrape gap)")
    history_file = out / "demand_5min.csv"
    write_csv(synthetic_demand(days=size.history_days), history_file)
    # the forecaster sees the hourly peak, as the simulator feeds it
    load_cfg = load_config(None, {"history.file": str(history_file), "history.statistic": settings.history_statistic})
    native = at_own_step(FileSource(history_file).fetch())
    now = native.index[-1] + (native.index[1] - native.index[0])
    hourly, cleaning = load_series(load_cfg, now.to_pydatetime())
    say(f"cleaned: {'; '.join(cleaning.lines())}")

    uri = f"sqlite:///{out / 'mlflow.db'}"
    say(f"training: backtest of candidates, tracked in MLflow at {uri}")
    quantiles = tuple(sorted({settings.target_quantile, 0.5, 0.9, settings.headroom_quantile}))
    trained = train_series(SERIES, hourly, TrainSettings(folds=size.folds, statistic=settings.history_statistic,
                                                         quantiles=quantiles), Tracker(uri), now.to_pydatetime())
    say(f"trained: {trained.selected} {trained.objective}={trained.score:.3f} -> version {trained.version}, "
        f"{'champion' if trained.promoted else 'not promoted'} ({trained.reason})")

    champion = load_champion(SERIES, uri)
    qs = [settings.target_quantile, settings.headroom_quantile]
    forecast = champion.predict(24, qs)
    say(f"forecast: champion v{champion.headroom_meta['version']} ({trained.selected}), next 24 h, quantiles {qs}")

    c = cfg.simulate
    raw = native.ffill().fillna(0.0).to_numpy()
    per_gpu = c.per_gpu or float(np.quantile(raw, 0.999)) / c.peak_gpus  # the simulator's scaling
    workload = WorkloadPolicy("inference", demand_per_gpu=per_gpu, target_quantile=settings.target_quantile,
                              headroom_quantile=settings.headroom_quantile,
                              lead_time=timedelta(seconds=settings.lead_time_seconds))
    running, queued, teams = backlog(now, settings)
    policy = Policy(capacity_gpus=c.gpus, workloads=(workload,), teams=teams,
                    reclaim_deadline=timedelta(seconds=settings.reclaim_deadline_seconds))
    snapshot = Snapshot({"inference": Observation(float(raw[-1]), native)}, running=running, queued=queued)
    current = plan({"inference": forecast}, snapshot, policy, now)
    say(f"plan at {now:%Y-%m-%d %H:%M} UTC on the simulated {c.gpus}-GPU cluster "
        f"({sum(r.job.gpus for r in running)} GPUs of training running, {len(queued)} jobs queued)")
    print(f"plan at {now:%Y-%m-%d %H:%M} UTC ({c.gpus} GPUs):")
    print("\n".join(plan_summary(current)))

    sim_kwargs.update(days=size.simulated_days, make_forecaster=lambda: copy.deepcopy(champion))
    say(f"simulating the last {size.simulated_days:g} day(s) with a training backlog: forecast policy (the "
        "champion refitted hourly on past data only) and the baselines")
    results = compare_policies(native, settings, progress=say, **sim_kwargs)
    table = comparison_table(results)
    print("\npolicies compared:")
    print(format_table(table))

    say(f"tuning sweep: target quantiles {size.tune_target_quantiles}")
    tuned = tune(native, sim_kwargs.pop("make_forecaster"), target_quantiles=size.tune_target_quantiles,
                 lead_times_seconds=(settings.lead_time_seconds,), headroom_quantiles=(settings.headroom_quantile,),
                 shortage_objective=cfg.tune.shortage_objective, base=settings, **sim_kwargs)
    say(f"recommended: {tuned.recommended} ({tuned.reason})")

    facts = {"demand trace": f"{history_file} (forecast.synthetic, {size.history_days} days)",
             "cluster": f"{c.gpus} GPUs; one GPU serves {per_gpu:.3g} requests per step",
             "simulated": f"last {size.simulated_days:g} day(s); everything before is history",
             "training": "saturated backlog",
             "forecaster": f"MLflow champion v{champion.headroom_meta['version']} of headroom-{SERIES}: "
                           f"{trained.selected}, refitted every hour",
             "MLflow store": uri}
    report = render_report(out / "report", results, "forecast", settings, c.gpus, facts, tuned, title="headroom demo")
    say("report written")
    return {"report": report, "tracking_uri": uri, "history": history_file, "table": table, "plan": current,
            "trained": trained}


def cmd_demo(cfg, args) -> int:
    from cli.progress import stage_printer

    done = run_demo(Path(args.out), args.quick, cfg, stage_printer("demo"))
    print(f"\nreport:       {done['report']}\n"
          f"  open it:    xdg-open {done['report']}   (or open that path in a browser)\n"
          f"MLflow store: {done['tracking_uri']}\n"
          f"  open it:    mlflow ui --backend-store-uri {done['tracking_uri']}   (then http://127.0.0.1:5000)")
    return 0
