"""Each policy's forecast, as the Reconciler keeps it (controller.reconcile): fitted, and refitted once an hour on
complete hours, in the reconcile or beside the reconciles (a background thread, its fits in a process of their own);
the refits finished beside taken up (until its own is, or where one stored by the leader since it last led is newer,
the newest forecast stored for it by the replica before);
every forecast issued recorded in the forecast log; its realized error and
coverage scored against the hours that came (to MLflow with drift when tracking is on); and retraining asked for, on
drift or on the schedule.

The Reconciler keeps what is its own and passes it in: each policy's demand samples (which a whole lookback re-read
beside joins), its error counts, its Lease (the forecast store is written, and live accuracy logged, by the leader
only), its Events, and its deadline (a fit in the reconcile moves it later by as long as it took).
"""
from __future__ import annotations

import logging
import multiprocessing
import signal
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pandas as pd

from adapters.prometheus import PrometheusError
from controller.actions import EventNote, RecordEvent
from controller.background import Background
from controller.demand import DemandReader
from controller.executor import window
from controller.forecasts import Models
from controller.observe import (
    MIN_FIT_HOURS,
    DataSettings,
    IssuedForecast,
    basis,
    due,
    fit,
    fit_hourly,
    hourly_history,
    made_for,
    stored,
    usable,
)
from controller.state import forget_absent
from core.cluster import FORECAST_BASIS, FORECAST_UID, ForecastStore
from core.deadline import within
from core.errors import ClusterError
from forecast.baselines import BASELINES
from forecast.history import HistoryError, check_values
from training.realized import HORIZONS, DriftEvent, log_realized, realized_errors

if TYPE_CHECKING:  # the Reconciler's module imports this one
    from controller.reconcile import PolicyObject

# the Reconciler's log: what keeping its forecasts says reads, and is filtered, under its name as before
log = logging.getLogger("controller.reconcile")

# Background refits' results taken up at once (_refit_beside): each taken up alone would have every reconcile
# re-plan the hours; all of the hour's held until the last would hold a thousand whole lookbacks in memory
TAKE_UP_BATCH = 100
FORECAST_LOG_KEPT = pd.Timedelta(days=7)  # issued forecasts kept (realized error needs the last day or two)


def made_for_object(frame: pd.DataFrame, p: PolicyObject) -> bool:
    """Whether a stored forecast was made for the policy object `p`, not for one deleted before it under its name (a
    new object is a new policy); one recorded without a uid cannot say, and is taken as before."""
    return frame.attrs.get(FORECAST_UID) in (None, p.ref.uid)


def ignore_interrupts() -> None:
    """The fitting process leaves Ctrl-C to the controller, which stops it (no KeyboardInterrupt traceback from it)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@dataclass(frozen=True)
class _Hourly:
    """One policy's hourly work done beside the reconciles (ForecastKeeper._hourly)."""
    tried: tuple                     # (hour, policy generation)
    basis: str                       # what it read and fitted (observe.basis of the spec it was made for)
    whole: pd.Series | None          # the whole lookback re-read (None: the read failed)
    forecast: IssuedForecast | None  # fitted on it (None: too little history, or the fit failed: see fault)
    fault: str | None
    accuracy: tuple | None           # (hour, realized error, 80% coverage), None when there is nothing to score
    drift: tuple                     # drift events (tracking on)


class ForecastKeeper:
    """Keeps each policy's forecast for the Reconciler. A reconcile says it starts (reconcile_starts: whether it takes
    the finished refits up), asks for each policy's forecast (current) and, where one is due, for a new one (refit),
    and for the realized error its status shows (realized); close() stops the work beside as the controller stops."""

    def __init__(self, demand: DemandReader, data: DataSettings, raw: dict[str, pd.Series], *,
                 error: Callable[[str, str, Exception | str], None], leads: Callable[[], bool],
                 lease_end: Callable[[], float | None], record: Callable[[list[RecordEvent]], None],
                 fit_took: Callable[[float], None], models: Models | None = None,
                 forecast_log: ForecastStore | None = None, tracker=None,
                 retrain: Callable[[str, pd.Series, pd.Timestamp], None] | None = None, drift_factor: float = 1.5,
                 drift_window: int = 24, retrain_every_seconds: float = 0.0, refit_beside: bool = False):
        self.demand, self.data = demand, data
        # the Reconciler's demand samples per policy, shared: the hourly work reads them, its whole re-read joins them
        self._raw = raw
        self._error = error            # counts and logs a fault by its stage (Reconciler._error)
        self._leads = leads            # whether this replica may write now
        self._lease_end = lease_end    # until when it may write (_to_store)
        self._record = record          # Events to write (drift)
        self._fit_took = fit_took      # a fit in the reconcile took so many seconds: its deadline moves later by them
        self.models = models or Models()
        self.forecast_log, self.tracker, self.retrain = forecast_log, tracker, retrain
        self.drift_factor, self.drift_window = drift_factor, drift_window
        self.retrain_every_seconds = retrain_every_seconds
        self.refit_beside = refit_beside  # hourly refits in a background thread (a Kubernetes controller's many series)
        # the maps below are per policy, by its key, and forget a policy deleted (keep)
        self._forecasts: dict[str, IssuedForecast] = {}
        # policy -> ((hour, generation) looked up, the stored forecast or None) while it has no forecast of its own made
        # since it took the Lease
        self._taken: dict[str, tuple[tuple, IssuedForecast | None]] = {}
        # when this replica last took the Lease (its first reconcile since; None: never, or not on a Lease): a forecast
        # of its own made before may be older than one the leader meanwhile stored
        self._lead_began: pd.Timestamp | None = None
        self._took_lead = False
        self._last_trained: dict[str, pd.Timestamp] = {}  # the schedule's clock (from start-up)
        self._retrained_at: dict[str, pd.Timestamp] = {}  # the last retraining asked for
        self._accuracy: dict[str, tuple[pd.Timestamp, dict, dict]] = {}
        self._refits: dict = {}                     # policy -> the background refit under way (Future)
        self._tried: dict[str, tuple[tuple, str | None]] = {}  # policy -> ((hour, generation) tried, its fault)
        # policy deleted or created again -> (its series, its refit under way then, when it was seen gone): its stored
        # forecasts issued before then are dropped once that refit, which records its forecast as it ends, is done
        self._unpruned: dict[str, tuple[str, Future | None, pd.Timestamp]] = {}
        self._refit_pool: Background | None = None
        self._fitter: ProcessPoolExecutor | None = None  # where the hourly work fits (_fit_apart)
        self._fitter_lock = threading.Lock()
        self._taking_up = False  # this reconcile takes the finished background refits up (_refit_beside)

    def reconcile_starts(self) -> None:
        """A reconcile starts: it takes the finished background refits up when TAKE_UP_BATCH are done (or all)."""
        finished = sum(job.done() for job in self._refits.values())
        self._taking_up = finished >= min(TAKE_UP_BATCH, len(self._refits))

    def current(self, key: str) -> IssuedForecast | None:
        """The policy's latest forecast (whether it is still usable is the caller's to ask)."""
        return self._forecasts.get(key)

    def took_lead(self) -> None:
        """This replica has just taken the Lease (controller.loop): the replica that led meanwhile may have stored
        forecasts newer than its own (those it held, and the refits it queued before and takes up after), which it
        plans on until its own refits land (in_force); the store is looked up anew."""
        self._took_lead = True
        self._taken.clear()

    def in_force(self, p: PolicyObject, cached: IssuedForecast | None, now: pd.Timestamp) -> IssuedForecast | None:
        """The forecast `p` is planned on now (None: the planner's conservative fallback): the newest usable one made
        for it (_answers), `cached`, its own, or with the refit beside one the forecast store holds for its series
        (the leader's, before this replica started or took the Lease) until its own refit lands. A replica waiting
        for its own fell back to last week's peak, above or below the forecast in force, and one that led again
        planned on its own older forecast: every restart and failover moved the reservation and back, cutting
        inference or taking lent GPUs back. The store is looked up once an hour and generation, only while this
        replica has no forecast of its own made since it took the Lease (the leader alone stores forecasts); a read
        that fails is tried again at the next reconcile."""
        if self._took_lead:  # the first reconcile since it took the Lease: what it fits from now on is the newest
            self._took_lead, self._lead_began = False, now
        own = usable(cached, now, self.data)
        own = own if own is not None and self._answers(own, p) else None
        if not self.refit_beside or self.forecast_log is None or (own is not None and (
                self._lead_began is None or own.made_at >= self._lead_began)):
            # a refit in the reconcile fits its own at once; the embedded cluster's log is a replay's, not a leader's
            self._taken.pop(p.key, None)
            return own
        looked = (now.floor("h"), p.generation)
        held, fresh = self._taken.get(p.key), False
        if held is None or held[0] != looked:
            try:
                held = self._taken[p.key] = (looked, self._stored(p, now))
            except (ClusterError, OSError) as exc:
                self._error("cluster", p.series, exc)
                return own
            fresh = True  # looked up now: said once
        taken = usable(held[1], now, self.data)
        if taken is None or (own is not None and taken.made_at <= own.made_at):
            return own
        if fresh:
            log.info("%s: planned on the forecast %s issued at %s, from the forecast store, until its own refit lands",
                     p.key, taken.model, taken.made_at)
        return taken

    def _answers(self, forecast: IssuedForecast, p: PolicyObject) -> bool:
        """Whether `p` can be planned on `forecast`: made for its spec (observe.made_for), with its target and
        headroom quantiles."""
        wanted = {p.spec.target_quantile, p.spec.headroom_quantile}
        return made_for(forecast, p.spec, p.generation) and wanted <= {float(c) for c in forecast.frame.columns}

    def _stored(self, p: PolicyObject, now: pd.Timestamp) -> IssuedForecast | None:
        """The newest forecast of `p`'s series in the store, issued by `now` and within keep_forecast_seconds of it,
        that it can be planned on (_answers)."""
        assert self.forecast_log is not None
        since = now - pd.Timedelta(seconds=self.data.keep_forecast_seconds)
        for issued, frame in sorted(self.forecast_log.load(p.series, since=since).items(), reverse=True):
            taken = stored(issued, frame)
            if issued <= now and taken is not None and made_for_object(frame, p) and self._answers(taken, p):
                return taken
        return None

    def refit(self, p: PolicyObject, raw: pd.Series, now: pd.Timestamp, cached: IssuedForecast | None,
              read_whole: bool) -> tuple[IssuedForecast | None, str | None]:
        """(forecast, fault) of a policy whose forecast is due (controller.observe.due), its data fresh: fitted now on
        `raw`, its samples, or with the refit beside the hour's work queued and a finished one taken up (its whole
        lookback joins the samples held). `read_whole`: the caller read the whole lookback this hour already, so the
        work beside reads it not again."""
        if self.refit_beside:
            return self._refit_beside(p, now, cached, read_whole)
        fresh, fault = self._fit(p, hourly_history(raw, p.spec.statistic, now, self.data.outlier_factor), now)
        if fresh is not None:
            cached = self._take(p, fresh)
        return cached, fault

    def realized(self, p: PolicyObject, forecast: IssuedForecast | None, raw: pd.Series,
                 now: pd.Timestamp) -> tuple[dict[int, float], dict[int, float]]:
        """Recent realized error per horizon (and 80% coverage) of the policy's forecasts, `forecast` the one in use
        and `raw` its samples (asked only once one of them is not missing); to MLflow, with drift, when tracking is
        on. Once an hour (actuals arrive hourly); with the refit beside, computed there and only read here."""
        if self.forecast_log is None or forecast is None:
            return {}, {}
        hour = now.floor("h")
        done = self._accuracy.get(p.key)
        if done is not None and (done[0] == hour or self.refit_beside):
            return done[1], done[2]
        if self.refit_beside:
            return {}, {}
        hourly = hourly_history(raw, p.spec.statistic, now, self.data.outlier_factor)
        errors, coverage, drift = self._accuracy_of(p, forecast.scale, hourly, now)
        self._drifted(p, drift, now)
        self._accuracy[p.key] = (hour, errors, coverage)
        return errors, coverage

    def keep(self, keys: set[str], deleted: Mapping[str, str], now: pd.Timestamp) -> None:
        """Forget the policies not among `keys` (deleted, or created again): their forecasts, realized error and
        retraining clocks, and their refits not yet taken up (one not started never runs; one under way is not taken
        up). The policies `deleted` (objects the cluster no longer lists, as at `now`: gone, or created again under
        their name; by key, each with its series) lose their champion kept and their stored forecasts issued before
        `now` too (every one of the old object's; one created again issues its own from now on), the latter once a
        refit of theirs under way is done: only the forecasts the store holds (its own files, or data keys of its
        ConfigMap, not whatever else is beside them), written by the leader only, as any write to the store. A prune
        not done (the store failed, or this replica could not write) is tried again at the next prune_deleted, each
        policy's on its own; the caller calls only after the policies are listed, so never on a list that failed."""
        under_way = {}
        for key in self._refits.keys() - keys:
            if not (job := self._refits.pop(key)).cancel():
                under_way[key] = job
        forget_absent(keys, self._forecasts, self._taken, self._tried, self._accuracy, self._last_trained,
                      self._retrained_at)
        for key, series in deleted.items():
            self.models.forget(series)
            self._unpruned[key] = (series, under_way.get(key), now)

    def prune_deleted(self) -> None:
        """Drop the stored forecasts of the policies deleted (keep) whose refit under way then is done. The caller
        calls it after the plan's writes: against a slow store the prunes would spend the reconcile's deadline before
        them."""
        for key, (series, job, seen_gone) in list(self._unpruned.items()):
            if (job is None or job.done()) and self._forget_stored(series, seen_gone):
                del self._unpruned[key]

    def _forget_stored(self, series: str, before: pd.Timestamp) -> bool:
        """Drop the forecasts stored for `series` issued before `before`; whether that was done (a store that fails is
        said and counted)."""
        store = self.forecast_log
        if store is None:
            return True
        try:
            return self._to_store(series, lambda: store.prune(series, before=before))
        except (ClusterError, OSError) as exc:
            self._error("cluster", series, exc)
            return False

    def refitting(self) -> int:
        """Background refits not yet taken up."""
        return len(self._refits)

    def close(self) -> None:
        """Hourly work not started is dropped and the fit under way stopped (a controller shutting down does not wait
        for a thousand refits)."""
        if self._refit_pool is not None:
            self._refit_pool.drop()
        with self._fitter_lock:
            if self._fitter is not None:
                # the fit under way is of no use to a controller on its way out, and the interpreter would wait for it
                # as it exits (a gbm champion's: 11 s on 28 days of hours); 3.11's executor cannot terminate its workers
                for process in self._fitter._processes.values():
                    process.terminate()
                self._fitter.shutdown(wait=False, cancel_futures=True)
                self._fitter = None

    def _fit(self, p: PolicyObject, hourly: pd.Series, now: pd.Timestamp) -> tuple[IssuedForecast | None, str | None]:
        """(forecast, fault): none under MIN_FIT_HOURS of history (the planner's fallback, no fault)."""
        if hourly.notna().sum() < MIN_FIT_HOURS:
            return None, None
        model, name, fault = self._forecaster(p)
        began = time.monotonic()
        fresh, failed = fit(model, name, hourly, now, p.spec, p.generation, self.data.horizon_hours)
        # a fit waits on no server: its time is not taken from the reads and writes the deadline bounds (run --once
        # fits within its one reconcile: a slow model, or a thousand policies, left every write undone)
        self._fit_took(time.monotonic() - began)
        return self._fitted(p, fresh, fault, failed)

    def _fitted(self, p: PolicyObject, fresh: IssuedForecast | None, fault: str | None,
                failed: str | None) -> tuple[IssuedForecast | None, str | None]:
        if failed is None:
            return fresh, fault
        self._error("forecast", p.key, failed)  # a model that cannot fit: the planner falls back
        return None, f"ForecastFailed: {failed}"

    def _fit_apart(self, p: PolicyObject, raw: pd.Series,
                   now: pd.Timestamp) -> tuple[pd.Series, IssuedForecast | None, str | None]:
        """(hourly history, forecast, fault) of `raw`, computed in the fitting process: a thousand fits each hour
        would otherwise share one interpreter with the reconciles and slow every one of them. A process that died
        (the kernel's OOM killer, a crash in compiled code) is replaced, and only this policy's fit is lost."""
        model, name, fault = self._forecaster(p)
        fitter = self._fitting_process()
        try:
            hourly, fresh, failed = fitter.submit(fit_hourly, model, name, raw, now, p.spec, p.generation,
                                                  self.data.horizon_hours, self.data.outlier_factor).result()
        except BrokenProcessPool as exc:
            with self._fitter_lock:
                if self._fitter is fitter:
                    self._fitter = None
            raise RuntimeError(f"the fitting process died: {exc}") from exc
        return (hourly, *self._fitted(p, fresh, fault, failed))

    def _fitting_process(self) -> ProcessPoolExecutor:
        """Where the hourly work fits (_fit_apart), started on first use."""
        with self._fitter_lock:
            if self._fitter is None:
                self._fitter = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                                   initializer=ignore_interrupts)
            return self._fitter

    def _take(self, p: PolicyObject, fresh: IssuedForecast) -> IssuedForecast:
        self._forecasts[p.key] = fresh
        self._log_forecast(p, fresh)
        return fresh

    def _log_forecast(self, p: PolicyObject, fresh: IssuedForecast) -> None:
        """`fresh` into the forecast log, which realized error reads; a failed write costs only that."""
        store = self.forecast_log
        if store is None:
            return
        frame = fresh.frame.copy(deep=False)
        frame.attrs[FORECAST_UID] = p.ref.uid  # the object it was made for (made_for_object)
        try:
            self._to_store(p.series, lambda: store.record(p.series, fresh.made_at, frame))
        except (ClusterError, OSError) as exc:  # realized error will miss this one forecast
            self._error("cluster", p.series, exc)

    def _to_store(self, series: str, write: Callable[[], object]) -> bool:
        """A write to the forecast store (shared by the replicas on Kubernetes), fenced as every write is: made only
        while this replica holds its Lease, and ending by the Lease's end, or by the deadline of the work it is made
        for if earlier (a reconcile's; the refit thread's writes have only the Lease's). The refit thread writes long
        after the reconcile that queued its work: a replica that had lost its Lease meanwhile went on adding its
        forecasts to the leader's, and pruning them. Whether it was made."""
        until, refused = window(self._lease_end)
        if refused:
            log.info("%s: the forecast store is %s", series, refused)
            return False
        with within(until):
            write()
        return True

    def _refit_beside(self, p: PolicyObject, now: pd.Timestamp, cached: IssuedForecast | None,
                      read_whole: bool) -> tuple[IssuedForecast | None, str | None]:
        """The hour's work in a background thread, one series at a time (_hourly: the whole lookback re-read, the
        refit, realized error): until it is done the reconciles go on with the forecast in force (or the
        conservative fallback), so a thousand series never hold a reconcile up. The results are taken up
        TAKE_UP_BATCH at a time (or the last ones together), a policy without a forecast for its generation in force
        at once. Tried once per hour and policy generation; a failure is reported until the next try."""
        job = self._refits.get(p.key)
        in_force = usable(cached, now, self.data)
        if job is not None and job.done() and (
                self._taking_up or in_force is None or in_force.generation != p.generation):
            del self._refits[p.key]
            cached = self._take_up(p, job, now, cached)
        hour = (now.floor("h"), p.generation)
        tried = self._tried.get(p.key)
        if p.key not in self._refits and (tried is None or tried[0] != hour) and due(cached, now, p.generation):
            if self._refit_pool is None:
                self._refit_pool = Background("headroom-refit")
            whole = self._raw.get(p.key) if read_whole else None
            self._refits[p.key] = self._refit_pool.submit(self._hourly, p, cached, whole, now)
            self._tried[p.key] = tried = (hour, None)
        return cached, tried[1] if tried is not None and tried[0] == hour else None

    def _hourly(self, p: PolicyObject, in_force: IssuedForecast | None, whole: pd.Series | None,
                now: pd.Timestamp) -> _Hourly | None:
        """One policy's hourly work, beside the reconciles: its whole lookback (unless read whole this hour
        already; a failed read leaves the samples held), a new forecast fitted on it and recorded, and the realized
        error of the forecasts issued before. None: this replica no longer leads, so it does none of it (the work
        waits its turn behind a thousand series' while the Lease may pass to another replica, which does its own)."""
        if not self._leads():
            return None
        if whole is None:
            lookback = pd.Timedelta(seconds=self.data.lookback_seconds)
            try:
                read = self.demand.read(p.key, p.spec.query, now - lookback, now).astype(float)
                check_values(read)
                whole = read
            except (PrometheusError, HistoryError, OSError) as exc:
                self._error("demand", p.key, exc)
        raw = whole if whole is not None else self._raw.get(p.key, pd.Series(dtype=float, index=pd.DatetimeIndex(
            [], tz="UTC")))
        hourly, fresh, fault = self._fit_apart(p, raw, now)
        if fresh is not None:
            self._log_forecast(p, fresh)
        scaled = fresh or in_force
        accuracy, drift = None, ()
        if self.forecast_log is not None and scaled is not None and raw.notna().any():
            errors, coverage, drift = self._accuracy_of(p, scaled.scale, hourly, now)
            accuracy = (now.floor("h"), errors, coverage)
        return _Hourly((now.floor("h"), p.generation), basis(p.spec), whole, fresh, fault, accuracy, drift)

    def _take_up(self, p: PolicyObject, job, now: pd.Timestamp,
                 cached: IssuedForecast | None) -> IssuedForecast | None:
        """A finished _hourly: its whole lookback joins the samples read since, its forecast and realized error
        come into force, drift is reported; unless it was made for what the policy's spec no longer asks."""
        try:
            done: _Hourly | None = job.result()
        except Exception as exc:  # noqa: BLE001 - a bug in one policy's hourly work must not stop the others
            log.error("%s: its hourly refit failed", p.key, exc_info=exc)
            self._error("internal", p.key, exc)
            self._tried[p.key] = ((now.floor("h"), p.generation), f"InternalError: {type(exc).__name__}: {exc}")
            return cached
        if done is None:  # dropped: this replica did not lead when its turn came; leading again, it tries anew
            self._tried.pop(p.key, None)
            return cached
        if done.basis != basis(p.spec):
            # begun before an edit of the query (statistic, forecaster, timezone): its lookback and forecast are of
            # another demand, and would replace the new query's samples read since; dropped, the policy is refitted
            # (a new generation is due) on the samples held
            log.info("%s: its refit begun before its spec was edited is dropped, of no use to the new spec", p.key)
            self._tried.pop(p.key, None)
            return cached
        held = self._raw.get(p.key)
        if done.whole is not None and len(done.whole) and held is not None:
            since = held[held.index > done.whole.index[-1]]
            self._raw[p.key] = pd.concat([done.whole, since]) if len(since) else done.whole
        if done.accuracy is not None:
            self._accuracy[p.key] = done.accuracy
            self._drifted(p, done.drift, now)
        self._tried[p.key] = (done.tried, done.fault)
        if done.forecast is None:
            return cached
        self._forecasts[p.key] = done.forecast
        return done.forecast

    def _forecaster(self, p: PolicyObject):
        """(model, name, fault): the policy's baseline, or the champion (a refused one says why and is replaced)."""
        if p.spec.forecaster != "auto":
            return BASELINES[p.spec.forecaster](), p.spec.forecaster, None
        return self.models.for_series(p.series)

    def _accuracy_of(self, p: PolicyObject, scale: float, hourly: pd.Series,
                     now: pd.Timestamp) -> tuple[dict[int, float], dict[int, float], tuple]:
        """(realized error, 80% coverage, drift events) of the forecasts issued for `p` before now, each at its own
        fitting window's scale (`scale`, the forecast in force's, for one recorded without it); logged to MLflow when
        tracking is on."""
        assert self.forecast_log is not None  # realized error is computed only with a forecast log
        series = p.series
        since = now - pd.Timedelta(hours=max(HORIZONS) + self.drift_window + 1)
        store = self.forecast_log
        loaded = store.load(series, since=since)
        self._to_store(series, lambda: store.prune(series, before=self._prune_before(p, loaded, now)))
        # only forecasts of what the policy now asks (a spec.query edit: tokens where requests were forecast), made for
        # this object, are scored; one recorded without its basis cannot say, and is scored as before
        now_basis = basis(p.spec)
        issued = {at: frame for at, frame in loaded.items()
                  if frame.attrs.get(FORECAST_BASIS) in (None, now_basis) and made_for_object(frame, p)}
        table: pd.DataFrame | None = None
        drift: tuple[DriftEvent, ...] = ()
        # MLflow is outside the Lease: live accuracy is logged by the leader only (a refit that ends after this replica
        # let its Lease go would log beside the new leader, whose forecast is the one in force)
        if self.tracker is not None and self._leads():
            try:
                # each forecast's error over its own window's scale (`scale`, the one in force, for one recorded without
                # it), as the status's: MLflow and the status report one error (drift's baseline: the champion's)
                table, events = log_realized(series, issued, hourly, self.tracker, scale=scale,
                                             factor=self.drift_factor, window=self.drift_window, horizons=HORIZONS)
                drift = tuple(events)
            except Exception as exc:  # noqa: BLE001 - MLflow down must not stop the controller
                self._error("mlflow", series, exc)
        if table is None:  # no tracking, or MLflow failed: the same errors, computed here
            table = realized_errors(issued, hourly, scale, HORIZONS)
        errors, coverage = {}, {}
        for h, group in table.groupby("horizon"):
            recent = group.sort_values("target").tail(self.drift_window)
            errors[int(h)], coverage[int(h)] = float(recent["scaled_error"].mean()), float(recent["inside_80"].mean())
        return errors, coverage, drift

    @staticmethod
    def _prune_before(p: PolicyObject, loaded: Mapping[pd.Timestamp, pd.DataFrame],
                      now: pd.Timestamp) -> pd.Timestamp:
        """Before when `p`'s series' stored forecasts go, `loaded` those issued within realized error's window: those
        issued FORECAST_LOG_KEPT ago, and every one up to the newest made for another object under its name, never one
        made for `p`. A replica started after the policy was deleted and created again never saw the old object go
        (keep), and the old object's forecasts, neither planned on nor scored, stayed until they aged out (as do those
        of one gone before the window, past any use as every forecast that old). Issue times are whole seconds, as
        both stores keep them."""
        aged = now - FORECAST_LOG_KEPT
        others = [at for at, frame in loaded.items() if not made_for_object(frame, p)]
        if not others:
            return aged
        own = [at for at, frame in loaded.items() if made_for_object(frame, p)]
        return max(aged, min([max(others) + pd.Timedelta(seconds=1), *own]))

    def _drifted(self, p: PolicyObject, drift: tuple, now: pd.Timestamp) -> None:
        """With tracking on: a Warning per drift event, and a retraining when drift or the schedule asks."""
        if self.tracker is None:
            return
        retrained = self._maybe_retrain(p, now, drifted=bool(drift))
        self._record([RecordEvent(EventNote(p.ref, "ForecastDrift", e.message + ("; retraining" if retrained else ""),
                                            "Warning")) for e in drift])

    def _maybe_retrain(self, p: PolicyObject, now: pd.Timestamp, drifted: bool) -> bool:
        """Retrain on the schedule, or on drift: once a drift window at most, since a verdict reads the last window's
        targets and retraining every hour on the same evidence only registers version after version."""
        if self.retrain is None:
            return False
        last = self._last_trained.setdefault(p.key, now)  # the schedule counts from start-up
        every = self.retrain_every_seconds
        since = self._retrained_at.get(p.key)
        fresh = since is None or (now - since) >= pd.Timedelta(hours=self.drift_window)
        if (every > 0 and (now - last).total_seconds() >= every) or (drifted and p.active and fresh):
            self._last_trained[p.key] = self._retrained_at[p.key] = now
            # the hours as read: the training clips each fold's hours by their own bound, not one that saw its future
            self.retrain(p.series, hourly_history(self._raw[p.key], p.spec.statistic, now, outlier_factor=None), now)
            return True
        return False
