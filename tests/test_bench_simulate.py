"""The simulate benchmark's shot-noise ceiling: what random arrivals alone cost, on series with a known answer."""
from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import bench_module


@pytest.fixture(scope="module")
def bench():
    return bench_module("simulate_bench")


def test_few_random_arrivals_leave_a_low_ceiling_and_many_a_high_one(bench):
    rng = np.random.default_rng(0)
    steps = 7 * 288
    rate = 5 + 4 * np.sin(np.arange(steps) * 2 * np.pi / 288) ** 2  # a daily cycle, 5-9 requests a step
    few = rng.poisson(rate).astype(float)
    many = rng.poisson(1000 * rate).astype(float)
    low = bench.shot_noise_bound(few, scale=few.max() / 100, steps_per_hour=12)
    high = bench.shot_noise_bound(many, scale=many.max() / 100, steps_per_hour=12)
    assert 0.8 < low["dispersion"] < 1.3 and 0.8 < high["dispersion"] < 1.3  # Poisson reads as Poisson
    assert low["utilization_ceiling"] < 0.8 < 0.95 < high["utilization_ceiling"]


def test_variation_far_beyond_poisson_gives_no_bound(bench):
    rng = np.random.default_rng(1)
    bursty = rng.choice([1000.0, 30000.0], size=7 * 288)  # flips between two levels at random every step
    out = bench.shot_noise_bound(bursty, scale=bursty.max() / 100, steps_per_hour=12)
    assert out["dispersion"] > 100 and out["utilization_ceiling"] is None
