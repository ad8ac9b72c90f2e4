"""headroom's own example demand: daily and weekly cycles, noise, bursts, a gap.

Used for the demo and the examples, so nothing shipped depends on data that
somebody else wrote. Deterministic for a given seed.
"""
from __future__ import annotations

import numpy as np
import pandas as pd


def synthetic_demand(days: int = 42, step: str = "5min", seed: int = 7,
                     start: str = "2026-01-05T00:00:00Z", peak: float = 1000.0) -> pd.Series:
    """Requests per step for an inference service in business-hours rhythm."""
    rng = np.random.default_rng(seed)
    index = pd.date_range(start, periods=int(pd.Timedelta(days=days) / pd.Timedelta(step)), freq=step)
    hours = (index.hour + index.minute / 60.0).to_numpy()
    weekday = index.day_of_week.to_numpy()
    # Two business-hour humps (morning, afternoon) over a night floor of ~20%.
    daily = 0.2 + 0.55 * np.exp(-((hours - 10.5) / 2.2) ** 2) + 0.6 * np.exp(-((hours - 15.5) / 2.6) ** 2)
    weekly = np.where(weekday >= 5, 0.45, 1.0)
    growth = 1.0 + 0.1 * np.arange(len(index)) / len(index)
    noise = rng.lognormal(0.0, 0.08, len(index))
    demand = peak / 1.1 * daily * weekly * growth * noise
    # Bursts: a few sharp, short surges a week (a launch, a batch client).
    steps_per_hour = pd.Timedelta("1h") / pd.Timedelta(step)
    for start_at in rng.choice(len(index) - 24 * int(steps_per_hour), size=max(1, days // 3), replace=False):
        length = int(rng.integers(1, 4) * steps_per_hour)
        demand[start_at:start_at + length] *= rng.uniform(1.3, 1.8)
    # One scrape outage: a gap is missing data, never zero.
    gap = len(index) // 3
    demand[gap:gap + int(3 * steps_per_hour)] = np.nan
    return pd.Series(np.round(demand, 1), index=index, name="value")


def write_csv(series: pd.Series, path) -> None:
    frame = pd.DataFrame({"timestamp": series.index.strftime("%Y-%m-%dT%H:%M:%SZ"), "value": series.to_numpy()})
    frame.to_csv(path, index=False, na_rep="")
