"""What an SRE deploying headroom for the first time meets, walking docs/deploy.md against the real kube-apiserver 1.20
(Kueue v0.19.2's genuine CRDs) and a real Prometheus: each test is a step of that walk that once went wrong."""
from __future__ import annotations

import pandas as pd
from hypothesis import given
from hypothesis import strategies as st

from tests.servers import kueue
from tests.test_run_real import (  # noqa: F401 -- fixtures: kube (the cohort, chat's Deployment and policy), controller
    COHORT,
    MONDAY_7AM,
    NS,
    QUEUE,
    RP,
    controller,
    deployment,
    kube,
    policy,
    reconciler,
    rp_status,
)


def lone(name: str, queues: list[str]) -> dict:
    """A policy lending to `queues`, with no inference ClusterQueue (its pods run in none)."""
    body = policy(name, trainingClusterQueues=queues)
    del body["spec"]["inferenceClusterQueue"]
    return body


def test_a_misspelt_training_queue_takes_no_share_of_the_slack(kube, controller, prometheus_server,  # noqa: F811
                                                               tmp_path):
    """A second policy naming a training ClusterQueue that does not exist ("research-rn") once had the slack split
    with it: the queue that exists got half, the other half went to no one (walked: 15 of 47 lendable GPUs idle with
    two real teams), and the plan summary's slackGpus fell below the slack the plan lends. The queues that exist share
    all of it, and the policy naming the missing one says which field to correct."""
    kube.create(f"/apis/apps/v1/namespaces/{NS}/deployments", deployment("typo"))
    kube.create(RP, lone("typo", []))
    controller.sync()
    r = reconciler(controller, prometheus_server.url, tmp_path)
    state = r.reconcile(MONDAY_7AM)
    alone = kube.get_cluster_queue_quota(QUEUE)
    assert alone > 0 and state.slack_gpus == alone
    kube.apply(f"{RP}/typo", lone("typo", ["research-rn"]))
    controller.sync()
    state = r.reconcile(MONDAY_7AM)  # the same moment: the same reservations, the same slack to lend
    assert kube.get_cluster_queue_quota(QUEUE) == alone == state.slack_gpus
    assert int(kube.plan_summary(NS).read()["slackGpus"]) == alone
    _, conditions = rp_status(kube, "typo")
    assert (conditions["Ready"]["status"], conditions["Ready"]["reason"]) == ("False", "QueueMissing"), conditions
    assert conditions["Ready"]["message"].startswith("QueueMissing: spec.trainingClusterQueues[0]: ClusterQueue "
                                                     "research-rn not found"), conditions["Ready"]
    assert not any(state.reconcile_errors_total.values()), state.reconcile_errors_total  # nothing written in vain
    _, chat = rp_status(kube)
    assert chat["Ready"]["status"] == "True"
    # created, the queue takes its share from the next reconcile on, and the policy is Ready again
    kube.apply(kueue.path("clusterqueues", "research-rn"), kueue.cluster_queue("research-rn", gpus=0, cohort=COHORT))
    try:
        controller.sync()
        state = r.reconcile(MONDAY_7AM + pd.Timedelta(minutes=5))
        shares = kube.get_cluster_queue_quota(QUEUE), kube.get_cluster_queue_quota("research-rn")
        assert min(shares) > 0 and sum(shares) == state.slack_gpus, (shares, state.slack_gpus)
        assert rp_status(kube, "typo")[1]["Ready"]["status"] == "True"
    finally:
        kube.delete(kueue.path("clusterqueues", "research-rn"))


def test_a_missing_inference_queue_names_its_field(kube, controller, prometheus_server, tmp_path):  # noqa: F811
    """A policy's inferenceClusterQueue that does not exist was said as the failed write's request line
    ('ClusterQueue x: GET /apis/...: HTTP 404'), not as the field to correct."""
    kube.create(f"/apis/apps/v1/namespaces/{NS}/deployments", deployment("serving"))
    kube.create(RP, policy("serving", trainingClusterQueues=[], inferenceClusterQueue="inference-rn"))
    controller.sync()
    state = reconciler(controller, prometheus_server.url, tmp_path).reconcile(MONDAY_7AM)
    _, conditions = rp_status(kube, "serving")
    assert (conditions["Ready"]["status"], conditions["Ready"]["reason"]) == ("False", "QueueMissing"), conditions
    assert conditions["Ready"]["message"].startswith("QueueMissing: spec.inferenceClusterQueue: ClusterQueue "
                                                     "inference-rn not found"), conditions["Ready"]
    assert not any(state.reconcile_errors_total.values()), state.reconcile_errors_total
    assert state.policies[f"{NS}/serving"].reserved_gpus > 0  # planned and scaled all the same


def spec(**fields) -> dict:
    """A policy object of `fields` over a valid spec (parse_policies' input: as the API server lists it)."""
    body = {"query": "up", "capacity": {"demandPerGpu": 10.0, "gpusPerReplica": 1},
            "target": {"kind": "Deployment", "name": "chat"}, "trainingClusterQueues": ["research"], **fields}
    return {"apiVersion": "headroom.dev/v1alpha1", "kind": "ReservationPolicy",
            "metadata": {"name": "p", "namespace": "inference", "generation": 1}, "spec": body}


# the checks comparing fields (the CRD's schema admits every one: kube-apiserver 1.20 has no CEL), each with the
# field it asks to correct and a spec that breaks it alone
CROSS_FIELD = {
    "spec.headroomQuantile": {"targetQuantile": 0.99, "headroomQuantile": 0.9},
    "spec.maxGpus": {"minGpus": 10, "maxGpus": 5},
    "spec.inferenceClusterQueue": {"inferenceClusterQueue": "research"},
    "spec.target.name": {"target": {"kind": "ClusterQueue", "name": "research"}},
}


@given(broken=st.sets(st.sampled_from(sorted(CROSS_FIELD)), min_size=1))
def test_checks_comparing_fields_name_each_field_and_count_each_error(broken):
    """Walked: a policy breaking two such checks said 'spec: headroomQuantile must be at least targetQuantile; maxGpus
    must be at least minGpus' in its Ready condition and Event: one error at the path `spec`, where an InvalidSpec of
    several says how many and names every field path first (as it does for the fields' own checks)."""
    from controller.reconcile import identified, parse_policies

    fields: dict = {}
    for path in sorted(broken):
        fields.update(CROSS_FIELD[path])
    _, invalid = parse_policies(identified([spec(**fields)]))
    (message,) = invalid.values()
    said = [error.partition(": ")[0] for error in message.split("; ")]
    if len(broken) == 1:
        assert said == list(broken), message
    else:
        head = f"{len(broken)} errors in the spec ("
        assert message.startswith(head), message
        assert set(message[len(head):].split(")")[0].split(", ")) == broken, message


# fields each breaking its own check, none read by a check comparing fields (each breaks alone whatever else does)
FIELD = {
    "spec.timezone": {"timezone": "Mars/Base"},
    "spec.statistic": {"statistic": "median"},
    "spec.leadTime": {"leadTime": "1d"},
    "spec.warmBuffer": {"warmBuffer": -1.0},
    "spec.capacity.demandPerGpu": {"capacity": {"demandPerGpu": 0.0, "gpusPerReplica": 1}},
}


@given(own=st.sets(st.sampled_from(sorted(FIELD)), min_size=1),
       compared=st.sets(st.sampled_from(sorted(CROSS_FIELD)), min_size=1), null=st.booleans())
def test_a_spec_with_both_kinds_of_error_names_every_one_at_once(own, compared, null):
    """`timezone: Mars/Base` with maxGpus below minGpus said only the timezone: pydantic skips a model's checks once
    a field failed, so the maxGpus error appeared only after the user fixed the first. Every error is named in one
    round."""
    from controller.reconcile import identified, parse_policies

    fields: dict = {}
    for path in sorted(own | compared):
        fields.update({**FIELD, **CROSS_FIELD}[path])
    if null and "spec.headroomQuantile" in compared:  # a null targetQuantile is unset: its default 0.9 is compared
        fields.update(targetQuantile=None, headroomQuantile=0.5)
    _, invalid = parse_policies(identified([spec(**fields)]))
    (message,) = invalid.values()
    head = f"{len(own | compared)} errors in the spec ("
    assert message.startswith(head), message
    assert set(message[len(head):].split(")")[0].split(", ")) == own | compared, message
