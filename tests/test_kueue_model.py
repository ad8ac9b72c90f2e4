"""planning.kueue.admit, the embedded cluster's model of Kueue's admission, against what Kueue's documentation says
(../shared/kueue/docs/cluster_queue.md: queueing strategies, cohorts, "Flavors and borrowing semantics",
"Borrowing example", BorrowingLimit), for one flavor (GPUs) and every training ClusterQueue in one cohort."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.errors import ConfigError
from planning.kueue import admit


def looked_at(pending, usage=None, quotas=None, free=1000, kept=None, strict=()):
    """pending: (id, queue, gpus, priority, created) rows, the id as the UID; returns the admitted ids in admission
    order, and the ids Kueue set aside. `strict`: the StrictFIFO queues."""
    ids = [p[0] for p in pending]
    chosen, aside = admit(np.array([p[1] for p in pending], dtype=object), np.array([p[2] for p in pending], np.int64),
                          np.array([p[3] for p in pending], np.int64), np.array([p[4] for p in pending], float), ids,
                          usage or {}, quotas, free, kept, strict)
    return [ids[i] for i in chosen], [ids[i] for i in aside]


def run(pending, usage=None, quotas=None, free=1000, kept=None, strict=()):
    """The admitted ids, in admission order."""
    return looked_at(pending, usage, quotas, free, kept, strict)[0]


def test_best_effort_fifo_a_head_that_does_not_fit_does_not_block_smaller_ones():
    # "older Workloads that can't be admitted will not block newer Workloads that fit in the available quota"
    pending = [("big", "a", 8, 0, 1.0), ("small", "a", 4, 0, 2.0), ("small2", "a", 4, 0, 3.0)]
    assert run(pending, quotas={"a": 6}) == ["small"]
    assert run(pending, quotas={"a": 8}) == ["big"]


def test_strict_fifo_a_head_that_does_not_fit_blocks_its_queue():
    """cluster_queue.md: under StrictFIFO "older workloads that can't be admitted will block newer workloads, even if
    the newer workloads fit in the available quota". Kueue requeues such a head at once (v0.19's
    pkg/cache/queue/cluster_queue.go, RequeueIfNotPresent: immediate for StrictFIFO), so it is the head of every cycle
    after, never set aside, and nothing behind it is looked at; the model took every queue as BestEffortFIFO."""
    pending = [("big", "a", 8, 0, 1.0), ("small", "a", 4, 0, 2.0), ("small2", "a", 4, 0, 3.0)]
    assert looked_at(pending, quotas={"a": 6}, strict={"a"}) == ([], [])
    assert looked_at(pending, quotas={"a": 6}, strict={"b"}) == (["small"], ["big", "small2"])
    assert run(pending, quotas={"a": 16}, strict={"a"}) == ["big", "small", "small2"]
    # a head that fits the quota but not the free GPUs blocks it too (passed over under BestEffortFIFO)
    assert run(pending, quotas={"a": 16}, free=6, strict={"a"}) == []
    assert run(pending, quotas={"a": 16}, free=6) == ["small"]
    # another queue is not blocked: b's Workload borrows what a's blocked head leaves
    pending.append(("b0", "b", 2, 0, 4.0))
    assert looked_at(pending, quotas={"a": 6, "b": 0}, strict={"a"}) == (["b0"], [])


def test_strict_fifo_a_heads_reservation_holds_until_it_is_admitted():
    """A StrictFIFO head within its nominalQuota that the cohort's unused quota does not cover reserves that quota in
    every cycle it heads its queue, so while it waits no borrower after it in a cycle is admitted into it (under
    BestEffortFIFO it reserves in one cycle and is set aside). The head it keeps out is skipped, and requeued at once
    (scheduler.go's requeueAndUpdate: FailedAfterNomination) whatever its queue's strategy: it heads its queue again
    in the next cycle, neither admitted nor set aside while the reservation holds, nothing behind it looked at."""
    quotas = {"a": 8, "b": 0}
    pending = [("a-big", "a", 4, 0, 0.0), ("b1", "b", 1, 0, 1.0), ("b2", "b", 1, 0, 2.0), ("b3", "b", 1, 0, 3.0)]
    assert looked_at(pending, usage={"b": 6}, quotas=quotas) == (["b1", "b2"], ["a-big", "b3"])
    assert looked_at(pending, usage={"b": 6}, quotas=quotas, strict={"a"}) == ([], [])
    pending = [("a-big", "a", 4, 0, 0.0), ("b-small", "b", 1, 0, 1.0)]
    assert looked_at(pending, usage={"b": 6}, quotas=quotas) == (["b-small"], ["a-big"])
    assert looked_at(pending, usage={"b": 6}, quotas=quotas, strict={"b"}) == (["b-small"], ["a-big"])


def test_ordered_by_priority_then_creation_time():
    pending = [("old", "a", 2, 0, 1.0), ("new", "a", 2, 0, 5.0), ("urgent", "a", 2, 3, 9.0), ("newer", "a", 2, 0, 7.0)]
    assert run(pending, quotas={"a": 6}) == ["urgent", "old", "new"]
    assert run(pending, quotas={"a": 100}) == ["urgent", "old", "new", "newer"]


def test_borrowing_example_from_the_docs():
    """team-a-cq nominal 9, team-b-cq nominal 12, one cohort: "If team-b-cq has no admitted Workloads, then team-a-cq
    can admit Workloads with resources adding up to 12+9=21"."""
    quotas = {"team-a-cq": 9, "team-b-cq": 12}
    pending = [(f"a{i}", "team-a-cq", 1, 0, float(i)) for i in range(30)]
    assert len(run(pending, quotas=quotas)) == 21
    # a queue outside the cohort's quotas (no ClusterQueue) admits nothing
    assert run([("x", "nowhere", 1, 0, 0.0)], quotas=quotas) == []


def test_within_nominal_quota_goes_before_borrowing():
    """"If team-b-cq has pending Workloads and team-a-cq has all its nominalQuota used, Kueue will admit Workloads in
    team-b-cq before admitting any new Workloads in team-a-cq" - even a's older, higher-priority ones: in a scheduling
    cycle, of the heads of the queues, those within their own nominalQuota go first (scheduler.go's classicalIterator).
    A cycle takes one head of each queue, so a borrower heading its queue in the first cycle still borrows what b's
    head there leaves, before b's next Workload heads b's queue in the next cycle."""
    quotas = {"team-a-cq": 9, "team-b-cq": 12}
    pending = [("a-next", "team-a-cq", 4, 5, 0.0), ("b0", "team-b-cq", 4, 0, 10.0), ("b1", "team-b-cq", 4, 0, 11.0)]
    assert run(pending, usage={"team-a-cq": 9}, quotas=quotas) == ["b0", "a-next", "b1"]  # 12 - 4 - 4 = 4 for b1
    # with GPUs for one only, b's gets them
    assert run(pending, usage={"team-a-cq": 9}, quotas=quotas, free=4) == ["b0"]


def test_a_head_within_its_nominal_quota_reserves_it_for_its_cycle():
    """Kueue v0.19 (pkg/scheduler/scheduler.go, reserveCapacityForUnreclaimablePreempt; flavorassigner's
    fitsResourceQuota): a head whose GPUs are within its queue's nominalQuota but not the cohort's unused quota needs
    preemption; with none to preempt (reclaimWithinCohort Never, one priority) it reserves them for the scheduling
    cycle, so the heads after it in that cycle that would use that quota are skipped (and head their queues again in
    the next cycle). The model passed such a head over and let a borrower after it take the quota it could not."""
    quotas = {"a": 8, "b": 0}
    # b holds 6 of a's quota (a quota lowered under its jobs): the cohort has 2 unused; a-big (4, within a's 8) does
    # not fit them, reserves 4 in the first cycle, and b-small, borrowing, is skipped; a-small heads a's queue in the
    # next cycle, where nothing is reserved, and goes before b-small, borrowing: it takes the 2 left
    pending = [("a-big", "a", 4, 0, 0.0), ("b-small", "b", 1, 0, 1.0), ("a-small", "a", 2, 0, 2.0)]
    assert looked_at(pending, usage={"b": 6}, quotas=quotas) == (["a-small"], ["a-big", "b-small"])
    # beyond a's nominalQuota (9 > 8) it cannot be admitted whatever is preempted: no reservation, b-small borrows
    pending[0] = ("a-big", "a", 9, 0, 0.0)
    assert looked_at(pending, usage={"b": 6}, quotas=quotas) == (["b-small"], ["a-big", "a-small"])
    # a borrowing head reserves too, but only against the heads after it: a borrower older than it goes first
    pending = [("a-big", "a", 4, 0, 5.0), ("b-small", "b", 1, 0, 1.0)]
    assert looked_at(pending, usage={"a": 6, "b": 1}, quotas={"a": 8, "b": 0}) == (["b-small"], ["a-big"])
    pending = [("a-big", "a", 4, 0, 0.0), ("b-small", "b", 1, 0, 1.0)]
    assert looked_at(pending, usage={"a": 6, "b": 1}, quotas={"a": 8, "b": 0}, strict={"a"}) == ([], [])


def test_quota_a_queue_does_not_lend_is_its_own_alone():
    """A ClusterQueue's lendingLimit (the shipped inference queue's: 0) keeps the rest of its nominalQuota out of the
    cohort (cluster_queue.md, LendingLimit): its own Workloads fit it whatever the cohort has left, and the others
    cannot borrow it."""
    quotas, kept = {"serve": 4, "a": 6}, {"serve": 4}
    pending = [("train", "a", 8, 0, 0.0), ("replica", "serve", 4, 0, 1.0)]
    assert run(pending, quotas=quotas, kept=kept) == ["replica"]  # 8 > a's 6: serve's 4 are not the cohort's
    assert run(pending[:1], quotas=quotas) == ["train"]  # lent, they would be
    # beyond its own quota a replica borrows the training queues' unused quota, after the Workloads within theirs
    pending = [("replica", "serve", 2, 0, 0.0), ("train", "a", 5, 0, 1.0)]
    assert run(pending, usage={"serve": 4}, quotas=quotas, kept=kept) == ["train"]
    assert run(pending, usage={"serve": 4, "a": 2}, quotas=quotas, kept=kept) == ["replica"]


def test_a_queue_above_a_lowered_quota_leaves_another_queues_own_quota_whole():
    """Training holding more than the quota headroom just lowered left the cohort's unused quota negative, and that
    was taken from the inference queue's own (unlent) quota: a replica fitting it waited, until the order of two
    quota writes in one reconcile decided it (the what-if and `headroom run` then differed: test_sameness)."""
    quotas, kept = {"serve": 24, "a": 36}, {"serve": 24}
    pending = [("replica", "serve", 8, 0, 0.0)]
    assert run(pending, usage={"serve": 16, "a": 38}, quotas=quotas, kept=kept) == ["replica"]
    pending = [("replica", "serve", 8, 0, 0.0), ("train", "a", 1, 0, 1.0)]  # several queues: Kueue's cycles
    assert run(pending, usage={"serve": 16, "a": 38}, quotas=quotas, kept=kept) == ["replica"]


def test_among_borrowers_higher_priority_first_then_creation():
    quotas = {"a": 0, "b": 0, "c": 10}
    pending = [("a-low", "a", 4, 0, 0.0), ("b-high", "b", 4, 2, 5.0), ("a-mid", "a", 4, 1, 1.0)]
    assert run(pending, quotas=quotas) == ["b-high", "a-mid"]  # 10 to borrow: two of 4
    pending = [("a-old", "a", 4, 0, 0.0), ("b-new", "b", 4, 0, 5.0), ("a-new", "a", 4, 0, 6.0)]
    assert run(pending, quotas=quotas, free=8) == ["a-old", "b-new"]


def test_borrowing_never_takes_the_cohort_over_its_nominal_quotas():
    """Without a borrowingLimit a queue "can borrow up to the sum of nominal quotas from all the ClusterQueues in the
    cohort": what one queue already borrowed is not unused quota any more, in the queue it came from either."""
    quotas = {"a": 10, "b": 10}
    # a holds 15 after the planner shrank the quotas (Kueue does not evict on a shrink): 5 left in the cohort
    assert run([("a-more", "a", 8, 0, 0.0)], usage={"a": 15}, quotas=quotas) == []
    assert run([("a-more", "a", 5, 0, 0.0)], usage={"a": 15}, quotas=quotas) == ["a-more"]
    assert run([("b-new", "b", 8, 0, 0.0)], usage={"a": 15}, quotas=quotas) == []
    assert run([("b-new", "b", 4, 0, 0.0), ("b-2", "b", 2, 0, 1.0)], usage={"a": 15}, quotas=quotas) == ["b-new"]
    # both over: nothing
    assert run([("b", "b", 1, 0, 0.0)], usage={"a": 12, "b": 9}, quotas=quotas) == []


def test_physically_free_gpus_bound_admission():
    pending = [("a0", "a", 4, 0, 0.0), ("a1", "a", 4, 0, 1.0), ("a2", "a", 2, 0, 2.0)]
    assert run(pending, quotas={"a": 100}, free=6) == ["a0", "a2"]  # a1 does not fit, a2 behind it does
    assert run(pending, quotas={"a": 100}, free=0) == []


def test_no_number_of_heads_that_do_not_fit_blocks_a_workload_behind_them():
    """Only the first 64 Workloads of a queue were looked at, so 64 older ones too big for the free GPUs kept every
    smaller one behind them out (a job trace with many 8-GPU jobs on a small cluster ran no training at all), where
    Kueue's scheduling cycles, back to back between two steps, try them all."""
    pending = [(f"big{i}", "a", 50, 0, float(i)) for i in range(100)] + [("small", "a", 1, 0, 999.0)]
    assert run(pending, quotas={"a": 10}) == ["small"]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abc"), st.integers(1, 8), st.integers(0, 2), st.integers(0, 50)),
                max_size=25),
       st.fixed_dictionaries({q: st.integers(0, 20) for q in "abc"}),
       st.fixed_dictionaries({q: st.integers(0, 25) for q in "abc"}),
       st.integers(0, 60), st.integers(0, 20), st.sets(st.sampled_from("abc")))
def test_admission_invariants(rows, quotas, usage, free, keep, strict):
    """The bounds hold over any line, c keeping `keep` of its quota from the cohort (a lendingLimit, as the inference
    queue's), the `strict` queues StrictFIFO; a Workload is never passed over for a later one of its queue no larger;
    and one is kept out of what is left only by a head of another queue that reserved its own queue's nominalQuota in
    its cycle (within that quota, set aside or a StrictFIFO head left): a bound stated so since Kueue's reservation
    (scheduler.go) blocks the heads after it in the cycle whatever they would fit."""
    pending = [(f"w{i}", q, g, p, float(c)) for i, (q, g, p, c) in enumerate(rows)]
    got, aside = looked_at(pending, usage=usage, quotas=quotas, free=free, kept={"c": keep}, strict=strict)
    by_id = {p[0]: p for p in pending}
    assert len(got) == len(set(got)) and not set(got) & set(aside)
    lines = {q: sorted((p for p in pending if p[1] == q), key=lambda p: (-p[3], p[4], p[0])) for q in "abc"}
    # StrictFIFO: a queue admits the first of its line, in its order, up to its head, the first it does not admit,
    # which stays; none is set aside, none behind the head looked at
    heads = []
    for q in strict:
        taken = [p for p in lines[q] if p[0] in got]
        assert taken == lines[q][:len(taken)] and not {p[0] for p in lines[q]} & set(aside)
        heads += [p[0] for p in lines[q][len(taken):len(taken) + 1]]
    admitted = sum(by_id[i][2] for i in got)
    assert admitted <= free
    # the cohort never goes over the quotas its queues lend through admission, and what c keeps is c's alone
    own = {q: min(keep, quotas[q]) if q == "c" else 0 for q in quotas}
    room = {q: max(own[q] - usage[q], 0) for q in quotas}
    unused = sum(quotas[q] - own[q] - max(usage[q] - own[q], 0) for q in quotas)
    into = {q: sum(by_id[i][2] for i in got if by_id[i][1] == q) for q in quotas}
    borrowed = sum(max(into[q] - room[q], 0) for q in quotas)
    assert borrowed <= max(unused, 0)

    def reserver(q):  # a Workload of another queue that may have reserved its queue's quota in a cycle
        return any(by_id[i][1] != q and by_id[i][2] <= quotas[by_id[i][1]] for i in [*aside, *heads])

    # within a queue, a Workload passed over for a later one of the same or lower rank did not fit then: one a
    # reservation kept out heads its queue in the next cycle, so nothing behind it passes it
    for q in "abc":
        line = lines[q]
        taken = [p for p in line if p[0] in got]
        if taken:
            last = line.index(taken[-1])
            skipped = [p for p in line[:last] if p[0] not in got]
            assert all(p[2] > taken[-1][2] for p in skipped)
    # it admits until nothing else fits: any Workload left over fits neither the GPUs nor the quota its queue has
    # left, or a reservation held it (a StrictFIFO head's keeps the heads it skips neither admitted nor set aside);
    # one passed over for the GPUs alone is not set aside
    left_free = free - admitted
    for p in pending:
        if p[0] not in got and (p[1] not in strict or p[0] in heads):
            left_quota = max(room[p[1]] - into[p[1]], 0) + unused - borrowed
            assert p[2] > left_free or p[2] > left_quota or reserver(p[1])
            assert p[0] in aside or p[2] > left_free or p[0] in heads or reserver(p[1])


def _cluster_with_trace(jobs, capacity=4, quota=None, strict=()):
    """An embedded cluster whose one training queue may fill the cluster (or holds `quota`; StrictFIFO if `strict`
    names it), and a job trace: (GPUs, work seconds, arrival offset seconds) per job."""
    import pandas as pd

    from adapters.embedded import EmbeddedCluster
    from core.policy import PolicySpec, manifest
    from core.settings import WorldSettings

    start = pd.Timestamp("2026-01-08 10:00", tz="UTC")
    spec = PolicySpec.model_validate({"query": "q", "capacity": {"demandPerGpu": 10.0}, "mode": "active",
                                      "target": {"kind": "Deployment", "name": "chat"},
                                      "trainingClusterQueues": ["train"]})
    index = pd.date_range(start - pd.Timedelta(days=1), start + pd.Timedelta(days=1), freq="5min")
    trace = tuple(np.array(column, dtype=float) for column in zip(*jobs))
    demand = {"default/chat": pd.Series(0.0, index=index)}
    world = EmbeddedCluster(capacity, [manifest("chat", "default", spec)], demand, start=start.timestamp(),
                            settings=WorldSettings(checkpoint_interval_seconds=1800.0, strict_fifo_queues=strict),
                            jobs=(trace[0].astype(np.int64), trace[1], trace[2]))
    world.set_cluster_queue_quota("train", capacity if quota is None else quota)
    return world, start.timestamp()


def test_kueue_admits_when_gpus_free_between_two_reconciles():
    """Kueue's scheduler is not the controller's clock: a ClusterQueue "admits Workloads if and only if" their requests
    fit its unused quota (cluster_queue.md), and a Workload that did not fit is "re-queued after an unsuccessful
    admission attempt" (Queueing strategy) and admitted once quota frees. So a job that finishes 10 minutes into a
    15-minute step hands its GPUs to the next pending job then, not 5 minutes later at the controller's next step (the
    embedded cluster admitted only at its steps: those 5 minutes were idle GPUs, about 1 point of utilization)."""
    world, t0 = _cluster_with_trace([(4, 600.0, 0.0), (4, 3600.0, 0.0)])
    assert len(world.admit()) == 1  # the first job holds the whole quota; the second waits
    world.advance(t0 + 900.0)
    running = [w for w in world.workloads() if w.admitted]
    assert [w.name for w in running] == ["train-job-2"]
    assert running[0].last_checkpoint.timestamp() == t0 + 600.0  # admitted as the first one finished
    assert world.accounting.training_alloc == 4 * 600.0 + 4 * 300.0


def test_kueue_admits_a_job_as_it_arrives_into_free_quota():
    """A job of the trace arriving between two steps into free quota is admitted at once (cluster_queue.md: admitted "if
    and only if" it fits the quota), not at the controller's next step."""
    world, t0 = _cluster_with_trace([(2, 7200.0, 100.0)])
    assert world.admit() == []  # nothing has arrived yet
    world.advance(t0 + 300.0)
    (job,) = world.workloads()
    assert job.admitted and job.last_checkpoint.timestamp() == t0 + 100.0
    assert world.accounting.training_alloc == 2 * 200.0


def test_two_workloads_created_in_one_second_go_by_uid():
    """A Workload's creationTimestamp is whole seconds (the API server keeps RFC 3339), and Kueue orders Workloads of
    one priority created in one second by UID (v0.19's pkg/cache/queue/cluster_queue.go, baseCompareFunc). The
    embedded cluster ordered them by the fraction of a second its own clock had, which no cluster's Workload carries,
    and reported that fraction as their creation: job 9 (created at 100.2 s) went before job 10 (100.7 s), where
    Kueue, reading both as created at 100 s, takes uid-10 before uid-9 (compared as text)."""
    eight = [(1, 50.0, 0.0)] * 4 + [(1, 51.0, 0.0)] * 4  # hold the 4 GPUs of quota until 101 s
    world, t0 = _cluster_with_trace([*eight, (4, 3600.0, 100.2), (4, 3600.0, 100.7)])
    world.admit()
    world.advance(t0 + 300.0)
    late = {w.name: w for w in world.workloads() if w.name in ("train-job-9", "train-job-10")}
    assert {w.creation.timestamp() for w in late.values()} == {t0 + 100.0}
    assert (late["train-job-9"].uid, late["train-job-10"].uid) == ("uid-9", "uid-10")
    assert [w.name for w in world.workloads() if w.admitted] == ["train-job-10"]


def test_the_embedded_cluster_takes_a_queue_as_strict_fifo_when_told():
    """simulate.world.strict_fifo_queues (the what-if's and the embedded run's cluster): a queue whose ClusterQueue
    says queueingStrategy: StrictFIFO. There a job larger than the quota lent blocks the jobs behind it, until a quota
    that fits it comes (a Kueue event), when it is admitted first; every queue was BestEffortFIFO, so the what-if ran
    the small jobs behind it where a StrictFIFO cluster runs none."""
    jobs = [(6, 3600.0, 0.0), (2, 3600.0, 0.0), (2, 3600.0, 0.0)]
    best_effort, _ = _cluster_with_trace(jobs, capacity=8, quota=4)
    best_effort.admit()
    assert [w.name for w in best_effort.workloads() if w.admitted] == ["train-job-2", "train-job-3"]
    strict, _ = _cluster_with_trace(jobs, capacity=8, quota=4, strict=("train",))
    assert strict.admit() == []
    strict.set_cluster_queue_quota("train", 8)
    strict.admit()
    assert [w.name for w in strict.workloads() if w.admitted] == ["train-job-1", "train-job-2"]


def test_a_strict_fifo_queue_no_policy_names_is_refused():
    """A name in simulate.world.strict_fifo_queues that is no ClusterQueue of the policies (a typo) would leave the
    queue meant BestEffortFIFO without a word: refused, naming the field and the queues there are."""
    with pytest.raises(ConfigError, match=r"strict_fifo_queues: trian: no ClusterQueue .* target: train\)"):
        _cluster_with_trace([(1, 60.0, 0.0)], strict=("trian",))
