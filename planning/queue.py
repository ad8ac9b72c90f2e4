"""Training queue: jobs, team quotas, and fair sharing of the slack GPUs.

Sharing is weighted progressive filling on one resource (GPUs), i.e. dominant
resource fairness with a single resource: the team whose usage/quota is lowest
gets the next job. A team under its quota is "within quota"; a team above it
is borrowing quota that other teams leave idle. Within a team: priority first,
then FIFO by submission time.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Job:
    id: str
    team: str
    gpus: int
    duration_seconds: float
    priority: int = 0
    submitted_at: float = 0.0  # any monotone clock (epoch seconds); only the order matters
    checkpoint_interval_seconds: float = 1800.0
    preemption_seconds: float = 60.0  # checkpoint + termination time


@dataclass(frozen=True)
class TeamQuota:
    team: str
    quota_gpus: float
    weight: float = 1.0


@dataclass(frozen=True)
class Grant:
    job: Job
    reason: str


def queue_order(jobs: Iterable[Job]) -> list[Job]:
    """Priority (high first), then FIFO; id breaks ties so the order is total."""
    return sorted(jobs, key=lambda j: (-j.priority, j.submitted_at, j.id))


def allocate(
    free_gpus: int,
    slow_free_gpus: int,
    queued: Sequence[Job],
    usage: dict[str, int],
    quotas: Sequence[TeamQuota],
    reclaim_deadline_seconds: float,
) -> list[Grant]:
    """Admit queued jobs into `free_gpus`.

    Jobs slower to preempt than the reclaim deadline may only use
    `slow_free_gpus` (the slack outside the preemption-headroom band).
    `usage` is GPUs each team already holds. Deterministic.
    """
    quota = {q.team: q for q in quotas}
    used = dict(usage)
    pending: dict[str, list[Job]] = {}
    for job in queue_order(queued):
        pending.setdefault(job.team, []).append(job)
    grants: list[Grant] = []

    def fits(job: Job) -> bool:
        slow = job.preemption_seconds > reclaim_deadline_seconds
        return job.gpus <= free_gpus and (not slow or job.gpus <= slow_free_gpus)

    def share(team: str) -> float:
        q = quota.get(team)
        # a team without a quota only gets what everyone else leaves idle
        if q is None or q.quota_gpus <= 0:
            return float("inf")
        return used.get(team, 0) / (q.quota_gpus * q.weight)

    while True:
        candidates = []
        for team, jobs in pending.items():
            job = next((j for j in jobs if fits(j)), None)
            if job is not None:
                candidates.append((share(team), used.get(team, 0), team, job))
        if not candidates:
            return grants
        s, _, team, job = min(candidates, key=lambda c: (c[0], c[1], c[2]))
        q = quota.get(team)
        held = used.get(team, 0)
        if q is not None and held + job.gpus <= q.quota_gpus:
            why = f"team {team} within quota ({held}+{job.gpus} <= {q.quota_gpus:g} GPUs)"
        else:
            why = f"team {team} borrows idle quota ({held}+{job.gpus} GPUs over quota {q.quota_gpus if q else 0:g})"
        why += f"; lowest weighted share {s:.2f}" if s != float("inf") else "; no team under quota wants these GPUs"
        skipped = pending[team].index(job)
        if skipped:
            why += f"; backfilled past {skipped} larger job(s)"
        if job.preemption_seconds > reclaim_deadline_seconds:
            why += f"; slow to preempt ({job.preemption_seconds:g}s) so placed outside the headroom band"
        grants.append(Grant(job, why))
        pending[team].remove(job)
        used[team] = held + job.gpus
        free_gpus -= job.gpus
        if job.preemption_seconds > reclaim_deadline_seconds:
            slow_free_gpus -= job.gpus
