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
          usage: Mapping[str, int], quotas: Mapping[str, int], free_gpus: int, scan: int = 64) -> list[int]:
    """Indices (into the pending columns) Kueue admits now, in admission order.

    `queue` is each pending Workload's ClusterQueue name; `usage` the GPUs each queue's admitted Workloads
    hold; `quotas` every ClusterQueue's nominal quota (queues in it form the cohort). At most `scan`
    Workloads per queue are looked at, as a scheduler cycle would."""
    used = {q: int(usage.get(q, 0)) for q in quotas}
    unused = sum(int(quotas[q]) for q in quotas) - sum(used.values())  # the cohort's available quota
    # the passes below read single items: from lists, which index faster than arrays
    queues, sizes = list(queue), [int(g) for g in gpus.tolist()]
    ranks, times = [-int(p) for p in priority.tolist()], [float(c) for c in created.tolist()]
    heads: dict[str, list[int]] = {}
    for i in sorted(range(len(sizes)), key=lambda i: (ranks[i], times[i], ids[i])):  # Kueue's order; stable
        q = queues[i]
        if q in quotas:
            line = heads.setdefault(q, [])
            if len(line) < scan:
                line.append(i)
    admitted: list[int] = []
    while True:
        best = None
        for q, line in heads.items():
            room = quotas[q] - used[q]
            for i in line:
                g = sizes[i]
                if g > free_gpus:
                    continue
                within = g <= room
                if g <= unused:
                    key = (not within, ranks[i], times[i], ids[i])
                    if best is None or key < best[0]:
                        best = (key, q, i, g, within)
                    break  # the queue's first Workload that fits is its candidate
        if best is None:
            return admitted
        _, q, i, g, _ = best
        heads[q].remove(i)
        unused -= g  # from its own unused nominal quota first, then borrowed from the cohort's
        used[q] += g
        free_gpus -= g
        admitted.append(i)
