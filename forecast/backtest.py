"""Rolling-origin backtests and the automatic, per-series model selection.

Every fold fits on data strictly before its origin and scores the next
`horizon` hours where the actual is known. The automatic forecaster does its
own inner backtest on the data it is given, so evaluating it inside an outer
fold is honest: it never sees that fold's future.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Self

import numpy as np
import pandas as pd

from forecast.base import Forecaster, check_quantile_frame
from forecast.calibrate import DAY, calibrated_predict, fold_points, origins, scaled_residuals
from forecast.history import clip_outliers
from forecast.metrics import coverage, finite_or_none, mase, pinball, seasonal_scale, smape
from forecast.models import MODELS, Ensemble, combination_name, combine

# Cheap candidates (vectorised numpy, no optimiser) for thousands of series: issue 2's four seasonal ones plus the
# last value held (a drifting gauge without a daily cycle: issue 13). Picked with COMBINE, LEVEL_CORRECTION and
# MIN_SELECTION_FOLDS by bench/forecast_bench.py's protocol on its choose-on part (docs/bench-forecast.md); theta lost
# there, and with the grid-fitted Holt-Winters (hw) the pool lost on the held-out series (rounds 13-14).
FAST = ("snaive24", "snaive168", "profile", "profile24", "naive")
# statsmodels' ETS, MSTL and gradient boosting cost 0.5-10 s per fit (x folds): the backtest scores them, AutoForecaster
# considers them only when asked: MSTL with "full", ETS and gradient boosting when a list names them.
FULL = FAST + ("mstl",)
SCORED_QUANTILES = (0.05, 0.1, 0.5, 0.9, 0.95, 0.99)
# The planner's quantiles (ReservationPolicy q0.9 / q0.99): the share of actuals at or below each, per model,
# pooled over every scored hour. Calibrated means 0.9 and 0.99.
PLANNER_QUANTILES = (0.9, 0.99)


def below_key(quantile: float) -> str:
    """The metric of the share of actuals at or below a forecast's `quantile` (here and in MLflow's live history)."""
    return f"below_q{float(quantile)}"


POOLED = ("coverage_80", "coverage_90", *map(below_key, PLANNER_QUANTILES))
# How AutoForecaster turns inner-backtest scores into a forecast, and whether the median gets the recent level
# correction (forecast.calibrate.level_correction): chosen on the choose-on part only (docs/bench-forecast.md).
COMBINES = ("best", "best-or-mean", "median", "mean", "weighted")
COMBINE = "best-or-mean"
# True: always; False: never; an int n: only with at least n inner folds of residuals (a week's history has 1-4).
LEVEL_CORRECTION: bool | int = 7
# With k inner folds under MIN_SELECTION_FOLDS (a history under about nine days with 7) the pick weighs
# k / MIN_SELECTION_FOLDS and the candidates share the rest (`_select`): equally among those the best one did not beat
# on every one of k >= 2 folds ("shrink-unrefuted": such a candidate is no hedge for the pick, as the last value held
# on a daily cycle), equally among all ("shrink"), or by 1 / MASE^2 on the k folds ("shrink-inverse"); "mean": the
# pool's mean alone until then. 0: always pick, on however few folds there are (the pool's mean only with none).
# Picked by rounds 3-5 and 12 of the protocol; round 6's pick, with the synthetic held-out kinds among the choose-on
# units, lost on the real held-out series (docs/bench-forecast.md).
MIN_SELECTION_FOLDS = 7
WEAK_EVIDENCE = "shrink-unrefuted"
WEAK_EVIDENCE_RULES = ("shrink", "mean", "shrink-inverse", "shrink-unrefuted")
METRICS = ("mase", "smape", "pinball_50", "pinball_90", "pinball_95", "coverage_80", "coverage_90",
           *map(below_key, PLANNER_QUANTILES), "fit_seconds")


class _Pick(NamedTuple):
    name: str
    members: tuple[str, ...]
    how: str
    weights: np.ndarray | None
    points: np.ndarray  # its point path at every inner fold
    scores: dict[str, float]
    why: str | None = None  # why it is not the rule's pick alone (too few folds)


class AutoForecaster:
    """Picks the best candidate, or the mean of the top `top_k`, by an inner backtest; then calibrates.

    Selection and conformal residuals come from inner origins `step` hours
    apart, all inside the history given to `fit`: the last `folds` of them pick
    the model, all `calibration_folds` calibrate it. The residuals are those of
    the selection procedure itself: at each inner fold, the model it would have
    chosen on the `folds` folds before (the winner on all folds errs less on
    them than on new data, so its own residuals would make intervals too narrow).

    `combine` is the selection rule (see `_select`); `level_correction` whether the median gets
    calibrate.level_correction (an int: only with that many inner folds of residuals; a week's history has
    1-4, too few to estimate a level error: with them the correction cost 10 % on one-week series). With fewer
    than `min_selection_folds` inner folds the pick is shrunk towards the mean of every candidate
    (`weak_evidence`, see MIN_SELECTION_FOLDS).
    """

    def __init__(self, candidates: Sequence[str] | str = "fast", horizon: int = DAY, folds: int = 14,
                 step: int = DAY, top_k: int = 3, calibration_folds: int = 28, combine: str = COMBINE,
                 level_correction: bool | int = LEVEL_CORRECTION, min_selection_folds: int = MIN_SELECTION_FOLDS,
                 weak_evidence: str = WEAK_EVIDENCE):
        self.candidates = {"fast": FAST, "full": FULL}[candidates] if isinstance(candidates, str) else tuple(candidates)
        self.horizon, self.folds, self.step, self.top_k = horizon, folds, step, top_k
        if combine not in COMBINES:
            raise ValueError(f"combine must be one of {COMBINES}, not {combine!r}")
        self.combine, self.level_correction = combine, level_correction
        if weak_evidence not in WEAK_EVIDENCE_RULES:
            raise ValueError(f"weak_evidence must be one of {WEAK_EVIDENCE_RULES}, not {weak_evidence!r}")
        self.min_selection_folds, self.weak_evidence = min_selection_folds, weak_evidence
        # Intervals need more residuals than selection needs scores: four weeks of daily origins (older ones
        # weigh little: calibrate.HALF_LIFE), while the model is picked on the last `folds` only.
        self.calibration_folds = max(calibration_folds, folds)
        self.name = "auto"

    def fit(self, history: pd.Series) -> Self:
        values = history.to_numpy(dtype=float)
        fold_origins = origins(len(history), self.horizon, self.calibration_folds, self.step)
        points = {c: fold_points(MODELS[c], history, fold_origins, self.horizon) for c in self.candidates}
        actuals = np.array([values[o:o + self.horizon] for o in fold_origins]).reshape(len(fold_origins), self.horizon)
        scales = np.array([seasonal_scale(values[:o], DAY) for o in fold_origins])
        # errors[c][j]: MASE of candidate c at inner fold j
        errors = {c: _fold_mase(actuals, p, scales) for c, p in points.items()}
        everything = np.arange(len(fold_origins))
        window = lambda j: everything[max(j - self.folds, 0):j]  # noqa: E731 - selection sees the last `folds`
        pick = self._select(points, errors, actuals, scales, window(len(everything)))
        self.chosen, self.scores_, self.why_chosen = pick.name, pick.scores, pick.why
        self.model_ = (Ensemble(pick.members, pick.how, pick.weights) if len(pick.members) > 1
                       else MODELS[pick.members[0]]())
        self.model_.fit(history)
        honest = np.full((len(fold_origins), self.horizon), np.nan)
        for j in range(1, len(fold_origins)):
            honest[j] = self._select(points, errors, actuals, scales, window(j)).points[j]
        self.points_ = honest  # each inner fold's point path: the interval scores
        self.residuals_ = scaled_residuals(history, honest, fold_origins)
        self.origins_ = fold_origins
        self.history_ = history
        self.name = f"auto({self.chosen})"
        return self

    def _select(self, points, errors, actuals, scales, folds) -> _Pick:
        """The rule `combine` on inner `folds` (`_rank`); with fewer folds than `min_selection_folds` (or than a
        shorter selection window `folds`, which is honoured), that pick weighs k / that many and the candidates share
        the rest as `weak_evidence` says (MIN_SELECTION_FOLDS; a median pick counts as its members' mean), or the
        pool's mean alone ("mean")."""
        enough = max(min(self.min_selection_folds, self.folds), 1)
        if len(folds) >= enough:
            return self._rank(points, errors, actuals, scales, folds)
        members = tuple(self.candidates)
        share = len(folds) / enough if self.weak_evidence != "mean" else 0.0
        weights = np.full(len(members), (1.0 - share) / len(members))
        scores: dict[str, float] = {}
        if share:
            pick = self._rank(points, errors, actuals, scales, folds)
            if self.weak_evidence == "shrink-inverse":
                weights = (1.0 - share) * inverse_square_weights(np.array([pick.scores[c] for c in members]))
            elif self.weak_evidence == "shrink-unrefuted" and len(folds) >= 2:
                # a candidate worse than the best one on every fold is no hedge for the pick: no share of the rest
                best = min(members, key=lambda c: pick.scores[c])
                kept = np.array([c == best or not np.all(errors[c][folds] > errors[best][folds]) for c in members])
                weights = np.where(kept, (1.0 - share) / kept.sum(), 0.0)
            own = pick.weights if pick.weights is not None else np.full(len(pick.members), 1.0 / len(pick.members))
            for member, weight in zip(pick.members, own):
                weights[members.index(member)] += share * weight
            scores = pick.scores
        rest = {"shrink": "every candidate an equal share",
                "shrink-unrefuted": "every candidate not worse than the best on each of them an equal share",
                "shrink-inverse": "every candidate a share by 1 / its MASE squared on them"}.get(self.weak_evidence)
        why = (f"{len(folds)} inner fold(s), under the {enough} a pick needs: "
               + (f"the pick weighs {len(folds)}/{enough}, {rest} of the rest" if share
                  else "the mean of every candidate"))
        # a candidate with no weight is not in the pick: not in its name, not fitted, no fallback of its said
        members, weights = tuple(m for m, w in zip(members, weights) if w > 0), weights[weights > 0]
        if len(members) == 1:
            return _Pick(members[0], members, "mean", None, points[members[0]], scores, why)
        how = "weighted" if share else "mean"
        return _Pick(combination_name(members, how), members, how, weights if share else None,
                     combine(np.array([points[c] for c in members]), "weighted", weights), scores, why)

    def _rank(self, points, errors, actuals, scales, folds) -> _Pick:
        """The rule `combine` applied to the candidates' mean MASE on inner `folds`.

        "best": the best candidate; "best-or-mean": it or the mean of the top `top_k`, whichever scored better
        on the same folds; "median" / "mean" / "weighted": that combination of the top `top_k` (weights
        1 / mean MASE), whatever the scores.
        """
        scores = dict(zip(errors, _mean_finite(np.array([errors[c][folds] for c in errors]))))
        ranked = sorted(self.candidates, key=lambda c: scores[c])
        top = tuple(ranked[:self.top_k])
        best = _Pick(ranked[0], (ranked[0],), "mean", None, points[ranked[0]], scores)
        if len(top) < 2 or self.combine == "best":
            return best
        stacked = np.array([points[c] for c in top])
        if self.combine == "best-or-mean":
            mean = combine(stacked, "mean")
            name = combination_name(top, "mean")
            scores[name] = float(_mean_finite(_fold_mase(actuals[folds], mean[folds], scales[folds])[None, :])[0])
            return _Pick(name, top, "mean", None, mean, scores) if scores[name] < scores[best.name] else best
        weights = None
        if self.combine == "weighted":
            inverse = np.array([1.0 / scores[c] if np.isfinite(scores[c]) and scores[c] > 0 else 0.0 for c in top])
            weights = inverse / inverse.sum() if inverse.sum() > 0 else np.full(len(top), 1.0 / len(top))
        return _Pick(combination_name(top, self.combine), top, self.combine, weights,
                     combine(stacked, self.combine, weights), scores)

    @property
    def fallback_reason(self) -> str | None:
        """Why the picked model's fit, or its last forecast, fell back to seasonal naive."""
        return getattr(self.model_, "fallback_reason", None)

    def predict(self, horizon: int, quantiles: Sequence[float]) -> pd.DataFrame:
        return calibrated_predict(self.model_, self.residuals_, self.history_, horizon, quantiles, self.origins_,
                                  self.points_, level_correction=self._corrects())

    def _corrects(self) -> bool:
        """Whether the median gets the recent level correction: `level_correction`, an int being the least number
        of inner folds with residuals it needs."""
        if isinstance(self.level_correction, bool):
            return self.level_correction
        return int(np.isfinite(np.atleast_2d(self.residuals_)).any(axis=1).sum()) >= self.level_correction


def inverse_square_weights(scores: np.ndarray) -> np.ndarray:
    """Weights in proportion to 1 / score^2 (Bates & Granger 1969: inverse error variance), summing to 1. A score of 0
    (a perfect candidate) takes everything, shared among equals; no finite score: equal weights."""
    real = np.isfinite(scores)
    if not real.any():
        return np.full(len(scores), 1.0 / len(scores))
    perfect = real & (scores <= 0)
    if perfect.any():
        return perfect / perfect.sum()
    # relative to the best score, so the best's is 1 and a tiny score cannot overflow
    inverse = np.where(real, (scores[real].min() / np.where(real, scores, 1.0)) ** 2, 0.0)
    return inverse / inverse.sum()


def _fold_mase(actuals: np.ndarray, points: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """forecast.metrics.mase per fold (row), vectorised: the honest residuals rescore ensembles ~100 times a fit."""
    real = np.isfinite(actuals)
    total = np.where(real, np.abs(actuals - points), 0.0).sum(axis=1)
    count = real.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1) / scales, np.nan)


def _mean_finite(errors: np.ndarray) -> np.ndarray:
    """Mean of each row's finite values (inf for a row with none: it never wins)."""
    real = np.isfinite(errors)
    count = real.sum(axis=1)
    return np.where(count > 0, np.where(real, errors, 0.0).sum(axis=1) / np.maximum(count, 1), np.inf)


@dataclass
class BacktestResult:
    history: str
    horizon: int
    folds: int
    selected: str
    models: dict[str, dict[str, float]]
    per_fold: list[dict] = field(default_factory=list)  # one row per (model, origin), the metrics of that fold
    selected_why: str | None = None  # why `selected` is not a pick (AutoForecaster.why_chosen); not in the JSON
    notes: list[str] = field(default_factory=list)  # why a score is null, which model fell back in which folds

    def to_json(self) -> dict:
        return {"history": self.history, "horizon": self.horizon, "folds": self.folds, "selected": self.selected,
                "models": {m: {k: finite_or_none(v) for k, v in metrics.items()} for m, metrics in self.models.items()},
                "notes": self.notes}


def score_fold(actual: np.ndarray, frame: pd.DataFrame, scale: float,
               target_quantile: float | None = None) -> dict[str, float]:
    """One fold's metrics of a quantile frame; with `target_quantile`, also its pinball loss (a training objective)."""
    q = {round(float(c), 6): frame[c].to_numpy() for c in frame.columns}
    out = {"mase": mase(actual, q[0.5], scale), "smape": smape(actual, q[0.5]),
           "pinball_50": pinball(actual, q[0.5], 0.5, scale), "pinball_90": pinball(actual, q[0.9], 0.9, scale),
           "pinball_95": pinball(actual, q[0.95], 0.95, scale),
           "coverage_80": coverage(actual, q[0.1], q[0.9]), "coverage_90": coverage(actual, q[0.05], q[0.95]),
           **{below_key(p): share_below(actual, q[p]) for p in PLANNER_QUANTILES if p in q}}
    if target_quantile is not None:
        out.setdefault(pinball_key(target_quantile),
                       pinball(actual, q[round(float(target_quantile), 6)], target_quantile, scale))
    return out


def pinball_key(quantile: float) -> str:
    """The metric of the pinball loss at `quantile`, in percent as asked: rounded to a whole percent, 0.905 was the
    key of q0.9's loss (kept by score_fold, so the objective was scored at 0.9) and 0.995 was pinball_100."""
    return f"pinball_{round(quantile * 100, 4):g}"


def clipped_before(history: pd.Series, origin: int, outlier_factor: float | None) -> pd.Series:
    """What a model fitted at `origin` fits (a fold's, or at the end the whole history's): the hours before it, their
    outliers clipped by a bound from those hours alone
    (`outlier_factor`; None: nothing clipped), as the controller cleans the hours it has at each refit; a bound from
    the whole history would have seen the fold's future (a spike after the origin raises it, and the fold fits hours
    less clipped)."""
    before = history.iloc[:origin]
    return before if outlier_factor is None else clip_outliers(before, outlier_factor)[0]


def score_folds(make: Callable[[], Forecaster], history: pd.Series, fold_origins: Sequence[int], horizon: int,
                quantiles: Sequence[float], target_quantile: float | None = None,
                progress: Callable[[int], None] | None = None, outlier_factor: float | None = None,
                actuals: pd.Series | None = None) -> list[dict]:
    """A model's metrics at each origin (one row per fold, oldest first): a fresh model fitted on the data before
    the origin (clipped_before: clipped by `outlier_factor` on those hours alone) predicts the next `horizon` points;
    scored where the actual is known, against `actuals` (default: `history`, the hours as read)."""
    values = (history if actuals is None else actuals).to_numpy(dtype=float)
    quantiles = sorted(set(map(float, quantiles)) | set(SCORED_QUANTILES)
                       | ({float(target_quantile)} if target_quantile is not None else set()))
    rows = []
    for i, origin in enumerate(fold_origins):
        started = time.perf_counter()
        model = make().fit(clipped_before(history, origin, outlier_factor))
        frame = model.predict(horizon, quantiles)
        seconds = time.perf_counter() - started
        check_quantile_frame(frame, horizon, quantiles)
        actual = values[origin:origin + horizon]
        rows.append({"fold": i, "origin": history.index[origin].isoformat(),
                     **score_fold(actual, frame, seasonal_scale(values[:origin], DAY), target_quantile),
                     "fit_seconds": seconds, "scored_points": int(np.isfinite(actual).sum()),
                     "fallback": getattr(model, "fallback_reason", None)})
        if progress:
            progress(i + 1)
    return rows


def summarize(rows: Sequence[dict]) -> dict[str, float]:
    """Mean of each metric over folds; coverage and the shares below the planner's quantiles pooled over every
    scored point instead (a fold with few real actuals weighs little)."""
    table = pd.DataFrame(list(rows))
    metrics = [k for k in table.columns if k not in ("fold", "origin", "scored_points", "fallback")]
    n = table["scored_points"].to_numpy()
    out = {m: float(np.nanmean(table[m])) if np.isfinite(table[m].to_numpy(dtype=float)).any() else float("nan")
           for m in metrics}
    for m in POOLED:
        if m in table:
            out[m] = float(np.nansum(table[m] * n) / n.sum()) if n.sum() else float("nan")
    return out


def share_below(actual: np.ndarray, bound: np.ndarray) -> float:
    """Share of the real actuals at or below `bound` (NaN when none is real)."""
    actual = np.asarray(actual, dtype=float)
    real = np.isfinite(actual)
    return float(np.mean(actual[real] <= np.asarray(bound, dtype=float)[real])) if real.any() else float("nan")


def backtest(history: pd.Series, horizon: int = DAY, folds: int = 14, step: int = DAY,
             models: Sequence[str] | None = None, quantiles: Sequence[float] = SCORED_QUANTILES,
             progress: Callable[..., None] | None = None, outlier_factor: float | None = None) -> BacktestResult:
    """Score each model, and the honest AutoForecaster (key "auto"), over `folds` rolling origins of `history` (the
    hours as read): each fold fitted on its hours before the origin, clipped by `outlier_factor` on those alone, and
    scored against the hours as read (score_folds); `selected` is auto's pick on the whole history, clipped so."""
    names = tuple(models or MODELS)
    fold_origins = origins(len(history), horizon, folds, step)
    makers: dict[str, Callable[[], Forecaster]] = {n: MODELS[n] for n in names}
    candidates = [n for n in names if n in FAST] or list(FAST)
    makers["auto"] = lambda: AutoForecaster(candidates=candidates, horizon=horizon)
    summary, per_fold, notes = {}, [], null_scores(history.to_numpy(dtype=float), fold_origins, horizon)
    for j, (name, make) in enumerate(makers.items()):
        tick = (lambda i, j=j, name=name: progress(j * len(fold_origins) + i, len(fold_origins) * len(makers), name)
                ) if progress else None
        rows = score_folds(make, history, fold_origins, horizon, quantiles, progress=tick,
                           outlier_factor=outlier_factor)
        summary[name] = {m: v for m, v in summarize(rows).items() if m in METRICS}
        per_fold += [{"model": name, **{k: v for k, v in r.items() if k not in ("fold", "scored_points")}}
                     for r in rows]
        if note := fallback_note(name, rows):
            notes.append(note)
    if note := unscored_note(history, fold_origins, horizon):
        notes.append(note)
    whole = clipped_before(history, len(history), outlier_factor)
    auto = AutoForecaster(candidates=candidates, horizon=horizon).fit(whole)
    return BacktestResult(history=str(history.name), horizon=horizon, folds=len(fold_origins),
                          selected=auto.chosen, models=summary, per_fold=per_fold, selected_why=auto.why_chosen,
                          notes=notes)


def fallback_note(name: str, rows: Sequence[dict]) -> str | None:
    """In how many of its folds (`score_folds` rows) a model fell back to seasonal naive, and the last one's reason."""
    fallbacks = [r["fallback"] for r in rows if r["fallback"]]
    return (f"{name}: fallback to seasonal naive in {len(fallbacks)} of {len(rows)} folds (the last: {fallbacks[-1]})"
            if fallbacks else None)


def unscored_note(history: pd.Series, fold_origins: Sequence[int], horizon: int) -> str | None:
    """How many of the folds' hours are missing (not scored), and which folds have no known actual at all (their
    scores null, left out of every mean): `folds` counts them, so a script must not read it as the folds scored.
    None when every hour is known, or none is (null_scores says that)."""
    values = history.to_numpy(dtype=float)
    known = [int(np.isfinite(values[o:o + horizon]).sum()) for o in fold_origins]
    missing = len(fold_origins) * horizon - sum(known)
    if not missing or not any(known):
        return None
    empty = [history.index[o].isoformat() for o, k in zip(fold_origins, known) if k == 0]
    return (f"{missing} of the folds' {len(fold_origins) * horizon} hours to score are missing: not scored"
            + (f"; folds with no known actual ({len(empty)} of {len(fold_origins)}, origin {', '.join(empty)}) are "
               "scored null and left out of every mean" if empty else ""))


def null_scores(values: np.ndarray, fold_origins: Sequence[int], horizon: int) -> list[str]:
    """Why every model's scores are null where they are: no fold with a known actual, or (MASE and pinball) no fold
    whose history changes from one day to the next, the unit those errors are scaled by."""
    scored = [o for o in fold_origins if np.isfinite(values[o:o + horizon]).any()]
    if not scored:
        return ["every score is null: no fold has a known actual in its horizon (those hours are all missing)"]
    if not any(np.isfinite(seasonal_scale(values[:o], DAY)) for o in scored):
        why = ("the history does not change from one day to the next where it is known (constant, or one day's shape "
               "repeated exactly)" if any(_day_pairs(values[:o]) for o in scored) else
               "no hour is known together with the same hour a day earlier (the history's gaps)")
        return ["mase and pinball_* are null: they divide errors by the history's change from one day to the next, "
                f"and before every origin {why}"]
    return []


def _day_pairs(values: np.ndarray) -> bool:
    """Whether some hour is known together with the hour a day before it: the pairs MASE's scale is made of."""
    return bool((np.isfinite(values[DAY:]) & np.isfinite(values[:-DAY])).any())
