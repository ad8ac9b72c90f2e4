"""Synthetic streams of the kinds issue 11's and issue 13's held-out traces are.

The owner's held-out traces stay with the owner; these are generated here, by rules written from their description
alone: bursts at a fixed minute of every second hour with a nightly collection gap, level shifts over a weak daily
cycle, and a one-week token stream with zero nights that leaves two days of history before the evaluated days.
Seed 1 of each kind is the part to choose on; seeds 2-9 are the part to test on. numpy and pandas only, so
bench/peers/run_peers.py (statsforecast's venv) builds the same series as the headroom side.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

HORIZON, FOLDS, STEP, MIN_TRAIN = 24, 7, 24, 48  # `headroom backtest --horizon 24 --folds 7 --step 24`
CHOOSE_SEEDS, TEST_SEEDS = (1,), (2, 3, 4, 5, 6, 7, 8, 9)


def _index(days: int) -> pd.DatetimeIndex:
    return pd.date_range("2026-03-02", periods=days * 288, freq="5min", tz="UTC")


def bursts_every_two_hours(seed: int, days: int = 14) -> pd.Series:
    """Requests per 5 minutes: a daily swing of +-30 %, three times the rate from minute 15 to 25 of every even
    hour, no samples from 03:00 to 04:00 (the nightly collection gap)."""
    rng = np.random.default_rng(seed)
    i = _index(days)
    hour = np.asarray(i.hour + i.minute / 60)
    burst = np.asarray((i.hour % 2 == 0) & (i.minute >= 15) & (i.minute < 25))
    values = rng.poisson(200 * (1 + 0.3 * np.sin(2 * np.pi * (hour - 9) / 24)) * np.where(burst, 3.0, 1.0))
    return pd.Series(np.where(np.asarray(i.hour == 3), np.nan, values.astype(float)), i)


def level_shifts(seed: int, days: int = 14) -> pd.Series:
    """A weak daily cycle (+-15 %) that steps up 1.8x within the evaluated week and down to 0.6x of that later."""
    rng = np.random.default_rng(seed)
    i = _index(days)
    hour, day = np.asarray(i.hour + i.minute / 60), np.arange(len(i)) / 288
    level = np.where(day >= 9.3 + rng.uniform(0, 1), 1.8, 1.0) * np.where(day >= 11.6 + rng.uniform(0, 1), 0.6, 1.0)
    rate = 100 * (1 + 0.15 * np.sin(2 * np.pi * (hour - 9) / 24)) * level * rng.lognormal(0, 0.15, len(i))
    return pd.Series(rng.poisson(rate).astype(float), i)


def token_week(seed: int, days: int = 9) -> pd.Series:
    """Tokens per 5 minutes: zero from 22:00 to 06:00, a daytime hump, heavy (lognormal 0.4) noise; nine days, so
    two of history before the evaluated seven."""
    rng = np.random.default_rng(seed)
    i = _index(days)
    hour = np.asarray(i.hour + i.minute / 60)
    return pd.Series(np.round(5000 * np.clip(np.sin(np.pi * (hour - 6) / 16), 0, None)
                              * rng.lognormal(0, 0.4, len(i))), i)


KINDS = {"bursts every two hours": bursts_every_two_hours, "level shifts": level_shifts,
         "one-week tokens": token_week}


def hourly(kind: str, seed: int) -> pd.Series:
    """The kind's stream as an hourly series (the mean of each hour's samples; NaN in the nightly gap)."""
    return KINDS[kind](seed).resample("1h").mean().rename(f"{kind}/{seed}")


def backtest_origins(n: int) -> list[int]:
    """The origins `headroom backtest --horizon 24 --folds 7 --step 24` scores in `n` hours (forecast.calibrate.origins,
    written again here for the peers' venv, which never imports headroom; the harness checks both agree)."""
    last = n - HORIZON
    return [o for o in (last - STEP * k for k in range(FOLDS - 1, -1, -1)) if o >= MIN_TRAIN]
