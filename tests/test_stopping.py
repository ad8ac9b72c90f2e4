"""`headroom run` on its way out, and a replica that no longer leads: the signals that stop it, the work beside the
reconciles (the hour's refits, the trainings) that it must neither wait for nor go on with, and MLflow, which is
outside the Lease. On the real kube-apiserver, Prometheus and `mlflow server` (tests/servers/,
tests/mlflow_server.py)."""
from __future__ import annotations

import logging
import resource
import signal
import subprocess
import sys
import textwrap
import threading
import time
from typing import NamedTuple

import pandas as pd
import pytest

from adapters.prometheus import PrometheusDemand
from controller.loop import Loop
from controller.reconcile import Reconciler
from core.settings import PrometheusServer, RunConfig
from tests.conftest import ROOT
from tests.servers import free_port, wait_until
from tests.test_run_real import (
    MONDAY_7AM,
    NS,
    RP,
    controller,  # noqa: F401 -- a fixture: the controller's client, through its watch cache
    deployment,
    kube,  # noqa: F401 -- a fixture: namespaces, queues, Deployment, policy
    policy,
    reconciler,
    replicas,
    rp_status,
    start_headroom_run,
)
from tests.test_training import mlflow_server  # noqa: F401 -- the real `mlflow server` fixture
from training.realized import ForecastLog


def test_a_process_with_trainings_queued_exits_without_running_them(tmp_path, shared_data):
    """Retraining runs beside the reconciles, a series at a time (10 s each on three weeks of hours): the schedule
    queues every series at once. The trainer's ThreadPoolExecutor had the interpreter run every queued training
    before it exited: `headroom run` told to stop, its Lease already let go, went on registering model versions for
    minutes, until the kubelet killed it. It exits at once now; the training under way is cut, as a kill cuts it."""
    script = textwrap.dedent(f"""
        import time
        import pandas as pd
        from controller.loop import BackgroundTrainer
        from forecast.history import load_history
        from training.pipeline import TrainSettings

        hourly = load_history({str(shared_data / "traces" / "nasa_http_1995_5min.csv")!r}).resample("1h").max()
        hourly = hourly.dropna().iloc[-24 * 21:]
        trainer = BackgroundTrainer("sqlite:///{tmp_path / 'mlflow.db'}", TrainSettings(statistic="max"))
        for k in range(20):  # half a CPU second each here: twenty leave no doubt which way out was taken
            trainer(f"series{{k}}", hourly, pd.Timestamp(hourly.index[-1]))
        deadline = time.monotonic() + 300
        while not trainer._running["series0"].running():  # the first under way
            assert time.monotonic() < deadline, "the first training never started"
            time.sleep(0.05)
        print("leaving", time.process_time(), flush=True)
    """)
    # in CPU seconds, which the trainings are made of (0.1 s on the way out; 10 s running those queued, as the old
    # ThreadPoolExecutor did): the wall time, 5 s before, was passed by a busy machine's slow way out, and by a fast
    # machine's run of the four queued then
    assert leaving_takes([sys.executable, "-c", script]).cpu < 5


class Leaving(NamedTuple):
    wall: float  # seconds
    cpu: float   # CPU seconds of the process, all its threads


def leaving_takes(argv: list[str]) -> Leaving:
    """From the line `leaving CPU` the Python process `argv` prints as its main code ends (CPU: its
    time.process_time() then) to its exit (0)."""
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    said = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            said.append(line)
            if line.startswith("leaving"):
                break
        left, used = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
        status = proc.wait(timeout=120)
        took = time.monotonic() - left
        total = resource.getrusage(resource.RUSAGE_CHILDREN)
        said.append(proc.stdout.read())
    finally:
        if proc.poll() is None:
            proc.kill()
    leaving = next((line for line in said if line.startswith("leaving")), None)
    assert status == 0 and leaving is not None, "".join(said)
    cpu = total.ru_utime + total.ru_stime - used.ru_utime - used.ru_stime - float(leaving.split()[1])
    return Leaving(took, cpu)


def seen(cluster, *names: str) -> None:
    """Wait until `cluster`'s watch cache holds the ReservationPolicies `names` (a reconcile before would skip them)."""
    wait_until(lambda: set(names) <= {o["metadata"]["name"] for o in cluster.reservation_policies(NS)}, timeout=30,
               what=f"the watch cache to see {names}")


def accuracy_points(uri: str, series: str) -> int:
    """The points of live accuracy MLflow holds for `series` (its accuracy run's 1 h error history)."""
    from tests.test_training import client

    c = client(uri)
    experiment = c.get_experiment_by_name(f"headroom/{series}")
    if experiment is None:
        return 0
    runs = c.search_runs([experiment.experiment_id], "tags.`headroom.kind` = 'accuracy'")
    return sum(len(c.get_metric_history(run.info.run_id, "abs_error_1h")) for run in runs)


def test_a_replica_that_let_its_lease_go_logs_no_live_accuracy_and_drops_its_queued_refits(  # noqa: F811
        kube, controller, prometheus_server, mlflow_server, tmp_path):  # noqa: F811
    """The hour's refits run beside the reconciles, one series at a time, long after the reconcile that queued them,
    and score the forecasts issued before (realized error, drift) into MLflow, which is outside the Lease. Replica a
    queued two and let its Lease go, b took over; a's refit under way then logged its live accuracy beside b's (two
    writers of one series' history, one of them a replica whose forecasts were no longer in force), and the one
    queued behind it read the whole lookback, fitted and logged too. Only a leader logs accuracy now, and a refit
    whose turn comes after its replica let the Lease go does nothing."""
    from adapters.mlflow import Tracker

    scored, queued = "stopping-first", "stopping-second"  # in this order: the second queued behind
    kube.delete(f"{RP}/chat")
    for name in (scored, queued):
        kube.create(f"/apis/apps/v1/namespaces/{NS}/deployments", deployment(name))
    kube.create(RP, policy(scored))
    seen(controller, scored)
    server = PrometheusServer(url=prometheus_server.url, step="5m", timeout_seconds=10, retries=0)
    cfg = RunConfig(cluster="kubernetes", prometheus=server, capacity_gpus=128, namespace=NS)
    issued, tracker = ForecastLog(tmp_path / "log"), Tracker(mlflow_server.uri)
    before = Reconciler(controller, PrometheusDemand(server), cfg, forecast_log=issued, tracker=tracker)
    for hours_ago in range(4, 0, -1):  # hours led before: forecasts issued, and scored into MLflow
        before.reconcile(MONDAY_7AM - pd.Timedelta(hours=hours_ago))
    before.close()
    logged = accuracy_points(mlflow_server.uri, f"{NS}.{scored}")
    assert logged > 0
    kube.create(RP, policy(queued))
    seen(controller, scored, queued)
    r = Reconciler(controller, PrometheusDemand(server), cfg, forecast_log=issued, tracker=tracker, refit_beside=True)
    lease = "stopping-accuracy"
    kube.delete(f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{lease}")
    a = Loop(r, controller.leader_elector(NS, lease, "replica-a", lease_seconds=30), interval=1, lease_seconds=30,
             clock=lambda: MONDAY_7AM)
    b = kube.leader_elector(NS, lease, "replica-b", lease_seconds=30)
    with r.forecasts._fitter_lock:  # the first refit held at its fit, as behind a thousand others, until b leads
        a.run(once=True)  # a leads, reconciles (its refits queued), and lets the Lease go
        assert b.try_acquire_or_renew()
    results = {key: job.result(timeout=120) for key, job in r.forecasts._refits.items()}
    r.close()
    assert accuracy_points(mlflow_server.uri, f"{NS}.{scored}") == logged, "a replica no longer leading logged"
    assert results[f"{NS}/{queued}"] is None, "a refit whose turn came after the Lease was let go did its work"
    assert accuracy_points(mlflow_server.uri, f"{NS}.{queued}") == 0


def lease_holder(api, name: str) -> str | None:
    return api.get(f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{name}")["spec"].get("holderIdentity")


def test_a_stop_that_comes_mid_reconcile_applies_nothing_after_and_hands_the_lease_over(kube, controller,  # noqa: F811
                                                                                       prometheus_server, tmp_path,
                                                                                       caplog):
    """SIGTERM (a rollout) while a reconcile is under way: it went on applying its plan, the scales, quotas and
    evictions of a replica on its way out, then wrote every status still queued (each tried for up to its timeout,
    the wait bounded at 30 s) before it let the Lease go. From the stop no write starts now, and the Lease goes at
    once: the standby, which plans on fresh state, takes over within a second."""
    r = reconciler(controller, prometheus_server.url, tmp_path, beside=True)
    lease = "stopping-mid-reconcile"
    kube.delete(f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{lease}")
    loop = Loop(r, controller.leader_elector(NS, lease, "replica-a", lease_seconds=30), interval=1, lease_seconds=30,
                clock=lambda: MONDAY_7AM)
    view = r._view

    def stopped_as_it_reads(*args):  # the signal comes as the reconcile reads the cluster, before it acts
        loop.stop.set()
        return view(*args)
    r._view = stopped_as_it_reads  # type: ignore[method-assign]
    with caplog.at_level(logging.INFO):
        loop.run()
    r.close()
    assert replicas(kube) == 1, "a write was applied after the stop"
    assert rp_status(kube)[0] == {}, "a status was written after the stop"
    assert lease_holder(kube, lease) is None
    assert any("left undone: the controller is stopping" in m for m in caplog.messages), caplog.messages


class AnsweringSlowly:
    """The controller's cluster for its Events beside, on an API server slow to answer (each Event lands at once, its
    answer comes `seconds` later): what Lease holder each Event saw as it landed, and what it was about."""

    def __init__(self, cluster, admin, lease: str, seconds: float = 0.5):
        self.cluster, self.admin, self.lease, self.seconds = cluster, admin, lease, seconds
        self.landed: list[tuple[str, str | None]] = []

    def emit_event(self, about, reason, message, type="Normal"):
        self.cluster.emit_event(about, reason, message, type=type)
        self.landed.append((reason, lease_holder(self.admin, self.lease)))
        time.sleep(self.seconds)


def queue_events(r: Reconciler, n: int) -> None:
    from controller.actions import EventNote
    from core.objects import ObjectRef

    assert r._events is not None
    for k in range(n):
        r._events(EventNote(ObjectRef("headroom.dev/v1alpha1", "ReservationPolicy", "chat", NS), f"Queued{k}",
                            "queued beside the reconciles"))


@pytest.mark.parametrize("stopped", [True, False])
def test_no_event_is_sent_after_the_lease_is_let_go(kube, controller, prometheus_server, tmp_path, caplog,  # noqa: F811
                                                    stopped):
    """Events go out beside the reconciles, two at a time. Asked to stop, the controller let its Lease go at once and
    then sent every Event still queued (close()), as a replica that no longer led, beside the new leader's writes;
    `--once` did the same after its one reconcile. Stopped, those still queued are dropped now, and said how many;
    `--once` (not stopped) sends them all before it lets go."""
    r = reconciler(controller, prometheus_server.url, tmp_path, beside=True)
    lease = "stopping-events"
    kube.delete(f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{lease}")
    slow = AnsweringSlowly(controller, kube, lease)
    assert r._events is not None
    r._events.cluster = slow
    loop = Loop(r, controller.leader_elector(NS, lease, "replica-a", lease_seconds=30), interval=1, lease_seconds=30,
                clock=lambda: MONDAY_7AM)
    assert loop.elector.try_acquire_or_renew()
    queue_events(r, 6)  # two on their way at once, four queued behind them
    wait_until(lambda: len(slow.landed) == 2, timeout=10, what="the first two Events to land")
    with caplog.at_level(logging.INFO):
        if stopped:
            loop.stop.set()
        loop.run(once=True)
        time.sleep(3 * slow.seconds)  # what is on its way lands
        r.close()
    assert lease_holder(kube, lease) is None
    assert slow.landed and all(holder == "replica-a" for _, holder in slow.landed), slow.landed
    queued = [reason for reason, _ in slow.landed if reason.startswith("Queued")]
    if stopped:
        assert len(queued) == 2, slow.landed
        assert any("4 Events still queued were dropped" in m for m in caplog.messages), caplog.messages
    else:
        assert len(queued) == 6, slow.landed


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_headroom_run_stopped_by_a_signal_says_why_hands_the_lease_over_and_exits_0(kube_server, kube,  # noqa: F811
                                                                                   prometheus_server, tmp_path, sig):
    """`headroom run` stopped by the kubelet (SIGTERM) or at a terminal (SIGINT), between reconciles: it exited 0 and
    released the Lease, but its log said nothing of why it stopped."""
    proc, _ = start_headroom_run(kube_server, prometheus_server.url, tmp_path, "stopping-signal")
    try:
        began = time.monotonic()
        proc.send_signal(sig)
        status = proc.wait(timeout=30)
        took = time.monotonic() - began
    finally:
        if proc.poll() is None:
            proc.kill()
        output = proc.stdout.read()
    assert status == 0 and "Traceback" not in output, output
    assert took < 5, (took, output)
    assert f"{sig.name}: stopping" in output and "the Lease is released" in output, output
    assert lease_holder(kube, "stopping-signal") is None


def terminated_while_halted(proc: subprocess.Popen, server, halted_for: float, terms: int = 1,
                            timeout: float = 60) -> tuple[int, float, str]:
    """Halt `server` (SIGSTOP to its process group), and after `halted_for` seconds send `proc` SIGTERM `terms` times,
    1 s apart: (its exit status, the seconds from the last signal to its exit, its output). The server is resumed,
    and the process killed, whatever happens."""
    try:
        server.process.signal_group(signal.SIGSTOP)
        try:
            time.sleep(halted_for)
            for _ in range(terms - 1):
                proc.send_signal(signal.SIGTERM)
                time.sleep(1)
            began = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            status = proc.wait(timeout=timeout)
            took = time.monotonic() - began
        finally:
            server.process.signal_group(signal.SIGCONT)
    finally:
        if proc.poll() is None:
            proc.kill()
        output = proc.stdout.read()
    return status, took, output


def test_a_second_signal_ends_headroom_run_at_once(kube_server, kube, prometheus_server, tmp_path):  # noqa: F811
    """Stopping takes a while on a halted API server (the request in flight waits out its timeout, the Lease's
    release is tried): a second SIGTERM, or Ctrl-C pressed again, was taken as the first was, and the operator
    waited. It ends the process at once now (its Lease, if still held, expires by itself)."""
    proc, _ = start_headroom_run(kube_server, prometheus_server.url, tmp_path, "stopping-twice")
    # the controller meets the halt mid-round
    status, took, output = terminated_while_halted(proc, kube_server.apiserver, 2, terms=2, timeout=30)
    assert status == -signal.SIGTERM and took < 2, (status, took, output)
    assert "SIGTERM: stopping" in output, output


def test_a_process_stopped_mid_fit_exits_without_finishing_the_fit(tmp_path):
    """The hour's fits run in a process of their own. A controller stopped while one was under way (a gbm champion's
    fit: 11 s on 28 days of hours) waited for it as the interpreter exited: the executor's shutdown does not end the
    work it has started. The fitting process is stopped with the controller now."""
    script = textwrap.dedent(f"""
        import pathlib
        import time
        from controller.reconcile import Reconciler
        from core.settings import RunConfig

        def fit(started):
            pathlib.Path(started).touch()
            time.sleep(600)

        if __name__ == "__main__":  # the fitting process is spawned: it imports this module
            r = Reconciler(None, None, RunConfig())
            started = {str(tmp_path / "started")!r}
            r.forecasts._fitting_process().submit(fit, started)
            deadline = time.monotonic() + 300
            while not pathlib.Path(started).exists():  # a fit under way
                assert time.monotonic() < deadline, "the fit never started"
                time.sleep(0.05)
            r.close()
            print("leaving", time.process_time(), flush=True)
    """)
    path = tmp_path / "stop_mid_fit.py"
    path.write_text(script)
    # the fit's wait is 600 s: a minute leaves room for a busy machine's slow way out, and none for the fit
    assert leaving_takes([sys.executable, str(path)]).wall < 60


def test_a_stop_during_a_halted_prometheus_cuts_the_read_under_way_and_starts_none(kube, controller,  # noqa: F811
                                                                                   private_prometheus, tmp_path):
    """SIGTERM while a reconcile reads a Prometheus that answers nothing (a halted host): each policy's read after
    the signal still started and waited out its timeout (30 s at the defaults), up to the reconcile's deadline (60 s),
    past the pod's 30 s grace period: the kubelet killed the controller before it released its Lease. Then no read
    started after the stop, but the one in flight still waited out its timeout (a stop 21 s, the signal 10 s into the
    read). The read under way is cut at the stop now, and none starts after."""
    kube.create(f"/apis/apps/v1/namespaces/{NS}/deployments", deployment("second"))
    kube.create(RP, policy("second"))
    seen(controller, "chat", "second")
    server = PrometheusServer(url=private_prometheus.url, step="5m", retries=0)  # timeout_seconds: 30 s
    cfg = RunConfig(cluster="kubernetes", prometheus=server, capacity_gpus=128, namespace=NS)
    stop = threading.Event()
    r = Reconciler(controller, PrometheusDemand(server, stopping=stop), cfg, forecast_log=ForecastLog(tmp_path / "log"))
    lease = "stopping-halted-prometheus"
    kube.delete(f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{lease}")
    loop = Loop(r, controller.leader_elector(NS, lease, "replica-a", lease_seconds=30), interval=60, lease_seconds=30,
                clock=lambda: MONDAY_7AM, stop=stop)
    private_prometheus.process.signal_group(signal.SIGSTOP)
    try:
        threading.Timer(1, loop.stop.set).start()  # the signal, as the first read waits
        began = time.monotonic()
        loop.run()
        took = time.monotonic() - began
    finally:
        private_prometheus.process.signal_group(signal.SIGCONT)
    r.close()
    # the signal 1 s into the read: cut there, not waiting out its 30 s timeout (nor one read after another); half
    # the timeout leaves a busy machine its room (3.3 s seen in CI's load) and none for the wait it guards
    assert took < server.timeout_seconds / 2, took
    assert lease_holder(kube, lease) is None


def test_a_refit_read_hanging_on_a_halted_prometheus_holds_no_reconcile_and_is_cut_at_the_stop(  # noqa: F811
        kube, controller, private_prometheus, tmp_path):  # noqa: F811
    """The hour's refit re-reads the whole lookback beside the reconciles, bounded only by timeout_seconds (30 s):
    on a halted Prometheus the reconciles still end by their own deadlines (they take up only finished refits), and
    the stop cuts the refit's read at once, where it waited out its timeout."""
    server = PrometheusServer(url=private_prometheus.url, step="5m", retries=0)  # timeout_seconds: 30 s
    cfg = RunConfig(cluster="kubernetes", prometheus=server, capacity_gpus=128, namespace=NS)
    stop = threading.Event()
    r = Reconciler(controller, PrometheusDemand(server, stopping=stop), cfg, forecast_log=ForecastLog(tmp_path / "log"),
                   refit_beside=True)
    key = f"{NS}/chat"
    r.reconcile(MONDAY_7AM)  # reads the whole lookback; the hour's refit fits on it beside
    r.forecasts._refits[key].result(timeout=120)
    gate = threading.Event()
    assert r.forecasts._refit_pool is not None
    r.forecasts._refit_pool.submit(gate.wait)  # the next hour's refit waits behind it, as behind a thousand others
    r.reconcile(MONDAY_7AM + pd.Timedelta(hours=1))  # reads only the samples since; queues the refit (a whole re-read)
    refit = r.forecasts._refits[key]
    private_prometheus.process.signal_group(signal.SIGSTOP)
    try:
        gate.set()  # the refit's read of the whole lookback begins on the halted Prometheus
        time.sleep(1)
        began = time.monotonic()
        r.reconcile(MONDAY_7AM + pd.Timedelta(hours=1, minutes=10), deadline=time.monotonic() + 3)
        reconciled = time.monotonic() - began
        assert not refit.done()
        stop.set()
        began = time.monotonic()
        refit.result(timeout=60)
        cut = time.monotonic() - began
    finally:
        private_prometheus.process.signal_group(signal.SIGCONT)
        r.close()
    assert reconciled < 4, reconciled  # its own read cut at its 3 s deadline; not the refit's 30 s
    assert cut < 2, cut


def test_headroom_run_stopped_while_prometheus_is_halted_exits_within_seconds(kube_server, kube,  # noqa: F811
                                                                             private_prometheus, tmp_path):
    """`headroom run` on a Prometheus halted mid-run: SIGTERM left the read under way to wait out the reconcile's
    deadline (15 s here) or its 30 s timeout, the way out past the pod's grace period. The reads under way are cut
    at the signal now: it says why, hands the Lease over and exits 0 at once. (A 1 s step and lookback: each
    reconcile, 2 s apart, reads the samples since the last.)"""
    proc, _ = start_headroom_run(kube_server, private_prometheus.url, tmp_path, "stopping-halted-prometheus-run",
                                 step="1s", lookback="1h")
    # the reconciles every 2 s: one reads the halted Prometheus after 4
    status, took, output = terminated_while_halted(proc, private_prometheus, 4, timeout=60)
    assert status == 0 and "Traceback" not in output, output
    assert took < 3, (took, output)
    assert "the Lease is released" in output, output


def test_a_replica_that_let_its_lease_go_drops_the_trainings_it_had_queued(kube_server, kube, prometheus_server,  # noqa: F811
                                                                          mlflow_server, shared_data, tmp_path):  # noqa: F811
    """Retraining runs beside the reconciles, a series at a time (10 s each): the schedule queues every series at
    once. A replica that let its Lease go (or lost it) went on training them all, registering a model version for
    each beside the new leader's, which retrains on its own schedule. A training whose turn comes after the Lease
    went is dropped now. The controller as `headroom run` builds it."""
    import yaml

    from cli.config import load_config
    from cli.run import build
    from forecast.history import load_history
    from tests.test_training import client

    config = tmp_path / "headroom.yaml"
    config.write_text(yaml.safe_dump({"run": {
        "cluster": "kubernetes", "kubeconfig": str(kube_server.apiserver.kubeconfig(tmp_path / "kubeconfig")),
        "namespace": NS, "capacity_gpus": 64, "lease": {"namespace": NS, "name": "stopping-trainings"},
        "prometheus": {"url": prometheus_server.url}, "tracking_uri": mlflow_server.uri}}))
    r, cluster = build(load_config(config))
    trainer = r.forecasts.retrain
    assert trainer is not None  # run.retrain_every_seconds: a day by default
    kube.delete(f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/stopping-trainings")
    try:
        a = Loop(r, cluster.leader_elector(NS, "stopping-trainings", "replica-a", 30), interval=1, lease_seconds=30,
                 clock=lambda: MONDAY_7AM)
        a.run(once=True)  # a leads, reconciles and lets the Lease go
        hourly = load_history(shared_data / "traces" / "nasa_http_1995_5min.csv").resample("1h").max().dropna()
        series = "stopping.queued"
        trainer(series, hourly.iloc[-24 * 21:], MONDAY_7AM)  # its turn, behind the others queued, comes now
        trainer.wait()  # type: ignore[attr-defined]
    finally:
        r.close()
        cluster.close()
    assert not client(mlflow_server.uri).search_registered_models(f"name='headroom-{series}'")

def test_run_once_stopped_mid_reconcile_says_so_and_exits_128_plus_the_signal(kube_server, kube, prometheus_server,  # noqa: F811
                                                                              tmp_path, capsys, monkeypatch):
    """`headroom run --once` stopped by SIGTERM or Ctrl-C as its reconcile was about to act: nothing more is written
    from the stop, so its decisions were printed, unapplied, with exit 0, as if the reconcile had gone through. It
    says it was stopped and exits 128 + the signal's number now, as the embedded replay does."""
    import os

    import yaml

    from cli.main import main

    config = tmp_path / "headroom.yaml"
    config.write_text(yaml.safe_dump({"run": {
        "cluster": "kubernetes", "namespace": NS, "capacity_gpus": 64,
        "lease": {"namespace": NS, "name": "stopping-once"}, "prometheus": {"url": prometheus_server.url},
        "forecast_log_dir": str(tmp_path / "log"), "retrain_every_seconds": 0,
        "tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}"}}))
    view, signalled = Reconciler._view, []

    def signalled_as_it_reads(self, *args):  # the signal comes as the reconcile reads the cluster, before it acts
        if not signalled:
            signalled.append(os.kill(os.getpid(), signal.SIGTERM))
        return view(self, *args)
    monkeypatch.setattr(Reconciler, "_view", signalled_as_it_reads)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        status = main(["run", "--once", "--config", str(config), "--kubeconfig",
                       str(kube_server.apiserver.kubeconfig(tmp_path / "kubeconfig")),
                       "--metrics-port", str(free_port())])
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    assert status == 128 + signal.SIGTERM
    assert "stopped by SIGTERM" in capsys.readouterr().err
    assert replicas(kube) == 1
