"""Recent level shifts in an hourly history: found by a CUSUM test, and the history re-levelled to the newest level.

Demand that steps to a new level and stays there (a tenant moved in, a launch, a region drained) is forecast by the
seasonal candidates from the old level for days: seasonal naive 168 for a week, the profile's four-week median
longer, and the median's level correction only from seven inner folds on. Here the last WINDOW hours, less each hour
of the day's mean over them, are split where the level changed by binary segmentation: each split is the OLS-CUSUM
test of one constant mean (Ploberger & Kraemer 1992), whose statistic, the largest centred partial sum over the
long-run standard deviation times sqrt(n), tends under no change to the supremum of a Brownian bridge's absolute
value (the Kolmogorov distribution): above CRITICAL with probability ALPHA. The long-run variance is Bartlett's with
a day's bandwidth (hours err together within a day; a quarter of the hours tested when that is less: lags near n sum
the centred residuals' autocovariances towards zero), on the residuals around the two means either side of the
split, so the change itself does not swell it. A shift counts only with MIN_HOURS on both sides of it, a change of
at least MIN_RATIO either way (a smaller one the candidates follow: the profile's latest-day level, the level
correction) and, from two weeks of history, only where the same test at that split rejects on the changes from the
same hours a week earlier too (a weekend is a change of level within the week, not a shift).

A split is a shift only where a step explains the hours it splits better than a drift does (round 16): a gauge that
rises steadily moves the CUSUM's mean as a step does, and binary segmentation reads it as a run of steps. Between
the two ways of seeing the segment, a step (two levels and where the level changed: 3 parameters) and a drift (a
linear trend, 2, or a continuous broken line, Perron's 1989 changing-trend model: intercept, two slopes and the
knot, 4, the knot searched as the split is), the one with the lower Schwarz information criterion, BIC = n log
(RSS / n) + parameters x log n (Schwarz 1978), is preferred, and the step is accepted only where it is by more
than DRIFT_EVIDENCE: a BIC difference approximates twice the log Bayes factor, read on Kass & Raftery's (1995)
scale: over 2 positive, over 6 strong, over 10 very strong evidence.

The history before each shift is then scaled by the ratio of the newest level to its own (each level read against
the hours' daily means, so a part of a day does not bias it): every candidate keeps the daily and weekly shape of
the whole history and forecasts from the newest level, and the inner folds score the candidates as if the level had
always been the newest one. ALPHA, MIN_HOURS and MIN_RATIO were chosen on the forecast bench's choose-on part
(docs/bench-forecast.md, round 15). Pure numpy.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

DAY, WEEK = 24, 168
WINDOW = WEEK  # an older shift is past for seasonal naive 168 and is in the level correction's residuals
ALPHA = 1e-9
CRITICAL = float(np.sqrt(np.log(2 / ALPHA) / 2))  # Kolmogorov tail 2 exp(-2 x^2), exact to 1e-18 here
MIN_HOURS = 12
MIN_RATIO = 1.25
DRIFT_EVIDENCE: float | None = None  # None: a split is not weighed against a drift (round 15)


@dataclass(frozen=True)
class LevelShifts:
    """The shifts found in a history: `at` the positions of the first hour at each new level (oldest first),
    `scales` what each segment before the newest (the history before `at[0]` the first) is multiplied by."""
    at: tuple[int, ...]
    scales: tuple[float, ...]

    def relevel(self, values: np.ndarray) -> np.ndarray:
        out = np.asarray(values, dtype=float).copy()
        starts = (0, *self.at[:-1])
        for start, end, scale in zip(starts, self.at, self.scales):
            out[start:end] *= scale
        return out

    def note(self, index: pd.DatetimeIndex) -> str:
        newest, after = self.at[-1], len(index) - self.at[-1]
        return (f"level shift at {index[newest].isoformat()} (x{self.scales[-1]:.2g}): the history before it "
                f"re-levelled to the {after} hours after it")


def find_shifts(values: np.ndarray, min_hours: int = MIN_HOURS) -> LevelShifts | None:
    """The level shifts in `values` (hourly, gaps filled) in the last WINDOW hours, or None (no shift, or a level
    that cannot be read as a ratio: a segment or its baseline without demand)."""
    n = len(values)
    if n < 2 * DAY:
        return None
    start = n - min(n, WINDOW)
    window = values[start:]
    hour = (np.arange(len(window)) - len(window)) % DAY
    baseline = (np.bincount(hour, weights=window, minlength=DAY) / np.bincount(hour, minlength=DAY))[hour]
    splits = sorted(_splits(window - baseline, 0, len(window), min_hours))
    if start >= WEEK:
        weekly = window - values[start - WEEK:n - WEEK]
        splits = [s for s in splits if _statistic(weekly, s) > CRITICAL]
    levels = _levels(window, baseline, splits)
    if levels is None:
        return None
    # a change under MIN_RATIO either way is dropped, and the levels read again without it
    splits = [s for s, before, after in zip(splits, levels, levels[1:])
              if max(after / before, before / after) >= MIN_RATIO]
    levels = _levels(window, baseline, splits)
    if not splits or levels is None:
        return None
    return LevelShifts(tuple(start + s for s in splits), tuple(levels[-1] / level for level in levels[:-1]))


def _levels(window: np.ndarray, baseline: np.ndarray, splits: list[int]) -> list[float] | None:
    """Each segment's level: its demand over its baseline's; None when one is not a ratio (no demand)."""
    bounds = [0, *splits, len(window)]
    levels = []
    for lo, hi in zip(bounds, bounds[1:]):
        demand, expected = window[lo:hi].sum(), baseline[lo:hi].sum()
        if demand <= 0 or expected <= 0:
            return None
        levels.append(demand / expected)
    return levels


def _splits(x: np.ndarray, lo: int, hi: int, min_hours: int) -> list[int]:
    """Binary segmentation of x[lo:hi]: where the CUSUM test finds a change, and the changes either side of it."""
    at = change_point(x[lo:hi], min_hours)
    if at is None:
        return []
    return [*_splits(x, lo, lo + at, min_hours), lo + at, *_splits(x, lo + at, hi, min_hours)]


def change_point(x: np.ndarray, min_hours: int = MIN_HOURS) -> int | None:
    """The first position after a change in x's mean, by the OLS-CUSUM test at level ALPHA, with at least
    `min_hours` on both sides; None when the test does not reject one constant mean."""
    n = len(x)
    if n < 2 * min_hours:
        return None
    centred = x - x.mean()
    bridge = np.abs(np.cumsum(centred))[min_hours - 1:n - min_hours]  # partial sums S_k, k = min_hours .. n - min_hours
    if not bridge.size:
        return None
    k = int(np.argmax(bridge)) + min_hours
    if _statistic(x, k) <= CRITICAL:
        return None
    return k if DRIFT_EVIDENCE is None or step_over_drift(x, k, min_hours) > DRIFT_EVIDENCE else None


def step_over_drift(x: np.ndarray, k: int, min_hours: int = MIN_HOURS) -> float:
    """How much better (in BIC) a step before position k explains x than the better of a linear trend and a
    continuous broken line with its knot `min_hours` or more from either end: positive where the step does."""
    n = len(x)
    t = np.arange(n, dtype=float)
    floor = 1e-12 * (float(x @ x) + 1)  # a noiseless fit: its log stays finite

    def bic(rss: float, parameters: int) -> float:
        return n * np.log(max(rss, floor) / n) + parameters * np.log(n)

    step = float(np.sum((x[:k] - x[:k].mean()) ** 2) + np.sum((x[k:] - x[k:].mean()) ** 2))
    trend = _rss(np.column_stack([np.ones(n), t]), x)
    broken = min(_rss(np.column_stack([np.ones(n), t, np.maximum(t - knot, 0)]), x)
                 for knot in range(min_hours, n - min_hours + 1))
    return min(bic(trend, 2), bic(broken, 4)) - bic(step, 3)


def _rss(design: np.ndarray, x: np.ndarray) -> float:
    """The residual sum of squares of x's least-squares fit on the columns of `design`."""
    fitted = design @ np.linalg.lstsq(design, x, rcond=None)[0]
    return float(np.sum((x - fitted) ** 2))


def _statistic(x: np.ndarray, k: int) -> float:
    """The CUSUM statistic of a change in x's mean before position k: |S_k - k/n S_n| over the long-run standard
    deviation of the residuals around the means either side of k, times sqrt(n)."""
    n = len(x)
    bridge = abs(float(np.sum(x[:k] - x.mean())))
    spread = long_run_variance(np.concatenate([x[:k] - x[:k].mean(), x[k:] - x[k:].mean()]), min(DAY, n // 4))
    if spread <= 0:  # noiseless: any change is real
        return np.inf if bridge > 1e-9 * (np.abs(x).max() + 1) * n else 0.0
    return bridge / np.sqrt(spread * n)


def long_run_variance(residuals: np.ndarray, bandwidth: int = DAY) -> float:
    """Bartlett (Newey-West) estimate of the long-run variance of mean-zero `residuals`."""
    n = len(residuals)
    total = float(residuals @ residuals) / n
    for lag in range(1, min(bandwidth, n - 1) + 1):
        total += 2 * (1 - lag / (bandwidth + 1)) * float(residuals[lag:] @ residuals[:-lag]) / n
    return total
