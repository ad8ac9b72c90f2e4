"""Who else lends GPUs to the training ClusterQueues: their cohort trees, read as Kueue reads them.

headroom lends the slack as the training queues' nominalQuota and must be their only lender: any other GPUs a
training queue can borrow let Kueue admit training beyond the slack, into the inference reservation. Kueue's rules
(../shared/kueue/docs/cohort.md, cluster_queue.md, and the Cohort and ClusterQueue CRDs' field docs, v1beta2):
  * a ClusterQueue lends its cohort what it does not use of its nominalQuota, up to its lendingLimit (unset: all);
  * a Cohort's own nominalQuota is a pool shared by everything under it, on top of its ClusterQueues' quotas;
  * a Cohort lends its parent what its subtree does not use, up to its lendingLimit (unset: no limit), and its
    subtree borrows from the parent's up to its borrowingLimit (unset: no limit); a ClusterQueue borrows from its
    cohort up to its borrowingLimit;
  * quotas and limits are per flavor (a flavor a node does not list: no quota, no limits), and a ClusterQueue
    borrows only in the flavors it lists;
  * a cohort without a Cohort object (only named, by a cohortName or a parentName) is a root with no quota and no
    limits: Kueue's "default Cohort";
  * a parentName chain that loops disables every ClusterQueue of its tree: Kueue admits nothing there until the
    loop is removed.
So GPUs held by a node reach a training queue when the way from the node up to the first cohort they share and
down to the queue has no limit of 0 on it: each lendingLimit going up, each borrowingLimit coming down.

Kueue's own preemption across queues (../shared/kueue/docs/preemption.md): a ClusterQueue holding more than its
nominalQuota borrows, and a pending Workload of another queue whose preemption.reclaimWithinCohort is LowerPriority
or Any (borrowWithinCohort only beside one) preempts the borrower's Workloads to get its own quota back. That other
queue may be anywhere in the borrower's tree of Cohorts: Kueue v0.19 looks for candidates (by the preemptor queue's
reclaimWithinCohort) from its cohort up to the root, in every subtree holding more than its quota
(pkg/scheduler/preemption: PathParentToRoot, and Parent().Root() under Fair Sharing). headroom lowers a training
queue's nominalQuota under its running jobs, so such a queue makes Kueue stop training jobs at quota cuts, beside
headroom's own preemptions and uncounted by them: from the same cohort at each cut, from another cohort of the tree
once the cut leaves the cohorts on the way down to the training queue holding more than their quotas too."""
from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass

from core.objects import QuotaNode


@dataclass(frozen=True)
class Lender:
    """GPUs beside headroom's that the training queues of `cohort` can borrow."""
    kind: str              # "ClusterQueue", or "Cohort": that cohort's own nominalQuota
    name: str
    gpus: int              # at most this many: its quota, within the lendingLimits on the way, over its flavors
    cohort: str            # the training queues' cohort
    path: tuple[str, ...]  # the cohorts they pass, the lender's first, `cohort` last (one: straight into it)
    fix: str               # how to stop it

    def describe(self, objects: Iterable[str]) -> str:
        """The lender, the way its GPUs come (a cohort without a Cohort object named as such) and the fix."""
        what = f"ClusterQueue {self.name}" if self.kind == "ClusterQueue" else f"Cohort {self.name}'s own nominalQuota"
        known = set(objects)
        way = " -> ".join(c if c in known else f"{c} (no Cohort object)" for c in self.path)
        through = f" through cohorts {way}" if len(self.path) > 1 else ""
        return f"{what} lends up to {self.gpus} GPUs into cohort {self.cohort}{through} ({self.fix})"


@dataclass(frozen=True)
class Reclaimer:
    """A ClusterQueue whose preemption setting lets Kueue preempt the Workloads of training queues of its tree."""
    name: str
    setting: str                   # "spec.preemption.<field>: <value>"
    cohort: str
    queues: tuple[str, ...]        # the training queues of its tree other than itself: whose jobs Kueue may stop
    ways: tuple[tuple[str, ...], ...]  # per queue, the cohorts from `cohort` up to the first one shared and down to
                                       # the queue's own (one: the same cohort)
    down: tuple[tuple[str, ...], ...]  # per queue, the cohorts of its way below the first one shared

    def findings(self) -> list[tuple[str, str]]:
        """What to say of each training queue it reaches, as (what, the queue): the two queues, the setting and the
        fix first, the way through the tree last, as an Event keeps the first 1,024 characters (core.objects
        event_message) and names of Kubernetes' longest (253) leave no room for a way of several cohorts."""
        found: list[tuple[str, str]] = []
        for queue, way, down in zip(self.queues, self.ways, self.down):
            if len(way) == 1:
                where = f"both are of cohort {self.cohort}"
            else:
                over = ""
                if down:  # Kueue looks for candidates only in a subtree over its quota
                    over = (f", once the cut also leaves cohort {down[0]} above its quota" if len(down) == 1 else
                            f", once the cut also leaves cohorts {', '.join(down)} above their quotas")
                where = (f"{queue} is of cohort {way[-1]}, reached through cohorts {' -> '.join(way)} of their "
                         f"tree{over}")
            found.append((f"ClusterQueue {self.name} has {self.setting} (set its reclaimWithinCohort to Never, and "
                          f"no borrowWithinCohort): Kueue preempts the Workloads of ClusterQueue {queue} whenever "
                          "headroom lowers its nominalQuota under what it runs, in Kueue's order and counted nowhere "
                          f"in headroom; {where}", queue))
        return found


@dataclass(frozen=True)
class CohortCheck:
    """What the training queues can borrow beside headroom's lending."""
    lenders: tuple[Lender, ...] = ()
    loops: tuple[tuple[str, ...], ...] = ()  # a training cohort's parentName chain that loops (the repeated one last)
    cohorts: frozenset[str] = frozenset()    # the Cohort objects (the others are only named)
    unreadable: str | None = None            # why the tree could not be read: nothing above is known
    reclaimers: tuple[Reclaimer, ...] = ()   # queues of a training cohort's tree that let Kueue preempt training

    def lenders_said(self) -> str:
        return "; ".join(lender.describe(self.cohorts) for lender in self.lenders)

    def loops_said(self) -> str:
        return "; ".join(f"cohort {chain[0]}'s parentName chain loops: {' -> '.join(chain)}" for chain in self.loops)

    def reclaimers_said(self) -> str:
        return "; ".join(said for r in self.reclaimers for said, _ in r.findings())


def _cap(gpus: int, limit: int | None) -> int:
    return gpus if limit is None else min(gpus, limit)


def _lent_up(node: QuotaNode, flavor: str, children: Mapping[str, list[QuotaNode]],
             training: set[str]) -> Iterator[tuple[QuotaNode, int, tuple[str, ...]]]:
    """What `node` (not a training queue) lends its parent in `flavor`, by source: (the ClusterQueue or Cohort whose
    quota it is, at most how many GPUs, the cohorts passed from the source's up to `node`)."""
    if node.kind == "ClusterQueue" and node.name in training:
        return  # headroom's own lending
    quota = node.gpus.get(flavor)
    limit = quota.lending_limit if quota is not None else None
    if limit == 0:
        return
    if quota is not None and quota.nominal > 0:
        yield node, _cap(quota.nominal, limit), (node.name,) if node.kind == "Cohort" else ()
    if node.kind == "Cohort":
        for child in children.get(node.name, []):
            for source, gpus, up in _lent_up(child, flavor, children, training):
                yield source, _cap(gpus, limit), (*up, node.name)


def _chain(cohort: str, cohorts: Mapping[str, QuotaNode]) -> tuple[list[str], bool]:
    """The cohort and its ancestors, up to a root or until one repeats (then that one last, and True)."""
    chain = [cohort]
    while (node := cohorts.get(chain[-1])) is not None and node.parent is not None:
        chain.append(node.parent)
        if node.parent in chain[:-1]:
            return chain, True
    return chain, False


def _fix(source: QuotaNode, gate: QuotaNode | None, cohort: str, above: bool) -> str:
    """How to stop a lender: close the gate by which it enters the training cohort's chain (a node just under one of
    its cohorts: its lendingLimit 0, or no parent), or, its GPUs coming from above the training cohort, cut that
    cohort off from its parent (no parent, or borrowingLimit 0). A lendingLimit on the training cohort or its
    ancestors does not do it: it caps what a subtree lends up, not what it borrows."""
    if gate is None and not above:
        return "remove its GPU nominalQuota: every ClusterQueue of the cohort shares it, whatever its lendingLimit"
    ways = []
    if gate is not None:
        whose = "its" if gate is source else f"{gate.kind} {gate.name}'s"
        ways.append(f"set {whose} GPU lendingLimit to 0")
        if gate.kind == "Cohort":
            ways.append(f"remove {whose} parentName")
    if above:
        ways.append(f"remove Cohort {cohort}'s parentName or set its GPU borrowingLimit to 0")
    return " or ".join(ways)


def cohort_lenders(nodes: Iterable[QuotaNode], training: set[str]) -> CohortCheck:
    """Every source of GPUs other than headroom's lending (the training queues' quotas) that a training queue can
    borrow from: ClusterQueues of its cohort, the cohort's own quota, and up its parentName chain each ancestor's
    quota and all that the ancestor's other subtrees lend it; the training cohorts whose chain loops; and the
    ClusterQueues of a training queue's tree of Cohorts whose preemption setting lets Kueue preempt its Workloads."""
    nodes = list(nodes)
    cohorts = {n.name: n for n in nodes if n.kind == "Cohort"}
    queues = {n.name: n for n in nodes if n.kind == "ClusterQueue"}
    children: dict[str, list[QuotaNode]] = {}
    for n in nodes:
        if n.parent is not None:
            children.setdefault(n.parent, []).append(n)
    found: dict[tuple[str, str, str], tuple[tuple[str, ...], str]] = {}  # (kind, name, cohort) -> (path, fix)
    amounts: dict[tuple[str, str, str], dict[str, int]] = {}             # ... -> GPUs by flavor
    loops: dict[str, tuple[str, ...]] = {}
    for queue in (queues[q] for q in sorted(training & queues.keys())):
        if queue.parent is None:
            continue  # in no cohort: it borrows nothing
        chain, loop = _chain(queue.parent, cohorts)
        if loop:
            loops[chain[0]] = tuple(chain)
            continue
        for flavor, own in queue.gpus.items():
            below: QuotaNode | None
            borrows, below = own.borrowing_limit != 0, queue  # below: the chain's node under the cohort at hand
            for level, name in enumerate(chain):
                if not borrows:
                    break
                path, cohort = tuple(reversed(chain[:level + 1])), cohorts.get(name)
                entering: list[tuple[QuotaNode, int, tuple[str, ...], QuotaNode | None]] = []
                quota = cohort.gpus.get(flavor) if cohort is not None else None
                if cohort is not None and quota is not None and quota.nominal > 0:
                    entering.append((cohort, quota.nominal, (), None))  # its own pool, under no gate
                for child in children.get(name, []):
                    if child is not below:
                        entering += [(s, g, up, child) for s, g, up in _lent_up(child, flavor, children, training)]
                for source, gpus, up, gate in entering:
                    key = (source.kind, source.name, chain[0])
                    found[key] = ((*up, *path), _fix(source, gate, chain[0], level > 0))
                    amounts.setdefault(key, {})[flavor] = gpus
                borrows, below = quota is None or quota.borrowing_limit != 0, cohort
    lenders = []
    for key in sorted(found):
        kind, name, cohort_name = key
        lenders.append(Lender(kind, name, sum(amounts[key].values()), cohort_name, *found[key]))
    return CohortCheck(tuple(lenders), tuple(loops[c] for c in sorted(loops)), frozenset(cohorts),
                       reclaimers=_reclaimers(queues.values(), cohorts, training))


def _reclaimers(queues: Collection[QuotaNode], cohorts: Mapping[str, QuotaNode],
                training: set[str]) -> tuple[Reclaimer, ...]:
    """The ClusterQueues whose preemption setting lets Kueue preempt another training queue of their cohort tree (the
    queues whose parentName chains end at the same root; a chain that loops admits nothing, so reclaims nothing)."""
    chains: dict[str, list[str]] = {}  # queue -> its cohort and their ancestors, up to the root
    for q in queues:
        if q.parent is not None:
            chain, loop = _chain(q.parent, cohorts)
            if not loop:
                chains[q.name] = chain
    found = []
    for q in sorted(queues, key=lambda q: (q.parent or "", q.name)):
        mine = chains.get(q.name)
        if q.reclaims is None or mine is None:
            continue
        exposed = sorted(t for t in training & chains.keys() if t != q.name and chains[t][-1] == mine[-1])
        if exposed:
            ways = [_way(mine, chains[t]) for t in exposed]
            found.append(Reclaimer(q.name, q.reclaims, mine[0], tuple(exposed), tuple(u + d for u, d in ways),
                                   tuple(d for _, d in ways)))
    return tuple(found)


def _way(up: list[str], down: list[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The cohorts from `up`'s first up to the first it shares with `down` (a chain of the same tree), and those from
    there down to `down`'s first."""
    shared = next(c for c in up if c in down)
    return tuple(up[:up.index(shared) + 1]), tuple(reversed(down[:down.index(shared)]))
