"""The simulator's world over random demand and a random world (slow and fast jobs, short and long checkpoint
intervals, a small cluster): the headroom guarantee holds at every step (no step where demand inside the band lacks
GPUs that are idle or preemptible within the reclaim deadline), whatever the reservation's reference."""
import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.simulate import Scenario, default_spec, demand_per_gpu, simulate
from core.settings import SIMULATED_POLICIES, WorldSettings


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(8, 96), st.sampled_from([(0.0, 60.0), (30.0, 900.0), (600.0, 3600.0)]),
       st.sampled_from([60.0, 1800.0, 7200.0]), st.sampled_from(SIMULATED_POLICIES), st.floats(0.0, 5.0),
       st.sampled_from(["0s", "15m", "2h", "24h"]), st.sampled_from(["1s", "5m", "1h"]))
def test_the_headroom_band_is_covered_at_every_step(seed, gpus, preempt, interval, reference, bursts, lead, deadline):
    rng = np.random.default_rng(seed)
    index = pd.date_range("2026-03-01", periods=288 * 3, freq="5min", tz="UTC")
    daily = 100 + 50 * np.sin(np.arange(len(index)) / 288 * 2 * np.pi)
    values = daily + rng.gamma(1.0, 10.0, len(index)) * (1 + bursts * (rng.random(len(index)) < 0.02))
    values[rng.random(len(index)) < 0.01] = np.nan  # missing samples
    demand = pd.Series(values, index=index)
    s = Scenario(demand, gpus, 1.0, world=WorldSettings(seed=seed % 100, preemption_seconds=preempt,
                                                        checkpoint_interval_seconds=interval))
    spec = default_spec(s, demand_per_gpu(demand, peak_gpus=gpus * 0.6), leadTime=lead, reclaimDeadline=deadline)
    r = simulate(s, spec, reference=reference)
    assert r.headroom_violations == 0
