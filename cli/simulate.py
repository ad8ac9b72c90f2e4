"""`headroom simulate` and `headroom tune`: the what-if engine on a demand trace."""
from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from cli import sources
from cli.config import Config
from cli.outputs import check_output_files, command_inputs, writing
from core.errors import BadRequest, ConfigError, HeadroomError
from core.settings import MAX_CLUSTER_GPUS
from core.textfile import BadGzip, TooBig, TooLong, bounded_lines, open_csv
from core.units import go_duration
from dashboards.report import missing_steps
from dashboards.report import notes as report_notes

if TYPE_CHECKING:  # imported when used: the CLI starts without the simulator
    from controller.simulate import Scenario
    from core.policy import PolicySpec


JOB_COLUMNS = ("num_gpu", "creation_time", "scheduled_time", "deletion_time")


def _job_number(text: str, column: str, blank_ok: bool = False) -> float:
    text = text.strip()
    if text == "" or text.lower() in {"nan", "na", "null"}:
        if blank_ok:
            return float("nan")
        raise ValueError(f"{column} {text!r} is missing" if text else f"{column} is blank")
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{column} {text!r} is not a number") from None
    if not math.isfinite(value):
        raise ValueError(f"{column} {text!r} is not a finite number")
    if value < 0:
        raise ValueError(f"{column} {text!r} is negative")
    return value


MAX_JOB_SECONDS = 1e11  # the year 5138 as epoch seconds: a time above it is milliseconds (or not a time)
# the longest a job trace may span, first creation_time to last deletion_time: milliseconds from the trace's start
# stay under MAX_JOB_SECONDS, but read as seconds even 8.8 hours of them span a year (public GPU job traces: 1-6 months)
MAX_JOB_TRACE_SECONDS = 366 * 86400


def _job_time(text: str, column: str, blank_ok: bool = False) -> float:
    value = _job_number(text, column, blank_ok)
    if value > MAX_JOB_SECONDS:
        raise ValueError(f"{column} {text.strip()!r} is over {MAX_JOB_SECONDS:g} seconds (the year 5138 as epoch "
                         "seconds): the times must be seconds (are they milliseconds?)")
    return value


def load_jobs(path):
    """A training job trace: CSV with JOB_COLUMNS, rows in any order (seconds on one clock, from the trace's start or
    the epoch; scheduled_time blank for a pod never scheduled). What of it is replayed: controller.simulate.trace_jobs.

    Every row is checked: num_gpu a whole number >= 0 (0-GPU pods are skipped by the simulator), the times
    seconds from 0 to MAX_JOB_SECONDS with creation_time <= deletion_time and scheduled_time (when given) between
    them; and the trace spans at most MAX_JOB_TRACE_SECONDS (more is milliseconds read as seconds). An error names
    the file and line (BadRequest: exit 2). A `name` column, when there is one, names each pod
    once. Other columns are not read."""
    import csv

    import numpy as np
    import pandas as pd

    rows: dict[str, list[float]] = {c: [] for c in JOB_COLUMNS}
    where = f"--jobs (simulate.jobs) {path}"
    try:
        with open_csv(Path(path)) as handle:
            reader = csv.reader(bounded_lines(handle))
            header = next(reader, None)
            if header is None:
                raise BadRequest(f"{where}: file is empty (needs a header {','.join(JOB_COLUMNS)})")
            names = [h.strip().lower() for h in header]
            missing = [c for c in JOB_COLUMNS if c not in names]
            if missing:
                raise BadRequest(f"{where}:1: missing column(s) {', '.join(missing)} (needs {', '.join(JOB_COLUMNS)};"
                                 f" the header has {', '.join(header[:12])})")
            twice = [c for c in (*JOB_COLUMNS, "name") if names.count(c) > 1]
            if twice:
                raise BadRequest(f"{where}:1: column(s) {', '.join(twice)} named more than once")
            col = {c: names.index(c) for c in JOB_COLUMNS}
            named = names.index("name") if "name" in names else None
            first_line: dict[str, int] = {}  # each pod name's line: a pod listed twice would be replayed twice
            lines: list[int] = []  # each row's line
            for row in reader:
                if not row or all(not cell.strip() for cell in row):
                    continue
                line = reader.line_num
                if len(row) != len(names):
                    raise BadRequest(f"{where}:{line}: expected {len(names)} fields, got {len(row)}")
                try:
                    gpus = _job_number(row[col["num_gpu"]], "num_gpu")
                    if gpus != int(gpus) or gpus > MAX_CLUSTER_GPUS:
                        raise ValueError(f"num_gpu {row[col['num_gpu']].strip()!r} is not a whole number of GPUs "
                                         "up to 1,000,000")
                    created = _job_time(row[col["creation_time"]], "creation_time")
                    deleted = _job_time(row[col["deletion_time"]], "deletion_time")
                    scheduled = _job_time(row[col["scheduled_time"]], "scheduled_time", blank_ok=True)
                    if deleted < created:
                        raise ValueError(f"deletion_time {deleted:g} is before creation_time {created:g}")
                    if not math.isnan(scheduled) and not created <= scheduled <= deleted:
                        raise ValueError(f"scheduled_time {scheduled:g} is not between creation_time {created:g} "
                                         f"and deletion_time {deleted:g}")
                except ValueError as exc:
                    raise BadRequest(f"{where}:{line}: {exc}") from None
                if named is not None and (pod := row[named].strip()):  # a blank name names no pod
                    if pod in first_line:
                        raise BadRequest(f"{where}:{line}: name {pod!r} repeats line {first_line[pod]} (a pod listed "
                                         "twice would be replayed twice)")
                    first_line[pod] = line
                for c, v in zip(JOB_COLUMNS, (int(gpus), created, scheduled, deleted)):
                    rows[c].append(v)
                lines.append(line)
    except OSError as exc:
        raise BadRequest(f"{where}: cannot read it: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise BadRequest(f"{where}: not a UTF-8 CSV file") from None
    except csv.Error as exc:
        raise BadRequest(f"{where}: not a readable CSV: {exc}") from None
    except TooBig as exc:  # a job trace, only too long to hold
        raise BadRequest(f"{where}: {exc}: give a shorter part of the job trace") from None
    except TooLong as exc:
        raise BadRequest(f"{where}: {exc}: not a job trace CSV") from None
    except BadGzip as exc:
        raise BadRequest(f"{where}: not a readable gzip file: {exc}") from None
    if not rows["num_gpu"]:
        raise BadRequest(f"{where}: no job rows")
    first, last = int(np.argmin(rows["creation_time"])), int(np.argmax(rows["deletion_time"]))
    span = rows["deletion_time"][last] - rows["creation_time"][first]
    if span > MAX_JOB_TRACE_SECONDS:  # every job and gap 1,000 times too long, else
        raise BadRequest(f"{where}: the trace spans {span / (365 * 86400):.3g} years read as seconds, from "
                         f"creation_time {rows['creation_time'][first]:.15g} (line {lines[first]}) to deletion_time "
                         f"{rows['deletion_time'][last]:.15g} (line {lines[last]}): the times must be seconds (are "
                         "they milliseconds? divide creation_time, scheduled_time and deletion_time by 1000); a trace "
                         "over a year long is refused as that slip (keep its last year)")
    return pd.DataFrame({"num_gpu": pd.Series(rows["num_gpu"], dtype="int64"),
                         **{c: pd.Series(rows[c], dtype=float) for c in JOB_COLUMNS[1:]}})


def read_as_seconds(jobs) -> str:
    """How a job trace's times were read, with what a slip to milliseconds would show: its span and median run. Times
    counted in milliseconds from the trace's start over less than 8.8 hours pass every check (MAX_JOB_TRACE_SECONDS),
    read as a trace 1,000 times longer: only the person who knows the trace can tell, so it is said every time."""
    span = float(jobs["deletion_time"].max() - jobs["creation_time"].min())
    runs = (jobs["deletion_time"] - jobs["scheduled_time"]).dropna()
    run = f", a median run of {go_duration(float(runs.median()))}" if len(runs) else ""
    return (f"times read as seconds: {len(jobs)} pods over {span / 86400:.3g} days{run} (milliseconds? divide "
            "creation_time, scheduled_time and deletion_time by 1000)")


def job_arrivals(path, span_seconds: float, step_seconds: float, gpus: int, span_flag: str, queues: Sequence[str]):
    """The job trace at `path` as the embedded cluster's arrivals on `gpus` GPUs over a replay `span_seconds` long
    from its first step to its last, `step_seconds` apart (controller.simulate.trace_jobs), into the training
    ClusterQueues `queues`, and what it leaves out, said on stderr and returned (for a JSON's notes); `simulate` and
    the embedded `run` replay the same arrivals. A trace whose jobs all arrive within the replay's last step is
    refused: a replay with next to no training would read as one of the trace."""
    from controller.simulate import trace_jobs

    if not queues:  # its jobs arrive in turn into each training queue: with none, nowhere
        raise BadRequest(f"--jobs (simulate.jobs) {path}: no policy names a training ClusterQueue "
                         "(spec.trainingClusterQueues) for the trace's jobs to wait in: name one, or drop --jobs")
    jobs = load_jobs(path)
    found = [read_as_seconds(jobs)]
    try:
        arrivals = trace_jobs(jobs, span_seconds, gpus, found)
    except ValueError as exc:  # no job left to replay
        raise BadRequest(f"--jobs (simulate.jobs) {path}: {exc} ({span_flag}, --gpus)") from None
    first, newest = float(arrivals[2][0]), float(jobs["creation_time"].max())
    if first > span_seconds - step_seconds:
        raise BadRequest(f"--jobs (simulate.jobs) {path}: the jobs that ran in the trace's last "
                         f"{go_duration(span_seconds)} all arrive in the replay's last "
                         f"{go_duration(span_seconds - first)}, under one {go_duration(step_seconds)} step, up to the "
                         f"trace's newest creation_time {newest:g} (where the replay ends): it would replay "
                         "next to no training. Give a trace whose jobs arrive over more of it (are its times seconds? "
                         "minutes or hours read as seconds squeeze a trace so), or drop --jobs")
    notes = [f"--jobs (simulate.jobs) {path}: {note}" for note in found]
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    return arrivals, notes


def _check_scale(demand, per_gpu: float, what: str, slip: str = "is the demand per GPU in the trace's unit?",
                 source: str | None = None) -> None:
    """The trace's peak in GPUs fits the largest cluster (else BadRequest naming `what`, the setting that gave
    `per_gpu`; a ConfigError of file `source` when given) and, said when not, one GPU; `slip` asks after the likely
    mistake."""
    peak = float(demand.max()) / per_gpu
    if not peak <= MAX_CLUSTER_GPUS:
        problem = f"{what}: the trace's peak {float(demand.max()):g} would need {peak:.3g} GPUs, over " \
            f"{MAX_CLUSTER_GPUS:,} ({slip})"
        raise ConfigError(source, [problem]) if source is not None else BadRequest(problem)
    if 0 < peak < 1:  # possible for a tiny service, but more often a unit slip: said, and run
        print(f"note: {what}: the trace's peak {float(demand.max()):g} needs {peak:.3g} of one GPU, so "
              f"every policy holds its minimum ({slip})", file=sys.stderr)


@dataclass(frozen=True)
class WhatIf:
    scenario: Scenario
    spec: PolicySpec   # the policy file's, or the defaults on this trace
    from_file: bool
    notes: tuple[str, ...] = ()  # what the job trace leaves out (said on stderr as it is read)


def controller_settings(cfg: Config) -> dict:
    """The settings `headroom run` decides with beside the policy (run.*: the data's lookback, staleness and
    horizon, the GPUs never lent, the teams' weights; history.outlier_factor, the bound its refits clip the hours
    by), as a Scenario's fields: the what-if decides as the controller
    does on the same configuration. BadRequest when run.non_lendable_gpus leaves nothing of simulate.gpus to lend."""
    from controller.observe import DataSettings

    r = cfg.run
    if r.non_lendable_gpus >= cfg.simulate.gpus:
        raise BadRequest(f"run.non_lendable_gpus {r.non_lendable_gpus} leaves nothing of the {cfg.simulate.gpus}-GPU "
                         "cluster (simulate.gpus, --gpus) to lend")
    return {"data": DataSettings.of(r, cfg.history.outlier_factor), "non_lendable_gpus": r.non_lendable_gpus,
            "team_weights": tuple(r.team_weights.items())}


def whatif(cfg: Config) -> WhatIf:
    """The scenario of the configured trace and cluster, and the policy to run on it."""
    import pandas as pd

    from controller.simulate import Scenario, default_spec, demand_per_gpu
    from core.policy import PolicySpec, load_manifests
    from forecast.history import sampling_step

    c = cfg.simulate
    days = f"simulate.days {c.days:g} (--days)"  # typed as the flag or set in --config: both named
    controller = controller_settings(cfg)
    if c.policy_file is not None and not c.policy_file.exists():  # a usage error, named before the trace is read
        raise BadRequest(f"simulate.policy_file {c.policy_file}: no such file (the --policy-file flag, or "
                         "simulate.policy_file in --config)")
    demand = sources.native_series(cfg, datetime.now(UTC))
    span_days = (demand.index[-1] - demand.index[0]).total_seconds() / 86400
    if c.days >= span_days:
        raise BadRequest(f"{days} leaves no history: the trace {sources.history_name(cfg)} covers "
                         f"{span_days:.2f} days (give --days below that, leaving some history before them)")
    step = sampling_step(demand.index)
    if pd.Timedelta(seconds=round(c.days * 86400)) < 2 * step:
        raise BadRequest(f"{days} covers fewer than two steps of the trace "
                         f"({go_duration(step)}): give more days")

    def arrivals(queues: Sequence[str]):
        return (None, []) if c.jobs is None else job_arrivals(
            c.jobs, Scenario(demand, days=c.days).replay_seconds, step.total_seconds(), c.gpus, "--days", queues)

    if c.policy_file is not None:
        objects, source = load_manifests(c.policy_file), str(c.policy_file)  # its errors said as a bad file's
        if len(objects) != 1:
            raise ConfigError(source, [f"(top level): holds {len(objects)} ReservationPolicies; a replay (simulate, "
                                       "report, tune) runs one: give a file holding one"])
        meta = objects[0]["metadata"]
        spec = PolicySpec.model_validate(objects[0]["spec"])
        _check_scale(demand, spec.capacity.demand_per_gpu,
                     f"spec.capacity.demandPerGpu: {spec.capacity.demand_per_gpu:g}", source=source)
        if spec.mode != "active":  # a replay of it serves no demand and lends nothing: 100% short, exit 0
            raise ConfigError(source, [f"spec.mode: {spec.mode} (the default when unset) changes nothing: set "
                                       "spec.mode: active to simulate what the policy would do"])
        kept = controller["non_lendable_gpus"]
        if too_big := spec.too_big_for(c.gpus - kept):  # 'minGpus 500': the field, then what it holds
            field, _, held = too_big.partition(" ")
            kept_said = f", {kept} of them never lent (run.non_lendable_gpus)" if kept else ""
            raise ConfigError(source, [f"spec.{field}: {held} does not fit the {c.gpus}-GPU cluster (simulate.gpus, "
                                       f"--gpus){kept_said}"])
        name = f"{meta['namespace']}/{meta['name']}"
        jobs, job_notes = arrivals(spec.training_cluster_queues)
        try:
            scenario = Scenario(demand, c.gpus, c.days, jobs, c.world, name=name,
                                training_queues=tuple(spec.training_cluster_queues), **controller)
        except ValueError as exc:
            raise BadRequest(f"{days}: {exc}") from None
        return WhatIf(scenario, spec, True, tuple(job_notes))
    jobs, job_notes = arrivals(Scenario.training_queues)
    try:
        scenario = Scenario(demand, c.gpus, c.days, jobs, c.world, **controller)
    except ValueError as exc:  # e.g. fewer than two evaluated steps
        raise BadRequest(f"{days}: {exc}") from None
    try:
        per_gpu = demand_per_gpu(demand, None if c.per_gpu else c.peak_gpus, c.per_gpu)
    except ValueError as exc:  # an all-zero (or all-missing) trace has no peak to scale to GPUs
        raise BadRequest(f"{sources.history_name(cfg)}: {exc} (--per-gpu)") from None
    if c.per_gpu:
        _check_scale(demand, per_gpu, f"--per-gpu {per_gpu:g}")
    else:  # the trace's 99.9th percentile scaled to --peak-gpus: the peak above it is the trace's own
        _check_scale(demand, per_gpu, f"--peak-gpus {c.peak_gpus:g} (simulate.peak_gpus; {per_gpu:g} demand per GPU)",
                     "give the GPUs the trace's 99.9th percentile needs")
    return WhatIf(scenario, default_spec(scenario, per_gpu, timezone=cfg.forecast.timezone), False, tuple(job_notes))


def resolved(cfg: Config, w: WhatIf, policy: str, progress=None, make_forecaster=None):
    """The spec a run uses: the file's exactly; a reference's the defaults under the objective asked; else tuned on
    the history for that objective (a baseline: its margin), the stated defaults where the history is too short.
    Returns (spec, TuneResult | None)."""
    from controller.simulate import REFERENCES
    from controller.tune import objective_of, tune

    if w.from_file:
        return w.spec, None
    if policy in REFERENCES:  # nothing to tune, but judged (the hourly oracle's level chosen) by the objective asked
        return w.spec.model_copy(update={"objective": objective_of(cfg.tune)}), None
    result = tune(w.scenario, w.spec, cfg.tune, make_forecaster, reference=policy, progress=progress)
    return result.recommended, result


def every_policy(cfg: Config, w: WhatIf, progress=None, make_forecaster=None):
    """The spec each simulated policy runs, each tuned on the history for the objective (references as they are),
    and the forecast policy's TuneResult (None when it came from a file)."""
    from controller.simulate import POLICIES, REFERENCES

    specs, forecast_tune = {}, None
    for policy in POLICIES:
        if progress:
            progress(f"{policy}: " + ("as is" if policy in REFERENCES else f"{cfg.simulate.policy_file}, as is"
                                      if w.from_file else "tuning on the history"))
        specs[policy], tuned = resolved(cfg, w, policy, make_forecaster=make_forecaster)
        if policy == "forecast":
            forecast_tune = tuned
    return specs, forecast_tune


# what a policy file holds itself (spec.capacity.demandPerGpu, spec.objective, spec.timezone), by the configuration
# key and the flag that set it elsewhere: these flags beside it are refused, these keys said unused
FILE_HOLDS = {"simulate.peak_gpus": "--peak-gpus", "simulate.per_gpu": "--per-gpu",
              "tune.max_shortage": "--max-shortage", "tune.max_short_steps": "--max-short-steps",
              "forecast.timezone": "--timezone"}


def refuse_flags_the_file_holds(cfg: Config, args) -> None:
    """A policy file is run exactly: a flag that would change what it holds is an error, not silently dropped. The
    configuration file's keys for the same things are standing defaults a shared file may hold: said unused."""
    if cfg.simulate.policy_file is None:
        return
    keys = {key: key.split(".") for key in FILE_HOLDS}
    given = [flag for key, flag in FILE_HOLDS.items() if getattr(args, keys[key][1], None) is not None]
    holds = "spec.capacity.demandPerGpu, spec.objective and spec.timezone"
    if given:
        raise BadRequest(f"{', '.join(given)}: {cfg.simulate.policy_file} is run exactly, with its own {holds}; edit "
                         "the file, or drop --policy-file to have the policy tuned on the history")
    configured = [key for key, (section, leaf) in keys.items() if leaf in getattr(cfg, section).model_fields_set]
    if configured:
        print(f"headroom: note: {', '.join(configured)} of the configuration not used: {cfg.simulate.policy_file} "
              f"is run exactly, with its own {holds}", file=sys.stderr)


def figures(result) -> dict:
    """A simulation's figures as `simulate --json` gives them (its timeline's frames apart)."""
    return {k: v for k, v in asdict(result).items() if k not in ("timeline", "detail", "events")}


def cmd_simulate(cfg: Config, args) -> int:
    from cli.progress import stage_printer
    from controller.simulate import REFERENCES, TimedResult, simulate, write_timeline

    if cfg.simulate.policy_file is not None and cfg.simulate.policy not in ("forecast", "oracle", "hourly-oracle"):
        raise BadRequest("--policy-file runs exactly the file's policy: --policy may only be forecast (the default), "
                         "oracle or hourly-oracle with it")
    refuse_flags_the_file_holds(cfg, args)
    check_output_files([(args.timeline, "--timeline")], command_inputs(cfg, args))
    say = stage_printer("simulate", quiet=args.json)
    w = whatif(cfg)
    started = time.perf_counter()
    if not w.from_file and cfg.simulate.policy not in REFERENCES:
        say(f"tuning the {cfg.simulate.policy} policy on the history: each setting replayed, as tune does")
    spec, tuned = resolved(cfg, w, cfg.simulate.policy, progress=say)
    replay_seconds = time.perf_counter() - started if tuned is not None else 0.0
    if tuned is not None:
        say(f"policy tuned on the history: {tuned.reason}")
    result = simulate(w.scenario, spec, reference=cfg.simulate.policy, timeline=bool(args.timeline))
    if args.timeline:
        if not isinstance(result, TimedResult):
            raise TypeError("simulate(timeline=True) returns a TimedResult")
        with writing("--timeline", args.timeline):
            written = write_timeline(result.timeline, args.timeline)
        say(f"timeline: {written}")
    fields_ = figures(result)
    fields_["buffer_replay_seconds"] = replay_seconds  # tuning by replaying the history (0: --policy-file, a reference)
    # what the numbers leave out, as report says it: on stderr, and in the JSON (which has no progress lines)
    notes = report_notes(result, cfg.simulate.gpus, missing_steps(w.scenario))
    for note in notes:
        say(f"note: {note}")
    if args.json:
        print(json.dumps({**fields_, "notes": [*w.notes, *notes]}, sort_keys=True, default=str))
        return 0
    print("\n".join(figure_lines(fields_)))
    return 0


# the figures that are shares (of capacity, demand, steps, hours or allocated GPU-time): read as percentages
SHARES = frozenset({"utilization", "shortage_within_cluster", "short_steps", "shortage_within_cluster_se",
                    "short_steps_se", "inference_shortage", "shortage_over_capacity", "shortage_hours_share",
                    "training_goodput"})


def percent(value) -> str:
    return "" if value is None or math.isnan(value) else f"{100 * value:.4g}%"


def sweep_text(table, spec) -> str:
    """tune's sweep as text: shares in percent, as its verdict says them, and an unset warm_buffer_quantile as the
    level it stands for (1 - the objective's maxShortSteps: the rises the objective lets go short)."""
    from controller.tune import rises_level_said

    shown = table.copy()
    for column in SHARES.intersection(shown.columns):
        shown[column] = shown[column].map(percent)
    if "warm_buffer_quantile" in shown.columns:
        shown["warm_buffer_quantile"] = [rises_level_said(q, spec.objective) for q in shown["warm_buffer_quantile"]]
    return shown.to_string(index=False, float_format=lambda v: f"{v:.4g}")


def figure_lines(fields_: dict) -> list[str]:
    """simulate's text output: the policy replayed, then each figure under its --json name, shares in percent (a
    shortage of 7.4e-05 is 0.0074%), a standard error of one day (null in --json) unknown; the spec itself is in
    --json and the policy file."""
    shown = {"policy": fields_["reference"], **{k: v for k, v in fields_.items() if k not in ("policy", "reference")}}
    width = max(map(len, shown)) + 2
    return [f"{key:<{width}}unknown (one day: a day-to-day error takes two or more)" if value is None else
            f"{key:<{width}}{percent(value)}" if key in SHARES else
            f"{key:<{width}}{value:.4g}" if isinstance(value, float) else f"{key:<{width}}{value}"
            for key, value in shown.items()]


# what tune's recommendation is, by whether it was replayed and met the objective: a key of its JSON, and its words
VERDICTS = {"recommended": "recommended", "closest": "closest (does not meet the objective)",
            "stated defaults": "the stated defaults (nothing replayed)"}


def cmd_tune(cfg: Config, args) -> int:
    from cli.progress import stage_printer
    from controller.simulate import TUNABLE
    from controller.tune import plot_tradeoff, tune, write_policy
    from core.policy import spec_dict
    from forecast.baselines import BASELINES

    if cfg.simulate.policy not in TUNABLE:  # the configuration's: --policy offers only what tune tunes
        raise BadRequest(f"simulate.policy {cfg.simulate.policy} (the configuration): a reference that knows the "
                         "future has nothing to tune; tune the forecast policy (the default) or a baseline's margin "
                         f"({', '.join(BASELINES)})")
    check_output_files([(args.plot, "--plot"), (args.write_policy, "--write-policy")], command_inputs(cfg, args))
    if args.write_policy and Path(args.write_policy).exists():  # an SRE's manifest: its query and target are theirs
        raise BadRequest(f"--write-policy {args.write_policy}: the file exists and tune does not overwrite it (a "
                         "manifest's spec.query and spec.target would be lost); remove it or name a new file")
    if cfg.simulate.policy_file is not None:  # tune has no --policy-file: the configuration set it, for simulate
        raise BadRequest(f"simulate.policy_file {cfg.simulate.policy_file} (the configuration): tune sweeps the "
                         "policy's fields itself; remove it from the configuration given to tune (simulate "
                         "--policy-file runs a policy file)")
    if cfg.simulate.jobs is not None:  # the configuration's, for simulate and report: the flag is theirs alone
        print("headroom: note: simulate.jobs of the configuration not used: tune replays the history with a "
              "saturated training backlog", file=sys.stderr)
        cfg = cfg.model_copy(update={"simulate": cfg.simulate.model_copy(update={"jobs": None})})
    w = whatif(cfg)
    say = stage_printer("tune", quiet=args.json)
    result = tune(w.scenario, w.spec, cfg.tune, reference=cfg.simulate.policy, progress=say)
    # nothing replayed (too little history, or --days under 1): the stated defaults, not a verdict
    verdict = "recommended" if result.met else "closest" if result.replay is not None else "stated defaults"
    if not args.json:
        if not result.table.empty:
            print(sweep_text(result.table, result.recommended))
        print(f"{VERDICTS[verdict]}: {_fields(result.recommended)}\n  {result.reason}")
    replay = result.replay
    # what the figures leave out, as simulate says it: on stderr, and in the JSON (which has no progress lines)
    notes = [] if result.recheck is None or replay is None else \
        [f"on the replayed days {note}" for note in report_notes(result.recheck, cfg.simulate.gpus,
                                                                 missing_steps(replay))]
    for note in notes:
        say(f"note: {note}")
    plot = None
    if args.plot:
        with writing("--plot", args.plot):
            plot = str(plot_tradeoff(result, args.plot))
    policy_file = None
    if args.write_policy:
        namespace, name = w.scenario.name.split("/", 1)
        comment = (f"headroom tune {sources.history_name(cfg)}: {result.reason}\n"
                   "Set spec.query to the PromQL of this demand and spec.target to the inference workload before "
                   "applying it to a cluster.")
        if cfg.simulate.per_gpu is None:  # a scale made up to replay the trace: no GPU's measured throughput
            comment += (f"\nspec.capacity.demandPerGpu {result.recommended.capacity.demand_per_gpu:g} scales the "
                        f"trace's 99.9th percentile to {cfg.simulate.peak_gpus:g} GPUs (--peak-gpus, "
                        "simulate.peak_gpus), not what one GPU serves: set it to that (or tune with --per-gpu RATE) "
                        "before applying it.")
        try:
            with writing("--write-policy", args.write_policy):
                policy_file = str(write_policy(result.recommended, args.write_policy, name, namespace, comment))
        except FileExistsError:  # made while tune ran (checked before it): someone's manifest, left as it is
            raise HeadroomError(f"--write-policy {args.write_policy}: a file of that name was made while tune ran; "
                                "it is not overwritten (a manifest's spec.query and spec.target would be lost): "
                                "run again with a new name") from None
    if args.json:
        table = result.table.astype(object).where(result.table.notna(), None)  # NaN is not JSON: null
        print(json.dumps({
            "tuned": cfg.simulate.policy,
            "objective": {"max_shortage": cfg.tune.max_shortage, "max_short_steps": cfg.tune.max_short_steps},
            "replayed": None if replay is None else {"days": replay.days,
                                                     "first_step": replay.evaluated[0].isoformat(),
                                                     "last_step": replay.evaluated[-1].isoformat()},
            "settings": table.to_dict(orient="records"),
            "verdict": verdict, "met": result.met, "reason": result.reason, "in_the_way": result.in_the_way or None,
            "spec": spec_dict(result.recommended),
            "figures": None if result.recheck is None else figures(result.recheck),
            "notes": notes, "plot": plot, "write_policy": policy_file}, default=str))
    else:
        if plot:
            print(f"trade-off plot: {plot}")
        if policy_file:
            print(f"policy: {policy_file} (kubectl apply -f, headroom run --policy-file, headroom simulate "
                  "--policy-file)")
    # the stated defaults are a working policy (issue 11), not a failure
    return 0 if result.met or verdict == "stated defaults" else 1


def _fields(spec) -> str:
    rises = "" if spec.warm_buffer_quantile is None else f", warmBufferQuantile {spec.warm_buffer_quantile:g}"
    return (f"forecaster {spec.forecaster}, targetQuantile {spec.target_quantile:g}, warmBuffer {spec.warm_buffer:g}"
            f"{rises}, scaleInDelay {spec.scale_in_delay}, leadTime {spec.lead_time}, marginGpus {spec.margin_gpus}")
