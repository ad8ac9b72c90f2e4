"""Conformal quantiles from rolling-origin backtest residuals.

A model's own intervals are rough guesses. Here we refit it at a few origins
inside the history (each fit sees only data before its origin), collect the
errors actual - point of the next `horizon` hours, and use their empirical
quantiles as offsets around the final point forecast.

The errors stay in demand units, and how wide a band is at each hour comes
from the hours like it, not from a formula: Mondrian (group-wise) conformal,
Vovk et al. 2005, with the hours split at the path's median point forecast into
the busier and the quieter half. The busy hours' offsets come from the busy
hours' errors, and no error is rescaled to another hour or another fold: every
offset is an error the history has shown. Rescaling is what made issue 2's
bands 10-20x the history's peak on a short, zero-heavy history (errors over the
point plus a fifth of the week's mean, so a miss at a near-zero hour was
multiplied by the peak's level); growth and drift are left to the recency
weights and the adaptive levels below.

A history shorter than eight days has fewer than MIN_CALIBRATION_FOLDS honest
daily folds. Its bands come from more origins instead: the fitted model refit every
REFIT_STEP hours from the first day on (`refit_errors`), its errors over whole
horizons, each origin a split-conformal unit. The hours are grouped by one
threshold, the median of all the refits' points, so a flat path (the last value
held) takes the errors of the hours at its level, not the quiet half's.
INTERVALS is the interval model the forecast bench's rule picked among its
candidates (bench/forecast_bench.py `_interval_models`, docs/bench-forecast.md).

Demand drifts (launches, quiet weeks), so older folds count less: each fold's
residuals weigh 0.5 ** (age / HALF_LIFE) (two weeks) in a weighted quantile
(the weighted split conformal of Barber et al., 2023, for non-exchangeable data).

The quantile level itself adapts too (adaptive conformal inference, Gibbs &
Candès 2021): replaying the folds oldest first, each fold's residuals are
checked against the quantiles of the folds before it, and every level moves by
ACI_GAMMA x (nominal - observed fraction below). Calm recent days narrow the
intervals, recent misses widen them, and on a stationary series the offset
stays near zero. Each level adapts on its own, so two can cross; the levels
adapt on a fixed grid of levels instead of the quantiles asked, are sorted
there (a monotone rearrangement), and an asked quantile reads its level off the
grid (`monotone_levels`): its value is the same whichever others are asked.

The median is the point forecast, and its error is a level error that persists
for days, not weeks: it is scaled by 1 + the recent mean residual relative to
the point plus a fifth of the week's mean (`scaled_residuals`; folds weigh
0.5 ** (age / BIAS_HALF_LIFE), two days; the top and bottom BIAS_TRIM of the
weight trimmed so one burst does not move the next day). A mean, not the
median: on traces with near-zero nights half the residuals are ~0 whatever the
daytime error, so their median says nothing. Scaling, not adding, keeps a
zero night at zero. The bounds keep their conformal quantiles, which coverage
needs weeks of residuals for.
"""
from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import NamedTuple, Self

import numpy as np
import pandas as pd

from forecast.base import Forecaster, future_index, quantile_frame
from forecast.metrics import seasonal_scale
from forecast.models import PointModel

DAY, WEEK = 24, 168
# Fewer hours with data: no forecast (the planner's conservative fallback; the CLI refuses): the quantiles come
# from day-over-day errors, and under two days there are none (q0.5 = q0.99).
MIN_FIT_HOURS = 2 * DAY
HALF_LIFE = 2 * WEEK  # hours: a fold two weekly cycles older than the newest counts half
# Step of the ACI level update per fold (Gibbs & Candès' gamma). Folds are few (7-28), so the step is large: one
# fully missed 95% quantile moves it by 0.19. Picked by the bench's rule from 0, 0.1 and 0.2 on its choose-on part
# (docs/bench-forecast.md; 0.1 until round 3, where 0.2 put two more choose-on coverages within +-5 points); one
# setting for every series.
ACI_GAMMA = 0.2
# The median's level correction: half-life and trimmed weight per tail, one setting for every series. Chosen on the
# three traces and M4, where any 24-48 h half-life with 10-25 % trimming or clipping ranked the same against the
# peers (docs/bench-forecast.md says how).
BIAS_HALF_LIFE = 2 * DAY
BIAS_TRIM = 0.1
# Split conformal at the fold level can put the 90 % bound (the planner's target quantile) below the largest error
# seen only from five folds on (split_levels(0.9, n) < 1 needs n >= 5). With fewer, one surprise would set every
# hour's band; the bands then come from refits at more origins (`refit_errors`).
MIN_CALIBRATION_FOLDS = 5
# Hours between the refits' origins on a short history: four a day. Picked by the bench's rule from 6, 12 and 24 on
# its choose-on part (docs/bench-forecast.md; 12 until round 3, where 6 and 12 tied on coverage and 6 had the lower
# loss, by 0.05 %).
REFIT_STEP = 6
# The levels adapt on this grid, whatever quantiles are asked (`monotone_levels`). Every hundredth: the planner's and
# the bench's quantiles (0.05, 0.1, 0.9, 0.95, 0.99) are on it, and i / 100 is the same float as the literal.
LEVEL_GRID = np.arange(101) / 100


class IntervalModel(NamedTuple):
    scale: str          # an error's unit: "level" (point + a fifth of the week's mean), "point+mase" (point + the MASE
                        # scale of the fold's window), "mase" (that MASE scale) or "raw" (none: demand units)
    groups: int         # Mondrian groups of hours: 1, or 2 (the quieter and the busier half of the path)
    min_folds: int      # fewer honest folds: `fallback` instead of conformal
    fallback: str = "refit"          # "refit" (`refit_errors`), "changes" (`seasonal_change_values`) or "own" (the
                                     # model's own intervals, and only without any fold)
    refit_step: int = REFIT_STEP     # hours between the refits' origins
    aci_gamma: float = ACI_GAMMA     # step of the adaptive levels (`aci_levels`); 0: split conformal alone


INTERVALS = IntervalModel("raw", 2, MIN_CALIBRATION_FOLDS)  # the bench protocol's pick (docs/bench-forecast.md)


def origins(n: int, horizon: int, folds: int, step: int, min_train: int = MIN_FIT_HOURS) -> list[int]:
    """The last `folds` origins `step` apart (oldest first) that leave `horizon` points to score."""
    last = n - horizon
    return [o for o in (last - step * k for k in range(folds - 1, -1, -1)) if o >= min_train]


def level(history: np.ndarray) -> float:
    """Demand's level: the mean of the last week's known values (1.0 for an all-zero or empty window), which residuals
    are scaled by and the global model divides its windows by."""
    recent = history[-WEEK:]
    recent = recent[np.isfinite(recent)]
    value = float(recent.mean()) if len(recent) else 0.0
    return value if value > 0 else 1.0


def mase_scale(history: np.ndarray) -> float:
    """The unit of an error: the MASE scale of the window (its `level` where demand never moved)."""
    scale = seasonal_scale(history, DAY)
    return scale if np.isfinite(scale) else level(history)


def fold_points(make: Callable[[], Forecaster], history: pd.Series, fold_origins: Sequence[int],
                horizon: int) -> np.ndarray:
    """Point paths (rows = origins) of a model fitted on history before each origin; from one pass where the
    model can (its `fold_paths`)."""
    model = make()
    one_pass = getattr(model, "fold_paths", None)
    if one_pass is not None:
        return one_pass(history.to_numpy(dtype=float), fold_origins, horizon)
    paths = [point_forecast(make, history, o, horizon) for o in fold_origins]
    return np.array(paths).reshape(len(fold_origins), horizon)


def point_forecast(make: Callable[[], Forecaster], history: pd.Series, origin: int, horizon: int) -> np.ndarray:
    """Point path of a model fitted on history before `origin`."""
    model = make()
    if isinstance(model, PointModel) and not model.calendar:  # no Series slicing, no quantile frames: folds run often
        return model.fit_values(history.to_numpy(dtype=float)[:origin]).point(horizon)
    return model.fit(history.iloc[:origin]).predict(horizon, [0.5]).to_numpy()[:, 0]


def scaled_residuals(history: pd.Series, points: np.ndarray, fold_origins: Sequence[int]) -> np.ndarray:
    """The median's residuals: (actual - point) / (point + a fifth of the week's mean) per fold and step; NaN where
    the actual is missing."""
    values = history.to_numpy(dtype=float)
    horizon = points.shape[1] if points.ndim == 2 else 0
    return np.array([(values[o:o + horizon] - p) / _error_scale(p, values[:o], "level")
                     for o, p in zip(fold_origins, points)])


def interval_scores(history: np.ndarray, points: np.ndarray, fold_origins: Sequence[int],
                    intervals: IntervalModel = INTERVALS) -> tuple[np.ndarray, np.ndarray]:
    """Conformity scores per fold and step (the scaled error; NaN where the actual or the fold's point is missing)
    and the Mondrian group of each (see `hour_groups`)."""
    scale, groups = intervals.scale, intervals.groups
    horizon = points.shape[1] if points.ndim == 2 else 0
    scores = np.array([(history[o:o + horizon] - p) / _error_scale(p, history[:o], scale)
                       for o, p in zip(fold_origins, points)]).reshape(len(fold_origins), horizon)
    return scores, np.array([hour_groups(p, groups) for p in points], dtype=int).reshape(scores.shape)


def scored_folds(scores: np.ndarray) -> int:
    """Folds with at least one score (the first never has one: no earlier fold to select on)."""
    return int(np.isfinite(np.atleast_2d(scores)).any(axis=1).sum())


def hour_groups(point: np.ndarray, groups: int, threshold: float | None = None) -> np.ndarray:
    """Group of each hour: 1 where its point is above `threshold` (None: the path's median; the busier half), else
    0; all 0 for one group. By value, not rank: hours forecast alike (a run of zero nights) share a group."""
    point = np.nan_to_num(point, nan=0.0)
    if groups != 2 or not point.size:
        return np.zeros(point.shape, dtype=int)
    return (point > (np.median(point) if threshold is None else threshold)).astype(int)


def _error_scale(point: np.ndarray, history: np.ndarray, scale: str) -> np.ndarray:
    if scale == "level":  # demand errs in proportion to its level; the floor keeps near-zero hours from blowing up
        return np.clip(point, 0.0, None) + 0.2 * level(history)
    if scale == "raw":
        return np.ones(len(point))
    unit = mase_scale(history)
    return np.clip(point, 0.0, None) + unit if scale == "point+mase" else np.full(len(point), unit)


def fold_weights(fold_origins: Sequence[int] | np.ndarray, half_life: float = HALF_LIFE) -> np.ndarray:
    """Weight of each calibration fold: 1 for the newest, halving every `half_life` hours of age."""
    fold_origins = np.asarray(fold_origins, dtype=float)
    return 0.5 ** ((fold_origins.max() - fold_origins) / half_life) if len(fold_origins) else fold_origins


def weighted_quantile(values: np.ndarray, weights: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """Quantiles of a weighted sample (linear between the weighted mid-ranks)."""
    order = np.argsort(values)
    values, weights = values[order], weights[order]
    ranks = (np.cumsum(weights) - weights / 2) / weights.sum()
    return np.interp(levels, ranks, values)


def split_levels(quantiles: Sequence[float] | np.ndarray, folds: int) -> np.ndarray:
    """Split-conformal levels: each tail widened by (n+1)/n, with n the number of folds.

    Errors within a fold move together, so a fold, not an hour, is the exchangeable unit.
    """
    return 0.5 + (np.asarray(quantiles, dtype=float) - 0.5) * (folds + 1) / max(folds, 1)


def group_quantiles(scores: np.ndarray, groups: np.ndarray, weights: np.ndarray, levels: np.ndarray,
                    group_count: int) -> np.ndarray:
    """Weighted quantiles of the finite scores of each group (rows = groups); a group without scores takes all's.

    `weights` has one weight per fold (row of `scores`)."""
    finite = np.isfinite(scores)
    per_value = np.broadcast_to(np.asarray(weights, dtype=float)[:, None], scores.shape)
    pooled = weighted_quantile(scores[finite], per_value[finite], levels)
    out = np.empty((group_count, len(levels)))
    for g in range(group_count):
        mine = finite & (groups == g)
        out[g] = weighted_quantile(scores[mine], per_value[mine], levels) if mine.any() else pooled
    return out


def aci_levels(residuals: np.ndarray, fold_origins: Sequence[int] | np.ndarray, quantiles: Sequence[float] | np.ndarray,
               gamma: float = ACI_GAMMA, groups: np.ndarray | None = None) -> np.ndarray:
    """Quantile levels after adaptive conformal inference over the folds (rows of `residuals`, oldest first).

    Fold j is scored against the weighted quantiles of folds < j (of its own group of hours, `groups`: None, one
    group) at the current levels; each level then moves by gamma x (nominal - fraction of fold j's residuals below
    its quantile). The result is the split-conformal level for all folds plus that learned offset (it may leave
    [0, 1]; callers clip). The median keeps its split level: it is not a coverage bound (calibrated_predict
    replaces it by level_correction), and adapting it chased noise (worse MASE over nasa's 55 daily folds and on M4
    hourly).
    """
    quantiles = np.asarray(quantiles, dtype=float)
    fold_origins = np.asarray(fold_origins)
    residuals = np.atleast_2d(residuals)  # a history too short for any fold gives an empty 1-d array
    groups = np.zeros(residuals.shape, dtype=int) if groups is None else np.atleast_2d(groups)
    group_count = int(groups.max()) + 1 if groups.size else 1
    finite = np.isfinite(residuals)
    offset = np.zeros(len(quantiles))
    for j in range(2, len(residuals)):  # two earlier folds before a quantile is worth checking
        earlier, new = finite[:j], finite[j]
        if not new.any() or not earlier.any():
            continue
        levels = split_levels(quantiles, scored_folds(residuals[:j])) + offset
        bounds = group_quantiles(residuals[:j], groups[:j], fold_weights(fold_origins[:j]), np.clip(levels, 0.0, 1.0),
                                 group_count)[groups[j][new]]
        offset += gamma * (quantiles - (residuals[j][new][:, None] <= bounds).mean(axis=0))
    offset[quantiles == 0.5] = 0.0
    return split_levels(quantiles, scored_folds(residuals)) + offset


def monotone_levels(residuals: np.ndarray, fold_origins: Sequence[int] | np.ndarray,
                    quantiles: Sequence[float] | np.ndarray, gamma: float = ACI_GAMMA,
                    groups: np.ndarray | None = None) -> np.ndarray:
    """The adaptive levels of `quantiles`, read off LEVEL_GRID's: each grid level adapts on its own (`aci_levels`),
    the grid's levels are sorted (a monotone rearrangement, Chernozhukov et al. 2010), and an asked quantile takes the
    level linear between its grid neighbours'. So a level depends on the folds and q alone, never on which other
    quantiles are asked, and does not fall as q rises: two quantiles' own adaptive levels can cross, and sorting the
    values among the quantiles asked made q0.05 alone differ from q0.05 asked with q0.1. Where no levels cross, a
    quantile on the grid keeps its own adaptive level. Levels, not each hour's values, are rearranged: an hour's value
    rises with its level, so one sort per forecast gives the bands sorting every hour's values over the grid would."""
    grid_levels = np.sort(aci_levels(residuals, fold_origins, LEVEL_GRID, gamma, groups))
    return np.interp(np.asarray(quantiles, dtype=float), LEVEL_GRID, grid_levels)


def level_correction(residuals: np.ndarray, fold_origins: Sequence[int]) -> float:
    """Recent trimmed mean of the scaled residuals (rows = folds, oldest first): the median is point x (1 + it).

    Above -1, as every scaled residual is: (actual - point) / (point + a floor) > -1 for actual >= 0."""
    finite = np.isfinite(residuals)
    if not finite.any():
        return 0.0
    weights = np.broadcast_to(fold_weights(fold_origins, BIAS_HALF_LIFE)[:, None], residuals.shape)[finite]
    values = residuals[finite]
    low, high = weighted_quantile(values, weights, np.array([BIAS_TRIM, 1.0 - BIAS_TRIM]))
    kept = (values >= low) & (values <= high)
    return float(np.average(values[kept], weights=weights[kept]))


def conformal_values(point: np.ndarray, scores: np.ndarray, groups: np.ndarray, history: np.ndarray,
                     quantiles: Sequence[float], weights: np.ndarray | None = None,
                     levels: np.ndarray | None = None, intervals: IntervalModel = INTERVALS,
                     threshold: float | None = None) -> np.ndarray:
    """Point plus the weighted score quantiles of each hour's group, times the hour's error scale; one column per
    quantile.

    `scores` and `groups` as `interval_scores` gives them (one row per calibration fold); `weights` one weight per
    fold (None: all equal); `levels` the quantile level to read for each quantile (None: the split-conformal levels);
    `threshold` the busier hours' (`hour_groups`).
    """
    weights = np.ones(len(scores)) if weights is None else np.asarray(weights, dtype=float)
    finite = np.isfinite(scores)
    if not finite.any():
        return np.repeat(point[:, None], len(quantiles), axis=1)
    if levels is None:
        levels = split_levels(quantiles, scored_folds(scores))
    offsets = group_quantiles(scores, groups, weights, np.clip(levels, 0.0, 1.0), intervals.groups)
    return (point[:, None] + _error_scale(point, history, intervals.scale)[:, None]
            * offsets[hour_groups(point, intervals.groups, threshold)])


def refit_errors(model, history: pd.Series, horizon: int, step: int) -> tuple[np.ndarray, np.ndarray]:
    """The fitted model refit at origins `step` hours apart from the first day on, each on the data before it: its
    point paths and errors actual - point over whole horizons (rows = origins, oldest first; NaN where the actual is
    missing). The model was picked on these hours, so the errors are a little optimistic; a week has too few daily
    folds to replay the pick (AutoForecaster's honest residuals) at each."""
    values = history.to_numpy(dtype=float)
    fold_origins = refit_origins(len(values), horizon, step)
    make = lambda: copy.deepcopy(model)  # noqa: E731 - fit replaces a copy's state, the fitted model stays as it is
    points = fold_points(make, history, fold_origins, horizon)
    actuals = np.array([values[o:o + horizon] for o in fold_origins]).reshape(points.shape)
    return points, actuals - points


def refit_origins(n: int, horizon: int, step: int = REFIT_STEP) -> range:
    """The origins of `refit_errors` on `n` hours: from the first day on, each with a whole horizon after it."""
    return range(DAY, n - horizon + 1, step)


def refit_values(point: np.ndarray, points: np.ndarray, errors: np.ndarray, quantiles: Sequence[float],
                 groups: int) -> np.ndarray | None:
    """Point plus the split-conformal quantiles of `refit_errors` (each origin a unit) in the hour's group, the
    groups split at one threshold, the median of all the refits' points; None without a finite error."""
    finite = np.isfinite(errors)
    if not finite.any():
        return None
    threshold = float(np.median(points[finite]))
    levels = np.clip(split_levels(quantiles, int(finite.any(axis=1).sum())), 0.0, 1.0)
    offsets = group_quantiles(errors, hour_groups(points, groups, threshold), np.ones(len(errors)), levels, groups)
    return point[:, None] + offsets[hour_groups(point, groups, threshold)]


def seasonal_change_values(point: np.ndarray, history: np.ndarray, quantiles: Sequence[float],
                           groups: int, threshold: float | None = None) -> np.ndarray:
    """Point plus the split-conformal quantiles of the history's day-over-day changes y[t] - y[t - 24] (the errors
    seasonal naive made in the history), each hour an exchangeable unit, grouped as `hour_groups` groups the path
    (by y[t - 24], the point seasonal naive had). Every offset is a change the history has shown."""
    before, after = history[:-DAY], history[DAY:]
    real = np.isfinite(before) & np.isfinite(after)
    changes, before = (after - before)[real], before[real]
    if not len(changes):
        return np.repeat(point[:, None], len(quantiles), axis=1)
    offsets = group_quantiles(changes[None, :], hour_groups(before, groups)[None, :], np.ones(1),
                              np.clip(split_levels(quantiles, len(changes)), 0.0, 1.0), groups)
    return point[:, None] + offsets[hour_groups(point, groups, threshold)]


class Calibrated:
    """Any model with conformal quantiles from `folds` inner rolling origins `step` hours apart."""

    def __init__(self, model: Forecaster, horizon: int = DAY, folds: int = 7, step: int = DAY):
        self.model, self.horizon, self.folds, self.step = model, horizon, folds, step
        self.name = f"cal({model.name})"

    def fit(self, history: pd.Series) -> Self:
        make = lambda: copy.deepcopy(self.model)  # noqa: E731 - a fresh unfitted copy per fold
        fold_origins = origins(len(history), self.horizon, self.folds, self.step)
        self.points_ = fold_points(make, history, fold_origins, self.horizon)
        self.residuals_ = scaled_residuals(history, self.points_, fold_origins)
        self.origins_ = fold_origins
        self.history_ = history
        self.fitted_ = make().fit(history)
        return self

    @property
    def fallback_reason(self) -> str | None:
        """Why the model's fit, or its last forecast, fell back to seasonal naive."""
        return getattr(self.fitted_, "fallback_reason", None)

    def predict(self, horizon: int, quantiles: Sequence[float]) -> pd.DataFrame:
        return calibrated_predict(self.fitted_, self.residuals_, self.history_, horizon, quantiles, self.origins_,
                                  self.points_)


def calibrated_predict(model, residuals: np.ndarray, history: pd.Series, horizon: int, quantiles: Sequence[float],
                       fold_origins: Sequence[int], fold_points: np.ndarray, level_correction: bool = True,
                       intervals: IntervalModel = INTERVALS) -> pd.DataFrame:
    """The fitted model's path with conformal quantiles from its backtest folds: `fold_points` (one point path per
    fold at `fold_origins`) give the interval scores, `residuals` (`scaled_residuals`) the median's recent level
    correction (`level_correction`); folds weigh by recency and the levels adapt (`monotone_levels`). With fewer than
    `intervals.min_folds` folds, `intervals.fallback` (module docstring).
    """
    has_folds = bool(np.isfinite(residuals).any())
    values = history.to_numpy(dtype=float)
    # The busier hours are those above the median of the path over the folds' horizon, and the short-history refits
    # run over that horizon too, whatever `horizon` is asked: an hour's quantiles do not depend on how many hours
    # are asked after it.
    reference = fold_points.shape[1] if fold_points.ndim == 2 and fold_points.shape[1] else horizon
    path = model.predict(max(horizon, reference), [0.5]).to_numpy()[:, 0]
    point, threshold = path[:horizon], float(np.median(np.nan_to_num(path[:reference], nan=0.0)))
    scores, groups = interval_scores(values, fold_points, fold_origins, intervals)
    out = None
    if has_folds and scored_folds(scores) >= intervals.min_folds:
        levels = monotone_levels(scores, fold_origins, quantiles, intervals.aci_gamma, groups)
        out = conformal_values(point, scores, groups, values, quantiles, fold_weights(fold_origins), levels, intervals,
                               threshold)
    elif intervals.fallback == "refit":
        out = refit_values(point, *refit_errors(model, history, reference, intervals.refit_step), quantiles,
                           intervals.groups)
    elif has_folds and intervals.fallback == "changes":
        out = seasonal_change_values(point, values, quantiles, intervals.groups, threshold)
    if out is None:  # too short to calibrate: the model's own intervals
        return model.predict(horizon, quantiles)
    correction = _level_correction(residuals, fold_origins) if level_correction else 0.0
    median = (point * (1 + correction))[:, None]
    # Bounds on the median's side of it are the median: a bound crossing it would be sorted into its place and
    # move the point forecast (a group's errors can all have one sign when folds are few).
    q = np.asarray(quantiles, dtype=float)[None, :]
    out = np.where(q < 0.5, np.minimum(out, median), np.where(q > 0.5, np.maximum(out, median), median))
    return quantile_frame(future_index(history, horizon), out, quantiles)


_level_correction = level_correction  # calibrated_predict's argument of the same name shadows it
