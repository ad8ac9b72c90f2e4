"""How Kueue admits training Workloads into ClusterQueues (../shared/kueue/docs/cluster_queue.md, cohort.md).

The embedded cluster admits with it, and the plan shows what Kueue will admit under the quotas the
planner lends. One flavor (GPUs), every training ClusterQueue in one cohort, BestEffortFIFO:
  * each queue orders its pending Workloads by priority (high first), then creation time; a head
    that does not fit does not block smaller ones behind it;
  * a Workload fits within its queue's nominalQuota, or borrows: the cohort's unused nominal quota
    covers it (no borrowingLimit: a queue may borrow up to the cohort's whole unused quota). Either
    way the cohort's usage stays within the sum of its nominal quotas: what a queue borrowed is no
    longer unused in the queue it came from (Kueue's `available`: the cohort's quota minus its usage,
    so a queue left above its quota by a shrink keeps the others from admitting into that part);
  * within the cohort, Workloads that fit under nominal quota go before borrowers; among equals,
    priority, then creation time;
  * it also needs GPUs that are physically free (its pods cannot run otherwise).
Kueue does not evict when a quota shrinks; headroom does that itself (planning.planner).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np


def admit(queue: np.ndarray, gpus: np.ndarray, priority: np.ndarray, created: np.ndarray, ids: Sequence[str],
          usage: Mapping[str, int], quotas: Mapping[str, int], free_gpus: int) -> list[int]:
    """Indices (into the pending columns) Kueue admits now, in admission order.

    `queue` is each pending Workload's ClusterQueue name; `usage` the GPUs each queue's admitted Workloads
    hold; `quotas` every ClusterQueue's nominal quota (queues in it form the cohort). Every pending Workload is
    looked at, as Kueue's back-to-back scheduling cycles do between two steps: however many heads do not fit, they
    block none behind them."""
    used = {q: int(usage.get(q, 0)) for q in quotas}
    unused = sum(int(quotas[q]) for q in quotas) - sum(used.values())  # the cohort's available quota
    # the passes below read single items: from lists, which index faster than arrays
    queues, sizes = list(queue), [int(g) for g in gpus.tolist()]
    ranks, times = [-int(p) for p in priority.tolist()], [float(c) for c in created.tolist()]
    heads: dict[str, list[int]] = {}
    for i in sorted(range(len(sizes)), key=lambda i: (ranks[i], times[i], ids[i])):  # Kueue's order; stable
        q = queues[i]
        if q in quotas:
            heads.setdefault(q, []).append(i)
    # each line's first Workload neither admitted nor passed over: free GPUs and unused quota only shrink in a pass,
    # so one that does not fit now never will (each is looked at once a pass, however long the line)
    first = dict.fromkeys(heads, 0)
    admitted: list[int] = []
    while True:
        best = None
        for q, line in heads.items():
            k = first[q]
            while k < len(line) and not sizes[line[k]] <= min(free_gpus, unused):
                k += 1
            first[q] = k
            if k < len(line):  # the queue's first Workload that fits is its candidate
                i = line[k]
                key = (not sizes[i] <= quotas[q] - used[q], ranks[i], times[i], ids[i])
                if best is None or key < best[0]:
                    best = (key, q, i, sizes[i])
        if best is None:
            return admitted
        _, q, i, g = best
        first[q] += 1
        unused -= g  # from its own unused nominal quota first, then borrowed from the cohort's
        used[q] += g
        free_gpus -= g
        admitted.append(i)
