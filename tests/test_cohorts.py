"""controller.cohorts: who lends the training ClusterQueues GPUs beside headroom, over Kueue's cohort trees.

The invariant is checked against Kueue's own arithmetic, written here independently of controller.cohorts: a
node's SubtreeQuota, guaranteedQuota and potentialAvailable (the capacity a ClusterQueue can reach with nothing in
use), as Kueue's scheduler cache computes them. headroom's lending is the training queues' nominalQuota; with it
taken away, a training queue can still reach GPUs exactly when something else lends them."""
from __future__ import annotations

from dataclasses import replace

from hypothesis import example, given, settings
from hypothesis import strategies as st

from adapters.kube import quota_node
from controller.cohorts import CohortCheck, cohort_lenders
from controller.reconcile import Reconciler, headroom_condition, identified, parse_policies, within_queue_preemptors
from core.objects import EVENT_MESSAGE_CHARS, GpuQuota, QuotaNode, WorkloadInfo, event_message
from core.settings import RunConfig

FLAVORS = ("a100", "h100")
COHORTS = ("c0", "c1", "c2", "c3")
MISSING = "gone"  # a cohort named as a parent or a cohortName, with no Cohort object


def cq(name: str, cohort: str | None, gpus: int = 8, borrowing: int | None = None, lending: int | None = None,
       flavor: str = "a100") -> QuotaNode:
    return QuotaNode("ClusterQueue", name, cohort, {flavor: GpuQuota(gpus, borrowing, lending)})


def cohort(name: str, parent: str | None = None, gpus: int | None = None, borrowing: int | None = None,
           lending: int | None = None) -> QuotaNode:
    quota = {} if gpus is None else {"a100": GpuQuota(gpus, borrowing, lending)}
    return QuotaNode("Cohort", name, parent, quota)


def said(check: CohortCheck) -> list[tuple[str, str, int, str, tuple[str, ...]]]:
    return [(x.kind, x.name, x.gpus, x.cohort, x.path) for x in check.lenders]


# ---------------------------------------------------------------------------- Kueue's arithmetic (pkg/cache)
class Kueue:
    """Kueue's resource tree arithmetic with no usage, for one flavor: SubtreeQuota, guaranteedQuota and
    potentialAvailable, over ClusterQueues and Cohorts (a cohort only named is an empty root)."""

    def __init__(self, nodes: list[QuotaNode], flavor: str):
        self.flavor = flavor
        self.cohorts = {n.name: n for n in nodes if n.kind == "Cohort"}
        for n in nodes:
            if n.parent is not None and n.parent not in self.cohorts:
                self.cohorts[n.parent] = QuotaNode("Cohort", n.parent, None, {})  # Kueue's default Cohort
        self.children: dict[str, list[QuotaNode]] = {}
        for n in [*nodes, *self.cohorts.values()]:
            if n.parent is not None and n not in self.children.get(n.parent, []):
                self.children.setdefault(n.parent, []).append(n)

    def quota(self, node: QuotaNode) -> GpuQuota | None:
        return node.gpus.get(self.flavor)

    def subtree(self, node: QuotaNode) -> int:
        q = self.quota(node)
        total = q.nominal if q else 0
        if node.kind == "Cohort":
            total += sum(self.subtree(c) - self.guaranteed(c) for c in self.children.get(node.name, []))
        return total

    def guaranteed(self, node: QuotaNode) -> int:
        q = self.quota(node)
        return max(0, self.subtree(node) - q.lending_limit) if q and q.lending_limit is not None else 0

    def potential(self, node: QuotaNode) -> int:
        if node.parent is None:
            return self.subtree(node)
        available = self.guaranteed(node) + self.potential(self.cohorts[node.parent])
        q = self.quota(node)
        if q and q.borrowing_limit is not None:
            available = min(self.subtree(node) + q.borrowing_limit, available)
        return available


def loops(nodes: list[QuotaNode], queue: QuotaNode) -> bool:
    """The queue's parent chain never reaches a root: after as many steps as there are cohorts, it still goes on."""
    parents = {n.name: n.parent for n in nodes if n.kind == "Cohort"}
    at = queue.parent
    for _ in range(len(parents) + 1):
        if at is None:
            return False
        at = parents.get(at)
    return at is not None


# ---------------------------------------------------------------------------- random small trees
limits = st.sampled_from([None, None, 0, 0, 1, 3])  # 0 often: the limit that closes a way is the one that matters
nominals = st.sampled_from([0, 0, 1, 4])


@st.composite
def quotas(draw) -> dict[str, GpuQuota]:
    flavors = draw(st.sampled_from([("a100",), ("a100",), FLAVORS, ("h100",), ()]))
    return {f: GpuQuota(draw(nominals), draw(limits), draw(limits)) for f in flavors}


@st.composite
def trees(draw) -> tuple[list[QuotaNode], set[str]]:
    objects = [c for c in COHORTS if draw(st.sampled_from([True, True, True, False]))]
    nodes = []
    for c in objects:  # mostly a tree, its roots at the end; sometimes any parent (a loop, a missing one)
        above = st.sampled_from([None, *COHORTS[COHORTS.index(c) + 1:]])
        parent = draw(st.one_of(above, above, st.sampled_from([None, *COHORTS, MISSING])))
        nodes.append(QuotaNode("Cohort", c, parent, draw(quotas())))
    queues = [f"q{i}" for i in range(draw(st.integers(1, 5)))]
    nodes += [QuotaNode("ClusterQueue", q, draw(st.sampled_from([*COHORTS, MISSING])), draw(quotas()))
              for q in queues]
    training = set(draw(st.lists(st.sampled_from(queues), min_size=1, unique=True)))
    return nodes, training


def without_headroom(nodes: list[QuotaNode], training: set[str]) -> list[QuotaNode]:
    """The tree with headroom's lending taken away: the training queues' nominalQuota 0 (their limits kept)."""
    return [QuotaNode(n.kind, n.name, n.parent, {f: GpuQuota(0, q.borrowing_limit, q.lending_limit)
                                                  for f, q in n.gpus.items()})
            if n.kind == "ClusterQueue" and n.name in training else n for n in nodes]


@settings(max_examples=400, deadline=None)
@given(trees())
def test_at_risk_exactly_when_something_besides_headroom_reaches_a_training_queue(tree):
    nodes, training = tree
    check = cohort_lenders(nodes, training)
    trained = [n for n in nodes if n.kind == "ClusterQueue" and n.name in training and n.parent is not None]
    looping = [q for q in trained if loops(nodes, q)]
    assert {chain[0] for chain in check.loops} == {q.parent for q in looping}
    for chain in check.loops:  # each named from the training cohort round to the cohort it comes back to
        assert chain[-1] in chain[:-1]
    bare = without_headroom(nodes, training)
    reach = {(q.name, f): Kueue(bare, f).potential(bare[nodes.index(q)]) for q in trained if q not in looping
             for f in q.gpus}
    reached = {q.parent for q in trained if q not in looping and any(reach[q.name, f] > 0 for f in q.gpus)}
    assert {lender.cohort for lender in check.lenders} == reached, (reach, said(check))
    # the GPUs named are never fewer than Kueue would let a training queue borrow
    named: dict[str, int] = {}
    for lender in check.lenders:
        named[lender.cohort] = named.get(lender.cohort, 0) + lender.gpus
        assert lender.gpus > 0 and lender.path[-1] == lender.cohort and lender.fix
        assert len(set(lender.path)) == len(lender.path)  # up to the first cohort shared, then down: none twice
        assert lender.kind == "Cohort" or lender.name not in training  # headroom's own lending is never named
    for q in trained:
        if q not in looping:
            assert all(reach[q.name, f] <= named.get(q.parent, 0) for f in q.gpus)
    # a cohort that loops is named, not walked for ever; the condition says which, and never crashes
    condition = headroom_condition(40, 30, 30, 50, check)
    assert condition.reason == ("CohortLends" if check.lenders else "CohortCycle" if check.loops
                                else "HeadroomCovered")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(COHORTS), st.integers(0, 4), limits), min_size=1, max_size=6),
       st.data())
def test_without_cohort_objects_the_lenders_are_the_queues_of_the_training_cohorts(queues, data):
    """No Cohort object, one flavor, no borrowingLimit: exactly the ClusterQueues that share a training queue's
    cohortName and lend it something (lendingLimit, else nominalQuota, above 0), as before Cohorts were read."""
    nodes = [cq(f"q{i}", c, gpus, lending=lending if lending is None else min(lending, gpus))  # Kueue's webhook
             for i, (c, gpus, lending) in enumerate(queues)]                                    # refuses more
    training = set(data.draw(st.lists(st.sampled_from([n.name for n in nodes]), min_size=1, unique=True)))
    cohorts = {n.parent for n in nodes if n.name in training}
    lent = {n.name: n.gpus["a100"].lending_limit if n.gpus["a100"].lending_limit is not None
            else n.gpus["a100"].nominal for n in nodes}
    before = sorted(("ClusterQueue", n.name, lent[n.name], n.parent, (n.parent,))
                    for n in nodes if n.parent in cohorts and n.name not in training and lent[n.name] > 0)
    assert said(cohort_lenders(nodes, training)) == before


# ---------------------------------------------------------------------------- the cases, by name
def test_a_parent_with_quota_lends_into_the_training_cohort_and_is_named_with_the_chain():
    tree = [cq("train", "pool"), cq("serve", "pool", lending=0), cohort("pool", parent="org"),
            cohort("org", gpus=32), cq("batch", "pool", gpus=4)]
    check = cohort_lenders(tree, {"train"})
    assert said(check) == [("ClusterQueue", "batch", 4, "pool", ("pool",)),
                           ("Cohort", "org", 32, "pool", ("org", "pool"))]
    message = headroom_condition(40, 30, 30, 50, check).message
    assert ("Cohort org's own nominalQuota lends up to 32 GPUs into cohort pool through cohorts org -> pool "
            "(remove Cohort pool's parentName or set its GPU borrowingLimit to 0)") in message
    assert "ClusterQueue batch lends up to 4 GPUs into cohort pool (set its GPU lendingLimit to 0)" in message


def test_a_sibling_subtree_lends_up_through_its_cohort_and_down_to_the_training_cohort():
    tree = [cq("train", "pool"), cohort("pool", parent="org"), cohort("org"), cohort("side", parent="org"),
            cq("other", "side", gpus=16, lending=6)]
    check = cohort_lenders(tree, {"train"})
    assert said(check) == [("ClusterQueue", "other", 6, "pool", ("side", "org", "pool"))]
    assert check.lenders[0].fix == ("set Cohort side's GPU lendingLimit to 0 or remove Cohort side's parentName or "
                                    "remove Cohort pool's parentName or set its GPU borrowingLimit to 0")
    # lendingLimit 0 on the sibling cohort, or a cap on what it lends, is what reaches the training cohort
    closed = [n if n.name != "side" else cohort("side", parent="org", gpus=0, lending=0) for n in tree]
    assert cohort_lenders(closed, {"train"}) == CohortCheck(cohorts=frozenset({"pool", "org", "side"}))
    capped = [n if n.name != "side" else cohort("side", parent="org", gpus=0, lending=2) for n in tree]
    assert said(cohort_lenders(capped, {"train"}))[0][2] == 2


def test_lending_limit_0_on_the_training_cohort_does_not_stop_its_parent_lending_down():
    """A Cohort's lendingLimit caps what its subtree lends its parent, not what it borrows: the fix for an
    ancestor's quota is no parent (or a borrowingLimit of 0), and for a sibling's, its lendingLimit 0."""
    tree = [cq("train", "pool"), cohort("pool", parent="org", gpus=0, lending=0), cohort("org", gpus=32)]
    assert said(cohort_lenders(tree, {"train"})) == [("Cohort", "org", 32, "pool", ("org", "pool"))]
    no_borrowing = [cq("train", "pool"), cohort("pool", parent="org", gpus=0, borrowing=0), cohort("org", gpus=32)]
    assert not cohort_lenders(no_borrowing, {"train"}).lenders
    # the training cohort's lendingLimit 0 keeps its queues' quota from a parent shared with others, as headroom wants
    lent_out = [cq("train", "pool"), cohort("pool", parent="org", gpus=0, lending=0), cohort("org"),
                cq("team", "org", gpus=0)]
    assert not cohort_lenders(lent_out, {"train"}).lenders


def test_a_cohort_with_its_own_nominal_quota_lends_to_its_queues_whatever_its_lending_limit():
    check = cohort_lenders([cq("train", "pool"), cohort("pool", gpus=12)], {"train"})
    assert said(check) == [("Cohort", "pool", 12, "pool", ("pool",))]
    assert "Cohort pool's own nominalQuota lends up to 12 GPUs into cohort pool (remove its GPU nominalQuota" \
        in check.lenders_said()


def test_only_the_flavors_a_training_queue_lists_and_a_borrowing_limit_of_0_borrow_nothing():
    elsewhere = [cq("train", "pool"), cq("h100s", "pool", flavor="h100")]
    assert not cohort_lenders(elsewhere, {"train"}).lenders  # Kueue borrows only in the queue's own flavors
    assert not cohort_lenders([cq("train", "pool", borrowing=0), cq("serve", "pool")], {"train"}).lenders


def test_a_parent_chain_that_loops_is_named_not_walked_for_ever():
    tree = [cq("train", "pool"), cohort("pool", parent="a"), cohort("a", parent="b", gpus=8), cohort("b", parent="a")]
    check = cohort_lenders(tree, {"train"})
    assert check.loops == (("pool", "a", "b", "a"),) and not check.lenders
    condition = headroom_condition(40, 30, 30, 50, check)
    assert (condition.status, condition.reason) == ("True", "CohortCycle")
    assert "cohort pool's parentName chain loops: pool -> a -> b -> a" in condition.message
    assert cohort_lenders([cq("train", "self"), cohort("self", parent="self")], {"train"}).loops == (("self", "self"),)


def test_a_parent_without_a_cohort_object_is_kueue_s_default_cohort():
    """Kueue: a parentName naming no Cohort means a cohort with no quota and no limits, which still joins
    everything that names it."""
    alone = [cq("train", "pool"), cohort("pool", parent=MISSING)]
    assert cohort_lenders(alone, {"train"}) == CohortCheck(cohorts=frozenset({"pool"}))
    shared = [*alone, cq("stray", MISSING, gpus=4)]
    check = cohort_lenders(shared, {"train"})
    assert said(check) == [("ClusterQueue", "stray", 4, "pool", (MISSING, "pool"))]
    assert f"through cohorts {MISSING} (no Cohort object) -> pool" in check.lenders_said()


def test_the_adapter_reads_cohorts_and_cluster_queues_as_tree_nodes():
    obj = {"metadata": {"name": "org"},
           "spec": {"parentName": "root", "resourceGroups": [{"coveredResources": ["cpu", "nvidia.com/gpu"],
                                                              "flavors": [{"name": "a100", "resources": [
                                                                  {"name": "cpu", "nominalQuota": "64"},
                                                                  {"name": "nvidia.com/gpu", "nominalQuota": "8",
                                                                   "lendingLimit": "500m"}]}]}]}}
    assert quota_node(obj, "Cohort") == QuotaNode("Cohort", "org", "root", {"a100": GpuQuota(8, None, 1)})
    assert quota_node({"metadata": {"name": "q"}, "spec": {"cohortName": "org"}}, "ClusterQueue") == \
        QuotaNode("ClusterQueue", "q", "org", {})
    assert quota_node({"metadata": {"name": "root"}}, "Cohort").parent is None


RECLAIMS = "spec.preemption.reclaimWithinCohort: Any"


def reclaiming(name: str, cohort: str | None, setting: str = RECLAIMS) -> QuotaNode:
    return QuotaNode("ClusterQueue", name, cohort, {"a100": GpuQuota(8, None, 0)}, setting)  # it lends nothing


def test_a_queue_letting_kueue_reclaim_from_another_training_queue_of_its_cohort_is_named():
    """Kueue preempts a borrowing queue's Workloads (a training queue headroom left above its quota) for a queue of
    the same cohort whose reclaimWithinCohort is not Never: named with its field and the fix; one whose only other
    queues are not training, or in another cohort, stops no training of headroom's."""
    tree = [cq("research", "pool"), reclaiming("batch", "pool"), cq("inference", "pool", lending=0),
            reclaiming("elsewhere", "other"), cq("solo", "alone"), reclaiming("alone-b", "alone")]
    check = cohort_lenders(tree, {"research", "batch", "solo-not-here"})
    assert [(r.name, r.cohort, r.queues) for r in check.reclaimers] == [("batch", "pool", ("research",))]
    # a training queue that reclaims stops the others, not itself; alone in its cohort, it stops nothing
    assert cohort_lenders([reclaiming("batch", "pool")], {"batch"}).reclaimers == ()
    condition = headroom_condition(40, 30, 30, 50, check)
    assert (condition.status, condition.reason) == ("False", "CohortReclaims")
    assert ("ClusterQueue batch has spec.preemption.reclaimWithinCohort: Any (set its reclaimWithinCohort to Never, "
            "and no borrowWithinCohort): Kueue preempts the Workloads of ClusterQueue research whenever headroom "
            "lowers its nominalQuota under what it runs") in condition.message
    assert condition.message.endswith("; both are of cohort pool")
    # what outranks it (the headroom itself at risk) is said first
    assert headroom_condition(20, 30, 30, 50, check).reason == "ReclaimableBelowHeadroom"


def root(nodes: list[QuotaNode], queue: QuotaNode) -> str | None:
    """The root of the queue's tree of Cohorts, as Kueue's cache finds it (None: in no cohort, or a tree that loops,
    which Kueue disables)."""
    if queue.parent is None or loops(nodes, queue):
        return None
    parents = {n.name: n.parent for n in nodes if n.kind == "Cohort"}
    at = queue.parent
    while parents.get(at) is not None:
        at = parents[at]
    return at


@st.composite
def reclaiming_trees(draw) -> tuple[list[QuotaNode], set[str]]:
    nodes, training = draw(trees())
    return [replace(n, reclaims=draw(st.sampled_from([None, RECLAIMS]))) if n.kind == "ClusterQueue" else n
            for n in nodes], training


@settings(max_examples=300, deadline=None)
@given(reclaiming_trees())
def test_a_reclaiming_queue_is_named_for_exactly_the_training_queues_of_its_cohort_tree(tree):
    """Kueue v0.19's preemptor looks for candidates from its cohort up to the root of its tree, in every subtree
    holding more than its quota (pkg/scheduler/preemption/classical: PathParentToRoot; Parent().Root() under Fair
    Sharing): a training queue headroom leaves above its quota can be preempted by any reclaiming queue of its tree,
    none of another tree, of no tree (no cohortName) or of a tree that loops. The way named goes from the reclaimer's
    cohort up to the first cohort shared, then down to the training queue's, each step a parentName."""
    nodes, training = tree
    queues = [n for n in nodes if n.kind == "ClusterQueue"]
    check = cohort_lenders(nodes, training)
    named = {(r.name, t) for r in check.reclaimers for t in r.queues}
    assert named == {(r.name, t.name) for r in queues for t in queues
                     if r.reclaims and t.name in training and t is not r and root(nodes, r) is not None
                     and root(nodes, r) == root(nodes, t)}
    parents = {n.name: n.parent for n in nodes if n.kind == "Cohort"}
    for r in check.reclaimers:
        assert len(r.ways) == len(r.queues) == len(r.down)
        assert r.cohort == next(q.parent for q in queues if q.name == r.name)
        for t, way, down in zip(r.queues, r.ways, r.down):
            assert way[0] == r.cohort and way[-1] == next(q.parent for q in queues if q.name == t)
            assert len(set(way)) == len(way)
            top = next((i for i in range(len(way) - 1) if parents.get(way[i]) != way[i + 1]), len(way) - 1)
            assert all(parents.get(way[j + 1]) == way[j] for j in range(top, len(way) - 1))  # up, then down
            assert down == way[top + 1:]  # the cohorts Kueue looks into only while over their quota
    condition = headroom_condition(40, 30, 30, 50, check)  # never crashes; outranked by any risk
    assert condition.reason == ("CohortLends" if check.lenders else "CohortCycle" if check.loops
                                else "CohortReclaims" if check.reclaimers else "HeadroomCovered")


def test_a_queue_reclaiming_from_another_cohort_of_the_tree_is_named_with_the_way():
    """Once only the training queue's own cohort was looked at: a reclaiming queue of its parent's other child
    cohort, of the parent itself, or under a parent with no Cohort object was not named, though Kueue preempts
    across the whole tree."""
    tree = [cq("research", "pool", lending=0), cohort("pool", parent="org"), cohort("org"),
            cohort("side", parent="org"), reclaiming("side-q", "side"),
            cohort("apart", parent="elsewhere"), reclaiming("apart-q", "apart"), reclaiming("loose", "nowhere")]
    check = cohort_lenders(tree, {"research"})
    assert not check.lenders and [(r.name, r.cohort, r.queues, r.ways) for r in check.reclaimers] == [
        ("side-q", "side", ("research",), (("side", "org", "pool"),))]
    condition = headroom_condition(40, 30, 30, 50, check)
    assert (condition.status, condition.reason) == ("False", "CohortReclaims")
    assert ("ClusterQueue side-q has spec.preemption.reclaimWithinCohort: Any (set its reclaimWithinCohort to Never, "
            "and no borrowWithinCohort): Kueue preempts the Workloads of ClusterQueue research whenever headroom "
            "lowers its nominalQuota under what it runs, in Kueue's order and counted nowhere in headroom; research "
            "is of cohort pool, reached through cohorts side -> org -> pool of their tree, once the cut also leaves "
            "cohort pool above its quota") in condition.message
    # a queue of the parent itself, a training queue deeper down: Kueue looks into each cohort on the way down
    deeper = [cq("research", "team", lending=0), cohort("team", parent="pool"), cohort("pool", parent="org"),
              reclaiming("org-q", "org")]
    (r,) = cohort_lenders(deeper, {"research"}).reclaimers
    assert (r.ways, r.down) == ((("org", "pool", "team"),), (("pool", "team"),))
    ((said, _),) = r.findings()
    assert said.endswith("research is of cohort team, reached through cohorts org -> pool -> team of their tree, once "
                         "the cut also leaves cohorts pool, team above their quotas")
    # a queue of a cohort under the training cohort: the training queue is one of the cohorts it walks up to
    (r,) = cohort_lenders([*deeper[:2], reclaiming("below-q", "sub"), cohort("sub", parent="team")],
                          {"research"}).reclaimers
    assert (r.ways, r.down) == ((("sub", "team"),), ((),))
    ((said, _),) = r.findings()
    assert said.endswith("; research is of cohort team, reached through cohorts sub -> team of their tree")
    # a parent named with no Cohort object: Kueue's default Cohort, the root of both
    ghost = [cq("research", "pool", lending=0), cohort("pool", parent=MISSING), cohort("side", parent=MISSING),
             reclaiming("side-q", "side")]
    assert [r.ways for r in cohort_lenders(ghost, {"research"}).reclaimers] == [(("side", MISSING, "pool"),)]
    # a reclaimer's parentName chain that loops: Kueue disables its tree; nothing is walked for ever
    looped = [cq("research", "pool", lending=0), cohort("pool", parent="a"), cohort("a", parent="b"),
              cohort("b", parent="a"), reclaiming("side-q", "b")]
    check = cohort_lenders(looped, {"research"})
    assert check.reclaimers == () and check.loops == (("pool", "a", "b", "a"),)
    # two training queues, one beside the reclaimer and one across the tree: each named with its own way
    both = [*tree, cq("batch", "side", lending=0)]
    (r,) = [r for r in cohort_lenders(both, {"research", "batch"}).reclaimers if r.name == "side-q"]
    assert (r.queues, r.ways) == (("batch", "research"), (("side",), ("side", "org", "pool")))
    (batch, _), (research, _) = r.findings()  # and each said of its own: an Event each
    assert "Workloads of ClusterQueue batch whenever" in batch and batch.endswith("; both are of cohort side")
    assert research.endswith("; research is of cohort pool, reached through cohorts side -> org -> pool of their tree, "
                             "once the cut also leaves cohort pool above its quota")


def test_the_adapter_reads_what_lets_kueue_reclaim_within_the_cohort():
    def preemption(**fields):
        return quota_node({"metadata": {"name": "q"}, "spec": {"cohortName": "pool", "preemption": fields}},
                          "ClusterQueue").reclaims

    assert preemption() is None and preemption(reclaimWithinCohort="Never", withinClusterQueue="Any") is None
    assert preemption(reclaimWithinCohort="LowerPriority") == "spec.preemption.reclaimWithinCohort: LowerPriority"
    assert preemption(reclaimWithinCohort="Any", borrowWithinCohort={"policy": "LowerPriority"}) == \
        "spec.preemption.reclaimWithinCohort: Any"
    assert preemption(borrowWithinCohort={"policy": "LowerPriority"}) == \
        "spec.preemption.borrowWithinCohort.policy: LowerPriority"
    assert quota_node({"metadata": {"name": "c"}, "spec": {"preemption": {"reclaimWithinCohort": "Any"}}},
                      "Cohort").reclaims is None


# ---------------------------------------------------------------------------- what an Event keeps of a finding
LONGEST = 253  # Kubernetes' longest object name (a DNS subdomain): a Cohort's or a ClusterQueue's


def longest(name: str) -> str:
    return name.ljust(LONGEST, "x")


def longest_names(nodes: list[QuotaNode]) -> list[QuotaNode]:
    return [replace(n, name=longest(n.name), parent=n.parent and longest(n.parent)) for n in nodes]


def policy_of(queues: set[str]):
    """One ReservationPolicy lending to `queues` (at most 64, the CRD's bound), as the controller parses it."""
    spec = {"query": "sum(up)", "capacity": {"demandPerGpu": 10.0}, "target": {"kind": "Deployment", "name": "chat"},
            "trainingClusterQueues": sorted(queues)}
    (parsed,), refused = parse_policies(identified([{"metadata": {"name": "chat", "namespace": "ml"}, "spec": spec}]))
    assert not refused
    return parsed


def six_ways() -> tuple[list[QuotaNode], set[str]]:
    """One reclaiming queue reaching six training queues, each by its own way down a tree of Cohorts: joined into one
    finding, its fix was past the 1,024 characters an Event keeps even with names of twenty characters."""
    nodes = [cohort("org"), cohort("platform", parent="org"), reclaiming("reclaimer", "platform")]
    for i in range(6):
        nodes += [cohort(f"division-{i}", parent="org"), cohort(f"team-{i}", parent=f"division-{i}"),
                  cq(f"training-{i}", f"team-{i}", lending=0)]
    return nodes, {f"training-{i}" for i in range(6)}


@settings(max_examples=200, deadline=None)
@given(reclaiming_trees())
@example(six_ways())
def test_each_cohort_reclaims_event_names_the_queues_and_the_fix_within_what_an_event_keeps(tree):
    """An Event keeps the first 1,024 characters of its message (adapters.kube). One finding named every training
    queue a reclaiming queue reaches, each with its way through the tree of Cohorts, and its fix, said last, was cut
    off. Now each training queue is a finding and an Event of its own, the queues and the fix first: with every name
    of Kubernetes' longest, what the Event keeps still names the reclaiming queue, the training queue and the fix."""
    nodes, training = tree
    nodes, training = longest_names(nodes), {longest(t) for t in training}
    check = cohort_lenders(nodes, training)
    notes = Reconciler(None, None, RunConfig())._reclaim_notes([policy_of(training)], check)
    told = [event_message(note.event.message) for note in notes]
    assert all(len(kept) <= EVENT_MESSAGE_CHARS for kept in told)
    said = [f"ClusterQueue {r.name} has {r.setting} (set its reclaimWithinCohort to Never, and no borrowWithinCohort): "
            f"Kueue preempts the Workloads of ClusterQueue {queue} whenever "
            for r in check.reclaimers for queue in r.queues]
    assert sorted(start for kept in told for start in said if kept.startswith(start)) == sorted(said), told


def test_each_within_queue_event_names_the_queue_and_the_fix_within_what_an_event_keeps():
    """The other finding said in Events, a training queue in which Kueue preempts for its own Workloads: with a name of
    Kubernetes' longest, the whole finding fits an Event, the fix (withinClusterQueue: Never) at its end."""
    queue = longest("team")
    workloads = [WorkloadInfo("ml", f"job-{p}", "team", queue, True, True, p, None, 1) for p in (0, 1)]
    for setting in ("LowerPriority", "LowerOrNewerEqualPriority"):
        ((said, about),) = within_queue_preemptors({queue: setting}, workloads, {queue})
        (note,) = Reconciler(None, None, RunConfig())._say_once("KueuePreemptsWithinQueue", [(said, about)],
                                                               [policy_of({queue})], "Normal")
        assert note.event.message == said and len(said) <= EVENT_MESSAGE_CHARS
        assert said.startswith(f"ClusterQueue {queue} has spec.preemption.withinClusterQueue: {setting}")
        assert said.endswith("withinClusterQueue: Never makes the pending Workload wait for quota instead")
