"""The Events headroom writes keep what an SRE acts on: Kubernetes keeps 1,024 characters of a message
(core.objects.event_message cuts there, marked '...'), so what is wrong, which object and the fix come first and the
lists after them are bounded. Each message is built as the controller builds it, with names of realistic length and
of Kubernetes' longest (a namespace 63 characters, an object's name 253)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from adapters.kube import EVICTION_REASON
from adapters.prometheus import PrometheusError, parse_matrix
from controller.actions import Evict, PolicyTarget, View, cluster_actions
from controller.demand import DemandReader
from controller.reconcile import identified, parse_policies
from core.objects import CONDITION_MESSAGE_CHARS, EVENT_MESSAGE_CHARS, Condition, ObjectRef, TargetRef, event_message
from core.policy import API_VERSION, KIND, OBJECT_NAME_PATTERN
from forecast.synthetic import write_csv
from planning.planner import ClusterPolicy, Forecast, History, Observed, Training, WorkloadPolicy, plan_hours, plan_step
from tests.servers import kueue
from tests.test_run import DEMAND, MONDAY_6AM, Replay, policy

NOW = pd.Timestamp("2026-01-08 10:07", tz="UTC")
QUEUE = "training-research-large-language-models"
BAND = "slow-to-preempt jobs exceed the"
EXCESS = "training holds"
MANY_SERIES_FIX = "aggregate it to one, e.g. sum(...)"
CLASH_FIX = "in this policy (one queue cannot hold both inference and training)"

# names as Kubernetes bounds them: a namespace is a DNS label, an object's name a DNS subdomain
namespaces = st.text("abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=63)
names = st.one_of(st.from_regex(OBJECT_NAME_PATTERN, fullmatch=True).filter(lambda name: len(name) <= 253),
                  st.text("abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=253))


def long_key(i: int, chars: int = 60) -> str:
    """A ReservationPolicy's namespace/name of `chars` characters, as a production cluster names them."""
    stem = f"inference-serving-production/llm-chat-completions-{i:02d}-"
    return stem + "x" * (chars - len(stem))


# --------------------------------------------------------------------------------------------- Preempted
def preempted(keys: list[str], workload: str = "training/pretrain-70b") -> Evict:
    """The eviction the controller issues when every policy of `keys` sees demand above its forecast and training
    holds more than is lent, by one slow-to-preempt job that is both the excess's and outside the headroom band."""
    policies = tuple(WorkloadPolicy(k, 2.0, 2, min_gpus=2, max_gpus=60, lead_time_seconds=900.0) for k in keys)
    cluster = ClusterPolicy(40 * len(keys), policies, ((QUEUE, 1.0),), horizon_hours=4)
    starts = pd.date_range(NOW.floor("h"), periods=4, freq="h")
    low = np.full(4, 4.0)
    forecast = Forecast.of(pd.DataFrame({0.5: low / 2, 0.9: low, 0.99: low + 5}, index=starts), 0.9, 0.99)
    history = pd.Series(4.0, index=pd.date_range(NOW.floor("h") - pd.Timedelta(days=8), NOW.floor("h"), freq="h"))
    hours = plan_hours({k: forecast for k in keys}, {k: History.of(history, NOW) for k in keys}, cluster, NOW)
    now = NOW.timestamp()
    # each policy further above its forecast than the one before: the last is the furthest
    observed = {k: Observed(np.array([now]), np.array([20.0 + 4 * i]), 0, False) for i, k in enumerate(keys)}
    jobs = ("training/fine-tune", workload)
    training = Training(jobs, (QUEUE, QUEUE), np.array([4, cluster.capacity_gpus]), np.zeros(2, np.int64),
                        np.array([60.0, 900.0]), np.full(2, 1800.0), np.full(2, now - 600), 0)
    step = plan_step(hours, observed, training, cluster, now)
    targets = [PolicyTarget(k, ObjectRef(API_VERSION, KIND, k.split("/")[1], k.split("/")[0]),
                            TargetRef("Deployment", "chat", k.split("/")[0]), 2, True, None, (QUEUE,)) for k in keys]
    view = View({}, {QUEUE: 0}, training, {j: f"uid-{j}" for j in jobs}, ())
    (evict,) = [a for a in cluster_actions(step, view, targets, "plan") if isinstance(a, Evict)
                and a.workload == workload]
    return evict


def test_a_preemption_beside_ten_policies_above_their_forecast_keeps_its_kinds():
    """The reason named every policy above its forecast before the headroom band: with ten policies of 60-character
    names the Preempted Event (1,201 characters) lost "slow-to-preempt jobs exceed ...", and the Workload's
    eviction-reason annotation lost it without a mark. The kinds come first now, then the furthest three policies
    above their forecast and how many more."""
    keys = [long_key(i) for i in range(10)]
    evict = preempted(keys)
    said = evict.event.message
    assert len(said) <= EVENT_MESSAGE_CHARS and event_message(said) == said, len(said)
    assert evict.kind == "emergency" and evict.event.reason == "Preempted"
    assert EXCESS in said and BAND in said and said.index(BAND) < said.index("observed demand above the forecast")
    assert all(k in said for k in keys[-3:]) and not any(k in said for k in keys[:-3])  # the furthest above
    assert said.endswith("and 7 more")


def test_an_eviction_reason_annotation_is_cut_as_an_event_is(kube_admin):
    """The annotation cut a long reason at 1,024 characters without a mark, where its Event said '...': one limit,
    one marker."""
    ns = "headroom-messages"
    kube_admin.apply(f"/api/v1/namespaces/{ns}", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    kube_admin.apply(kueue.path("clusterqueues", "messages-train"), kueue.cluster_queue("messages-train", gpus=8))
    kube_admin.apply(kueue.path("localqueues", "messages-train", ns), kueue.local_queue(ns, "messages-train"))
    path = kueue.path("workloads", "victim", ns)
    kube_admin.apply(path, kueue.workload(ns, "victim", "messages-train", gpus_per_pod=2, count=2))
    kueue.admit(kube_admin, ns, "victim", "messages-train")
    reason = "; ".join(f"reason {i} " + "x" * 90 for i in range(20))  # 2,000 characters
    try:
        assert kube_admin.evict_workload(ns, "victim", None, reason, "plan-long") is True
        kept = kube_admin.get(path)["metadata"]["annotations"][EVICTION_REASON]
        assert kept == event_message(reason) and kept.endswith("...") and len(kept) == EVENT_MESSAGE_CHARS
    finally:
        kube_admin.delete(path)


# --------------------------------------------------------------------------------------------- many series
# a query over a vLLM deployment's pods that forgot its sum(): three of its series, with the labels they carry
MANY_SERIES_QUERY = (
    'rate(vllm:request_success_total{namespace="inference-serving-production", '
    'model_name="meta-llama/Meta-Llama-3.1-70B-Instruct", service="llm-chat-completions-vllm-openai-server", '
    'finished_reason=~"stop|length", job="inference-serving-production/llm-chat-completions-vllm-pods"}[5m]) '
    '* on (pod) group_left() max by (pod) (kube_pod_status_ready{condition="true"})')


def pod_series(i: int, values=()) -> dict:
    return {"metric": {"__name__": "vllm:request_success_total", "container": "vllm-openai-server",
                       "endpoint": "metrics", "finished_reason": "stop", "instance": f"10.42.{i}.17:8000",
                       "job": "inference-serving-production/llm-chat-completions-vllm-pods",
                       "model_name": "meta-llama/Meta-Llama-3.1-70B-Instruct",
                       "namespace": "inference-serving-production",
                       "pod": f"llm-chat-completions-vllm-openai-server-7d9f8b6c5d-{i:05d}",
                       "service": "llm-chat-completions-vllm-openai-server"}, "values": list(values)}


class ManySeries(DemandReader):
    """Prometheus answering a query that forgot its sum() with one series per pod: refused as the adapter refuses
    it."""

    def __init__(self, series: int):
        self.series = series

    def read(self, key, query, start, end):
        return parse_matrix([pod_series(i) for i in range(self.series)], query)


def test_a_query_of_many_series_says_its_fix_in_the_event(tmp_path):
    """The error quoted the whole query and three series' labels before its fix: a FallbackActive Event about a
    query of 360 characters (1,877 with the labels) ended before "aggregate it to one, e.g. sum(...)"."""
    demand = tmp_path / "demand.csv"
    write_csv(DEMAND, demand)
    r = Replay(tmp_path, demand, policy(query=MANY_SERIES_QUERY), demand=ManySeries(40))
    r.step(MONDAY_6AM)
    (event,) = r.events("FallbackActive")
    said = event_message(event["message"])
    assert MANY_SERIES_FIX in said and "returned 40 series" in said and MANY_SERIES_QUERY[:100] in said, said
    assert "where they differ: {'instance': '10.42.0.17:8000', 'pod': " in said  # the labels to aggregate away
    assert said.startswith("DemandUnavailable: ") and "fallback reservation" in said  # what headroom does meanwhile
    _, conditions = r.status()
    assert MANY_SERIES_FIX in conditions["ForecastDegraded"]["message"]


# --------------------------------------------------------------------------------------------- queue clashes
def clashing(namespace: str, holders: list[str], queues: list[str]) -> list[dict]:
    """Policies each holding inference in one of `queues`, and one created after them lending training slack into
    all of them."""
    def rp(name: str, created: int, **spec) -> dict:
        body = {"query": "sum(rate(requests_total[5m]))", "capacity": {"demandPerGpu": 10.0},
                "target": {"kind": "Deployment", "name": name}, **spec}
        return {"apiVersion": API_VERSION, "kind": KIND, "spec": body, "metadata": {
            "name": name, "namespace": namespace, "creationTimestamp": f"2026-01-01T00:00:{created:02d}Z"}}
    return [rp(h, i, inferenceClusterQueue=q) for i, (h, q) in enumerate(zip(holders, queues))] + \
        [rp("batch-training-lender", 59, trainingClusterQueues=queues)]


def test_six_queue_clashes_say_how_many_and_the_fix_first():
    """Six clashes with realistic names (1,732 characters) were cut in the fourth, without saying there were
    six or what to do. The count and the fix come first now; the Ready condition's message lists each."""
    holders = [f"llm-chat-completions-{i:02d}-inference-serving" for i in range(6)]
    queues = [f"inference-serving-production-{h}-gpu-queue" for h in holders]
    objects = clashing("inference-serving-production", holders, queues)
    _, refused = parse_policies(identified(objects))
    (message,) = [m for ref, m in refused.items() if ref.name == "batch-training-lender"]
    assert len(message) > EVENT_MESSAGE_CHARS  # the condition keeps every clash
    assert all(q in message and f"inference-serving-production/{h}" in message for h, q in zip(holders, queues))
    said = event_message(message)
    assert said.startswith("6 ClusterQueues this policy names are held otherwise") and CLASH_FIX in said, said
    assert f"spec.trainingClusterQueues: ClusterQueue {queues[0]} is the inference queue" in said


# --------------------------------------------------------------------------------------------- invalid specs
# a ReservationPolicy written by hand with what goes wrong in one (quantiles in percent, durations without a unit, a
# workload kind headroom does not scale, a field one level too high), each value with the field paths it is refused at
WRONG = {
    "query": ("", ["spec.query"]),
    "statistic": ("p999.9", ["spec.statistic"]),
    "capacity": ({"demandPerGpu": "10", "gpusPerReplica": "8"},
                 ["spec.capacity.demandPerGpu", "spec.capacity.gpusPerReplica"]),
    "forecaster": ("prophet", ["spec.forecaster"]),
    "timezone": ("Berlin", ["spec.timezone"]),
    "targetQuantile": (90, ["spec.targetQuantile"]),
    "headroomQuantile": (99, ["spec.headroomQuantile"]),
    "leadTime": (15, ["spec.leadTime"]),
    "scaleInDelay": ("10 minutes", ["spec.scaleInDelay"]),
    "reclaimDeadline": ("36h", ["spec.reclaimDeadline"]),
    "warmBuffer": ("1.0", ["spec.warmBuffer"]),
    "warmBufferQuantile": (1.5, ["spec.warmBufferQuantile"]),
    "minGpus": (-2, ["spec.minGpus"]),
    "maxGpus": (0, ["spec.maxGpus"]),
    "marginGpus": (2.5, ["spec.marginGpus"]),
    "headroomFloorGpus": ("4", ["spec.headroomFloorGpus"]),
    "target": ({"kind": "StatefulSet", "name": "chat"}, ["spec.target.kind"]),
    "inferenceClusterQueue": ("", ["spec.inferenceClusterQueue"]),
    "trainingClusterQueues": ("training-research", ["spec.trainingClusterQueues"]),
    "mode": ("Active", ["spec.mode"]),
    "objective": ({"maxShortage": 5}, ["spec.objective.maxShortage"]),
    "maxShortSteps": (0.01, ["spec.maxShortSteps"]),
}


def invalid_spec(namespace: str, name: str, wrong: dict) -> str:
    """The refusal of a policy whose spec has the `wrong` fields (the rest valid), as the controller writes it."""
    spec = {"query": "sum(rate(requests_total[5m]))", "capacity": {"demandPerGpu": 10.0},
            "target": {"kind": "Deployment", "name": name}, **wrong}
    _, refused = parse_policies(identified([{"apiVersion": API_VERSION, "kind": KIND, "spec": spec,
                                             "metadata": {"name": name, "namespace": namespace}}]))
    (message,) = refused.values()
    return message


def test_a_spec_of_many_errors_names_every_field_in_the_event():
    """The errors were joined one after another, so the InvalidSpec Event of a hand-written policy of 23 errors (1,576
    characters) ended inside the 14th, and the 9 fields after it went unnamed. How many and every field path come
    first now, each error after; the Ready condition keeps every error. One error is said as it was."""
    message = invalid_spec("inference-serving-production", "llm-chat-completions",
                           {field: value for field, (value, _) in WRONG.items()})
    paths = [path for _, fields in WRONG.values() for path in fields]
    said = event_message(message)
    assert len(message) > EVENT_MESSAGE_CHARS and said.startswith(f"{len(paths)} errors in the spec ("), said
    assert all(path in said for path in paths), said
    kept = Condition("Ready", "False", "InvalidSpec", message).message
    assert all(f"{path}: " in kept for path in paths) and "'Berlin' is not an IANA time zone" in kept
    assert invalid_spec("inference-serving-production", "chat", {"leadTime": 15}).startswith("spec.leadTime: 15 has no")


# --------------------------------------------------------------------------------------------- every message
@settings(max_examples=25)
@given(st.lists(st.tuples(namespaces, names), min_size=1, max_size=12, unique=True), names,
       st.text(min_size=1, max_size=4000), st.integers(2, 500),
       st.dictionaries(st.text(min_size=1, max_size=63), st.text(max_size=253), max_size=20),
       st.sets(st.sampled_from(sorted(WRONG)), min_size=2), st.text(max_size=4000))
@example([("n" * 63, f"{i:02d}" + "p" * 251) for i in range(12)], "w" * 253, "q" * 4000, 500,  # the longest names
         {f"{i:02d}" + "l" * 61: "v" * 253 for i in range(20)}, set(WRONG), "z" * 4000)
def test_every_event_message_keeps_the_object_and_the_fix_for_names_of_any_length(keys, workload, query, series,
                                                                                     labels, wrong, zone):
    """Whatever the names (up to Kubernetes' longest), however many policies, queues and series, each Event these
    paths write keeps, within the 1,024 characters Kubernetes keeps, what is wrong, which object and the fix:
    - Preempted (and the eviction-reason annotation): both kinds, and the policy furthest above its forecast;
    - a query of many series refused: the query's start and the fix, in few enough characters that the Event carrying
      it (after 'DemandUnavailable: ', before the fallback it causes, at most 210) keeps it whole;
    - queue clashes (InvalidSpec): how many, the fix and the first clash (the queue and the policy holding it);
    - a spec of many errors (InvalidSpec), one of them quoting a time zone of up to 4,000 characters: how many and
      every field path."""
    keys = [f"{ns}/{name}" for ns, name in keys]
    evict = preempted(keys, f"training/{workload}")
    said = event_message(evict.event.message)
    assert EXCESS in said and BAND in said and keys[-1] in said, said
    assert EXCESS in event_message(evict.reason) and BAND in event_message(evict.reason)

    result = [{"metric": {**labels, "pod": str(i)}, "values": []} for i in range(series)]
    with pytest.raises(PrometheusError) as refused:
        parse_matrix(result, query)
    said = f"DemandUnavailable: {refused.value}"
    assert len(said) <= EVENT_MESSAGE_CHARS - 300, len(said)
    assert MANY_SERIES_FIX in said and f"returned {series} series" in said and repr(query)[:100] in said, said
    shown = ", ".join(f"{{'pod': '{i}'}}" for i in range(min(series, 3)))  # pod: the only label that differs
    assert said.endswith(f"where they differ: {shown}")

    namespace = keys[0].split("/")[0]
    holders = [name[:252].rstrip("-.") for name in dict.fromkeys(k.split("/")[1] for k in keys)]  # still names
    assume("batch-training-lender" not in holders and len(set(holders)) == len(holders))
    queues = [f"q{h}" for h in holders]  # each holder's inference queue, 253 characters at most
    _, refused_policies = parse_policies(identified(clashing(namespace, holders, queues)))
    (message,) = [m for ref, m in refused_policies.items() if ref.name == "batch-training-lender"]
    said = event_message(message)
    assert said.startswith(f"{len(queues)} ClusterQueue") and CLASH_FIX in said, said
    assert f"ClusterQueue {queues[0]} is the inference queue of ReservationPolicy {namespace}/{holders[0]}" in said

    values = {field: f"Nowhere/{zone}" if field == "timezone" else WRONG[field][0] for field in wrong}
    said = event_message(invalid_spec(namespace, holders[0], values))
    paths = [path for field in wrong for path in WRONG[field][1]]
    assert said.startswith(f"{len(paths)} errors in the spec (") and all(path in said for path in paths), said


def test_a_condition_message_fits_what_the_crd_accepts():
    """The API server refuses a condition message over the CRD's maxLength, and the whole status write with it: 64
    training queues (the schema's most) each clashing, with names of 253 characters, come to about 42,000."""
    crd = yaml.safe_load((Path(__file__).resolve().parents[1] / "deploy" / "crds"
                          / "headroom.dev_reservationpolicies.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert schema["conditions"]["items"]["properties"]["message"]["maxLength"] == CONDITION_MESSAGE_CHARS
    long = Condition("Ready", "False", "InvalidSpec", "64 ClusterQueues clash: " + "q" * 42_000)
    assert len(long.message) == CONDITION_MESSAGE_CHARS and long.message.startswith("64 ClusterQueues clash")
    assert long.message.endswith("...")
    assert Condition("Ready", "True", "Reconciled", "ok").message == "ok"
