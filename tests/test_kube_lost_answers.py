"""Writes whose answer is lost after the API server acted (a read timeout, a connection reset after the request was
sent, a 504 from a proxy) are retried by KubeCluster._request; the retry then meets its own first write (409). On the
real kube-apiserver 1.20, behind tests/servers/proxy.py, which loses the answers a test picks."""
from __future__ import annotations

import time
import urllib.parse

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapters.kube import RENEW_DEADLINE_SHARE, KubeCluster, _api_of, _holds
from core.errors import ClusterError, Conflict, NotFound, NotInstalled
from core.objects import ObjectRef
from tests.servers import kueue
from tests.servers.proxy import AnswerLosingProxy

NS = "headroom-lost"
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"
WL = kueue.path("workloads", namespace=NS)
KUEUE_DISCOVERY = f"/apis/{kueue.API_VERSION}"  # the discovery document of Kueue's v1beta2 API
TIMEOUT = 1.5  # the client's request timeout: a held answer is lost after this long


@pytest.fixture(scope="module")
def cluster(kube_admin) -> KubeCluster:
    kube_admin.apply(f"/api/v1/namespaces/{NS}", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    return kube_admin


@pytest.fixture
def proxy(kube_server):
    proxy = AnswerLosingProxy(kube_server.apiserver, hold_seconds=TIMEOUT + 1).start()
    yield proxy
    proxy.stop()


@pytest.fixture
def lossy(proxy, kube_server):
    """A KubeCluster that reaches the API server through the proxy (quick back-off: the test waits for it)."""
    api = kube_server.apiserver
    lossy = KubeCluster.from_token(proxy.host, api.token, ca_file=str(api.ca_file), request_timeout=TIMEOUT,
                                   backoff_base=0.05, backoff_max=0.2)
    yield lossy
    lossy.close()


@pytest.mark.parametrize("how", ["hold", "close", "504"])
def test_an_elector_whose_lease_creation_answer_is_lost_wins_its_first_round(cluster, proxy, lossy, how):
    """A lone controller's first round creates the Lease; its answer lost, the retry met the Lease it had just created
    (409 AlreadyExists) and the elector concluded someone else had: it lost the round."""
    name = f"first-{how}"
    proxy.lose("POST", "/leases", how)
    elector = lossy.leader_elector(NS, name, "pod-a", lease_seconds=30)
    assert elector.try_acquire_or_renew() is True and elector.is_leader
    assert proxy.lost == [("POST", f"{LEASES}?fieldManager=headroom", how)]
    assert elector.holder() == "pod-a"
    assert cluster.get(f"{LEASES}/{name}")["spec"]["leaseTransitions"] == 0


@pytest.mark.parametrize("how", ["hold", "close", "504"])
def test_a_renewal_whose_answer_is_lost_keeps_the_lease(cluster, proxy, lossy, how):
    """The renewal carries the resourceVersion it read; its answer lost, the retry met 409 Conflict (the version had
    moved: by this very write) and the leader stood down for a round."""
    name = f"renew-{how}"
    elector = lossy.leader_elector(NS, name, "pod-a", lease_seconds=30)
    assert elector.try_acquire_or_renew() is True
    proxy.lose("PUT", f"/leases/{name}", how)
    assert elector.try_acquire_or_renew() is True and elector.is_leader
    assert [m for m, _, _ in proxy.lost] == ["PUT"]
    lease = cluster.get(f"{LEASES}/{name}")["spec"]
    assert (lease["holderIdentity"], lease["leaseTransitions"]) == ("pod-a", 0)


def test_a_renewal_recognised_late_counts_the_lease_from_when_it_was_sent(cluster, proxy, lossy):
    """The Lease says it was renewed when the renewal was sent (renewTime), and another replica times its expiry from
    when it saw that renewal, as early as when it landed; the elector timed its own lease from when the answer came,
    here a request timeout and a retry later: it would have gone on writing after the other could have taken over."""
    name = "renew-late"
    elector = lossy.leader_elector(NS, name, "pod-a", lease_seconds=3)
    assert elector.try_acquire_or_renew() is True
    proxy.lose("PUT", f"/leases/{name}", "hold")
    sent = time.monotonic()
    assert elector.try_acquire_or_renew() is True
    assert time.monotonic() - sent > TIMEOUT  # recognised after the held answer's timeout
    time.sleep(max(sent + 3.1 - time.monotonic(), 0))
    assert not elector.is_leader, "the lease counted from the answer, not from the renewal sent"


def test_a_lease_someone_else_created_meanwhile_is_not_taken_for_ours(cluster, proxy, lossy):
    """The other side of recognising our own write: the first POST never reached the server (the connection closed
    first: to the client as unknown as a lost answer) and another replica created the Lease meanwhile; the retry's
    409 is theirs, and this elector loses the round."""
    name = "raced"
    other = cluster.leader_elector(NS, name, "pod-b", lease_seconds=30)
    proxy.lose("POST", "/leases", "unsent", meanwhile=other.try_acquire_or_renew)
    elector = lossy.leader_elector(NS, name, "pod-a", lease_seconds=30)
    assert elector.try_acquire_or_renew() is False and not elector.is_leader
    assert other.is_leader and elector.holder() == "pod-b"


def test_a_renewal_that_lost_the_lease_meanwhile_is_not_taken_for_ours(cluster, proxy, lossy):
    """A renewal that never arrived while the Lease changed hands (released, and taken by another replica): the
    retry's 409 is theirs; the elector is not the leader."""
    name = "renew-raced"
    elector = lossy.leader_elector(NS, name, "pod-a", lease_seconds=30)
    assert elector.try_acquire_or_renew() is True
    other = cluster.leader_elector(NS, name, "pod-b", lease_seconds=30)

    def taken_over() -> None:
        lease = cluster.get(f"{LEASES}/{name}")
        lease["spec"]["holderIdentity"] = None  # as release() leaves it
        cluster._request("PUT", f"{LEASES}/{name}", lease)
        assert other.try_acquire_or_renew() is True

    proxy.lose("PUT", f"/leases/{name}", "unsent", meanwhile=taken_over)
    assert elector.try_acquire_or_renew() is False and not elector.is_leader
    assert elector.holder() == "pod-b"


@pytest.mark.parametrize("how", ["hold", "close", "504"])
def test_an_event_whose_answer_is_lost_counts_no_error(cluster, proxy, lossy, how):
    """An Event's name is random: its answer lost, the retry met the Event it had just created (409 AlreadyExists)
    and the caller counted an error (headroom_reconcile_errors_total{kind="events"}) for an Event that was
    recorded."""
    about = ObjectRef("v1", "ConfigMap", f"about-{how}", NS)
    proxy.lose("POST", "/events", how)
    event = lossy.emit_event(about, "Reserved", "reserved 4 GPUs")
    assert event["reason"] == "Reserved" and proxy.lost
    assert [(e["reason"], e["message"], e["count"]) for e in cluster.list_events(about)] == \
        [("Reserved", "reserved 4 GPUs", 1)]


@pytest.mark.parametrize("how", ["hold", "close", "504"])
def test_an_eviction_whose_answer_is_lost_is_counted_as_this_call_s(cluster, proxy, lossy, how):
    """The read-modify-write merge patch carries the resourceVersion read: its answer lost, the retry met 409, the
    re-read found the Workload already inactive and evict_workload said False (not evicted by this call): the
    preemption went uncounted."""
    cluster.create(kueue.path("clusterqueues"), kueue.cluster_queue(f"lost-{how}", gpus=8))
    cluster.create(kueue.path("localqueues", namespace=NS), kueue.local_queue(NS, f"lost-{how}"))
    cluster.create(WL, kueue.workload(NS, f"victim-{how}", f"lost-{how}", gpus_per_pod=2))
    kueue.admit(cluster, NS, f"victim-{how}", f"lost-{how}")
    proxy.lose("PATCH", f"/workloads/victim-{how}", how)
    assert lossy.evict_workload(NS, f"victim-{how}", None, "reclaim", "plan-lost") is True
    assert [m for m, _, _ in proxy.lost] == ["PATCH"]
    assert cluster.get(f"{WL}/victim-{how}")["spec"]["active"] is False


@pytest.mark.parametrize("how", ["close", "unsent"])
def test_a_forecast_whose_answer_is_lost_is_recorded_once(cluster, proxy, lossy, how):
    """The shared forecast log: the first forecast of a series creates its ConfigMap (labels, annotation, data: all
    recognised as ours after a lost answer), the next merge-patches it (its re-read after a 409 re-applies the same
    key, nothing twice); a POST that never arrived is simply retried."""
    import pandas as pd

    store = lossy.forecast_store(NS)
    series = f"lost.{how}"
    frame = pd.DataFrame([[1.0, 2.0, 3.0]] * 2, columns=[0.1, 0.5, 0.9],
                         index=pd.date_range("2026-12-01", periods=2, freq="h", tz="UTC"))
    first, second = pd.Timestamp("2026-12-01T00:00Z"), pd.Timestamp("2026-12-01T01:00Z")
    proxy.lose("POST", "/configmaps", how)
    store.record(series, first, frame)
    proxy.lose("PATCH", f"/configmaps/{store.name(series)}", "close" if how == "close" else "hold")
    store.record(series, second, frame)
    assert [m for m, _, _ in proxy.lost] == ["POST", "PATCH"]
    assert sorted(cluster.forecast_store(NS).load(series)) == [first, second]


def test_a_configmap_created_meanwhile_with_other_data_is_a_conflict(cluster, proxy, lossy):
    """create(): a 409 after a retry is ours only if the object holds everything sent."""
    path = f"/api/v1/namespaces/{NS}/configmaps"
    mine = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "contested", "namespace": NS},
            "data": {"who": "me"}}
    theirs = {**mine, "data": {"who": "them"}}
    proxy.lose("POST", "/configmaps", "unsent", meanwhile=lambda: cluster.create(path, theirs))
    with pytest.raises(Conflict):
        lossy.create(path, mine)
    assert cluster.get(f"{path}/contested")["data"] == {"who": "them"}


def test_a_dry_run_retried_still_says_the_object_exists(cluster, proxy, lossy):
    """A dry run never lands: a 409 after its retry is the server's answer about an object already there, even one
    that holds everything sent (it was not recognised as a write of ours: the dry run said it could be created)."""
    path = f"/api/v1/namespaces/{NS}/configmaps"
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "dry", "namespace": NS}, "data": {"a": "1"}}
    cluster.create(path, body)
    proxy.lose("POST", "/configmaps", "close")
    with pytest.raises(Conflict):
        lossy.create(path, body, dry_run=True)
    assert proxy.lost


# --------------------------------------------------------------------------- a server that does not answer
def test_writes_past_a_lapsed_lease_wait_for_one_failed_renewal_not_one_each(cluster, proxy, lossy):
    """Each write of a reconcile asks whether this replica still leads; past its Lease (by its own clock) that is a
    renewal. With the API server not answering (a halted host) a renewal waits out every retry (7 x the request
    timeout: about 80 s at the defaults) and each write asked again: a reconcile of k writes, or k statuses queued
    beside it, took k times that to skip them, the fence lock held, the loop stuck past its liveness bound. A
    renewal that failed is not tried again by a write: the next election round tries."""
    from types import SimpleNamespace

    from controller.loop import Loop

    lossy.request_timeout = 0.5  # each renewal: 7 attempts
    name = "unanswered"
    elector = lossy.leader_elector(NS, name, "pod-a", lease_seconds=2)
    loop = Loop(SimpleNamespace(), elector, interval=1, lease_seconds=2)  # type: ignore[arg-type]  # no reconcile
    loop._running = True  # inside run(): a write may renew
    assert elector.try_acquire_or_renew() is True and loop.still_leading()
    time.sleep(2.1)  # lapsed by its own clock
    proxy.lose("GET", f"/leases/{name}", "hold", times=100)
    began = time.monotonic()
    assert [loop.still_leading() for _ in range(3)] == [False, False, False]
    took = time.monotonic() - began
    # one renewal, given up at its round's deadline: not one per write, nor every retry of one
    assert took < RENEW_DEADLINE_SHARE * 2 + lossy.request_timeout, took
    assert 1 <= len(proxy.lost) < 1 + lossy.retries, proxy.lost


def test_an_election_round_on_a_server_that_does_not_answer_gives_up_at_its_deadline(cluster, proxy, lossy):
    """A halted host answers nothing: a round waited out every retry (7 x the request timeout: about 80 s at the
    defaults), the writes fenced behind it, and a renewal landing that late is one the other replicas may already
    have taken over from. It gives up at RENEW_DEADLINE_SHARE of the lease (client-go's RenewDeadline) and says so."""
    from core.errors import ClusterError

    lossy.request_timeout = 1.0  # every retry: 7 s and more
    elector = lossy.leader_elector(NS, "halted", "pod-a", lease_seconds=3)
    proxy.lose("GET", "/leases/halted", "hold", times=100)
    began = time.monotonic()
    with pytest.raises(ClusterError, match="leases/halted"):
        elector.try_acquire_or_renew()
    took = time.monotonic() - began
    assert RENEW_DEADLINE_SHARE * 3 - 0.1 <= took < RENEW_DEADLINE_SHARE * 3 + 0.5, took
    assert not elector.is_leader


# --------------------------------------------------------------------------- what "holds what was sent" means
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
                    max_leaves=12)


def _part(data, doc):
    """Some of `doc`'s fields, to any depth (a list whole): what a write sends of what the server stores."""
    if not isinstance(doc, dict) or not doc:
        return doc
    keys = data.draw(st.sets(st.sampled_from(sorted(doc))))
    return {k: _part(data, doc[k]) for k in keys}


def test_a_workload_whose_pod_could_not_be_read_asks_for_it_again(cluster, proxy, lossy):
    """A Workload Kueue's pod integration made for a Pod of Deployment `web`: its Deployment tells a policy's
    inference pods in a training queue from training (never a victim). The Pod's read failing (the API server
    answering 504 past every retry), the Workload was read as training, and stayed so until it changed: an inference
    pod preemptible for good after one failed read. The next read of the Workloads asks for the Pod again."""
    rs = "web-5d8f7c9b6"
    pod = cluster.create(f"/api/v1/namespaces/{NS}/pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": f"{rs}-x2k9p", "namespace": NS, "labels": {"pod-template-hash": "5d8f7c9b6"},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs,
                             "uid": "0b0c3f1e-8d0e-4a51-9a6e-3f6f4a1d2c11", "controller": True}]},
        "spec": {"containers": [{"name": "server", "image": "inference:1"}]}})
    body = kueue.workload(NS, "pod-web", None)
    body["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": pod["metadata"]["name"],
                                            "uid": pod["metadata"]["uid"], "controller": True}]
    cluster.create(WL, body)
    proxy.lose("GET", f"/pods/{pod['metadata']['name']}", "504", times=lossy.retries + 1)

    def deployment() -> str | None:
        return next(w.deployment for w in lossy.workloads() if (w.namespace, w.name) == (NS, "pod-web"))

    try:
        assert deployment() is None and len(proxy.lost) == lossy.retries + 1
        assert deployment() == "web"
    finally:  # the server is the session's: a Workload left here is read by every later test's KubeCluster
        cluster.delete(f"{WL}/pod-web")
        cluster.delete(f"/api/v1/namespaces/{NS}/pods/{pod['metadata']['name']}")


@given(st.dictionaries(st.text(max_size=3), JSON, min_size=1, max_size=4), st.data())
def test_a_stored_object_holds_any_part_of_itself_and_nothing_changed(stored, data):
    sent = _part(data, stored)
    assert _holds(stored, sent)
    assert _holds(stored, {**sent, "__absent__": None}), "a merge patch's deletion of a field not stored"
    key = data.draw(st.sampled_from(sorted(stored)))
    assert not _holds(stored, {**sent, key: "__changed__"})
    if isinstance(stored[key], list) and stored[key]:
        assert not _holds(stored, {**sent, key: stored[key][:-1]}), "a list is compared whole"


def test_a_path_not_served_yet_is_retried_and_a_missing_object_is_not(cluster, proxy, lossy):
    """An API server just (re)started answers a plain "404 page not found" for a CRD's group until its CRD informer
    has synced, and its /readyz says it is not ready meanwhile: the client took it for the ClusterQueue missing
    (NotFound), and the first quota write after a restart failed (tests/test_kube_real.py's restart test, once under
    load). Such a 404 is retried while the server is not ready, or while its discovery still lists the resource; a
    missing object's, a Status (reason NotFound), is raised at once."""
    cq = kueue.path("clusterqueues")
    if "unserved" not in lossy.cluster_queue_quotas():
        cluster.create(cq, kueue.cluster_queue("unserved", gpus=2))
    proxy.lose("GET", "/clusterqueues/unserved", "unserved", times=2)
    proxy.lose("GET", "/readyz", "unready", times=2)  # just restarted
    assert lossy.set_cluster_queue_quota("unserved", 5) is True
    assert [how for _, _, how in proxy.lost] == ["unserved", "unready"] * 2
    assert cluster.cluster_queue_quotas()["unserved"] == 5
    # ready, and its discovery lists clusterqueues (a CRD deleted a moment ago, or another API server behind the same
    # address, not synced yet): retried too
    asked = len(proxy.arrived)
    proxy.lose("GET", "/clusterqueues/unserved", "unserved")
    assert lossy.set_cluster_queue_quota("unserved", 6) is True
    assert [(method, path.split("?")[0]) for _, method, path in proxy.arrived[asked:]] == [
        ("GET", f"{cq}/unserved"), ("GET", "/readyz"), ("GET", KUEUE_DISCOVERY), ("GET", f"{cq}/unserved"),
        ("PATCH", f"{cq}/unserved")]
    with pytest.raises(NotFound):
        lossy.set_cluster_queue_quota("no-such-queue", 5)
    assert [path for _, _, path in proxy.arrived if "no-such-queue" in path] == [f"{cq}/no-such-queue"]


def test_a_path_a_ready_server_does_not_list_is_not_retried(proxy, lossy):
    """A plain 404 (the path not served) from an API server that is ready, and whose discovery does not list the
    resource (Kueue uninstalled under a running controller), was retried as a server not ready: 6 times over 5-11 s
    before the read said NotInstalled. No retry changes it: it is said at once, after one request of the path, one of
    /readyz and one of the group's discovery document (tests/test_not_installed_real.py deletes the CRDs for real)."""
    proxy.lose("GET", kueue.path("clusterqueues"), "unserved")
    proxy.lose("GET", KUEUE_DISCOVERY, "unserved")  # the group's discovery document: Kueue's group not served
    with pytest.raises(NotInstalled, match="the API server does not serve clusterqueues: Kueue's v1beta2 API"):
        lossy.cluster_queue_quotas()
    assert [path.split("?")[0] for _, _, path in proxy.arrived] == [
        kueue.path("clusterqueues"), "/readyz", KUEUE_DISCOVERY]


def test_a_server_over_its_max_in_flight_is_asked_again_no_sooner_than_it_says(proxy, kube_server):
    """An API server over its max-in-flight (or priority and fairness) answers 429 with Retry-After: 1; the client
    retried after its own back-off (by default 0.1-0.2 s, then 0.2-0.4 s: two more requests within the second it
    asked to be left alone). It waits the Retry-After (up to its longest back-off)."""
    api = kube_server.apiserver
    client = KubeCluster.from_token(proxy.host, api.token, ca_file=str(api.ca_file), request_timeout=TIMEOUT,
                                    backoff_base=0.05, backoff_max=5.0)
    path = "/api/v1/namespaces/default"
    proxy.lose("GET", path, "busy")
    try:
        assert client.get(path)["metadata"]["name"] == "default"
    finally:
        client.close()
    assert [how for _, _, how in proxy.lost] == ["busy"]
    (first, _, _), (second, _, _) = [arrival for arrival in proxy.arrived if arrival[2] == path]
    assert second - first >= 1.0


@pytest.mark.parametrize(("path", "api"), [
    (f"{KUEUE_DISCOVERY}/clusterqueues/q?fieldManager=headroom", (KUEUE_DISCOVERY, "clusterqueues")),
    (f"{KUEUE_DISCOVERY}/namespaces/ns/workloads/w/status", (KUEUE_DISCOVERY, "workloads")),
    (f"{KUEUE_DISCOVERY}/namespaces/ns/workloads", (KUEUE_DISCOVERY, "workloads")),
    ("/api/v1/namespaces/ns", ("/api/v1", "namespaces")),
    ("/api/v1/namespaces/ns/configmaps", ("/api/v1", "configmaps")),
    ("/apis/kueue.x-k8s.io/v1beta1", ("/apis/kueue.x-k8s.io/v1beta1", None)),
    ("/apis/kueue.x-k8s.io", None), ("/readyz", None)])
def test_the_discovery_document_that_lists_a_path_s_resource(path, api):
    """What _served_soon asks discovery for, when a path answers a plain 404."""
    assert _api_of(path) == api


def test_a_watch_the_server_is_too_busy_for_is_opened_again_no_sooner_than_it_says(cluster, proxy, kube_server):
    """A WATCH answered 429 with Retry-After: 1 (an API server over its max-in-flight) was retried after the watch
    cache's own back-off, 0.2 s: a LIST and a WATCH again within the second the server asked to be left alone. The
    cache waits the Retry-After, as every other request does (`_request`)."""
    from adapters.kube import Informer

    api = kube_server.apiserver
    client = KubeCluster.from_token(proxy.host, api.token, ca_file=str(api.ca_file), request_timeout=TIMEOUT)
    path = kueue.path("clusterqueues")
    informer = Informer(client, path, watch_seconds=1).start()  # the server ends each watch after 1 s

    def watches() -> list[float]:
        return [at for at, method, p in proxy.arrived if p.split("?")[0] == path and "watch=1" in p]

    try:
        deadline = time.monotonic() + 15
        while not watches():  # its first watch open: the next request of the path is the watch opened again
            assert time.monotonic() < deadline, "the watch cache never opened its watch"
            time.sleep(0.01)
        proxy.lose("GET", path, "busy")
        while len(watches()) < 3:
            assert time.monotonic() < deadline, proxy.arrived
            time.sleep(0.05)
    finally:
        informer.stop()
        client.close()
    assert [how for _, _, how in proxy.lost] == ["busy"]
    refused = watches()[1]
    after = [at for at, _, p in proxy.arrived if p.split("?")[0] == path and at > refused]
    assert after and after[0] - refused >= 1.0, [round(at - refused, 2) for at in after]


def test_a_watch_the_server_is_too_busy_for_is_opened_again_from_where_it_was(cluster, proxy, kube_server):
    """After a WATCH answered 429 (an API server over its max-in-flight) the cache listed every ClusterQueue again
    before it watched: the heaviest request there is, to a server that had just said it was overloaded. It opens the
    watch again from the last resourceVersion it saw, as client-go's reflector does, and misses nothing by it: a
    ClusterQueue created meanwhile arrives through that watch."""
    from adapters.kube import Informer

    api = kube_server.apiserver
    client = KubeCluster.from_token(proxy.host, api.token, ca_file=str(api.ca_file), request_timeout=TIMEOUT)
    path = kueue.path("clusterqueues")
    informer = Informer(client, path, watch_seconds=1).start()  # the server ends each watch after 1 s

    def asked(watch: bool) -> list[str]:  # the queries of the requests of `path`: its watches, or its LISTs
        queries = [p.partition("?")[2] for _, _, p in proxy.arrived if p.split("?")[0] == path]
        return [query for query in queries if ("watch=1" in query) == watch]

    def version(query: str) -> str:
        return urllib.parse.parse_qs(query)["resourceVersion"][0]

    try:
        deadline = time.monotonic() + 30
        while not asked(watch=True):  # its first watch open: the next request of the path is the watch opened again
            assert time.monotonic() < deadline, "the watch cache never opened its watch"
            time.sleep(0.01)
        proxy.lose("GET", path, "busy", meanwhile=lambda: cluster.create(path, kueue.cluster_queue("busy", gpus=1)))
        while informer.get(("", "busy")) is None:
            assert time.monotonic() < deadline, proxy.arrived
            time.sleep(0.05)
        refused, reopened = asked(watch=True)[1:3]
        assert version(reopened) == version(refused), (refused, reopened)  # from where it was
        assert len(asked(watch=False)) == informer.lists == 1, asked(watch=False)  # its first LIST alone
    finally:
        informer.stop()
        client.close()
        cluster.delete(f"{path}/busy")
    assert [how for _, _, how in proxy.lost] == ["busy"]


@pytest.mark.parametrize("how", ["page", "cut"])
def test_an_answer_that_is_no_json_is_retried_as_one_lost(cluster, proxy, lossy, how):
    """A 200 whose body is not JSON (a proxy's sign-in page in the API server's place, an answer cut short) raised
    json's JSONDecodeError out of the client: no ClusterError, so a traceback, or in a reconcile an internal error.
    There is no answer to read: it is retried as one lost, and said as a ClusterError if every attempt meets one."""
    path = f"/api/v1/namespaces/{NS}"
    proxy.lose("GET", path, how)
    assert lossy.get(path)["metadata"]["name"] == NS
    proxy.lose("GET", path, how, times=lossy.retries + 1)
    with pytest.raises(ClusterError) as said:
        lossy.get(path)
    assert said.value.status == 0 and f"GET {path}: unreachable: HTTP 200 with an answer that is not JSON: " \
        in str(said.value), said.value
    assert [h for _, _, h in proxy.lost] == [how] * (lossy.retries + 2)
