"""`headroom run` and `headroom plan`: the controller on a Kubernetes cluster or on the embedded one."""
from __future__ import annotations

import logging
import os
import signal
import socket
import sys

import pandas as pd

from adapters.embedded import InMemoryCluster
from adapters.prometheus import PrometheusDemand
from controller.demand import FileDemand
from controller.forecasts import Models
from controller.loop import BackgroundTrainer, Loop
from controller.reconcile import Reconciler, _utc
from controller.state import ControllerState
from core.cluster import Cluster
from core.errors import ClusterError
from core.settings import RunConfig

log = logging.getLogger(__name__)


def embedded_policies(cfg: RunConfig) -> list[dict]:
    """The config's policies as ReservationPolicy objects for the embedded cluster."""
    return [{"apiVersion": "headroom.dev/v1alpha1", "kind": "ReservationPolicy",
             "metadata": {"name": p.name, "namespace": p.namespace, "generation": 1},
             "spec": p.spec.model_dump(by_alias=True, exclude_none=True)} for p in cfg.policies]


def add_parser(sub) -> None:
    p = sub.add_parser("run", help="the controller: forecast, plan and act on the cluster in a loop")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--kubeconfig", help="act on the Kubernetes cluster of this kubeconfig (run.kubeconfig)")
    where.add_argument("--in-cluster", action="store_true", help="act on the cluster this pod runs in")
    p.add_argument("--once", action="store_true", help="one reconcile, then exit")
    p.add_argument("--hours", type=int, help="simulated cluster only: replay this many hours from --now, fast")
    p.add_argument("--now", help="simulated cluster only: the clock's start (ISO-8601; default: the history's end - --hours)")
    p.add_argument("--metrics-port", type=int, help="port of /metrics, /healthz, /readyz (run.metrics_port, 9108)")
    p.set_defaults(run=cmd_run, overrides=lambda a: {
        "run.cluster": "kubernetes" if (a.kubeconfig or a.in_cluster) else None, "run.kubeconfig": a.kubeconfig,
        "run.metrics_port": a.metrics_port})


def add_plan_parser(sub) -> None:
    p = sub.add_parser("plan", help="what the controller would do now: the plan per hour with its reasons "
                                    "(run.policies and their history files; changes nothing)")
    p.add_argument("--now", help="the plan's moment (ISO-8601; default: where the histories end)")
    p.add_argument("--hours", type=int, default=6, help="hours of the plan to show (default 6)")
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.set_defaults(run=cmd_plan, overrides=lambda a: {})


def _kube(cfg: RunConfig, in_cluster: bool):
    from adapters.kube import KubeCluster

    if in_cluster or (cfg.kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST")):
        return KubeCluster.in_cluster()
    return KubeCluster.from_kubeconfig(str(cfg.kubeconfig) if cfg.kubeconfig else None)


def _tracking_uri(cfg) -> str:
    from adapters.mlflow import resolve_uri

    return resolve_uri(cfg.run.tracking_uri or cfg.training.tracking_uri)


def embedded(r: RunConfig) -> tuple[InMemoryCluster, FileDemand]:
    """The embedded cluster holding `run.policies` (every ClusterQueue they name, at quota 0, and a
    saturated training backlog), and their demand replayed from their history files."""
    cluster = InMemoryCluster(policies=embedded_policies(r), backlog_gpus=r.capacity_gpus)
    for p in r.policies:
        target_queue = p.spec.target.name if p.spec.target.kind == "ClusterQueue" else None
        for q in {*p.spec.training_cluster_queues, target_queue, p.spec.inference_cluster_queue} - {None}:
            cluster.quotas.setdefault(q, 0)
    return cluster, FileDemand({f"{p.namespace}/{p.name}": p.history_file for p in r.policies})


def build(cfg, in_cluster: bool = False) -> tuple[Reconciler, Cluster]:
    """The reconciler for this configuration, on the real cluster or the embedded one."""
    from adapters.mlflow import Tracker
    from cli.train import settings_from_config
    from training.realized import ForecastLog

    r = cfg.run
    if r.cluster == "kubernetes":
        cluster, demand = _kube(r, in_cluster), PrometheusDemand(r.prometheus)
    else:
        cluster, demand = embedded(r)
    uri = _tracking_uri(cfg)
    trainer = BackgroundTrainer(uri, settings_from_config(cfg)) if r.retrain_every_seconds > 0 else None
    reconciler = Reconciler(cluster, demand, r, models=Models(uri), forecast_log=ForecastLog(r.forecast_log_dir),
                            tracker=Tracker(uri), retrain=trainer, drift_factor=cfg.training.drift_factor,
                            drift_window=cfg.training.drift_window)
    return reconciler, cluster


def _print_state(now: pd.Timestamp, state: ControllerState) -> None:
    for name, ps in sorted(state.policies.items()):
        if not ps.valid:
            print(f"{now:%Y-%m-%d %H:%M} {name}: INVALID: {ps.error}")
            continue
        flags = "".join(f" {f}" for f, on in (("FALLBACK", ps.fallback), ("DEGRADED", ps.degraded)) if on)
        demand = f"{ps.observed_demand:.4g}" if ps.observed_demand is not None else "?"
        print(f"{now:%Y-%m-%d %H:%M} {name}: demand {demand} -> reserved {ps.reserved_gpus} GPUs, "
              f"headroom {ps.headroom_gpus}, reclaimable {ps.reclaimable_gpus}, model {ps.model}{flags}")
    print(f"{'':16} cluster: slack lent {state.slack_gpus}, training holds {state.training_gpus}, "
          f"preemptions {dict(state.preemptions_total)}")


def cmd_run(cfg, args) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        reconciler, cluster = build(cfg, in_cluster=args.in_cluster)
    except (ClusterError, OSError) as exc:
        print(f"headroom: error: cannot reach the cluster: {exc}", file=sys.stderr)
        return 1
    r = cfg.run
    if r.cluster == "simulated":
        return _replay(reconciler, cluster, r, args)
    from controller.metrics import serve

    identity = os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"
    elector = cluster.leader_elector(r.lease.namespace, r.lease.name, identity, r.lease.duration_seconds)
    loop = Loop(reconciler, elector, r.interval_seconds, r.lease.duration_seconds)
    server = serve(reconciler.holder, r.metrics_port, loop.healthy, loop.ready)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: loop.stop.set())
    log.info("headroom run as %s: %s policies, /metrics on :%s", identity, "watching", server.server_port)
    try:
        loop.run(once=args.once)
    finally:
        server.shutdown()
    return 0


def _start(r: RunConfig, now: str | None, hours_before_end: int = 0) -> pd.Timestamp:
    """`now` as given, else `hours_before_end` before the earliest end of the policies' histories."""
    if now:
        return _utc(now)
    from forecast.history import load_history

    return min(load_history(p.history_file).index.max() for p in r.policies) - pd.Timedelta(hours=hours_before_end)


def _no_policies() -> int:
    print("headroom: error: the simulated cluster has no policies: add run.policies to --config "
          "(see examples/headroom.yaml)", file=sys.stderr)
    return 2


def cmd_plan(cfg, args) -> int:
    """One reconcile of the embedded cluster with every policy forecast-only: print, write nothing."""
    import json

    r = cfg.run
    if not r.policies:
        return _no_policies()
    looking = r.model_copy(update={"cluster": "simulated", "prometheus": None, "policies": [
        p.model_copy(update={"spec": p.spec.model_copy(update={"mode": "forecast-only"})}) for p in r.policies]})
    cluster, demand = embedded(looking)
    uri = r.tracking_uri or cfg.training.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
    now = _start(r, args.now)
    state = Reconciler(cluster, demand, looking, models=Models(uri)).reconcile(now)
    out = {"now": now.isoformat(), "policies": {}}
    for name, ps in sorted(state.policies.items()):
        if not ps.valid:
            out["policies"][name] = {"error": ps.error}
            continue
        slack = {h.hour: h.slack_gpus for h in ps.plan.hours}
        out["policies"][name] = {
            "model": ps.model, "observed_demand": ps.observed_demand, "notes": list(ps.plan.notes),
            "hours": [{"hour": x.hour.isoformat(), "reserved_gpus": x.gpus, "headroom_gpus": x.headroom_gpus,
                       "slack_gpus": slack[x.hour], "source": x.source, "reason": x.reason}
                      for x in ps.plan.reservations if x.workload == name][:args.hours]}
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"plan at {now:%Y-%m-%d %H:%M} UTC (forecast-only: nothing is changed)")
    for name, p in out["policies"].items():
        if "error" in p:
            print(f"\n{name}: INVALID: {p['error']}")
            continue
        demand_now = f"{p['observed_demand']:.4g}" if p["observed_demand"] is not None else "unknown"
        print(f"\n{name}: model {p['model']}, demand now {demand_now}")
        print(f"  {'hour':<6}{'reserved':>9}{'headroom':>9}{'slack':>7}  {'source':<9}reason")
        for h in p["hours"]:
            print(f"  {h['hour'][11:16]:<6}{h['reserved_gpus']:>9}{h['headroom_gpus']:>9}{h['slack_gpus']:>7}  "
                  f"{h['source']:<9}{h['reason']}")
        for note in p["notes"]:
            print(f"  note: {note}")
    return 0


def _replay(reconciler: Reconciler, cluster: InMemoryCluster, r: RunConfig, args) -> int:
    """The embedded cluster: the clock runs over the policies' history files, `interval` per step."""
    if not r.policies:
        return _no_policies()
    hours = args.hours if args.hours is not None else (0 if args.once else 24)
    start = _start(r, args.now, hours)
    steps = max(int(hours * 3600 / r.interval_seconds), 1)
    for i in range(steps):
        now = start + pd.Timedelta(seconds=i * r.interval_seconds)
        cluster.top_up_backlog(now.to_pydatetime())
        cluster.admit(now.to_pydatetime())
        state = reconciler.reconcile(now)
        if i == 0 or now.minute == 0 and now.second == 0:
            _print_state(now, state)
    if reconciler.retrain is not None:
        reconciler.retrain.wait()
    print(f"events: {len(cluster.events)} ({', '.join(sorted({e['reason'] for e in cluster.events})) or 'none'})")
    return 0
