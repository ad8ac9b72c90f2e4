"""`headroom run` on a cluster without Kueue's v1beta2 API or without headroom's own CRD, on a real kube-apiserver.

The session's API server always has both, so these tests start a second kube-apiserver of their own, once per
module, on the session's etcd under an etcd prefix of its own: a separate, empty cluster, in seconds. Each test
makes its set of CRDs exactly what it names (creating and deleting CRDs on that server) and runs the real CLI, in a
process of its own, with a kubeconfig file, as a user would (docs/deploy.md).
"""
from __future__ import annotations

import logging
import subprocess
import sys
import time

import pytest
import yaml

from adapters.kube import KUEUE_GROUP, WATCHED, KubeCluster
from controller.actions import SetQuota
from controller.executor import execute
from core.errors import ClusterError, NotInstalled
from tests.servers import ROOT, free_port, wait_until
from tests.servers import kueue as kueue_objects
from tests.servers.fixtures import CRD_PATH, _established, crd_documents
from tests.servers.kube import KubeApiserver
from tests.servers.proxy import AnswerLosingProxy
from tests.test_run_real import deployment, policy

NS = "inference-run"  # the namespace of the policy, its Deployment and the Lease (tests/test_run_real.py's)
RP = KubeCluster.custom_path("headroom.dev", "v1alpha1", "reservationpolicies", namespace=NS)
HEADROOM_MESSAGE = ("the API server does not serve reservationpolicies: headroom's CRD (headroom.dev/v1alpha1 "
                    "ReservationPolicy) is not installed: kubectl apply --server-side -f "
                    "deploy/crds/headroom.dev_reservationpolicies.yaml")


def kueue_message(plurals: str = "workloads, localqueues, clusterqueues, cohorts") -> str:
    return (f"the API server does not serve {plurals}: Kueue's v1beta2 API (kueue.x-k8s.io/v1beta2) is not "
            "installed: install Kueue v0.15 or later with its CRDs (https://kueue.sigs.k8s.io/docs/installation/)")


KUEUE_MESSAGE = kueue_message()


@pytest.fixture(scope="module")
def bare_kube(kube_server, tmp_path_factory):
    """A kube-apiserver of this module's own: the session's etcd, another etcd prefix, no CRD at first."""
    server = KubeApiserver(tmp_path_factory.mktemp("bare-kube"), kube_server.etcd, etcd_prefix="/bare").start()
    kube = KubeCluster.from_kubeconfig(str(server.kubeconfig()), request_timeout=30)
    kube.apply(f"/api/v1/namespaces/{NS}", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    yield server, kube
    kube.close()
    server.stop()


def _served(kube: KubeCluster, crd: dict) -> bool:
    try:
        kube.get(f"/apis/{crd['spec']['group']}/{crd['spec']['versions'][0]['name']}/{crd['spec']['names']['plural']}")
        return True
    except ClusterError as exc:  # a 404: its path not served
        if exc.status != 404:
            raise
        return False


def only(kube: KubeCluster, crds: list[dict], timeout: float = 30.0) -> None:
    """Make the server's CRDs exactly `crds`: the others deleted (and no longer served), these established."""
    wanted = {c["metadata"]["name"] for c in crds}
    held = {c["metadata"]["name"]: c for c in kube.get(CRD_PATH)["items"]}
    for name in held.keys() - wanted:
        kube.delete(f"{CRD_PATH}/{name}")
    for crd in crds:
        if crd["metadata"]["name"] not in held:
            kube.create(CRD_PATH, crd)
    _established(kube, sorted(wanted))
    deadline = time.monotonic() + timeout
    for name in held.keys() - wanted:
        while _served(kube, held[name]):
            assert time.monotonic() < deadline, f"CRD {name} still served after its deletion"
            time.sleep(0.1)


def snapshot(kube: KubeCluster) -> dict[tuple[str, str, str], str]:
    """Every object (path, namespace, name) -> resourceVersion of the kinds `headroom run` could write, and of
    whatever of headroom's and Kueue's APIs is served."""
    paths = ["/api/v1/namespaces", "/api/v1/configmaps", "/api/v1/events", "/apis/apps/v1/deployments",
             "/apis/coordination.k8s.io/v1/leases"]
    paths += [f"/apis/{c['spec']['group']}/{c['spec']['versions'][-1]['name']}/{c['spec']['names']['plural']}"
              for c in kube.get(CRD_PATH)["items"]]
    return {(path, o["metadata"].get("namespace", ""), o["metadata"]["name"]): o["metadata"]["resourceVersion"]
            for path in paths for o in kube.get(path)["items"]}


def headroom_run(server: KubeApiserver, tmp_path, once: bool, token: str | None = None) -> tuple[int, str, str]:
    """The real `headroom run [--once]` on `server`; its exit status, stdout and stderr. A run that does not end
    within the timeout (the loop ran on instead of refusing) is killed and fails the test."""
    config = tmp_path / "headroom.yaml"
    config.write_text(yaml.safe_dump({"run": {
        "cluster": "kubernetes", "namespace": NS, "capacity_gpus": 64, "interval_seconds": 2,
        "lease": {"namespace": NS, "name": "not-installed"},
        "prometheus": {"url": "http://127.0.0.1:1", "retries": 0},  # never read: the cluster check comes first
        "forecast_log_dir": str(tmp_path / "log"), "retrain_every_seconds": 0,
        "tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}"}}))
    kubeconfig = server.kubeconfig(tmp_path / "kubeconfig", token=token)
    argv = [sys.executable, "-m", "cli.main", "run", *(["--once"] if once else []), "--config", str(config),
            "--kubeconfig", str(kubeconfig), "--metrics-port", str(free_port())]
    try:
        # the loop ends at once too (it refuses at start): a loaded machine takes ~10 s just to import the CLI
        proc = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=60)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"`headroom run{' --once' if once else ''}` did not end on a cluster it cannot work "
                             f"on:\n{exc.stderr}") from None
    return proc.returncode, proc.stdout, proc.stderr


CASES = {  # what is missing -> (headroom's CRD installed, Kueue's installed, what the error names, must not name)
    "kueue": (True, False, [KUEUE_MESSAGE], ["headroom's CRD"]),
    "headroom": (False, True, [HEADROOM_MESSAGE], ["Kueue's"]),
    "both": (False, False, [HEADROOM_MESSAGE, KUEUE_MESSAGE], []),
}


@pytest.mark.parametrize(("missing", "once", "a_policy"), [
    ("kueue", True, True), ("headroom", True, True), ("both", True, True),
    ("both", False, True),   # the loop refuses at start as --once does
    ("kueue", True, False),  # no policy yet: nothing would read Kueue, but the cluster still lacks it
], ids=["kueue-once", "headroom-once", "both-once", "both-loop", "kueue-once-no-policy"])
def test_headroom_run_says_what_is_not_installed_and_writes_nothing(bare_kube, crd_dir, kueue_crds, tmp_path, missing,
                                                                   once, a_policy):
    server, kube = bare_kube
    with_headroom, with_kueue, said, unsaid = CASES[missing]
    only(kube, (crd_documents(crd_dir) if with_headroom else []) + (kueue_crds if with_kueue else []))
    # what headroom would act on, as far as the installed APIs allow: a policy and its Deployment, a cohort
    kube.apply(f"/apis/apps/v1/namespaces/{NS}/deployments/chat", deployment("chat"))
    if with_headroom and a_policy:
        kube.apply(f"{RP}/chat", policy("chat"))
    elif with_headroom:
        kube.delete(f"{RP}/chat")
    if with_kueue:
        kube.apply(kueue_objects.path("resourceflavors", kueue_objects.FLAVOR), kueue_objects.resource_flavor())
        kube.apply(kueue_objects.path("clusterqueues", "inference-run"),
                   kueue_objects.cluster_queue("inference-run", gpus=0))
    before = snapshot(kube)

    status, out, err = headroom_run(server, tmp_path, once)

    assert "Traceback" not in out + err, err
    assert status == 1, (status, out, err)  # README: 1, the work failed (its cluster lacks what it needs)
    last = err.strip().splitlines()[-1]
    assert last.startswith("headroom: error: the API server does not serve "), err  # not "cannot reach the cluster"
    assert all(s in last for s in said), last                          # what is missing, and how to install it
    assert not any(s in last for s in unsaid), last                    # and nothing that is there
    assert out == "", out                                              # no plan printed for a cluster it cannot read
    assert snapshot(kube) == before  # nothing written: no Lease, no status, no Event, no ConfigMap, no scale


@pytest.mark.parametrize("once", [True, False], ids=["once", "loop"])
def test_credentials_the_api_server_refuses_are_named_as_such_and_nothing_is_written(bare_kube, crd_dir, kueue_crds,
                                                                                    tmp_path, once):
    """A kubeconfig whose token the API server does not accept (a new user's first mistake: another cluster's, or
    expired) said "leader election: the Lease ... could not be read or taken: ... HTTP 401: Unauthorized" after ten
    watch warnings, and "the Lease could not be released ... it expires by itself", of a Lease never held; the loop
    went on failing its election rounds. It is now named, with where the credentials come from, before anything
    starts (exit 1, as a cluster without Kueue's API)."""
    server, kube = bare_kube
    only(kube, crd_documents(crd_dir) + kueue_crds)
    before = snapshot(kube)

    status, out, err = headroom_run(server, tmp_path, once, token="not-a-token-it-knows")

    assert "Traceback" not in out + err, err
    assert status == 1 and out == "", (status, out, err)
    assert err.strip().splitlines()[-1] == ("headroom: error: the API server refused this client's credentials (HTTP "
                                            "401 Unauthorized): the token or certificate of the kubeconfig's user "
                                            "(--kubeconfig, run.kubeconfig, $KUBECONFIG; a pod's ServiceAccount with "
                                            "--in-cluster) is not one it accepts: expired, revoked or another "
                                            "cluster's"), err
    assert "Lease" not in err, err  # not blamed on a Lease it never had
    assert snapshot(kube) == before


def test_a_crd_deleted_while_headroom_watches_is_named_by_its_reads_not_served_stale(bare_kube, crd_dir, kueue_crds):
    """Kueue uninstalled under a running controller: its reads (through the watch caches, as `headroom run` reads)
    say Kueue's API is not installed, instead of serving the empty cache its deletion left; reinstalled, they
    are served again."""
    server, kube = bare_kube
    only(kube, crd_documents(crd_dir) + kueue_crds)
    kube.apply(kueue_objects.path("clusterqueues", "inference-run"),
               kueue_objects.cluster_queue("inference-run", gpus=3))
    watching = KubeCluster.from_kubeconfig(str(server.kubeconfig()), request_timeout=5).watch()
    said: list[str] = []

    def not_installed() -> bool:
        try:
            watching.cluster_queue_quotas()
        except NotInstalled as exc:
            said.append(str(exc))
            return True
        return False

    try:
        assert watching.cluster_queue_quotas() == {"inference-run": 3}
        only(kube, crd_documents(crd_dir))  # Kueue uninstalled: its objects deleted, then its API
        wait_until(not_installed, timeout=15, what="the reads to say Kueue's API is not installed")
        assert said[-1].startswith(kueue_message("clusterqueues")), said[-1]
        assert watching.reservation_policies(NS) == []  # what is still installed is still read
        only(kube, crd_documents(crd_dir) + kueue_crds)  # reinstalled: the watch cache fills again
        kube.apply(kueue_objects.path("clusterqueues", "inference-run"),
                   kueue_objects.cluster_queue("inference-run", gpus=5))
        wait_until(lambda: watching.informers["clusterqueues"].synced()
                   and watching.cluster_queue_quotas() == {"inference-run": 5}, timeout=40, what="the cache")
    finally:
        watching.close()


def test_a_crd_deleted_while_headroom_watches_is_warned_once_per_cache_as_its_reads_say_it(bare_kube, crd_dir,
                                                                                          kueue_crds, caplog):
    """Kueue uninstalled under a running controller: each Kueue watch cache warned at every back-off (0.2, 0.4, 0.8 s
    ..., then every 30 s for as long as Kueue was gone), its first warning worded otherwise than the reads ("WATCH
    ...: HTTP 404: 404 page not found"). Each now warns once, in the reads' words, and says when it is served again."""
    server, kube = bare_kube
    only(kube, crd_documents(crd_dir) + kueue_crds)
    watching = KubeCluster.from_kubeconfig(str(server.kubeconfig()), request_timeout=5).watch()
    kueue_caches = {name: watching.informers[name] for name, path in WATCHED.items() if KUEUE_GROUP in path}
    tries = dict.fromkeys(kueue_caches, 0)  # each cache's LISTs (its thread's tries) since Kueue went

    def counted(name: str, relist):
        def relist_counted(*args, **kwargs):
            tries[name] += 1
            return relist(*args, **kwargs)
        return relist_counted

    def said(level: int, path: str) -> list[str]:  # what the cache of `path` said of it
        return [r.getMessage() for r in caplog.records if r.name == "adapters.kube" and r.levelno == level
                and r.getMessage().startswith(f"watch {path}:")]

    try:
        with caplog.at_level(logging.INFO, logger="adapters.kube"):
            for name, informer in kueue_caches.items():
                informer.relist = counted(name, informer.relist)  # type: ignore[method-assign]
            only(kube, crd_documents(crd_dir))  # Kueue uninstalled
            # five LISTs each: four back-offs (0.2 + 0.4 + 0.8 + 1.6 s), each a warning on the old code
            wait_until(lambda: min(tries.values()) >= 5, timeout=30, what="the caches to list again and again")
            with pytest.raises(NotInstalled) as read:
                watching.cluster_queue_quotas()
            assert str(read.value).startswith(kueue_message("clusterqueues")), read.value
            for name, informer in kueue_caches.items():
                reads_say = str(read.value).replace("clusterqueues", name)  # as a read of `name` says it
                assert said(logging.WARNING, informer.path) == [
                    f"watch {informer.path}: {reads_say}; listing again, at most 30 s apart, until it is served"]
            only(kube, crd_documents(crd_dir) + kueue_crds)  # reinstalled
            wait_until(lambda: all(i.connected for i in kueue_caches.values()), timeout=60, what="the watches")
            for informer in kueue_caches.values():
                assert said(logging.INFO, informer.path) == [f"watch {informer.path}: served again: streaming again"]
                assert len(said(logging.WARNING, informer.path)) == 1
    finally:
        watching.close()


def test_a_crd_deleted_under_a_running_adapter_is_said_at_once_not_retried(bare_kube, crd_dir, kueue_crds):
    """A CRD deleted under a running controller leaves its path answering a plain 404, which was retried as an API
    server not ready yet (e529b54): 6 times, over 5-11 s with the default back-off, before a read said NotInstalled
    or a write NotFound. The server is ready and its discovery lists the resource no more: said at once, after one
    request of the path (and one of /readyz and of the group's discovery document). Counted behind a proxy; the
    adapter's back-off is long here (at least 17.5 s of retries per request), so a retry cannot pass unseen. A write
    said a bare NotFound ("PATCH .../clusterqueues/inference-run: HTTP 404: 404 page not found"): it says what is not
    installed, as the reads do."""
    server, kube = bare_kube
    only(kube, crd_documents(crd_dir) + kueue_crds)
    kube.apply(kueue_objects.path("clusterqueues", "inference-run"),
               kueue_objects.cluster_queue("inference-run", gpus=3))
    proxy = AnswerLosingProxy(server).start()
    running = KubeCluster.from_token(proxy.host, server.token, ca_file=str(server.ca_file), request_timeout=5,
                                     backoff_base=1.0, backoff_max=10.0)
    cq = kueue_objects.path("clusterqueues")

    def asked(since: int, path: str) -> int:
        return sum(1 for _, _, p in proxy.arrived[since:] if p.split("?")[0] == path)

    try:
        assert running.cluster_queue_quotas() == {"inference-run": 3}
        # the ClusterQueue CRD alone deleted: Kueue's group still served, without clusterqueues
        only(kube, crd_documents(crd_dir) + [c for c in kueue_crds if c["spec"]["names"]["plural"] != "clusterqueues"])
        since, began = len(proxy.arrived), time.monotonic()
        with pytest.raises(NotInstalled) as said:
            running.cluster_queue_quotas()
        assert str(said.value).startswith(kueue_message("clusterqueues")), said.value
        with pytest.raises(NotInstalled) as said:  # a write says it as the reads do
            running.set_cluster_queue_quota("inference-run", 5)
        assert str(said.value).startswith(kueue_message("clusterqueues")), said.value
        took = time.monotonic() - began
        assert (asked(since, cq), asked(since, f"{cq}/inference-run"), asked(since, "/readyz")) == (1, 1, 2)
        # the controller's quota write: its action's error, naming what is gone, not a bare 404
        [outcome] = execute([SetQuota("inference-run", 5, "lend the slack")], running)
        assert not outcome.applied and (outcome.error or "").startswith(kueue_message("clusterqueues")), outcome
        # Kueue uninstalled: its group not served at all; the check at start says so at once too
        only(kube, crd_documents(crd_dir))
        since, began = len(proxy.arrived), time.monotonic()
        with pytest.raises(NotInstalled) as said:
            running.check_served()
        took += time.monotonic() - began
        assert str(said.value).startswith(KUEUE_MESSAGE), said.value  # not "too old": v1beta1 is not served either
        assert asked(since, "/apis/kueue.x-k8s.io/v1beta1") == 1
        assert took < 3.5, took  # a tenth of two retry budgets (17.5 s each at least); a few requests take ~0.1 s
    finally:
        running.close()
        proxy.stop()


def test_a_kueue_too_old_for_v1beta2_is_named_as_such(bare_kube, crd_dir, kueue_crds, tmp_path):
    """A Kueue before v0.15 serves kueue.x-k8s.io/v1beta1 alone: it is installed, so "install Kueue" would mislead;
    the error says to upgrade it."""
    import copy

    server, kube = bare_kube
    old = []
    for crd in copy.deepcopy(kueue_crds):  # the same CRDs, as a release that serves v1beta1 only
        crd["spec"]["versions"] = [dict(v, storage=True) for v in crd["spec"]["versions"] if v["name"] == "v1beta1"]
        old.append(crd)
    only(kube, crd_documents(crd_dir))  # the v1beta2 CRDs of the same names out first
    only(kube, crd_documents(crd_dir) + old)
    try:
        kube.apply(f"{RP}/chat", policy("chat"))
        before = snapshot(kube)
        status, out, err = headroom_run(server, tmp_path, once=True)
        assert "Traceback" not in out + err and status == 1 and out == "", (status, out, err)
        last = err.strip().splitlines()[-1]
        assert "Kueue is installed but serves only kueue.x-k8s.io/v1beta1" in last and "upgrade to" in last, last
        assert "is not installed" not in last, last
        assert snapshot(kube) == before
    finally:
        only(kube, crd_documents(crd_dir))  # the next test installs what it names
