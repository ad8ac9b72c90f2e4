"""The long-running controller: leader election and a reconcile every interval, and retraining in the
background, off the reconcile path."""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field, replace

import pandas as pd

from adapters.mlflow import Tracker
from controller import heap
from controller.background import Background
from controller.reconcile import Reconciler
from controller.state import ControllerState
from core.cluster import Elector
from core.errors import ClusterError
from training.pipeline import FailedAfterPromoting, TrainSettings, train_series

log = logging.getLogger(__name__)


@dataclass
class BackgroundTrainer:
    """One training at a time, off the reconcile path; a failed one leaves the champion as it was. `beside=False`
    (the embedded cluster's replay, whose clock is not the wall clock): the training runs within the reconcile that
    asks for it, so a champion it promotes serves from the same step in every replay. `leading` is asked as each
    training starts (cli.run sets it: Reconciler.leads): one queued while this replica led, whose turn comes after it
    let the Lease go, is dropped (the leader retrains on its own schedule; two replicas would register version after
    version on the same evidence)."""
    tracking_uri: str
    settings: TrainSettings
    beside: bool = True
    leading: Callable[[], bool] = field(default=lambda: True, repr=False)
    _pool: Background = field(default_factory=lambda: Background("headroom-train"), repr=False)
    _running: dict[str, Future] = field(default_factory=dict, repr=False)

    def __call__(self, series: str, history: pd.Series, now: pd.Timestamp) -> None:
        if not self.beside:
            self._train(series, history, now)
            return
        if series in self._running and not self._running[series].done():
            return
        self._running[series] = self._pool.submit(self._train, series, history.copy(), now)

    def _train(self, series, history, now):
        if not self.leading():
            log.info("%s: retraining dropped: this replica no longer leads", series)
            return
        try:
            result = train_series(series, history, self.settings, Tracker(self.tracking_uri), now.to_pydatetime())
            log.info("%s: retrained: %s %s", series, result.selected, result.outcome)
        except FailedAfterPromoting as exc:  # the new champion serves: the rest of the training did not run
            log.warning("retraining %s", exc)
        except Exception as exc:  # noqa: BLE001 - report, keep the champion
            log.warning("%s: retraining failed, champion unchanged: %s", series, exc)

    def wait(self) -> None:
        for f in list(self._running.values()):
            f.result()


@dataclass
class Loop:
    """Leader election + a reconcile every `interval`; health for the probes."""
    reconciler: Reconciler
    elector: Elector
    interval: float
    lease_seconds: float = 15.0
    clock: Callable[[], pd.Timestamp] = field(default=lambda: pd.Timestamp.now(tz="UTC"))
    stop: threading.Event = field(default_factory=threading.Event)
    _beat: float = field(default_factory=time.monotonic)
    _reconciled: bool = False
    _leading: bool = False
    _settled: bool = False  # one election round done: leading with a reconcile behind it, or standing by
    election_error: str | None = None  # why the last election round failed (None: it did not)
    _fence_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _running: bool = False  # inside run(), before it lets the Lease go
    # a renewal a write asked for failed: the writes after it do not ask again (on a server that does not answer each
    # would wait out every retry, minutes, holding the fence lock); the next election round tries again
    _renewal_failed: bool = False

    def __post_init__(self) -> None:
        self.reconciler.leading = self.leading_until
        self.reconciler.stopping = self.stop

    def leading_until(self) -> float | None:
        """Until when (time.monotonic()) this replica may write now: its Lease's end as the other replicas may count
        it (renewed first if it has lapsed: still_leading); None: it may not write."""
        return self.elector.expires_at if self.still_leading() else None

    def still_leading(self) -> bool:
        """Whether this replica may write now: its Lease unexpired by its own clock, or renewed now (a reconcile longer
        than the Lease, e.g. on a slow server: a renewal that succeeds proves no other replica took over). Asked before
        each write of a reconcile, from its writer threads; once such a renewal has failed, not again until the next
        election round."""
        with self._fence_lock:
            if self.elector.is_leader:
                return True
            # let go on the way out (a late write never takes it back), or a renewal already failed this round
            if not self._running or self._renewal_failed:
                return False
            try:
                leading = self.elector.try_acquire_or_renew()
            except ClusterError as exc:
                log.warning("leader election (renewing mid-reconcile): %s", exc)
                leading = False
            self._renewal_failed = not leading
            return leading

    def healthy(self) -> bool:
        return time.monotonic() - self._beat < 3 * max(self.interval, self.lease_seconds)

    def ready(self) -> bool:
        """Leading with a reconcile behind it, or a standby that could read the Lease; a replica whose election rounds
        fail (the Lease forbidden, its namespace missing, the API server down) is no standby: not ready, and why."""
        if self.election_error is not None and not self._leading:
            raise ClusterError(f"leader election: {self.election_error}")
        return self._settled

    def run(self, once: bool = False) -> ControllerState | None:
        """Reconcile every interval while leading, until stopped (`once`: one pass); the last reconcile's state
        (None: it never led)."""
        next_reconcile, state = 0.0, None
        self._running = True
        heap.full_collections_between_reconciles()
        while not self.stop.is_set():
            self._beat = time.monotonic()
            was_leading = self._leading
            try:
                with self._fence_lock:  # not beside a renewal a write asked for (still_leading)
                    self._renewal_failed = False
                    self._leading = self.elector.try_acquire_or_renew()
                self.election_error = None
                if self._leading and not was_leading:
                    self.reconciler.took_lead()
            except ClusterError as exc:
                log.warning("leader election: %s", exc)
                self._leading, self.election_error = False, str(exc)
            if self._leading and time.monotonic() >= next_reconcile and not self.stop.is_set():
                # A reconcile ends within its interval, or its Lease when that is longer: with the election round it
                # stays well inside the liveness bound (healthy). Each write ends by the Lease's end besides (the
                # fence): no write after the other replicas could see the Lease lapse. What is left, the next does.
                deadline = time.monotonic() + max(self.interval, self.lease_seconds)
                state = self.reconciler.reconcile(self.clock(), deadline=deadline)
                self._reconciled = True
                next_reconcile = time.monotonic() + self.interval
                heap.collect()  # in the interval, where nothing waits for it
            elif not self._leading:
                self.reconciler.holder.publish(replace(self.reconciler.holder.get(), leader=False))
            self._settled = self._reconciled or not self._leading
            if once:
                break
            self.stop.wait(min(self.interval, self.lease_seconds / 3))
        if not self.stop.is_set():  # its statuses and Events written while it still leads; asked to stop, the Lease
            self.reconciler.flush()  # goes first (the new leader writes its own at once; a backlog would hold it)
        with self._fence_lock:
            self._leading = self._running = False  # it lets go: leading again later is taking the Lease anew
        self.reconciler.let_go()  # nothing queued beside is sent once the Lease goes
        try:
            if self.elector.release():
                log.info("the Lease is released: a standby takes it on its next election round")
        except ClusterError as exc:  # stopped as asked all the same: the standby takes the Lease once it expires
            log.warning("the Lease could not be released (%s): it expires by itself within %.0f s", exc,
                        self.lease_seconds)
        return state
