"""One policy from what-if to cluster: `headroom simulate --policy-file P --timeline` and the embedded controller
`headroom run --policy-file P --history --timeline` decide the same thing at every step of a real trace."""
from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest
import yaml
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from cli.main import main
from controller.simulate import TIMELINE_COLUMNS, demand_per_gpu
from core.policy import PolicySpec, manifest
from forecast.history import load_history


def _policy_file(path, trace, gpus_per_replica: int = 1, **fields) -> str:
    per_gpu = demand_per_gpu(load_history(trace), peak_gpus=100)
    spec = PolicySpec.model_validate({
        "query": "demand", "capacity": {"demandPerGpu": per_gpu, "gpusPerReplica": gpus_per_replica}, "mode": "active",
        "target": {"kind": "Deployment", "name": "inference"}, "trainingClusterQueues": ["training"], **fields})
    path.write_text(yaml.safe_dump(manifest("inference", "default", spec), sort_keys=False))
    return str(path)


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    """The embedded controller keeps its MLflow store and forecast log in the working directory."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


def _both(tmp_path, trace, policy, days: float, gpus: int = 128, flags: list[str] | None = None) -> tuple[str, str]:
    """Both timelines of `policy` on `trace`, each command given `flags` too (--jobs, --config)."""
    sim, run = tmp_path / "simulate.csv", tmp_path / "run.csv"
    flags = flags or []
    assert main(["simulate", str(trace), "--policy-file", policy, "--days", f"{days:g}", "--gpus", str(gpus),
                 "--timeline", str(sim), "--json", *flags]) == 0
    start = pd.read_csv(sim)["timestamp"].iloc[0]
    assert main(["run", "--policy-file", policy, "--history", str(trace), "--gpus", str(gpus), "--now", start,
                 "--hours", f"{days * 24:g}", "--timeline", str(run), *flags]) == 0
    return sim.read_text(), run.read_text()


def test_the_same_with_a_job_trace(tmp_path, shared_data, capsys):
    """`simulate --jobs` replayed the trace's jobs while the embedded controller, which had no --jobs, replayed a
    saturated backlog: the timelines parted at the first step that lent GPUs. Both now replay the same arrivals."""
    trace = shared_data / "traces" / "nasa_http_1995_5min.csv"
    jobs = shared_data / "jobs" / "alibaba_openb_pods.csv"
    policy = _policy_file(tmp_path / "policy.yaml", trace, targetQuantile=0.5, warmBuffer=0.5)
    (tmp_path / "trace").mkdir()
    (tmp_path / "backlog").mkdir()
    simulated, ran = _both(tmp_path / "trace", trace, policy, days=0.5, gpus=40, flags=["--jobs", str(jobs)])
    backlog, _ = _both(tmp_path / "backlog", trace, policy, days=0.5, gpus=40)
    assert simulated == ran and simulated != backlog
    assert pd.read_csv(tmp_path / "trace" / "simulate.csv")["preempted_gpus"].sum() > 0  # jobs taken back, requeued
    assert "pod(s) of the window never scheduled" in capsys.readouterr().err


def test_the_same_under_the_controllers_settings(tmp_path, shared_data, capsys):
    """`headroom run` decides with its configuration's settings beside the policy: GPUs never lent, the teams'
    weights, the plan's horizon, how long a forecast is kept. `simulate --config` with the same file ignored them all
    and replayed another controller: it lent the GPUs run keeps (reserved + lent 40, not 38) and split the slack, and
    so the preemptions, equally between the teams. Both now decide with them."""
    trace = shared_data / "traces" / "alibaba_genai_sd_requests_5min.csv"
    jobs = shared_data / "jobs" / "alibaba_openb_pods.csv"
    policy = _policy_file(tmp_path / "policy.yaml", trace, trainingClusterQueues=["research", "batch"])
    settings = {"non_lendable_gpus": 2, "horizon_hours": 6, "keep_forecast_seconds": 1800}
    timelines, figures = {}, {}
    for name, weights in (("weighed", {"team_weights": {"research": 9, "batch": 1}}), ("equal", {})):
        (tmp_path / name).mkdir()
        config = tmp_path / name / "headroom.yaml"
        config.write_text(yaml.safe_dump({"run": {**settings, **weights}}))
        capsys.readouterr()
        simulated, ran = _both(tmp_path / name, trace, policy, days=0.5, gpus=40,
                               flags=["--jobs", str(jobs), "--config", str(config)])
        assert simulated == ran
        timelines[name] = pd.read_csv(tmp_path / name / "simulate.csv")
        figures[name] = json.JSONDecoder().raw_decode(capsys.readouterr().out)[0]  # simulate --json's
    t = timelines["weighed"]
    assert (t["reserved_gpus"] + t["lent_gpus"]).max() == 40 - 2
    assert t["preempted_gpus"].sum() > 0
    # the weights chose other victims, which had done other work since their checkpoints (the timeline counts GPUs
    # taken back alone: as many may come back from other jobs)
    assert figures["weighed"]["training_goodput"] != figures["equal"]["training_goodput"]


def test_the_same_past_a_month_without_samples(tmp_path, capsys):
    """A trace with a month-long hole (an exporter down, a service paused): past the 28-day lookback the controller
    sees no sample. The timeline wrote demand 0 there while the figures charged the last sample seen (short steps on
    rows of no demand); a fix to simulate's rows alone made them the figures' demand, where run's controller, which
    sees none, still wrote 0. Both now leave those rows' demand_gpus blank, and write the demand seen elsewhere."""
    days = pd.date_range("2026-01-01", periods=4 * 288, freq="5min", tz="UTC")
    before = pd.Series(50 + 20 * np.sin(np.arange(len(days)) * 2 * np.pi / 288), days)
    after = pd.Series(60.0, pd.date_range(days[-1] + pd.Timedelta(days=30), periods=288, freq="5min", tz="UTC"))
    demand = pd.concat([before, after])
    trace = tmp_path / "hole.csv"
    pd.DataFrame({"timestamp": demand.index.strftime("%Y-%m-%dT%H:%M:%SZ"), "value": demand}).to_csv(trace,
                                                                                                     index=False)
    policy = _policy_file(tmp_path / "policy.yaml", trace)
    simulated, ran = _both(tmp_path, trace, policy, days=2)
    assert simulated == ran
    t = pd.read_csv(tmp_path / "simulate.csv")
    stamps = pd.DatetimeIndex(pd.to_datetime(t["timestamp"]))
    unseen = stamps <= after.index[0] - pd.Timedelta("5min")  # no sample in the 28 days before (the hole's last day)
    assert unseen.sum() > 200 and t["demand_gpus"][unseen].isna().all()
    per_gpu = demand_per_gpu(load_history(trace), peak_gpus=100)
    seen = demand.reindex(demand.index.union(stamps)).ffill().loc[stamps[~unseen]]
    np.testing.assert_allclose(t["demand_gpus"][~unseen], seen.to_numpy() / per_gpu, rtol=1e-9)


def test_the_same_with_the_configured_outlier_factor(tmp_path, capsys):
    """`history.outlier_factor` is one setting: the controller's hourly refits clipped the hours by 3.0 whatever the
    configuration said (its retraining honoured it), and so did simulate's. A spike the day before the replay is now
    clipped by both or, with `outlier_factor: null`, by neither, and the two settings decide differently."""
    from forecast.synthetic import synthetic_demand, write_csv

    demand = synthetic_demand(days=6, start="2026-01-05T00:00:00Z")  # a weekday replayed after five days
    demand[pd.Timestamp("2026-01-09T10:30:00Z")] *= 25  # a glitch, a day before the replayed day's morning peak
    trace = tmp_path / "spike.csv"
    write_csv(demand, trace)
    policy = _policy_file(tmp_path / "policy.yaml", trace)
    timelines = {}
    for name, history in (("clipped", {}), ("as-read", {"outlier_factor": None})):
        (tmp_path / name).mkdir()
        config = tmp_path / name / "headroom.yaml"
        config.write_text(yaml.safe_dump({"history": history, "run": {"retrain_every_seconds": 0}}))
        simulated, ran = _both(tmp_path / name, trace, policy, days=1, flags=["--config", str(config)])
        assert simulated == ran, name
        timelines[name] = pd.read_csv(tmp_path / name / "simulate.csv")
    morning = pd.to_datetime(timelines["clipped"]["timestamp"]).dt.hour.between(9, 11)
    clipped, as_read = (timelines[n]["reserved_gpus"][morning] for n in ("clipped", "as-read"))
    assert (as_read >= clipped).all() and as_read.sum() > clipped.sum()  # the spike, forecast again, reserved for


def test_the_same_on_a_counter_trace(tmp_path, capsys):
    """With `history.counter: true` simulate replayed a cumulative counter's increments while `run --history` read
    the counter itself and refused it ("set history.counter: true", set already), exit 1. Both now read the
    increments, which are the demand the counter counts."""
    from forecast.synthetic import synthetic_demand, write_csv

    rate = synthetic_demand(days=4).fillna(0.0)  # requests per step; the counter counts every one
    write_csv(rate, tmp_path / "rate.csv")
    write_csv(rate.cumsum(), tmp_path / "counter.csv")
    policy = _policy_file(tmp_path / "policy.yaml", tmp_path / "rate.csv")
    config = tmp_path / "headroom.yaml"
    config.write_text(yaml.safe_dump({"history": {"counter": True}}))
    simulated, ran = _both(tmp_path, tmp_path / "counter.csv", policy, days=1, flags=["--config", str(config)])
    assert simulated == ran
    t = pd.read_csv(tmp_path / "simulate.csv")
    per_gpu = demand_per_gpu(load_history(tmp_path / "rate.csv"), peak_gpus=100)
    expected = rate.loc[pd.DatetimeIndex(pd.to_datetime(t["timestamp"]))].to_numpy() / per_gpu
    np.testing.assert_allclose(t["demand_gpus"], expected, rtol=1e-6)


@pytest.mark.parametrize("trace_name, fields", [
    ("nasa_http_1995_5min.csv", {"targetQuantile": 0.5, "warmBuffer": 0.5}),
    ("alibaba_genai_sd_requests_5min.csv", {}),  # the defaults, on a bursty trace with emergency preemptions
])
def test_simulate_and_the_embedded_controller_write_the_same_timeline(tmp_path, shared_data, capsys, trace_name,
                                                                      fields):
    trace = shared_data / "traces" / trace_name
    policy = _policy_file(tmp_path / "policy.yaml", trace, **fields)
    simulated, ran = _both(tmp_path, trace, policy, days=1)
    frame = pd.read_csv(tmp_path / "simulate.csv")
    assert list(frame.columns) == list(TIMELINE_COLUMNS)
    assert len(frame) == 288 and (frame["workload"] == "default/inference").all()
    # the comparison has something to compare: the reservation moves, GPUs are lent and taken back
    assert frame["reserved_gpus"].nunique() > 5 and frame["lent_gpus"].gt(0).all()
    assert frame["preempted_gpus"].sum() > 0
    assert simulated == ran


def test_a_different_policy_gives_a_different_timeline(tmp_path, shared_data, capsys):
    """The sameness above is not two runs that ignore the policy."""
    trace = shared_data / "traces" / "nasa_http_1995_5min.csv"
    a = _policy_file(tmp_path / "a.yaml", trace, targetQuantile=0.5, warmBuffer=0.0)
    b = _policy_file(tmp_path / "b.yaml", trace, targetQuantile=0.5, warmBuffer=3.0)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    sim_a, _ = _both(tmp_path / "a", trace, a, days=0.25)
    sim_b, run_b = _both(tmp_path / "b", trace, b, days=0.25)
    assert sim_a != sim_b and sim_b == run_b
    reserved = [pd.read_csv(tmp_path / d / "simulate.csv")["reserved_gpus"].sum() for d in ("a", "b")]
    assert reserved[1] > reserved[0]


def test_the_same_over_days_with_the_controllers_retraining(tmp_path, shared_data, capsys):
    """`headroom run` retrains in MLflow (daily and on drift) and serves the champion: by default that champion is
    the forecaster simulate replays, so two days with retrainings stay identical."""
    from training.pipeline import load_champion

    trace = shared_data / "traces" / "servegen_m_large_10min.csv"
    policy = _policy_file(tmp_path / "policy.yaml", trace, gpus_per_replica=2, targetQuantile=0.5, warmBuffer=1.25)
    simulated, ran = _both(tmp_path, trace, policy, days=2)
    assert len(pd.read_csv(tmp_path / "simulate.csv")) == 2 * 144
    assert simulated == ran
    champion = load_champion("default.inference", f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert champion.card.model == "auto"  # the run did retrain, and promoted


# A trace of 10-minute samples over four days, its evening peak on Berlin's clock, ending two hours after Berlin's
# change to summer time (2026-03-29 01:00 UTC): the last 6 hours replayed cross it. `holes` adds a gap inside the
# replay and a stale tail (no sample in its last 40 minutes: the planner's fallback).
SPRING_FORWARD = pd.Timestamp("2026-03-29T01:00:00Z")


def _berlin_trace(path, holes: bool) -> str:
    index = pd.date_range(end=SPRING_FORWARD + pd.Timedelta(hours=2), periods=4 * 144, freq="10min", tz="UTC")
    local = index.tz_convert("Europe/Berlin")
    hour = local.hour + local.minute / 60
    noise = np.random.default_rng(7).normal(0, 3, len(index))
    demand = pd.Series(np.maximum(30 + 25 * np.sin((hour - 12) / 24 * 2 * np.pi) + noise, 0), index)
    if holes:
        demand[(index > SPRING_FORWARD - pd.Timedelta(hours=3)) & (index <= SPRING_FORWARD - pd.Timedelta(hours=2))] \
            = np.nan
        demand.iloc[-4:] = np.nan
    pd.DataFrame({"timestamp": index.strftime("%Y-%m-%dT%H:%M:%SZ"), "value": demand}).to_csv(path, index=False)
    return str(path)


def _job_trace(path) -> str:
    """Training jobs of 1 to 8 GPUs arriving over the replayed hours, running 20 minutes to 3 hours."""
    rng = np.random.default_rng(3)
    created = np.sort(rng.uniform(0, 6 * 3600, 60))
    scheduled = created + rng.uniform(0, 600, 60)
    pd.DataFrame({"num_gpu": rng.choice([1, 1, 2, 4, 8], 60), "creation_time": created, "scheduled_time": scheduled,
                  "deletion_time": scheduled + rng.uniform(1200, 3 * 3600, 60)}).to_csv(path, index=False)
    return str(path)


POLICY_FIELDS = st.fixed_dictionaries({
    "capacity": st.fixed_dictionaries({"demandPerGpu": st.just(1.0), "gpusPerReplica": st.sampled_from([1, 2, 3, 8])}),
    "target": st.sampled_from([{"kind": "Deployment", "name": "inference"},
                               {"kind": "HorizontalPodAutoscaler", "name": "inference"},
                               {"kind": "ClusterQueue", "name": "inference-queue"}]),
    "targetQuantile": st.sampled_from([0.5, 0.8, 0.9, 0.95]), "headroomQuantile": st.sampled_from([0.95, 0.99]),
    "warmBuffer": st.sampled_from([0.0, 0.5, 2.0]), "warmBufferQuantile": st.sampled_from([None, 0.0, 0.9]),
    "minGpus": st.sampled_from([0, 5, 17]), "maxGpus": st.sampled_from([None, 40, 77]),
    "marginGpus": st.sampled_from([0, 3]), "headroomFloorGpus": st.sampled_from([0, 4]),
    "leadTime": st.sampled_from(["5m", "15m", "1h"]), "scaleInDelay": st.sampled_from(["0s", "10m", "1h"]),
    "reclaimDeadline": st.sampled_from(["1m", "5m", "10m"]), "statistic": st.sampled_from(["max", "mean", "p95"]),
    "forecaster": st.sampled_from(["auto", "static", "reactive", "seasonal-naive"]),
    "timezone": st.sampled_from(["UTC", "Europe/Berlin", "America/New_York"]),
    "inferenceClusterQueue": st.sampled_from([None, "inference-pods"]),
    "trainingClusterQueues": st.sampled_from([["training"], ["research", "batch"]])})


# research StrictFIFO, its quota and the inference queue's moving the same step: the order of the writes decides what
# Kueue admits in between
STRICT_RESEARCH_FIELDS = {
    "capacity": {"demandPerGpu": 1.0, "gpusPerReplica": 1}, "headroomQuantile": 0.95, "minGpus": 0,
    "target": {"kind": "Deployment", "name": "inference"}, "warmBuffer": 0.0, "headroomFloorGpus": 0,
    "statistic": "max", "forecaster": "auto", "leadTime": "5m", "targetQuantile": 0.5, "reclaimDeadline": "1m",
    "trainingClusterQueues": ["research", "batch"], "marginGpus": 0, "scaleInDelay": "10m",
    "warmBufferQuantile": None, "maxGpus": 40, "timezone": "UTC", "inferenceClusterQueue": "inference-pods"}


@example(fields={"timezone": "UTC", "scaleInDelay": "0s", "maxGpus": 40, "warmBufferQuantile": None,
                 "targetQuantile": 0.5, "statistic": "max", "leadTime": "1h", "headroomQuantile": 0.95,
                 "warmBuffer": 0.0, "forecaster": "reactive", "minGpus": 0, "reclaimDeadline": "1m", "marginGpus": 0,
                 "capacity": {"demandPerGpu": 1.0, "gpusPerReplica": 8},
                 "target": {"kind": "Deployment", "name": "inference"}, "headroomFloorGpus": 0,
                 "inferenceClusterQueue": "inference-pods", "trainingClusterQueues": ["training"]},
          gpus=64, holes=False, jobs=True, controller={}, strict=False)
@example(fields={"timezone": "UTC", "scaleInDelay": "10m", "maxGpus": None, "warmBufferQuantile": None,
                 "targetQuantile": 0.8, "statistic": "max", "leadTime": "15m", "headroomQuantile": 0.95,
                 "warmBuffer": 0.5, "forecaster": "reactive", "minGpus": 0, "reclaimDeadline": "5m", "marginGpus": 0,
                 "capacity": {"demandPerGpu": 1.0, "gpusPerReplica": 2},
                 "target": {"kind": "Deployment", "name": "inference"}, "headroomFloorGpus": 0,
                 "inferenceClusterQueue": "inference-pods", "trainingClusterQueues": ["research", "batch"]},
          gpus=64, holes=False, jobs=True, controller={}, strict=True)  # research StrictFIFO: other preemptions
@example(fields=STRICT_RESEARCH_FIELDS, gpus=128, holes=False, jobs=False,
         controller={"non_lendable_gpus": 4, "team_weights": {"research": 3}}, strict=True)  # the writes' order
@settings(max_examples=int(os.environ.get("HEADROOM_SAMENESS_EXAMPLES", "8")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fields=POLICY_FIELDS, gpus=st.sampled_from([24, 64, 128]), holes=st.booleans(), jobs=st.booleans(),
       controller=st.sampled_from([{}, {"non_lendable_gpus": 4, "team_weights": {"research": 3}}]),
       strict=st.booleans())
def test_the_same_for_any_policy(tmp_path_factory, capsys, fields, gpus, holes, jobs, controller, strict):
    """Every field of the policy, its target's kind, a daylight saving change, gaps and a stale tail, a job trace, the
    controller's settings and a StrictFIFO training queue: the what-if and the embedded controller decide the same at
    every step."""
    try:
        spec = PolicySpec.model_validate({"query": "demand", "mode": "active", **{k: v for k, v in fields.items()
                                                                                  if v is not None}})
    except ValidationError:  # maxGpus under minGpus or under one replica: refused as the CRD refuses it
        assume(False)
    assume(not spec.too_big_for(gpus - controller.get("non_lendable_gpus", 0)))
    folder = tmp_path_factory.mktemp("example")
    os.chdir(folder)  # the embedded controller's MLflow store, the example's own (the fixture restores the folder)
    policy = folder / "policy.yaml"
    policy.write_text(yaml.safe_dump(manifest("inference", "default", spec), sort_keys=False))
    config = folder / "headroom.yaml"
    world = {"strict_fifo_queues": spec.training_cluster_queues[:1]} if strict else {}
    config.write_text(yaml.safe_dump({"run": controller, "simulate": {"world": world}}))
    flags = ["--config", str(config)] + (["--jobs", _job_trace(folder / "jobs.csv")] if jobs else [])
    simulated, ran = _both(folder, _berlin_trace(folder / "demand.csv", holes), str(policy), days=0.25, gpus=gpus,
                           flags=flags)
    assert simulated == ran
    assert len(pd.read_csv(folder / "simulate.csv")) == 36


@pytest.fixture
def world_writes(monkeypatch) -> dict[int, list[tuple]]:
    """Each command's world -> the writes it gets (scales, quotas, evictions, requeues), in order."""
    import controller.executor
    import controller.simulate
    from controller.actions import Evict, Requeue, Scale, SetQuota

    writes: dict[int, list[tuple]] = {}

    def recorded(action, cluster):
        match action:
            case Scale():
                writes.setdefault(id(cluster), []).append((cluster.now, "scale", action.target.name, action.gpus))
            case SetQuota():
                writes.setdefault(id(cluster), []).append((cluster.now, "quota", action.queue, action.gpus))
            case Evict() | Requeue():
                writes.setdefault(id(cluster), []).append((cluster.now, type(action).__name__, action.workload))
        return apply(action, cluster)

    apply = controller.executor.apply
    monkeypatch.setattr(controller.executor, "apply", recorded)
    monkeypatch.setattr(controller.simulate, "apply", recorded)
    return writes


def test_the_world_gets_the_same_writes_in_the_same_order(tmp_path, capsys, world_writes):
    """simulate applied a step's writes in the plan's order (the reservation, then the quotas) where the reconciler
    writes the quotas that go down first and those that go up last: on the embedded cluster each write is a Kueue event
    that may admit, so the two admitted other replicas, and at 01:50 the timelines said 21 warm GPUs and 20. Both now
    write in one order (controller.actions.in_write_order)."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump(manifest("inference", "default", PolicySpec.model_validate(
        {"query": "demand", "mode": "active", **STRICT_RESEARCH_FIELDS})), sort_keys=False))
    config = tmp_path / "headroom.yaml"
    config.write_text(yaml.safe_dump({"run": {"non_lendable_gpus": 4, "team_weights": {"research": 3}},
                                      "simulate": {"world": {"strict_fifo_queues": ["research"]}}}))
    _both(tmp_path, _berlin_trace(tmp_path / "demand.csv", False), str(policy), days=0.25,
          flags=["--config", str(config)])
    simulated, ran = world_writes.values()
    assert any(kind == "quota" for _, kind, *_ in simulated)  # quotas moved: the order compares something
    assert simulated == ran


def test_many_writes_of_a_kind_reach_the_world_in_the_same_order(tmp_path, capsys, world_writes):
    """The embedded controller wrote more than 16 writes of a kind (quotas, evictions, requeues) 8 at a time on 8
    threads (Reconciler._in_parallel), so its world got them in another order than simulate's (here 17 training
    queues' quotas move at once: at the first step simulate's third write was team-00's quota, run's team-07's), and
    from one run to the next in whatever order the threads took, on a world whose state no lock guards: one run of
    three got 7 writes more than simulate. The embedded cluster now takes a reconcile's writes one after another
    (Cluster.writes_side_by_side)."""
    queues = [f"team-{k:02d}" for k in range(17)]
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump(manifest("inference", "default", PolicySpec.model_validate({
        "query": "demand", "mode": "active", **STRICT_RESEARCH_FIELDS, "maxGpus": None, "headroomQuantile": 0.99,
        "scaleInDelay": "0s", "forecaster": "reactive", "trainingClusterQueues": queues})), sort_keys=False))
    config = tmp_path / "headroom.yaml"
    config.write_text(yaml.safe_dump({"simulate": {"world": {"backlog_job_gpus": [1, 2]}}}))
    trace = _berlin_trace(tmp_path / "demand.csv", False)
    demand = pd.read_csv(trace)
    for at in (len(demand) - 30, len(demand) - 20, len(demand) - 10):  # demand jumps by 30 GPUs for 15 minutes
        demand.loc[at:at + 2, "value"] += 30
    demand.to_csv(trace, index=False)
    _both(tmp_path, trace, str(policy), days=0.25, flags=["--config", str(config)])
    simulated, ran = world_writes.values()
    at_once = pd.DataFrame([w[:2] for w in simulated], columns=["at", "kind"]).value_counts()
    assert at_once.max() > 16  # many of a kind in a step: the order compares something
    assert simulated == ran
    assert pd.read_csv(tmp_path / "simulate.csv").equals(pd.read_csv(tmp_path / "run.csv"))


def test_the_embedded_replay_s_last_line_says_the_preemptions_simulate_counts(tmp_path, capsys):
    """`headroom run` on the embedded cluster printed the state at each hour's first step only, so its last line
    was the last hour's start: on the example history's last day it said 45 emergency preemptions where `simulate`
    of the same policy counted 46, 1 planned (the rest came in the last 55 minutes). The replay's last step is said
    too, its totals as simulate's figures count them."""
    import re
    from pathlib import Path

    trace = Path(__file__).resolve().parents[1] / "examples" / "demand_5min.csv"
    policy = _policy_file(tmp_path / "policy.yaml", trace, targetQuantile=0.5, warmBuffer=0.0)
    simulated, ran = _both(tmp_path, trace, policy, days=1)
    assert simulated == ran
    out = capsys.readouterr().out
    figures = json.loads(out[out.index("{"):out.index("}\n") + 1])  # simulate --json, before run's lines
    last_step = pd.read_csv(tmp_path / "simulate.csv")["timestamp"].iloc[-1]
    said = [line for line in out.splitlines() if re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d ", line)]
    assert said[-1].startswith(pd.Timestamp(last_step).strftime("%Y-%m-%d %H:%M")), said[-1]
    totals = re.findall(r"preemptions (\d+) \((\d+) planned\)", out)[-1]
    assert figures["planned_preemptions"] > 0  # both kinds are in the day: the counts compare something
    assert tuple(map(int, totals)) == (figures["preemptions"], figures["planned_preemptions"])
