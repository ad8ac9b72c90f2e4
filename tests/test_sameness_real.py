"""One policy from what-if to a real cluster: the reconciler `headroom run` builds for Kubernetes (cli/run.py `build`),
reading demand from a real Prometheus and acting on a real kube-apiserver + etcd with Kueue v0.19.2's CRDs, writes
the timeline `headroom simulate` writes for the same trace segment, policy and clock, byte for byte.

The world around the controller (inference replicas warming up, Kueue admitting training into the lent quota, jobs
checkpointing, stopping and finishing) is simulate's own model, adapters.embedded.EmbeddedCluster, mirrored onto the
API server step by step (tests/servers/mirror.py); the controller reads and writes only through the API server and
Prometheus. Prometheus holds the whole NASA HTTP 1995 trace; the controller never reads past its clock."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml
from pydantic import BaseModel

from cli.config import load_config
from cli.main import main
from cli.run import build, embedded, with_policy_files
from controller.simulate import TIMELINE_COLUMNS, demand_per_gpu, write_timeline
from core.objects import TargetRef
from core.policy import API_VERSION, KIND, PolicySpec, load_manifests
from forecast.history import load_history
from tests.servers.fixtures import crd_documents
from tests.servers.mirror import Mirror, replay
from tests.servers.prometheus import METRIC

NS, NAME, QUEUE = "sameness", "inference", "sameness-training"
END = pd.Timestamp("1995-08-31T13:55:00Z")  # a Thursday's late-morning ramp; the 28-day lookback has no gap
HOURS, GPUS = 4, 32


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    """The controller keeps its MLflow store in the working directory."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


@pytest.fixture
def segment(tmp_path, nasa_trace) -> str:
    """The trace up to END: simulate evaluates its last HOURS, everything before is history."""
    path = tmp_path / "segment.csv"
    series = nasa_trace[1]
    frame = series[series.index <= END].rename("value").to_frame()
    frame.index = frame.index.strftime("%Y-%m-%dT%H:%M:%SZ")
    frame.to_csv(path, index_label="timestamp")
    return str(path)


def policy_file(path, trace: str, **fields) -> str:
    """A policy as an SRE writes it: the fields that matter here, every other one left to its default (the file's
    defaults are core.policy's; the stored object's are the CRD's)."""
    per_gpu = demand_per_gpu(load_history(trace), peak_gpus=GPUS * 0.8)
    spec = {"query": METRIC, "capacity": {"demandPerGpu": per_gpu}, "mode": "active",
            "target": {"kind": "Deployment", "name": NAME}, "trainingClusterQueues": [QUEUE], **fields}
    obj = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": NAME, "namespace": NS}, "spec": spec}
    path.write_text(yaml.safe_dump(obj, sort_keys=False))
    return str(path)


def simulated(tmp_path, trace: str, policy: str, name: str) -> str:
    out = tmp_path / name
    assert main(["simulate", trace, "--policy-file", policy, "--days", f"{HOURS / 24:g}", "--gpus", str(GPUS),
                 "--timeline", str(out), "--json"]) == 0
    return out.read_text()


def on_kubernetes(tmp_path, kube_server, kube_admin, prometheus_server, trace: str, policy: str,
                  start: pd.Timestamp) -> str:
    """The reconciler `headroom run --kubeconfig` builds, on simulate's clock, the world mirrored onto the API server;
    its timeline."""
    config = tmp_path / "headroom.yaml"
    config.write_text(yaml.safe_dump({"run": {
        "cluster": "kubernetes", "kubeconfig": str(kube_server.apiserver.kubeconfig(tmp_path / "kubeconfig")),
        "namespace": NS, "capacity_gpus": GPUS, "lease": {"namespace": NS, "name": "sameness"},
        "prometheus": {"url": prometheus_server.url, "timeout_seconds": 10, "retries": 1},
        "retrain_every_seconds": 0, "tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}"}}))
    cfg = load_config(config)
    # the world `headroom run --policy-file P --history DEMAND --gpus N` replays on its embedded cluster
    world, _ = embedded(cfg, with_policy_files(cfg.run, [policy], trace), start)
    mirror = Mirror(kube_admin, world, TargetRef("Deployment", NAME, NS), QUEUE)
    mirror.create()
    (obj,) = load_manifests(policy)
    policies = kube_admin.custom_path("headroom.dev", "v1alpha1", "reservationpolicies", namespace=NS)
    kube_admin.create(policies, obj)  # `kubectl apply -f P`: the API server fills in the CRD's defaults
    timeline: list = []
    reconciler, controller = build(cfg, timeline=timeline)
    # On Kubernetes the hourly refit runs beside the reconciles and is taken up by the first reconcile after it is
    # done: seconds late on the wall clock, but one whole step (or more) late on this simulated clock, where one
    # reconcile is one 5-minute step. Here it runs inside the reconcile, at the moment simulate refits.
    reconciler.forecasts.refit_beside = False
    try:
        replay(reconciler, controller, mirror, pd.date_range(start, periods=HOURS * 12, freq="5min"))
    finally:
        reconciler.close()
        controller.close()
        kube_admin.delete(f"{policies}/{NAME}")
        mirror.delete()
    errors = reconciler.holder.get().reconcile_errors_total
    assert not any(errors.values()), errors
    # the controller saw Kueue's whole cycle: Workloads admitted, deactivated by it, stopped, requeued by it, admitted
    # again, and finished
    cycles = [" ".join(p) for p in mirror.phases.values()]
    assert any("running stopping stopped pending running" in c for c in cycles), cycles
    assert any(c.endswith("running finished") for c in cycles), cycles
    return Path(write_timeline(timeline, tmp_path / "run.csv")).read_text()


def test_the_kubernetes_controller_writes_simulate_s_timeline(tmp_path, segment, kube_server, kube_admin,
                                                              prometheus_server):
    policy = policy_file(tmp_path / "policy.yaml", segment, targetQuantile=0.5, warmBuffer=0.5)
    expected = simulated(tmp_path, segment, policy, "simulate.csv")
    frame = pd.read_csv(tmp_path / "simulate.csv", parse_dates=["timestamp"])
    assert list(frame.columns) == list(TIMELINE_COLUMNS) and len(frame) == HOURS * 12
    # the comparison has something to compare: the reservation follows the ramp, GPUs are lent and taken back
    assert frame["reserved_gpus"].nunique() > 3 and frame["lent_gpus"].gt(0).all()
    assert frame["preempted_gpus"].sum() > 0
    ran = on_kubernetes(tmp_path, kube_server, kube_admin, prometheus_server, segment, policy,
                        frame["timestamp"].iloc[0])
    assert ran == expected
    # ...and it is not two runs that ignore the policy: another policy's simulation differs
    other = policy_file(tmp_path / "other.yaml", segment, targetQuantile=0.5, warmBuffer=3.0)
    assert simulated(tmp_path, segment, other, "other.csv") != ran


def _undeclared_or_defaulted_otherwise(model: type[BaseModel], schema: dict, path: str) -> list[str]:
    """Where the CRD schema and a core.policy model disagree: a field it does not declare (the API server prunes it),
    or a default of its own (the API server fills it in)."""
    wrong = []
    for name, f in model.model_fields.items():
        key = f.alias or name
        where = f"{path}.{key}"
        prop = (schema.get("properties") or {}).get(key)
        if prop is None:
            wrong.append(f"{where}: not in the CRD (pruned)")
            continue
        inner = f.annotation if isinstance(f.annotation, type) and issubclass(f.annotation, BaseModel) else None
        if inner is not None:
            wrong += _undeclared_or_defaulted_otherwise(inner, prop, where)
        elif "default" in prop and prop["default"] != (default := f.get_default(call_default_factory=True)):
            wrong.append(f"{where}: CRD default {prop['default']!r}, core.policy's {default!r}")
    return wrong


def test_the_crd_keeps_every_policy_field_and_core_policy_s_defaults(crd_dir):
    """What `kubectl apply -f P` stores is what `simulate --policy-file P` reads: the API server drops a field its CRD
    does not declare and fills in the CRD's own defaults (the sameness above runs one policy; this covers every
    field)."""
    (crd,) = [d for d in crd_documents(crd_dir) if d["spec"]["names"]["kind"] == KIND]
    (version,) = crd["spec"]["versions"]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert _undeclared_or_defaulted_otherwise(PolicySpec, spec, "spec") == []


def test_the_crd_s_patterns_are_core_policy_s(crd_dir):
    """core.policy checks a duration and a statistic by the CRD's own patterns (one definition each, held alike here):
    a file `simulate` runs is one `kubectl apply` takes (tests/test_kube_real.py asks the API server itself)."""
    from core.policy import DURATION_PATTERN, NAME_PATTERN, OBJECT_NAME_PATTERN
    from core.units import STATISTIC_PATTERN, TIMEZONE_PATTERN

    (crd,) = [d for d in crd_documents(crd_dir) if d["spec"]["names"]["kind"] == KIND]
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert {k: spec[k]["pattern"] for k in ("leadTime", "scaleInDelay", "reclaimDeadline", "statistic", "timezone")} \
        == {"leadTime": DURATION_PATTERN, "scaleInDelay": DURATION_PATTERN, "reclaimDeadline": DURATION_PATTERN,
            "statistic": STATISTIC_PATTERN, "timezone": TIMEZONE_PATTERN}
    # the names of the objects a policy acts on (the API server's own rules for them)
    target = spec["target"]["properties"]
    assert [spec["inferenceClusterQueue"]["pattern"], spec["trainingClusterQueues"]["items"]["pattern"],
            target["name"]["pattern"], target["namespace"]["pattern"]] == [OBJECT_NAME_PATTERN] * 3 + [NAME_PATTERN]
