"""How Kueue admits Workloads into ClusterQueues of one cohort (../shared/kueue/docs/cluster_queue.md, cohort.md;
Kueue v0.19's pkg/scheduler/scheduler.go and flavorassigner), for one flavor (GPUs).

The embedded cluster admits with it, and the plan shows what Kueue will admit under the quotas the
planner lends. Kueue's scheduling cycles, back to back:
  * each queue orders its pending Workloads by priority (high first), then creation time, then UID (v0.19's
    pkg/cache/queue/cluster_queue.go, baseCompareFunc). The creation time is metadata.creationTimestamp, in whole
    seconds as the API server keeps it, so two Workloads created in one second go by UID. A Workload headroom
    evicted (deactivated) and requeued keeps its creation time: Kueue's GetQueueOrderTimestamp (pkg/workload)
    takes the eviction's time instead only for an eviction by a PodsReady timeout (waitForPodsReady's
    requeuingTimestamp: Eviction) or an admission check, or a Preempted InCohortReclaimWhileBorrowing with the
    PrioritySortingWithinCohort gate off (it is on by default). A cycle takes each queue's head (its first
    Workload not yet looked at);
  * a Workload fits within its queue's nominalQuota, or borrows: the cohort's unused nominal quota
    covers it (no borrowingLimit: a queue may borrow up to the cohort's whole unused quota). Either
    way the cohort's usage stays within the sum of what its queues lend: what a queue borrowed is no
    longer unused in the queue it came from (Kueue's `available`: the cohort's quota minus its usage,
    so a queue left above its quota by a shrink keeps the others from admitting into that part). A
    queue's quota it does not lend (nominalQuota less its lendingLimit) is its own alone;
  * within a cycle, heads that fit under nominal quota go before borrowers; among equals, priority,
    then creation time (scheduler.go, makeClassicalIterator); a tie there Kueue leaves to chance (its heads come
    from a map of queues, its sort is not stable): here the UID decides, as within a queue;
  * a head within its queue's nominalQuota that the cohort's unused quota does not cover needs
    preemption; with no Workload to preempt (reclaimWithinCohort Never, one priority) Kueue reserves
    it that quota for the cycle (scheduler.go, reserveCapacityForUnreclaimablePreempt), so the
    heads after it in the cycle that would use it are skipped;
  * a head that fit the cycle's start but no longer fits after the heads before it (admitted, or reserving) is
    skipped and requeued at once, whatever the queue's strategy (scheduler.go, requeueAndUpdate:
    FailedAfterNomination; cluster_queue.go, RequeueIfNotPresent): it heads its queue in the next cycle again;
  * a head Kueue does not admit is set aside (BestEffortFIFO: it blocks none behind it), until
    something in the cohort changes (a Workload finishing or stopping, a quota changing), when every
    Workload set aside is looked at again. A StrictFIFO queue's head is requeued at once instead
    (pkg/cache/queue/cluster_queue.go, RequeueIfNotPresent): the head of its queue in every cycle until admitted,
    blocking the Workloads behind it, and reserving, if it needs preemption, in every cycle;
  * it also needs GPUs that are physically free (its pods cannot run otherwise): a Workload that
    fits the quota but not the free GPUs is passed over, not set aside.
Kueue does not evict when a quota shrinks; headroom does that itself (planning.planner).
"""
from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import numpy as np


def admit(queue: np.ndarray, gpus: np.ndarray, priority: np.ndarray, created: np.ndarray, uids: Sequence[str],
          usage: Mapping[str, int], quotas: Mapping[str, int], free_gpus: int,
          kept: Mapping[str, int] | None = None, strict: Collection[str] = ()) -> tuple[list[int], list[int]]:
    """Indices (into the pending columns) Kueue admits now, in admission order, and those it sets aside.

    `queue` is each pending Workload's ClusterQueue name, `created` its creationTimestamp (epoch seconds, whole as
    the API server keeps them) and `uids` its UID, Kueue's tie-break; `usage` the GPUs each queue's admitted Workloads
    hold; `quotas` every ClusterQueue's nominal quota (queues in it form the cohort); `kept` the part of a queue's
    quota it does not lend (its nominalQuota less its lendingLimit; absent: it lends all); `strict` the queues whose
    queueingStrategy is StrictFIFO (the others BestEffortFIFO). Every pending Workload given is looked at, each in
    the cycles it heads its queue, as Kueue's back-to-back scheduling cycles do between two steps, but those behind
    a head that stays: a StrictFIFO head Kueue does not admit, or a head skipped while a StrictFIFO head reserves
    the quota it fits, in every cycle. Such a head is neither admitted nor set aside, and those behind it are not
    looked at."""
    kept = kept or {}
    used = {q: int(usage.get(q, 0)) for q in quotas}
    own = {q: min(int(kept.get(q, 0)), int(quotas[q])) for q in quotas}  # quota a queue keeps from the cohort
    # the cohort's available quota: what its queues lend less what they use beyond what they keep; none (not less)
    # where a queue holds more than a quota headroom lowered: that eats into what the cohort lends, never into the
    # quota a queue keeps (an inference queue's, lendingLimit 0), which stays its own
    unused = max(sum(int(quotas[q]) - own[q] for q in quotas) - sum(max(used[q] - own[q], 0) for q in quotas), 0)
    # the passes below read single items: from lists, which index faster than arrays
    queues, sizes = list(queue), [int(g) for g in gpus.tolist()]
    ranks, times = [-int(p) for p in priority.tolist()], [float(c) for c in created.tolist()]
    lines: dict[str, list[int]] = {}
    for i in sorted(range(len(sizes)), key=lambda i: (ranks[i], times[i], uids[i])):  # Kueue's order; stable
        if queues[i] in quotas:
            lines.setdefault(queues[i], []).append(i)
    admitted: list[int] = []
    aside: list[int] = []

    def take(q: str, i: int, g: int) -> None:
        """Admit Workload i of queue q: from its queue's kept quota first, then the cohort's, onto free GPUs."""
        nonlocal unused, free_gpus
        unused -= max(g - max(own[q] - used[q], 0), 0)
        used[q] += g
        free_gpus -= g
        admitted.append(i)

    at = dict.fromkeys(lines, 0)  # each queue's head: its first not yet looked at (StrictFIFO: not yet admitted)
    while True:
        heads = [(q, line[at[q]]) for q, line in lines.items() if at[q] < len(line)]
        if len(heads) == 1:  # one queue's line left: its heads have their cycles alone, taken in one scan
            q = heads[0][0]
            for i in lines[q][at[q]:]:
                g = sizes[i]
                fits = g <= max(own[q] - used[q], 0) + unused
                if fits and g <= free_gpus:
                    take(q, i, g)
                elif q in strict:  # it stays the head: nothing behind it is looked at
                    break
                elif not fits:
                    aside.append(i)
                # else it fits the quota, not the GPUs: passed over, tried again when GPUs free
            break
        # nominated on the cycle's start: fits the quota available to its queue, or within its nominalQuota
        # (needs preemption: none to preempt, it reserves), or neither
        cycle = []
        for q, i in heads:
            g = sizes[i]
            available = max(own[q] - used[q], 0) + unused
            borrows = used[q] + g > quotas[q]
            cycle.append(((borrows, ranks[i], times[i], uids[i]), q, i, g, g <= available, g <= quotas[q]))
        cycle.sort()
        held = 0  # the cohort's quota heads within their nominalQuota reserved for this cycle
        moved = False  # a head admitted or left behind: the next cycle has other heads
        for _, q, i, g, fits, within in cycle:
            in_own = max(own[q] - used[q], 0)  # one head a queue in a cycle: none reserved its queue's own before it
            room = fits and g <= in_own + unused - held  # what the heads before it took or reserved left it room
            if room and g <= free_gpus:
                take(q, i, g)
            elif fits and not room:  # fit on the cycle's start, not after the heads before it (Kueue: skipped)
                continue  # requeued at once, whatever the strategy: the head of its queue in the next cycle again
            else:
                if not fits and within:
                    held += max(g - in_own, 0)
                if q in strict:  # StrictFIFO: requeued at once, the head of the next cycle again
                    continue
                if not fits:  # else it fits the quota, not the GPUs: passed over, tried again when GPUs free
                    aside.append(i)
            at[q] += 1
            moved = True
        if not moved:  # heads that stay alone left, none admitted: the next cycle would be this one again
            break
    return admitted, aside
