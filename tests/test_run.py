"""The controller on the embedded cluster (adapters.embedded.EmbeddedCluster): `headroom run` without Kubernetes.

The cluster here is the in-process world the simulator uses (warm-up, Kueue admission of a saturated training
backlog, checkpoints, termination, requeue), stepped as cli/run.py steps it: time passes, one reconcile, Kueue's
pass. Each behaviour is proven against the real API server and Prometheus in tests/test_run_real.py; this file
covers the decisions, fast. MLflow is real: a sqlite store and a real `mlflow server`.
"""
from __future__ import annotations

import contextlib
import math
import os
import signal
import threading
import time

import numpy as np
import pandas as pd
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from adapters.embedded import EmbeddedCluster
from adapters.prometheus import PrometheusError
from controller.actions import Evict
from controller.demand import DemandReader, FileDemand
from controller.executor import execute
from controller.reconcile import (
    ParsedSpecs,
    Reconciler,
    identified,
    invalid_holdings,
    parse_policies,
    training_queues,
)
from core.errors import ClusterError, ConfigError, NotFound
from core.objects import CONDITION_TYPES, TargetRef
from core.policy import API_VERSION, KIND, held_demand_per_gpu, holding_said, holding_spec, parse_policy_spec
from core.settings import RunConfig, WorldSettings
from forecast.synthetic import synthetic_demand, write_csv
from planning.planner import plan_step
from tests.test_training import mlflow_server  # noqa: F401 -- the real `mlflow server` fixture
from training.realized import ForecastLog

# 21 days of synthetic 5-min demand from Monday 2026-01-05; the tests run in its third week, when weekday
# mornings ramp up to a 10:30 peak of ~100 GPUs (FileDemand never shows the controller a sample after its `now`).
DEMAND = synthetic_demand(days=21, peak=1000.0)
MONDAY_6AM = pd.Timestamp("2026-01-19T06:00:00Z")
AT_9 = MONDAY_6AM + pd.Timedelta(hours=3)
# training jobs of 8 GPUs that stop within a minute: what the eviction tests count is easy to read
EIGHTS = WorldSettings(backlog_job_gpus=(8,), preemption_seconds=(60.0, 60.0))


def policy(name="chat", mode="active", **spec) -> dict:
    body = {"query": "sum(rate(requests_total[5m]))", "statistic": "max",
            "capacity": {"demandPerGpu": 10.0, "gpusPerReplica": 2}, "target": {"kind": "Deployment", "name": name},
            "trainingClusterQueues": ["research"], "minGpus": 2, "leadTime": "15m", "mode": mode}
    body.update(spec)
    return {"apiVersion": API_VERSION, "kind": KIND,
            "metadata": {"name": name, "namespace": "inference", "generation": 1}, "spec": body}


@pytest.fixture
def demand_file(tmp_path):
    path = tmp_path / "demand.csv"
    write_csv(DEMAND, path)
    return path


class Replay:
    """The embedded cluster holding `policies` and a Reconciler on it, stepped as `headroom run` steps them
    (cli/run.py): time passes (`advance`), one reconcile, then Kueue's admission pass."""

    def __init__(self, tmp_path, files, *policies, start=MONDAY_6AM, demand=None, world=EIGHTS, gpus=128, run=None,
                 **reconciler):
        self.policies = list(policies) or [policy()]
        keys = [f"inference/{p['metadata']['name']}" for p in self.policies]
        files = files if isinstance(files, dict) else {k: files for k in keys}
        self.files = FileDemand(files)
        self.cluster = EmbeddedCluster(gpus, self.policies, {k: self.files.series(k) for k in files if k in keys},
                                       start.timestamp(), settings=world)
        self.cfg = RunConfig(capacity_gpus=gpus, **(run or {}))
        self.log = ForecastLog(tmp_path / "log")
        self.reconciler = Reconciler(self.cluster, demand or self.files, self.cfg, forecast_log=self.log, **reconciler)
        self.started = False

    def step(self, now):
        now = pd.Timestamp(now)
        if self.started:
            self.cluster.advance(now.timestamp())
        self.started = True
        state = self.reconciler.reconcile(now)
        self.cluster.admit()
        return state

    def restart(self, **reconciler) -> Reconciler:
        """A new controller process on the same cluster: none of the old one's memory."""
        self.reconciler = Reconciler(self.cluster, self.files, self.cfg, forecast_log=self.log, **reconciler)
        return self.reconciler

    def fill_training(self, queue="research"):
        """Training holds the whole cluster, as after a night of lending everything (Kueue admits a saturated
        backlog into the queue's quota); the quota is then back to what the controller last set."""
        before = self.cluster.quotas[queue]
        self.cluster.quotas[queue] = self.cluster.capacity_gpus
        self.cluster.admit()
        self.cluster.quotas[queue] = before
        idle = self.cluster.capacity_gpus - self.cluster.inference_gpus - self.cluster.training_gpus
        assert 0 <= idle < min(self.cluster.settings.backlog_job_gpus)  # no job fits what inference leaves

    def replicas(self, name="chat") -> int:
        gpr = self.cluster.specs[f"inference/{name}"].capacity.gpus_per_replica
        return self.cluster.target_state(TargetRef("Deployment", name, "inference"), gpr).desired_replicas

    def status(self, name="chat") -> tuple[dict, dict]:
        s = self.cluster.statuses[("inference", name)]
        return s, {c["type"]: c for c in s["conditions"]}

    def events(self, reason=None, name=None) -> list[dict]:
        return [e for e in self.cluster.events if (reason is None or e["reason"] == reason)
                and (name is None or e["name"] == name)]

    def running(self) -> list:
        return [w for w in self.cluster.workloads() if w.admitted and w.active]


# ----------------------------------------------------------------------------------------------- policies
def test_invalid_policy_is_reported_with_field_paths_and_does_not_stop_the_others(demand_file, tmp_path):
    bad = policy("bad", leadTime="soon", capacity={"demandPerGpu": -1})
    r = Replay(tmp_path, demand_file, policy(), bad)
    for minutes in (0, 5):  # the same error twice: one event, not one per reconcile
        state = r.step(MONDAY_6AM + pd.Timedelta(minutes=minutes))
    assert not state.policies["inference/bad"].valid
    _, conditions = r.status("bad")
    assert conditions["Ready"]["status"] == "False" and conditions["Ready"]["reason"] == "InvalidSpec"
    assert "spec.capacity.demandPerGpu" in conditions["Ready"]["message"]
    assert "spec.leadTime" in conditions["Ready"]["message"]
    assert [(e["reason"], e["type"]) for e in r.events(name="bad")] == [("InvalidSpec", "Warning")]
    chat = state.policies["inference/chat"]
    assert chat.valid and r.replicas() * 2 == chat.reserved_gpus >= 2
    assert r.status("chat")[1]["Ready"]["status"] == "True"
    # a restarted controller finds the refusal in the status: no second event
    r.restart()
    assert not r.step(MONDAY_6AM + pd.Timedelta(minutes=7)).policies["inference/bad"].valid
    assert len(r.events(name="bad")) == 1
    # fixed in place (a new generation): it takes part from the next reconcile, and its status says so
    r.cluster.apply_policy(policy("bad"))
    state = r.step(MONDAY_6AM + pd.Timedelta(minutes=10))
    s, conditions = r.status("bad")
    assert state.policies["inference/bad"].valid and conditions["Ready"]["status"] == "True"
    assert s["observedGeneration"] == 2 and r.replicas("bad") * 2 == state.policies["inference/bad"].reserved_gpus


def test_parse_policies_names_every_bad_field():
    valid, invalid = parse_policies(identified([policy(), policy("x", mode="sometimes", leadTime="soon"),
                                                policy("y", targetQuantile=0.99, headroomQuantile=0.9)]))
    assert [p.key for p in valid] == ["inference/chat"]
    by_name = {ref.name: message for ref, message in invalid.items()}
    assert "spec.mode: Input should be 'forecast-only' or 'active'" in by_name["x"] and "spec.leadTime" in by_name["x"]
    assert by_name["y"] == "spec.headroomQuantile: headroomQuantile must be at least targetQuantile (0.99), got 0.9"


QUEUES = ("q0", "q1", "q2", "q3")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(QUEUES + (None,)), st.booleans(),
                          st.lists(st.sampled_from(QUEUES), max_size=2, unique=True)), max_size=5))
def test_every_queue_the_accepted_policies_name_has_one_role(claims):
    """Whatever the policies name, among those accepted no ClusterQueue holds inference (an inferenceClusterQueue or
    a ClusterQueue target) for one and training for another, and a ClusterQueue target is no other policy's
    inference queue; the first policy to name a queue is never the one refused for it."""
    objects = []
    for k, (inference, target_is_queue, training) in enumerate(claims):
        target = {"kind": "ClusterQueue", "name": f"t{k % 2}"} if target_is_queue else \
            {"kind": "Deployment", "name": f"d{k}"}
        objects.append(policy(f"p{k}", target=target, trainingClusterQueues=training, inferenceClusterQueue=inference))
    accepted, _ = parse_policies(identified(objects))
    holds, trains, targets = {}, {}, {}
    for p in accepted:
        queue_target = [p.spec.target.name] if p.spec.target.kind == "ClusterQueue" else []
        for q in [p.spec.inference_cluster_queue, *queue_target]:
            if q:
                holds.setdefault(q, set()).add(p.key)
        for q in queue_target:
            targets[q] = p.key
        for q in p.spec.training_cluster_queues:
            trains.setdefault(q, set()).add(p.key)
    assert not holds.keys() & trains.keys(), (holds, trains)
    assert all(holds[q] == {key} for q, key in targets.items()), (holds, targets)
    if objects:
        first = objects[0]["metadata"]["name"]
        assert first in {p.ref.name for p in accepted} or parse_policies(identified(objects[:1]))[0] == []


def _within_training(holdings, kept) -> list[tuple[bool, object]]:
    """The refused policies and targets edits left holding no target (invalid_holdings' `within`) whose
    inferenceClusterQueue is a training queue the policies lend into, each with whether it is a refused policy: Kueue
    admits their pods there on a cluster and the controller counts them (training_view's `served`)."""
    _, lenders, refused, _, within = holdings
    lent = training_queues(kept + lenders)
    return [(any(p is r for r in refused), p) for p in within
            if p.spec.target.kind != "ClusterQueue" and p.spec.inference_cluster_queue in lent]


def refused_in_training(holdings, kept) -> list:
    """The refused policies of `_within_training`: the world runs each one's target as its workload there (its
    `inference` and `pods_in_training`, by the policy's key). Not a target an edit left there: `within` holds it under
    the key of the policy that left it, beside that policy now naming another target, and the world runs it as no
    policy's workload (its `left` and `left_pods`, by the target), so a key says nothing of it."""
    return [p for refused, p in _within_training(holdings, kept) if refused]


def pods_in_training(holdings, kept) -> dict[str, str]:
    """The refused policies of `_within_training`: each one's key -> the training queue its pods run in."""
    return {p.key: p.spec.inference_cluster_queue for p in refused_in_training(holdings, kept)}


def left_pods(holdings, kept, runs=lambda ref: True) -> dict[TargetRef, str]:
    """The targets edits left whose pods are Kueue Workloads, each -> their ClusterQueue: those of `_within_training`,
    in the training queue, and those held (`runs`: the world keeps it) that name an inferenceClusterQueue, in it (their
    queue-name label says so, whether that queue is lent into or no longer)."""
    held = {ref: p.spec.inference_cluster_queue for p in holdings.left
            if p.spec.target.kind != "ClusterQueue" and p.spec.inference_cluster_queue is not None
            and runs(ref := p.spec.target.ref(p.ref.namespace))}
    return held | {p.spec.target.ref(p.ref.namespace): p.spec.inference_cluster_queue
                   for refused, p in _within_training(holdings, kept) if not refused}


# a spec that does not parse: what it holds still reads (a misspelt field), or not even its target does
BROKEN = {None: {}, "typo": {"targetQuantlie": 0.5}, "unread": {"target": {"kind": "Deployment"}}}


@settings(max_examples=200, deadline=None)
@example([("q0", "d0", []), ("q0", "d0", ["q1"]), ("q0", "q1", [])], [])  # the refused p1's training queue, p2's target
@example([("q0", "d1", []), ("q0", "d1", ["q1"]), ("q1", "d0", ["q0"])], [])  # ...and the refused p2's inference queue
@example([("q0", "d0", []), (None, "q0", [])], ["typo", "typo"])  # the refused p0's pods run in p1's queue target
@example([("q1", "d1", []), ("q0", "d0", ["q1"]), (None, "q0", ["q1"])], [])  # ...both refused for a clash with p0
@example([(None, "q0", []), ("q1", "d0", [])], ["typo"])  # a refused ClusterQueue target, and a policy applied after
@example([(None, "q0", []), ("q0", "d0", [])], ["typo", "typo"])  # the refused p1's pods run in p0's queue target
@example([(None, "q0", []), ("q0", "d0", [])], [])  # ...p0 accepted, p1 refused for it
@example([("q0", "q0", ["q1"]), ("q0", "d0", []), ("q1", "d0", [])], [])  # the refused p1's pods, in p0's queue target,
# are d0's: the newer p2 naming p0's training queue runs none there
@given(st.lists(st.tuples(st.sampled_from(QUEUES + (None,)), st.sampled_from(["d0", "d1", "q0", "q1"]),
                          st.lists(st.sampled_from(QUEUES), max_size=2, unique=True)), max_size=5),
       st.lists(st.sampled_from(list(BROKEN)), max_size=5))
def test_the_world_holds_what_the_accepted_policies_name_whatever_the_others_name(claims, broken):
    """The embedded cluster built from any policies, some of whose specs do not parse (`broken`): a target is one
    workload, whichever policies name it; no ClusterQueue holds both training (the backlog's jobs) and inference
    (replicas, or a ClusterQueue target's quota); each accepted policy's target, inference queue and training queues
    are there as it names them; and the targets and training queues are those the controller counts: the accepted
    policies' and what the refused ones hold and lend into (controller.reconcile.invalid_holdings), a spec that does
    not parse read as far as it says what it holds. So too a world started without the last policy, then applied it
    (`kubectl apply`), but for a queue no one lends into any more: it keeps its training."""
    objects = [policy(f"p{k}", target={"kind": "Deployment" if name[0] == "d" else "ClusterQueue", "name": name},
                      trainingClusterQueues=training, inferenceClusterQueue=inference)
               for k, (inference, name, training) in enumerate(claims)]
    for p, kind in zip(objects, broken):
        p["spec"].update(BROKEN[kind])
    specs = ParsedSpecs()
    read = identified(objects)
    kept, invalid = parse_policies(read, specs)
    holdings = invalid_holdings(read, invalid, kept, specs)
    holders, lenders, *_ = holdings
    running = pods_in_training(holdings, kept)  # a refused policy's pods in a training queue: its target runs there
    counted = {p.spec.target.ref("inference") for p in kept + holders} | {
        p.spec.target.ref("inference") for p in refused_in_training(holdings, kept)}
    world = EmbeddedCluster(128, objects, {}, MONDAY_6AM.timestamp())
    worlds = [world]
    if objects:
        worlds.append(EmbeddedCluster(128, objects[:-1], {}, MONDAY_6AM.timestamp()))
        worlds[-1].apply_policy(objects[-1])
    for w in worlds:
        refs = [inf.ref for inf in w.inference.values()]
        assert len(refs) == len(set(refs)), refs
        inference = set(w.inference_queues.values()) | {ref.name for ref in refs if ref.kind == "ClusterQueue"}
        assert not inference & set(w.training_queues), (w.inference_queues, refs, w.training_queues)
        for p in kept:
            target = p.spec.target.ref("inference")
            assert w.inference[p.key].ref == target
            assert w.inference_queues.get(p.key) == p.spec.inference_cluster_queue
            assert set(p.spec.training_cluster_queues) <= set(w.training_queues)
        # what the controller counts, each once (a ClusterQueue target a refused policy before it runs its pods in is
        # that policy's queue, not a target of its own)
        assert set(refs) == counted, (refs, counted)
        assert w.pods_in_training == running, (w.pods_in_training, running)
        assert training_queues(kept + lenders) <= set(w.training_queues), (w.training_queues, lenders)
    assert set(world.training_queues) == training_queues(kept + lenders), (world.training_queues, lenders)
    # a world the last policy was applied to holds what one started with it holds: nothing left from before decides
    assert {k: inf.ref for k, inf in worlds[-1].inference.items()} == {k: inf.ref for k, inf in world.inference.items()}
    assert worlds[-1].inference_queues == world.inference_queues


# an edit of one policy: its target (another's, or one no one names), its replica size or demandPerGpu, a field that
# makes it not parse, or its target removed so not even what it holds reads
EDITS = st.one_of(st.builds(lambda name: {"target": {"kind": "Deployment" if name[0] == "d" else "ClusterQueue",
                                                     "name": name}}, st.sampled_from(["d0", "d1", "d9", "q0", "q9"])),
                  st.sampled_from([{"capacity": {"demandPerGpu": 10.0, "gpusPerReplica": 4}},
                                   {"capacity": {"demandPerGpu": 5.0, "gpusPerReplica": 2}},
                                   BROKEN["typo"], BROKEN["unread"]]))


@settings(max_examples=200, deadline=None)
@example([("q0", "d0", []), ("q1", "d0", []), ("q1", "d1", ["q0"]), ("q0", "q0", [])], ["typo"], 2,
         {"target": {"kind": "Deployment", "name": "d0"}})  # p2's pods held in q0's quota, p0 refused
@example([("q0", "d0", [])], [], 0, BROKEN["unread"])
@example([("q0", "d0", []), (None, "d0", [])], [None, "typo"], 0, BROKEN["unread"])  # p0 keeps d0, refused p1 none
@example([(None, "d0", []), (None, "d1", [])], [], 0, {"capacity": {"demandPerGpu": 5.0, "gpusPerReplica": 4}})
@example([("q0", "d0", [])], [], 0, {"target": {"kind": "Deployment", "name": "d9"}})  # d0 runs on, no one's
@example([("q0", "q0", [])], [], 0, {"target": {"kind": "Deployment", "name": "d0"}})  # q0 left: its inference queue
@example([("q0", "d0", []), ("q0", "q0", [])], ["typo", "typo"], 1,
         {"target": {"kind": "ClusterQueue", "name": "q9"}})  # q0 left: p0's pods in it, p1's queue still
@example([("q0", "d0", ["q0"]), ("q1", "q0", []), ("q0", "d0", ["q0"]), ("q1", "d0", ["q0"])], [], 1,
         {"target": {"kind": "Deployment", "name": "d0"}})  # q0 left: the refused p3's training queue, lent into
@example([("q0", "d0", []), ("q0", "d0", ["q0"]), ("q1", "q1", ["q0"])], ["typo"], 0,
         {"target": {"kind": "Deployment", "name": "d1"}})  # the refused p0's d1 and the d0 it left both run in q0
@example([("q3", "q0", []), ("q0", "d0", []), ("q1", "d0", ["q0", "q3"])], [None, "typo"], 0,
         {"target": {"kind": "Deployment", "name": "d1"}})  # q0 left, the refused p1's pods in it: p2 holds d0 on
@example([("q0", "d1", []), ("q0", "d0", ["q0"]), ("q1", "d1", [])], ["typo", None, "typo"], 2,
         {"target": {"kind": "ClusterQueue", "name": "q0"}})  # p0 held d1, not p2: p2's edit leaves it behind for none
@given(st.lists(st.tuples(st.sampled_from(QUEUES + (None,)), st.sampled_from(["d0", "d1", "q0", "q1"]),
                          st.lists(st.sampled_from(QUEUES), max_size=2, unique=True)), min_size=1, max_size=4),
       st.lists(st.sampled_from(list(BROKEN)), max_size=4), st.integers(0, 3), EDITS)
def test_a_world_after_an_edit_holds_what_one_started_with_the_edited_policy_holds(claims, broken, k, edit):
    """A `kubectl apply` editing one policy of a running world: the world then holds what one started with the edited
    policies holds, each workload at the replica size and demandPerGpu its policy now says (the world kept the old
    ones: its replicas of 2 GPUs where the controller counted 4); and what the controller counts, the targets of the
    policies it accepts and of the refused ones' holdings. A policy edited so that not even its target reads holds
    what it held before the edit (a policy edit deletes no workload), as a refused policy with that spec would, and
    the controller, which read it before, counts it (ParsedSpecs.holding). A target the edit named another in place of
    runs on (an edit deletes no workload), no one's: the world keeps it, the controller counts it (invalid_holdings)
    where no policy holds it; but not one another policy held before the edit (a refused policy naming another's
    target holds none of it): an edit leaves behind only what the policy held."""
    objects = [policy(f"p{i}", target={"kind": "Deployment" if name[0] == "d" else "ClusterQueue", "name": name},
                      trainingClusterQueues=training, inferenceClusterQueue=inference)
               for i, (inference, name, training) in enumerate(claims)]
    for p, kind in zip(objects, broken):
        p["spec"].update(BROKEN[kind])
    k %= len(objects)
    # each target serving a demand: what one left behind holds, unless its demandPerGpu does not read
    demand = {f"inference/p{i}": pd.Series([20.0], index=[MONDAY_6AM]) for i in range(len(objects))}
    world = EmbeddedCluster(128, objects, demand, MONDAY_6AM.timestamp())
    # the controller read the policies before the edit (the world's objects, their uids), and decided what each holds
    specs = ParsedSpecs()
    read = identified(world.reservation_policies())
    kept, invalid = parse_policies(read, specs)
    invalid_holdings(read, invalid, kept, specs)
    # ...and each policy's status says what it holds, as a controller older than holdsTarget wrote it
    for obj, ref, generation in read:
        refusal = [{"type": "Ready", "status": "False", "reason": "InvalidSpec"}] if ref in invalid else []
        held_by = specs.holding(ref, generation, obj["spec"], {})
        world.statuses[(ref.namespace, ref.name)] = {"observedGeneration": generation, "conditions": refusal,
                                                     "holding": None if held_by is None else holding_said(held_by)}
    gpus = {inf.ref: world.quotas[inf.ref.name] if inf.ref.kind == "ClusterQueue" else
            inf.desired * inf.gpus_per_replica for inf in world.inference.values()}  # before the edit
    edited = {**objects[k], "spec": {**objects[k]["spec"], **edit}}
    world.apply_policy(edited)
    # a world started with the edited policies; an edit after which not even what it holds reads (its target removed,
    # or a queue it names twice): with the policy refused as it was
    held = edited if holding_spec(edited["spec"]) is not None else \
        {**objects[k], "spec": {**objects[k]["spec"], **BROKEN["typo"]}}
    fresh = EmbeddedCluster(128, [held if i == k else p for i, p in enumerate(objects)], demand,
                            MONDAY_6AM.timestamp())
    # ...but for a refused policy whose pods run in a ClusterQueue the edit left behind: they are within that queue's
    # quota, held whole, no workload of their own (core.policy.refused_holders)
    queues_left = {ref.name for ref in world.left if ref.kind == "ClusterQueue"}
    within_left = {key for key, spec in fresh.specs.items()
                   if spec.target.kind != "ClusterQueue" and spec.inference_cluster_queue in queues_left}
    # ...so its target is held by the next refused policy naming it, one holding none in the started world: as before
    # the edit, when that queue was its policy's target (refused_holders: a policy whose pods are within a queue held
    # whole claims no target; of two on one Deployment that disagree where its pods run, the GPUs it holds stay
    # counted, beside the queue's, never lent)
    named_within_left = {fresh.specs[key].target.ref("inference") for key in within_left}
    held_next = {key for key, inf in world.inference.items()
                 if inf.ref in named_within_left and key not in fresh.inference}
    # ...and for one whose pods run in a training queue on a target the edit left behind: the left target holds it
    within_left |= {key for key in fresh.pods_in_training if fresh.inference[key].ref in world.left}
    assert {key: (inf.ref, inf.gpus_per_replica, inf.demand_per_gpu) for key, inf in world.inference.items()
            if key not in held_next} == {
        key: (inf.ref, inf.gpus_per_replica, inf.demand_per_gpu) for key, inf in fresh.inference.items()
        if key not in within_left}
    assert {key: q for key, q in world.inference_queues.items() if key not in held_next} == {
        key: q for key, q in fresh.inference_queues.items() if key not in within_left}
    assert set(world.training_queues) >= set(fresh.training_queues)  # a queue no one lends into keeps its training
    after = identified(world.reservation_policies())
    kept, invalid = parse_policies(after, specs)
    holdings = invalid_holdings(after, invalid, kept, specs)
    holders, _, _, left, _ = holdings
    # a controller restarted before it planned the edit counts the same from those statuses: nothing in them says who
    # held a target named left behind, but the policies as they said them
    restarted = ParsedSpecs()
    kept_again, invalid_again = parse_policies(after, restarted)
    counted = invalid_holdings(after, invalid_again, kept_again, restarted)
    assert [[(p.key, p.spec.target) for p in ps] for ps in (counted.holders, counted.left, counted.within)] == [
        [(p.key, p.spec.target) for p in ps] for ps in (holders, left, holdings.within)]
    running = pods_in_training(holdings, kept)
    assert {key: inf.ref for key, inf in world.inference.items()} == {
        p.key: p.spec.target.ref("inference") for p in [*kept, *holders, *refused_in_training(holdings, kept)]}
    assert world.pods_in_training == running, (world.pods_in_training, running)
    # ...but one that holds no GPU, which the controller forgets as it reads it (and the world forgets); one whose pods
    # run in a training queue the controller reads not (within that queue): both keep it
    left_running = left_pods(holdings, kept, lambda ref: gpus[ref])
    assert world.left_pods == left_running, (world.left_pods, left_running)
    assert set(world.left) == {p.spec.target.ref("inference") for p in left
                               if gpus[p.spec.target.ref("inference")]} | set(left_running)


@pytest.mark.parametrize("status_generation, holds", [(None, "read"), (1, "read"), (2, "read"), (3, "said")])
def test_a_policy_s_holding_is_the_newer_of_what_this_controller_read_and_what_its_status_says(status_generation,
                                                                                                holds):
    """A policy whose spec no longer says what it holds (generation 4, its target's name removed) holds what the newer
    of two says: the spec this controller read last (generation 2, target `read`), or its status (status.holding, as a
    restarted controller or another leader wrote it). A status not yet rewritten since (a generation before) says the
    older holding; one written by a leader that read a newer spec (generation 3) the newer. No status says nothing
    of it, and a fresh controller holds what the status says."""
    def at(generation: int, name: str | None) -> tuple:
        edited = policy("p", target={"kind": "Deployment", **({"name": name} if name else {})})
        edited["metadata"]["generation"] = generation
        return identified([edited])[0]

    specs = ParsedSpecs()
    for generation, name in ((1, "first"), (2, "read")):
        parse_policies([at(generation, name)], specs)
    said = parse_policy_spec(at(3, "said").obj["spec"], "said")
    status = {} if status_generation is None else {"observedGeneration": status_generation,
                                                   "holding": holding_said(said)}
    obj, ref, generation = at(4, None)
    assert specs.holding(ref, generation, obj["spec"], status).target.name == holds
    fresh = ParsedSpecs().holding(ref, generation, obj["spec"], status)
    assert fresh is None if status_generation is None else holding_said(fresh) == holding_said(said)


# an edit of the policy's target (None: its name removed) or a target scaled to 0 by hand; then a restart or not
LEFT_STEPS = st.lists(st.tuples(st.sampled_from(["edit", "scale to 0"]), st.sampled_from(["d0", "d1", "d2", None]),
                                st.booleans()), max_size=12)


@settings(max_examples=200, deadline=None)
@example([("edit", "d1", True), ("edit", "d2", False), ("scale to 0", "d0", True)])  # before the edit's reconcile
@example([("edit", "d1", False), ("edit", None, False), ("edit", "d2", True)])  # d1 read, then no spec said it
@given(LEFT_STEPS)
def test_a_restarted_controller_counts_the_targets_an_edit_left_as_one_that_never_restarted(steps):
    """A policy's target edited (None: its name removed, so not even what it holds reads) and targets scaled to 0 by
    hand, a reconcile after each step, by two controllers: one that never restarts, and one restarted before the
    reconcile where the step says so (or a new leader), which knows only what the policy's status says (status.holding
    and status.left, as it wrote them). Both count the targets the policy held and holds no more, each until it reads
    0 (scaled to 0: then forgotten, until the policy names it again and scales it), and their statuses say the same."""
    generation, name, holds, held, zeroed = 1, "d0", "d0", {"d0"}, set()
    steady, restarted = ParsedSpecs(), ParsedSpecs()
    statuses: list[dict] = [{}, {}]

    def reconcile(specs: ParsedSpecs, status: dict) -> tuple[set[str], dict]:
        obj = policy("p", target={"kind": "Deployment", **({"name": name} if name else {})})
        obj["metadata"]["generation"] = generation
        read = identified([{**obj, "status": status}])
        accepted, invalid = parse_policies(read, specs)
        counted = set()
        for p in invalid_holdings(read, invalid, accepted, specs).left:
            if p.spec.target.name in zeroed:  # reads 0: nothing to count any more
                specs.forget_left(p.ref, p.target().target)
            else:
                counted.add(p.spec.target.name)
        spec = specs.holding(read[0].ref, generation, obj["spec"], status)
        assert spec is not None and spec.target.name == holds
        return counted, {"observedGeneration": generation, "holding": holding_said(spec),
                         "left": specs.left_said(read[0].ref)}

    for step, target, restart in [("start", None, False), *steps]:
        if step == "edit":
            generation, name = generation + 1, target
            holds = target or holds
            zeroed.discard(holds)  # held: its policy scales it
            held.add(holds)
        elif step == "scale to 0" and target not in (None, holds):
            zeroed.add(target)
        if restart:
            restarted = ParsedSpecs()
        (counted, statuses[0]), (again, statuses[1]) = (reconcile(steady, statuses[0]),
                                                        reconcile(restarted, statuses[1]))
        assert counted == again == held - {holds} - zeroed, (step, target, restart)
        assert statuses[0] == statuses[1]


def test_a_spec_is_parsed_once_per_generation_and_forgotten_with_its_policy(monkeypatch):
    import controller.reconcile as reconcile

    parsed = []
    original = reconcile.parse_policy_spec
    monkeypatch.setattr(reconcile, "parse_policy_spec", lambda raw, source: parsed.append(source) or original(raw,
                                                                                                               source))
    specs = reconcile.ParsedSpecs()
    bad = policy("bad", leadTime="soon")
    for _ in range(3):  # steady reconciles: each spec parsed once, the refusal's message kept with it
        (chat,), invalid = parse_policies(identified([policy(), bad]), specs)
        assert "spec.leadTime" in invalid[next(iter(invalid))]
    assert sorted(parsed) == ["ReservationPolicy inference/bad", "ReservationPolicy inference/chat"]
    changed = policy(minGpus=6)
    changed["metadata"]["generation"] = 2
    (chat,), _ = parse_policies(identified([changed, bad]), specs)  # a new generation: parsed again, its spec in force
    assert (chat.generation, chat.spec.min_gpus, len(parsed)) == (2, 6, 3)
    # deleted and created again where nothing sets a uid (the embedded cluster): generation 1 again, another spec
    (chat,), _ = parse_policies(identified([policy(minGpus=4)]), specs)
    assert (chat.generation, chat.spec.min_gpus, len(parsed)) == (1, 4, 4)
    specs.keep(set())  # gone from the cluster: forgotten
    parse_policies(identified([policy(minGpus=4)]), specs)
    assert len(parsed) == 5


def test_a_policy_whose_replica_cannot_fit_the_cluster_is_refused_alone(demand_file, tmp_path):
    """A replica larger than the cluster could never be held: refused as the minimum is, the others go on."""
    r = Replay(tmp_path, demand_file, policy("chat"),
               policy("huge", minGpus=0, capacity={"demandPerGpu": 10.0, "gpusPerReplica": 200}))
    state = r.step(AT_9)
    huge = state.policies["inference/huge"]
    assert not huge.valid and "capacity.gpusPerReplica 200 does not fit: the cluster lends 128 GPUs" in huge.error
    assert r.status("huge")[1]["Ready"]["reason"] == "PlanInfeasible" and state.policies["inference/chat"].valid


def test_a_minimum_is_held_in_whole_replicas_when_it_is_checked_against_the_cluster(demand_file, tmp_path):
    """minGpus 27 of 8-GPU replicas holds 4 replicas, 32 GPUs: beside a minimum of 100 on 128 GPUs it does not fit."""
    r = Replay(tmp_path, demand_file, policy("chat", minGpus=100),
               policy("odd", minGpus=27, capacity={"demandPerGpu": 10.0, "gpusPerReplica": 8}))
    state = r.step(AT_9)
    odd = state.policies["inference/odd"]
    assert not odd.valid and "minGpus 27 (32 GPUs: whole replicas of 8) does not fit" in odd.error
    assert state.policies["inference/chat"].valid


def test_a_policy_whose_minimum_does_not_fit_is_the_only_one_refused(demand_file, tmp_path):
    r = Replay(tmp_path, demand_file, policy("chat", minGpus=100), policy("big", minGpus=40),
               policy("small", minGpus=8))
    before = r.replicas("big")  # serving its demand before the controller started
    for minutes in (0, 5):
        state = r.step(AT_9 + pd.Timedelta(minutes=minutes))
    big = state.policies["inference/big"]
    assert not big.valid and "minGpus 40 does not fit" in big.error and "keep 100" in big.error
    _, conditions = r.status("big")
    assert conditions["Ready"]["status"] == "False" and conditions["Ready"]["reason"] == "PlanInfeasible"
    assert [(e["reason"], e["type"]) for e in r.events(name="big")] == [("PlanInfeasible", "Warning")]
    # the policies before and after it go on, each at least at its minimum, and the cluster is not overcommitted
    chat, small = state.policies["inference/chat"], state.policies["inference/small"]
    assert chat.valid and small.valid and chat.reserved_gpus >= 100 and small.reserved_gpus >= 8
    assert r.replicas("chat") * 2 == chat.reserved_gpus and r.replicas("small") * 2 == small.reserved_gpus
    assert r.replicas("big") == before > 0  # a refused policy's target is left as it was
    # and what it holds is neither reserved nor lent again (small reserved 28 of them, 152 GPUs planned on 128):
    # beyond the minimums of the policies kept (100 + 8), which come first
    assert chat.reserved_gpus + small.reserved_gpus + state.slack_gpus <= max(128 - 2 * before, 100 + 8)


def test_a_forecast_only_policy_s_minimum_refuses_no_active_policy(demand_file, tmp_path):
    """eval, forecast-only and older, asks a minimum of 100 of the 128 GPUs; chat, active, 40. eval changes nothing,
    yet its minimum was counted first: chat was refused (PlanInfeasible: "the policies before this one keep 100") and
    served nothing, while eval reserved nothing on the cluster either. The active policies' minimums come first: chat
    is planned and eval is the one refused, saying so."""
    r = Replay(tmp_path, demand_file, policy("eval", mode="forecast-only", minGpus=100), policy("chat", minGpus=40))
    state = r.step(AT_9)
    chat, evaluated = state.policies["inference/chat"], state.policies["inference/eval"]
    assert chat.valid and chat.reserved_gpus >= 40 and r.replicas("chat") * 2 == chat.reserved_gpus
    assert not evaluated.valid and "the active policies and those before this one keep 40" in evaluated.error
    assert r.status("eval")[1]["Ready"]["reason"] == "PlanInfeasible"


def test_a_newer_policy_is_cut_and_refused_before_an_older_one_whatever_their_names(demand_file, tmp_path):
    """The cluster is shared in the order the policies were created, as README says ("the later ones cut first") and
    as a target or a queue already is: the API server lists them by name, and a policy created later under a name
    listed first took its GPUs from the older ones (on a real API server: llm-inference, created first, cut from 35
    GPUs to 29 for chat2), here refused the older policy outright for its own minimum."""
    old, new = policy("old", minGpus=100), policy("a-new", minGpus=40)
    old["metadata"]["creationTimestamp"], new["metadata"]["creationTimestamp"] = "2026-01-05T06:00:00Z", \
        "2026-01-05T07:00:00Z"
    r = Replay(tmp_path, demand_file, new, old)  # listed as the API server lists them: by name
    state = r.step(AT_9)
    kept, refused = state.policies["inference/old"], state.policies["inference/a-new"]
    assert kept.valid and kept.reserved_gpus >= 100
    assert not refused.valid and "minGpus 40 does not fit" in refused.error and "keep 100" in refused.error


def test_a_second_policy_on_a_taken_target_is_the_only_one_refused(demand_file, tmp_path):
    r = Replay(tmp_path, demand_file, policy("chat"), policy("copy", target={"kind": "Deployment", "name": "chat"}))
    state = r.step(AT_9)
    chat, copy = state.policies["inference/chat"], state.policies["inference/copy"]
    assert chat.valid and chat.reserved_gpus == r.replicas("chat") * 2 > 0
    assert not copy.valid and "spec.target: Deployment chat is already the target of ReservationPolicy " \
        "inference/chat" in copy.error
    _, conditions = r.status("copy")
    assert conditions["Ready"]["status"] == "False" and conditions["Ready"]["reason"] == "InvalidSpec"


def test_the_world_holds_one_workload_for_a_target_two_policies_name(demand_file, tmp_path):
    """The embedded cluster built the refused second policy's target as a workload of its own: two for one Deployment
    (chat's 42 replicas and a phantom 12 at 9:00), and training held 16 of the 44 GPUs lent. A cluster has one
    Deployment chat: the world with the refused copy holds what it holds with chat alone."""
    both = Replay(tmp_path / "both", demand_file, policy("chat"),
                  policy("copy", target={"kind": "Deployment", "name": "chat"}))
    alone = Replay(tmp_path / "alone", demand_file, policy("chat"))
    for now in (AT_9, AT_9 + pd.Timedelta(minutes=5)):
        state, single = both.step(now), alone.step(now)
    chat = state.policies["inference/chat"]
    assert not state.policies["inference/copy"].valid
    assert both.cluster.inference_gpus == alone.cluster.inference_gpus == both.replicas("chat") * 2 == \
        chat.reserved_gpus == single.policies["inference/chat"].reserved_gpus
    assert (state.slack_gpus, both.cluster.training_gpus) == (single.slack_gpus, alone.cluster.training_gpus)


@pytest.mark.parametrize("clash", ["training", "inference", "target"])
def test_a_queue_clash_gives_the_world_s_queue_the_role_the_older_policy_gave_it(demand_file, tmp_path, clash):
    """A newer policy naming chat's inference ClusterQueue as its training queue made it a training queue in the
    embedded world (the backlog's jobs submitted into it); naming chat's training queue as its inference queue made
    its replicas Workloads of a training queue; naming chat's inference queue as its ClusterQueue target gave the world
    a second workload whose replicas overwrote that queue's quota. The controller refuses the newer policy, and the
    world holds what the cluster of the older one holds: each ClusterQueue the role the older policy gave it (the
    refused b's pods in research, chat's training queue, are Workloads Kueue admits there within what chat lends, as on
    a cluster: test_a_refused_policy_s_pods_in_an_accepted_policy_s_training_queue_run_there_...)."""
    newer = {"training": policy("b", trainingClusterQueues=["team-b", "serving"]),
             "inference": policy("b", trainingClusterQueues=["team-b"], inferenceClusterQueue="research"),
             "target": policy("b", trainingClusterQueues=["team-b"],
                              target={"kind": "ClusterQueue", "name": "serving"})}[clash]
    r = Replay(tmp_path, demand_file, policy("chat", inferenceClusterQueue="serving"), newer)
    for minutes in (0, 5):
        state = r.step(AT_9 + pd.Timedelta(minutes=minutes))
    chat = state.policies["inference/chat"]
    assert chat.valid and not state.policies["inference/b"].valid
    assert {w.cluster_queue for w in r.cluster.workloads()} == {"research", "team-b"}
    assert not set(r.cluster.training_queues) & set(r.cluster.inference_queues.values()), r.cluster.inference_queues
    assert r.cluster.inference_queues == {"inference/chat": "serving"}
    assert r.cluster.quotas["serving"] == chat.reserved_gpus == r.replicas("chat") * 2
    # a target of its own, the Deployment b: its pods in chat's training queue too (within the slack lent)
    own = r.replicas("b") * 2 if clash != "target" else 0
    assert r.cluster.pods_in_training == ({"inference/b": "research"} if clash == "inference" else {})
    assert r.cluster.inference_gpus == chat.reserved_gpus + own


def test_a_policy_applied_on_a_refused_policy_s_target_takes_its_workload(demand_file, tmp_path):
    """b is refused (it lends into chat's inference queue) and holds its own Deployment; c, applied later on that
    Deployment, is accepted, so the Deployment is c's: one workload, its replicas Workloads of c's inference queue."""
    r = Replay(tmp_path, demand_file, policy("chat", inferenceClusterQueue="serving"),
               policy("b", trainingClusterQueues=["serving"]))
    r.step(AT_9)
    r.cluster.apply_policy(policy("c", target={"kind": "Deployment", "name": "b"}, inferenceClusterQueue="serving"))
    state = r.step(AT_9 + pd.Timedelta(minutes=5))
    assert state.policies["inference/c"].valid and not state.policies["inference/b"].valid
    assert [(key, inf.ref.name) for key, inf in r.cluster.inference.items()] == [("inference/chat", "chat"),
                                                                                ("inference/c", "b")]
    assert r.cluster.inference_queues == {"inference/chat": "serving", "inference/c": "serving"}
    reserved = [state.policies[f"inference/{name}"].reserved_gpus for name in ("chat", "c")]
    assert r.cluster.quotas["serving"] == sum(reserved)


def assert_the_world_holds_what_the_controller_counts(r: Replay, state) -> None:
    """The world's targets, inference and training queues are those of the policies the controller accepts and of
    what the refused ones hold and lend into (controller.reconcile.invalid_holdings, as the controller read them); each
    accepted policy's target holds its reservation, and no Workload waits in a queue that is not a training queue."""
    objects = r.cluster.reservation_policies()
    specs = r.reconciler._specs
    read = identified(objects)
    accepted, refused = parse_policies(read, specs)
    holdings = invalid_holdings(read, refused, accepted, specs)
    holders, lenders, _, left, _ = holdings
    running, left_running = pods_in_training(holdings, accepted), left_pods(holdings, accepted)
    assert set(r.cluster.left) == {p.spec.target.ref("inference") for p in left} | set(left_running)
    assert r.cluster.left_pods == left_running, (r.cluster.left_pods, left_running)
    assert all(state.policies[p.key].valid for p in accepted)
    assert not any(state.policies[f"{ref.namespace}/{ref.name}"].valid for ref in refused)
    assert {key: inf.ref for key, inf in r.cluster.inference.items()} == {
        p.key: p.spec.target.ref("inference") for p in [*accepted, *holders, *refused_in_training(holdings, accepted)]}
    assert r.cluster.pods_in_training == running, (r.cluster.pods_in_training, running)
    assert r.cluster.inference_queues == {p.key: p.spec.inference_cluster_queue for p in accepted + holders
                                          if p.spec.inference_cluster_queue}
    assert set(r.cluster.training_queues) == set(state.teams) == training_queues(accepted + lenders)
    assert not set(r.cluster.training_queues) & set(r.cluster.inference_queues.values())
    assert {w.cluster_queue for w in r.cluster.workloads() if w.active and not w.admitted} <= set(state.teams)
    for p in accepted:
        size = p.spec.capacity.gpus_per_replica
        replicas = r.cluster.target_state(p.spec.target.ref("inference"), size).desired_replicas
        assert replicas * size == state.policies[p.key].reserved_gpus > 0
        inf = r.cluster.inference[p.key]
        assert (inf.gpus_per_replica, inf.demand_per_gpu) == (size, p.spec.capacity.demand_per_gpu)


@pytest.mark.parametrize("clash", ["target", "inference", "training"])
def test_an_edit_that_ends_a_clash_gives_the_world_what_the_controller_then_accepts(demand_file, tmp_path, clash):
    """A `kubectl apply` into the running world held the applied policy alone, where the controller derives who is
    accepted from every policy: chat, edited off the Deployment copy was refused for (its target now chat-v2), left the
    world without Deployment chat, so copy, accepted by the controller, was TargetMissing; chat, edited to drop its
    inference queue serving, left b's lending into serving (accepted now) out of the world, serving no training queue
    there; chat, edited to drop its training queue shared, left b's replicas out of shared, its inference queue now,
    and the backlog's Workloads waiting there for the quota the controller sets to b's reservation. The world holds
    what the controller accepts after the edit, as it would built anew: a queue that held training and now holds
    inference takes no more training (those waiting there are deleted; those running finish)."""
    before, after, newer = {
        "target": (policy("chat"), policy("chat", target={"kind": "Deployment", "name": "chat-v2"}),
                   policy("copy", target={"kind": "Deployment", "name": "chat"})),
        "inference": (policy("chat", inferenceClusterQueue="serving"), policy("chat"),
                      policy("b", trainingClusterQueues=["team-b", "serving"])),
        "training": (policy("chat", trainingClusterQueues=["research", "shared"]), policy("chat"),
                     policy("b", trainingClusterQueues=["team-b"], inferenceClusterQueue="shared"))}[clash]
    r = Replay(tmp_path, demand_file, before, newer)
    assert not r.step(AT_9).policies[f"inference/{newer['metadata']['name']}"].valid
    r.cluster.apply_policy(after)
    for minutes in (5, 10):
        state = r.step(AT_9 + pd.Timedelta(minutes=minutes))
    assert all(p.valid for p in state.policies.values())
    assert_the_world_holds_what_the_controller_counts(r, state)


@pytest.mark.parametrize("capacity", [{"demandPerGpu": 10.0, "gpusPerReplica": 4},
                                      {"demandPerGpu": 5.0, "gpusPerReplica": 2}])
def test_an_edit_of_the_replica_size_or_the_demand_per_gpu_is_what_the_world_then_holds_and_serves(
        demand_file, tmp_path, capacity):
    """chat edited from 2-GPU replicas to 4 (its pod template's request, as the policy reads it): the world kept
    replicas of 2, so the controller's 21 replicas for 84 GPUs held 42 and chat ran on half its reservation, 46 GPUs
    idle; edited to 5 demand per GPU, the world still served 10 per GPU, counting half the demand. The edit is a
    rollout: the world's replicas are of the new size (warmed up anew) and it serves at the new demandPerGpu."""
    r = Replay(tmp_path, demand_file, policy("chat", minGpus=40))
    r.step(AT_9)
    r.cluster.apply_policy(policy("chat", minGpus=40, capacity=capacity))
    for minutes in (5, 10):  # the second after the new replicas' warm-up
        state = r.step(AT_9 + pd.Timedelta(minutes=minutes))
        assert_the_world_holds_what_the_controller_counts(r, state)
    inf = r.cluster.inference["inference/chat"]
    assert inf.warm * capacity["gpusPerReplica"] == state.policies["inference/chat"].reserved_gpus


@pytest.mark.parametrize("edit, error", [({"target": {"kind": "Deployment"}}, "spec.target.name: Field required"),
                                         ({"inferenceClusterQueue": "team-b"},  # what a 1.20 API server admits
                                          "inferenceClusterQueue cannot also be a training ClusterQueue")])
@pytest.mark.parametrize("restart", [False, True])
def test_a_policy_edited_so_not_even_what_it_holds_reads_still_holds_its_target_s_gpus(demand_file, tmp_path, edit,
                                                                                      error, restart):
    """other, planned beside chat, is edited so that not even what it holds reads (its target's name removed, or its
    inference queue one of its training queues). Its Deployment runs on, as a cluster's does (a policy edit deletes no
    workload): 22 replicas, 44 GPUs. The controller counted none of them: it lent the 44 as idle, and planned chat
    onto them as demand rose, so at 11:00 chat reserved 98 GPUs and held 84, 7 replicas waiting for GPUs other's pods
    held. The controller reads such a policy as holding what its spec said before (ParsedSpecs.holding), as the
    world holds it: refused, its target's GPUs held, its team lent to, and chat planned on what is left. So too a
    controller restarted after the edit (or a new leader), which never read that spec: the policy's status says what
    it holds (without it, 44 GPUs were lent again after the restart)."""
    r = Replay(tmp_path, demand_file, policy("chat", minGpus=40), policy("other", trainingClusterQueues=["team-b"]))
    r.step(AT_9)
    held = r.replicas("other") * 2
    r.cluster.apply_policy(policy("other", trainingClusterQueues=["team-b"], **edit))
    for minutes in (5, 60, 120):
        if restart and minutes in (5, 60):  # the status said by a valid spec, then by the refusal
            r.restart()
        state = r.step(AT_9 + pd.Timedelta(minutes=minutes))
        chat, other = state.policies["inference/chat"], state.policies["inference/other"]
        assert not other.valid and error in other.error
        assert r.replicas("other") * 2 == held == 44  # left as it is
        assert chat.reserved_gpus + held + state.slack_gpus == 128, (chat.reserved_gpus, state.slack_gpus)
        assert r.cluster.inference["inference/chat"].waiting == 0
        assert_the_world_holds_what_the_controller_counts(r, state)
    assert "team-b" in state.teams


@pytest.mark.parametrize("restart", [False, True])
def test_a_target_changed_to_another_runs_on_and_its_gpus_are_held_until_it_is_scaled_to_0(demand_file, tmp_path,
                                                                                          restart):
    """other, planned beside chat, is edited to scale Deployment other-v2 instead of other. An edit deletes no workload:
    other runs on with its 22 replicas (44 GPUs), which no one scales now. The world dropped them as if the edit had
    deleted the Deployment, where a cluster's run on; the controller counted none of them (the real cluster:
    tests/test_run_real.py), and lent or planned them again. They are held by no one, as a refused policy's target is,
    at other's replicas as read, until it is scaled to 0: then its GPUs are planned again, and the status no longer
    says it. So too a controller restarted (or a new leader) before the edit's reconcile (the status's holding says
    other) or after it (its `left` says other): without them, the 44 GPUs were lent again after the restart."""
    r = Replay(tmp_path, demand_file, policy("chat", minGpus=40), policy("other"))
    r.step(AT_9)
    held = r.replicas("other") * 2
    r.cluster.apply_policy(policy("other", target={"kind": "Deployment", "name": "other-v2"}))
    other = TargetRef("Deployment", "other", "inference")
    for minutes in (5, 60, 120):
        if restart and minutes in (5, 60):  # the status said by the spec before the edit, then by the edit's
            r.restart()
        state = r.step(AT_9 + pd.Timedelta(minutes=minutes))
        chat, v2 = state.policies["inference/chat"], state.policies["inference/other"]
        assert r.cluster.target_state(other, 2).desired_replicas * 2 == held == 44  # no one scales it now
        assert r.cluster.inference["inference/other"].ref.name == "other-v2" and v2.reserved_gpus > 0
        assert chat.reserved_gpus + v2.reserved_gpus + held + state.slack_gpus <= 128, \
            (chat.reserved_gpus, v2.reserved_gpus, state.slack_gpus)
        assert r.cluster.inference["inference/chat"].waiting == 0
        assert [left["target"]["name"] for left in r.status("other")[0]["left"]] == ["other"]
        assert_the_world_holds_what_the_controller_counts(r, state)
    r.cluster.scale_deployment("inference", "other", 0)  # scaled to 0 by hand: its GPUs are free again
    for minutes in (125, 130):
        if restart:  # the status says other until the reconcile that reads it at 0
            r.restart()
        state = r.step(AT_9 + pd.Timedelta(minutes=minutes))
        assert state.policies["inference/chat"].reserved_gpus + state.policies["inference/other"].reserved_gpus + \
            state.slack_gpus == 128
        assert r.status("other")[0]["left"] is None
        assert_the_world_holds_what_the_controller_counts(r, state)


def test_a_new_policy_s_inference_queue_is_no_training_queue_of_a_refused_policy_s(demand_file, tmp_path):
    """typo, whose spec does not parse, lends into team-b; n, applied later, runs its inference in team-b: the
    controller accepts n (typo claims nothing) and lends typo's team no more, but the world kept team-b a training
    queue, the backlog's Workloads waiting in n's inference quota."""
    r = Replay(tmp_path, demand_file, policy("chat"),
               policy("typo", trainingClusterQueues=["team-b"], targetQuantlie=0.5))
    r.fill_training("team-b")
    r.step(AT_9)
    r.cluster.apply_policy(policy("n", trainingClusterQueues=["research"], inferenceClusterQueue="team-b"))
    for minutes in (5, 10):
        state = r.step(AT_9 + pd.Timedelta(minutes=minutes))
    assert_the_world_holds_what_the_controller_counts(r, state)


@pytest.mark.parametrize("target", [{"kind": "Deployment", "name": "gone"},
                                    {"kind": "HorizontalPodAutoscaler", "name": "gone"},
                                    {"kind": "ClusterQueue", "name": "gone-queue"}])
def test_a_policy_whose_target_is_missing_takes_nothing_from_the_others(demand_file, tmp_path, target):
    """Over capacity, an older policy whose target does not exist was planned as any: it held its reservation (on a
    real API server 35 GPUs, Ready=False TargetMissing), the working policy created after it was cut, and the
    training lent none of them. It takes no part now, as an invalid policy: the working policy and the slack lent
    are exactly those of the working policy alone, and the missing one's minimum refuses no one. Once its target
    exists again it is planned at the next reconcile, and the GPUs lent meanwhile come back within the reclaim
    deadline."""
    gone = policy("gone", minGpus=60, target=target)  # older (listed first): the later chat was cut for it
    ref = TargetRef(target["kind"], target["name"], None if target["kind"] == "ClusterQueue" else "inference")
    both = Replay(tmp_path / "both", demand_file, gone, policy("chat", minGpus=40))
    alone = Replay(tmp_path / "alone", demand_file, policy("chat", minGpus=40))
    both.cluster.delete_target(ref)
    for r in (both, alone):
        r.fill_training()
    for minutes in (0, 5):  # 10:00, over capacity: chat alone asks for most of the cluster
        now = MONDAY_6AM + pd.Timedelta(hours=4, minutes=minutes)
        state, single = both.step(now), alone.step(now)
        chat = state.policies["inference/chat"]
        assert chat.valid and chat.step.cut_gpus == 0
        assert (chat.reserved_gpus, state.slack_gpus) == (single.policies["inference/chat"].reserved_gpus,
                                                          single.slack_gpus)
        assert chat.reserved_gpus + state.slack_gpus == 128 and both.cluster.quotas["research"] == state.slack_gpus
    missing = state.policies["inference/gone"]
    assert not missing.valid and f"{ref.kind} " in missing.error and "not found" in missing.error
    status, conditions = both.status("gone")
    assert (conditions["Ready"]["status"], conditions["Ready"]["reason"]) == ("False", "TargetMissing")
    assert status["reservedGpus"] == status["headroomGpus"] == 0 and status["nextHours"] == []
    assert [(e["reason"], e["type"]) for e in both.events(name="gone")] == [("TargetMissing", "Warning")]
    # its target made again: planned at once, first (the older); what training holds of its reservation comes back
    # within the reclaim deadline (5 minutes; these jobs stop within one)
    both.cluster.apply_policy(gone)
    back = both.step(MONDAY_6AM + pd.Timedelta(hours=4, minutes=10)).policies["inference/gone"]
    assert back.valid and back.reserved_gpus >= 60 and both.status("gone")[1]["Ready"]["status"] == "True"
    assert both.cluster.inference["inference/gone"].held_replicas * 2 < back.reserved_gpus  # training held them
    both.step(MONDAY_6AM + pd.Timedelta(hours=4, minutes=15))
    assert both.cluster.inference["inference/gone"].held_replicas * 2 >= back.reserved_gpus


@pytest.mark.parametrize("refusal", [{"leadTime": "soon"},  # InvalidSpec
                                     {"minGpus": 100}])      # PlanInfeasible: beside chat's 40 on 128
def test_a_refused_policy_s_target_keeps_its_gpus_and_its_team_keeps_its_share(demand_file, tmp_path, refusal):
    """A policy planned, then refused: only a PlanInfeasible target's GPUs counted as held, so an InvalidSpec one's
    34 GPUs were lent as idle (40 + 34 + 88 planned on 128); and its training queue was left out, its quota where the
    last plan set it (27) beside the whole slack lent to chat's queue and its 40 GPUs of training out of the planner's
    sight, so chat's morning rise went short while they ran. And the inference ClusterQueue the two share was given
    chat's reservation alone, big's replicas beyond it borrowing what chat's new ones needed (chat 56 of its 90 GPUs
    served, 34 idle). Whatever the refusal, its target is left as it is and holds its GPUs, in its queue too, and its
    team keeps its share of the slack, its training preemptible."""
    shared = {"inferenceClusterQueue": "serving"}
    r = Replay(tmp_path, demand_file, policy("chat", minGpus=40, **shared),
               policy("big", trainingClusterQueues=["team-b"], **shared))
    r.fill_training("team-b")
    r.step(MONDAY_6AM)
    held = r.replicas("big") * 2
    assert held > 0 and r.cluster.quotas["team-b"] > 0
    r.cluster.apply_policy(policy("big", trainingClusterQueues=["team-b"], **shared, **refusal))
    for hour in (0.1, 1, 2, 3):  # through the morning ramp
        state = r.step(MONDAY_6AM + pd.Timedelta(hours=hour))
        chat, big = state.policies["inference/chat"], state.policies["inference/big"]
        assert not big.valid and r.replicas("big") * 2 == held  # left as it is
        assert chat.reserved_gpus + held + state.slack_gpus == 128, (hour, chat.reserved_gpus, state.slack_gpus)
        assert r.cluster.quotas["team-b"] == state.teams["team-b"].quota_gpus
        assert r.cluster.quotas["team-b"] + r.cluster.quotas["research"] == state.slack_gpus
        assert r.cluster.quotas["serving"] == chat.reserved_gpus + held
    # the rise was taken back from team-b's training: chat serves what it reserved (warm within the reclaim deadline)
    assert chat.reserved_gpus > 80 and state.teams["team-b"].used_gpus <= state.teams["team-b"].quota_gpus
    r.step(MONDAY_6AM + pd.Timedelta(hours=3, minutes=10))
    assert r.cluster.inference["inference/chat"].held_replicas * 2 >= chat.reserved_gpus


@pytest.mark.parametrize("typo", [{"targetQuantlie": 0.5},  # demand served by its demandPerGpu
                                  {"capacity": {"demandPerGpu": -1, "gpusPerReplica": 2}}])  # none known
def test_a_policy_whose_spec_does_not_parse_from_the_start_holds_its_target_and_its_team_keeps_its_share(
        demand_file, tmp_path, typo):
    """A policy whose spec does not parse, there when the embedded world starts, was not in it at all: its Deployment
    missing (the controller counted 0 GPUs held where a cluster's runs its pods) and its training queue too, so every
    reconcile's quota write failed (`ClusterQueue team-b not found`: 2 errors in 2 reconciles), the team's share of
    the slack lent nowhere. The world holds what the controller reads in such a spec (core.policy.holding_spec): its
    target, serving its demand where its demandPerGpu reads, its replicas in the inference queue it shares with chat,
    and team-b, lent its share."""
    shared = {"inferenceClusterQueue": "serving"}
    r = Replay(tmp_path, demand_file, policy("chat", minGpus=40, **shared),
               policy("typo", trainingClusterQueues=["team-b"], **shared, **typo))
    held = 2 * r.cluster.target_state(TargetRef("Deployment", "typo", "inference"), 2).desired_replicas
    assert (held > 0) == ("targetQuantlie" in typo)  # the demand at 6:00, served
    for minutes in (0, 5):
        state = r.step(AT_9 + pd.Timedelta(minutes=minutes))
        chat, refused = state.policies["inference/chat"], state.policies["inference/typo"]
        assert not refused.valid and r.status("typo")[1]["Ready"]["reason"] == "InvalidSpec"
        assert r.replicas("typo") * 2 == held  # left as it is
        assert chat.reserved_gpus + held + state.slack_gpus == 128, (chat.reserved_gpus, state.slack_gpus)
        assert r.cluster.quotas["team-b"] == state.teams["team-b"].quota_gpus > 0
        assert r.cluster.quotas["serving"] == chat.reserved_gpus + held
        assert state.reconcile_errors_total == {}
    assert {w.cluster_queue for w in r.cluster.workloads() if w.admitted} == {"research", "team-b"}


@pytest.mark.parametrize("refusal", [{"targetQuantlie": 0.5},                # InvalidSpec: does not parse
                                     {"trainingClusterQueues": ["serving"]}])  # refused for chat's inference queue
def test_a_queue_two_refused_policies_name_holds_its_gpus_once(demand_file, tmp_path, refusal):
    """Two refused policies: "serve" (created first) runs its Deployment's pods as Workloads of ClusterQueue pool,
    whose quota holds them; "a-claim" names pool as its ClusterQueue target. The world holds pool once, as serve's
    queue, but the controller counted its GPUs twice, serve's replicas and pool's quota as a-claim's target (read as
    the API server reads a ClusterQueue; the world said it was not found): 2 x 24 held where 24 are, at 9:00 chat cut
    from 84 GPUs to 80 and none of the 20 idle lent. Listed by name, a-claim comes first. pool's quota is held whole
    by a-claim, serve's pods within it, whichever is older (test_a_refused_cluster_queue_target_holds_its_quota_...)."""
    serve, claim = (policy(name, **spec, **refusal) for name, spec in (
        ("serve", {"inferenceClusterQueue": "pool", "capacity": {"demandPerGpu": 10.0, "gpusPerReplica": 2}}),
        ("a-claim", {"target": {"kind": "ClusterQueue", "name": "pool"}, "inferenceClusterQueue": None})))
    serve["metadata"]["creationTimestamp"], claim["metadata"]["creationTimestamp"] = \
        "2026-01-05T06:00:00Z", "2026-01-05T07:00:00Z"
    r = Replay(tmp_path, demand_file, policy("chat", minGpus=40, inferenceClusterQueue="serving"), claim, serve)
    held = r.cluster.quotas["pool"]
    assert held == r.cluster.inference["inference/a-claim"].held_replicas * 2 > 0
    assert "inference/serve" not in r.cluster.inference
    for minutes in (0, 5):
        state = r.step(AT_9 + pd.Timedelta(minutes=minutes))
        chat = state.policies["inference/chat"]
        assert not state.policies["inference/serve"].valid and not state.policies["inference/a-claim"].valid
        assert r.cluster.quotas["pool"] == held  # left as it is
        assert chat.reserved_gpus + held + state.slack_gpus == 128, (chat.reserved_gpus, held, state.slack_gpus)


def test_a_refused_policy_s_pods_in_an_older_refused_policy_s_cluster_queue_target_hold_its_gpus_once(
        demand_file, tmp_path):
    """The other way round: "claim" (created first) holds ClusterQueue pool as its target; "serve" names pool as its
    inferenceClusterQueue, so on a cluster Kueue admits its pods there, within pool's quota. The world ran them
    outside pool, 46 GPUs beside claim's 24, and the controller counted 24 + 46 held: at 9:00 chat was cut from 84
    GPUs to 58 and none lent, where on a cluster 46 of them would sit idle (tests/test_run_real.py). The pods are
    within the quota of the ClusterQueue target held before: pool's GPUs are held once, as claim's, whichever policy
    is older, and chat has its 84."""
    refusal = {"targetQuantlie": 0.5}
    claim = policy("claim", target={"kind": "ClusterQueue", "name": "pool"}, inferenceClusterQueue=None, **refusal)
    serve = policy("serve", inferenceClusterQueue="pool", capacity={"demandPerGpu": 5.0, "gpusPerReplica": 2},
                   **refusal)
    claim["metadata"]["creationTimestamp"], serve["metadata"]["creationTimestamp"] = \
        "2026-01-05T06:00:00Z", "2026-01-05T07:00:00Z"
    r = Replay(tmp_path, demand_file, policy("chat", minGpus=40, inferenceClusterQueue="serving"), claim, serve)
    held = r.cluster.quotas["pool"]
    assert held == r.cluster.inference["inference/claim"].held_replicas * 2 > 0
    assert "inference/serve" not in r.cluster.inference and "inference/serve" not in r.cluster.inference_queues
    for minutes in (0, 5):
        state = r.step(AT_9 + pd.Timedelta(minutes=minutes))
        chat = state.policies["inference/chat"]
        assert chat.reserved_gpus + held + state.slack_gpus == 128, (chat.reserved_gpus, held, state.slack_gpus)
        assert chat.reserved_gpus == 84 and r.cluster.quotas["pool"] == held
        assert r.cluster.idle_gpus < min(r.cluster.settings.backlog_job_gpus)  # lent, but fitting no job


@pytest.mark.parametrize("claim_first", [True, False])
def test_a_refused_cluster_queue_target_holds_its_quota_whole_whichever_refused_policy_is_older(
        demand_file, tmp_path, claim_first):
    """Refused "claim" names ClusterQueue pool as its target; refused "serve" runs its pods there
    (inferenceClusterQueue), its demand twice claim's. What the world held, and the controller counted, depended on
    which was older: claim first, pool's quota as claim's target (24 GPUs: at 9:00 chat 84, 20 lent); serve first,
    serve's replicas (46 GPUs) and pool's quota made to fit them (chat 82, none lent). On a cluster the queue's quota
    is held whole and Kueue admits serve's pods within it: the world holds claim's quota in both orders, serve's pods
    within it, and chat has the same 84."""
    refusal = {"targetQuantlie": 0.5}
    claim = policy("claim", target={"kind": "ClusterQueue", "name": "pool"}, inferenceClusterQueue=None, **refusal)
    serve = policy("serve", inferenceClusterQueue="pool", capacity={"demandPerGpu": 5.0, "gpusPerReplica": 2},
                   **refusal)
    older, newer = (claim, serve) if claim_first else (serve, claim)
    older["metadata"]["creationTimestamp"], newer["metadata"]["creationTimestamp"] = \
        "2026-01-05T06:00:00Z", "2026-01-05T07:00:00Z"
    r = Replay(tmp_path, demand_file, policy("chat", minGpus=40, inferenceClusterQueue="serving"), claim, serve)
    held = r.cluster.quotas["pool"]
    assert held == r.cluster.inference["inference/claim"].held_replicas * 2 == 24
    assert "inference/serve" not in r.cluster.inference and "inference/serve" not in r.cluster.inference_queues
    for minutes in (0, 5):
        state = r.step(AT_9 + pd.Timedelta(minutes=minutes))
        chat = state.policies["inference/chat"]
        assert chat.reserved_gpus == 84 and r.cluster.quotas["pool"] == held
        assert chat.reserved_gpus + held + state.slack_gpus == 128, (chat.reserved_gpus, held, state.slack_gpus)


def test_a_refused_policy_s_pods_in_an_accepted_policy_s_training_queue_hold_what_they_run_on_once(
        demand_file, tmp_path):
    """"serve" names research, chat's training queue, as its inferenceClusterQueue (refused for it): on a cluster
    Kueue admits its pods there, within the quota chat lends, beyond it borrowing. The world ran them outside research,
    46 GPUs, and the controller counted them held beside what it lent, where on a cluster research's quota of 0 would
    keep the pods out and 46 GPUs sit idle; then it counted them only within what it lent research (44, then 40): chat
    reserved 84, one of its replicas waiting for GPUs serve's pods ran on beyond that quota. Within the lent quota they
    hold what is lent, beyond it they are held (serving_gpus): each GPU counted once, chat reserving what it gets."""
    serve = policy("serve", inferenceClusterQueue="research", trainingClusterQueues=[],
                   capacity={"demandPerGpu": 5.0, "gpusPerReplica": 2})
    r = Replay(tmp_path, demand_file, policy("chat", minGpus=40), serve)
    assert "inference/serve" not in r.cluster.inference_queues
    assert r.cluster.pods_in_training == {"inference/serve": "research"}
    for minutes in (0, 5):
        state = r.step(AT_9 + pd.Timedelta(minutes=minutes))
        chat = state.policies["inference/chat"]
        assert not state.policies["inference/serve"].valid
        pods = sum(w.gpus for w in r.cluster.workloads() if w.deployment == "serve" and w.running)
        beyond = max(pods - state.slack_gpus, 0)  # (research, the one queue lent into, is lent the slack)
        assert pods == 46 and chat.reserved_gpus + state.slack_gpus + beyond == 128, (chat.reserved_gpus,
                                                                                       state.slack_gpus, beyond)
        # ...and research's quota holds them too: Kueue admits one of them restarted again
        assert r.cluster.cluster_queue_quotas()["research"] == state.slack_gpus + beyond
        assert r.cluster.inference["inference/chat"].waiting == 0


def test_a_refused_policy_s_cluster_queue_target_keeps_its_replicas_when_another_policy_is_applied(
        demand_file, tmp_path):
    """A refused policy's ClusterQueue target was held by the world until any policy was applied: rebuilding what
    each policy holds, the world found the queue's own quota from before and took it for another's, so the target's
    replicas were gone (12 of them, 24 GPUs idle at once, and lent: 44 GPUs at 9:05 where 20 were idle) and the queue
    was not found as a target. A queue is held by another only if a policy held before it in that rebuild holds it."""
    claim = policy("claim", target={"kind": "ClusterQueue", "name": "pool"}, inferenceClusterQueue=None,
                   targetQuantlie=0.5)
    r = Replay(tmp_path, demand_file, policy("chat", minGpus=40), claim)
    pool = TargetRef("ClusterQueue", "pool", None)
    held = r.cluster.target_state(pool, 2).desired_replicas * 2
    assert held > 0 and r.cluster.quotas["pool"] == held
    r.step(AT_9)
    r.cluster.apply_policy(policy("chat", minGpus=42))
    assert r.cluster.inference["inference/claim"].held_replicas * 2 == held == r.cluster.quotas["pool"]
    state = r.step(AT_9 + pd.Timedelta(minutes=5))
    chat = state.policies["inference/chat"]
    assert chat.reserved_gpus + held + state.slack_gpus == 128, (chat.reserved_gpus, held, state.slack_gpus)


def test_an_edit_gives_a_refused_target_to_the_oldest_policy_naming_it_as_a_fresh_world_does():
    """Refused "a" (created first) is edited onto Deployment d0, which refused "b" held: the world kept d0 as b's, its
    pods Workloads of b's queue qb, where a world started with the edited policies, and the controller (oldest first,
    invalid_holdings), give it to a, its pods in serving, chat's inference queue, whose quota the controller sets
    to hold them. A workload a policy held in the last rebuild is taken over by an older one that now names it."""
    typo = {"targetQuantlie": 0.5}
    a = policy("a", target={"kind": "Deployment", "name": "d1"}, inferenceClusterQueue="serving", **typo)
    b = policy("b", target={"kind": "Deployment", "name": "d0"}, inferenceClusterQueue="qb", **typo)
    a["metadata"]["creationTimestamp"], b["metadata"]["creationTimestamp"] = \
        "2026-01-05T06:00:00Z", "2026-01-05T07:00:00Z"
    chat = policy("chat", inferenceClusterQueue="serving")
    edited = {**a, "spec": {**a["spec"], "target": {"kind": "Deployment", "name": "d0"}}}
    world = EmbeddedCluster(128, [chat, a, b], {}, MONDAY_6AM.timestamp())
    world.apply_policy(edited)
    fresh = EmbeddedCluster(128, [chat, edited, b], {}, MONDAY_6AM.timestamp())
    objects = world.reservation_policies()
    specs = ParsedSpecs()
    read = identified(objects)
    kept, invalid = parse_policies(read, specs)
    holders = invalid_holdings(read, invalid, kept, specs).holders
    assert [(p.key, p.spec.inference_cluster_queue) for p in holders] == [("inference/a", "serving")]
    for w in (world, fresh):
        assert {k: inf.ref.name for k, inf in w.inference.items()} == {"inference/chat": "chat", "inference/a": "d0"}
        assert w.inference_queues == {"inference/chat": "serving", "inference/a": "serving"}


def test_an_invalid_policy_holds_and_lends_into_only_what_no_policy_kept_names():
    """What an InvalidSpec policy still holds is read from its spec (a spec that does not parse: its target, replica
    size, queues and mode), but a policy kept acts on what it names: the second policy on a target holds none of it,
    and no refused policy lends into a queue a policy holds inference in, only into its other queues."""
    objects = [policy("chat", inferenceClusterQueue="serving"),
               policy("typo", leadTime="soon", trainingClusterQueues=["team-a"], capacity={"demandPerGpu": -1,
                                                                                            "gpusPerReplica": 4}),
               policy("clash", trainingClusterQueues=["team-b", "serving"]),
               policy("copy", target={"kind": "Deployment", "name": "chat"}, trainingClusterQueues=["team-c"]),
               policy("unread", target={"kind": "Deployment"}, trainingClusterQueues=["team-d"])]
    specs = ParsedSpecs()
    read = identified(objects)
    kept, invalid = parse_policies(read, specs)
    holders, lending, *_ = invalid_holdings(read, invalid, kept, specs)
    assert [p.ref.name for p in kept] == ["chat"] and len(invalid) == 4
    assert [(p.ref.name, p.spec.target.name, p.spec.capacity.gpus_per_replica) for p in holders] == [
        ("typo", "typo", 4), ("clash", "clash", 2)]
    assert [(p.ref.name, p.spec.training_cluster_queues, p.active) for p in lending] == [
        ("typo", ["team-a"], True), ("clash", ["team-b"], True), ("copy", ["team-c"], True)]


JUNK = st.one_of(st.none(), st.integers(-3, 3), st.floats(), st.text(max_size=4), st.lists(st.integers(), max_size=2),
                 st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
HOLDING = {"target": policy()["spec"]["target"], "gpusPerReplica": 2, "inferenceClusterQueue": "serving",
           "trainingClusterQueues": ["research"], "mode": "active"}


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["query", "statistic", "demandPerGpu", "forecaster", "timezone",
                                        "targetQuantile", "headroomQuantile", "leadTime", "warmBuffer", "scaleInDelay",
                                        "minGpus", "maxGpus", "reclaimDeadline", "objective", "notAField",
                                        *HOLDING]), JUNK, max_size=4))
def test_what_a_spec_holds_is_read_whatever_else_is_wrong_with_it(junk):
    """A spec with up to four fields set to anything: what it says its policy holds is read without an error, as the
    whole spec reads it where that parses, and as it was where only fields that say nothing of it are wrong; so is its
    demandPerGpu (core.policy.held_demand_per_gpu), where it is not itself wrong."""
    spec = policy(inferenceClusterQueue="serving")["spec"]
    raw = {**spec, "capacity": {**spec["capacity"]}}
    for field, value in junk.items():
        if field in ("demandPerGpu", "gpusPerReplica"):
            raw["capacity"][field] = value
        else:
            raw[field] = value
    held = holding_spec(raw)
    said = None if held is None else {
        "target": held.target.model_dump(by_alias=True, exclude_none=True), "mode": held.mode,
        "gpusPerReplica": held.capacity.gpus_per_replica, "inferenceClusterQueue": held.inference_cluster_queue,
        "trainingClusterQueues": held.training_cluster_queues}
    try:
        whole = parse_policy_spec(raw, "ReservationPolicy inference/chat")
    except ConfigError:
        whole = None
    if whole is not None:
        assert held is not None and held.target == whole.target and held.mode == whole.mode
        assert held.capacity.gpus_per_replica == whole.capacity.gpus_per_replica
        assert (held.inference_cluster_queue, held.training_cluster_queues) == (whole.inference_cluster_queue,
                                                                                whole.training_cluster_queues)
        assert held_demand_per_gpu(raw) == whole.capacity.demand_per_gpu
    if not junk.keys() & HOLDING.keys():
        assert said == HOLDING
    if "demandPerGpu" not in junk:  # what the embedded cluster serves the target's demand by
        assert held_demand_per_gpu(raw) == spec["capacity"]["demandPerGpu"]


def test_a_refused_policy_s_target_is_read_once_a_reconcile(demand_file, tmp_path, monkeypatch):
    """Each view of the cluster read every lending policy's target, so a policy whose target is missing was asked for
    three times a reconcile (a GET each without a watch cache: `run --once`). A planned policy's target is read where
    the reconcile decides whether it is there, and again for the plan (the forecasts fitted in between would make a
    first read stale) and after the writes; a refused one's where it is refused, once."""
    r = Replay(tmp_path, demand_file, policy(), policy("gone"), policy("typo", leadTime="soon"))
    r.cluster.delete_target(TargetRef("Deployment", "gone", "inference"))
    reads: list[str] = []
    asked = r.cluster.target_state
    monkeypatch.setattr(r.cluster, "target_state", lambda target, gpr: reads.append(target.name) or asked(target, gpr))
    for minutes in (0, 5):
        reads.clear()
        r.step(AT_9 + pd.Timedelta(minutes=minutes))
        assert sorted(reads) == ["chat", "chat", "chat", "gone", "typo"], reads


def test_a_refused_policy_s_status_answers_to_its_generation(demand_file, tmp_path):
    """The refusal's status said observedGeneration null on the embedded cluster, where Kubernetes' says the
    generation refused: both say the generation now; the last plan's id and realized error are gone from both."""
    r = Replay(tmp_path, demand_file, policy(), policy("bad"))
    r.step(MONDAY_6AM)
    assert r.status("bad")[0]["planId"]
    r.cluster.apply_policy(policy("bad", leadTime="soon"))
    r.step(MONDAY_6AM + pd.Timedelta(minutes=5))
    status, conditions = r.status("bad")
    assert conditions["Ready"]["reason"] == "InvalidSpec" and status["observedGeneration"] == 2
    assert status.get("planId") is None and not status.get("realizedError")


def test_a_refusal_s_status_says_the_generation_refused_and_no_plan_whoever_wrote_it_first(demand_file, tmp_path):
    """A refusal's status was written once per message: a spec edited and refused for the same reason kept the
    generation refused before (observedGeneration 1 of 2), and a refusal's status written by an older controller kept
    the planId and realized error it left, through every restart. Its Warning Event is still one per message."""
    r = Replay(tmp_path, demand_file, policy(), policy("bad", leadTime="soon"))
    r.step(AT_9)
    assert r.status("bad")[0]["observedGeneration"] == 1
    r.cluster.apply_policy(policy("bad", leadTime="soon", minGpus=4))
    r.step(AT_9 + pd.Timedelta(minutes=5))
    assert r.status("bad")[0]["observedGeneration"] == 2
    r.cluster.statuses[("inference", "bad")].update(planId="by-an-older-controller", realizedError={"1h": 0.5})
    r.restart()
    r.step(AT_9 + pd.Timedelta(minutes=10))
    status, conditions = r.status("bad")
    assert status.get("planId") is None and not status.get("realizedError") and status["observedGeneration"] == 2
    assert conditions["Ready"]["reason"] == "InvalidSpec" and len(r.events(name="bad")) == 1


def test_a_refused_policy_keeps_no_condition_of_its_last_plan(demand_file, tmp_path):
    """A status write keeps the conditions it does not name, and a refusal named only Ready: a policy planned with its
    headroom at risk, then refused (its target deleted), still said HeadroomAtRisk=True beside Ready=False (found on
    the real API server). Its other conditions now say it is not planned."""
    r = Replay(tmp_path, demand_file, policy("chat", minGpus=40))
    r.fill_training()
    r.step(MONDAY_6AM + pd.Timedelta(hours=4))
    planned = {kind for kind, c in r.status("chat")[1].items() if c["reason"] != "NotPlanned"}
    assert planned == set(CONDITION_TYPES)
    r.cluster.delete_target(TargetRef("Deployment", "chat", "inference"))
    r.step(MONDAY_6AM + pd.Timedelta(hours=4, minutes=5))
    conditions = r.status("chat")[1]
    assert (conditions["Ready"]["status"], conditions["Ready"]["reason"]) == ("False", "TargetMissing")
    assert {(kind, c["status"], c["reason"]) for kind, c in conditions.items() if kind != "Ready"} == {
        (kind, "Unknown", "NotPlanned") for kind in CONDITION_TYPES if kind != "Ready"}


def test_the_minimum_of_a_policy_whose_target_is_missing_refuses_no_one(demand_file, tmp_path):
    """An older policy's minGpus 100 beside a newer one's 40 on 128 GPUs refused the newer one (PlanInfeasible),
    though the older one's Deployment does not exist and would serve nothing."""
    r = Replay(tmp_path, demand_file, policy("gone", minGpus=100), policy("chat", minGpus=40))
    r.cluster.delete_target(TargetRef("Deployment", "gone", "inference"))
    state = r.step(AT_9)
    chat = state.policies["inference/chat"]
    assert chat.valid and r.replicas("chat") * 2 == chat.reserved_gpus >= 40
    assert r.status("chat")[1]["Ready"]["status"] == "True" and not r.events(name="chat", reason="PlanInfeasible")
    assert r.status("gone")[1]["Ready"]["reason"] == "TargetMissing"
    planned = Reconciler(r.cluster, r.files, r.cfg, dry_run=True).reconcile(AT_9)  # `headroom plan`, the what-if
    assert not planned.policies["inference/gone"].valid
    assert planned.policies["inference/chat"].reserved_gpus == chat.reserved_gpus


def test_the_teams_of_a_policy_whose_target_is_missing_are_still_lent_to(demand_file, tmp_path):
    """Left out of the plan altogether, a policy's training queue would keep the quota last set (Kueue admitting into
    it beside the slack lent) and its training would be out of the planner's sight: what it reserves is nothing, but
    its team is still a team the slack is lent to."""
    r = Replay(tmp_path, demand_file, policy("gone", trainingClusterQueues=["team-b"]), policy("chat"))
    r.cluster.delete_target(TargetRef("Deployment", "gone", "inference"))
    for minutes in (0, 5):
        state = r.step(MONDAY_6AM + pd.Timedelta(minutes=minutes))
    assert not state.policies["inference/gone"].valid
    assert r.cluster.quotas["team-b"] == state.teams["team-b"].quota_gpus > 0
    assert state.teams["team-b"].quota_gpus + state.teams["research"].quota_gpus == state.slack_gpus
    assert state.teams["team-b"].used_gpus > 0  # Kueue admitted its team's training, which the planner sees


def test_with_every_target_missing_the_whole_cluster_is_lent(demand_file, tmp_path):
    """The only policy's Deployment deleted: nothing was planned any more, and the training quota stayed at what it
    was beside the reservation, the GPUs it had held idle. Nothing reserves them now: they are lent."""
    r = Replay(tmp_path, demand_file)
    held = r.step(AT_9).policies["inference/chat"].reserved_gpus
    assert r.cluster.quotas["research"] <= 128 - held < 128
    r.cluster.delete_target(TargetRef("Deployment", "chat", "inference"))
    state = r.step(AT_9 + pd.Timedelta(minutes=5))
    assert not state.policies["inference/chat"].valid and state.slack_gpus == r.cluster.quotas["research"] == 128
    assert r.status()[1]["Ready"]["reason"] == "TargetMissing"


# ----------------------------------------------------------------------------------------------- the plan applied
def test_reservation_is_applied_ahead_of_the_morning_ramp_and_slack_is_lent(demand_file, tmp_path):
    r = Replay(tmp_path, demand_file)
    night = r.step(MONDAY_6AM - pd.Timedelta(hours=3)).policies["inference/chat"]
    # at night the lent GPUs cover the headroom and every training job stops within the deadline
    risk = r.status()[1]["HeadroomAtRisk"]
    assert (risk["status"], risk["reason"]) == ("False", "HeadroomCovered")
    assert r.events("CohortReclaims") == []  # the embedded Kueue's queues never reclaim within their cohort
    assert night.reclaimable_gpus == 128 - night.reserved_gpus >= night.headroom_gpus > 0
    state = r.step(AT_9)  # 9:00, on the ramp to the 10:30 peak
    ps = state.policies["inference/chat"]
    assert r.replicas() * 2 == ps.reserved_gpus > night.reserved_gpus
    # the reservation covers the q0.9 forecast of this hour, and the slack went to the training queue
    assert ps.step.from_forecast and "q0.9 forecast" in ps.hours.reason(0, _workload_policy(), 128)
    assert ps.reserved_gpus >= math.ceil(ps.forecast.loc[AT_9, 0.9] / 10.0)
    assert r.cluster.quotas["research"] == state.slack_gpus == 128 - ps.reserved_gpus
    # the next hour's higher reservation is in force leadTime (15 min) before it starts, not before
    assert ps.hours.reserved[1] > ps.hours.reserved[0]
    early = r.step(AT_9 + pd.Timedelta(minutes=40)).policies["inference/chat"]
    ahead = r.step(AT_9 + pd.Timedelta(minutes=50)).policies["inference/chat"]
    assert early.step.forecast_gpus == early.hours.reserved[0]
    assert ahead.step.forecast_gpus == ahead.hours.reserved[1] and ahead.reserved_gpus >= ahead.hours.reserved[1]
    # status and events
    s, conditions = r.status()
    assert s["reservedGpus"] == ahead.reserved_gpus == r.replicas() * 2
    assert s["headroomGpus"] == ahead.headroom_gpus and "slackGpus" not in s  # cluster-wide: the plan summary's
    state = r.reconciler.holder.get()
    assert state.slack_gpus == r.cluster.quotas["research"]
    assert [g for _, g in state.slack_by_hour] == [128 - g for g in ahead.hours.reserved]
    assert len(s["nextHours"]) == 6 and s["nextHours"][1]["reservedGpus"] == ahead.hours.reserved[1]
    assert s["nextHours"][0]["hour"] == "2026-01-19T09:00:00Z" and s["observedGeneration"] == 1 and s["planId"]
    assert s["forecastDemand"] == pytest.approx(ahead.forecast.loc[AT_9, 0.9])
    assert s["model"] == ahead.model and s["model"].startswith("auto")
    assert conditions["Ready"]["reason"] == "Active" and conditions["FallbackActive"]["status"] == "False"
    assert conditions["ForecastDegraded"]["status"] == "False"
    # the headroom is at risk exactly when its band asks for more than is left to lend
    risk = state.headroom_at_risk
    assert conditions["HeadroomAtRisk"]["status"] == risk.status == (
        "True" if ahead.headroom_gpus > state.slack_gpus else "False")
    changes = r.events("ReservationChanged", "chat")
    assert len(changes) == len({e["message"] for e in changes}) >= 3  # one per change: night, 9:00, 9:50
    assert f"-> {ahead.reserved_gpus // 2} on Deployment chat" in changes[-1]["message"]
    assert r.events("SlackLent") and all(e["type"] == "Normal" for e in changes)


def test_each_training_queue_where_kueue_preempts_within_gets_an_event_of_its_own(demand_file, tmp_path):
    """A policy lending to two queues of withinClusterQueue LowerOrNewerEqualPriority (said whatever their Workloads'
    priorities) was told both in one Event of some 1,320 characters, cut at the 1,024 an Event's message keeps (the
    Kubernetes adapter's), the second queue's fix lost. Each queue's finding is an Event of its own, each once: a queue
    that stops preempting tells nothing new, one that starts again is told again."""
    r = Replay(tmp_path, demand_file, policy(trainingClusterQueues=["research", "batch"]))
    settings = {"research": "LowerOrNewerEqualPriority", "batch": "LowerOrNewerEqualPriority"}
    r.cluster.within_queue_preemption = lambda: settings  # type: ignore[method-assign]  # the embedded Kueue's: none
    for at in (MONDAY_6AM, MONDAY_6AM + pd.Timedelta(minutes=5)):
        r.step(at)
    said = [e["message"] for e in r.events("KueuePreemptsWithinQueue", "chat")]
    assert sorted(m.split(" has ")[0] for m in said) == ["ClusterQueue batch", "ClusterQueue research"], said
    assert all(len(m) <= 1024 and m.endswith("makes the pending Workload wait for quota instead") for m in said)
    del settings["batch"]  # withinClusterQueue: Never, as the adapters leave it out
    r.step(MONDAY_6AM + pd.Timedelta(minutes=10))
    assert len(r.events("KueuePreemptsWithinQueue")) == 2
    settings["batch"] = "LowerOrNewerEqualPriority"
    r.step(MONDAY_6AM + pd.Timedelta(minutes=15))
    assert [e["message"].split(" has ")[0] for e in r.events("KueuePreemptsWithinQueue")[2:]] == ["ClusterQueue batch"]


def test_a_strict_fifo_training_queue_is_noted_once_with_the_setting_a_what_if_needs(demand_file, tmp_path):
    """Kueue takes a StrictFIFO queue strictly in order, and a what-if replays a queue as BestEffortFIFO unless
    simulate.world.strict_fifo_queues names it: the two admit differently, and nothing on the cluster said which the
    queue is. Each such training queue is now a Normal Event on the policies lending to it, once, naming the setting."""
    world = EIGHTS.model_copy(update={"strict_fifo_queues": ("research",)})
    r = Replay(tmp_path, demand_file, policy(trainingClusterQueues=["research", "batch"]), world=world)
    for at in (MONDAY_6AM, MONDAY_6AM + pd.Timedelta(minutes=5)):
        r.step(at)
    (note,) = r.events("KueueStrictFIFO", "chat")
    assert note["type"] == "Normal" and note["message"].startswith("ClusterQueue research has spec.queueingStrategy: "
                                                                   "StrictFIFO")
    assert note["message"].endswith("only where simulate.world.strict_fifo_queues names research")


def test_a_headroom_band_wider_than_the_slack_is_at_risk_and_the_status_says_so_without_cluster_numbers(
        demand_file, tmp_path):
    r = Replay(tmp_path, demand_file, policy(headroomFloorGpus=100))  # a band no slack at 9:00 covers
    r.step(MONDAY_6AM - pd.Timedelta(hours=3))
    state = r.step(AT_9)
    ps, risk = state.policies["inference/chat"], state.headroom_at_risk
    assert ps.headroom_gpus >= 100 > state.slack_gpus and risk.status == "True"
    assert f"the headroom band is {state.slack_gpus}" in risk.message
    # the policy's status says so without the cluster-wide numbers (they would rewrite every status when they move)
    _, conditions = r.status()
    assert conditions["HeadroomAtRisk"]["status"] == "True" and conditions["HeadroomAtRisk"]["reason"] == risk.reason
    assert str(state.slack_gpus) not in conditions["HeadroomAtRisk"]["message"]


def test_headroom_at_risk_says_whether_reclaim_capacity_or_the_cohort_falls_short():
    from controller.cohorts import CohortCheck, cohort_lenders
    from controller.reconcile import headroom_condition
    from core.objects import GpuQuota, QuotaNode

    none = CohortCheck()
    assert headroom_condition(40, 30, 30, 50, none).reason == "HeadroomCovered"
    assert headroom_condition(40, 30, 30, 50, none).status == "False"
    slow = headroom_condition(20, 30, 30, 50, none)  # slow jobs hold part of the band
    assert (slow.status, slow.reason) == ("True", "ReclaimableBelowHeadroom")
    short = headroom_condition(36, 36, 70, 36, none)  # everything lent comes back, but q0.99 needs more than that
    assert (short.status, short.reason) == ("True", "HeadroomAboveCapacity") and "asks for 70" in short.message

    def queue(name, cohort, gpus, lending=None):
        return QuotaNode("ClusterQueue", name, cohort, {"a100": GpuQuota(gpus, lending_limit=lending)})

    # the inference queue lends into the training queues' cohort; one elsewhere or with lendingLimit 0 does not
    tree = [queue("inference", "pool", 48), queue("research", "pool", 8), queue("batch", "pool", 8),
            queue("capped", "pool", 8, lending=0), queue("other-team", "elsewhere", 16)]
    lenders = cohort_lenders(tree, {"research", "batch", "not-a-queue"})
    assert [(x.kind, x.name, x.gpus, x.cohort) for x in lenders.lenders] == [("ClusterQueue", "inference", 48, "pool")]
    lends = headroom_condition(40, 30, 30, 50, lenders)
    assert (lends.status, lends.reason) == ("True", "CohortLends")
    assert "ClusterQueue inference lends up to 48 GPUs into cohort pool (set its GPU lendingLimit to 0)" \
        in lends.message
    assert cohort_lenders(tree, {"not-a-queue"}) == CohortCheck()  # training queues in no cohort borrow from nothing


def _workload_policy(name="chat", **spec):
    from core.policy import PolicySpec
    from planning.planner import WorkloadPolicy

    return WorkloadPolicy.from_spec(f"inference/{name}", PolicySpec.model_validate(policy(name, **spec)["spec"]))


def test_forecast_only_reports_but_changes_nothing(demand_file, tmp_path):
    r = Replay(tmp_path, demand_file, policy(mode="forecast-only"))
    r.fill_training()  # holds everything: an active controller would preempt
    before = (r.replicas(), dict(r.cluster.quotas), [(w.key, w.active) for w in r.cluster.workloads()])
    state = r.reconciler.reconcile(AT_9)
    assert state.actions == ()
    assert (r.replicas(), dict(r.cluster.quotas), [(w.key, w.active) for w in r.cluster.workloads()]) == before
    assert r.cluster.events == [] and sum(state.preemptions_total.values()) == 0
    s, conditions = r.status()
    assert conditions["Ready"]["reason"] == "ForecastOnly"
    assert s["reservedGpus"] == state.policies["inference/chat"].reserved_gpus > 0
    # the same policy active on the same cluster does act: forecast-only is what stopped it
    active = Replay(tmp_path / "active", demand_file)
    active.fill_training()
    assert any(isinstance(a, Evict) for a in active.reconciler.reconcile(AT_9).actions)


def test_an_active_policy_beside_a_forecast_only_one_is_planned_on_what_that_one_holds(demand_file, tmp_path):
    """chat is active; b, beside it, is forecast-only (the default mode), its team's queue team-b full of training.
    The one plan counted b's would-be reservation (44 GPUs at 09:00) where its Deployment held its 12 replicas (24),
    and counted team-b's training as the plan's to preempt, where no eviction is made for a forecast-only policy: so
    chat, cut to 84, had 6 replicas (12 GPUs) waiting for GPUs team-b's training kept, from 08:45 on. The policies
    that act are planned on what the forecast-only ones hold (their targets as read, the training in the queues only
    they name), and b's status still says what it would do."""
    r = Replay(tmp_path, demand_file, policy("chat", minGpus=10),
               policy("b", trainingClusterQueues=["team-b"], mode="forecast-only"))
    r.fill_training("team-b")
    b_replicas = r.replicas("b")
    for k in range(12 * 4):
        now = MONDAY_6AM + pd.Timedelta(minutes=5 * k)
        state = r.step(now)
        chat, b = state.policies["inference/chat"], state.policies["inference/b"]
        assert r.replicas("b") == b_replicas and r.cluster.quotas["team-b"] == 0  # forecast-only: changes nothing
        assert not [a for a in state.actions if isinstance(a, Evict) and a.queue == "team-b"]
        training = sum(w.gpus for w in r.running() if w.cluster_queue == "team-b")
        assert chat.reserved_gpus + b_replicas * 2 + training + state.slack_gpus <= 128, now
        if now >= MONDAY_6AM + pd.Timedelta(minutes=30):  # from then on, past a warm-up: served
            assert r.cluster.inference["inference/chat"].waiting == 0, now
    assert r.status("b")[0]["reservedGpus"] == b.reserved_gpus > b_replicas * 2  # what b would reserve
    assert r.status("b")[1]["Ready"]["reason"] == "ForecastOnly"


def test_the_plans_of_active_and_forecast_only_policies_beside_are_made_on_one_read_of_the_cluster(
        demand_file, tmp_path, monkeypatch):
    """chat is active and b, beside it, forecast-only, both lending to research, full of training. A reconcile makes
    two plans (b's status said by the plan of both, what is done by the plan of chat alone), and each read the
    Workloads anew: a job that ended between the two reads was training to preempt in one plan and gone in the other.
    Both are made on one read of the cluster."""
    r = Replay(tmp_path, demand_file, policy("chat", minGpus=10), policy("b", mode="forecast-only"))
    r.fill_training()
    ended = r.running()[0].key
    workloads, reads = r.cluster.workloads, []

    def ending():  # the job ends just after the reconcile's first read of the Workloads
        reads.append(True)
        return [w for w in workloads() if len(reads) == 1 or w.key != ended]

    planned_on: list[set[str]] = []

    def noting(hours, observed, training, *args):
        planned_on.append(set(training.ids))
        return plan_step(hours, observed, training, *args)

    monkeypatch.setattr(r.cluster, "workloads", ending)
    monkeypatch.setattr("controller.reconcile.plan_step", noting)
    r.reconciler.reconcile(AT_9)
    shadow, acting = planned_on[:2]  # (a third: the evictions re-planned on a fresh view, as they are made)
    assert ended in shadow
    assert acting == shadow


def test_training_is_taken_back_when_it_holds_the_reservation_and_never_twice(demand_file, tmp_path):
    r = Replay(tmp_path, demand_file)
    r.fill_training()  # 128 GPUs of training: the morning's reservation must come out of it
    state = r.reconciler.reconcile(AT_9)
    evicted = {w.key for w in r.cluster.workloads() if not w.active}
    held = sum(w.gpus for w in r.running())
    assert evicted and held <= state.slack_gpus
    assert sum(state.preemptions_total.values()) == len(evicted)
    assert len(r.events("Preempted")) == len(evicted)
    assert all(w.evicted_by_plan for w in r.cluster.workloads() if not w.active)
    # The same evictions again (a restart mid-reconcile replaying its actions): re-validated, none applied.
    evictions = [a for a in state.actions if isinstance(a, Evict)]
    assert {a.workload for a in evictions} == evicted
    assert not any(o.applied for o in execute(evictions, r.cluster))
    # A restarted controller (fresh process state) on the same cluster: nothing more to take back.
    again = r.restart().reconcile(AT_9)
    assert {w.key for w in r.cluster.workloads() if not w.active} == evicted
    assert len(r.events("Preempted")) == len(evicted) and sum(again.preemptions_total.values()) == 0
    # Once stopped (60 s), headroom's victims go back into their queue.
    r.cluster.advance((AT_9 + pd.Timedelta(minutes=5)).timestamp())
    r.reconciler.reconcile(AT_9 + pd.Timedelta(minutes=5))
    requeued = {w.key: w for w in r.cluster.workloads() if w.key in evicted}
    assert all(w.active and not w.admitted and w.evicted_by_plan is None for w in requeued.values())


def test_slow_jobs_may_not_hold_the_headroom_band(demand_file, tmp_path):
    slow = WorldSettings(backlog_job_gpus=(8,), preemption_seconds=(900.0, 900.0))  # slower than the 5 min deadline
    r = Replay(tmp_path, demand_file, policy(capacity={"demandPerGpu": 20.0, "gpusPerReplica": 2}), world=slow)
    r.fill_training()
    state = r.reconciler.reconcile(AT_9)
    ps = state.policies["inference/chat"]
    slow_held = sum(w.gpus for w in r.running())
    assert ps.headroom_gpus > 0 and 0 < slow_held <= state.slack_gpus - ps.headroom_gpus
    kinds = {e["message"].split(" ")[0] for e in r.events("Preempted")}
    assert kinds == {"planned"}
    # once the slow jobs have stopped the band is reclaimable in time
    r.cluster.advance((AT_9 + pd.Timedelta(minutes=16)).timestamp())
    state = r.reconciler.reconcile(AT_9 + pd.Timedelta(minutes=16))
    ps = state.policies["inference/chat"]
    assert ps.reclaimable_gpus >= ps.headroom_gpus and r.status()[1]["HeadroomAtRisk"]["status"] == "False"


def test_capacity_shared_by_two_workloads_never_exceeds_the_cluster(demand_file, tmp_path):
    r = Replay(tmp_path, demand_file, policy("chat"), policy("search", minGpus=8))
    r.fill_training()
    state = r.step(MONDAY_6AM + pd.Timedelta(hours=4))
    reserved = [state.policies[k].reserved_gpus for k in ("inference/chat", "inference/search")]
    assert reserved[1] >= 8 and sum(reserved) + state.slack_gpus == 128
    assert r.replicas("chat") * 2 == reserved[0] and r.replicas("search") * 2 == reserved[1]
    assert r.cluster.inference_gpus + r.cluster.training_gpus <= 128


def test_the_inference_cluster_queue_quota_follows_the_reservation(demand_file, tmp_path):
    r = Replay(tmp_path, demand_file, policy("chat", inferenceClusterQueue="inference"),
               policy("search", inferenceClusterQueue="inference"))
    state = r.step(AT_9)
    both = state.policies["inference/chat"].reserved_gpus + state.policies["inference/search"].reserved_gpus
    assert r.cluster.quotas["inference"] == both > 0


def test_an_inference_cluster_queue_starts_holding_the_replicas_that_serve_in_it(demand_file, tmp_path):
    """The targets served before the replay, so Kueue had admitted their pods into their inferenceClusterQueue: it
    starts with a quota holding them, not at 0 (from which `headroom plan` showed a quota raise a cluster that runs
    them would not make, and a forecast-only policy's queue, never written, stayed at 0 under serving pods)."""
    r = Replay(tmp_path, demand_file, policy("chat", inferenceClusterQueue="inference"),
               policy("search", inferenceClusterQueue="inference"),
               policy("watch", mode="forecast-only", inferenceClusterQueue="watched", trainingClusterQueues=[]),
               start=AT_9)
    held = {k: r.replicas(k) * 2 for k in ("chat", "search", "watch")}
    assert r.cluster.quotas["inference"] == held["chat"] + held["search"] > 0
    assert r.cluster.quotas["watched"] == held["watch"] > 0
    r.step(AT_9)
    assert r.cluster.quotas["watched"] == held["watch"]  # no active policy runs in it: nothing writes it


def test_an_hpa_scaling_above_its_reservation_waits_for_its_inference_cluster_queue_quota(demand_file, tmp_path):
    """Each pod of a policy that names an inferenceClusterQueue is a Kueue Workload of that queue, whose nominalQuota
    headroom sets to the reservation. The HPA's own scale-up above it (maxGpus clamps the reservation at 20 while the
    morning ramp asks ~64) took idle GPUs whatever the quota said; on a cluster those pods wait, as the saturated
    backlog leaves the cohort no quota to borrow. Now they wait, short, as a real cluster's waiting pods are."""
    def replay(**queue):
        hpa = policy("chat", target={"kind": "HorizontalPodAutoscaler", "name": "chat"}, maxGpus=20, **queue)
        r = Replay(tmp_path / str(len(queue)), demand_file, hpa, start=AT_9 - pd.Timedelta(hours=2))
        first = r.cluster.inference["inference/chat"].held_replicas * 2
        most = 0
        for k in range(30):
            r.step(AT_9 - pd.Timedelta(hours=2) + k * pd.Timedelta(minutes=5))
            held = r.cluster.inference["inference/chat"].held_replicas * 2
            if queue:  # Kueue evicts nothing when the quota falls, and admits nothing above it
                assert r.running() and held <= max(first, r.cluster.quotas["inference"]), (k, held)
            most = max(most, held)
        return most, r.cluster.accounting.unmet_within["inference/chat"], r.cluster.inference["inference/chat"]

    free, free_unmet, _ = replay()
    queued, queued_unmet, inf = replay(inferenceClusterQueue="inference")
    assert inf.waiting > 0  # pending pods, counted short
    assert queued < free and queued_unmet > free_unmet


def test_an_inference_replica_borrows_only_the_quota_no_training_waits_for():
    """The shipped inference queue is in the training queues' cohort with no borrowingLimit (lendingLimit 0): Kueue
    admits its pods into its own quota, then into the training queues' unused quota while no training Workload waits
    for it; what it so borrows is not the training queues' to admit into until a quota raise takes it back."""
    index = pd.date_range(MONDAY_6AM - pd.Timedelta(days=1), MONDAY_6AM + pd.Timedelta(days=1), freq="5min")
    demand = pd.Series(20.0, index=index).where(index <= MONDAY_6AM, 200.0)  # 2 GPUs, then 20
    hpa = policy("chat", target={"kind": "HorizontalPodAutoscaler", "name": "chat"}, inferenceClusterQueue="serve",
                 capacity={"demandPerGpu": 10.0, "gpusPerReplica": 1})
    start = MONDAY_6AM.timestamp()
    w = EmbeddedCluster(64, [hpa], {"inference/chat": demand}, start,
                        jobs=(np.array([4]), np.array([3600.0]), np.array([1800.0])))  # one job, at 06:30
    inf = w.inference["inference/chat"]
    assert inf.held_replicas == 2 and w.quotas["serve"] == 2
    w.set_cluster_queue_quota("serve", 4)
    w.set_cluster_queue_quota("research", 6)
    w.advance(start + 300)  # the HPA asks 20: 4 of its own quota and the 6 no training waits for
    assert (inf.held_replicas, inf.waiting) == (10, 10)
    w.advance(start + 1800)
    w.admit()  # the job arrives: the 6 GPUs of its queue's quota are borrowed, it waits (free GPUs notwithstanding)
    assert not [x for x in w.workloads() if x.admitted] and w.idle_gpus >= 4
    w.set_cluster_queue_quota("serve", 20)  # the reservation follows: the replicas fit its own quota
    assert (inf.held_replicas, inf.waiting) == (20, 0)
    assert [x.gpus for x in w.workloads() if x.admitted] == [] and w.admit()  # and the job its queue's


def test_an_inference_replica_borrows_past_a_training_workload_too_large_for_the_quota_left():
    """Kueue's BestEffortFIFO (the training queues' queueingStrategy) passes over a Workload that does not fit the
    cohort's unused quota: it blocks no other queue's admission. A replica borrowed nothing while any training Workload
    waited, even one too large for all the training quota. Now the Workloads that fit go first (the 4-GPU job, older,
    of the same priority), and a replica borrows what they leave (2 of the 6 GPUs), past the 8-GPU one."""
    index = pd.date_range(MONDAY_6AM - pd.Timedelta(days=1), MONDAY_6AM + pd.Timedelta(days=1), freq="5min")
    demand = pd.Series(20.0, index=index).where(index <= MONDAY_6AM, 200.0)  # 2 GPUs, then 20
    hpa = policy("chat", target={"kind": "HorizontalPodAutoscaler", "name": "chat"}, inferenceClusterQueue="serve",
                 capacity={"demandPerGpu": 10.0, "gpusPerReplica": 1})
    start = MONDAY_6AM.timestamp()
    w = EmbeddedCluster(64, [hpa], {"inference/chat": demand}, start,  # an 8-GPU job, then a 4-GPU one, waiting
                        jobs=(np.array([8, 4]), np.array([3600.0, 3600.0]), np.array([0.0, 0.0])))
    inf = w.inference["inference/chat"]
    w.set_cluster_queue_quota("serve", 4)
    w.set_cluster_queue_quota("research", 6)
    assert [x.gpus for x in w.workloads() if x.admitted] == [] and [w.jobs.gpus[i] for i in w.admit()] == [4]
    w.advance(start + 300)  # the HPA asks 20: 4 of its own quota and the 2 the 4-GPU job leaves
    assert (inf.held_replicas, inf.waiting) == (6, 14)
    assert [x.gpus for x in w.workloads() if not x.admitted] == [8]  # still waiting: it never fits the 6


def test_a_replica_waiting_since_before_a_training_job_was_created_borrows_before_it():
    """Kueue orders the borrowers of a scheduling cycle by priority, then creation time (scheduler.go's
    classicalIterator); it gives training no precedence. A training Workload borrowing went before a replica borrowing
    even where the replica had waited since before the job was created. Here the replicas the HPA asked at 06:05 wait
    (no quota to borrow), the product team's 3-GPU job of the trace is created at 06:10 and waits too (it borrows: its
    queue's quota is 0); when research's job finishes at 06:25, Kueue looks again at both and the replicas, older, take
    the 3 GPUs of quota it frees. They went to the job."""
    index = pd.date_range(MONDAY_6AM - pd.Timedelta(days=1), MONDAY_6AM + pd.Timedelta(days=1), freq="5min")
    demand = pd.Series(20.0, index=index).where(index <= MONDAY_6AM, 200.0)  # 2 GPUs, then 20
    hpa = policy("chat", target={"kind": "HorizontalPodAutoscaler", "name": "chat"}, inferenceClusterQueue="serve",
                 capacity={"demandPerGpu": 10.0, "gpusPerReplica": 1}, trainingClusterQueues=["research", "product"])
    start = MONDAY_6AM.timestamp()
    w = EmbeddedCluster(64, [hpa], {"inference/chat": demand}, start,  # research's job at 06:00, product's at 06:10
                        jobs=(np.array([3, 3]), np.array([1500.0, 3600.0]), np.array([0.0, 600.0])))
    inf = w.inference["inference/chat"]
    w.set_cluster_queue_quota("research", 3)
    assert [w.jobs.gpus[i] for i in w.admit()] == [3]  # research's job holds its queue's whole quota
    w.advance(start + 300)  # the HPA asks 18 more: nothing to borrow
    assert (inf.held_replicas, inf.waiting) == (2, 18)
    w.advance(start + 1800)  # product's job arrives at 06:10 and waits; research's finishes at 06:25
    assert (inf.held_replicas, inf.waiting) == (5, 15)
    assert [(x.cluster_queue, x.gpus, x.admitted) for x in w.workloads()] == [("product", 3, False)]
    w.set_cluster_queue_quota("research", 6)  # 3 more: the replicas, older, borrow them again
    assert w.admit() == [] and (inf.held_replicas, inf.waiting) == (8, 12)


@pytest.mark.parametrize("strict", [False, True])
def test_a_training_head_within_its_quota_keeps_a_borrowing_replica_out_of_its_cycle(strict):
    """Kueue v0.19 (pkg/scheduler/scheduler.go, reserveCapacityForUnreclaimablePreempt): a training head within its
    queue's nominalQuota that the cohort's unused quota does not cover (replicas borrowed it) needs preemption; with
    none to preempt (reclaimWithinCohort: Never) it reserves that quota for its scheduling cycle, and goes before a
    borrowing replica in it: the replica is skipped, and requeued at once (requeueAndUpdate: FailedAfterNomination),
    the head of its queue in the next cycle again. A cycle takes one head of each queue: with ten such jobs waiting,
    the first replica meets each in turn; under BestEffortFIFO each job is set aside after its cycle, so when
    headroom raises research's quota by 2 the replica then borrows 1 of them, and the next replica the other (the
    embedded Kueue had set the replicas aside with the jobs, and they waited for its next event). A StrictFIFO
    research queue's head reserves in every cycle: the replicas borrow none of the 2, then or later."""
    index = pd.date_range(MONDAY_6AM - pd.Timedelta(days=1), MONDAY_6AM + pd.Timedelta(days=1), freq="5min")
    demand = pd.Series(20.0, index=index).where(index <= MONDAY_6AM, 200.0)  # 2 GPUs, then 20,
    demand = demand.where(index <= MONDAY_6AM + pd.Timedelta(minutes=20), 210.0)  # then 21
    hpa = policy("chat", target={"kind": "HorizontalPodAutoscaler", "name": "chat"}, inferenceClusterQueue="serve",
                 capacity={"demandPerGpu": 10.0, "gpusPerReplica": 1})
    start = MONDAY_6AM.timestamp()
    w = EmbeddedCluster(64, [hpa], {"inference/chat": demand}, start,  # ten 4-GPU jobs, at 06:10
                        jobs=(np.full(10, 4), np.full(10, 3600.0), np.full(10, 600.0)),
                        settings=WorldSettings(strict_fifo_queues=("research",) if strict else ()))
    inf = w.inference["inference/chat"]
    w.set_cluster_queue_quota("research", 8)
    w.advance(start + 300)  # the HPA asks 18 more: 8 borrow research's unused quota
    assert (inf.held_replicas, inf.waiting) == (10, 10)
    w.advance(start + 900)  # the jobs arrive: within research's 8, not the cohort's 0 unused; they wait
    w.set_cluster_queue_quota("research", 10)  # 2 unused: each job reserves 4 in its cycle, before a replica
    assert (inf.held_replicas, inf.waiting) == ((10, 10) if strict else (12, 8)) and w.admit() == []
    w.advance(start + 1500)  # the HPA asks one more at 06:25: none of the 2 is left for it, or the head holds them
    assert (inf.held_replicas, inf.waiting) == ((10, 11) if strict else (12, 9))


def test_what_the_start_decides_serves_at_once_only_as_far_as_its_inference_cluster_queue_admits():
    """The controller ran before the replay, so what it decides as the replay starts was in place, warm, as far as
    Kueue admitted it: its queue's unused quota, then what the training queues leave unused; a replica Kueue does not
    admit waits. A raised quota admits a replica waiting then, in place too. Once time moves on, a replica admitted
    warms up."""
    index = pd.date_range(MONDAY_6AM - pd.Timedelta(days=1), MONDAY_6AM + pd.Timedelta(days=1), freq="5min")
    flat = pd.Series(20.0, index=index)  # 2 GPUs: 2 replicas of 1 GPU each
    one = {"demandPerGpu": 10.0, "gpusPerReplica": 1}
    chat, search = (policy(name, inferenceClusterQueue="serve", capacity=one) for name in ("chat", "search"))
    start = MONDAY_6AM.timestamp()
    w = EmbeddedCluster(64, [chat, search], {"inference/chat": flat, "inference/search": flat}, start,
                        jobs=(np.array([8]), np.array([3600.0]), np.array([0.0])))
    first, second = w.inference["inference/chat"], w.inference["inference/search"]
    assert w.quotas["serve"] == 4 and (first.warm, second.warm) == (2, 2)
    w.set_cluster_queue_quota("research", 2)
    w.admit()  # the 8-GPU job waits: it never fits the 2 (a replica may borrow them)
    w.scale_deployment("inference", "chat", 3)  # one replica more, and no quota but the 2 borrowed
    assert (first.warm, first.warming, first.waiting) == (3, [], 0)
    w.scale_deployment("inference", "chat", 5)  # the last borrowed GPU, then it waits for quota
    assert (first.warm, first.warming, first.waiting) == (4, [], 1)
    w.set_cluster_queue_quota("serve", 7)  # the replica waiting fits the queue's quota: the 2 are unused again
    assert (first.warm, first.warming, first.waiting) == (5, [], 0)
    w.scale_deployment("inference", "search", 5)  # 2 of its 3 more are in place, 1 waits
    assert (second.warm, second.warming, second.waiting) == (4, [], 1)
    w.advance(start + 300.0)
    w.set_cluster_queue_quota("serve", 8)  # admitted after the start: it warms up
    assert (second.warm, len(second.warming), second.waiting) == (4, 1, 0)


def test_a_policy_applied_after_the_start_warms_up_its_first_scale():
    """A target found after the world started is no decision in place before it: its first scale's replicas warm up
    as any later scale's. They served at once (4 ready the moment a policy applied an hour in scaled 1 -> 4)."""
    index = pd.date_range(MONDAY_6AM - pd.Timedelta(days=1), MONDAY_6AM + pd.Timedelta(days=1), freq="5min")
    flat = pd.Series(20.0, index=index)  # 1 replica of 2 GPUs
    start = MONDAY_6AM.timestamp()
    w = EmbeddedCluster(64, [policy("chat")], {"inference/chat": flat, "inference/search": flat}, start)
    w.advance(start + 3600.0)
    w.apply_policy(policy("search"))
    w.scale_deployment("inference", "search", 4)
    search = w.inference["inference/search"]
    assert (search.warm, len(search.warming), search.waiting) == (1, 3, 0)


@pytest.mark.parametrize("queue", [{}, {"inferenceClusterQueue": "inference"}])
def test_the_reservation_at_the_start_serves_at_once_in_an_inference_cluster_queue_too(demand_file, tmp_path, queue):
    """The start's reconcile writes the reservation, then the inferenceClusterQueue's quota that admits it. The
    replicas asked beyond those serving were in place, warm, when the policy has no inferenceClusterQueue; with one
    they waited for a quota not yet raised, then warmed up: 23 of 42 replicas served after the first reconcile at 9:00,
    a handicap of the start no cluster that ran the controller before has."""
    r = Replay(tmp_path, demand_file, policy("chat", **queue), start=AT_9)
    before = r.cluster.inference["inference/chat"].warm
    r.step(AT_9)
    state = r.cluster.target_state(TargetRef("Deployment", "chat", "inference"), 2)
    assert state.ready_replicas == state.desired_replicas > before


# ----------------------------------------------------------------------------------------------- faults
class FailingDemand(DemandReader):
    """Demand that answers until `fail` is set, then fails like an unreachable Prometheus (for `keys`, or all)."""

    def __init__(self, inner, keys=None):
        self.inner, self.fail, self.keys = inner, False, keys

    def read(self, key, query, start, end):
        if self.fail and (self.keys is None or key in self.keys):
            raise PrometheusError("Prometheus at http://prometheus:9090 failed: connection refused")
        return self.inner.read(key, query, start, end)


class NegativeDemand(FailingDemand):
    """A query answering negative values (a gauge's delta, a subtraction in the PromQL) at 3 am."""

    def read(self, key, query, start, end):
        raw = self.inner.read(key, query, start, end)
        return raw.where(raw.index.hour != 3, -5.0) if self.fail else raw


@pytest.mark.parametrize("names", [["chat"], ["chat", "a", "b", "c"]])  # four and more: the reads prefetched together
def test_a_query_answering_negative_demand_is_demand_unavailable_not_an_internal_error(demand_file, tmp_path, caplog,
                                                                                       names):
    """Negative values reached the hourly fit unchecked: its HistoryError escaped the demand's own handling, the
    policy counted an `internal` error and the log a traceback every reconcile. Now the read is refused as the file
    and CLI readers refuse it: DemandUnavailable naming the first value, the last good forecast kept meanwhile."""
    keys = [f"inference/{name}" for name in names]
    demand = NegativeDemand(FileDemand(dict.fromkeys(keys, demand_file)))
    r = Replay(tmp_path, demand_file, *(policy(name) for name in names), demand=demand)
    good = r.step(MONDAY_6AM).policies
    demand.fail = True
    with caplog.at_level("WARNING", logger="controller.reconcile"):
        state = r.step(MONDAY_6AM + pd.Timedelta(hours=1))
    for key in keys:
        kept = state.policies[key]
        assert kept.degraded and not kept.fallback and kept.model == good[key].model
    _, conditions = r.status()
    assert conditions["ForecastDegraded"]["reason"] == "DemandUnavailable"
    assert "-5.0" in conditions["ForecastDegraded"]["message"], conditions["ForecastDegraded"]
    assert state.reconcile_errors_total.get("internal", 0) == 0
    assert state.reconcile_errors_total.get("demand", 0) >= len(keys)
    assert "Traceback" not in caplog.text


def test_demand_outage_keeps_the_forecast_then_falls_back_and_never_lowers_the_reservation(demand_file, tmp_path):
    demand = FailingDemand(FileDemand({"inference/chat": demand_file}))
    r = Replay(tmp_path, demand_file, demand=demand, run={"keep_forecast_seconds": 3600})
    peak = r.step(MONDAY_6AM + pd.Timedelta(hours=4)).policies["inference/chat"]  # 10:00, near the peak
    demand.fail = True
    kept = r.step(MONDAY_6AM + pd.Timedelta(hours=4, minutes=30)).policies["inference/chat"]
    assert kept.degraded and not kept.fallback and kept.model == peak.model
    _, conditions = r.status()
    assert conditions["ForecastDegraded"]["status"] == "True"
    assert conditions["ForecastDegraded"]["reason"] == "DemandUnavailable"
    assert conditions["FallbackActive"]["status"] == "False"
    # Past keep_forecast_seconds: the conservative reservation, and still never below what was in force.
    night = MONDAY_6AM + pd.Timedelta(hours=14)  # 20:00: a healthy forecast would scale in
    gone = r.step(night).policies["inference/chat"]
    also = r.step(night + pd.Timedelta(minutes=5)).policies["inference/chat"]
    assert gone.fallback and gone.model == "fallback"
    assert also.reserved_gpus >= gone.reserved_gpus >= kept.reserved_gpus >= peak.reserved_gpus
    assert r.replicas() * 2 == also.reserved_gpus
    _, conditions = r.status()
    assert conditions["FallbackActive"]["status"] == "True"
    warnings = r.events("FallbackActive")
    assert len(warnings) == 1 and warnings[0]["type"] == "Warning" and "connection refused" in warnings[0]["message"]
    assert r.reconciler.holder.get().reconcile_errors_total["demand"] == 3
    # Prometheus is back: a fresh forecast, and the night's lower reservation
    demand.fail = False
    back = r.step(night + pd.Timedelta(minutes=10)).policies["inference/chat"]
    assert not back.degraded and not back.fallback and back.model.startswith("auto")
    assert back.reserved_gpus < gone.reserved_gpus
    assert r.status()[1]["FallbackActive"]["status"] == "False"


def test_a_policy_whose_demand_fails_falls_back_alone(demand_file, tmp_path):
    """One policy's query failing, or its history missing altogether, is that policy's fault: the others keep
    their forecast, their reservation and their status."""
    alone = Replay(tmp_path / "alone", demand_file, policy("chat"))
    expected = alone.step(AT_9).policies["inference/chat"]
    demand = FailingDemand(FileDemand({"inference/chat": demand_file, "inference/search": demand_file}),
                           keys={"inference/search"})
    demand.fail = True
    nohistory = policy("rag", maxGpus=8)
    r = Replay(tmp_path, {"inference/chat": demand_file, "inference/search": demand_file}, policy("chat"),
               policy("search", maxGpus=40), nohistory, demand=demand)
    r.files = FileDemand({"inference/chat": demand_file})  # rag's history is missing: FileDemand raises
    held = {name: r.replicas(name) * 2 for name in ("search", "rag")}  # serving before: rag has no demand at all
    state = r.step(AT_9)
    chat = state.policies["inference/chat"]
    assert chat.step.from_forecast and not chat.degraded and chat.model == expected.model
    assert chat.reserved_gpus == expected.reserved_gpus and r.replicas("chat") * 2 == chat.reserved_gpus
    assert r.status("chat")[1]["FallbackActive"]["status"] == "False"
    for name, top in (("search", 40), ("rag", 8)):
        ps = state.policies[f"inference/{name}"]
        assert ps.valid and ps.degraded and ps.fallback and ps.model == "fallback"
        # no week seen: minGpus and what its target holds now, never all it may take (`top`)
        assert ps.reserved_gpus == max(2, held[name]) < top and ps.hours.why_fallback == "no data"
        _, conditions = r.status(name)
        assert conditions["FallbackActive"]["status"] == "True" and conditions["Ready"]["status"] == "True"
        assert conditions["ForecastDegraded"]["reason"] == "DemandUnavailable"
        assert [e["type"] for e in r.events("FallbackActive", name)] == ["Warning"]
    assert r.events("FallbackActive", "chat") == []
    assert state.reconcile_errors_total["demand"] == 2  # search's query, rag's missing history


@pytest.mark.parametrize("again", ["new uid", "after a reconcile without it"])
def test_a_policy_deleted_and_created_again_is_told_its_fault_again(demand_file, tmp_path, again):
    """rag (its history missing: FallbackActive) and twin (a second policy on chat's target: InvalidSpec) each get a
    Warning Event. Deleted and created again under the same name, each is a new object with the same fault, but the
    controller remembered what it had told them by name (rag) or kept what it told a policy deleted (twin, with no
    uid): the new objects got no Event, their statuses saying a fault no Event explained (`kubectl describe` lists a
    policy's Events by its uid). What was told a policy is forgotten with it."""
    demand = FileDemand({"inference/chat": demand_file})  # rag's history is missing: FileDemand raises

    def objects(uid: str) -> list[dict]:
        made = [policy("rag"), policy("twin", target={"kind": "Deployment", "name": "chat"})]
        for obj in made:
            obj["metadata"]["uid"] = f"{obj['metadata']['name']}-{uid}"
        return made

    r = Replay(tmp_path, {"inference/chat": demand_file}, policy("chat"), *objects("1"), demand=demand)
    r.step(AT_9)
    for obj in objects("1"):  # kubectl delete
        r.cluster.policies = [p for p in r.cluster.policies if p["metadata"]["name"] != obj["metadata"]["name"]]
        r.cluster.statuses.pop(("inference", obj["metadata"]["name"]))
    if again == "after a reconcile without it":
        r.step(AT_9 + pd.Timedelta(minutes=5))
    for obj in objects("2" if again == "new uid" else "1"):  # (the embedded cluster gives each object a uid anew)
        r.cluster.apply_policy(obj)
    r.step(AT_9 + pd.Timedelta(minutes=10))
    assert r.status("rag")[1]["FallbackActive"]["status"] == "True"
    assert r.status("twin")[1]["Ready"]["reason"] == "InvalidSpec"
    assert [e["type"] for e in r.events("FallbackActive", "rag")] == ["Warning"] * 2
    assert [e["type"] for e in r.events("InvalidSpec", "twin")] == ["Warning"] * 2


class TokensDemand(FailingDemand):
    """The query `tokens` answers 4 times what any other does: the same demand counted in other units."""

    def read(self, key, query, start, end):
        raw = self.inner.read(key, query, start, end)
        return raw * 4 if query == "tokens" else raw


def test_after_a_query_edit_the_policy_is_planned_on_the_new_query_s_samples_alone(demand_file, tmp_path):
    """chat's query edited at 06:15 from requests to tokens (4 per request) and its demandPerGpu with it (10 -> 40):
    the same demand in GPUs. The controller kept the old query's weeks of samples and joined the new ones to them, so
    the refit the edit asked for fitted the hours of both, the old ones read at a quarter of the GPUs they were: chat
    reserved 28-32 GPUs until the next hour's whole read, where a controller started after the edit, reading the new
    query whole, reserved 32-44 (12 GPUs more at 06:45, ahead of the ramp). A query edited is read whole, as at
    start."""
    demand = TokensDemand(FileDemand({"inference/chat": demand_file}))
    edited = policy("chat", query="tokens", capacity={"demandPerGpu": 40.0, "gpusPerReplica": 2})
    r = Replay(tmp_path / "kept", demand_file, policy("chat", query="requests"), demand=demand, gpus=1000)
    fresh = Replay(tmp_path / "fresh", demand_file, policy("chat", query="requests"), demand=demand, gpus=1000)
    for k in range(12):
        now = MONDAY_6AM + pd.Timedelta(minutes=5 * k)
        if k == 3:
            for replay in (r, fresh):
                replay.cluster.apply_policy(edited)
            fresh.reconciler = Reconciler(fresh.cluster, demand, fresh.cfg, forecast_log=ForecastLog(tmp_path / "f"))
        kept, started = r.step(now).policies["inference/chat"], fresh.step(now).policies["inference/chat"]
        assert kept.reserved_gpus == started.reserved_gpus, (now, kept.reserved_gpus, started.reserved_gpus)


def test_a_policy_created_again_with_another_query_is_planned_on_the_new_query_s_forecast(demand_file, tmp_path):
    """chat (query requests) deleted and created again between two reconciles with query tokens (4 per request,
    demandPerGpu 10 -> 40: the same demand in GPUs): a new object (its uid), at generation 1 again. The controller told
    an edit of the query by the generation alone, so it kept the deleted object's forecast (and what came with it: its
    realized error, its refit tried this hour): that forecast, of requests, was not planned on, and no refit was due
    before 07:00, so chat fell back to the conservative reservation for the rest of the hour where a controller
    started after the new object planned on tokens' forecast. What is kept of a policy is of one object: another
    under its name starts afresh. The uids are the embedded cluster's own, as the API server gives them: it gave none,
    so there the object created again was the deleted one to the controller, and fell back so still."""
    demand = TokensDemand(FileDemand({"inference/chat": demand_file}))
    again = policy("chat", query="tokens", capacity={"demandPerGpu": 40.0, "gpusPerReplica": 2})
    r = Replay(tmp_path / "kept", demand_file, policy("chat", query="requests"), demand=demand, gpus=1000)
    fresh = Replay(tmp_path / "fresh", demand_file, policy("chat", query="requests"), demand=demand, gpus=1000)
    for k in range(6):
        now = MONDAY_6AM + pd.Timedelta(minutes=5 * k)
        if k == 1:
            for replay in (r, fresh):  # kubectl delete, kubectl apply
                replay.cluster.policies = []
                replay.cluster.statuses.pop(("inference", "chat"))
                replay.cluster.apply_policy(again)
            fresh.reconciler = Reconciler(fresh.cluster, demand, fresh.cfg, forecast_log=ForecastLog(tmp_path / "f"))
        kept, started = r.step(now).policies["inference/chat"], fresh.step(now).policies["inference/chat"]
        assert (kept.model, kept.reserved_gpus, dict(kept.realized_error)) == \
            (started.model, started.reserved_gpus, dict(started.realized_error)), now


def test_the_embedded_cluster_gives_each_policy_created_a_uid_of_its_own_kept_by_its_edits():
    """As the API server: a uid on create, whatever the object was sent with, and the same uid after each edit."""
    cluster = EmbeddedCluster(128, [policy("chat"), policy("search")], {}, MONDAY_6AM.timestamp())

    def uids() -> dict[str, str]:
        return {p["metadata"]["name"]: p["metadata"]["uid"] for p in cluster.reservation_policies()}

    created = uids()
    assert len(set(created.values())) == 2 and all(created.values())
    cluster.apply_policy({**policy("chat", minGpus=4), "metadata": {**policy("chat")["metadata"], "uid": "mine"}})
    assert uids() == created
    cluster.policies = [p for p in cluster.policies if p["metadata"]["name"] != "chat"]  # kubectl delete
    cluster.apply_policy(policy("chat"))
    assert uids()["chat"] not in created.values() and uids()["search"] == created["search"]


def test_after_a_query_edit_realized_error_scores_only_forecasts_of_the_new_query(demand_file, tmp_path):
    """chat's query edited from requests to tokens (4 per request) at 05:00: realized error scored the forecasts of
    requests issued before the edit against the tokens that came (1-h error 7.6 at 06:00, 3.9 at 09:00, 6-h 20.1, where
    a controller on tokens throughout shows 0.18 and 0.67): a false ForecastDrift, and a retraining, with tracking on.
    A stored forecast says what it is a forecast of (its basis): only those of what the policy now asks are scored."""
    demand = TokensDemand(FileDemand({"inference/chat": demand_file}))
    edited = policy("chat", query="tokens", capacity={"demandPerGpu": 40.0, "gpusPerReplica": 2})
    start = MONDAY_6AM - pd.Timedelta(hours=3)
    r = Replay(tmp_path, demand_file, policy("chat", query="requests"), demand=demand, gpus=1000, start=start)
    for hours in range(3):
        r.step(start + pd.Timedelta(hours=hours))
    assert r.reconciler.forecasts.forecast_log.load("inference.chat")  # forecasts of requests, stored
    r.cluster.apply_policy(edited)
    for hours in range(4):
        errors = r.step(MONDAY_6AM + pd.Timedelta(hours=hours)).policies["inference/chat"].realized_error
        assert all(error < 1.0 for error in errors.values()), (hours, errors)  # tokens' forecasts, well within scale


def test_a_mostly_missing_last_hour_is_degraded_data(demand_file, tmp_path):
    holes = DEMAND.copy()
    now = AT_9
    last_hour = (holes.index > now - pd.Timedelta(hours=1)) & (holes.index <= now)
    holes[last_hour & (holes.index.minute % 20 != 0)] = float("nan")  # fresh, but 3 samples in 12
    path = tmp_path / "holes.csv"
    write_csv(holes, path)
    r = Replay(tmp_path, path, start=now - pd.Timedelta(hours=1))
    r.step(now - pd.Timedelta(hours=1))
    before = r.replicas()
    ps = r.step(now).policies["inference/chat"]
    _, conditions = r.status()
    assert ps.degraded and conditions["ForecastDegraded"]["reason"] == "PartialData"
    assert r.replicas() >= before  # degraded data never lowers the reservation


def test_an_unexpected_error_is_counted_and_the_next_reconcile_runs(demand_file, tmp_path):
    r = Replay(tmp_path, demand_file)
    r.cluster.policies.append({"metadata": None, "spec": None})  # a malformed object the API would never return
    state = r.reconciler.reconcile(MONDAY_6AM)
    assert state.reconcile_errors_total["internal"] == 1 and state.reconcile_total == 1
    r.cluster.policies.pop()
    state = r.reconciler.reconcile(MONDAY_6AM + pd.Timedelta(minutes=5))
    assert state.policies["inference/chat"].valid and state.reconcile_total == 2


# ----------------------------------------------------------------------------------------------- a day
def reconciled_day(tmp_path, states: list | None = None) -> Replay:
    """A day of reconciles on the embedded cluster, training saturating whatever is lent to two teams, ending in a
    burst above the forecast: real planned and emergency preemptions, realized error at every horizon, team usage,
    an invalid policy. Each published state is appended to `states`. (The metrics and dashboards tests read it.)"""
    burst_at = MONDAY_6AM - pd.Timedelta(hours=3)  # 3 am: far above what the night's forecast reserved
    demand = DEMAND.copy()
    demand[burst_at] = 3 * demand[burst_at]
    path = tmp_path / "burst.csv"
    write_csv(demand, path)
    start = MONDAY_6AM - pd.Timedelta(hours=27)
    broken = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": "broken", "namespace": "inference"},
              "spec": {"query": "q"}}
    r = Replay(tmp_path, {"inference/chat": path}, policy(trainingClusterQueues=["research", "product"]), broken,
               start=start, world=WorldSettings(preemption_seconds=(60.0, 120.0)),
               run={"team_weights": {"research": 2.0, "product": 1.0}})
    for minutes in range(0, 24 * 60 + 1, 20):  # off the 30 min checkpoints: an emergency loses work
        state = r.step(start + pd.Timedelta(minutes=minutes))
        if states is not None:
            states.append(state)
    return r


def test_a_team_weight_for_a_queue_no_policy_lends_to_is_said_once(tmp_path, caplog):
    """run.team_weights with a typo ('reserch') left the teams equal without a word: the key is named once."""
    path = tmp_path / "demand.csv"
    write_csv(DEMAND, path)
    r = Replay(tmp_path, path, policy(trainingClusterQueues=["research", "product"]),
               run={"team_weights": {"research": 2.0, "reserch": 1.0}})
    with caplog.at_level("WARNING", logger="controller.reconcile"):
        for minutes in (0, 5):
            r.step(MONDAY_6AM + pd.Timedelta(minutes=minutes))
    said = [m for m in caplog.messages if "run.team_weights" in m]
    assert len(said) == 1 and "run.team_weights.reserch" in said[0] and "product, research" in said[0], said


def reconciled_state(tmp_path):
    """The state the last reconcile of `reconciled_day` published."""
    return reconciled_day(tmp_path).reconciler.holder.get()


def test_a_day_ends_in_a_burst_above_the_forecast_that_preempts_as_an_emergency(tmp_path):
    r = reconciled_day(tmp_path)
    state = r.reconciler.holder.get()
    assert state.preemptions_total.get("planned", 0) > 0 and state.preemptions_total.get("emergency", 0) > 0
    # work lost is what each preemption's event said, GPU-weighted (victims at a checkpoint lose nothing)
    lost = 0.0
    for e in r.events("Preempted"):
        words = e["message"].split()
        lost += int(words[3]) * float(words[words.index("s") - 1].strip("("))
    assert sum(state.lost_gpu_seconds_total.values()) == pytest.approx(lost, abs=0.5 * 8 * len(r.events("Preempted")))
    assert not state.policies["inference/broken"].valid
    assert sum(t.preempted_total for t in state.teams.values()) == sum(state.preemptions_total.values())
    assert state.teams["research"].quota_gpus + state.teams["product"].quota_gpus == state.slack_gpus
    assert state.teams["research"].quota_gpus == pytest.approx(2 * state.teams["product"].quota_gpus, abs=1)
    chat = state.policies["inference/chat"]
    assert set(chat.realized_error) == {1, 6, 24} and all(v > 0 for v in chat.realized_error.values())
    assert state.reconcile_total == 73 and state.teams["research"].gpu_seconds_total > 0


def test_forecasts_are_logged_when_issued_and_scored_as_actuals_arrive(demand_file, tmp_path):
    start = MONDAY_6AM - pd.Timedelta(days=1)
    r = Replay(tmp_path, demand_file, start=start)
    for hour in range(8):
        state = r.step(start + pd.Timedelta(hours=hour))
    # a draft a killed write left beside them (core.files.replace_whole's name for it) is not a forecast
    (tmp_path / "log" / "inference.chat" / f".{int(start.timestamp())}.csv.1a2b3c4d.part.csv").write_text("time")
    issued = ForecastLog(tmp_path / "log").load("inference.chat")
    assert len(issued) == 8 and min(issued) == start  # one forecast per hour, stamped with its issue time
    assert ForecastLog(tmp_path / "log").prune("inference.chat", before=start + pd.Timedelta(hours=3)) == 3
    assert min(ForecastLog(tmp_path / "log").load("inference.chat")) == start + pd.Timedelta(hours=3)
    ps = state.policies["inference/chat"]
    assert set(ps.realized_error) == {1, 6}  # 24 h ahead has no actual yet after 8 hours
    assert 0 < ps.realized_error[1] < 3 and 0 <= ps.realized_coverage_80[1] <= 1
    assert r.status()[0]["realizedError"]["1h"] == pytest.approx(ps.realized_error[1])


class CountingDemand(DemandReader):
    """The file source, recording each window asked for."""

    def __init__(self, inner):
        self.inner, self.windows = inner, []

    def read(self, key, query, start, end):
        self.windows.append((start, end))
        return self.inner.read(key, query, start, end)


def test_the_lookback_is_read_once_an_hour_and_only_new_samples_in_between(demand_file, tmp_path):
    demand = CountingDemand(FileDemand({"inference/chat": demand_file}))
    r = Replay(tmp_path, demand_file, demand=demand)
    for minutes in range(0, 56, 5):  # 06:00 .. 06:55
        r.step(MONDAY_6AM + pd.Timedelta(minutes=minutes))
    held = r.reconciler._raw["inference/chat"].copy()  # what the 06:55 reconcile saw, pieced together
    r.step(MONDAY_6AM + pd.Timedelta(hours=1))
    spans = [end - start for start, end in demand.windows]
    assert spans[0] == spans[-1] == pd.Timedelta(days=28)  # 06:00 and 07:00: the whole lookback
    assert all(span <= pd.Timedelta(minutes=20) for span in spans[1:-1])  # in between: the last minutes
    # ...and it is exactly what one full read at 06:55 returns.
    (chat,), _ = parse_policies(identified(r.cluster.reservation_policies()))
    end = MONDAY_6AM + pd.Timedelta(minutes=55)
    full = FileDemand({"inference/chat": demand_file}).read(chat.key, chat.spec.query, end - pd.Timedelta(days=28), end)
    pd.testing.assert_series_equal(held, full.astype(float), check_names=False, check_freq=False)


class KeyNotingDemand(CountingDemand):
    """The file source, noting each window asked for and the policy it was asked for."""

    def read(self, key, query, start, end):
        self.windows.append((key, start, end))
        return self.inner.read(key, query, start, end)


def _held_for(r: Replay, key: str) -> list[str]:
    """The maps of the Reconciler and of its forecasts that hold something of the policy `key` (by its key, or by its
    series)."""
    keeper = r.reconciler.forecasts
    maps = {name: getattr(r.reconciler, name) for name in ("_raw", "_converted", "_full_read", "_queried", "_missing")}
    maps |= {f"forecasts.{name}": getattr(keeper, name) for name in (
        "_forecasts", "_taken", "_tried", "_accuracy", "_last_trained", "_retrained_at", "_refits")}
    series = key.replace("/", ".")
    return [name for name, held in maps.items() if key in held or series in held]


@pytest.mark.parametrize("beside", [False, True], ids=["refit in the reconcile", "refit beside"])
def test_a_policy_deleted_is_forgotten_with_its_samples_and_forecast(demand_file, tmp_path, beside):
    """The controller kept each policy's samples (weeks of them at 5 minutes), their arrays, its forecast, its
    realized error and, with the refit beside, its refit queued, after the policy was deleted: a controller running
    for months held every policy that ever came and went, and refitted the deleted ones. They are forgotten with the
    policy (a refit not started is never run), so one created again under its name reads its history whole."""
    key = "inference/search"
    demand = KeyNotingDemand(FileDemand({"inference/chat": demand_file, key: demand_file}))
    start = MONDAY_6AM - pd.Timedelta(minutes=5)
    r = Replay(tmp_path, demand_file, policy("chat"), policy("search"), demand=demand, refit_beside=beside,
               start=start)
    keeper = r.reconciler.forecasts
    try:
        if beside:
            _until_taken_up(r, start)
        else:
            r.step(start)
        with keeper._fitter_lock:  # with the refit beside: chat's 06:00 refit waits at its fit, search's behind it
            r.step(MONDAY_6AM)
            held = set(_held_for(r, key))
            assert held >= {"_raw", "_converted", "_full_read", "_queried", "forecasts._forecasts",
                            "forecasts._accuracy"} | ({"forecasts._tried", "forecasts._refits"} if beside else set())
            r.cluster.policies = [p for p in r.cluster.policies if p["metadata"]["name"] != "search"]  # kubectl delete
            r.cluster.statuses.pop(("inference", "search"))
            r.step(MONDAY_6AM + pd.Timedelta(minutes=5))
            assert _held_for(r, key) == []
            assert keeper.refitting() == (1 if beside else 0)  # chat's alone
        for job in list(keeper._refits.values()):
            job.result(timeout=120)
        r.cluster.apply_policy(policy("search"))
        demand.windows.clear()
        now = MONDAY_6AM + pd.Timedelta(minutes=10)
        r.step(now)
    finally:
        r.reconciler.close()
    lookback = pd.Timedelta(seconds=r.reconciler.data.lookback_seconds)
    assert [(start, end) for asked, start, end in demand.windows if asked == key][:1] == [(now - lookback, now)]


@pytest.mark.parametrize("users_file", [False, True], ids=["alone", "a user's file beside"])
def test_a_policy_deleted_loses_its_stored_forecasts_but_not_to_a_list_that_failed(demand_file, tmp_path,
                                                                                     monkeypatch, users_file):
    """The forecasts stored for a policy deleted (the forecast log's files, or on Kubernetes its ConfigMap's data)
    and the champion kept for its series stayed for good: a controller of policies that come and go kept every one
    that ever was. They go once the policies are listed without it; not while the list fails (the policy may well be
    there), and nothing but the forecasts the store wrote (a user's file beside them stays)."""
    r = Replay(tmp_path, {"inference/chat": demand_file, "inference/search": demand_file}, policy("chat"),
               policy("search"))
    r.step(MONDAY_6AM)
    assert r.log.load("inference.search") and r.log.load("inference.chat")
    folder = tmp_path / "log" / "inference.search"
    if users_file:
        (folder / "notes.txt").write_text("a user's file")
    r.reconciler.forecasts.models._champions["inference.search"] = "search's champion"

    def failing(namespace=None):
        raise ClusterError("the API server did not answer")

    with monkeypatch.context() as failed:
        failed.setattr(r.cluster, "reservation_policies", failing)
        r.step(MONDAY_6AM + pd.Timedelta(minutes=5))
    assert r.log.load("inference.search") and "inference.search" in r.reconciler.forecasts.models._champions
    r.cluster.policies = [p for p in r.cluster.policies if p["metadata"]["name"] != "search"]  # kubectl delete
    r.cluster.statuses.pop(("inference", "search"))
    r.step(MONDAY_6AM + pd.Timedelta(minutes=10))
    assert r.log.load("inference.search") == {} and "inference.search" not in r.reconciler.forecasts.models._champions
    assert sorted(p.name for p in folder.iterdir()) == ["notes.txt"] if users_file else not folder.exists()
    assert r.log.load("inference.chat")


@pytest.mark.parametrize("failure", ["the store failed", "the Lease lapsed"])
def test_a_deleted_policy_s_prune_that_failed_is_tried_again_at_the_next_reconcile(demand_file, tmp_path, monkeypatch,
                                                                                   failure):
    """search and rag deleted; the prune of their stored forecasts failed (search's alone: the store refused it; or
    both: this replica's Lease lapsed in that reconcile, so it wrote nothing). A prune was tried once, as the policy
    was seen gone, so their forecasts stayed for good. It is tried again at the next reconcile whose list succeeds,
    each policy's on its own: rag's is done where search's fails, and nothing is pruned on a list that failed."""
    names = ("chat", "search", "rag")
    r = Replay(tmp_path, {f"inference/{n}": demand_file for n in names}, *(policy(n) for n in names))
    r.step(MONDAY_6AM)
    assert all(r.log.load(f"inference.{n}") for n in names)
    for name in ("search", "rag"):  # kubectl delete
        r.cluster.policies = [p for p in r.cluster.policies if p["metadata"]["name"] != name]
        r.cluster.statuses.pop(("inference", name))
    prune = r.log.prune

    def refused(series, before):
        if series == "inference.search":
            raise OSError(f"{series}: Read-only file system")
        return prune(series, before)

    with monkeypatch.context() as failed:
        if failure == "the store failed":
            failed.setattr(r.log, "prune", refused)
        else:
            failed.setattr(r.reconciler, "leading", lambda: None)
        r.step(MONDAY_6AM + pd.Timedelta(minutes=5))
    assert r.log.load("inference.search")
    assert bool(r.log.load("inference.rag")) == (failure == "the Lease lapsed")

    def failing(namespace=None):
        raise ClusterError("the API server did not answer")

    with monkeypatch.context() as failed:
        failed.setattr(r.cluster, "reservation_policies", failing)
        r.step(MONDAY_6AM + pd.Timedelta(minutes=10))
    assert r.log.load("inference.search")
    r.step(MONDAY_6AM + pd.Timedelta(minutes=15))
    assert r.log.load("inference.search") == {} and r.log.load("inference.rag") == {}
    assert r.log.load("inference.chat")


def test_a_deleted_policy_s_slow_prune_leaves_none_of_the_plan_s_writes_undone(demand_file, tmp_path, monkeypatch):
    """search deleted, and the research quota set by hand to 0: the plan sets it back. Its forecasts' prune, against
    a store that takes past the reconcile's deadline (the clock jumps as it prunes), ran before the plan and spent the
    deadline its writes needed: the quota stayed 0, left undone. The prune now comes after the plan's writes."""
    r = Replay(tmp_path, {f"inference/{n}": demand_file for n in ("chat", "search")}, policy("chat"), policy("search"))
    r.step(MONDAY_6AM)
    assert r.cluster.quotas["research"] > 0 and r.log.load("inference.search")
    r.cluster.policies = [p for p in r.cluster.policies if p["metadata"]["name"] != "search"]  # kubectl delete
    r.cluster.statuses.pop(("inference", "search"))
    r.cluster.quotas["research"] = 0
    skipped = [0.0]  # seconds the clock jumped
    monotonic, prune = time.monotonic, r.log.prune
    monkeypatch.setattr(time, "monotonic", lambda: monotonic() + skipped[0])

    def slow(series, before):
        skipped[0] += 1000  # the store answers 1000 s later, past the deadline
        return prune(series, before)

    monkeypatch.setattr(r.log, "prune", slow)
    r.cluster.advance((MONDAY_6AM + pd.Timedelta(minutes=5)).timestamp())
    state = r.reconciler.reconcile(MONDAY_6AM + pd.Timedelta(minutes=5), deadline=time.monotonic() + 100)
    assert r.cluster.quotas["research"] == state.slack_gpus > 0  # lent again: chat's GPUs and search's too
    assert "reconcile deadline" not in state.reconcile_errors_total
    assert r.log.load("inference.search") == {} and r.log.load("inference.chat")


@pytest.mark.parametrize("status", [0, 403], ids=["the store did not answer", "its Role forbids listing"])
def test_forecasts_stored_for_policies_deleted_while_no_controller_ran_go_as_a_leader_starts(demand_file, tmp_path,
                                                                                             status):
    """inference/gone was deleted while no controller ran (or while a replica that died before pruning led): no
    reconcile ever listed the policies without it, so its stored forecasts stayed for good. Where the store can list
    its series (on Kubernetes: its ConfigMaps), they go at start-up and on each lead taken, once the policies are
    listed. A store that cannot list is asked again at the next reconcile; one that refuses it (a Role without list),
    at the next lead. A series outside run.namespace is another controller's (its Lease beside this one's): it stays."""
    r = Replay(tmp_path, demand_file, policy("chat"), run={"namespace": "inference"})
    r.step(MONDAY_6AM)
    (issued, frame), = r.log.load("inference.chat").items()
    listing = []

    def stored_series():
        listing.append(True)
        if len(listing) == 1:
            raise ClusterError("GET configmaps: the first listing fails", status=status)
        return [folder.name for folder in r.log.root.iterdir()]

    r.restart(stored_series=stored_series)
    for series in ("inference.gone", "elsewhere.gone"):
        r.log.record(series, issued, frame)
    r.step(MONDAY_6AM + pd.Timedelta(minutes=5))
    assert r.log.load("inference.gone")
    r.step(MONDAY_6AM + pd.Timedelta(minutes=10))
    assert bool(r.log.load("inference.gone")) == (status == 403)
    r.log.record("inference.gone", issued, frame)  # stored by the replica that led meanwhile
    r.step(MONDAY_6AM + pd.Timedelta(minutes=15))
    assert r.log.load("inference.gone") and len(listing) == (1 if status == 403 else 2)  # once per lead
    r.reconciler.took_lead()
    r.step(MONDAY_6AM + pd.Timedelta(minutes=20))
    assert r.log.load("inference.gone") == {} and r.log.load("elsewhere.gone") and r.log.load("inference.chat")


class ThreadNotingLog(ForecastLog):
    """The forecast log, noting which thread touched it."""

    def __init__(self, root):
        super().__init__(root)
        self.threads: list[str] = []

    def record(self, series, issued_at, frame):
        self.threads.append(threading.current_thread().name)
        return super().record(series, issued_at, frame)

    def load(self, series, since=None):
        self.threads.append(threading.current_thread().name)
        return super().load(series, since)


class ThreadNotingDemand(CountingDemand):
    """The file source, noting each window asked for and the thread that asked."""

    def read(self, key, query, start, end):
        self.windows.append((threading.current_thread().name, start, end))
        return self.inner.read(key, query, start, end)


def _until_taken_up(r: Replay, now: pd.Timestamp):
    """Reconciles a minute apart until the hour's work beside them is in force; the last state. Each waits for the
    work under way to finish, so the clock's minutes do not depend on how busy the machine is (a refit slower than
    ten reconciles crossed into the next hour and queued another)."""
    state = r.step(now)
    for _ in range(600):
        if not r.reconciler.forecasts.refitting() and not state.policies["inference/chat"].fallback:
            return state
        for job in list(r.reconciler.forecasts._refits.values()):
            job.result(timeout=120)
        now += pd.Timedelta(minutes=1)
        state = r.step(now)
    raise AssertionError("the hourly work never came in")


def test_a_file_of_another_name_beside_the_stored_forecasts_is_left_alone(demand_file, tmp_path):
    """The forecast log took every file of a series' folder whose name begins with a digit for a forecast named by its
    issue time: a user's 2024-notes.csv there failed every reconcile (ValueError: invalid literal for int() with base
    10: '2024-notes', an internal error) and the deletion of its policy. It is no forecast: read, pruned and kept
    as any other file beside them."""
    r = Replay(tmp_path, demand_file)
    r.step(MONDAY_6AM)
    notes = tmp_path / "log" / "inference.chat" / "2024-notes.csv"
    notes.write_text("a user's notes\n")
    state = r.step(MONDAY_6AM + pd.Timedelta(hours=1))
    assert "internal" not in state.reconcile_errors_total and state.policies["inference/chat"].realized_error
    r.cluster.policies = []  # kubectl delete
    r.cluster.statuses.pop(("inference", "chat"))
    state = r.step(MONDAY_6AM + pd.Timedelta(hours=1, minutes=5))
    assert "internal" not in state.reconcile_errors_total and r.log.load("inference.chat") == {}
    assert notes.read_text() == "a user's notes\n"


def test_a_policy_deleted_loses_its_series_folder_of_the_forecast_log_already_empty(demand_file, tmp_path):
    """search's folder of the forecast log holds nothing (a record that failed after making it, or a prune killed
    before removing it) as search is deleted. The log removed a series' folder only where that prune removed a file
    in it, so the empty folder stayed for good. It goes too."""
    r = Replay(tmp_path, {f"inference/{n}": demand_file for n in ("chat", "search")}, policy("chat"), policy("search"))
    r.step(MONDAY_6AM)
    folder = tmp_path / "log" / "inference.search"
    for path in folder.iterdir():
        path.unlink()
    r.cluster.policies = [p for p in r.cluster.policies if p["metadata"]["name"] != "search"]  # kubectl delete
    r.cluster.statuses.pop(("inference", "search"))
    r.step(MONDAY_6AM + pd.Timedelta(minutes=5))
    assert not folder.exists() and r.log.load("inference.chat")


@contextlib.contextmanager
def _deleted_while_its_refit_runs(r, start):
    """chat deleted (its status too) at 06:05 while its 06:00 refit runs beside, held at its fit until the block
    ends; yields that refit."""
    keeper = r.reconciler.forecasts
    _until_taken_up(r, start)
    with keeper._fitter_lock:  # chat's 06:00 refit waits at its fit
        r.step(MONDAY_6AM)
        refit = keeper._refits["inference/chat"]
        for _ in range(1200):
            if refit.running():
                break
            time.sleep(0.1)
        assert refit.running()
        r.cluster.policies = []  # kubectl delete
        r.cluster.statuses.pop(("inference", "chat"))
        r.step(MONDAY_6AM + pd.Timedelta(minutes=5))
        yield refit


def test_a_policy_deleted_while_its_refit_runs_beside_loses_the_forecast_that_refit_stores(demand_file, tmp_path):
    """With the refit beside, a refit under way when its policy is deleted is not stopped, and it stores its forecast
    as it ends: after the store was pruned of the policy's forecasts, so that one stayed for good. The store is pruned
    once that refit is done."""
    start = MONDAY_6AM - pd.Timedelta(minutes=5)
    r = Replay(tmp_path, demand_file, policy("chat"), refit_beside=True, start=start)
    try:
        with _deleted_while_its_refit_runs(r, start) as refit:
            pass  # the refit is let go
        refit.result(timeout=120)
        assert MONDAY_6AM in r.log.load("inference.chat")  # stored as it ended
        r.step(MONDAY_6AM + pd.Timedelta(minutes=10))
        assert r.log.load("inference.chat") == {}
    finally:
        r.reconciler.close()


def test_a_policy_deleted_while_its_refit_runs_and_created_again_loses_the_old_object_s_forecasts(demand_file,
                                                                                                 tmp_path):
    """chat deleted while its 06:00 refit runs beside (its prune waits for that refit), then created again (a new
    object, its own uid) before the refit is done: the prune was dropped as for a policy listed again, so the old
    object's 06:00 forecast stayed in the store, the new object's to plan on. It goes; the new object's own stay."""
    start = MONDAY_6AM - pd.Timedelta(minutes=5)
    r = Replay(tmp_path, demand_file, policy("chat"), refit_beside=True, start=start)
    try:
        with _deleted_while_its_refit_runs(r, start) as refit:
            r.cluster.apply_policy(policy("chat"))  # kubectl apply: created again
            r.step(MONDAY_6AM + pd.Timedelta(minutes=10))
        refit.result(timeout=120)
        again = _until_taken_up(r, MONDAY_6AM + pd.Timedelta(minutes=15)).policies["inference/chat"]
    finally:
        r.reconciler.close()
    stored = r.log.load("inference.chat")
    assert min(stored) >= MONDAY_6AM + pd.Timedelta(minutes=10) and again.now - pd.Timedelta(
        seconds=again.forecast_age_seconds) in stored, sorted(stored)
    assert {frame.attrs["uid"] for frame in stored.values()} == {r.cluster.policies[0]["metadata"]["uid"]}


def test_a_replica_started_after_a_policy_was_created_again_plans_on_none_of_the_old_object_s_forecasts(
        demand_file, tmp_path):
    """chat deleted and created again while no controller ran (a new object, its own uid): the replica started after
    planned it on the forecast the store held for its name, the old object's, as if it were the same policy, and
    scored its realized error on it. A policy of a new name has none: it falls back until its own refit lands."""
    before = _stored_by_a_first_replica(demand_file, tmp_path)
    assert not before.fallback
    b = Replay(tmp_path, demand_file, refit_beside=True, start=before.now)  # a new process, on the store a wrote
    b.cluster.policies = []  # kubectl delete, kubectl apply
    b.cluster.apply_policy(policy("chat"))
    try:
        first = b.step(before.now).policies["inference/chat"]
        assert b.reconciler.forecasts.refitting() == 1  # its own refit still to come
    finally:
        b.reconciler.close()
    assert first.fallback and first.model == "fallback" and first.realized_error == {}


@pytest.mark.parametrize("refit_beside", [True, False])
def test_a_replica_started_after_a_policy_was_created_again_prunes_the_old_object_s_forecasts(demand_file, tmp_path,
                                                                                             refit_beside):
    """chat deleted and created again while no controller ran (a new object, its own uid): the replica started after
    never saw the old object go, so it pruned nothing for it, and the old object's forecasts, neither planned on nor
    scored, stayed in the store until they aged out. They go at the new object's first prune; its own stay."""
    before = _stored_by_a_first_replica(demand_file, tmp_path)
    old = set(ForecastLog(tmp_path / "log").load("inference.chat"))
    b = Replay(tmp_path, demand_file, refit_beside=refit_beside, start=before.now)  # a new process, on a's store
    b.cluster.policies = []  # kubectl delete, kubectl apply
    b.cluster.apply_policy(policy("chat"))
    try:
        _until_taken_up(b, before.now)
    finally:
        b.reconciler.close()
    stored = b.log.load("inference.chat")
    assert old and not old & set(stored), (sorted(old), sorted(stored))
    assert stored and {frame.attrs["uid"] for frame in stored.values()} == {b.cluster.policies[0]["metadata"]["uid"]}


def test_a_policy_created_again_under_its_name_is_served_its_series_champion(demand_file, tmp_path):
    """chat deleted and created again (a new object, its own uid) is a new policy to the forecast store (the old
    object's forecasts, its reads, are not the new one's), not to MLflow: the series' champion is the kind of model
    its trainings chose on the series' history, registered by name (a `headroom train` CronJob knows no object), and
    nothing fitted. The new object is served it from its first fit, on its own reads, as a spec edited in place is
    (docs/deploy.md)."""
    from adapters.mlflow import Tracker
    from controller.forecasts import Models
    from forecast.history import prepare
    from tests.test_training import client
    from training.pipeline import TrainSettings, train_series

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    hourly = prepare(DEMAND[DEMAND.index < MONDAY_6AM], statistic="max")[0]
    train_series("inference.chat", hourly, TrainSettings(folds=2, candidates=("snaive24",), statistic="max",
                                                         quantiles=(0.1, 0.5, 0.9, 0.99)), Tracker(uri))
    r = Replay(tmp_path, demand_file, run={"retrain_every_seconds": 0}, models=Models(uri))
    old = r.step(MONDAY_6AM).policies["inference/chat"]
    uid = r.cluster.policies[0]["metadata"]["uid"]
    r.cluster.policies = []  # kubectl delete, kubectl apply
    r.cluster.apply_policy(policy("chat"))
    again = r.step(MONDAY_6AM + pd.Timedelta(minutes=5)).policies["inference/chat"]
    assert r.cluster.policies[0]["metadata"]["uid"] != uid
    assert old.model == again.model == "champion v1" and again.forecast_age_seconds == 0, (again.model,
                                                                                          again.forecast_age_seconds)
    client(uri).delete_registered_model_alias("headroom-inference.chat", "champion")  # the way out docs/deploy.md says
    r.cluster.policies = []
    r.cluster.apply_policy(policy("chat"))
    assert r.step(MONDAY_6AM + pd.Timedelta(minutes=10)).policies["inference/chat"].model.startswith("auto")


def _stored_by_a_first_replica(demand_file, tmp_path):
    """A replica with the refit beside runs until its hour's forecast is in force (and in the store), then stops: its
    last state of inference/chat."""
    start = MONDAY_6AM + pd.Timedelta(hours=2, minutes=50)
    a = Replay(tmp_path, demand_file, refit_beside=True, start=start)
    try:
        return _until_taken_up(a, start).policies["inference/chat"]
    finally:
        a.reconciler.close()


def test_a_fit_moves_the_reconcile_s_deadline_once_and_never_past_one_set_around_it(demand_file, tmp_path,
                                                                                   monkeypatch):
    """A fit waits on no server, so its time moves the reconcile's deadline later. That deadline was kept twice, the
    reconciler's (its fence) and a copy in the context the adapters read, and the fit moved each: the copy was moved
    past a deadline set around the reconcile too, which `within` says holds. There is one now, the reconciler's,
    which the adapters read where it is kept: moved by the fit, and bounded by any set around it."""
    import controller.forecasting as forecasting
    from core.deadline import current, within

    fitted, fitting = forecasting.fit, 0.5

    def slow(*args, **kwargs):
        time.sleep(fitting)
        return fitted(*args, **kwargs)
    monkeypatch.setattr(forecasting, "fit", slow)
    r = Replay(tmp_path, demand_file)
    seen: list[float | None] = []  # the deadline the cluster's reads after the fit are bounded by
    quotas = r.cluster.cluster_queue_quotas
    monkeypatch.setattr(r.cluster, "cluster_queue_quotas", lambda: seen.append(current()) or quotas())
    began = time.monotonic()
    r.reconciler.reconcile(AT_9, deadline=began + 100)
    assert seen[-1] is not None and seen[-1] >= began + 100 + fitting  # the fit's time is off the deadline's clock
    seen.clear()
    with within(began + 200):
        r.reconciler.reconcile(AT_9 + pd.Timedelta(hours=1), deadline=began + 199.9)  # a new hour: refitted
    assert seen[-1] == began + 200


def test_the_hourly_fits_run_in_a_process_of_their_own_and_one_that_dies_costs_one_fit(demand_file, tmp_path):
    """The hourly work fits in a process of its own (a thousand fits would share the reconciles' interpreter); the
    forecast is the one fitted in place. A fitting process that dies costs that hour's fit of the policy it was
    fitting (an internal error; the forecast in force serves on), and the next hour's fit runs in a new one."""
    r = Replay(tmp_path, demand_file, refit_beside=True, start=MONDAY_6AM - pd.Timedelta(hours=1))
    state = _until_taken_up(r, MONDAY_6AM - pd.Timedelta(hours=1))
    (first,) = r.reconciler.forecasts._fitter._processes  # the executor's worker pids
    assert first != os.getpid()
    in_place = Replay(tmp_path / "in-place", demand_file, start=MONDAY_6AM - pd.Timedelta(hours=1))
    alone = in_place.step(state.policies["inference/chat"].now)
    pd.testing.assert_frame_equal(r.reconciler.forecasts._forecasts["inference/chat"].frame,
                                  in_place.reconciler.forecasts._forecasts["inference/chat"].frame)
    assert alone.policies["inference/chat"].reserved_gpus == state.policies["inference/chat"].reserved_gpus
    os.kill(first, signal.SIGKILL)
    r.step(MONDAY_6AM)  # the hour's work starts beside: its fit finds the process dead
    for _ in range(100):
        if not r.reconciler.forecasts.refitting():
            break
        time.sleep(0.1)
    state = r.step(MONDAY_6AM + pd.Timedelta(minutes=1))
    assert state.reconcile_errors_total.get("internal") == 1
    assert state.policies["inference/chat"].forecast_age_seconds == 3600 + 60  # 05:00's serves on
    state = _until_taken_up(r, MONDAY_6AM + pd.Timedelta(hours=1))
    (second,) = r.reconciler.forecasts._fitter._processes
    assert second != first and state.policies["inference/chat"].forecast_age_seconds < 3600
    r.reconciler.close()
    assert r.reconciler.forecasts._fitter is None


def test_the_hourly_work_runs_beside_the_reconciles(demand_file, tmp_path):
    """With the refit beside (`headroom run` on Kubernetes: many series), the hour's first reconcile reads no whole
    lookback and touches no forecast log: the re-read, the refit and realized error run in the background, the
    forecast in force serves meanwhile, and a later reconcile takes the new forecast and the realized error up."""
    demand = ThreadNotingDemand(FileDemand({"inference/chat": demand_file}))
    r = Replay(tmp_path, demand_file, demand=demand, refit_beside=True, start=MONDAY_6AM - pd.Timedelta(hours=2))
    r.reconciler.forecasts.forecast_log = log = ThreadNotingLog(tmp_path / "noted")
    lookback = pd.Timedelta(seconds=r.reconciler.data.lookback_seconds)

    def until_taken_up(now):
        return _until_taken_up(r, now)

    until_taken_up(MONDAY_6AM - pd.Timedelta(hours=2))  # start-up: the first forecast, fitted in the background
    until_taken_up(MONDAY_6AM - pd.Timedelta(hours=1))
    demand.windows.clear()
    log.threads.clear()
    top = r.step(MONDAY_6AM)  # the hour's first reconcile: the hour's work starts beside it
    assert [end - start for thread, start, end in demand.windows if thread == "MainThread"] == [
        pd.Timedelta(minutes=75)]  # only the samples since 05:00 (and the overlap)
    assert top.policies["inference/chat"].forecast_age_seconds == 3600  # the forecast in force serves on
    state = until_taken_up(MONDAY_6AM + pd.Timedelta(minutes=1))
    ps = state.policies["inference/chat"]
    assert ps.forecast_age_seconds == (ps.now - MONDAY_6AM).total_seconds()  # the hour's forecast, made at 06:00
    assert [(thread[:14], end - start) for thread, start, end in demand.windows if end - start == lookback] == [
        ("headroom-refit", lookback)]  # the whole lookback, re-read beside, once
    assert log.threads and all(t.startswith("headroom-refit") for t in log.threads)
    assert set(ps.realized_error) == {1} and ps.realized_error[1] > 0  # 04:00's and 05:00's forecasts, scored
    assert r.status()[0]["realizedError"]["1h"] == pytest.approx(ps.realized_error[1])
    # the samples read since the re-read are kept: the series is the whole lookback, as one read now returns
    (chat,), _ = parse_policies(identified(r.cluster.reservation_policies()))
    full = FileDemand({"inference/chat": demand_file}).read(chat.key, chat.spec.query, ps.now - lookback, ps.now)
    pd.testing.assert_series_equal(r.reconciler._raw["inference/chat"], full.astype(float), check_names=False,
                                   check_freq=False)


def test_a_restarted_replica_plans_on_the_stored_forecast_until_its_own_refit_lands(demand_file, tmp_path):
    """With the refit beside (`headroom run` on Kubernetes), a replica that had just started, or just taken the Lease,
    planned each policy on the conservative fallback until its own first refit was done: last week's peak at this
    hour, which can be below the forecast in force (on the real API server 35 GPUs -> 23 and back a minute later). It
    now plans on the newest forecast the shared store holds for the policy, if usable by the same rule as its own
    and made for its generation: its first plan is the one the replica before it made, named by that model."""
    import controller.metrics as metrics
    from tests.test_metrics import scrape, value

    before = _stored_by_a_first_replica(demand_file, tmp_path)
    assert not before.fallback and before.model.startswith("auto")
    b = Replay(tmp_path, demand_file, refit_beside=True, start=before.now)  # a new process, on the store a wrote
    try:
        state = b.step(before.now)
        assert b.reconciler.forecasts.refitting() == 1  # its own refit is still to come: the stored one serves
    finally:
        b.reconciler.close()
    first = state.policies["inference/chat"]
    text = scrape(state)
    assert value(text, metrics.FALLBACK, policy="inference/chat") == 0
    assert value(text, metrics.POLICY_INFO, policy="inference/chat", mode="active", model=before.model) == 1
    assert not first.fallback and first.model == before.model
    assert first.forecast_age_seconds == before.forecast_age_seconds
    assert first.reserved_gpus == before.reserved_gpus
    np.testing.assert_array_equal(first.hours.reserved, before.hours.reserved)
    s, conditions = b.status()
    assert conditions["FallbackActive"]["status"] == "False" and s["model"] == before.model
    # a spec changed since in what does not shape the forecast (a new generation: minGpus here) serves on it too
    edited = policy(minGpus=4)
    edited["metadata"]["generation"] = 2
    c = Replay(tmp_path, demand_file, edited, refit_beside=True, start=before.now)
    try:
        kept = c.step(before.now).policies["inference/chat"]
    finally:
        c.reconciler.close()
    assert not kept.fallback and kept.model == before.model
    np.testing.assert_array_equal(kept.hours.reserved, np.maximum(before.hours.reserved, 4))
    # where nothing usable is stored, the fallback as before: a spec changed since in what the forecast is of (its
    # hourly means, not peaks), a forecast older than run.keep_forecast_seconds, or one recorded without the
    # generation it was made for
    changed = policy(statistic="mean")
    changed["metadata"]["generation"] = 2
    late = before.now + pd.Timedelta(seconds=RunConfig().keep_forecast_seconds + 60)
    for folder, chat, at in (("changed", changed, before.now), ("late", policy(), late)):
        c = Replay(tmp_path, demand_file, chat, refit_beside=True, start=at)
        try:
            assert c.step(at).policies["inference/chat"].fallback, folder
        finally:
            c.reconciler.close()
    for path in (tmp_path / "log" / "inference.chat").glob("*.csv"):  # as recorded before generations were
        path.write_text("".join(line for line in path.read_text().splitlines(keepends=True)
                                if not line.startswith(("# generation", "# model", "# basis"))))
    c = Replay(tmp_path, demand_file, refit_beside=True, start=before.now)
    try:
        assert c.step(before.now).policies["inference/chat"].fallback
    finally:
        c.reconciler.close()


def test_a_replica_that_leads_again_plans_on_the_leader_s_forecast_not_the_fallback(demand_file, tmp_path):
    """Failover back: replica x led, y took over for hours and refitted; x, leading again, held only its own forecast
    of hours ago, past run.keep_forecast_seconds, and planned on the fallback until its refit was done. It now plans
    on y's forecast from the store meanwhile."""
    start = MONDAY_6AM + pd.Timedelta(hours=2, minutes=5)
    r = Replay(tmp_path, demand_file, refit_beside=True, start=start)
    x = r.reconciler
    try:
        _until_taken_up(r, start)
        y = r.restart(refit_beside=True)
        try:
            led = _until_taken_up(r, start + pd.Timedelta(hours=3)).policies["inference/chat"]  # y's own forecast
        finally:
            y.close()
        r.reconciler = x  # x leads again, its own forecast 3 h old
        back = r.step(led.now + pd.Timedelta(minutes=1)).policies["inference/chat"]
        assert x.forecasts.refitting() == 1  # its own refit runs beside
    finally:
        x.close()
    assert not back.fallback and back.model == led.model
    assert back.forecast_age_seconds == led.forecast_age_seconds + 60


def test_a_replica_that_leads_again_plans_on_the_newer_stored_forecast_not_its_own_older_one(demand_file, tmp_path):
    """Failover and back within keep_forecast_seconds: x led with its forecast of 08:05, y took over and refitted at
    09:00, x leads again at 09:10. x's own forecast was still usable, so it planned on it rather than on y's newer one
    in the store until its own refit landed: the reservation moved with each failover. The newest usable forecast
    for the policy is in force now, whoever made it; x's own again once its refit lands."""
    start = MONDAY_6AM + pd.Timedelta(hours=2, minutes=5)
    r = Replay(tmp_path, demand_file, refit_beside=True, start=start)
    x = r.reconciler
    try:
        mine = _until_taken_up(r, start).policies["inference/chat"]
        y = r.restart(refit_beside=True)
        try:
            led = _until_taken_up(r, start + pd.Timedelta(minutes=55)).policies["inference/chat"]
        finally:
            y.close()
        newer = y.forecasts.current("inference/chat")
        assert newer is not None and newer.made_at == MONDAY_6AM + pd.Timedelta(hours=3)  # y's 09:00 refit
        assert (led.now - mine.now).total_seconds() < RunConfig().keep_forecast_seconds  # x's own still usable
        r.reconciler = x
        x.took_lead()  # as controller.loop says when x takes the Lease again
        back = r.step(led.now + pd.Timedelta(minutes=1)).policies["inference/chat"]
        assert x.forecasts.refitting() == 1  # its own refit runs beside
        assert not back.fallback and back.forecast_age_seconds == led.forecast_age_seconds + 60  # y's, from 09:00
        np.testing.assert_array_equal(back.hours.reserved, led.hours.reserved)
        own = _until_taken_up(r, back.now + pd.Timedelta(minutes=1)).policies["inference/chat"]
        assert x.forecasts.current("inference/chat").made_at == back.now  # its own refit, in force once it lands
        assert own.forecast_age_seconds == (own.now - back.now).total_seconds()
    finally:
        x.close()


def test_a_refit_queued_before_the_lease_went_does_not_beat_the_leader_s_newer_forecast(demand_file, tmp_path):
    """x queued its 09:55 refit (held, as behind a thousand others), y took over and refitted at 10:00, and x took
    the Lease back at 10:0x, where its 09:55 refit, finished meanwhile, was taken up: counted as its own since it
    took the Lease, it beat y's newer forecast in the store. What x fitted before it took the Lease is weighed
    against the store by its issue time."""
    start = MONDAY_6AM + pd.Timedelta(hours=2, minutes=50)
    r = Replay(tmp_path, demand_file, refit_beside=True, start=start)
    x = r.reconciler
    try:
        _until_taken_up(r, start)
        with x.forecasts._fitter_lock:  # x's next refit waits at its fit
            r.step(MONDAY_6AM + pd.Timedelta(hours=3, minutes=55))
            y = r.restart(refit_beside=True)
            try:
                led = _until_taken_up(r, MONDAY_6AM + pd.Timedelta(hours=4)).policies["inference/chat"]
            finally:
                y.close()
            r.reconciler = x
            x.took_lead()
        for job in list(x.forecasts._refits.values()):
            job.result(timeout=120)
        back = r.step(led.now + pd.Timedelta(minutes=1)).policies["inference/chat"]
    finally:
        x.close()
    assert x.forecasts.current("inference/chat").made_at == MONDAY_6AM + pd.Timedelta(hours=3, minutes=55)
    assert not back.fallback and back.forecast_age_seconds == led.forecast_age_seconds + 60  # y's, from 10:00


def test_after_a_spec_change_the_forecast_serves_until_the_refit_only_if_it_forecasts_the_same_demand(demand_file,
                                                                                                      tmp_path):
    """With the refit beside, a spec change is refitted beside too, and until that refit lands the replica's own
    forecast served whatever changed: after a new `query` the plan stayed on a forecast of the old series. It serves
    now while it is a forecast of the same thing (the same query, statistic, forecaster and timezone: a change of
    minGpus or of the quantiles it holds, planned on it, is what the refit would give); otherwise the stored
    forecasts made for the new spec, and without one the fallback, until the refit lands."""
    start = MONDAY_6AM + pd.Timedelta(hours=2, minutes=50)
    r = Replay(tmp_path, demand_file, refit_beside=True, start=start)
    keeper = r.reconciler.forecasts
    try:
        before = _until_taken_up(r, start).policies["inference/chat"]
        r.cluster.apply_policy(policy(minGpus=4, targetQuantile=0.5))  # generation 2: the same demand forecast
        edited = r.step(before.now + pd.Timedelta(minutes=1)).policies["inference/chat"]
        assert keeper.refitting() == 1
        assert not edited.fallback and edited.forecast_age_seconds == before.forecast_age_seconds + 60
        assert edited.reserved_gpus < before.reserved_gpus  # planned on its median, not on the fallback's peak
        _until_taken_up(r, edited.now + pd.Timedelta(minutes=1))
        r.cluster.apply_policy(policy(minGpus=4, targetQuantile=0.5, query="sum(rate(embeddings_total[5m]))"))
        moved = r.step(edited.now + pd.Timedelta(minutes=5)).policies["inference/chat"]
        assert keeper.refitting() == 1
        assert moved.fallback  # not on the forecast of the old query
        own = _until_taken_up(r, moved.now + pd.Timedelta(minutes=1)).policies["inference/chat"]
        fresh = keeper.current("inference/chat")
        assert (fresh.generation, fresh.made_at) == (3, moved.now) and not own.fallback
    finally:
        r.reconciler.close()


def test_a_refit_begun_before_a_query_edit_is_dropped_and_the_new_query_refitted(demand_file, tmp_path):
    """chat's query edited from requests to tokens (4 per request, demandPerGpu 10 -> 40: the same GPUs) while its
    06:00 refit of the requests was under way beside the reconciles (held at its fit, as behind a thousand others).
    The edit's reconcile read the tokens whole, but the old refit, finished after, was taken up: its whole lookback of
    requests put back in place of the tokens and the refit the edit asked for fitted on it, a quarter of the demand
    in the new units, until the next hour's. A refit is taken up only if made for the query (and what else the
    forecast is of) in force; otherwise dropped, and the policy refitted on its current spec."""
    demand = TokensDemand(FileDemand({"inference/chat": demand_file}))
    edited = policy("chat", query="tokens", capacity={"demandPerGpu": 40.0, "gpusPerReplica": 2})
    start = MONDAY_6AM - pd.Timedelta(hours=1)
    r = Replay(tmp_path, demand_file, policy("chat", query="requests"), demand=demand, gpus=1000, refit_beside=True,
               start=start)
    keeper = r.reconciler.forecasts
    try:
        _until_taken_up(r, start)
        with keeper._fitter_lock:  # 06:00's refit, of the requests, waits at its fit
            r.step(MONDAY_6AM)
            r.cluster.apply_policy(edited)
            r.step(MONDAY_6AM + pd.Timedelta(minutes=5))  # the tokens, read whole
        for job in list(keeper._refits.values()):
            job.result(timeout=120)
        at = MONDAY_6AM + pd.Timedelta(minutes=10)
        r.step(at)  # the old refit, finished: not taken up
        lookback = pd.Timedelta(seconds=r.reconciler.data.lookback_seconds)
        tokens = demand.read("inference/chat", "tokens", at - lookback, at)
        pd.testing.assert_series_equal(r.reconciler._raw["inference/chat"], tokens.astype(float), check_names=False,
                                       check_freq=False)
        state = _until_taken_up(r, at + pd.Timedelta(minutes=1)).policies["inference/chat"]
    finally:
        r.reconciler.close()
    fitted = keeper.current("inference/chat")
    assert fitted.generation == 2
    # the forecast, and the plan on it, of a controller that read the tokens alone
    alone = Replay(tmp_path / "alone", demand_file, edited, demand=demand, gpus=1000, start=fitted.made_at)
    started = alone.step(fitted.made_at).policies["inference/chat"]
    pd.testing.assert_frame_equal(fitted.frame, alone.reconciler.forecasts.current("inference/chat").frame)
    np.testing.assert_array_equal(state.hours.reserved, started.hours.reserved)


def test_a_stored_forecast_that_does_not_parse_costs_only_itself(demand_file, tmp_path):
    """The hour's work beside the reconciles scores the forecasts stored before (realized error) after its refit. One
    stored forecast that did not parse (a ConfigMap key edited by hand, a file of another version) made that read
    raise: the hour's work failed ('internal') and its fresh forecast was never taken up, so a replica that had just
    started planned on the conservative fallback (here 08:56 to 10:27, two hours' refits lost), and the stored
    forecasts could not be read to plan on either. The one forecast is left out, with a warning; the rest serve."""
    before = _stored_by_a_first_replica(demand_file, tmp_path)
    bad = tmp_path / "log" / "inference.chat" / f"{int((before.now - pd.Timedelta(minutes=30)).timestamp())}.csv"
    bad.write_text("not,a\nforecast\n")
    b = Replay(tmp_path, demand_file, refit_beside=True, start=before.now)
    try:
        state = _until_taken_up(b, before.now)
    finally:
        b.reconciler.close()
    ps = state.policies["inference/chat"]
    assert not ps.fallback and ps.forecast_age_seconds <= (ps.now - before.now).total_seconds()  # its own, refitted
    assert not any(state.reconcile_errors_total.values()), state.reconcile_errors_total


# ----------------------------------------------------------------------------------------------- MLflow
@pytest.fixture(params=["sqlite", "server"])
def tracking_uri(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'mlflow.db'}"
    return request.getfixturevalue("mlflow_server").uri


def test_the_loop_serves_the_champion_logs_realized_error_and_retrains_on_drift(tracking_uri, tmp_path):
    """MLflow in the loop, on a local sqlite store and a real `mlflow server`: the controller forecasts with
    the registered champion, logs realized error as metric history, and when demand doubles (drift) it
    retrains in the background; the new version is registered without touching the loop."""
    from adapters.mlflow import Tracker
    from controller.forecasts import Models
    from controller.loop import BackgroundTrainer
    from forecast.history import prepare
    from tests.test_training import champion_version, client
    from training.pipeline import TrainSettings, train_series

    start = MONDAY_6AM - pd.Timedelta(days=2)
    drifted = DEMAND.copy()
    drifted[drifted.index >= start] *= 2.0
    path = tmp_path / "drift.csv"
    write_csv(drifted, path)
    settings = TrainSettings(folds=2, candidates=("snaive24", "profile"), quantiles=(0.1, 0.5, 0.9, 0.99),
                             statistic="max")
    hourly = prepare(drifted[drifted.index < start], statistic="max")[0]
    train_series("inference.chat", hourly, settings, Tracker(tracking_uri))
    assert champion_version(tracking_uri, "inference.chat") == "1"
    trainer = BackgroundTrainer(tracking_uri, settings)
    r = Replay(tmp_path, path, start=start, run={"retrain_every_seconds": 0},  # no schedule: only drift retrains
               models=Models(tracking_uri), tracker=Tracker(tracking_uri), retrain=trainer, drift_window=6,
               drift_factor=1.5)
    scales = {}  # each forecast's fitting window's scale, by issue hour
    for hour in range(12):
        state = r.step(start + pd.Timedelta(hours=hour))
        scales[start + pd.Timedelta(hours=hour)] = r.reconciler.forecasts._forecasts["inference/chat"].scale
    assert state.policies["inference/chat"].model.startswith("champion v1")
    drift_events = r.events("ForecastDrift")
    assert drift_events and "retraining" in drift_events[0]["message"] and drift_events[0]["type"] == "Warning"
    trainer.wait()
    c = client(tracking_uri)
    versions = c.search_model_versions("name='headroom-inference.chat'")
    assert len(versions) >= 2  # retrained on drift (promoted only if it beats the champion by the margin)
    experiment = c.get_experiment_by_name("headroom/inference.chat").experiment_id
    (accuracy,) = c.search_runs([experiment], "tags.`headroom.kind` = 'accuracy'")
    history = c.get_metric_history(accuracy.info.run_id, "abs_error_1h")
    assert len(history) >= 10 and len({m.step for m in history}) == len(history)  # one point per hour
    # each target's error over the scale of the window its forecast was fitted on (as the backtest scales each fold by
    # its own), not over the window of the forecast in force when the actual arrived (an hour or a day later)
    for h in (1, 6):
        absolute = {m.step: m.value for m in c.get_metric_history(accuracy.info.run_id, f"abs_error_{h}h")}
        scaled = {m.step: m.value for m in c.get_metric_history(accuracy.info.run_id, f"scaled_error_{h}h")}
        assert absolute and scaled.keys() == absolute.keys(), h
        for step, value in scaled.items():
            issued = pd.Timestamp(step * 3600, unit="s", tz="UTC") - pd.Timedelta(hours=h - 1)
            assert absolute[step] / value == pytest.approx(scales[issued]), (h, issued)
        assert len(set(scales.values())) > 1  # the hours' windows differ: the check tells one scale from another
    assert accuracy.data.tags["headroom.retrain_recommended"] == "true"
    # on the same time axis: the shares below the reserved quantiles as each hour's actual arrived, the champion's
    # backtest beside them, and each training's backtest at its hour (the first, and the retraining on drift)
    for key in ("below_q0.9_1h", "below_q0.99_1h", "champion_backtest_mase"):
        assert [m.step for m in c.get_metric_history(accuracy.info.run_id, key)] == [m.step for m in history], key
    trainings = c.get_metric_history(accuracy.info.run_id, "backtest_mase")
    assert len(trainings) == len(versions) and max(m.step for m in trainings) > min(m.step for m in history)


def test_drift_that_retraining_cannot_end_retrains_once_a_window_not_every_hour(tmp_path):
    """A retrained model that does not beat the champion leaves drift's baseline (the champion's backtest MASE) as
    it was, so the drift goes on: it once asked for a training, and registered a version, every hour."""
    from adapters.mlflow import Tracker
    from controller.forecasts import Models
    from controller.loop import BackgroundTrainer
    from forecast.history import prepare
    from training.pipeline import TrainSettings, train_series

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    start = MONDAY_6AM - pd.Timedelta(days=2)
    drifted = DEMAND.copy()
    drifted[drifted.index >= start] *= 2.0
    path = tmp_path / "drift.csv"
    write_csv(drifted, path)
    settings = TrainSettings(folds=2, candidates=("snaive24",), quantiles=(0.1, 0.5, 0.9, 0.99), statistic="max")
    train_series("inference.chat", prepare(drifted[drifted.index < start], statistic="max")[0], settings,
                 Tracker(uri))
    trainer, asked = BackgroundTrainer(uri, settings, beside=False), []

    def retrain(series, history, now):
        asked.append(now)
        trainer(series, history, now)

    r = Replay(tmp_path, path, start=start, run={"retrain_every_seconds": 0}, models=Models(uri),
               tracker=Tracker(uri), retrain=retrain, drift_window=3, drift_factor=1.5)
    drifting, said = [], []
    for hour in range(12):
        now, seen = start + pd.Timedelta(hours=hour), len(r.events("ForecastDrift"))
        r.step(now)
        new = r.events("ForecastDrift")[seen:]
        drifting += [now] if new else []
        said += [now] if any("retraining" in e["message"] for e in new) else []
    assert len(asked) >= 2 and len(drifting) > len(asked), (asked, drifting)  # the drift went on
    assert all(b - a >= pd.Timedelta(hours=3) for a, b in zip(asked, asked[1:])), asked
    assert said == asked  # its events say "retraining" only when it retrains


def test_retraining_runs_on_its_schedule(demand_file, tmp_path):
    from adapters.mlflow import Tracker

    trained = []
    r = Replay(tmp_path, demand_file, run={"retrain_every_seconds": 2 * 3600},
               tracker=Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}"),
               retrain=lambda series, history, now: trained.append((series, now, history.index[-1])))
    for hour in range(5):
        r.step(MONDAY_6AM + pd.Timedelta(hours=hour))
    # counted from start-up, every 2 h, each on the complete hours before its moment
    assert [(s, now.hour, last.hour) for s, now, last in trained] == [("inference.chat", 8, 7),
                                                                      ("inference.chat", 10, 9)]


def test_retraining_is_given_the_hours_as_read(tmp_path):
    """The controller handed its retraining the hours it fits on, clipped by a bound from the whole lookback, so
    every fold of the training fitted hours clipped by a bound that had seen the hours after its origin. It hands the
    hours as read now (here a glitch of 100,000 an hour before, kept as it was), and the training clips what each fit
    has by its own bound (training.pipeline, tests/test_training.py)."""
    from adapters.mlflow import Tracker

    demand = DEMAND.copy()
    glitch = MONDAY_6AM + pd.Timedelta(hours=1)
    demand[(demand.index > glitch - pd.Timedelta(hours=1)) & (demand.index <= glitch)] = 1e5
    path = tmp_path / "glitch.csv"
    write_csv(demand, path)
    trained = []
    r = Replay(tmp_path, path, run={"retrain_every_seconds": 3600}, tracker=Tracker(f"sqlite:///{tmp_path / 'm.db'}"),
               retrain=lambda series, history, now: trained.append(history))
    for hour in range(3):
        r.step(MONDAY_6AM + pd.Timedelta(hours=hour))
    assert trained and all(h.max() == 1e5 for h in trained), [h.max() for h in trained]


def test_the_embedded_replay_trains_within_the_reconcile(tmp_path):
    """The embedded cluster's clock is not the wall clock: a training it asks for is done before the reconcile
    returns, so what it promotes serves from the same step in every replay (beside, it would depend on timing)."""
    from controller.loop import BackgroundTrainer
    from forecast.history import prepare
    from tests.test_training import champion_version
    from training.pipeline import TrainSettings

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    hourly = prepare(DEMAND[DEMAND.index < MONDAY_6AM], statistic="max")[0]
    trainer = BackgroundTrainer(uri, TrainSettings(folds=2, statistic="max"), beside=False)
    trainer("inference.chat", hourly, MONDAY_6AM)
    assert champion_version(uri, "inference.chat") == "1" and not trainer._running


def test_mlflow_down_keeps_the_last_champion_and_the_loop_serving(demand_file, tmp_path):
    from adapters.mlflow import Tracker
    from controller.forecasts import Models
    from forecast.history import prepare
    from tests.mlflow_server import MlflowServer
    from training.pipeline import TrainSettings, train_series

    server = MlflowServer(tmp_path / "mlflow")
    try:
        server.start()
    except RuntimeError as exc:
        pytest.skip(f"no mlflow server: {exc}")
    try:
        hourly = prepare(DEMAND[DEMAND.index < MONDAY_6AM], statistic="max")[0]
        train_series("inference.chat", hourly, TrainSettings(folds=2, candidates=("profile",), statistic="max",
                                                             quantiles=(0.1, 0.5, 0.9, 0.99)), Tracker(server.uri))
        r = Replay(tmp_path, demand_file, run={"retrain_every_seconds": 0}, models=Models(server.uri),
                   tracker=Tracker(server.uri))
        assert r.step(MONDAY_6AM).policies["inference/chat"].model.startswith("champion v1")
    finally:
        server.stop()
    state = r.step(MONDAY_6AM + pd.Timedelta(hours=1))  # MLflow is gone now
    ps = state.policies["inference/chat"]
    assert ps.model.startswith("champion v1") and not ps.fallback and not ps.degraded
    assert r.replicas() * 2 == ps.reserved_gpus
    assert state.reconcile_errors_total["mlflow"] == 1  # realized error could not be logged: counted, not fatal
    assert "internal" not in state.reconcile_errors_total


def _interrupted_self() -> str:
    os.kill(os.getpid(), signal.SIGINT)  # what Ctrl-C sends the controller's whole process group
    time.sleep(0.2)
    return "fitted"


def test_the_fitting_process_leaves_ctrl_c_to_the_controller():
    """Ctrl-C printed a KeyboardInterrupt traceback from the spawned process the hourly fits run in."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from controller.forecasting import ignore_interrupts

    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"), initializer=ignore_interrupts) as pool:
        assert pool.submit(_interrupted_self).result(timeout=60) == "fitted"


# ----------------------------------------------------------------------------------------------- quotas left behind
@pytest.mark.parametrize("kind", ["Deployment", "HorizontalPodAutoscaler"])
def test_the_inference_cluster_queue_of_a_policy_whose_target_is_missing_holds_nothing(demand_file, tmp_path, kind):
    """A policy's target deleted: the plan lent its GPUs to training (all 128), yet its inference ClusterQueue kept the
    reservation last set (84 GPUs at 09:00), 212 GPUs of quota on 128, where the namespace's other pods could take
    GPUs lent. It holds what the target holds, none, and its reservation again once the target is back."""
    r = Replay(tmp_path, demand_file, policy("chat", inferenceClusterQueue="serving",
                                             target={"kind": kind, "name": "chat"}))
    held = r.step(AT_9).policies["inference/chat"].reserved_gpus
    assert r.cluster.quotas["serving"] == held > 0
    r.cluster.delete_target(TargetRef(kind, "chat", "inference"))
    state = r.step(AT_9 + pd.Timedelta(minutes=5))
    assert r.status()[1]["Ready"]["reason"] == "TargetMissing"
    assert (r.cluster.quotas["serving"], r.cluster.quotas["research"]) == (0, state.slack_gpus) == (0, 128)
    r.cluster.apply_policy(r.policies[0])  # the target made again
    state = r.step(AT_9 + pd.Timedelta(minutes=10))
    chat = state.policies["inference/chat"]
    assert chat.valid and r.cluster.quotas["serving"] == chat.reserved_gpus > 0
    assert r.cluster.quotas["serving"] + r.cluster.quotas["research"] <= 128


@pytest.mark.parametrize("lent_for, then", [(None, None), ("inference", "inference"), (None, "inference"),
                                             ("inference", None)])
def test_what_headroom_lent_a_queue_no_policy_names_any_more_comes_back(demand_file, tmp_path, lent_for, then):
    """team-b and team-c dropped from batch's trainingClusterQueues: team-b kept the quota last lent (20 GPUs at 06:00)
    beside the whole slack lent again to research, quota for training the plan no longer counts. A controller
    restarted in between knows team-b is headroom's (Cluster.lent_quotas) and returns it to 0; team-c, whose quota
    someone else set since, is left as it is. Only a controller of the same namespace's policies as the one that lent
    (run.namespace: `lent_for`, then `then`) returns it: one of another namespace's (or of all of them) cannot tell
    team-b from a queue a policy it does not read names, and two such controllers returned each other's queues to 0
    at every reconcile."""
    r = Replay(tmp_path, demand_file, policy("chat"), policy("batch", trainingClusterQueues=["team-b", "team-c"]),
               run={"namespace": lent_for})
    r.step(MONDAY_6AM)
    lent = {q: r.cluster.quotas[q] for q in ("team-b", "team-c")}
    assert min(lent.values()) > 0
    assert r.cluster.lent_quotas(lent_for) == {"research": r.cluster.quotas["research"], **lent}
    assert r.cluster.lent_quotas("elsewhere") == {}
    r.cluster.apply_policy(policy("batch", trainingClusterQueues=["research"]))
    r.cluster.quotas["team-c"] += 1  # set by hand: the operator's now
    r.cfg = r.cfg.model_copy(update={"namespace": then})
    r.restart()
    state = r.step(MONDAY_6AM + pd.Timedelta(minutes=5))
    returned = lent_for == then
    assert (r.cluster.quotas["team-b"], r.cluster.quotas["team-c"]) == (0 if returned else lent["team-b"],
                                                                      lent["team-c"] + 1)
    assert r.cluster.quotas["research"] == state.slack_gpus
    assert ("team-b" in r.cluster.lent_quotas(lent_for)) != returned


def test_what_headroom_lent_a_queue_of_a_policy_made_forecast_only_comes_back(demand_file, tmp_path):
    """b, active, is edited to forecast-only: it lends nothing from then on, but team-b, its queue, kept the quota
    headroom had lent it (16 GPUs at 09:00) beside the whole slack lent again to research: Kueue admitted training
    into both, quota the plan no longer lent. As for a queue no policy names, what headroom lent comes back."""
    r = Replay(tmp_path, demand_file, policy("chat", minGpus=10), policy("b", trainingClusterQueues=["team-b"]),
               gpus=200)
    r.step(AT_9)
    assert r.cluster.quotas["team-b"] > 0 and "team-b" in r.cluster.lent_quotas()
    r.cluster.apply_policy(policy("b", trainingClusterQueues=["team-b"], mode="forecast-only"))
    for minutes in (5, 10):
        state = r.step(AT_9 + pd.Timedelta(minutes=minutes))
        assert r.cluster.quotas["team-b"] == 0 and "team-b" not in r.cluster.lent_quotas()
        assert r.cluster.quotas["research"] == state.slack_gpus


# ------------------------------------------------------------------------------- targets an edit left behind, held
def test_a_cluster_queue_target_an_edit_left_holds_its_quota_whole_beside_a_refused_policy_s_pods_in_it(
        demand_file, tmp_path):
    """claim holds ClusterQueue pool as its target; refused serve runs its pods there (inferenceClusterQueue). claim
    edited to pool-v2 left pool behind, its quota as last set (an edit deletes no workload). The refused policies
    and the left targets were decided in two steps: serve held its Deployment first, so pool, its queue, was held by
    no one, its quota beyond serve's pods uncounted and lent again. Decided in one call, a ClusterQueue target first
    whether refused or left: pool holds its quota whole, serve's pods within it, in the world as the controller
    counts it."""
    claim = policy("claim", target={"kind": "ClusterQueue", "name": "pool"}, inferenceClusterQueue=None,
                   capacity={"demandPerGpu": 5.0, "gpusPerReplica": 2})
    serve = policy("serve", inferenceClusterQueue="pool", targetQuantlie=0.5)
    r = Replay(tmp_path, demand_file, policy("chat", minGpus=40, inferenceClusterQueue="serving"), claim, serve)
    r.step(AT_9)
    held = r.cluster.quotas["pool"]
    r.cluster.apply_policy({**claim, "spec": {**claim["spec"], "target": {"kind": "ClusterQueue", "name": "pool-v2"}}})
    for minutes in (5, 10):
        state = r.step(AT_9 + pd.Timedelta(minutes=minutes))
        chat, v2 = state.policies["inference/chat"], state.policies["inference/claim"]
        assert r.cluster.quotas["pool"] == held > 0 and TargetRef("ClusterQueue", "pool") in r.cluster.left
        assert chat.reserved_gpus + v2.reserved_gpus + held + state.slack_gpus <= 128, \
            (chat.reserved_gpus, v2.reserved_gpus, held, state.slack_gpus)
        assert_the_world_holds_what_the_controller_counts(r, state)


def test_a_target_an_edit_left_is_forgotten_by_the_world_as_by_the_controller_once_it_holds_no_gpu(demand_file,
                                                                                                   tmp_path):
    """other, edited to scale other-v2, left Deployment other behind; scaled to 0 by hand, the controller forgets it
    (it reads 0 GPUs), but the world kept it at 0 replicas: scaled up again by hand, its 20 GPUs were held in the
    world and counted by no one, lent again. The world forgets it too: a target no policy names any more holds
    nothing in either, until a policy names it again."""
    r = Replay(tmp_path, demand_file, policy("chat", minGpus=40), policy("other"))
    r.step(AT_9)
    r.cluster.apply_policy(policy("other", target={"kind": "Deployment", "name": "other-v2"}))
    r.step(AT_9 + pd.Timedelta(minutes=5))
    other = TargetRef("Deployment", "other", "inference")
    assert other in r.cluster.left
    r.cluster.scale_deployment("inference", "other", 0)
    state = r.step(AT_9 + pd.Timedelta(minutes=10))
    assert other not in r.cluster.left and r.status("other")[0]["left"] is None
    with pytest.raises(NotFound):  # no one's, as the controller counts it: nothing of it to scale up
        r.cluster.scale_deployment("inference", "other", 10)
    reserved = sum(p.reserved_gpus for p in state.policies.values())
    assert r.cluster.inference_gpus <= reserved and reserved + state.slack_gpus == 128
    assert_the_world_holds_what_the_controller_counts(r, state)
    # named again: its policy's once more, held as any target
    r.cluster.apply_policy(policy("other"))
    state = r.step(AT_9 + pd.Timedelta(minutes=15))
    assert r.cluster.inference["inference/other"].ref == other and state.policies["inference/other"].reserved_gpus > 0
    assert_the_world_holds_what_the_controller_counts(r, state)


@pytest.mark.parametrize("target", ["Deployment", "HorizontalPodAutoscaler"])
def test_a_refused_policy_s_pods_in_an_accepted_policy_s_training_queue_run_there_and_training_gives_back_what_is_over(
        demand_file, tmp_path, target):
    """"serve" names research, chat's training queue, as its inferenceClusterQueue (refused for it). On Kubernetes its
    Deployment's pods are Workloads Kueue admits into research: the controller counts them as inference holding what is
    lent there, never a victim, and the training beside them gives back what is over (tests/test_refused_pods_real.py).
    The world gave serve no workload at all: no GPU of its held, no Workload of its in research, so as chat's morning
    ramp took back what it lent, training kept the GPUs serve's pods hold on a cluster (at 9:15, 40 GPUs of training
    in research against 32 beside 12 GPUs of serve's pods). The world runs serve's replicas (at the demand its spec
    says; an HPA's as it scales itself) as Workloads of research, each of its Deployment, admitted into research's quota
    as Kueue admits them, and training there holds what the pods leave of what chat lends."""
    serve = policy("serve", inferenceClusterQueue="research", trainingClusterQueues=[],
                   capacity={"demandPerGpu": 20.0, "gpusPerReplica": 2}, target={"kind": target, "name": "serve"})
    r = Replay(tmp_path, demand_file, policy("chat", minGpus=40), serve)
    r.step(MONDAY_6AM)
    r.fill_training()  # a night of lending: training holds every GPU left
    for minutes in range(15, 200, 15):  # the morning ramp, to 9:15: chat takes back what it lent
        state = r.step(MONDAY_6AM + pd.Timedelta(minutes=minutes))
        assert not state.policies["inference/serve"].valid and not any(state.reconcile_errors_total.values())
        pods = [w for w in r.cluster.workloads() if w.deployment == "serve"]
        held = sum(w.gpus for w in pods if w.running)
        assert held > 0 and {(w.namespace, w.cluster_queue) for w in pods} == {("inference", "research")}, pods
        chat = state.policies["inference/chat"]
        assert r.cluster.inference_gpus == r.cluster.inference["inference/chat"].held_replicas * 2 + held
        assert chat.reserved_gpus + state.slack_gpus == 128, (chat.reserved_gpus, state.slack_gpus)
    assert state.preemptions_total.get("planned", 0) > 0
    # what was preempted by 9:00 has stopped (within a minute): research holds what is lent, the pods within it
    assert held + r.cluster.training_gpus <= state.slack_gpus, (held, r.cluster.training_gpus, state.slack_gpus)


def test_a_target_an_edit_left_runs_its_pods_in_the_training_queue_it_names_and_is_held_once_that_queue_is_not_lent(
        demand_file, tmp_path):
    """b runs Deployment b (84 GPUs at 9:00) in its inferenceClusterQueue research; edited to scale b-v2, it leaves b
    behind, and chat, applied then, lends into research. On a cluster b's pods run on as Workloads Kueue admitted into
    research, within what chat lends there (invalid_holdings' within): the controller counts them as inference
    (Reconciler._served). The world dropped b as no one's, its 84 GPUs free for training; when chat then dropped
    research, the controller read b as not found, 0 GPUs, and forgot it, where on a cluster the Deployment and its
    pods are still there. The world keeps b running as pods in research (`left_pods`), as on a cluster, and once
    research is no longer lent into, b is held by no one at its 84 GPUs, still said in b's status, its pods Workloads
    of research still (their queue-name label names it)."""
    r = Replay(tmp_path, demand_file, policy("b", inferenceClusterQueue="research", trainingClusterQueues=["team-b"]))
    r.step(AT_9)
    held = r.replicas("b") * 2
    assert held == 84
    r.cluster.apply_policy(policy("b", target={"kind": "Deployment", "name": "b-v2"}, trainingClusterQueues=["team-b"]))
    r.cluster.apply_policy(policy("chat"))
    b = TargetRef("Deployment", "b", "inference")
    for minutes in (5, 10):
        state = r.step(AT_9 + pd.Timedelta(minutes=minutes))
        pods = [w for w in r.cluster.workloads() if w.deployment == "b"]
        assert {w.cluster_queue for w in pods} == {"research"} and sum(w.gpus for w in pods if w.running) == held
        assert r.cluster.left_pods == {b: "research"}
        assert_the_world_holds_what_the_controller_counts(r, state)
    r.cluster.apply_policy(policy("chat", trainingClusterQueues=["team-c"]))  # research lent into no more
    for minutes in (15, 20):
        state = r.step(AT_9 + pd.Timedelta(minutes=minutes))
        assert set(r.cluster.left) == {b} and r.cluster.left_pods == {b: "research"}
        assert sum(w.gpus for w in r.cluster.workloads() if w.deployment == "b" and w.running) == held
        assert r.cluster.target_state(b, 2).desired_replicas * 2 == held  # no one scales it now
        assert [left["target"]["name"] for left in r.status("b")[0]["left"]] == ["b"]
        reserved = sum(p.reserved_gpus for p in state.policies.values())
        assert reserved + held + state.slack_gpus <= 128, (reserved, held, state.slack_gpus)


def test_pods_an_edit_left_in_a_training_queue_beyond_what_is_lent_there_are_held_not_lent_nor_reserved_again(
        demand_file, tmp_path):
    """b's pods (84 GPUs) run on in research after an edit scaled b-v2 instead, and chat lends into research. Kueue
    counts them within research's quota and borrows the rest from the cohort: every GPU they run on is taken. The
    controller counted them only within what it lent (21-19 to research) and reserved 84-90 for b-v2 beside them:
    reserved + lent + b's pods beyond research's quota came to 189-194 of 128 GPUs, 20-23 of b-v2's replicas waiting
    all hour. Beyond the quota they are held (serving_gpus), as a ClusterQueue target's pods beyond its quota are:
    from the third reconcile on (the first two read research's quota as it was before the plan set it: 84, as b's
    inference queue, then 21) what is reserved, lent and held by b's pods is the cluster, each GPU counted once."""
    r = Replay(tmp_path, demand_file, policy("b", inferenceClusterQueue="research", trainingClusterQueues=["team-b"]))
    r.step(AT_9)
    r.cluster.apply_policy(policy("b", target={"kind": "Deployment", "name": "b-v2"}, trainingClusterQueues=["team-b"]))
    r.cluster.apply_policy(policy("chat"))
    for minutes in range(5, 65, 5):
        state = r.step(AT_9 + pd.Timedelta(minutes=minutes))
        pods = sum(w.gpus for w in r.cluster.workloads() if w.deployment == "b" and w.running)
        assert pods == 84 and r.cluster.left_pods == {TargetRef("Deployment", "b", "inference"): "research"}
        if minutes < 15:
            continue
        reserved = sum(p.reserved_gpus for p in state.policies.values())
        lent = r.cluster.cluster_queue_quotas()
        beyond = max(pods - lent["research"], 0)
        assert reserved + sum(lent[q] for q in state.teams) + beyond == 128, (minutes, reserved, lent, pods)
        assert r.cluster.inference["inference/b"].waiting == 0  # b-v2's replicas all have GPUs


def test_a_refused_policy_edited_onto_another_target_leaves_both_targets_pods_in_the_training_queue_each_counted_once(
        demand_file, tmp_path):
    """p0, whose spec does not parse, names q0, p2's training queue, as its inferenceClusterQueue: Kueue admits its
    pods there. Edited to scale p0-v2 (still refused), it leaves Deployment p0 behind, its pods in q0 still, and
    p0-v2's pods run in q0 too: invalid_holdings' `within` names both under p0's key (p0 with p0-v2, and p0 left by
    it). The controller counts them by target: both Deployments' pods are inference (never preempted), each GPU they
    run on counted once, and q0's quota holds both."""
    p0 = policy("p0", inferenceClusterQueue="q0", trainingClusterQueues=[], targetQuantlie=0.5)
    p2 = policy("p2", target={"kind": "ClusterQueue", "name": "q1"}, inferenceClusterQueue="q1",
                trainingClusterQueues=["q0"], minGpus=40)
    r = Replay(tmp_path, demand_file, p0, p2)
    r.step(AT_9)
    r.cluster.apply_policy({**p0, "spec": {**p0["spec"], "target": {"kind": "Deployment", "name": "p0-v2"}}})
    for minutes in (5, 10):
        state = r.step(AT_9 + pd.Timedelta(minutes=minutes))
        pods = [w for w in r.cluster.workloads() if w.deployment is not None]
        running = {name: sum(w.gpus for w in pods if w.deployment == name and w.running) for name in ("p0", "p0-v2")}
        assert {w.cluster_queue for w in pods} == {"q0"} and all(running.values()), running
        assert not {a.workload for a in state.actions if isinstance(a, Evict)} & {w.key for w in pods}
        quotas = r.cluster.cluster_queue_quotas()
        assert quotas["q0"] >= sum(running.values()), (quotas, running)
        assert state.policies["inference/p2"].reserved_gpus + quotas["q0"] == 128, (state.policies, quotas)
        assert r.cluster.inference["inference/p2"].waiting == 0
        assert_the_world_holds_what_the_controller_counts(r, state)


@pytest.mark.parametrize("restart", [False, True])
@pytest.mark.parametrize("said", [True, False], ids=["holdsTarget", "no-holdsTarget"])
def test_a_refused_policy_edited_off_a_target_another_held_leaves_nothing_behind(demand_file, tmp_path, restart, said):
    """held and named, both refused (a typo), name Deployment d1: held, the older, holds it, its pods in q0. named,
    edited to hold ClusterQueue q0, was counted as leaving d1 behind though it never held it, and so was it by a
    controller restarted before it planned the edit (named's status said d1 as what it held): on a cluster d1's GPUs,
    within q0's quota now (held's pods run there), were counted again beside it, idle. An edit leaves behind only what
    the policy held, as its status says (holdsTarget): nothing here. Where the status lacks holdsTarget (`said`
    False: a controller older than the field wrote it), nothing read says who held d1 but the policies themselves:
    held, the older on d1, as refused_holders decides over the policies as named's status said them before the edit
    (a restarted controller counted d1 twice). (The world runs no pods of held's own within q0, so there the
    controller reads d1 not found and forgets it: what it counts is checked before it reads.)"""
    typo, d1 = {"inferenceClusterQueue": "q1", "trainingClusterQueues": [], "targetQuantlie": 0.5}, \
        {"kind": "Deployment", "name": "d1"}
    named = policy("named", target=d1, **typo)
    r = Replay(tmp_path, demand_file, policy("chat", minGpus=40),
               policy("held", target=d1, **{**typo, "inferenceClusterQueue": "q0"}), named)
    r.step(AT_9)
    assert r.status("named")[0]["holdsTarget"] is False and r.status("held")[0]["holdsTarget"] is None
    if not said:
        r.status("named")[0]["holdsTarget"] = None  # as an older controller wrote it
    r.cluster.apply_policy({**named, "spec": {**named["spec"], "target": {"kind": "ClusterQueue", "name": "q0"}}})
    if restart:
        r.restart()
    read = identified(r.cluster.reservation_policies())  # with the statuses written before the edit
    accepted, refused = parse_policies(read, r.reconciler._specs)
    holdings = invalid_holdings(read, refused, accepted, r.reconciler._specs)
    assert holdings.left == [], [(p.key, p.spec.target.name) for p in holdings.left]
    assert [p.key for p in holdings.holders] == ["inference/named"] and [p.key for p in holdings.within] == [
        "inference/held"]
    for minutes in (5, 10):
        state = r.step(AT_9 + pd.Timedelta(minutes=minutes))
        assert r.status("named")[0]["left"] is None and r.status("named")[0]["holdsTarget"] is None
        chat, quotas = state.policies["inference/chat"], r.cluster.cluster_queue_quotas()
        assert chat.reserved_gpus + quotas["q0"] + state.slack_gpus == 128, (chat.reserved_gpus, quotas,
                                                                              state.slack_gpus)
        assert_the_world_holds_what_the_controller_counts(r, state)


def test_a_refused_policy_edited_off_a_target_another_took_leaves_nothing_behind_though_its_status_was_not_written(
        demand_file, tmp_path, monkeypatch):
    """named (refused: a typo) holds Deployment d1, its status says so. held, older and refused too, is edited from d0
    to name d1: it holds d1 now, and named holds none of it, but the status write saying so (holdsTarget: false)
    fails. named is then edited to hold ClusterQueue q0. The controller decided itself who held d1 before the edit, as
    late as that status or later: d1 is held's, not a target named left behind, though named's status, of the
    generation before the edit, says named held it (counted as named's left target too, d1's GPUs were counted
    twice)."""
    typo, d1 = {"inferenceClusterQueue": "q1", "trainingClusterQueues": [], "targetQuantlie": 0.5}, \
        {"kind": "Deployment", "name": "d1"}
    held = policy("held", target={"kind": "Deployment", "name": "d0"}, **{**typo, "inferenceClusterQueue": "q0"})
    named = policy("named", target=d1, **typo)
    r = Replay(tmp_path, demand_file, policy("chat", minGpus=40), held, named)
    r.step(AT_9)
    assert r.status("named")[0]["holding"]["target"] == d1 and r.status("named")[0]["holdsTarget"] is None
    r.cluster.apply_policy({**held, "spec": {**held["spec"], "target": d1}})
    written = r.cluster.patch_policy_status

    def fails_for_named(namespace, name, status, uid=None):
        if name == "named":
            raise ClusterError("the API server did not answer")
        return written(namespace, name, status, uid)

    monkeypatch.setattr(r.cluster, "patch_policy_status", fails_for_named)
    r.step(AT_9 + pd.Timedelta(minutes=5))
    ref = next(i.ref for i in identified(r.cluster.reservation_policies()) if i.ref.name == "named")  # its uid
    assert r.reconciler._specs.holds_target(ref) is False  # decided,
    assert r.status("named")[0]["holdsTarget"] is None and r.status("named")[0]["observedGeneration"] == 1
    r.cluster.apply_policy({**named, "spec": {**named["spec"], "target": {"kind": "ClusterQueue", "name": "q0"}}})
    for minutes in (10, 15):  # named's status still the one before the edit
        read = identified(r.cluster.reservation_policies())
        accepted, refused = parse_policies(read, r.reconciler._specs)
        holdings = invalid_holdings(read, refused, accepted, r.reconciler._specs)
        assert holdings.left == [], [(p.key, p.spec.target.name) for p in holdings.left]
        assert [p.key for p in holdings.holders] == ["inference/named"]  # q0, held's pods (of d1 and d0) within
        assert {p.key for p in holdings.within} == {"inference/held"}
        state = r.step(AT_9 + pd.Timedelta(minutes=minutes))
        assert r.status("named")[0]["observedGeneration"] == 1
        chat, quotas = state.policies["inference/chat"], r.cluster.cluster_queue_quotas()
        assert chat.reserved_gpus + quotas["q0"] + state.slack_gpus == 128, (chat.reserved_gpus, quotas,
                                                                              state.slack_gpus)


def test_a_replica_that_leads_again_counts_what_an_edit_left_by_who_held_it_as_the_leader_since_decided(
        demand_file, tmp_path, monkeypatch):
    """x led while held and named (both refused: a typo) named Deployment d1: held, the older, held it. held was
    edited to name d0 and y, leading meanwhile, decided named holds d1 now (its status says so). named is then
    edited to hold ClusterQueue q0 and x leads again: d1 runs on, left behind by named, and is counted, though x
    decided when it led that held held it (who held what as a replica decided is fresher than a status of that
    generation only while it leads on). What x forgets is who held what, not the specs it parsed: chat's, unchanged,
    is not parsed again."""
    import controller.reconcile as reconcile

    typo, d1 = {"inferenceClusterQueue": "q1", "trainingClusterQueues": [], "targetQuantlie": 0.5}, \
        {"kind": "Deployment", "name": "d1"}
    held = policy("held", target=d1, **{**typo, "inferenceClusterQueue": "q0"})
    named = policy("named", target=d1, **typo)
    r = Replay(tmp_path, demand_file, policy("chat", minGpus=40), held, named)
    x = r.reconciler
    r.step(AT_9)
    assert r.status("named")[0]["holdsTarget"] is False
    r.cluster.apply_policy({**held, "spec": {**held["spec"], "target": {"kind": "Deployment", "name": "d0"}}})
    r.restart()  # y
    r.step(AT_9 + pd.Timedelta(minutes=5))
    assert r.status("named")[0]["holdsTarget"] is None and r.status("named")[0]["observedGeneration"] == 1
    r.cluster.apply_policy({**named, "spec": {**named["spec"], "target": {"kind": "ClusterQueue", "name": "q0"}}})
    r.reconciler = x
    x.took_lead()  # as controller.loop says when x takes the Lease again
    parsed = []
    monkeypatch.setattr(reconcile, "parse_policy_spec",
                        lambda raw, where: parsed.append(where) or parse_policy_spec(raw, where))
    state = r.step(AT_9 + pd.Timedelta(minutes=10))
    assert sorted(parsed) == ["ReservationPolicy inference/held", "ReservationPolicy inference/named"]
    assert {target.name for target in r.cluster.left} == {"d1"}
    assert_the_world_holds_what_the_controller_counts(r, state)


def test_pods_of_a_refused_policy_in_a_training_queue_whose_lend_shrinks_are_held_not_reserved_again(
        demand_file, tmp_path):
    """p0, whose spec does not parse, runs its pods (40 GPUs) in q0, p2's training queue; p2 ramps up over the morning
    and lends q0 less. The plan counted the pods as held only beyond what the LAST plan lent q0: those within it but
    beyond what the new plan lends were counted nowhere, though they never leave, so p2 reserved GPUs they hold (90
    where 88 fit at 10:00 and 10:05: q0's quota 40 + 90 = 130 of 128 GPUs), a replica of p2 waiting. Each GPU they run
    on is counted once: what p2 reserves and q0's quota (what is lent and the pods beyond it) fit the cluster."""
    p0 = policy("p0", inferenceClusterQueue="q0", trainingClusterQueues=[], targetQuantlie=0.5,
                capacity={"demandPerGpu": 6.0, "gpusPerReplica": 2})
    p2 = policy("p2", target={"kind": "ClusterQueue", "name": "q1"}, inferenceClusterQueue="q1",
                trainingClusterQueues=["q0"], minGpus=40)
    r = Replay(tmp_path, demand_file, p0, p2)
    for minutes in range(0, 125, 5):
        state = r.step(AT_9 + pd.Timedelta(minutes=minutes))
        pods = sum(w.gpus for w in r.cluster.workloads() if w.deployment == "p0" and w.running)
        reserved, quota = state.policies["inference/p2"].reserved_gpus, r.cluster.cluster_queue_quotas()["q0"]
        assert pods == 40 and quota >= pods, (minutes, pods, quota)
        assert reserved + quota <= 128, (minutes, reserved, quota)
        assert r.cluster.inference["inference/p2"].waiting == 0, (minutes, reserved, quota)


def test_a_training_queue_s_quota_holds_the_pods_an_edit_left_running_in_it_so_a_restarted_one_is_admitted_again(
        demand_file, tmp_path):
    """b's pods (84 GPUs) run on in research after an edit scaled b-v2 instead, and chat lends into research: the
    queue's quota holds them, so one of them restarted is admitted again. It was what is lent, 1 GPU from 9:10 to
    10:00, the 83 beyond held (not lent nor reserved again) but kept out of it: Kueue admits a Workload within its
    queue's quota or what the cohort lends it, and b, which no one scales, would run a replica short for good. The
    quota is what is lent and what the pods hold beyond it, the split read against what the plan lent (read against
    the quota, which holds them, they would be within it, lent again, the quota down, beyond again, each reconcile)."""
    r = Replay(tmp_path, demand_file, policy("b", inferenceClusterQueue="research", trainingClusterQueues=["team-b"]))
    r.step(AT_9)
    r.cluster.apply_policy(policy("b", target={"kind": "Deployment", "name": "b-v2"}, trainingClusterQueues=["team-b"]))
    r.cluster.apply_policy(policy("chat"))
    for minutes in range(5, 65, 5):
        r.step(AT_9 + pd.Timedelta(minutes=minutes))
        pods = sum(w.gpus for w in r.cluster.workloads() if w.deployment == "b" and w.running)
        if minutes >= 15:  # (the plan sets research's quota at 9:05, read back at 9:10)
            assert r.cluster.cluster_queue_quotas()["research"] >= pods, (minutes, r.cluster.cluster_queue_quotas())


def test_a_queue_no_policy_names_keeps_what_the_pods_an_edit_left_in_it_hold(demand_file, tmp_path):
    """A training queue returned (no policy names it) where a left target's pods still run keeps what they hold. It
    went back to 0 (Reconciler._returned; it was 1 GPU, what was lent) while b's pods, of a target an edit left with
    research as its inferenceClusterQueue, ran on there as Workloads Kueue admitted (84 GPUs): a pod of b restarted
    was not admitted again. The world ran b outside Kueue once research was not lent into (left_pods {}), showing no
    pod of b there. Once b is gone, the quota comes back: research, lent 0 and holding b's 84 beyond, had the quota
    it already had, b's 84 as its inference queue, written nowhere, so its mark as lent into was not either, and
    without it no quota lent there comes back."""
    r = Replay(tmp_path, demand_file, policy("b", inferenceClusterQueue="research", trainingClusterQueues=["team-b"]))
    r.step(AT_9)
    r.cluster.apply_policy(policy("b", target={"kind": "Deployment", "name": "b-v2"}, trainingClusterQueues=["team-b"]))
    r.cluster.apply_policy(policy("chat"))
    for minutes in (5, 10):
        r.step(AT_9 + pd.Timedelta(minutes=minutes))
    r.cluster.apply_policy(policy("chat", trainingClusterQueues=["team-c"]))  # research named by no policy now
    b = TargetRef("Deployment", "b", "inference")
    for minutes in (15, 20):
        r.step(AT_9 + pd.Timedelta(minutes=minutes))
        pods = sum(w.gpus for w in r.cluster.workloads() if w.deployment == "b" and w.running and
                   w.cluster_queue == "research")
        assert pods == 84 and r.cluster.cluster_queue_quotas()["research"] == pods, (minutes, pods,
                                                                                   r.cluster.cluster_queue_quotas())
    r.cluster.delete_target(b)
    r.step(AT_9 + pd.Timedelta(minutes=25))
    assert r.cluster.cluster_queue_quotas()["research"] == 0 and "research" not in r.cluster.lent_quotas()


def test_fallback_active_says_the_fallback_hour_the_lead_time_reserves_for(demand_file, tmp_path):
    """A forecast of two hours (run.horizon_hours 2) made at 07:00, then Prometheus down: at 08:50 the 09:00 hour, past
    the forecast's end, is in force (its lead time begun) at last week's peak, the morning's rise. FallbackActive said
    False and the reason 'forecast reservation' (the step took the source of the hour now), though the reservation is
    the fallback's; True now, its message that hour's."""
    demand = FailingDemand(FileDemand({"inference/chat": demand_file}))
    r = Replay(tmp_path, demand_file, demand=demand, run={"horizon_hours": 2, "keep_forecast_seconds": 3 * 3600})
    made = r.step(MONDAY_6AM + pd.Timedelta(hours=1)).policies["inference/chat"]  # 07:00
    assert not made.fallback
    demand.fail = True
    r.step(MONDAY_6AM + pd.Timedelta(hours=2, minutes=30))
    late = r.step(MONDAY_6AM + pd.Timedelta(hours=2, minutes=50)).policies["inference/chat"]
    assert late.model == made.model and late.fallback
    assert late.step.reason.startswith(f"{late.reserved_gpus} GPUs: fallback reservation")
    assert not late.hours.from_forecast[late.step.period]
    _, conditions = r.status()
    assert conditions["FallbackActive"]["status"] == "True"
    assert conditions["FallbackActive"]["message"].startswith("fallback (forecast missing, NaN or negative): ")
