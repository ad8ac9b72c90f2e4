"""headroom's deployment (deploy/base, deploy/examples, Dockerfile) against the real kube-apiserver 1.20.

The manifests are rendered with `kubectl kustomize` (what `kubectl apply -k` applies), validated by
the API server (server-side dry run against the built-in and CRD schemas) and their RBAC is checked
on the server's real RBAC authorizer. What cannot be checked here: the image is never built (no
container runtime) and no pod ever runs (no kubelet, scheduler or controller-manager).
"""
from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import sys
import time
import tomllib
import zipfile
from pathlib import Path

import pandas as pd
import pytest
import yaml

from adapters.kube import KUEUE_GROUP, KUEUE_VERSION, KubeCluster, quota_node
from cli.config import load_config
from cli.main import build_parser
from controller.cohorts import cohort_lenders
from controller.reconcile import identified, parse_policies
from core.errors import NotFound
from tests.servers import unavailable
from tests.test_run_real import kube  # noqa: F401 -- a fixture: namespaces, ClusterQueue, Deployment, policy

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
NAMESPACE = "headroom-system"
CONFIG_FILE = "/etc/headroom/config.yaml"
VIEWER = "headroom-viewer"  # the unprivileged user of tests/servers/kube.py
# Served under another version of its group by this 1.20 server (batch/v1 CronJob is 1.21+).
OLDER_VERSION_HERE = {("batch/v1", "CronJob")}


# ---------------------------------------------------------------------------- manifests
def load_yaml_docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


@pytest.fixture(scope="module")
def base() -> list[dict]:
    kubectl = shutil.which("kubectl")
    if not kubectl:
        unavailable("kubectl not found: run scripts/install-kubectl.sh")
    done = subprocess.run([kubectl, "kustomize", str(DEPLOY / "base")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"kubectl kustomize deploy/base failed:\n{done.stderr}"
    return [d for d in yaml.safe_load_all(done.stdout) if d]


@pytest.fixture(scope="module")
def examples() -> list[dict]:
    docs = [d for path in sorted((DEPLOY / "examples").glob("*.yaml")) for d in load_yaml_docs(path)]
    assert docs, "deploy/examples has no manifests"
    return docs


def only(objects: list[dict], kind: str, name: str | None = None) -> dict:
    found = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def all_of(objects: list[dict], kind: str) -> list[dict]:
    return [o for o in objects if o["kind"] == kind]


def run_config(base: list[dict]) -> dict:
    """The config.yaml the pods mount, as plain YAML."""
    return yaml.safe_load(only(base, "ConfigMap")["data"]["config.yaml"])


def pod_specs(base: list[dict]) -> dict[str, dict]:
    return {"Deployment": only(base, "Deployment")["spec"]["template"]["spec"],
            "CronJob": only(base, "CronJob")["spec"]["jobTemplate"]["spec"]["template"]["spec"]}


# ---------------------------------------------------------------------------- API server helpers
def group_versions(api: KubeCluster, api_version: str) -> list[str]:
    """The object's own version first, then the other versions its group serves."""
    if "/" not in api_version:
        return [api_version]
    group = api_version.split("/")[0]
    try:
        served = [v["groupVersion"] for v in api.get(f"/apis/{group}").get("versions", [])]
    except NotFound:
        return [api_version]
    return [api_version] + [v for v in served if v != api_version]


def resource_of(api: KubeCluster, api_version: str, kind: str) -> dict | None:
    """The discovery entry (name, namespaced) serving `kind` at `api_version`, or None."""
    prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    try:
        resources = api.get(prefix).get("resources", [])
    except NotFound:
        return None
    return next((r for r in resources if r["kind"] == kind and "/" not in r["name"]), None)


def as_served(api: KubeCluster, obj: dict) -> tuple[dict, str] | None:
    """(object at the version this server serves its kind, its REST path), or None if unserved."""
    for api_version in group_versions(api, obj["apiVersion"]):
        resource = resource_of(api, api_version, obj["kind"])
        if resource is None:
            continue
        served = {**copy.deepcopy(obj), "apiVersion": api_version}
        prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        meta = obj["metadata"]
        if resource["namespaced"]:
            assert meta.get("namespace"), f"{obj['kind']} {meta['name']} has no namespace"
            prefix += f"/namespaces/{meta['namespace']}"
        return served, f"{prefix}/{resource['name']}/{meta['name']}"
    return None


def ensure_namespace(api: KubeCluster, name: str) -> None:
    # Really created and never deleted: without a controller-manager a deleted namespace stays Terminating.
    api.apply(f"/api/v1/namespaces/{name}", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})


def dropped_fields(sent, kept, path: str = "") -> list[str]:
    """Paths of `sent` that the server's answer lacks or changed (it prunes unknown CR fields silently)."""
    if isinstance(sent, dict):
        if not isinstance(kept, dict):
            return [path]
        return [p for key, value in sent.items()
                for p in (dropped_fields(value, kept[key], f"{path}.{key}".lstrip(".")) if key in kept
                          else [f"{path}.{key}".lstrip(".")])]
    if isinstance(sent, list):
        if not isinstance(kept, list) or len(kept) != len(sent):
            return [path]
        return [p for i, (s, k) in enumerate(zip(sent, kept)) for p in dropped_fields(s, k, f"{path}[{i}]")]
    return [] if sent == kept else [path]


def dry_run_all(api: KubeCluster, objects: list[dict]) -> tuple[set, set]:
    """Server-side-apply every object with dryRun=All; returns (converted, unserved) (apiVersion, kind)s."""
    converted, unserved = set(), set()
    for namespace in {o["metadata"].get("namespace") for o in objects} - {None}:
        ensure_namespace(api, namespace)
    for obj in objects:
        key = (obj["apiVersion"], obj["kind"])
        found = as_served(api, obj)
        if found is None:
            unserved.add(key)
            continue
        body, path = found
        if body["apiVersion"] != obj["apiVersion"]:
            converted.add(key)
        answer = api.apply(path, body, dry_run=True)
        assert answer["metadata"]["name"] == obj["metadata"]["name"]
        assert answer["metadata"].get("uid"), f"{path}: the dry run returned no object"
        lost = dropped_fields(body, answer)
        assert not lost, f"{obj['kind']} {obj['metadata']['name']}: the server dropped or changed {lost}"
    return converted, unserved


# ---------------------------------------------------------------------------- dry runs
def test_base_renders_every_part(base):
    kinds = sorted((o["kind"], o["metadata"]["name"]) for o in base)
    config_map = only(base, "ConfigMap")["metadata"]["name"]
    assert kinds == sorted([
        ("Namespace", NAMESPACE), ("ServiceAccount", "headroom"), ("ServiceAccount", "headroom-train"),
        ("ClusterRole", "headroom-controller"), ("ClusterRoleBinding", "headroom-controller"),
        ("Role", "headroom-leader-election"), ("RoleBinding", "headroom-leader-election"),
        ("ConfigMap", config_map), ("Deployment", "headroom-controller"), ("Service", "headroom-metrics"),
        ("CronJob", "headroom-train"), ("NetworkPolicy", "headroom-ingress")])
    assert config_map.startswith("headroom-config-"), "the generated ConfigMap carries its content hash"
    for obj in base:
        if obj["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding"):
            assert obj["metadata"]["namespace"] == NAMESPACE, obj["metadata"]


def test_base_applies_with_server_side_dry_run(kube_admin, base):
    converted, unserved = dry_run_all(kube_admin, base)
    assert not unserved, f"kinds this API server does not serve: {unserved}"
    assert converted <= OLDER_VERSION_HERE, f"applied at another version than written: {converted}"


def test_examples_apply_with_server_side_dry_run(kube_admin, examples):
    """Every example, Kueue's objects included, against Kueue v0.19.2's genuine CRDs, at kueue.x-k8s.io/v1beta2."""
    assert {o["apiVersion"] for o in examples if o["apiVersion"].startswith("kueue.")} == {"kueue.x-k8s.io/v1beta2"}
    converted, unserved = dry_run_all(kube_admin, examples)
    assert not converted and not unserved, (converted, unserved)


def test_dry_run_catches_a_bad_manifest(kube_admin, examples):
    """The dry run is a real check: a policy the CRD schema refuses is rejected, not accepted."""
    from core.errors import Invalid

    policy = copy.deepcopy(only(examples, "ReservationPolicy"))
    policy["spec"]["mode"] = "aggressive"
    body, path = as_served(kube_admin, policy)
    with pytest.raises(Invalid, match="mode"):
        kube_admin.apply(path, body, dry_run=True)


def test_examples_fit_together(base, examples):
    policy = only(examples, "ReservationPolicy")
    queues = {q["metadata"]["name"]: q for q in all_of(examples, "ClusterQueue")}
    flavors = {f["metadata"]["name"] for f in all_of(examples, "ResourceFlavor")}
    assert policy["spec"]["mode"] == "active" and policy["spec"]["target"]["kind"] == "Deployment"
    training = policy["spec"]["trainingClusterQueues"]
    assert 1 <= len(training) <= 2 and set(training) <= set(queues)
    assert set(queues) - set(training) == {policy["spec"]["inferenceClusterQueue"]}, \
        "the policy names the inference ClusterQueue beside the training ones"
    assert len({q["spec"]["cohortName"] for q in queues.values()}) == 1, "all ClusterQueues share one cohort"
    nodes = [quota_node(q, "ClusterQueue") for q in queues.values()]
    nodes += [quota_node(c, "Cohort") for c in all_of(examples, "Cohort")]
    check = cohort_lenders(nodes, set(training))
    assert not check.lenders and not check.loops, "only headroom lends into the training queues' cohort"
    quota = 0
    for queue in queues.values():
        for group in queue["spec"]["resourceGroups"]:
            for flavor in group["flavors"]:
                assert flavor["name"] in flavors, f"{queue['metadata']['name']}: no ResourceFlavor {flavor['name']}"
                quota += sum(int(r["nominalQuota"]) for r in flavor["resources"] if r["name"] == "nvidia.com/gpu")
    assert quota == run_config(base)["run"]["capacity_gpus"], "the cohort's GPUs are the controller's capacity"
    # a pending Workload, a training job's or an inference pod's, reaches its ClusterQueue through a LocalQueue in a
    # namespace that queue admits from (the inference queue had none: the target's pods naming it would never run)
    inference = policy["spec"]["inferenceClusterQueue"]
    local_queues = all_of(examples, "LocalQueue")
    assert {local["spec"]["clusterQueue"] for local in local_queues} == {*training, inference}
    for local in local_queues:
        selector = queues[local["spec"]["clusterQueue"]]["spec"]["namespaceSelector"]["matchLabels"]
        assert selector == {"kubernetes.io/metadata.name": local["metadata"]["namespace"]}, local["metadata"]
    assert policy["metadata"]["namespace"] in {local["metadata"]["namespace"] for local in local_queues
                                               if local["spec"]["clusterQueue"] == inference}
    for name in training:  # Kueue never preempts across the cohort's queues: headroom alone takes GPUs back
        preemption = queues[name]["spec"].get("preemption") or {}
        assert preemption.get("reclaimWithinCohort") == "Never", f"{name}: reclaimWithinCohort: Never, stated"
        assert (preemption.get("borrowWithinCohort") or {}).get("policy", "Never") == "Never", name


def test_example_queues_keep_kueue_preemption_across_headrooms_quota_writes(kube_admin, examples):
    """The example ClusterQueues as the real API server (Kueue v0.19.2's genuine CRDs) creates them: no queue may
    preempt in another (reclaimWithinCohort and borrowWithinCohort Never, also where unset: the CRD's defaults), and
    headroom's quota writes, down to 0 and back, change the GPU nominalQuota and leave Kueue's preemption as it was."""
    training = set(only(examples, "ReservationPolicy")["spec"]["trainingClusterQueues"])
    for queue in all_of(examples, "ClusterQueue"):
        body = copy.deepcopy(queue)
        name = body["metadata"]["name"] = f"preemption-{queue['metadata']['name']}"  # beside other tests' queues
        created = kube_admin.create(KubeCluster.custom_path(KUEUE_GROUP, KUEUE_VERSION, "clusterqueues"), body)
        path = KubeCluster.custom_path(KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", name)
        preemption = created["spec"]["preemption"]
        assert (preemption["reclaimWithinCohort"], preemption["borrowWithinCohort"]["policy"]) == ("Never", "Never")
        if queue["metadata"]["name"] in training:
            assert preemption["withinClusterQueue"] == queue["spec"]["preemption"]["withinClusterQueue"]
        for gpus in (0, 5):
            assert kube_admin.set_cluster_queue_quota(name, gpus) is True
            written = kube_admin.get(path)
            assert kube_admin.get_cluster_queue_quota(name) == gpus
            assert written["spec"]["preemption"] == preemption, f"{name}: headroom's write changed its preemption"


def test_the_cronjob_trains_the_series_the_controller_serves_the_example_policy(base, examples):
    """The controller serves a policy the champion of its series (controller/reconcile.py: PolicyObject.series);
    the CronJob trained `llm-inference` on another query, so the example policy never got the champion trained for
    it: the controller loaded none for `inference.llm-inference` and served automatic selection."""
    [policy], invalid = parse_policies(identified([only(examples, "ReservationPolicy")]))
    assert not invalid
    history = run_config(base)["history"]
    assert run_config(base)["training"]["name"] == policy.series
    assert history["prometheus"]["query"] == policy.spec.query
    assert history["statistic"] == policy.spec.statistic


# ---------------------------------------------------------------------------- least privilege
def review(attributes: dict) -> dict:
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes}}


def attrs(verb: str, group: str, resource: str, subresource: str = "", namespace: str = "", name: str = "") -> dict:
    found = {"verb": verb, "group": group, "resource": resource, "subresource": subresource,
             "namespace": namespace, "name": name}
    return {k: v for k, v in found.items() if v}


def needed(lease_namespace: str, lease_name: str) -> list[dict]:
    """Every request adapters/kube.py makes (KubeCluster, its watch caches, LeaseElector)."""
    kueue, rp = "kueue.x-k8s.io", "headroom.dev"
    return [
        attrs("get", kueue, "clusterqueues", name="training-research"),
        attrs("patch", kueue, "clusterqueues", name="training-research"),
        attrs("list", kueue, "clusterqueues"),
        attrs("watch", kueue, "clusterqueues"),
        attrs("list", kueue, "workloads"),
        attrs("watch", kueue, "workloads"),
        attrs("get", kueue, "workloads", namespace="research", name="job-1"),
        attrs("patch", kueue, "workloads", namespace="research", name="job-1"),
        attrs("get", "", "pods", namespace="inference", name="llm-inference-0"),  # a pod-integration Workload's Pod
        attrs("list", kueue, "localqueues"),
        attrs("watch", kueue, "localqueues"),
        attrs("list", kueue, "cohorts"),
        attrs("watch", kueue, "cohorts"),
        attrs("list", rp, "reservationpolicies"),
        attrs("watch", rp, "reservationpolicies"),
        attrs("get", rp, "reservationpolicies", namespace="inference", name="llm-inference"),
        attrs("get", "apps", "deployments", namespace="inference", name="llm-inference"),
        attrs("list", "apps", "deployments", namespace="inference"),  # targets: watched per namespace
        attrs("watch", "apps", "deployments", namespace="inference"),
        attrs("list", "autoscaling", "horizontalpodautoscalers", namespace="inference"),
        attrs("watch", "autoscaling", "horizontalpodautoscalers", namespace="inference"),
        attrs("get", "", "configmaps", namespace=lease_namespace, name="headroom-forecasts.inference.llm"),
        attrs("create", "", "configmaps", namespace=lease_namespace),  # the shared forecast history
        attrs("patch", "", "configmaps", namespace=lease_namespace, name="headroom-forecasts.inference.llm"),
        attrs("delete", "", "configmaps", namespace=lease_namespace, name="headroom-forecasts.inference.llm"),
        attrs("list", "", "configmaps", namespace=lease_namespace),  # a new leader's sweep (Reconciler._unlisted)
        attrs("get", rp, "reservationpolicies", "status", namespace="inference", name="llm-inference"),
        attrs("patch", rp, "reservationpolicies", "status", namespace="inference", name="llm-inference"),
        attrs("get", "apps", "deployments", "scale", namespace="inference", name="llm-inference"),
        attrs("patch", "apps", "deployments", "scale", namespace="inference", name="llm-inference"),
        attrs("get", "autoscaling", "horizontalpodautoscalers", namespace="inference", name="llm-inference"),
        attrs("patch", "autoscaling", "horizontalpodautoscalers", namespace="inference", name="llm-inference"),
        attrs("create", "", "events", namespace="inference"),
        attrs("create", "", "events", namespace="default"),
        attrs("get", "coordination.k8s.io", "leases", namespace=lease_namespace, name=lease_name),
        attrs("create", "coordination.k8s.io", "leases", namespace=lease_namespace),
        attrs("update", "coordination.k8s.io", "leases", namespace=lease_namespace, name=lease_name),
    ]


def forbidden(lease_namespace: str, lease_name: str) -> list[dict]:
    kueue, rp = "kueue.x-k8s.io", "headroom.dev"
    return [
        attrs("*", "*", "*"),
        attrs("*", kueue, "workloads", namespace="research"),
        attrs("delete", kueue, "workloads", namespace="research", name="job-1"),
        attrs("create", kueue, "workloads", namespace="research"),
        attrs("update", kueue, "workloads", namespace="research", name="job-1"),
        attrs("patch", kueue, "workloads", "status", namespace="research", name="job-1"),  # Kueue's, not ours
        attrs("patch", kueue, "localqueues", namespace="research", name="training-research"),
        attrs("patch", kueue, "cohorts", name="training"),  # read only
        attrs("create", kueue, "clusterqueues"),
        attrs("delete", kueue, "clusterqueues", name="training-research"),
        attrs("patch", rp, "reservationpolicies", namespace="inference", name="llm-inference"),  # the user's spec
        attrs("delete", rp, "reservationpolicies", namespace="inference", name="llm-inference"),
        attrs("patch", "apps", "deployments", namespace="inference", name="llm-inference"),  # only its scale
        attrs("update", "apps", "deployments", "scale", namespace="inference", name="llm-inference"),
        attrs("delete", "apps", "deployments", namespace="inference", name="llm-inference"),
        attrs("delete", "autoscaling", "horizontalpodautoscalers", namespace="inference", name="llm-inference"),
        attrs("get", "", "secrets", namespace=NAMESPACE, name="any"),
        attrs("list", "", "secrets"),
        attrs("get", "", "configmaps", namespace="inference", name="any"),  # only beside the Lease
        attrs("patch", "", "configmaps", namespace="kube-system", name="any"),
        attrs("delete", "", "configmaps", namespace="inference", name="any"),  # only beside the Lease
        attrs("list", "", "configmaps"),  # only beside the Lease
        attrs("create", "", "pods", namespace=NAMESPACE),
        attrs("list", "", "pods"),  # each Pod a Workload names is read alone
        attrs("create", "", "pods", "exec", namespace="inference", name="llm-inference-0"),
        attrs("delete", "", "events", namespace="inference"),
        attrs("update", "coordination.k8s.io", "leases", namespace="kube-system", name=lease_name),
        attrs("create", "coordination.k8s.io", "leases", namespace="default"),
        attrs("update", "coordination.k8s.io", "leases", namespace=lease_namespace, name="kube-scheduler"),
        attrs("delete", "coordination.k8s.io", "leases", namespace=lease_namespace, name=lease_name),
        attrs("escalate", "rbac.authorization.k8s.io", "clusterroles", name="cluster-admin"),
        attrs("bind", "rbac.authorization.k8s.io", "clusterroles", name="cluster-admin"),
        attrs("impersonate", "", "users", name="headroom-admin"),
    ]


def test_roles_name_no_wildcards_and_bind_only_headroom(base):
    roles = all_of(base, "ClusterRole") + all_of(base, "Role")
    assert roles
    for role in roles:
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"):
                assert "*" not in rule.get(field, []), f"{role['metadata']['name']}: '*' in {field}: {rule}"
            # delete alone of the ConfigMaps beside the Lease: the forecast ConfigMaps it empties (a policy deleted)
            deletes = (role["kind"], rule["apiGroups"], rule["resources"]) == ("Role", [""], ["configmaps"])
            assert not {"escalate", "bind", "impersonate", "deletecollection"} & set(rule["verbs"])
            assert "delete" not in rule["verbs"] or deletes, f"{role['metadata']['name']}: delete in {rule}"
    role_names = {(r["kind"], r["metadata"]["name"]) for r in roles}
    controller_sa = pod_specs(base)["Deployment"]["serviceAccountName"]
    for binding in all_of(base, "ClusterRoleBinding") + all_of(base, "RoleBinding"):
        assert (binding["roleRef"]["kind"], binding["roleRef"]["name"]) in role_names, "no built-in role is bound"
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": controller_sa, "namespace": NAMESPACE}]
    lease = run_config(base)["run"]["lease"]
    role = only(base, "Role")
    assert role["metadata"]["namespace"] == lease["namespace"], "the Lease Role lives where the Lease is"
    assert [lease["name"]] in [r.get("resourceNames") for r in role["rules"]]


def wait_for(check, what: str, timeout: float = 15.0) -> None:
    """RBAC changes reach the authorizer through its informer cache, a moment later."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


@pytest.fixture
def granted(kube_server, kube_admin, base):
    """The shipped roles and bindings really applied, and the roles also bound (test-only) to the
    unprivileged user; all removed afterwards so other tests meet an unprivileged viewer again."""
    apiserver = kube_server.apiserver
    viewer = KubeCluster.from_token(apiserver.host, apiserver.viewer_token, ca_file=str(apiserver.ca_file),
                                    request_timeout=5)
    ensure_namespace(kube_admin, NAMESPACE)
    user = [{"kind": "User", "name": VIEWER, "apiGroup": "rbac.authorization.k8s.io"}]
    test_bindings = [{**copy.deepcopy(b), "metadata": {**b["metadata"], "name": f"test-{VIEWER}"}, "subjects": user}
                     for b in all_of(base, "ClusterRoleBinding") + all_of(base, "RoleBinding")]
    applied = []
    for obj in all_of(base, "ClusterRole") + all_of(base, "Role") + all_of(base, "ClusterRoleBinding") \
            + all_of(base, "RoleBinding") + test_bindings:
        body, path = as_served(kube_admin, obj)
        kube_admin.apply(path, body)
        applied.append(path)
    probe = attrs("list", "kueue.x-k8s.io", "workloads")

    def allowed() -> bool:
        return viewer.create(SSAR, review(probe))["status"].get("allowed", False)

    wait_for(allowed, f"{VIEWER} to get the bound roles")
    yield viewer
    for path in reversed(applied):
        kube_admin.delete(path)
    wait_for(lambda: not allowed(), f"{VIEWER} to lose the test-only bindings")
    viewer.close()


SSAR = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
SAR = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


def test_rbac_allows_exactly_what_the_controller_does(granted, kube_admin, base):
    lease = run_config(base)["run"]["lease"]
    sa = pod_specs(base)["Deployment"]["serviceAccountName"]
    as_service_account = {"user": f"system:serviceaccount:{NAMESPACE}:{sa}",
                          "groups": ["system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}",
                                     "system:authenticated"]}

    def decisions(items: list[dict]) -> dict[str, tuple[bool, bool]]:
        """(as the viewer with the roles, as the controller's ServiceAccount through the shipped bindings)."""
        out = {}
        for item in items:
            mine = granted.create(SSAR, review(item))["status"]
            theirs = kube_admin.create(SAR, {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                                             "spec": {**as_service_account, "resourceAttributes": item}})["status"]
            out[json.dumps(item, sort_keys=True)] = (mine.get("allowed", False), theirs.get("allowed", False))
        return out

    refused = {k: v for k, v in decisions(needed(lease["namespace"], lease["name"])).items() if v != (True, True)}
    assert not refused, f"needed by the controller but denied (viewer, service account): {refused}"
    granted_too_much = {k: v for k, v in decisions(forbidden(lease["namespace"], lease["name"])).items() if any(v)}
    assert not granted_too_much, f"must be denied (viewer, service account): {granted_too_much}"


# ---------------------------------------------------------------------------- pods
def resolve_port(container: dict, port) -> int:
    """A probe's or Service's port (number or name) as the container port it reaches."""
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    number = ports.get(port, port)
    assert number in ports.values(), f"port {port!r} is not one the container exposes: {container['ports']}"
    return number


def quantity(text) -> float:
    from kubernetes.utils import parse_quantity
    return float(parse_quantity(text))


def dockerfile_user() -> int:
    users = re.findall(r"^USER\s+(\S+)", (ROOT / "Dockerfile").read_text(), re.M)
    assert len(users) == 1 and re.fullmatch(r"\d+(:\d+)?", users[0]), f"USER must be one numeric uid: {users}"
    return int(users[0].split(":")[0])


@pytest.mark.parametrize("owner", ["Deployment", "CronJob"])
def test_pods_are_hardened(base, owner):
    spec = pod_specs(base)[owner]
    pod = spec["securityContext"]
    assert pod["runAsNonRoot"] is True and pod["runAsUser"] == dockerfile_user() != 0
    assert pod["runAsGroup"] != 0
    (container,) = spec["containers"]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert {security.get("seccompProfile", {}).get("type"), pod["seccompProfile"]["type"]} == {"RuntimeDefault"}
    resources = container["resources"]
    for key in ("cpu", "memory"):
        assert 0 < quantity(resources["requests"][key]) <= quantity(resources["limits"][key]), resources
    # The only writable path is the emptyDir on /tmp, where HOME and MPLCONFIGDIR point.
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: volumes[m["name"]] for m in container["volumeMounts"]}
    assert "emptyDir" in mounts["/tmp"]
    writable = [m["mountPath"] for m in container["volumeMounts"] if not m.get("readOnly")]
    assert writable == ["/tmp"], f"writable mounts besides /tmp: {writable}"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["HOME"].startswith("/tmp") and env["MPLCONFIGDIR"].startswith("/tmp")
    assert env["MLFLOW_TRACKING_URI"].startswith("http"), "a remote MLflow, never a file store in the pod"
    # The config file the args name is the generated ConfigMap's config.yaml.
    config_dir, config_key = CONFIG_FILE.rsplit("/", 1)
    config_map = only(base, "ConfigMap")
    assert mounts[config_dir]["configMap"]["name"] == config_map["metadata"]["name"]
    assert config_key in config_map["data"]


def test_controller_deployment(base):
    deployment = only(base, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    spec = deployment["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert resolve_port(container, container["livenessProbe"]["httpGet"]["port"]) == 9108
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert resolve_port(container, container["readinessProbe"]["httpGet"]["port"]) == 9108
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    pod_name = next(e for e in container["env"] if e["name"] == "POD_NAME")
    assert pod_name["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}, "the Lease identity"
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    service = only(base, "Service")
    assert service["spec"]["selector"].items() <= labels.items()
    (port,) = service["spec"]["ports"]
    assert resolve_port(container, port["targetPort"]) == 9108
    assert spec["serviceAccountName"] == "headroom" and spec.get("automountServiceAccountToken", True)
    train = pod_specs(base)["CronJob"]
    assert train["serviceAccountName"] == "headroom-train" and train["automountServiceAccountToken"] is False


def test_cronjob_runs_headroom_train_with_the_real_parser(base):
    cronjob = only(base, "CronJob")
    assert cronjob["spec"]["concurrencyPolicy"] == "Forbid"
    (container,) = pod_specs(base)["CronJob"]["containers"]
    assert "command" not in container, "the image's ENTRYPOINT (headroom) runs the args"
    args = build_parser().parse_args(container["args"])
    assert args.command == "train" and (args.sub_config or args.config) == CONFIG_FILE


def test_controller_args_with_the_real_parser(base):
    (container,) = pod_specs(base)["Deployment"]["containers"]
    assert "command" not in container
    args = build_parser().parse_args(container["args"])
    assert args.command == "run" and (args.sub_config or args.config) == CONFIG_FILE
    assert args.in_cluster is True
    assert resolve_port(container, args.metrics_port) == 9108


def test_config_map_validates_without_the_run_section(base, tmp_path):
    tree = run_config(base)
    tree.pop("run")
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(tree))
    cfg = load_config(path)
    assert cfg.history.prometheus is not None and cfg.training.name


def test_config_map_validates_with_the_real_loader(base, tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(only(base, "ConfigMap")["data"]["config.yaml"])
    cfg = load_config(path)
    assert cfg.run.cluster == "kubernetes" and cfg.run.capacity_gpus == 64
    assert (cfg.run.lease.namespace, cfg.run.lease.name) == (NAMESPACE, "headroom")


# ---------------------------------------------------------------------------- image
def test_dockerfile_runs_headroom():
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11-slim\b", text, re.M)
    assert re.search(r'^ENTRYPOINT \["headroom"\]$', text, re.M) and re.search(r'^CMD \["run"\]$', text, re.M)
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["headroom"] == "cli.main:main"


def test_docker_context_builds_the_package(tmp_path):
    """`pip install /src` in the image gets only what .dockerignore lets through: build a wheel from
    exactly that (the ignore file is "*" then "!name" exceptions), in an isolated build environment
    as in the image, and check it holds the CLI."""
    lines = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    assert lines[0] == "*"
    kept = [line[1:].rstrip("/") for line in lines[1:] if line.startswith("!")]
    context = tmp_path / "context"
    context.mkdir()
    for name in kept:
        source = ROOT / name
        (shutil.copytree(source, context / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
         if source.is_dir() else shutil.copy2(source, context / name))
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                           "-w", str(tmp_path / "wheels"), str(context)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (wheel,) = (tmp_path / "wheels").glob("headroom-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "cli/main.py" in names and "forecast/history.py" in names and "training/pipeline.py" in names
    packages = {n.split("/")[0] for n in names if n.endswith("/__init__.py")}
    assert packages == {"core", "forecast", "planning", "adapters", "controller", "training", "dashboards", "cli"}
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "headroom = cli.main:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


@pytest.mark.usefixtures("kube")  # the namespaces, ClusterQueues, Deployment and policy to reconcile
def test_the_controller_loop_runs_on_exactly_these_permissions(granted, kube_admin, base, prometheus_server, tmp_path):
    """Not only the access reviews: a whole reconcile -- policies, demand, quota, scale, evictions, status,
    events and the Lease -- as a user holding nothing but the shipped roles."""
    from adapters.prometheus import PrometheusDemand
    from controller.loop import Loop
    from controller.reconcile import Reconciler
    from core.settings import PrometheusServer, RunConfig
    from tests.test_run_real import MONDAY_7AM, NS, QUEUE, admit

    for i in range(12):
        admit(kube_admin, f"rbac-{i}", 10)
    lease = run_config(base)["run"]["lease"]
    granted.watch()  # the watch caches too, as `headroom run` reads: LIST and WATCH as that user
    deadline = time.monotonic() + 15
    while not all(i.connected and i.items() is not None for i in granted.informers.values()):
        assert time.monotonic() < deadline, {k: (i.connected, i.lists) for k, i in granted.informers.items()}
        time.sleep(0.1)
    cfg = RunConfig(cluster="kubernetes", prometheus=PrometheusServer(url=prometheus_server.url), capacity_gpus=128)
    reconciler = Reconciler(granted, PrometheusDemand(cfg.prometheus), cfg,
                            summary=granted.plan_summary(lease["namespace"]))
    loop = Loop(reconciler, granted.leader_elector(lease["namespace"], lease["name"], "rbac-test"),
                interval=1, clock=lambda: MONDAY_7AM + pd.Timedelta(hours=3))
    loop.run(once=True)
    state = reconciler.holder.get()
    assert state.reconcile_total == 1 and not any(state.reconcile_errors_total.values()), state.reconcile_errors_total
    status = kube_admin.get_reservation_policy(NS, "chat")["status"]
    assert status["reservedGpus"] == kube_admin.get_deployment_replicas(NS, "chat") > 1
    summary = kube_admin.plan_summary(lease["namespace"]).read()  # the cluster-wide numbers, written as that user
    assert kube_admin.get_cluster_queue_quota(QUEUE) == int(summary["slackGpus"])
    assert any(not w.active and w.evicted_by_plan for w in kube_admin.workloads() if w.cluster_queue == QUEUE), \
        "the morning ramp takes GPUs back"
