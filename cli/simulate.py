"""`headroom simulate` and `headroom tune`: the what-if engine on a demand trace."""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from cli.config import Config
from cli.sources import source
from core.errors import BadRequest


def native_series(cfg: Config):
    """The history at its own step (the simulator replays every sample), gaps kept."""
    from forecast.history import at_own_step

    return at_own_step(source(cfg, datetime.now(UTC)).fetch())


JOB_COLUMNS = ("num_gpu", "creation_time", "scheduled_time", "deletion_time")


def load_jobs(path):
    """A training job trace: CSV with JOB_COLUMNS (seconds from the trace's start; scheduled_time may be blank)."""
    import pandas as pd

    try:
        jobs = pd.read_csv(path)
    except (OSError, ValueError) as exc:
        raise BadRequest(f"--jobs {path}: cannot read it as CSV: {exc}") from None
    missing = [c for c in JOB_COLUMNS if c not in jobs.columns]
    if missing:
        raise BadRequest(f"--jobs {path}: missing column(s) {', '.join(missing)} (needs {', '.join(JOB_COLUMNS)})")
    return jobs


@dataclass(frozen=True)
class WhatIf:
    scenario: object   # controller.simulate.Scenario
    spec: object       # core.policy.PolicySpec: the policy file's, or the defaults on this trace
    from_file: bool


def whatif(cfg: Config, progress=None) -> WhatIf:
    """The scenario of the configured trace and cluster, and the policy to run on it."""
    from controller.simulate import Scenario, default_spec, demand_per_gpu, trace_jobs
    from core.policy import PolicySpec, load_manifests

    c = cfg.simulate
    demand = native_series(cfg)
    span_days = (demand.index[-1] - demand.index[0]).total_seconds() / 86400
    if c.days >= span_days:
        raise BadRequest(f"simulate.days {c.days:g} leaves no history: the trace covers {span_days:.2f} days "
                         f"(give --days below that; at least a day of history is needed before them)")
    jobs = None
    if c.jobs is not None:
        jobs = trace_jobs(load_jobs(c.jobs), c.days * 86400, c.gpus)
    if c.policy_file is not None:
        objects = load_manifests(c.policy_file)
        if len(objects) != 1:
            raise BadRequest(f"{c.policy_file}: holds {len(objects)} ReservationPolicies; simulate runs one")
        meta = objects[0]["metadata"]
        spec = PolicySpec.model_validate(objects[0]["spec"])
        name = f"{meta['namespace']}/{meta['name']}"
        scenario = Scenario(demand, c.gpus, c.days, jobs, c.world, name=name,
                            training_queues=tuple(spec.training_cluster_queues))
        return WhatIf(scenario, spec, True)
    scenario = Scenario(demand, c.gpus, c.days, jobs, c.world)
    per_gpu = demand_per_gpu(demand, None if c.per_gpu else c.peak_gpus, c.per_gpu)
    return WhatIf(scenario, default_spec(scenario, per_gpu), False)


def resolved(cfg: Config, w: WhatIf, policy: str, progress=None, make_forecaster=None):
    """The spec a run uses: the file's exactly; else tuned on the history for the objective (a baseline: its margin),
    the stated defaults where the history is too short. Returns (spec, TuneResult | None)."""
    from controller.simulate import REFERENCES
    from controller.tune import tune

    if w.from_file or policy in REFERENCES:
        return w.spec, None
    result = tune(w.scenario, w.spec, cfg.tune, make_forecaster, reference=policy, progress=progress)
    return result.recommended, result


def every_policy(cfg: Config, w: WhatIf, progress=None, make_forecaster=None):
    """The spec each simulated policy runs, each tuned on the history for the objective (references as they are),
    and the forecast policy's TuneResult (None when it came from a file)."""
    from controller.simulate import POLICIES

    specs, forecast_tune = {}, None
    for policy in POLICIES:
        if progress:
            progress(f"{policy}: {'tuning on the history' if policy not in ('oracle', 'hourly-oracle') else 'as is'}")
        specs[policy], tuned = resolved(cfg, w, policy, make_forecaster=make_forecaster)
        if policy == "forecast":
            forecast_tune = tuned
    return specs, forecast_tune


def cmd_simulate(cfg: Config, args) -> int:
    from cli.progress import stage_printer
    from controller.simulate import simulate, write_timeline

    if cfg.simulate.policy_file is not None and cfg.simulate.policy not in ("forecast", "oracle", "hourly-oracle"):
        raise BadRequest("--policy-file runs exactly the file's policy: --policy may only be forecast (the default), "
                         "oracle or hourly-oracle with it")
    say = stage_printer("simulate", quiet=args.json)
    w = whatif(cfg)
    started = time.perf_counter()
    spec, tuned = resolved(cfg, w, cfg.simulate.policy, progress=None)
    replay_seconds = time.perf_counter() - started if tuned is not None else 0.0
    if tuned is not None:
        say(f"policy tuned on the history: {tuned.reason}")
    result = simulate(w.scenario, spec, reference=cfg.simulate.policy, timeline=bool(args.timeline))
    if args.timeline:
        say(f"timeline: {write_timeline(result.timeline, args.timeline)}")
    fields_ = {k: v for k, v in asdict(result).items() if k not in ("timeline", "detail", "events")}
    fields_["buffer_replay_seconds"] = replay_seconds  # tuning by replaying the history (0: --policy-file, a reference)
    if args.json:
        print(json.dumps(fields_, sort_keys=True, default=str))
        return 0
    for key, value in fields_.items():
        if key == "policy":
            continue
        print(f"{key:<26}{value:.4g}" if isinstance(value, float) else f"{key:<26}{value}")
    return 0


def cmd_tune(cfg: Config, args) -> int:
    from cli.progress import stage_printer
    from controller.tune import plot_tradeoff, tune, write_policy

    for path, flag in ((args.plot, "--plot"), (args.write_policy, "--write-policy")):
        if path is not None and not Path(path).resolve().parent.is_dir():
            raise BadRequest(f"{flag} {path}: the folder {Path(path).resolve().parent} does not exist")
    w = whatif(cfg)
    if w.from_file:
        raise BadRequest("tune sweeps the policy's fields itself: give DEMAND and the scenario flags, "
                         "not --policy-file")
    say = stage_printer("tune")
    result = tune(w.scenario, w.spec, cfg.tune, reference=cfg.simulate.policy, progress=say)
    if not result.table.empty:
        print(result.table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    verdict = "recommended" if result.met else "closest (does not meet the objective)"
    print(f"{verdict}: {_fields(result.recommended)}\n  {result.reason}")
    if args.plot:
        print(f"trade-off plot: {plot_tradeoff(result, args.plot)}")
    if args.write_policy:
        namespace, name = w.scenario.name.split("/", 1)
        comment = (f"headroom tune {cfg.history.file}: {result.reason}\n"
                   "Set spec.query to the PromQL of this demand and spec.target to the inference workload before "
                   "applying it to a cluster.")
        print(f"policy: {write_policy(result.recommended, args.write_policy, name, namespace, comment)} "
              f"(kubectl apply -f, headroom run --policy-file, headroom simulate --policy-file)")
    return 0 if result.met else 1


def _fields(spec) -> str:
    return (f"forecaster {spec.forecaster}, targetQuantile {spec.target_quantile:g}, warmBuffer {spec.warm_buffer:g}, "
            f"scaleInDelay {spec.scale_in_delay}, leadTime {spec.lead_time}, marginGpus {spec.margin_gpus}")
