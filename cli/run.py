"""`headroom run` and `headroom plan`: the controller on a Kubernetes cluster or on the embedded one."""
from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
from pathlib import Path

import pandas as pd

from cli.config import Config, flag_path
from core.errors import BadRequest, ConfigError
from core.files import append_whole, replace_whole
from core.settings import EmbeddedPolicy, RunConfig, duplicate_policies

log = logging.getLogger(__name__)


def add_parser(sub) -> None:
    p = sub.add_parser("run", help="the controller: forecast, plan and act on the cluster in a loop")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--kubeconfig", help="act on the Kubernetes cluster of this kubeconfig (run.kubeconfig)")
    where.add_argument("--in-cluster", action="store_true", help="act on the cluster this pod runs in")
    p.add_argument("--once", action="store_true", help="one reconcile, then exit")
    p.add_argument("--metrics-port", type=int, help="port of /metrics, /healthz, /readyz (run.metrics_port, 9108); "
                                                    "a Kubernetes controller only")
    embedded = p.add_argument_group("the embedded cluster (no Kubernetes)")
    embedded.add_argument("--policy-file", action="append", metavar="P.yaml", type=flag_path,
                          help="ReservationPolicy manifest(s) to run (with --history; adds to run.policies)")
    embedded.add_argument("--history", dest="demand", metavar="DEMAND", type=flag_path,
                          help="the demand --policy-file's policies are replayed from")
    embedded.add_argument("--gpus", type=int, help="cluster size (run.capacity_gpus, default 128)")
    embedded.add_argument("--hours", type=_positive_int, help="replay this many hours from --now (default 24; "
                                                              "--once replays one step)")
    embedded.add_argument("--now", help="the clock's start, one of the history's sample times (ISO-8601; default: "
                                        "--hours before the history's end; with --once, the history's end, where "
                                        "plan decides)")
    embedded.add_argument("--jobs", metavar="JOBS.csv", help="replay this training job trace's last --hours instead "
                                                            "of a saturated backlog, as simulate --jobs does "
                                                            "(simulate.jobs)")
    embedded.add_argument("--timeline", metavar="FILE.csv", type=flag_path,
                          help="write one row per step and policy (the columns `headroom simulate --timeline` "
                               "writes), each step as it ends: a replay stopped partway leaves the steps it finished")
    p.set_defaults(run=cmd_run, overrides=lambda a: {
        "run.cluster": "kubernetes" if (a.kubeconfig or a.in_cluster) else None, "run.kubeconfig": a.kubeconfig,
        "run.metrics_port": a.metrics_port, "run.capacity_gpus": a.gpus, "simulate.jobs": a.jobs})


def add_plan_parser(sub) -> None:
    p = sub.add_parser("plan", help="what the controller would do now: the plan per hour with its reasons and the "
                                    "actions it would take (run.policies and their history files; changes nothing)")
    p.add_argument("--now", help="the plan's moment (ISO-8601; default: where the histories end)")
    p.add_argument("--hours", type=_positive_int, default=6, help="hours of the plan to show (default 6)")
    p.add_argument("--policy-file", action="append", metavar="P.yaml", type=flag_path,
                   help="ReservationPolicy manifest(s), with --history")
    p.add_argument("--history", dest="demand", metavar="DEMAND", type=flag_path,
                   help="the demand --policy-file's policies are read from")
    p.add_argument("--gpus", type=int, help="cluster size (run.capacity_gpus, default 128)")
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.set_defaults(run=cmd_plan, overrides=lambda a: {"run.capacity_gpus": a.gpus})


def _positive_int(text: str) -> int:
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def with_policy_files(r: RunConfig, files: list[str] | None, history: str | None) -> RunConfig:
    """run.policies plus the policies of --policy-file, whose demand is --history."""
    from forecast.history import no_history_file

    for i, p in enumerate(r.policies):  # named in the configuration, absent at start: a configuration error (one
        if why := no_history_file(p.history_file):  # that goes, or cannot be read, later is that policy's fault alone)
            raise ConfigError(None, [f"run.policies[{i}].history_file: {p.history_file}: {why} (policy "
                                     f"{p.namespace}/{p.name})"])
    if not files:
        if history:
            raise BadRequest("--history is the demand of --policy-file's policies: give --policy-file too")
        return r
    from core.policy import PolicySpec, load_manifests

    if history is None:
        raise BadRequest("--policy-file needs --history DEMAND: the embedded cluster replays its demand from a file")
    if history == "":  # it read as the working directory: "--history : is a directory, not a history file"
        raise BadRequest("--history: an empty path; name the demand file")
    if why := no_history_file(Path(history)):  # a usage error (a policy's own history failing later is its fault)
        raise BadRequest(f"--history {history}: {why}")
    if "" in files:  # it read as the working directory: "invalid configuration (): cannot read file: Is a directory"
        raise BadRequest("--policy-file: an empty path; name a ReservationPolicy manifest")
    for file in files:  # "invalid configuration (P.yaml): cannot read file: No such file or directory" named no flag
        if not Path(file).exists():
            raise BadRequest(f"--policy-file {file}: no such file")
    added = [EmbeddedPolicy(name=o["metadata"]["name"], namespace=o["metadata"]["namespace"],
                            history_file=Path(history), spec=PolicySpec.model_validate(o["spec"]))
             for f in files for o in load_manifests(f)]
    clash = duplicate_policies([*r.policies, *added])
    if clash:
        raise BadRequest(f"--policy-file{' with run.policies' if r.policies else ''}: {clash}")
    return r.model_copy(update={"policies": [*r.policies, *added]})


def _kube(cfg: RunConfig, in_cluster: bool):
    from adapters.kube import KubeCluster
    from controller.reconcile import API_REQUESTS_AT_ONCE

    if in_cluster or (cfg.kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST")):
        return KubeCluster.in_cluster(API_REQUESTS_AT_ONCE).watch()  # reads from watch caches
    return KubeCluster.from_kubeconfig(str(cfg.kubeconfig) if cfg.kubeconfig else None,
                                       requests_at_once=API_REQUESTS_AT_ONCE).watch()


def _tracking_uri(cfg: Config) -> str:
    from adapters.mlflow import resolve_uri

    return resolve_uri(cfg.run.tracking_uri or cfg.training.tracking_uri)


def shared_forecast_store(cluster, namespace: str, drift_window: int, keep_forecast_seconds: float):
    """The forecasts a Kubernetes controller issues, shared by every replica (a ConfigMap per series beside the
    Lease): realized error survives failover, and a new leader plans on the last forecast until its own refit lands.
    Kept: what realized error and drift read, the longest horizon plus the drift window and a margin, and every
    quantile the policy forecasts (the share of actuals at or below each is scored, the reserved ones among them);
    those a new leader may plan on (under `keep_forecast_seconds` old) over their whole horizon."""
    from training.realized import HORIZONS

    keep = (max(HORIZONS) + drift_window + 2) * 3600.0
    return cluster.forecast_store(namespace, keep_seconds=keep, rows=max(HORIZONS), quantiles=None,
                                  whole_seconds=keep_forecast_seconds)


def _loadable(demand) -> tuple[dict, dict]:
    """The policies' histories that can be read, and why each other cannot: that policy's fault only (the reconcile
    marks that policy), never the other policies'."""
    from forecast.history import HistoryError

    out, failed = {}, {}
    for key in demand.files:
        try:
            out[key] = demand.series(key)
        except (HistoryError, OSError) as exc:
            failed[key] = exc
    return out, failed


def _say_unusable(failed: dict) -> None:
    for key, exc in failed.items():
        log.warning("policy %s: its history cannot be used: %s", key, exc)


def _file_demand(cfg: Config, r: RunConfig):
    """`r.policies`' demand from their history files, read as every command reads a history file (history.counter: a
    cumulative counter as its increments, as simulate reads its DEMAND)."""
    from controller.demand import FileDemand

    return FileDemand({f"{p.namespace}/{p.name}": p.history_file for p in r.policies}, counter=cfg.history.counter)


def embedded(cfg: Config, r: RunConfig, start: pd.Timestamp, jobs=None, demand=None):
    """The embedded cluster holding `r.policies` (every ClusterQueue they name, and a saturated training
    backlog or the arrivals `jobs` of a job trace), and their demand replayed from their history files (`demand`:
    those already read, by the clock, so that each file is read once: a live export may change between two reads)."""
    from adapters.embedded import EmbeddedCluster
    from core.policy import manifest

    read_here = demand is None
    demand = _file_demand(cfg, r) if read_here else demand
    series, failed = _loadable(demand)  # a policy whose history cannot be read has no demand
    if read_here:  # else the clock read them and said what it could not
        _say_unusable(failed)
    cluster = EmbeddedCluster(r.capacity_gpus, [manifest(p.name, p.namespace, p.spec) for p in r.policies], series,
                              start.timestamp(), settings=cfg.simulate.world, jobs=jobs)
    return cluster, demand


def build(cfg: Config, in_cluster: bool = False, timeline: list | None = None, start: pd.Timestamp | None = None,
          once: bool = False, jobs=None, demand=None):
    """The reconciler for this configuration, on the real cluster or the embedded one (with the arrivals `jobs` of a
    job trace, if given, and the policies' `demand` the clock has read)."""
    from adapters.mlflow import Tracker
    from adapters.prometheus import PrometheusDemand
    from cli.train import settings_from_config
    from controller.forecasts import Models
    from controller.loop import BackgroundTrainer
    from controller.reconcile import Reconciler
    from training.realized import ForecastLog

    r = cfg.run
    if r.cluster == "kubernetes":
        assert r.prometheus is not None  # RunConfig requires it for a kubernetes controller
        cluster = _kube(r, in_cluster)
        demand = PrometheusDemand(r.prometheus, stopping=cluster.stopping)  # the reads under way cut at a stop
        forecasts = shared_forecast_store(cluster, r.lease.namespace, cfg.training.drift_window,
                                          r.keep_forecast_seconds)
        summary = cluster.plan_summary(r.lease.namespace)  # the cluster-wide numbers, beside the Lease
        stored_series = forecasts.series  # swept of policies gone while no controller ran (Reconciler._unlisted)
    else:
        cluster, demand = embedded(cfg, r, start, jobs, demand)
        # never swept: runs of other policy files may share run.forecast_log_dir, and this one lists none of theirs
        forecasts, summary, stored_series = ForecastLog(r.forecast_log_dir), None, None
    uri = _tracking_uri(cfg)
    trainer = BackgroundTrainer(uri, settings_from_config(cfg), beside=r.cluster == "kubernetes") \
        if r.retrain_every_seconds > 0 else None
    reconciler = Reconciler(cluster, demand, r, models=Models(uri), forecast_log=forecasts,
                            tracker=Tracker(uri), retrain=trainer, drift_factor=cfg.training.drift_factor,
                            drift_window=cfg.training.drift_window, timeline=timeline,
                            # many series: refits never hold a reconcile up; one reconcile (--once) waits for them
                            refit_beside=r.cluster == "kubernetes" and not once,
                            events_beside=r.cluster == "kubernetes",  # Events off the reconcile's path
                            statuses_beside=r.cluster == "kubernetes",  # statuses too, newest per policy
                            summary=summary, outlier_factor=cfg.history.outlier_factor,
                            stored_series=stored_series)
    if trainer is not None:  # a training whose turn comes after this replica let its Lease go is dropped
        trainer.leading = reconciler.leads
    return reconciler, cluster


def _demand_said(demand: float | None, per_gpu: float, unknown: str) -> str:
    """The latest demand in the query's unit (requests/s, ...) and in the GPUs it asks for, the reservation's unit."""
    return unknown if demand is None else f"{demand:.4g} ({demand / per_gpu:.3g} GPUs)"


def _print_state(now: pd.Timestamp, state) -> None:
    for name, ps in sorted(state.policies.items()):
        if not ps.valid:
            print(f"{now:%Y-%m-%d %H:%M} {name}: NOT PLANNED: {ps.error}")
            continue
        flags = "".join(f" {f}" for f, on in (("FALLBACK", ps.fallback), ("DEGRADED", ps.degraded)) if on)
        demand = _demand_said(ps.observed_demand, ps.demand_per_gpu, "?")
        print(f"{now:%Y-%m-%d %H:%M} {name}: demand {demand} -> reserved {ps.reserved_gpus} GPUs, "
              f"headroom {ps.headroom_gpus}, reclaimable {ps.reclaimable_gpus}, model {ps.model}{flags}")
    risk = state.headroom_at_risk
    said = ""  # HeadroomAtRisk unless covered with nothing to add: at risk, not checked, or covered with a warning
    if risk and (risk.status != "False" or risk.reason != "HeadroomCovered"):
        what = {"True": "at risk", "Unknown": "not checked"}.get(risk.status, "covered")
        said = f"\n{'':16} headroom {what} ({risk.reason}): {risk.message}"
    # the counts simulate reports: `preemptions` and, of those, `planned_preemptions`
    preempted = sum(state.preemptions_total.values())
    print(f"{'':16} cluster: slack lent {state.slack_gpus}, training holds {state.training_gpus}, "
          f"preemptions {preempted} ({state.preemptions_total.get('planned', 0)} planned){said}")


def cmd_run(cfg: Config, args) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    r = with_policy_files(cfg.run, args.policy_file, args.demand)
    cfg = cfg.model_copy(update={"run": r})
    if r.cluster == "simulated":
        if args.metrics_port is not None:
            raise BadRequest("--metrics-port: the embedded cluster serves no /metrics (a replay ends in seconds); it "
                             "is for a Kubernetes controller (--kubeconfig or --in-cluster). Use --timeline to "
                             "record a replay")
        return _replay(cfg, args)
    if args.policy_file or args.timeline or args.hours or args.now or args.jobs:
        raise BadRequest("--policy-file, --history, --timeline, --hours, --now and --jobs are for the embedded "
                         "cluster; on Kubernetes the policies are ReservationPolicy objects and the clock is the "
                         "wall clock")
    from controller.loop import Loop
    from controller.metrics import serve
    from core.errors import ClusterError, NotInstalled, Unauthorized

    try:
        reconciler, cluster = build(cfg, in_cluster=args.in_cluster, once=args.once)
    except (ClusterError, OSError) as exc:  # before the Lease: nothing written
        # what is missing, or which credentials were refused, is said by the error itself
        what = "" if isinstance(exc, (NotInstalled, Unauthorized)) else "cannot reach the cluster: "
        print(f"headroom: error: {what}{exc}", file=sys.stderr)
        return 1
    identity = os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"
    elector = cluster.leader_elector(r.lease.namespace, r.lease.name, identity, r.lease.duration_seconds)
    # one event: SIGTERM stops the loop and the client's retries, so the way out takes seconds (docs/deploy.md)
    loop = Loop(reconciler, elector, r.interval_seconds, r.lease.duration_seconds, stop=cluster.stopping)
    try:
        server = serve(reconciler.holder, r.metrics_port, loop.healthy, loop.ready, host=r.metrics_address)
    except OSError as exc:  # the port taken (another headroom run on this host): before the Lease, nothing written
        reconciler.close()
        cluster.close()
        print(f"headroom: error: --metrics-port {r.metrics_port} (run.metrics_port): cannot serve /metrics on "
              f"{r.metrics_address}:{r.metrics_port}: {exc.strerror}", file=sys.stderr)
        return 1
    stopped = _stop_on_signals(loop.stop)
    log.info("headroom run as %s: %s policies, /metrics on %s:%s", identity, "watching", r.metrics_address,
             server.server_port)
    try:
        state = loop.run(once=args.once)
    finally:
        server.shutdown()
        reconciler.close()
        cluster.close()  # its watches too: nothing reads the API server after the last reconcile
    if not args.once:
        return 0
    if stopped:  # the one reconcile asked for was cut short: what it decided may not all be applied
        print(f"headroom: stopped by {signal.Signals(stopped[0]).name}: the reconcile wrote nothing from then on; "
              "the next one acts on fresh state", file=sys.stderr)
        return 128 + stopped[0]  # as a shell reports a command a signal ended, and the embedded replay
    if state is None and loop.election_error is not None:  # no other replica leads: this one could not take part
        print(f"headroom: error: leader election: the Lease {r.lease.namespace}/{r.lease.name} could not be read or "
              f"taken: {loop.election_error}; nothing reconciled", file=sys.stderr)
        return 1
    if state is None:
        print(f"another replica holds the lease {r.lease.namespace}/{r.lease.name}: nothing reconciled")
        return 0
    _print_state(pd.Timestamp(state.last_reconcile_timestamp, unit="s", tz="UTC"), state)
    failed = {stage: n for stage, n in state.reconcile_errors_total.items() if n}
    if failed:  # the one reconcile asked for did not all go through: a script must see it (README's exit 1)
        print("headroom: error: the reconcile failed in part (" + ", ".join(f"{s}: {n}" for s, n in failed.items())
              + "); the log says what", file=sys.stderr)
        return 1
    return 0


def _stop_on_signals(stop: threading.Event) -> list[int]:
    """SIGTERM (a rollout, a drain) and SIGINT set `stop`: the reconcile under way starts no more writes, and the
    Lease is handed over. The default handlers come back at once, so a second signal ends the process there and
    then (its Lease, if still held, expires by itself). Returns the list the signal that stopped it goes to."""
    stopped: list[int] = []

    def stopping(signum, _frame) -> None:
        stopped.append(signum)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
        log.info("%s: stopping: no write starts from now on, the Lease is handed over; a second signal ends the "
                 "process at once", signal.Signals(signum).name)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stopping)
    return stopped


def _clock(demand, now: str | None, hours: int, moment: bool = False, once: bool = False) -> pd.DatetimeIndex:
    """The embedded clock: the histories' own step, from `now` (default: `hours` before the earliest end) for
    `hours`. Every policy's history must share one step. `moment`: the one moment `now` (default: the earliest end)
    that `plan` decides at, any time the histories cover. `once`: one step, at `now` (default: the earliest end, as
    `plan`), one of the samples. `demand` (FileDemand) keeps what it read for the replay."""
    from core.units import go_duration, parse_time
    from forecast.history import HistoryError, sampling_step

    loaded, failed = _loadable(demand)
    if not loaded:  # nothing can run
        if len(failed) == 1:
            raise next(iter(failed.values()))
        raise HistoryError("no policy's history can be used: " + "; ".join(f"{k}: {e}" for k, e in failed.items()))
    _say_unusable(failed)  # once, here: the clock reads every history first
    for key, repairs in demand.repairs.items():  # said once, here: the clock reads every history first
        if repairs:
            print(f"note: policy {key}: history {demand.files[key]}: {'; '.join(repairs)}", file=sys.stderr)
    series = list(loaded.values())
    step_of = {key: sampling_step(s.index) for key, s in loaded.items()}
    steps = set(step_of.values())
    if len(steps) > 1:
        each = ", ".join(f"{key} ({demand.files[key]}): {go_duration(step)}" for key, step in step_of.items())
        raise BadRequest(f"the policies' histories have different steps ({each}): the embedded clock needs one")
    step = steps.pop()
    first, last = min(s.index[0] for s in series), max(s.index[-1] for s in series)

    def longer(until: pd.Timestamp) -> BadRequest:
        span = (until - first) / pd.Timedelta(hours=1)
        return BadRequest(f"--hours {hours} is longer than the histories ({first} .. {until}: {span:.4g} hours)")

    if hours > (last - first) / pd.Timedelta(hours=1) + 1:  # before `hours` becomes a Timedelta: a huge one overflows
        raise longer(last)
    if now is not None:  # a --now past one of the histories is that policy's missing data only
        start = parse_time(now, "--now")
        if start < first or start > last:
            raise BadRequest(f"--now {start} is outside the histories ({first} .. {last})")
    else:  # by default every history covers the replay, which ends at the earliest end
        end = min(s.index[-1] for s in series)
        start = end if moment or once else end - pd.Timedelta(hours=hours) + step
        if start < first:  # no --now was given to be outside them: the replay is longer than they are
            raise longer(end)
        late = [f"{key}'s ({demand.files[key]}) starts {s.index[0]}" for key, s in loaded.items() if s.index[0] > start]
        if late:  # one that starts after the default --now is one unread
            default = "the earliest end" if moment or once else f"--hours {hours} before the earliest end"
            raise BadRequest(f"the policies' histories do not overlap at the default --now {start} ({default}): "
                             f"{'; '.join(late)}; give histories that overlap, or an --now each one covers")
    if moment:
        return pd.DatetimeIndex([start])
    for key, s in loaded.items():  # each step's demand is the sample of the interval ending then, as simulate's
        if (start - s.index[0]) % step:
            before = s.index[0] + (start - s.index[0]) // step * step
            raise BadRequest(f"--now {start} falls between the {go_duration(step)} samples of policy {key}'s history "
                             f"({demand.files[key]}): the embedded clock steps on them, each the demand of the "
                             f"interval ending there; give --now {before:%Y-%m-%dT%H:%M:%SZ} or "
                             f"{before + step:%Y-%m-%dT%H:%M:%SZ}")
    if once:
        return pd.DatetimeIndex([start])
    times = pd.date_range(start, periods=int(pd.Timedelta(hours=hours) / step), freq=step)
    if times[-1] > last:  # past the end no policy has data: its demand would be made up
        latest = start + (last + step - pd.Timedelta(hours=hours) - start) // step * step  # on the samples' clock
        if latest < first:
            raise longer(last)
        room = int((last + step - start) / pd.Timedelta(hours=1))
        fewer = f"at most {room} hour{'s' if room > 1 else ''} from there, or " if room else ""
        raise BadRequest(f"--hours {hours} from {start} runs past the histories' end {last}: give {fewer}an --now "
                         f"of {latest:%Y-%m-%dT%H:%M:%SZ} or earlier")
    return times


def _no_policies() -> int:
    print("headroom: error: the embedded cluster has no policies: add run.policies to --config (see "
          "examples/headroom.yaml) or give --policy-file P.yaml --history DEMAND", file=sys.stderr)
    return 2


def _all_in_namespace(r: RunConfig) -> None:
    """With run.namespace the controller reads the policies of that namespace alone: the embedded cluster's others
    were replayed doing nothing (an empty timeline, exit 0), so they are refused."""
    outside = [f"{p.namespace}/{p.name}" for p in r.policies if r.namespace not in (None, p.namespace)]
    if outside:
        raise BadRequest(f"run.namespace {r.namespace}: the controller reads only that namespace's policies, and "
                         f"{', '.join(outside)} is outside it (metadata.namespace, run.policies[].namespace): put it "
                         "there, or drop run.namespace")


def _some_policy_fits(r: RunConfig) -> None:
    """Nothing could act when no policy fits the cluster (one that fits runs, alone): refused, not run idle."""
    lendable = r.capacity_gpus - r.non_lendable_gpus
    if all(p.spec.too_big_for(lendable) for p in r.policies):
        raise BadRequest("no policy fits the cluster: " + "; ".join(
            f"{p.namespace}/{p.name}: {p.spec.too_big_for(lendable)} > the {lendable} GPUs it lends"
            for p in r.policies))


def _replay(cfg: Config, args) -> int:
    """The embedded cluster: the clock steps over the policies' histories at their own step."""
    r = cfg.run
    if not r.policies:
        return _no_policies()
    _all_in_namespace(r)
    _some_policy_fits(r)
    from cli.outputs import check_output_files, command_inputs, writing

    check_output_files([(args.timeline, "--timeline")], command_inputs(cfg, args))
    if args.once and args.hours:
        raise BadRequest(f"--hours {args.hours}: --once replays one step, at --now (default: where the histories "
                         "end, the moment plan decides at)")
    hours = 1 if args.once else args.hours or 24
    demand = _file_demand(cfg, r)
    times = _clock(demand, args.now, hours, once=args.once)
    jobs = None  # the job trace's last `hours` arrive from the clock's first step to its last, as simulate's days do
    if cfg.simulate.jobs is not None:
        from cli.simulate import job_arrivals

        queues = [q for p in r.policies for q in p.spec.training_cluster_queues]
        step = (times[1] - times[0]).total_seconds() if len(times) > 1 else hours * 3600
        # a replay of one step has none to its last: it takes the trace's last step, the jobs running as it starts
        jobs, _ = job_arrivals(cfg.simulate.jobs, (times[-1] - times[0]).total_seconds() or step, step,
                               r.capacity_gpus, "--hours", queues)  # notes on stderr
    timeline: list | None = [] if args.timeline else None
    reconciler, cluster = build(cfg, timeline=timeline, start=times[0], jobs=jobs, demand=demand)
    record = _TimelineFile(args.timeline) if args.timeline else None
    stopped: list[int] = []  # the signal that asked the replay to stop: it ends after the step under way
    previous = {sig: signal.signal(sig, lambda signum, _: stopped.append(signum))
                for sig in (signal.SIGTERM, signal.SIGINT)}
    done = 0
    try:
        for now in times:
            if stopped:
                break
            if done:
                cluster.advance(now.timestamp())
            state = reconciler.reconcile(now)
            cluster.admit()
            if record is not None and timeline is not None:
                with writing("--timeline", args.timeline):
                    record.add(timeline)
            # the last step's too: its totals are the replay's, those simulate reports
            if done == 0 or (now.minute == 0 and now.second == 0) or now == times[-1]:
                _print_state(now, state)
            done += 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if record is not None:
            record.close()
    if stopped:
        name = signal.Signals(stopped[0]).name
        kept = f"; the timeline {args.timeline} holds them" if record is not None and done else \
            "; no timeline written" if record is not None else ""
        print(f"headroom: stopped by {name} after {done} of {len(times)} steps{kept}", file=sys.stderr)
        return 128 + stopped[0]  # as a shell reports a command a signal ended: the replay is not complete
    if reconciler.forecasts.retrain is not None:
        reconciler.forecasts.retrain.wait()
    if record is not None:
        print(f"timeline: {args.timeline}")
    print(f"events: {len(cluster.events)} ({', '.join(sorted({e['reason'] for e in cluster.events})) or 'none'})")
    return 0


class _TimelineFile:
    """--timeline of the embedded replay, written as the replay goes, so a run stopped by a signal, an error or a
    kill leaves every step it finished: the first step's rows replace an earlier file whole (until then it is
    untouched), each later step's rows are appended whole and reach the file as its reconcile ends."""

    def __init__(self, path: str):
        self.path = path
        self.handle: int | None = None

    def add(self, rows: list) -> None:
        """Write the rows of the step just reconciled, and forget them (a long replay's timeline is not held)."""
        from controller.simulate import timeline_csv

        if self.handle is None:
            text = timeline_csv(rows)
            replace_whole(self.path, lambda draft: draft.write_text(text, encoding="utf-8"))
            self.handle = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        else:
            append_whole(self.handle, timeline_csv(rows, header=False).encode())
        rows.clear()

    def close(self) -> None:
        if self.handle is not None:
            os.close(self.handle)


def cmd_plan(cfg: Config, args) -> int:
    """One reconcile of the embedded cluster, deciding as if every policy were active and changing nothing."""
    import json

    from controller.forecasts import Models
    from controller.reconcile import Reconciler

    r = with_policy_files(cfg.run, args.policy_file, args.demand)
    if not r.policies and r.cluster == "kubernetes":
        raise BadRequest("plan decides for run.policies or --policy-file P.yaml --history DEMAND; it does not read a "
                         "cluster's ReservationPolicies (their status holds the plan: kubectl get reservationpolicies, "
                         "or headroom run --once)")
    if not r.policies:
        return _no_policies()
    _all_in_namespace(r)
    _some_policy_fits(r)  # as run refuses it: a plan of nothing, exit 0, was no answer
    if args.hours > r.horizon_hours:
        raise BadRequest(f"--hours {args.hours}: the plan covers run.horizon_hours ({r.horizon_hours}) hours")
    r = r.model_copy(update={"cluster": "simulated", "prometheus": None})
    cfg = cfg.model_copy(update={"run": r})
    demand = _file_demand(cfg, r)
    (now,) = _clock(demand, args.now, 1, moment=True)
    cluster, demand = embedded(cfg, r, now, demand=demand)
    # run's store; plan writes nothing, and a sqlite store that is not there holds no champion: not created
    store = _tracking_uri(cfg)
    uri = None if store.startswith("sqlite:///") and not Path(store.removeprefix("sqlite:///")).exists() else store
    state = Reconciler(cluster, demand, r, models=Models(uri), dry_run=True,
                       outlier_factor=cfg.history.outlier_factor).reconcile(now)
    out = {"now": now.isoformat(), "capacity_gpus": r.capacity_gpus, "policies": {},
           "actions": [describe(a) for a in state.actions], "notes": list(state.notes)}
    lendable = r.capacity_gpus - r.non_lendable_gpus
    for name, ps in sorted(state.policies.items()):
        if not ps.valid:
            out["policies"][name] = {"error": ps.error}
            continue
        h, now_step = ps.hours, ps.step
        if h is None or now_step is None:
            out["policies"][name] = {"error": ps.error or "not planned"}
            continue
        rows = []
        spec = next(p.spec for p in r.policies if f"{p.namespace}/{p.name}" == name)
        from planning.planner import WorkloadPolicy

        w = WorkloadPolicy.from_spec(name, spec)
        for k in range(min(args.hours, len(h.starts))):
            rows.append({"hour": pd.Timestamp(h.starts[k], unit="s", tz="UTC").isoformat(),
                         "reserved_gpus": int(h.reserved[k]), "headroom_gpus": int(h.headroom[k]),
                         "slack_gpus": state.slack_by_hour[k][1],
                         "source": "forecast" if h.from_forecast[k] else "fallback",
                         "reason": h.reason(k, w, lendable)})
        out["policies"][name] = {"model": ps.model, "observed_demand": ps.observed_demand,
                                 "demand_per_gpu": ps.demand_per_gpu, "reserved_now": ps.reserved_gpus,
                                 "why_now": now_step.reason, "hours": rows}
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"plan at {now:%Y-%m-%d %H:%M} UTC on the embedded {r.capacity_gpus}-GPU cluster (nothing is changed)")
    for name, p in out["policies"].items():
        if "error" in p:
            print(f"\n{name}: NOT PLANNED: {p['error']}")
            continue
        demand_now = _demand_said(p["observed_demand"], p["demand_per_gpu"], "unknown")
        print(f"\n{name}: model {p['model']}, demand now {demand_now}; now: {p['why_now']}")
        # the hour alone while the plan stays on one day; month-day and hour once it crosses midnight
        cut = slice(11, 16) if len({h["hour"][:10] for h in p["hours"]}) < 2 else slice(5, 16)
        width = cut.stop - cut.start + 1
        # slack: what the whole cluster lends training that hour, after every policy's reservation
        print(f"  {'hour':<{width}}{'reserved':>9}{'headroom':>9}{'slack':>9}  {'source':<9}reason")
        for h in p["hours"]:
            print(f"  {h['hour'][cut].replace('T', ' '):<{width}}{h['reserved_gpus']:>9}{h['headroom_gpus']:>9}"
                  f"{h['slack_gpus']:>9}  {h['source']:<9}{h['reason']}")
    print("\nwhat it would do now (as if every policy were active):")
    for line in out["actions"] or ["nothing: the cluster already holds the plan"]:
        print(f"  {line}")
    for note in out["notes"]:
        print(f"note: {note}")
    return 0


def describe(action) -> str:
    from controller.actions import Evict, Requeue, Scale, SetQuota

    match action:
        case Scale(target=t, replicas=replicas, gpus=gpus, reason=why):
            value = f"quota {gpus} GPUs" if t.kind == "ClusterQueue" else f"{replicas} replicas ({gpus} GPUs)"
            return f"scale {t.kind} {t.name} to {value}: {why}"
        case SetQuota(queue=q, gpus=gpus, reason=why):
            return f"set ClusterQueue {q} quota to {gpus} GPUs: {why}"
        case Evict(workload=w, gpus=gpus, kind=kind, reason=why):
            return f"evict Workload {w} ({gpus} GPUs, {kind}): {why}"
        case Requeue(workload=w, reason=why):
            return f"requeue Workload {w}: {why}"
    return repr(action)
