"""What refused ReservationPolicies hold beside the accepted ones, as core.policy.refused_holders counts it (and
pods_queues, where the pods of those holding nothing run), against what a cluster holds (hypothesis): a Deployment's
pods are Workloads of the ClusterQueue its pods are labelled for (the inferenceClusterQueue every policy on it names),
within that queue's quota; a ClusterQueue target holds its quota; a training queue's quota is what the accepted
policies lend. Whatever the policies name and whatever their age order, no GPU is counted twice, and no refused
policy's holding goes uncounted (lent as idle while its pods hold it). A queue's quota and the pods in it differ: the
queue holds its quota whole, or its pods where Kueue let them borrow beyond it, so the GPUs counted are those a
cluster holds in either age order. So too with targets edits left behind (a policy named another since): each runs
on, held as a refused policy's target is, by no claim."""
from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from core.objects import TargetRef
from core.policy import Claims, PolicySpec, pods_queues, refused_holders, refused_lends

DEPLOYMENTS, QUEUES = ("d0", "d1", "d2"), ("q0", "q1", "q2")
NAMESPACE = "inference"

# a policy: its target's name (d*: a Deployment, q*: a ClusterQueue), its training queues, and whether its spec
# parses (one that does not is refused, holding what its spec still says)
policies = st.lists(st.tuples(st.sampled_from(DEPLOYMENTS + QUEUES), st.lists(st.sampled_from(QUEUES), max_size=2,
                                                                                unique=True), st.booleans()),
                    max_size=6)
labels = st.fixed_dictionaries({d: st.sampled_from((None, *QUEUES)) for d in DEPLOYMENTS})
# the targets edits left behind, each with the spec it was held by (its pods labelled as any policy on it says)
lefts = st.lists(st.sampled_from(DEPLOYMENTS + QUEUES), max_size=3, unique=True)
# the GPUs each ClusterQueue's quota and each Deployment's pods hold
gpus = st.fixed_dictionaries({("queue", q): st.integers(0, 32) for q in QUEUES} |
                             {("pods", d): st.integers(0, 32) for d in DEPLOYMENTS})


def target_of(name: str) -> TargetRef:
    return TargetRef("Deployment", name, NAMESPACE) if name.startswith("d") else TargetRef("ClusterQueue", name)


def spec_of(name: str, training: list[str], label: str | None) -> PolicySpec:
    """A policy on `name`, its pods (a Deployment's) in the queue they are labelled for, lending into `training`
    (but that queue or its target: a spec refuses those)."""
    kind = "Deployment" if name.startswith("d") else "ClusterQueue"
    inference = label if kind == "Deployment" else None
    return PolicySpec.model_validate({"query": "-", "capacity": {"demandPerGpu": 1.0},
                                      "target": {"kind": kind, "name": name}, "inferenceClusterQueue": inference,
                                      "trainingClusterQueues": [q for q in training if q not in (inference, name)]})


def holding(target: TargetRef) -> tuple[str, str]:
    """What a target holds on a cluster: a ClusterQueue's quota, or a Deployment's pods."""
    return ("queue", target.name) if target.kind == "ClusterQueue" else ("pods", target.name)


def within(held: tuple[str, str], label: dict[str, str | None]) -> tuple[str, str] | None:
    """The quota a holding's GPUs are within: a Deployment's pods, their ClusterQueue's (Kueue admits them there)."""
    queue = label[held[1]] if held[0] == "pods" else None
    return ("queue", queue) if queue else None


def held_gpus(holdings: set[tuple[str, str]], pods: set[tuple[str, str]], label: dict[str, str | None],
              gpus: dict[tuple[str, str], int]) -> int:
    """The GPUs `holdings` hold: a queue its quota, or the `pods` within it where they borrow beyond it; pods of their
    own where no queue of `holdings` holds them."""
    total = 0
    for held in holdings:
        if held[0] == "queue":
            total += max(gpus[held], sum(gpus[p] for p in pods if within(p, label) == held))
        elif within(held, label) not in holdings:
            total += gpus[held]
    return total


IN_Q0 = {"d0": "q0", "d1": None, "d2": None}


@settings(max_examples=500, deadline=None)
@example([("q0", [], False), ("d0", [], False)], IN_Q0, {}, [])  # the newer's pods in its quota
@example([("d0", [], False), ("q0", [], False)], IN_Q0, {}, [])  # ...the older's
@example([("d0", [], False), ("q0", [], False)], IN_Q0, {("queue", "q0"): 16, ("pods", "d0"): 8}, [])  # ...quota above
@example([("q0", [], False), ("d0", [], False)], IN_Q0, {("queue", "q0"): 4, ("pods", "d0"): 8}, [])  # ...pods beyond
@example([("q0", [], True), ("d0", [], False)], IN_Q0, {}, [])  # ...an accepted policy's target
@example([("d1", ["q0"], True), ("d0", [], True)], IN_Q0, {}, [])  # ...a queue lent into
@example([("d0", [], False)], IN_Q0, {("queue", "q0"): 16, ("pods", "d0"): 8}, ["q0"])  # ...a queue an edit left
@example([("q0", [], False)], IN_Q0, {("queue", "q0"): 4, ("pods", "d0"): 8}, ["d0"])  # ...pods an edit left in one
@example([("d1", ["q0"], False)], IN_Q0, {}, ["d0"])  # ...pods an edit left in a queue a refused policy lends into
@given(policies, labels, gpus, lefts)
def test_each_gpu_a_refused_policy_holds_is_counted_once(drawn, label, gpus, left):
    gpus = {h: gpus.get(h, 8) for h in [("queue", q) for q in QUEUES] + [("pods", d) for d in DEPLOYMENTS]}
    kept, refused, claims = [], [], Claims()
    for k, (name, training, parses) in enumerate(drawn):
        target, spec = target_of(name), spec_of(name, training, label.get(name))
        if parses and claims.take(f"{NAMESPACE}/p{k}", target, spec) is None:
            kept.append((target, spec))
        else:
            refused.append((target, spec))
    inference = {q for _, spec in kept + refused for q in spec.inference_queues}
    lent_by_refused = {q for _, spec in refused for q in refused_lends(spec, inference)}
    refused += [(target_of(name), spec_of(name, [], label.get(name))) for name in left]  # after the refused ones
    holds = refused_holders(kept, refused, lent_by_refused)
    counted = [holding(target) for target, _ in kept] + \
        [holding(target) for (target, _), own in zip(refused, holds) if own]
    # no GPU counted twice: each holding once, and no pods counted within a quota counted too, nor within one lent
    lent = {("queue", q) for _, spec in kept for q in spec.training_cluster_queues} | \
        {("queue", q) for q in lent_by_refused}
    assert len(counted) == len(set(counted)), counted
    assert not {within(h, label) for h in counted} & (set(counted) | lent), (counted, lent, label)
    # no refused policy's or left target's holding uncounted: it is counted, within one counted or lent, or is a queue
    # whose quota an accepted policy sets, or headroom lends into
    kept_queues = {q for _, spec in kept for q in spec.inference_queues | set(spec.training_cluster_queues)}
    accepted = {holding(target) for target, _ in kept}
    on_cluster = set()  # what the refused policies and left targets hold on a cluster beside the accepted ones
    for target, _ in refused:
        held = holding(target)
        assert (held in set(counted) | lent or within(held, label) in set(counted) | lent
                or held[0] == "queue" and held[1] in kept_queues), (held, counted, kept_queues)
        if not (held in accepted | lent or within(held, label) in accepted | lent
                or held[0] == "queue" and held[1] in kept_queues):
            on_cluster.add(held)
    # ...and the GPUs counted, a held ClusterQueue's with the pods of the others within it (the controller's
    # count: controller.reconcile._held_by), are those the cluster holds, whichever policy is older
    mine = {h for h in counted if h not in accepted}
    pods_within = {holding(target) for (target, _), own in zip(refused, holds) if not own} - set(counted)
    assert held_gpus(mine, pods_within, label, gpus) == held_gpus(on_cluster, on_cluster, label, gpus), \
        (mine, on_cluster, gpus)
    # the pods held by none of them run in the queue they are labelled for, each Deployment's said once (by the oldest
    # naming it): the queue the embedded cluster runs them in, and the controller counts them within (pods_queues)
    running = [(holding(target), queue) for (target, _), queue in zip(refused, pods_queues(kept, refused, holds))
               if queue is not None]
    assert sorted(running) == sorted((h, label[h[1]]) for h in pods_within if h[0] == "pods"), (running, pods_within)
