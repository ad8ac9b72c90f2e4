"""planning.kueue.admit against Kueue v0.19.2's scheduling cycles written out step by step, for what headroom models
(README, "The simulated Kueue"): one GPU flavor, every ClusterQueue in one cohort, lendingLimits, no borrowingLimit,
no preemption candidates (reclaimWithinCohort and withinClusterQueue Never), StrictFIFO or BestEffortFIFO, and
headroom's own rule that a Workload also needs physically free GPUs.

The reference follows Kueue's code, one cycle at a time, where admit() takes shortcuts: pkg/scheduler/scheduler.go
(schedule, nominate, processEntry, quotaResourcesToReserve, makeClassicalIterator, requeueAndUpdate),
pkg/cache/queue/cluster_queue.go (RequeueIfNotPresent) and pkg/cache/scheduler/resource_node.go (available)."""
import numpy as np
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from planning.kueue import admit

QUEUES = "abcd"


def kueue_cycles(pending, usage, quotas, kept, strict, free):
    """The uids Kueue admits, in order, and those it sets aside (its inadmissible Workloads), cycle by cycle until a
    cycle changes nothing. pending: (uid, queue, gpus, priority, created) rows."""
    local = {q: min(kept.get(q, 0), quotas[q]) for q in quotas}  # the quota a queue does not lend
    lent = sum(quotas[q] - local[q] for q in quotas)  # the cohort's subtree quota
    used = {q: usage.get(q, 0) for q in quotas}

    def available(q, held):  # resource_node.go's available: the queue's local quota left and the cohort's
        cohort_used = sum(max(held[r] - local[r], 0) for r in quotas)
        return max(local[q] - held[q], 0) + lent - cohort_used

    heaps = {q: sorted((p for p in pending if p[1] == q), key=lambda p: (-p[3], p[4], p[0])) for q in quotas}
    admitted, aside = [], []
    while True:
        heads = [heap[0] for heap in heaps.values() if heap]
        snapshot = dict(used)
        entries = []
        for uid, q, g, priority, created in heads:  # nominate: every head against the cycle's snapshot
            if g <= available(q, snapshot):
                mode = "fit"
            elif g <= quotas[q]:
                mode = "preempt"  # within nominalQuota, but no candidates: it reserves
            else:
                mode = "nofit"
            borrows = snapshot[q] + g > quotas[q]
            entries.append(((borrows, -priority, created, uid), uid, q, g, mode))
        changed = False
        for (borrows, *_), uid, q, g, mode in sorted(entries):  # makeClassicalIterator
            head = heaps[q][0]
            if mode == "fit" and g <= available(q, snapshot):
                if g <= free:
                    snapshot[q] += g
                    used[q] += g
                    free -= g
                    admitted.append(uid)
                elif q not in strict:  # headroom's: fits the quota, not the GPUs: passed over, not set aside
                    heaps[q].remove(head)
                    changed = True
                    continue
                else:
                    continue
            elif mode == "fit":  # skipped, "no longer fits": requeued at once (FailedAfterNomination), any strategy
                continue
            else:
                if mode == "preempt":  # quotaResourcesToReserve
                    snapshot[q] += g if borrows else max(0, min(g, quotas[q] - snapshot[q]))
                if q in strict:  # requeued at once: the head again
                    continue
                aside.append(uid)
            heaps[q].remove(head)
            changed = True
        if not changed:
            return admitted, aside


def model(pending, usage, quotas, kept, strict, free):
    uids = [p[0] for p in pending]
    chosen, aside = admit(np.array([p[1] for p in pending], dtype=object), np.array([p[2] for p in pending], np.int64),
                          np.array([p[3] for p in pending], np.int64), np.array([p[4] for p in pending], float), uids,
                          usage, quotas, free, kept, strict)
    return [uids[i] for i in chosen], [uids[i] for i in aside]


def test_a_head_skipped_for_another_heads_reservation_is_looked_at_again_in_the_next_cycle():
    """Queue a's head (4, within a's nominalQuota 8) finds 2 of the cohort unused, needs preemption, has no candidate
    and reserves 4 for the cycle; b's head b1, borrowing after it, no longer fits and is skipped. Kueue requeues a
    skipped head at once (requeueAndUpdate: FailedAfterNomination; RequeueIfNotPresent: immediate under
    BestEffortFIFO too), so b1 heads b's queue in the next cycle, where nothing is reserved, and is admitted, then
    b2; b3 finds none left. The model set b1 aside with a-big, and admitted b2 and b3, younger and no smaller, in its
    place: BestEffortFIFO let two Workloads of b's queue pass one that fit."""
    pending = [("a-big", "a", 4, 0, 0.0), ("b1", "b", 1, 0, 1.0), ("b2", "b", 1, 0, 2.0), ("b3", "b", 1, 0, 3.0)]
    args = ({"b": 6}, {"a": 8, "b": 0}, {}, set(), 1000)
    assert model(pending, *args) == (["b1", "b2"], ["a-big", "b3"]) == kueue_cycles(pending, *args)


rows = st.lists(st.tuples(st.sampled_from(QUEUES), st.integers(1, 8), st.integers(0, 2), st.integers(0, 30)),
                max_size=14)


@settings(max_examples=300, deadline=None)
@given(rows, st.integers(1, 4), st.lists(st.integers(0, 12), min_size=4, max_size=4),
       st.lists(st.integers(0, 12), min_size=4, max_size=4), st.lists(st.integers(0, 12), min_size=4, max_size=4),
       st.sets(st.sampled_from(QUEUES)), st.integers(0, 40))
@example(rows=[("a", 4, 0, 0), ("b", 1, 0, 1), ("b", 1, 0, 2), ("b", 1, 0, 3)], n=2, nominal=[8, 0, 0, 0],
         usage=[0, 6, 0, 0], kept=[0, 0, 0, 0], strict=set(), free=40)
def test_admit_is_kueues_cycles(rows, n, nominal, usage, kept, strict, free):
    """1-4 ClusterQueues with nominal quotas, lendingLimits (as the part kept), Workloads admitted in them and
    pending ones of assorted sizes, priorities and creation times (ties too), some queues StrictFIFO: admit() admits
    what Kueue's cycles admit, in their order, and sets aside what they set aside. The cohort is not above what it
    lends to begin with (a quota lowered under what a queue holds: admit() keeps a queue's unlent quota its own
    there, where Kueue's available goes negative; README)."""
    queues = QUEUES[:n]
    quotas = {q: nominal[k] for k, q in enumerate(queues)}
    held = {q: usage[k] for k, q in enumerate(queues)}
    kept_quota = {q: kept[k] for k, q in enumerate(queues)}
    local = {q: min(kept_quota[q], quotas[q]) for q in queues}
    assume(sum(max(held[q] - local[q], 0) for q in queues) <= sum(quotas[q] - local[q] for q in queues))
    pending = [(f"w{k:02d}", q, g, p, float(c)) for k, (q, g, p, c) in enumerate(rows)]
    strict_queues = {q for q in strict if q in queues}
    args = (held, quotas, kept_quota, strict_queues, free)
    got, got_aside = model(pending, *args)
    want, want_aside = kueue_cycles(pending, *args)
    assert got == want
    assert sorted(got_aside) == sorted(want_aside)
