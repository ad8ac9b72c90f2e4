"""The what-if engine (controller.simulate): a real demand trace replayed on the embedded cluster under a
ReservationPolicy, the same planner and actions as `headroom run`. Real traces from ../shared/data, short
slices (a day evaluated) so each simulation takes a fraction of a second."""
from __future__ import annotations

import json
import math
from functools import cache

import numpy as np
import pandas as pd
import pytest

from cli.simulate import load_jobs
from controller.observe import default_forecaster
from controller.simulate import (
    POLICIES,
    REFERENCES,
    TIMELINE_COLUMNS,
    Scenario,
    SharedFits,
    SimResult,
    TimedResult,
    default_spec,
    demand_per_gpu,
    simulate,
    trace_jobs,
    write_timeline,
)
from core.policy import PolicySpec, spec_dict
from core.settings import WorldSettings
from forecast.history import at_own_step, load_history
from forecast.synthetic import synthetic_demand
from tests.conftest import SHARED_DATA

TRACES = {"nasa": "nasa_http_1995_5min.csv", "alibaba": "alibaba_genai_sd_requests_5min.csv",
          "servegen": "servegen_m_large_10min.csv"}
JOBS = SHARED_DATA / "jobs" / "alibaba_openb_pods.csv"
# SimResult's fields before issue 11 (buffer_replay_seconds went with the buffer replay; `policy` is now the spec,
# the policy's name is `reference`), and the ones added since
OLD_FIELDS = {"utilization", "inference_shortage", "shortage_hours", "mean_reserved_gpus", "training_gpu_hours",
              "training_goodput", "preemptions", "planned_preemptions", "reclaim_p99_seconds", "headroom_violations",
              "cost_vs_dedicated", "forecast_fallback_hours", "shortage_over_capacity", "warm_buffer", "sim_seconds",
              "refit_seconds"}
NEW_FIELDS = {"shortage_within_cluster", "short_steps", "longest_shortage_minutes", "objective_met", "policy",
              "mean_warm_buffer_gpus"}


def need(path):
    if not path.exists():
        pytest.skip(f"real trace not found: {path} (../shared/data beside the repo)")
    return path


@cache
def _trace(name: str, days: float) -> pd.Series:
    demand = at_own_step(load_history(SHARED_DATA / "traces" / TRACES[name]))
    return demand[demand.index < demand.index[0] + pd.Timedelta(days=days)]


def trace(name: str, days: float = 5) -> pd.Series:
    """The trace's first `days` (nasa's first gap is on day 27), at its own step."""
    need(SHARED_DATA / "traces" / TRACES[name])
    return _trace(name, days).copy()


def scenario(demand: pd.Series, days: float = 1.0, **kw) -> tuple[Scenario, PolicySpec]:
    s = Scenario(demand, kw.pop("gpus", 128), days, **kw)
    return s, default_spec(s, demand_per_gpu(demand, peak_gpus=100))


class Recording:
    """The default forecaster, recording the last hour of every history it is fitted on."""
    ends: list[pd.Timestamp] = []

    def __init__(self):
        self.model, self.name = default_forecaster(), "recording"

    def fit(self, history):
        Recording.ends.append(history.index[-1])
        self.model.fit(history)
        return self

    def predict(self, horizon, quantiles):
        return self.model.predict(horizon, quantiles)


class Broken(Recording):
    def predict(self, horizon, quantiles):
        frame = self.model.predict(horizon, quantiles)
        return frame * np.nan


class Raising(Recording):
    def fit(self, history):
        raise ValueError("cannot fit")


def test_the_warm_buffer_held_is_reported_beside_the_policys_least_factor():
    """`warm_buffer` is the policy's warmBuffer; the last week's rises may ask more, which only
    `mean_warm_buffer_gpus` shows (an SRE read warm_buffer 0 as no buffer held)."""
    s, spec = scenario(trace("nasa"))
    none = simulate(s, spec.model_copy(update={"warm_buffer": 0.0, "warm_buffer_quantile": 0.0}))
    fixed = simulate(s, spec.model_copy(update={"warm_buffer": 2.0, "warm_buffer_quantile": 0.0}))
    rises = simulate(s, spec.model_copy(update={"warm_buffer": 0.0}))
    assert none.mean_warm_buffer_gpus == 0 and fixed.mean_warm_buffer_gpus >= 2.0
    assert rises.warm_buffer == 0 and rises.mean_warm_buffer_gpus > 0


def test_result_json_has_issue_11_fields_and_the_old_ones():
    s, spec = scenario(trace("nasa"))
    r = simulate(s, spec)
    out = json.loads(r.to_json())
    assert NEW_FIELDS | OLD_FIELDS | {"reference"} <= set(out)
    assert out["reference"] == "forecast" and out["policy"] == spec_dict(spec)  # the spec it ran, defaults filled in
    assert PolicySpec.model_validate(out["policy"]) == spec
    assert r.steps == 288 and 0 < r.utilization <= 1
    for k in ("shortage_within_cluster", "short_steps", "shortage_over_capacity", "shortage_hours_share"):
        assert 0 <= out[k] <= 1, k
    assert math.isclose(r.inference_shortage, r.shortage_within_cluster + r.shortage_over_capacity)
    assert r.objective_met == (r.shortage_within_cluster <= spec.objective.max_shortage
                               and r.short_steps <= spec.objective.max_short_steps)
    # the longest shortage is whole steps, at least one when any step was short
    assert (r.longest_shortage_minutes > 0) == (r.short_steps > 0) == (r.shortage_hours > 0)
    assert r.longest_shortage_minutes % 5 == 0 and r.longest_shortage_minutes <= r.short_steps * r.steps * 5
    assert r.headroom_violations == 0 and r.training_gpu_hours > 0 and 0.95 <= r.training_goodput <= 1


# Open (issue 11): alibaba's fifth day bursts to 2.4x the peak of the four days before it. The intervals no longer
# explode there (test_every_policy_on_a_real_trace passes on it: q0.9 within 1.15x the history's peak, was 10-56x),
# but the warm buffer tune picks (targetQuantile 0.5, the buffer following the last week's rises) grows with each
# burst and takes lent GPUs back each time: goodput 0.897 on the fifth day, short 0.133% of demand in 0.35% of
# steps. A fixed buffer alone keeps goodput (0.984 / 0.964 / 0.936 at 0 / 4 / 8) and leaves 10.8% / 3.5% / 1.3% of
# demand unserved. strict: the mark fails the run once it passes.
WARM_BUFFER_GOODPUT = pytest.mark.xfail(strict=True, reason="goodput under tune's rises' buffer on alibaba's burst")


@pytest.mark.parametrize("name", TRACES)
def test_every_policy_on_a_real_trace(name):
    s, spec = scenario(trace(name))
    out = {p: simulate(s, spec, reference=p) for p in POLICIES}
    assert {p: r.reference for p, r in out.items()} == {p: p for p in POLICIES}
    for p, r in out.items():
        assert r.headroom_violations == 0, p
        assert r.training_goodput >= 0.9 and r.training_gpu_hours > 0, p  # defaults, untuned: see the tuned test
        assert r.shortage_over_capacity == 0, p  # the 99.9th percentile is 100 of 128 GPUs
    oracle, hourly = out["oracle"], out["hourly-oracle"]
    # knowing each step beats knowing each hour, which beats anything that does not know the future; both are
    # references meeting the objective, on a sane level (measured 0.94-0.96 and 0.84-0.94)
    assert oracle.utilization >= hourly.utilization >= 0.8
    assert oracle.objective_met and hourly.objective_met and oracle.shortage_within_cluster == 0
    # references run without buffer, delay or margin (the hourly oracle raises one step early)
    assert oracle.policy["warmBuffer"] == 0 and oracle.policy["scaleInDelay"] == "0s"
    assert hourly.policy["leadTime"] == f"{s.step_seconds:g}s"
    assert all(out[p].utilization <= oracle.utilization for p in POLICIES)
    assert out["static"].utilization == min(r.utilization for r in out.values())
    assert out["static"].mean_reserved_gpus == max(r.mean_reserved_gpus for r in out.values())


@pytest.mark.parametrize("gpus", [1, 128])
@pytest.mark.parametrize("reference", REFERENCES)
def test_a_reference_never_falls_back(reference, gpus):
    """`simulate --policy oracle` reported forecast_fallback_hours 1 on every trace and cluster: at the trace's last
    steps its lead time reaches past the end, where it knew nothing, and the planner reserved last week's peak
    there (and, through the lead time, in the step before). Past the end it holds the trace's last level."""
    s, spec = scenario(trace("servegen"), gpus=gpus)
    assert simulate(s, spec, reference=reference).forecast_fallback_hours == 0


@pytest.mark.parametrize("name", [pytest.param(n, marks=WARM_BUFFER_GOODPUT) if n == "alibaba" else n for n in TRACES])
def test_tuned_forecast_keeps_goodput_and_headroom_on_every_trace(name):
    """With tune's recommendation (history only) the forecast policy keeps the headroom guarantee and training's
    goodput (issue 11: 0 violations, goodput >= 0.95)."""
    from controller.tune import tune

    s, spec = scenario(trace(name))
    t = tune(s, spec)
    r = simulate(s, t.recommended)
    assert t.met and r.headroom_violations == 0 and r.training_goodput >= 0.95, (name, t.reason, r)
    assert r.utilization > simulate(s, spec, reference="static").utilization


def test_refits_hourly_on_complete_past_hours_only():
    s, spec = scenario(trace("nasa"))
    Recording.ends = []
    simulate(s, spec, Recording)
    hours = pd.date_range(s.evaluated[0].floor("h"), s.evaluated[-1], freq="h")
    assert len(Recording.ends) == len(hours) == 24
    # each refit at the start of an hour fits the hours strictly before it
    assert Recording.ends == [h - pd.Timedelta(hours=1) for h in hours]


@pytest.mark.parametrize("policy", ["forecast", "seasonal-naive", "reactive"])
def test_future_demand_does_not_change_earlier_decisions(policy):
    demand = trace("servegen", days=9)  # 8 days of history: seasonal-naive has its week
    s, spec = scenario(demand)
    before = simulate(s, spec, reference=policy, timeline=True, detail=True)
    spiked = demand.copy()
    spiked.iloc[-6:] *= 3  # the last hour of the evaluated day (10-minute steps)
    after = simulate(Scenario(spiked, s.gpus, s.days), spec, reference=policy, timeline=True, detail=True)
    assert isinstance(before, TimedResult) and len(before.timeline) == s.evaluated.size
    pd.testing.assert_frame_equal(before.timeline.iloc[:-6], after.timeline.iloc[:-6])
    pd.testing.assert_frame_equal(before.detail.iloc[:-6], after.detail.iloc[:-6])
    assert not before.timeline.iloc[-6:].equals(after.timeline.iloc[-6:])  # the spike itself is seen


def test_a_broken_or_failing_forecaster_falls_back_to_last_weeks_same_hour_peak():
    s, spec = scenario(trace("nasa"))
    ok = simulate(s, spec, Recording)
    broken, raising = (simulate(s, spec, m, timeline=True) for m in (Broken, Raising))
    assert ok.forecast_fallback_hours == 0
    for r in (broken, raising):
        assert r.forecast_fallback_hours == 24 and r.headroom_violations == 0 and r.training_goodput >= 0.95
    # a NaN forecast and a model that cannot fit are the same fallback: nothing else differs
    pd.testing.assert_frame_equal(broken.timeline, raising.timeline)
    # every step reserves at least the peak of its hour of day over the week before the hour
    raw, per_gpu = s.demand, spec.capacity.demand_per_gpu
    for t, reserved in zip(pd.DatetimeIndex(broken.timeline["timestamp"]), broken.timeline["reserved_gpus"]):
        hour = t.floor("h")
        week = raw[(raw.index > hour - pd.Timedelta(days=7)) & (raw.index <= hour)]
        assert reserved >= math.floor(week[week.index.hour == t.hour].max() / per_gpu), t


def test_one_day_of_history_is_a_stated_conservative_default_not_an_error():
    demand = trace("nasa", days=2)
    s, spec = scenario(demand)
    assert len(s.history) == 288  # a day
    r = simulate(s, spec)
    # no forecast until 48 hours are seen: the fallback (the last day's same-hour peak) all day, never an error
    assert r.forecast_fallback_hours == 24 and r.steps == 288
    assert r.headroom_violations == 0 and r.utilization > 0.6 and r.objective_met
    with_week = simulate(*scenario(trace("nasa", days=9)))
    assert with_week.forecast_fallback_hours == 0


def test_half_a_day_of_history_reserves_a_level_for_the_hours_it_never_saw_not_a_pulse_each_hour():
    """The example demand's first day, its second half evaluated: each evening hour is first seen as it runs. The
    fallback holds the week's highest peak for it from its lead time on and through the hour (its first samples are
    not its peak), not a rise to that peak at each :45 dropped a few minutes after the hour, which preempted the
    training lent in between every hour (70 preemptions in 12 hours)."""
    s, spec = scenario(synthetic_demand(days=2)[:288], days=0.5)
    r = simulate(s, spec, timeline=True)
    assert r.forecast_fallback_hours == 12 and r.objective_met and r.headroom_violations == 0
    reserved = r.timeline["reserved_gpus"].to_numpy()
    fell = [k for k in range(1, len(reserved) - 1) if reserved[k] < reserved[k - 1]]
    assert not fell and r.preemptions == 0


# Open: with one day of history (nothing to tune on), the warm buffer from that day's rises at the objective's level
# meets the objective (0.03% / 0.35% of steps; 0.12% / 1.39% under the fixed buffer alone) but swings the reservation
# with each burst: training goodput 0.937 (0.987 under the fixed buffer). strict: the mark fails the run once it passes.
@pytest.mark.xfail(strict=True, reason="goodput under the rises' warm buffer with one day of history")
def test_one_day_of_history_keeps_training_goodput():
    s, spec = scenario(trace("nasa", days=2))
    assert simulate(s, spec).training_goodput >= 0.95


def test_shared_fits_give_the_same_numbers_and_fit_once():
    s, spec = scenario(trace("nasa"))
    Recording.ends = []
    alone = simulate(s, spec, Recording)
    fits = SharedFits(Recording)
    a = simulate(s, spec, fits)
    b = simulate(s, spec.model_copy(update={"warm_buffer": 3.0, "warm_buffer_quantile": 0.0}), fits)
    assert len(Recording.ends) == 2 * 24  # one per hour alone, one per hour for both shared runs
    assert (a.utilization, a.shortage_within_cluster, a.preemptions) == (
        alone.utilization, alone.shortage_within_cluster, alone.preemptions)
    assert b.mean_reserved_gpus != a.mean_reserved_gpus  # the buffer did change the second run


def test_demand_above_the_cluster_is_reported_apart_from_the_objective():
    s, spec = scenario(trace("nasa"), gpus=60)  # peak 100 GPUs on 60
    r = simulate(s, spec)
    assert r.shortage_over_capacity > 0.01
    assert math.isclose(r.inference_shortage, r.shortage_within_cluster + r.shortage_over_capacity)
    assert r.shortage_within_cluster < r.shortage_over_capacity


def test_job_trace_and_slow_checkpoints():
    need(JOBS)
    s, spec = scenario(trace("nasa"), jobs=trace_jobs(load_jobs(JOBS), 86400, 128))
    r = simulate(s, spec, reference="reactive")
    assert 0 < r.training_gpu_hours and 0 < r.training_goodput <= 1 and r.headroom_violations == 0
    backlog = simulate(*scenario(trace("nasa")), reference="reactive")
    assert r.training_gpu_hours < backlog.training_gpu_hours  # the trace's jobs do not saturate the cluster
    # jobs that take 10-15 minutes to stop: taking GPUs back takes that long, so they may hold only what no plausible
    # demand needs meanwhile, and the headroom guarantee still holds (no step short of GPUs that idle GPUs or jobs
    # stopping within the deadline could not give), without thrashing training
    slow_world = WorldSettings(preemption_seconds=(600.0, 900.0))
    slow = simulate(Scenario(s.demand, 128, 1.0, world=slow_world), spec)
    fast = simulate(Scenario(s.demand, 128, 1.0), spec)
    assert slow.preemptions > 0 and slow.reclaim_p99_seconds >= 600 > 300 >= fast.reclaim_p99_seconds
    assert slow.headroom_violations == 0 == fast.headroom_violations
    assert slow.training_gpu_hours < fast.training_gpu_hours
    # without thrashing training: under the fixed warm buffer alone (the rises' buffer costs goodput here: above)
    fixed = spec.model_copy(update={"warm_buffer_quantile": 0.0})
    assert simulate(Scenario(s.demand, 128, 1.0, world=slow_world), fixed).training_goodput >= 0.9


def test_jobs_too_big_for_the_lent_gpus_do_not_keep_smaller_ones_waiting():
    """Kueue's model looked at 64 Workloads of a queue only: 70 8-GPU jobs ahead of 50 1-GPU ones, on a 16-GPU
    cluster reserving 10 for inference, ran 42 training GPU-hours in a day; Kueue tries every Workload, so each
    1-GPU job runs its 2 hours in the 6 GPUs lent."""
    index = pd.date_range("2026-03-01", periods=288 * 3, freq="5min", tz="UTC")
    demand = pd.Series(100.0, index=index)  # 10 GPUs at 10 a GPU
    jobs = (np.array([8] * 70 + [1] * 50), np.full(120, 7200.0), np.zeros(120))
    s = Scenario(demand, 16, 1.0, jobs)
    r = simulate(s, default_spec(s, 10.0), reference="oracle")
    assert r.training_gpu_hours == pytest.approx(100.0) and r.headroom_violations == 0


def test_timeline_columns_and_file(tmp_path):
    s, spec = scenario(trace("nasa"))
    r = simulate(s, spec, timeline=True)
    t = r.timeline
    assert list(t.columns) == list(TIMELINE_COLUMNS) and len(t) == r.steps
    assert (t["workload"] == s.name).all() and (pd.DatetimeIndex(t["timestamp"]) == s.evaluated).all()
    per_gpu = spec.capacity.demand_per_gpu
    np.testing.assert_allclose(t["demand_gpus"], s.demand.loc[s.evaluated].to_numpy() / per_gpu)
    assert (t["warm_gpus"] <= s.gpus).all() and (t["lent_gpus"] + t["reserved_gpus"] <= s.gpus + 1e-9).all()
    assert t["preempted_gpus"].sum() >= r.preemptions > 0
    path = write_timeline(t, tmp_path / "t.csv")
    back = pd.read_csv(path)
    assert list(back.columns) == list(TIMELINE_COLUMNS) and len(back) == len(t)
    np.testing.assert_allclose(back["reserved_gpus"], t["reserved_gpus"])
    # without timeline=True a plain SimResult
    assert type(simulate(s, spec)) is SimResult


def test_demand_per_gpu_and_default_spec():
    d = trace("nasa")
    per_gpu = demand_per_gpu(d, peak_gpus=100)
    assert math.isclose(np.nanquantile(d.to_numpy(float), 0.999) / per_gpu, 100)
    assert demand_per_gpu(d, peak_gpus=50) == 2 * per_gpu and demand_per_gpu(d, per_gpu=3.0) == 3.0
    with pytest.raises(ValueError, match="no positive value"):
        demand_per_gpu(d * 0)
    s = Scenario(d, name="team-a/chat", training_queues=("research", "batch"))
    spec = default_spec(s, per_gpu, warmBuffer=2.5)
    assert spec.mode == "active" and spec.target.name == "chat" and spec.training_cluster_queues == ["research",
                                                                                                    "batch"]
    assert spec.warm_buffer == 2.5 and spec.target_quantile == PolicySpec.model_fields["target_quantile"].default


def test_requests_that_cannot_be_simulated_are_errors():
    s, spec = scenario(trace("nasa"))
    with pytest.raises(ValueError, match="unknown policy"):
        simulate(s, spec, reference="clairvoyant")
    with pytest.raises(ValueError, match="fewer than two evaluated steps"):
        simulate(Scenario(s.demand, days=1e-4), spec)
    assert set(REFERENCES) <= set(POLICIES)


def test_a_thousand_gpus_with_the_job_trace_run():
    """The speed run's scenario works (1,000 GPUs, the job trace); its speed is bench/simulate_bench.py's to
    measure, not a timed unit test's."""
    need(JOBS)
    nasa = trace("nasa", days=4).ffill()
    s = Scenario(nasa, 1000, 2, trace_jobs(load_jobs(JOBS), 2 * 86400, 1000))
    spec = default_spec(s, demand_per_gpu(nasa, peak_gpus=800), forecaster="seasonal-naive")
    r = simulate(s, spec)
    assert r.steps == 2 * 288 and r.training_gpu_hours > 0 and r.headroom_violations == 0


def _stopped_inside_numpy(*args, **kwargs):
    """What numpy raises when Ctrl-C lands while it parses a buffer's format (tests/test_models.py shows it)."""
    try:
        raise KeyboardInterrupt("SIGINT")
    except KeyboardInterrupt as stop:
        raise ValueError("'T{<d:sum_gradients:}' is not a valid PEP 3118 buffer format string") from stop


def test_a_stop_numpy_reports_as_its_own_error_ends_a_replay_and_a_controllers_fit(monkeypatch):
    """A Ctrl-C reported as a ValueError was taken for a model that could not fit: the replay went on with the
    planner's fallback and the command exited 0 (seen as a flaky Ctrl-C test under load)."""
    import controller.observe
    import controller.simulate
    from forecast.synthetic import synthetic_demand

    s, spec = scenario(synthetic_demand(days=4), days=1.0)
    monkeypatch.setattr(controller.simulate, "issue", _stopped_inside_numpy)
    with pytest.raises(KeyboardInterrupt, match="SIGINT"):
        simulate(s, spec)
    monkeypatch.setattr(controller.observe, "issue", _stopped_inside_numpy)
    hourly = pd.Series(1.0, pd.date_range("2026-01-01", periods=72, freq="h", tz="UTC"))
    with pytest.raises(KeyboardInterrupt, match="SIGINT"):
        controller.observe.fit(default_forecaster(), "auto", hourly, hourly.index[-1], spec, 0, 24)


def test_a_reference_is_judged_by_the_objective_asked_as_the_policies_beside_it(tmp_path, capsys):
    """`--max-shortage`/`--max-short-steps` set the objective every policy is tuned to; the references ran under the
    default one (0.1%, 1%) instead: their objective_met was judged by it, and the hourly oracle chose each hour's
    level by it, so beside a forecast policy tuned to a loose objective it read as a stricter reference."""
    from cli.main import main

    demand = synthetic_demand(days=3)
    path = tmp_path / "demand.csv"
    pd.DataFrame({"timestamp": demand.index.strftime("%Y-%m-%dT%H:%M:%SZ"), "value": demand.to_numpy()}).to_csv(
        path, index=False)
    loose = {"maxShortage": 0.2, "maxShortSteps": 0.5}
    given = ["simulate", str(path), "--days", "1", "--gpus", "64", "--json"]
    figures = {}
    for reference in REFERENCES:
        for objective in ([], ["--max-shortage", "0.2", "--max-short-steps", "0.5"]):
            capsys.readouterr()
            assert main([*given, "--policy", reference, *objective]) == 0
            figures[reference, bool(objective)] = r = json.loads(capsys.readouterr().out)
            if objective:
                assert r["policy"]["objective"] == loose, reference
                assert r["objective_met"] == (r["shortage_within_cluster"] <= 0.2 and r["short_steps"] <= 0.5)
    # the least level of each hour's demand meeting the objective: a looser objective lets it reserve less
    strict, relaxed = figures["hourly-oracle", False], figures["hourly-oracle", True]
    assert relaxed["mean_reserved_gpus"] < strict["mean_reserved_gpus"], (relaxed, strict)


def test_cost_vs_dedicated_sizes_the_dedicated_inference_cluster_on_the_replayed_days():
    """A dedicated inference cluster doing the same work as the shared one is as large as the replayed days' peak. It
    was sized on the history's: on a trace whose first three days ran at a tenth of the last's, the shared cluster
    read as twice as dear (cost_vs_dedicated 1.96) as a dedicated pair that could not serve the day replayed."""
    index = pd.date_range("2026-01-05", periods=4 * 288, freq="5min", tz="UTC")
    daily = 6 + 6 * np.sin(np.arange(len(index)) * 2 * np.pi / 288)
    demand = pd.Series(np.where(index < index[3 * 288], daily / 10, daily), index=index)
    s = Scenario(demand, gpus=16, days=1.0)
    r = simulate(s, default_spec(s, 1.0), reference="oracle")
    peak = math.ceil(demand[s.evaluated].max())
    assert peak == 12
    assert r.cost_vs_dedicated == pytest.approx(16 / (peak + r.training_gpu_hours * 3600 / s.replay_seconds))
    assert r.cost_vs_dedicated < 1  # the shared cluster serves the day's peak and lends the rest
    # demand over the cluster is served by neither: the dedicated inference cluster is no larger than the shared one
    burst = Scenario(demand.where(demand.index != demand.index[-100], 40.0), gpus=16, days=1.0)
    b = simulate(burst, default_spec(burst, 1.0), reference="oracle")
    assert b.cost_vs_dedicated == pytest.approx(16 / (16 + b.training_gpu_hours * 3600 / burst.replay_seconds))
