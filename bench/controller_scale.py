"""The controller at scale, on a real kube-apiserver + etcd (Kueue v0.19.2's genuine CRDs) and a real Prometheus.

For each policy count (10, 100, 1,000 ReservationPolicies; Workloads spread over 20 training ClusterQueues,
5,000 of them beside 1,000 policies) the bench builds the cluster, then runs `headroom run`'s reconciler in a
process of its own (so its memory is its own), reading through the watch cache as `headroom run` does:

  * start-up half an hour before: every series fitted in the background while reconciles go on, until every
    forecast is in and the cluster holds the plan,
  * the hour: its first reconcile (the hourly work of every series started in the background: the whole lookback
    re-read, the refit, realized error; reported on its own), then steady-state reconciles a simulated minute apart,
    each started the reconcile interval after the last one ended as `headroom run` starts them (`--back-to-back`:
    no wait, a stress test), the hourly work running beside them, and on past the hour's minutes until at least
    QUIET_RECONCILES ran with no refit beside: their wall time (the steady-state p99 is theirs, as issue 12's target
    has it; the p99 of all of them and the slowest beside the refit are reported too), the API requests each
    sends (counted in the adapter, every attempt) beside the objects it wrote; the hourly work's own requests (the
    forecast store's ConfigMaps, on a client of its own) are counted apart,
  * demand jumps: a few policies' queries multiply their demand by 4 from a given minute (PromQL `time()`), so
    demand rises above the reservation; the reclaim latency is the reconcile interval (the longest a jump waits
    to be seen) plus the time from the start of the reconcile that sees it to the chosen Workloads inactive on
    the API server (seen by a separate watch in this process),
  * the controller's resident memory (VmHWM: its peak).

Nothing runs Kueue: Workloads are admitted by writing their status as Kueue's scheduler would
(tests/servers/kueue.py). The servers come from tests/servers (scripts/install-servers.sh builds them).

    python bench/controller_scale.py              # 10, 100, 1,000 policies -> bench/results/controller-scale.json
    python bench/controller_scale.py --quick      # 10 and 100 policies, fewer Workloads, back to back (the test)
    python bench/controller_scale.py --back-to-back  # the same, each steady reconcile right after the last
    python bench/controller_scale.py --refit-first --policies 1000 --out F  # the hour's demand after the refit
    python bench/controller_scale.py --reads      # 1,000 demand reads alone: time, CPU, connections opened
    python bench/controller_scale.py --writes     # 1,000 writes of each kind alone: time, client CPU
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

INFERENCE_NAMESPACES = 10
TRAINING_QUEUES = 20
GPUS_PER_WORKLOAD = 2
DEMAND_PER_GPU = 100.0          # the NASA trace's requests per 5 min per GPU: 1-15 GPUs a policy
JUMP_FACTOR = 4
STORE_NAMESPACE = "headroom-system"  # the forecast store beside the Lease
INTERVAL_SECONDS = 15.0         # the reconcile interval the bench assumes (run.interval_seconds)
QUIET_RECONCILES = 8            # steady reconciles with no refit beside them, at least, in each row
HOUR = pd.Timestamp("1995-08-15T10:00:00Z")  # a weekday morning, a full 28-day lookback behind it
FULL = ((10, 500), (100, 2000), (1000, 5000))
QUICK = ((10, 200), (100, 500))
RESULTS = ROOT / "bench" / "results" / "controller-scale.json"


def inference_ns(i: int) -> str:
    return f"scale-inf-{i % INFERENCE_NAMESPACES}"


def training_ns(q: int) -> str:
    return f"scale-train-{q}"


def queue(q: int) -> str:
    return f"scale-train-{q}"


def jump_time(j: int) -> pd.Timestamp:
    return HOUR + pd.Timedelta(minutes=5 * (j + 1))


def policy(i: int, jump: pd.Timestamp | None) -> dict:
    from tests.servers.prometheus import METRIC

    scale = 0.5 + (i % 7) / 6  # different demand per policy, the same real shape
    query = f"{METRIC} * {scale:.4f}"
    if jump is not None:  # demand x JUMP_FACTOR from `jump` on
        query = f"{query} * (1 + {JUMP_FACTOR - 1} * (time() >= bool {int(jump.timestamp())}))"
    return {"apiVersion": "headroom.dev/v1alpha1", "kind": "ReservationPolicy",
            "metadata": {"name": f"p{i}", "namespace": inference_ns(i)},
            "spec": {"query": query, "statistic": "max",
                     "capacity": {"demandPerGpu": DEMAND_PER_GPU, "gpusPerReplica": 1},
                     "target": {"kind": "Deployment", "name": f"p{i}"},
                     "trainingClusterQueues": [queue(i % TRAINING_QUEUES), queue((i + 10) % TRAINING_QUEUES)],
                     "minGpus": 1, "leadTime": "15m", "reclaimDeadline": "5m", "mode": "active"}}


def deployment(i: int) -> dict:
    labels = {"app": f"p{i}"}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": f"p{i}", "namespace": inference_ns(i)},
            "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels}, "spec": {"containers": [{"name": "server", "image": "inference:1"}]}}}}


# ---------------------------------------------------------------------------- servers and the cluster
def _check_installed(*servers) -> None:
    from tests.servers.fixtures import NASA_TRACE

    if not NASA_TRACE.is_file():
        raise SystemExit(f"the NASA trace is not at {NASA_TRACE} (../shared/data beside the repo)")
    missing = [n for server in servers for n, p in server.binaries().items() if not p]
    if missing:
        raise SystemExit(f"{', '.join(missing)} not installed: run scripts/install-servers.sh")


def _start_prometheus(work: Path):
    """A real Prometheus holding the NASA trace, backfilled with promtool."""
    from forecast.history import load_history
    from tests.servers import prometheus as prom_servers
    from tests.servers.fixtures import NASA_TRACE

    text = work / "demand.om"
    prom_servers.write_openmetrics(load_history(NASA_TRACE), text)
    prom_servers.backfill(text, work / "blocks")
    return prom_servers.start_prometheus(work / "blocks", work / "prom")


def start_servers(work: Path):
    """etcd + kube-apiserver with headroom's and Kueue's CRDs, and Prometheus holding the NASA trace."""
    from adapters.kube import KubeCluster
    from tests.servers import kube as kube_servers
    from tests.servers import prometheus as prom_servers
    from tests.servers.fixtures import CRD_PATH, _established, crd_documents

    _check_installed(kube_servers, prom_servers)
    kube = kube_servers.start_kube(work / "kube")
    prometheus = _start_prometheus(work)
    admin = KubeCluster.from_kubeconfig(str(kube.apiserver.kubeconfig()), request_timeout=60)
    crds = crd_documents(ROOT / "deploy" / "crds")
    for crd in crds:
        admin.apply(f"{CRD_PATH}/{crd['metadata']['name']}", crd)
    kueue_crds = kube_servers.kueue_crd_documents()
    for crd in kueue_crds:
        admin.create(CRD_PATH, crd)
    _established(admin, [c["metadata"]["name"] for c in crds + kueue_crds])
    return kube, prometheus, admin


def parallel(fn, items, workers: int = 8) -> None:
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(fn, items))


def build(admin, policies: int, workloads: int, jumps: int) -> None:
    """Namespaces, 20 training ClusterQueues (one cohort) and their LocalQueues, one Deployment and one policy per
    policy, and `workloads` admitted Workloads of 2 GPUs spread over the queues."""
    from tests.servers import kueue

    namespaces = {inference_ns(i) for i in range(INFERENCE_NAMESPACES)} | {STORE_NAMESPACE}
    for ns in namespaces | {training_ns(q) for q in range(TRAINING_QUEUES)}:
        admin.apply(f"/api/v1/namespaces/{ns}", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    admin.apply(kueue.path("resourceflavors", kueue.FLAVOR), kueue.resource_flavor())
    for q in range(TRAINING_QUEUES):
        admin.apply(kueue.path("clusterqueues", queue(q)), kueue.cluster_queue(queue(q), gpus=0))
        admin.apply(kueue.path("localqueues", queue(q), training_ns(q)), kueue.local_queue(training_ns(q), queue(q)))
    parallel(lambda i: admin.create(f"/apis/apps/v1/namespaces/{inference_ns(i)}/deployments", deployment(i)),
             range(policies))
    parallel(lambda i: admin.create(f"/apis/headroom.dev/v1alpha1/namespaces/{inference_ns(i)}/reservationpolicies",
                                    policy(i, jump_time(i) if i < jumps else None)), range(policies))

    def admitted(k: int) -> None:
        q = k % TRAINING_QUEUES
        admin.create(kueue.path("workloads", namespace=training_ns(q)), kueue.workload(
            training_ns(q), f"w{k}", queue(q), gpus_per_pod=GPUS_PER_WORKLOAD, annotations={
                "headroom.dev/preemption-seconds": "60", "headroom.dev/checkpoint-interval-seconds": "1800",
                "headroom.dev/last-checkpoint": (HOUR - pd.Timedelta(minutes=20)).strftime("%Y-%m-%dT%H:%M:%SZ")}))
        kueue.admit(admin, training_ns(q), f"w{k}", queue(q))

    parallel(admitted, range(workloads))


def clean(admin) -> None:
    """Everything a row made (deletecollection per namespace; the namespaces stay)."""
    from tests.servers import kueue

    for i in range(INFERENCE_NAMESPACES):
        ns = inference_ns(i)
        for path in (f"/apis/headroom.dev/v1alpha1/namespaces/{ns}/reservationpolicies",
                     f"/apis/apps/v1/namespaces/{ns}/deployments"):
            admin._request("DELETE", path)
    admin._request("DELETE", f"/api/v1/namespaces/{STORE_NAMESPACE}/configmaps")
    for q in range(TRAINING_QUEUES):
        admin._request("DELETE", kueue.path("workloads", namespace=training_ns(q)))
    deadline = time.monotonic() + 120
    while admin.get(kueue.path("workloads")).get("items") or admin.get(
            "/apis/headroom.dev/v1alpha1/reservationpolicies").get("items"):
        if time.monotonic() > deadline:
            raise RuntimeError("the previous row's objects are still being deleted")
        time.sleep(0.5)


class Deactivations:
    """A watch of every Workload from this process: the wall time each one became inactive on the API server."""

    def __init__(self, kubeconfig: str):
        from adapters.kube import WATCHED, Informer, KubeCluster
        from tests.servers import kueue

        self.cluster = KubeCluster.from_kubeconfig(kubeconfig, request_timeout=60)
        self.at: dict[str, float] = {}
        self.kueue = ThreadPoolExecutor(2)
        self.closing = False
        outer = self

        class Watch(Informer):
            def put(self, obj, deleted=False):
                key = "{}/{}".format(*Informer.key(obj))
                inactive = not deleted and (obj.get("spec") or {}).get("active", True) is False
                if inactive and key not in outer.at:
                    outer.at[key] = time.time()
                if inactive and (obj.get("status") or {}).get("admission") and not outer.closing:
                    # Kueue: the pods stop and the quota is released a moment later
                    outer.kueue.submit(kueue.complete_eviction, outer.cluster, *Informer.key(obj))
                super().put(obj, deleted)

        self.informer = Watch(self.cluster, WATCHED["workloads"]).start()
        while self.informer.items() is None:
            time.sleep(0.05)
        self.at.clear()  # what the first LIST held is not a deactivation seen

    def close(self) -> None:
        self.closing = True
        self.informer.stop()
        self.kueue.shutdown(wait=True)
        self.cluster.close()


# ---------------------------------------------------------------------------- the controller's process
def controller(args: dict) -> dict:
    """`headroom run`'s reconciler on the cluster; runs in its own process (see main)."""
    import logging

    from adapters.kube import KubeCluster
    from adapters.prometheus import PrometheusDemand
    from controller import heap
    from controller.actions import Evict
    from controller.reconcile import Reconciler
    from core.settings import PrometheusServer, RunConfig

    logging.basicConfig(level=logging.ERROR)
    cluster = KubeCluster.from_kubeconfig(args["kubeconfig"], request_timeout=30).watch(timeout=120)
    server = PrometheusServer(url=args["prometheus"], step="5m", timeout_seconds=30, retries=2)
    cfg = RunConfig(cluster="kubernetes", prometheus=server, capacity_gpus=args["capacity"],
                    retrain_every_seconds=0, interval_seconds=INTERVAL_SECONDS)
    # the forecast store on a client of its own: its requests (the hourly work's, beside the reconciles) are counted
    # apart from the reconcile's
    beside = KubeCluster.from_kubeconfig(args["kubeconfig"], request_timeout=30)
    store = beside.forecast_store(STORE_NAMESPACE, keep_seconds=50 * 3600, rows=24)
    r = Reconciler(cluster, PrometheusDemand(server), cfg, forecast_log=store, refit_beside=True,  # as `headroom run`
                   events_beside=True, statuses_beside=True, summary=cluster.plan_summary(STORE_NAMESPACE))

    profiles = os.environ.get("HEADROOM_SCALE_PROFILE")  # a directory: each reconcile's cProfile, for a closer look
    collecting = {"since": 0.0, "seconds": 0.0}  # the interpreter's garbage collections, every thread's

    def collected(phase: str, info: dict) -> None:
        if phase == "start":
            collecting["since"] = time.perf_counter()
        else:
            collecting["seconds"] += time.perf_counter() - collecting["since"]
    gc.callbacks.append(collected)
    heap.full_collections_between_reconciles()  # as controller/loop.py runs the reconciles

    def one(now: pd.Timestamp):
        before = dict(cluster.requests)
        refits_before = r.forecasts.refitting()
        collecting["seconds"] = 0.0
        started, wall = time.monotonic(), time.time()
        if profiles:
            import cProfile

            with cProfile.Profile() as profile:
                state = r.reconcile(now)
            profile.dump_stats(Path(profiles) / f"{args['capacity']}-{now:%H%M%S}-{wall:.0f}.prof")
        else:
            state = r.reconcile(now)
        evicted = [a.workload for a in state.actions if isinstance(a, Evict)]
        sent = {m: n - before.get(m, 0) for m, n in cluster.requests.items()}
        refits_after = r.forecasts.refitting()
        return {"now": now.isoformat(), "seconds": time.monotonic() - started, "started": wall,
                "requests": sum(sent.values()), "writes": sum(n for m, n in sent.items() if m != "GET"),
                "actions": len(state.actions), "refitting": refits_after, "gc_seconds": collecting["seconds"],
                # the hourly refit running beside this reconcile, or taken up by it: not a steady-state reconcile
                "refit_beside": refits_before > 0 or refits_after > 0,
                # the statuses written beside since the last reconcile began: seconds from their reconcile's end
                "status_lags": [round(x, 3) for x in r.status_lags()],
                "evicted": evicted, "errors": dict(state.reconcile_errors_total),
                "fallback": sum(ps.fallback for ps in state.policies.values() if ps.valid),
                "valid": sum(ps.valid for ps in state.policies.values())}

    # Start-up, the hour before: every series fitted in the background while reconciles go on (a simulated
    # 20 s apart), until every forecast is in and the cluster holds the plan.
    started, t, warm = time.monotonic(), HOUR - pd.Timedelta(minutes=30), []
    while True:
        warm.append(one(t))
        heap.collect()
        if warm[-1]["refitting"] == 0 and warm[-1]["fallback"] == 0 and len(warm) > 2:
            break
        if time.monotonic() - started > 1800:
            raise RuntimeError(f"the first forecasts were not in after 30 minutes: {warm[-1]}")
        t += pd.Timedelta(seconds=20)
        time.sleep(0.5)
    startup = time.monotonic() - started
    # The hour: its first reconcile starts the hourly refit of every series beside the reconciles a simulated
    # minute apart; the demand jumps fall inside it.
    refit_started = time.monotonic()
    refit_done = None
    hourly_work_before = sum(beside.requests.values())  # the hourly work's client: its requests in the hour, gaps too
    steady, between = [], []  # the steady reconciles, the full collections after them

    def minute(m: int) -> None:
        nonlocal refit_done
        steady.append(one(HOUR + pd.Timedelta(minutes=m)))
        if refit_done is None and steady[-1]["refitting"] == 0 and len(steady) > 1:
            refit_done = time.monotonic() - refit_started
        between.append(heap.collect())  # as headroom run collects, and then waits its interval (controller/loop.py)

    first = 0
    if args["refit_first"]:  # the hour's first minute until the refit is done: the hour's demand meets no refit
        minute(0)
        while refit_done is None:
            time.sleep(max(args["pace"], 1.0))
            minute(0)
        first = 1
    for m in range(first, args["minutes"] + 1):
        minute(m)
        time.sleep(args["pace"])
    while refit_done is None:  # the refit outlasted the reconciles: wait for it (and keep reconciling)
        minute(args["minutes"])
        time.sleep(max(args["pace"], 1.0))
    # and on, inside the hour, until enough reconciles ran with no refit beside them
    m = args["minutes"]
    while sum(not s["refit_beside"] for s in steady[1:]) < QUIET_RECONCILES:
        m += 1
        if m >= 60:
            raise RuntimeError(f"fewer than {QUIET_RECONCILES} reconciles without a refit beside in the hour")
        minute(m)
        time.sleep(args["pace"])
    hourly_work_requests = sum(beside.requests.values()) - hourly_work_before
    rss, peak, children = _memory()
    r.close()  # the Events still queued beside are sent
    cluster.close()
    beside.close()
    return {"warm": warm, "startup_seconds": startup, "refit_seconds": refit_done, "steady": steady,
            "collections_between": between, "hourly_work_requests": hourly_work_requests,
            "rss_bytes": rss, "peak_rss_bytes": peak, "children_rss_bytes": children}


def _memory() -> tuple[int, int, int]:
    """(resident, peak resident) bytes of this process and the processes it started (the hourly work's fitting
    process): the controller's memory is theirs together; and the resident bytes of those it started alone."""
    pids = ["self"] + [c for task in Path("/proc/self/task").iterdir()
                       for c in (task / "children").read_text().split()]
    rss = peak = children = 0
    for pid in pids:
        try:
            lines = Path(f"/proc/{pid}/status").read_text().splitlines()
        except FileNotFoundError:  # ended since
            continue
        peak += int(next(line.split()[1] for line in lines if line.startswith("VmHWM:"))) * 1024
        resident = int(next(line.split()[1] for line in lines if line.startswith("VmRSS:"))) * 1024
        rss += resident
        children += resident if pid != "self" else 0
    return rss, peak, children


# ---------------------------------------------------------------------------- one row
def row(kube, prometheus, admin, policies: int, workloads: int, jumps: int, minutes: int, pace: float,
        refit_first: bool = False) -> dict:
    clean(admin)
    started = time.monotonic()
    build(admin, policies, workloads, jumps)
    built = time.monotonic() - started
    watch = Deactivations(str(kube.apiserver.kubeconfig()))
    # the training Workloads hold every GPU the policies do not reserve: any demand jump takes GPUs back
    capacity = workloads * GPUS_PER_WORKLOAD + policies
    args = {"kubeconfig": str(kube.apiserver.kubeconfig()), "prometheus": prometheus.url, "capacity": capacity,
            "minutes": minutes, "pace": pace, "refit_first": refit_first}
    done = subprocess.run([sys.executable, __file__, "--controller", json.dumps(args)], capture_output=True,
                          text=True, cwd=ROOT, env={**os.environ, "MALLOC_ARENA_MAX": "2"})  # as deploy/base sets
    if done.returncode != 0:
        raise RuntimeError(f"the controller failed:\n{done.stderr[-4000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    if os.environ.get("HEADROOM_SCALE_RAW"):  # every reconcile, for a closer look
        Path(os.environ["HEADROOM_SCALE_RAW"]).joinpath(f"controller-{policies}.json").write_text(json.dumps(out))
    time.sleep(1)  # the last deactivations reach the watch
    watch.close()
    steady = out["steady"]
    # the reconciles a minute apart inside the hour; the hour's first one (every policy's next hours roll forward,
    # the hourly work started) is reported on its own. Steady state, as the target has it: no refit beside or taken
    # up; the ones beside the refit are held to the interval (and reported with the rest in the *_with_refit_* p99)
    hourly, rest = steady[0], steady[1:]
    quiet = np.array([s["seconds"] for s in rest if not s["refit_beside"]])
    seconds = np.array([s["seconds"] for s in rest])
    requests = np.array([s["requests"] for s in rest])
    changed = np.array([s["writes"] for s in rest])  # objects written (status, scale, quota, eviction, event)
    reclaims = []
    for j in range(jumps):  # from the start of the reconcile that first sees the jump to the victims inactive
        after = [s for s in steady if jump_time(j) <= pd.Timestamp(s["now"]) <= jump_time(j) + pd.Timedelta(minutes=2)]
        victims = [w for s in after for w in s["evicted"]]
        landed = [watch.at[w] for w in victims if w in watch.at]
        if after and landed:
            reclaims.append(INTERVAL_SECONDS + max(landed) - after[0]["started"])
    errors: dict[str, int] = {}
    for s in [*out["warm"], *steady]:
        for k, v in s["errors"].items():
            errors[k] = max(errors.get(k, 0), v)
    during = [s["seconds"] for s in rest if s["refit_beside"]]
    jumps_beside_refit = sum(any(s["refit_beside"] for s in rest if s["now"] == jump_time(j).isoformat())
                             for j in range(jumps))
    lags = [x for s in rest for x in s["status_lags"]]  # statuses written beside (the hour's first one's included)
    return {"policies": policies, "workloads": workloads, "training_cluster_queues": TRAINING_QUEUES,
            "reconcile_p99_seconds": round(float(np.percentile(quiet, 99)), 3),
            "reconcile_median_seconds": round(float(np.median(quiet)), 3),
            "reconcile_p99_with_refit_seconds": round(float(np.percentile(seconds, 99)), 3),
            "reconcile_median_with_refit_seconds": round(float(np.median(seconds)), 3),
            "api_requests_per_reconcile": round(float(requests.mean()), 1),
            "api_requests_max": int(requests.max()),
            "changed_objects_per_reconcile": round(float(changed.mean()), 1),
            "requests_beyond_2_per_changed_max": int((requests - 2 * changed).max()),
            "rss_bytes": out["rss_bytes"], "peak_rss_bytes": out["peak_rss_bytes"],
            "fitting_process_rss_bytes": out["children_rss_bytes"],
            "reclaim_p99_seconds": round(float(np.percentile(reclaims, 99)), 3) if reclaims else None,
            "reclaims_measured": len(reclaims), "jumps": jumps,
            # from the end of a reconcile to each of its statuses written, beside the next reconciles
            "status_lag_p99_seconds": round(float(np.percentile(lags, 99)), 3) if lags else None,
            "status_lag_max_seconds": round(max(lags), 3) if lags else None, "statuses_written_beside": len(lags),
            "hourly_refit_seconds": round(out["refit_seconds"], 1),
            "top_of_hour_reconcile_seconds": round(hourly["seconds"], 3),
            "top_of_hour_requests": hourly["requests"], "top_of_hour_writes": hourly["writes"],
            "hourly_work_requests": out["hourly_work_requests"],
            "reconcile_max_during_refit_seconds": round(max(during), 3) if during else None,
            "reconciles_during_refit": len(during), "reconciles_without_refit": len(quiet),
            "jumps_seen_during_refit": jumps_beside_refit,
            "startup_seconds": round(out["startup_seconds"], 1),
            "startup_evictions": sum(len(s["evicted"]) for s in out["warm"]),
            "steady_reconciles": len(rest), "interval_seconds": INTERVAL_SECONDS, "pace_seconds": pace,
            "refit_first": refit_first,
            # the garbage collections: inside the steady reconciles (the interpreter's, any thread's), and the full
            # one headroom run makes after each reconcile, in the interval
            "gc_in_reconcile_max_seconds": round(max(s["gc_seconds"] for s in rest), 3),
            "gc_between_reconciles_median_seconds": round(float(np.median(out["collections_between"])), 3),
            "policies_in_fallback": steady[-1]["fallback"], "reconcile_errors": errors,
            "build_seconds": round(built, 1)}


def table(rows: list[dict]) -> str:
    head = ("| policies | Workloads | steady reconcile p99 (s) | median (s) | p99 with the refit beside (s) | API "
            "requests / reconcile | changed objects / reconcile | controller RSS (MiB) | reclaim p99 (s) | hourly "
            "refit, beside (s) |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
    lines = [f"| {r['policies']:,} | {r['workloads']:,} | {r['reconcile_p99_seconds']:.2f} | "
             f"{r['reconcile_median_seconds']:.2f} | {r['reconcile_p99_with_refit_seconds']:.2f} | "
             f"{r['api_requests_per_reconcile']:.1f} | {r['changed_objects_per_reconcile']:.1f} | "
             f"{r['rss_bytes'] / 2**20:.0f} | "
             f"{'n/a' if r['reclaim_p99_seconds'] is None else round(r['reclaim_p99_seconds'], 1)} | "
             f"{r['hourly_refit_seconds']:.0f} |" for r in rows]
    return head + "\n".join(lines) + "\n"


def run(counts, minutes: int = 20, jumps: int = 3, out: Path | None = RESULTS, work: Path | None = None,
        pace: float = INTERVAL_SECONDS, refit_first: bool = False) -> list[dict]:
    """One row per (policies, Workloads); `pace`: seconds from the end of one steady reconcile to the start of the
    next (0: back to back); `refit_first`: the hour's minutes start once the hourly refit is done."""
    work = Path(work or tempfile.mkdtemp(prefix="headroom-scale-"))
    kube, prometheus, admin = start_servers(work)
    rows = []
    try:
        for policies, workloads in counts:
            rows.append(row(kube, prometheus, admin, policies, workloads, min(jumps, policies), minutes, pace,
                            refit_first))
            print(json.dumps(rows[-1]), flush=True)
    finally:
        admin.close()
        prometheus.stop()
        kube.stop()
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"cores": os.cpu_count(), "rows": rows}, indent=2) + "\n")
    return rows


# ---------------------------------------------------------------------------- the demand reads alone
def reads(count: int = 1000) -> list[dict]:
    """`count` demand reads of a steady reconcile's size (the last 15 minutes, each policy's query scaled
    differently) on a real Prometheus holding the NASA trace, from 1 thread and from 8 as the reconcile reads: their
    wall time, the reading process's CPU, and the connections Prometheus accepted (its own counter)."""
    from adapters.prometheus import PrometheusDemand
    from core.settings import PrometheusServer
    from tests.servers import prometheus as prom_servers
    from tests.servers.prometheus import connections_accepted

    _check_installed(prom_servers)
    prometheus = _start_prometheus(Path(tempfile.mkdtemp(prefix="headroom-reads-")))

    try:
        demand = PrometheusDemand(PrometheusServer(url=prometheus.url, step="5m", timeout_seconds=30, retries=2))
        end = HOUR + pd.Timedelta(minutes=5)

        def asked(i: int) -> tuple:
            return f"p{i}", policy(i, None)["spec"]["query"], end - pd.Timedelta(minutes=15), end

        def read(i: int):
            return demand.read(*asked(i))

        def read_part(part: list[int]):  # as the reconcile reads: 8 parts side by side, each part's reads together
            got = demand.read_many([asked(i) for i in part])
            assert not any(isinstance(g, Exception) for g in got), got
            return got

        list(map(read, range(20)))  # warm
        out = []
        for threads, together in ((1, False), (8, False), (8, True)):
            before = connections_accepted(prometheus.url)
            started, cpu = time.perf_counter(), time.process_time()
            with ThreadPoolExecutor(threads) as pool:
                if together:
                    list(pool.map(read_part, [list(range(k, count, threads)) for k in range(threads)]))
                else:
                    list(pool.map(read, range(count)))
            out.append({"threads": threads, "together": together, "reads": count,
                        "seconds": round(time.perf_counter() - started, 3),
                        "cpu_ms_per_read": round((time.process_time() - cpu) * 1000 / count, 3),
                        # the counter's own read is one
                        "connections_opened": connections_accepted(prometheus.url) - before - 1})
        return out
    finally:
        prometheus.stop()


def writes(count: int = 1000, objects: int = 200) -> list[dict]:
    """What one write costs on the real API server: `count` writes of each kind a ramp reconcile makes (a
    Deployment's scale, a policy's status with and without its hours ahead, an Event) spread over `objects`
    Deployments and policies (twice as many policies: those without hours ahead apart), from 8 threads as the
    reconcile writes, through the controller's own client and watch caches: their wall time and the writing
    process's CPU (the rest is the API server's and etcd's)."""
    from adapters.kube import KubeCluster
    from controller.reconcile import STATUS_HOURS
    from core.objects import Condition, ObjectRef, PolicyStatus
    from tests.servers import kube as kube_servers
    from tests.servers.fixtures import CRD_PATH, _established, crd_documents

    _check_installed(kube_servers)
    kube = kube_servers.start_kube(Path(tempfile.mkdtemp(prefix="headroom-writes-")) / "kube")
    try:
        admin = KubeCluster.from_kubeconfig(str(kube.apiserver.kubeconfig()), request_timeout=60)
        crds = crd_documents(ROOT / "deploy" / "crds")
        for crd in crds:
            admin.apply(f"{CRD_PATH}/{crd['metadata']['name']}", crd)
        _established(admin, [c["metadata"]["name"] for c in crds])
        for ns in sorted({inference_ns(i) for i in range(objects)}):
            admin.apply(f"/api/v1/namespaces/{ns}", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        parallel(lambda i: admin.create(f"/apis/apps/v1/namespaces/{inference_ns(i)}/deployments", deployment(i)),
                 range(objects))
        parallel(lambda i: admin.create(f"/apis/headroom.dev/v1alpha1/namespaces/{inference_ns(i)}/"
                                        "reservationpolicies", policy(i, None)), range(2 * objects))
        cluster = KubeCluster.from_kubeconfig(str(kube.apiserver.kubeconfig()), request_timeout=60).watch()
        for ns in sorted({inference_ns(i) for i in range(objects)}):
            cluster._target_informer("Deployment", ns)
        time.sleep(3)  # the Deployments' caches listed
        conditions = (Condition("Ready", "True", "Planned", "planned"), Condition("HeadroomAtRisk", "False", "Enough"))
        ahead = tuple({"hour": (HOUR + pd.Timedelta(hours=h)).strftime("%Y-%m-%dT%H:%M:%SZ"), "reservedGpus": 3,
                       "headroomGpus": 1} for h in range(STATUS_HOURS))

        def status(value: int, hours: tuple) -> PolicyStatus:
            return PolicyStatus(value, 1, conditions, plan_id="plan", forecast_demand=1.5, observed_generation=1,
                                model="snaive168", next_hours=hours, realized_error={"1h": 0.1})

        def write(kind: str, i: int, value: int) -> None:
            """The `kind` write to object i, setting `value` (each round a new one: every write changes something)."""
            ns, name = inference_ns(i), f"p{i}"
            if kind == "scale":
                cluster.scale_deployment(ns, name, value)
            elif kind == "event":
                cluster.emit_event(ObjectRef("headroom.dev/v1alpha1", "ReservationPolicy", name, ns),
                                   "ReservationChanged", f"{value - 1} -> {value} GPUs")
            elif kind == "status":
                cluster.patch_policy_status(ns, name, status(value, ahead))
            else:  # policies of their own: every write the same size
                cluster.patch_policy_status(inference_ns(i + objects), f"p{i + objects}", status(value, ()))

        out = []
        kinds = ("scale", "status", "status, no hours ahead", "event")
        for round_, kind in enumerate(kinds * 2):
            started, cpu = time.perf_counter(), time.process_time()
            parallel(lambda k, kind=kind, base=10 * (round_ + 1): write(kind, k % objects, base + k // objects),
                     range(count))
            seconds = time.perf_counter() - started
            out.append({"kind": kind, "writes": count, "seconds": round(seconds, 3),
                        "writes_per_second": round(count / seconds),
                        "client_cpu_ms_per_write": round((time.process_time() - cpu) * 1000 / count, 3)})
        cluster.close()
        return out
    finally:
        kube.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true",
                   help="10 and 100 policies, fewer Workloads and reconciles, back to back")
    p.add_argument("--back-to-back", action="store_true",
                   help="each steady reconcile right after the last (a stress test; default: the interval between)")
    p.add_argument("--refit-first", action="store_true",
                   help="hold the hour's first minute until the hourly refit is done: every demand change of the "
                        "hour (the morning ramp's included) meets a controller with no refit beside it")
    p.add_argument("--policies", type=int, nargs="+", help="only the rows of these policy counts")
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--reads", action="store_true", help="time 1,000 demand reads on a real Prometheus alone")
    p.add_argument("--writes", action="store_true", help="time 1,000 writes of each kind on a real API server alone")
    p.add_argument("--controller", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.reads or a.writes:
        for r in reads() if a.reads else writes():
            print(json.dumps(r))
        return 0
    if a.controller:
        print(json.dumps(controller(json.loads(a.controller))))
        return 0
    counts = [(n, w) for n, w in (QUICK if a.quick else FULL) if not a.policies or n in a.policies]
    rows = run(counts, minutes=12 if a.quick else 20, jumps=2 if a.quick else 3, out=a.out,
               pace=0.0 if a.quick or a.back_to_back else INTERVAL_SECONDS, refit_first=a.refit_first)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
