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
from typing import Self

import numpy as np
import pandas as pd

from forecast.base import Forecaster
from forecast.calibrate import DAY, calibrated_predict, fold_weights, origins, point_forecast, scaled_residuals
from forecast.metrics import coverage, mase, pinball, seasonal_scale, smape
from forecast.models import MODELS, Ensemble

# Cheap candidates (vectorised numpy, no optimiser) for thousands of series.
FAST = ("snaive24", "snaive168", "profile", "profile24")
# ETS, MSTL and gradient boosting cost 0.5-10 s per fit (x folds) and won no trace's inner backtest in our
# runs: the backtest scores them, AutoForecaster considers them only when asked ("full" or a list).
FULL = FAST + ("mstl",)
SCORED_QUANTILES = (0.05, 0.1, 0.5, 0.9, 0.95)
METRICS = ("mase", "smape", "pinball_50", "pinball_90", "pinball_95", "coverage_80", "coverage_90", "fit_seconds")


class AutoForecaster:
    """Picks the best candidate, or the mean of the top `top_k`, by an inner backtest; then calibrates.

    Selection and conformal residuals both come from the same `folds` inner
    origins `step` hours apart, all inside the history given to `fit`.
    """

    def __init__(self, candidates: Sequence[str] | str = "fast", horizon: int = DAY, folds: int = 14,
                 step: int = DAY, top_k: int = 3):
        self.candidates = {"fast": FAST, "full": FULL}[candidates] if isinstance(candidates, str) else tuple(candidates)
        self.horizon, self.folds, self.step, self.top_k = horizon, folds, step, top_k
        self.name = "auto"

    def fit(self, history: pd.Series) -> Self:
        values = history.to_numpy(dtype=float)
        fold_origins = origins(len(history), self.horizon, self.folds, self.step)
        points = {c: np.array([point_forecast(MODELS[c], history, o, self.horizon) for o in fold_origins])
                  for c in self.candidates}
        scales = [seasonal_scale(values[:o], DAY) for o in fold_origins]

        def score(p: np.ndarray) -> float:
            errors = [mase(values[o:o + self.horizon], f, s) for o, f, s in zip(fold_origins, p, scales)]
            errors = [e for e in errors if np.isfinite(e)]
            return float(np.mean(errors)) if errors else float("inf")

        self.scores_ = {c: score(p) for c, p in points.items()}
        ranked = sorted(self.candidates, key=lambda c: self.scores_[c])
        top = tuple(ranked[:self.top_k])
        if len(top) > 1 and fold_origins:
            mean = np.mean([points[c] for c in top], axis=0)
            self.scores_[Ensemble(top).name] = score(mean)
            points[Ensemble(top).name] = mean
        self.chosen = min(self.scores_, key=self.scores_.get) if fold_origins else "profile"
        self.model_ = Ensemble(top) if self.chosen not in MODELS else MODELS[self.chosen]()
        self.model_.fit(history)
        self.fallback_reason = getattr(self.model_, "fallback_reason", None)
        self.residuals_ = (scaled_residuals(history, points[self.chosen], fold_origins)
                           if fold_origins else np.empty((0, self.horizon)))
        self.weights_ = fold_weights(fold_origins)
        self.history_ = history
        self.name = f"auto({self.chosen})"
        return self

    def predict(self, horizon: int, quantiles: Sequence[float]) -> pd.DataFrame:
        return calibrated_predict(self.model_, self.residuals_, self.history_, horizon, quantiles, self.weights_)


@dataclass
class BacktestResult:
    history: str
    horizon: int
    folds: int
    selected: str
    models: dict[str, dict[str, float]]
    per_fold: list[dict] = field(default_factory=list)  # one row per (model, origin), the metrics of that fold

    def to_json(self) -> dict:
        return {"history": self.history, "horizon": self.horizon, "folds": self.folds, "selected": self.selected,
                "models": {m: {k: _finite(v) for k, v in metrics.items()} for m, metrics in self.models.items()}}


def _finite(v: float) -> float | None:
    return float(v) if np.isfinite(v) else None


def score_fold(actual: np.ndarray, frame: pd.DataFrame, scale: float) -> dict[str, float]:
    q = {float(c): frame[c].to_numpy() for c in frame.columns}
    return {"mase": mase(actual, q[0.5], scale), "smape": smape(actual, q[0.5]),
            "pinball_50": pinball(actual, q[0.5], 0.5, scale), "pinball_90": pinball(actual, q[0.9], 0.9, scale),
            "pinball_95": pinball(actual, q[0.95], 0.95, scale),
            "coverage_80": coverage(actual, q[0.1], q[0.9]), "coverage_90": coverage(actual, q[0.05], q[0.95])}


def backtest(history: pd.Series, horizon: int = DAY, folds: int = 14, step: int = DAY,
             models: Sequence[str] | None = None, quantiles: Sequence[float] = SCORED_QUANTILES,
             progress: Callable[..., None] | None = None) -> BacktestResult:
    """Score each model, and the honest AutoForecaster (key "auto"), over `folds` rolling origins."""
    names = tuple(models or MODELS)
    quantiles = sorted(set(map(float, quantiles)) | set(SCORED_QUANTILES))
    values = history.to_numpy(dtype=float)
    fold_origins = origins(len(history), horizon, folds, step)
    makers: dict[str, Callable[[], Forecaster]] = {n: MODELS[n] for n in names}
    candidates = [n for n in names if n in FAST] or list(FAST)
    makers["auto"] = lambda: AutoForecaster(candidates=candidates, horizon=horizon)
    rows, total = [], len(fold_origins) * len(makers)
    for i, origin in enumerate(fold_origins):
        train, actual = history.iloc[:origin], values[origin:origin + horizon]
        scale = seasonal_scale(values[:origin], DAY)
        for j, (name, make) in enumerate(makers.items()):
            started = time.perf_counter()
            frame = make().fit(train).predict(horizon, quantiles)
            seconds = time.perf_counter() - started
            rows.append({"model": name, "origin": history.index[origin].isoformat(),
                         **score_fold(actual, frame, scale), "fit_seconds": seconds, "_n": np.isfinite(actual).sum()})
            if progress:
                progress(i * len(makers) + j + 1, total, name)
    table = pd.DataFrame(rows)
    summary = {}
    for name, group in table.groupby("model", sort=False):
        n = group["_n"].to_numpy()
        summary[name] = {m: float(np.nanmean(group[m])) for m in METRICS}
        for m in ("coverage_80", "coverage_90"):  # pooled over every scored point, not per fold
            summary[name][m] = float(np.nansum(group[m] * n) / n.sum()) if n.sum() else float("nan")
    auto = AutoForecaster(candidates=candidates, horizon=horizon).fit(history)
    per_fold = table.drop(columns="_n").to_dict("records")
    return BacktestResult(history=str(history.name), horizon=horizon, folds=len(fold_origins),
                          selected=auto.chosen, models=summary, per_fold=per_fold)
