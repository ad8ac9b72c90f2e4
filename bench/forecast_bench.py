"""Forecast benchmark: headroom's forecast engine against statsforecast peers.

Runs in the main env. The peers' raw forecasts come from bench/peers/run_peers.py
(bench/.venv-peers); this script runs headroom on the same protocol and scores
everything with ONE scorer, forecast.metrics. Writes bench/results/forecast.json
and docs/bench-forecast.md; progress goes to stderr.

    bash bench/setup_peers.sh
    nice -n 10 bench/.venv-peers/bin/python bench/peers/run_peers.py   # -> bench/results/peers.json
    python bench/forecast_bench.py                                     # scores + headroom side

M4 hourly: OWA = 0.5 * (sMAPE / sMAPE_Naive2 + MASE / MASE_Naive2), Naive2 computed
here (classical multiplicative decomposition when the 90% autocorrelation test at
lag 24 passes, as in the M4 benchmark code) and checked against the published row.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / ".." / "shared" / "data"
RESULTS = REPO / "bench" / "results"
sys.path.insert(0, str(REPO))

from forecast.metrics import coverage, mase, pinball, seasonal_scale, smape  # noqa: E402  the one scorer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from gpu_gauge import GAUGE, gpus_in_use, timestamps  # noqa: E402
from kinds import CHOOSE_SEEDS, KINDS, TEST_SEEDS, backtest_origins  # noqa: E402
from kinds import hourly as kind_hourly  # noqa: E402
from m4_files import read_wide  # noqa: E402
from week_windows import ORIGINS as WEEK_ORIGINS  # noqa: E402
from week_windows import week_windows  # noqa: E402

TRACE_H, FOLDS, STEP, M4_H, SEASON = 24, 7, 24, 48, 24


def log(*parts) -> None:
    print("[bench]", *parts, file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- data

def load_trace(path: Path) -> pd.Series:
    """The product's own loader; outliers are not clipped so headroom and the peers score the same actuals."""
    from forecast.history import load_history, prepare
    series, _ = prepare(load_history(path), step="1h", statistic="mean", outlier_factor=None)
    series.name = path.stem
    return series


def load_m4(data: Path = DATA) -> tuple[list[str], list[np.ndarray], list[np.ndarray]]:
    ids, train = read_wide(data / "m4" / "Hourly-train.csv")
    ids_t, test = read_wide(data / "m4" / "Hourly-test.csv")
    assert ids == ids_t, "M4 train/test ids differ"
    return ids, train, test


def published_m4(data: Path = DATA) -> dict[str, dict[str, float]]:
    out = {}
    with open(data / "m4" / "m4_hourly_point_forecast_results.csv", newline="") as fh:
        for row in csv.DictReader(fh):
            out[row["method"]] = {"description": row["description"], "smape": float(row["sMAPE_Hourly"]),
                                  "mase": float(row["MASE_Hourly"]), "owa": float(row["OWA_Hourly"])}
    return out


# ----------------------------------------------------------------------------- M4 benchmarks

def _acf(x: np.ndarray, k: int) -> float:
    m = x.mean()
    return float(np.sum((x[k:] - m) * (x[:-k] - m)) / np.sum((x - m) ** 2))


def seasonality_test(x: np.ndarray, ppy: int = SEASON) -> bool:
    """M4's 90% test: |acf(ppy)| > 1.645 * sqrt((1 + 2 * sum_{k<ppy} acf(k)^2) / n)."""
    s = sum(_acf(x, k) ** 2 for k in range(1, ppy))
    return abs(_acf(x, ppy)) > 1.645 * math.sqrt((1 + 2 * s) / len(x))


def seasonal_indices(x: np.ndarray, ppy: int = SEASON) -> np.ndarray:
    """Classical multiplicative seasonal indices (percent, mean 100); 100s when not seasonal."""
    if not seasonality_test(x, ppy):
        return np.full(ppy, 100.0)
    ma = pd.Series(x).rolling(ppy, center=True).mean()
    if len(x) % 2 == 0:  # as in the M4 code: a centred 2 x ppy moving average
        ma = np.roll(ma.rolling(2, center=True).mean().to_numpy(), -1)
    else:
        ma = ma.to_numpy()
    le = x * 100.0 / ma
    le = np.concatenate([le, np.full(ppy - len(le) % ppy, np.nan)]).reshape(-1, ppy)
    si = np.nanmean(le, axis=0)
    return si / (si.sum() / (ppy * 100.0))


def naive2(x: np.ndarray, h: int = M4_H, ppy: int = SEASON) -> np.ndarray:
    si = seasonal_indices(x, ppy)
    n = len(x)
    last = x[-1] * 100.0 / si[(n - 1) % ppy]
    return np.array([last * si[(n + i) % ppy] / 100.0 for i in range(h)])


def snaive(x: np.ndarray, h: int = M4_H, season: int = SEASON) -> np.ndarray:
    return np.array([x[len(x) - season + (i % season)] for i in range(h)])


def m4_score(forecasts: list[np.ndarray], train: list[np.ndarray], test: list[np.ndarray]) -> dict[str, float]:
    """Mean over series of sMAPE and MASE (in-sample m=24 scale), as in M4."""
    sm = [smape(a, f) for a, f in zip(test, forecasts)]
    ms = [mase(a, f, seasonal_scale(t, SEASON)) for a, f, t in zip(test, forecasts, train)]
    return {"smape": float(np.mean(sm)), "mase": float(np.mean(ms))}


def owa(score: dict[str, float], naive2_score: dict[str, float]) -> float:
    return 0.5 * (score["smape"] / naive2_score["smape"] + score["mase"] / naive2_score["mase"])


def m4_benchmarks(train, test) -> dict[str, dict[str, float]]:
    n2 = m4_score([naive2(t) for t in train], train, test)
    sn = m4_score([snaive(t) for t in train], train, test)
    return {"Naive2": {**n2, "owa": 1.0}, "sNaive": {**sn, "owa": owa(sn, n2)}}


# ----------------------------------------------------------------------------- peers (scored here)

def score_trace_peer(series: pd.Series, trace: dict) -> dict[str, dict]:
    values = series.to_numpy(dtype=float)
    out = {}
    for model, folds in trace["models"].items():
        if isinstance(folds, dict):  # dropped (e.g. AutoARIMA over its time limit)
            out[model] = {"dropped": folds.get("dropped")}
            continue
        m, s, secs, cov = [], [], [], {80: [0, 0], 90: [0, 0]}
        errors = [f["error"] for f in folds if f.get("error")]
        for o, f in zip(trace["origin_index"], folds):
            if f.get("error"):
                continue
            actual = values[o:o + TRACE_H]
            point = np.array(f["mean"], dtype=float)
            m.append(mase(actual, point, seasonal_scale(values[:o], SEASON)))
            s.append(smape(actual, point))
            secs.append(f["seconds"])
            n_real = int(np.isfinite(actual).sum())
            for lv in (80, 90):
                if f"lo-{lv}" in f:
                    c = coverage(actual, np.array(f[f"lo-{lv}"], float), np.array(f[f"hi-{lv}"], float))
                    if n_real:
                        cov[lv][0] += c * n_real
                        cov[lv][1] += n_real
        out[model] = {"mase": _nanmean(m), "smape": _nanmean(s),
                      "coverage_80": cov[80][0] / cov[80][1] if cov[80][1] else None,
                      "coverage_90": cov[90][0] / cov[90][1] if cov[90][1] else None,
                      "seconds_per_fold": _nanmean(secs), "folds": len(m), "errors": errors}
    return out


def score_m4_peers(peers_m4: dict, ids, train, test, n2: dict) -> dict[str, dict]:
    assert peers_m4["ids"] == ids[:len(peers_m4["ids"])]
    k = len(peers_m4["ids"])
    if k != len(ids):  # a partial (smoke) run: Naive2 over the same series
        n2 = m4_score([naive2(t) for t in train[:k]], train[:k], test[:k])
    out = {}
    for model, rec in peers_m4["models"].items():
        fc = [np.array(v, dtype=float) for v in rec["mean"]]
        sc = m4_score(fc, train[:k], test[:k])
        out[model] = {**sc, "owa": owa(sc, n2), "seconds_per_series": float(np.mean(rec["seconds"])),
                      "seconds_total": float(np.sum(rec["seconds"])), "errors": len(rec["errors"]), "series": k}
    return out


def _nanmean(xs) -> float | None:
    xs = [x for x in xs if x is not None and np.isfinite(x)]
    return float(np.mean(xs)) if xs else None


# ----------------------------------------------------------------------------- held-out series

def heldout_series(name: str) -> pd.Series:
    """headroom's own build of a held-out series (bench/peers/run_peers.py `heldout_series` builds the peers'):
    "<stem>_max" is a sub-hourly trace's peak in each hour, "<stem>_earlier" an hourly trace at earlier origins,
    GAUGE the job trace's GPUs in use (bench/gpu_gauge.py)."""
    from forecast.history import load_history, prepare
    if name == GAUGE:
        values = gpus_in_use(DATA / "jobs" / "alibaba_openb_pods.csv")
        return pd.Series(values, index=pd.DatetimeIndex(timestamps(len(values))), name=name)
    if name.endswith("_max"):
        series, _ = prepare(load_history(DATA / "traces" / f"{name.removesuffix('_max')}.csv"), step="1h",
                            statistic="max", outlier_factor=None)
        series.name = name
        return series
    return load_trace(DATA / "traces" / f"{name.removesuffix('_earlier')}.csv")


def kind_series(name: str) -> pd.Series:
    """headroom's build of a synthetic kind's series "<kind>/<seed>" (the peers build theirs with the same
    bench/kinds.py); its origins must be `headroom backtest --folds 7`'s."""
    from forecast.calibrate import origins
    kind, seed = name.rsplit("/", 1)
    series = kind_hourly(kind, int(seed))
    if backtest_origins(len(series)) != origins(len(series), TRACE_H, FOLDS, STEP):
        raise SystemExit(f"{name}: bench/kinds.py's origins differ from forecast.calibrate.origins")
    return series


def score_kinds(peers_kinds: dict, missing: str | None) -> dict:
    """score_heldout on the synthetic kinds, with the inverse-MASE^2 weak-evidence rule beside auto."""
    from forecast.backtest import AutoForecaster
    inverse = {KIND_VARIANTS["inverse"]: lambda: AutoForecaster(horizon=TRACE_H, weak_evidence="shrink-inverse")}
    return score_heldout(peers_kinds, missing, build=kind_series, label="kind", variants=inverse)


def point_mase(make, series: pd.Series, origins: list[int]) -> float | None:
    """A model's mean MASE over the origins, its median alone, each fit on the data before its origin."""
    from forecast.calibrate import point_forecast
    values = series.to_numpy(dtype=float)
    return _nanmean([mase(values[o:o + TRACE_H], point_forecast(make, series, o, TRACE_H),
                          seasonal_scale(values[:o], SEASON)) for o in origins])


def score_heldout(peers_heldout: dict, missing: str | None, build=heldout_series, label: str = "held-out",
                  variants: dict | None = None) -> dict:
    """MASE of every peer, of headroom's auto and of each of auto's candidates on series nothing in headroom was
    chosen on (`build(name)` gives headroom's series; the peers' own copy must equal it); `variants`: label ->
    another AutoForecaster to score beside auto."""
    from forecast.backtest import FAST, AutoForecaster
    from forecast.models import MODELS
    out = {}
    for name, entry in peers_heldout.items():
        series = build(name)
        theirs = np.array([np.nan if v is None else v for v in entry["y"]], dtype=float)
        ours = series.to_numpy(dtype=float)
        if ours.shape != theirs.shape or not np.allclose(ours, theirs, rtol=1e-5, equal_nan=True):
            raise SystemExit(f"{label} {name}: headroom's series differs from the peers' (bench/peers/run_peers.py)")
        row = {"folds": len(entry["origin_index"]), **{k: entry[k] for k in ("kind", "seed") if k in entry},
               "peers": {m: r["mase"] for m, r in score_trace_peer(series, entry).items() if r.get("mase") is not None}}
        if not missing:
            scores, frames = [], []
            for o in entry["origin_index"]:
                frames.append(AutoForecaster(horizon=TRACE_H).fit(series.iloc[:o]).predict(TRACE_H, M4_BAND_QUANTILES))
                scores.append(mase(ours[o:o + TRACE_H], frames[-1][0.5].to_numpy(), seasonal_scale(ours[:o], SEASON)))
            row["auto"] = _nanmean(scores)
            origins = entry["origin_index"]
            row["candidates"] = {c: point_mase(MODELS[c], series, origins)
                                 for c in FAST}  # AutoForecaster's default candidates
            row["variants"] = {v: point_mase(make, series, origins) for v, make in (variants or {}).items()}
            bands = pd.concat(frames)  # coverage pooled over every scored hour (coverage skips missing actuals)
            actual = np.concatenate([ours[o:o + TRACE_H] for o in entry["origin_index"]])
            for lv, (lo, hi) in {80: (0.1, 0.9), 90: (0.05, 0.95)}.items():
                row[f"coverage_{lv}"] = coverage(actual, bands[lo].to_numpy(), bands[hi].to_numpy())
        out[name] = row
        log(f"{label} {name}: auto MASE {_f(row.get('auto'))}, best peer {_f(min(row['peers'].values()))}")
    return out


# ----------------------------------------------------------------------------- headroom side

def headroom_available() -> str | None:
    """None when forecast.backtest (backtest, AutoForecaster) imports; else the reason."""
    try:
        from forecast.backtest import AutoForecaster, backtest  # noqa: F401
    except Exception as exc:  # the API is being written concurrently
        return f"{type(exc).__name__}: {exc}"
    return None


def headroom_trace(series: pd.Series) -> dict:
    """headroom's backtest on the peers' protocol: per-model metrics, "auto" = honest AutoForecaster."""
    import forecast.backtest as bt
    # auto picks among its own cheap candidates whatever `models` is, so the slow stand-alone models
    # (ets, gbm, ensemble) are left out unless asked for: they only add rows to the table.
    models = None if os.environ.get("BENCH_ALL_MODELS") else getattr(bt, "FULL", None)
    started = time.perf_counter()
    result = bt.backtest(series, horizon=TRACE_H, folds=FOLDS, step=STEP, models=models)
    origins = sorted({row["origin"] for row in result.per_fold})
    models = {}
    for name, metrics in result.models.items():
        models[name] = {"mase": metrics.get("mase"), "smape": metrics.get("smape"),
                        "coverage_80": metrics.get("coverage_80"), "coverage_90": metrics.get("coverage_90"),
                        "seconds_per_fold": metrics.get("fit_seconds"),
                        **{k: metrics.get(k) for k in ("below_q0.9", "below_q0.99")}}
    # Hours within a fold err together, so the fold is the sampling unit of coverage: its standard error
    # is the spread of per-fold coverage over sqrt(folds).
    auto_folds = pd.DataFrame([row for row in result.per_fold if row["model"] == "auto"])
    for lv in (80, 90):
        per_fold = auto_folds[f"coverage_{lv}"].dropna()
        models["auto"][f"coverage_{lv}_se"] = float(per_fold.std(ddof=1) / np.sqrt(len(per_fold)))
    return {"selected": result.selected, "models": models, "origins": origins,
            "wall_seconds": time.perf_counter() - started}


M4_BAND_QUANTILES = [0.05, 0.1, 0.5, 0.9, 0.95]


def _m4_one(args) -> tuple[np.ndarray, float, str, np.ndarray]:
    y, h, candidates = args
    from forecast.backtest import AutoForecaster
    history = pd.Series(y, index=pd.date_range("2001-01-01", periods=len(y), freq="h", tz="UTC"))
    started = time.perf_counter()
    kwargs = {"candidates": candidates} if candidates else {}
    model = AutoForecaster(horizon=h, **kwargs).fit(history)
    frame = model.predict(h, M4_BAND_QUANTILES).to_numpy()  # columns: q0.05, q0.1, q0.5, q0.9, q0.95
    return frame[:, 2], time.perf_counter() - started, model.chosen, frame


def headroom_m4(train, h: int, candidates, workers: int) -> dict:
    """AutoForecaster per M4 series (fabricated hourly timestamps; M4 has none)."""
    from joblib import Parallel, delayed
    started = time.perf_counter()
    res = Parallel(n_jobs=workers, batch_size=8)(delayed(_m4_one)((y, h, candidates)) for y in train)
    wall = time.perf_counter() - started
    return {"forecasts": [r[0] for r in res], "seconds": [r[1] for r in res], "chosen": [r[2] for r in res],
            "bands": [r[3] for r in res], "wall_seconds": wall}


def m4_coverage(bands, test) -> dict[str, float]:
    """Pooled coverage of the 80 % (q0.1..q0.9) and 90 % (q0.05..q0.95) intervals over every series and hour:
    out-of-sample evidence for the calibration, which was never tuned on M4."""
    inside = {80: [], 90: []}
    for frame, actual in zip(bands, test):
        actual = np.asarray(actual, dtype=float)
        inside[90].append((frame[:, 0] <= actual) & (actual <= frame[:, 4]))
        inside[80].append((frame[:, 1] <= actual) & (actual <= frame[:, 3]))
    return {f"coverage_{lv}": float(np.mean(np.concatenate(v))) for lv, v in inside.items()}


# ----------------------------------------------------------------------------- the model learned across series
#
# forecast/global_model.py (issue 13 item 2). Its hyper-parameters and its weight in a combination with the
# per-series AutoForecaster are picked on M4's even positions only: fitted across their training parts, scored on
# their test parts. The pick is then fitted across all 414 training parts and reported on the odd positions (no
# choice was made on them) and on all 414.
GLOBAL_GRID = {  # name -> GlobalSettings overrides
    "iter150/lr0.15": {"max_iter": 150, "learning_rate": 0.15},
    "iter300/lr0.1": {"max_iter": 300, "learning_rate": 0.1},
}
GLOBAL_WEIGHTS = (1.0, 0.7, 0.5)  # the global path's weight in weight x global + (1 - weight) x auto


def _global_paths(fit_on: list[np.ndarray], predict_for: list[np.ndarray], overrides: dict) -> tuple[np.ndarray, float]:
    from dataclasses import replace

    from forecast.global_model import GlobalBoosting, GlobalSettings
    started = time.perf_counter()
    learner = GlobalBoosting(replace(GlobalSettings(horizon=M4_H), **overrides)).fit_many(fit_on)
    return learner.paths(predict_for, M4_H), time.perf_counter() - started


def m4_global(train, test, auto: list[np.ndarray]) -> dict:
    """The grid and the weight picked on M4's even half; the pick refitted on all training parts, scored per half."""
    halves = {"even": list(range(0, len(train), 2)), "odd": list(range(1, len(train), 2)),
              "all": list(range(len(train)))}

    def score(forecasts: np.ndarray, half: str) -> dict:
        idx = halves[half]
        tr, te = [train[i] for i in idx], [test[i] for i in idx]
        sc = m4_score([forecasts[k] for k in range(len(idx))], tr, te)
        return {**sc, "owa": owa(sc, m4_score([naive2(t) for t in tr], tr, te))}

    even_train = [train[i] for i in halves["even"]]
    even_auto = np.array([auto[i] for i in halves["even"]])
    grid = {}
    for name, overrides in GLOBAL_GRID.items():
        paths, seconds = _global_paths(even_train, even_train, overrides)
        grid[name] = {"fit_predict_seconds": seconds,
                      **{f"weight_{w}": score(w * paths + (1 - w) * even_auto, "even")["owa"] for w in GLOBAL_WEIGHTS}}
        log(f"M4 global {name} on the even half: OWA {grid[name]['weight_1.0']:.3f}, with auto at 0.7 "
            f"{grid[name]['weight_0.7']:.3f} ({seconds:.0f}s)")
    pick = min(grid, key=lambda n: grid[n]["weight_1.0"])
    weight = min(GLOBAL_WEIGHTS, key=lambda w: grid[pick][f"weight_{w}"])
    paths, seconds = _global_paths(train, train, GLOBAL_GRID[pick])
    combined = weight * paths + (1 - weight) * np.array(auto)
    scores = {}
    for label, forecasts in (("global", paths), ("combination", combined), ("auto", np.array(auto))):
        scores[label] = {half: score(forecasts[idx], half) for half, idx in halves.items()}
    log(f"M4 global pick {pick}, weight {weight}: OWA even/odd/all global "
        + "/".join(f"{scores['global'][h]['owa']:.3f}" for h in halves) + ", combination "
        + "/".join(f"{scores['combination'][h]['owa']:.3f}" for h in halves) + f" ({seconds:.0f}s on all)")
    return {"grid": grid, "pick": pick, "weight": weight, "scores": scores, "fit_predict_seconds_all": seconds}


def scale_history(seed: int) -> pd.Series:
    """One of the scale test's series: 90 days of the project's synthetic demand, hourly."""
    from forecast.synthetic import synthetic_demand
    return synthetic_demand(days=90, step="1h", seed=seed)


def global_scale(n: int = 1000) -> dict:
    """The global model's fit and forecast over the scale test's 1,000 synthetic series (90 days, horizon 48)."""
    from forecast.global_model import GlobalBoosting, GlobalSettings
    histories = [scale_history(seed) for seed in range(n)]
    started = time.perf_counter()
    learner = GlobalBoosting(GlobalSettings(horizon=M4_H)).fit_many(histories)
    learner.paths(histories, M4_H)
    return {"series": n, "days": 90, "horizon": M4_H, "rows": learner.rows_,
            "wall_seconds": time.perf_counter() - started}


def _scale_one(seed: int) -> float:
    from forecast.backtest import AutoForecaster
    history = scale_history(seed)
    history.index.freq = "h"
    started = time.perf_counter()
    AutoForecaster(candidates="fast", horizon=M4_H).fit(history).predict(M4_H, [0.1, 0.5, 0.9])
    return time.perf_counter() - started


def scale_test(n: int = 1000, workers: int = 2) -> dict:
    """1,000 synthetic hourly series of 90 days, horizon 48, fast candidates, `workers` processes."""
    from joblib import Parallel, delayed
    started = time.perf_counter()
    secs = Parallel(n_jobs=workers, batch_size=16)(delayed(_scale_one)(i) for i in range(n))
    wall = time.perf_counter() - started
    return {"series": n, "days": 90, "horizon": M4_H, "workers": workers, "candidates": "fast",
            "wall_seconds": wall, "mean_seconds_per_series": float(np.mean(secs)), "target_seconds": 120,
            "pass": wall < 120, "statsforecast_mstl": mstl_scale(n, workers)}


PEERS_PYTHON = REPO / "bench" / ".venv-peers" / "bin" / "python"


def mstl_scale(n: int, workers: int) -> dict:
    """statsforecast's MSTL on the scale test's own series, in the same run (bench/peers/scale_mstl.py, in the
    peers' venv): {"wall_seconds": ...}, or {"not_run": why}."""
    import subprocess
    import tempfile
    if not PEERS_PYTHON.exists():
        return {"not_run": f"no peers venv at {PEERS_PYTHON} (bash bench/setup_peers.sh)"}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "series.npz"
        np.savez(path, values=np.array([scale_history(seed).to_numpy() for seed in range(n)]))
        log(f"scale test: statsforecast MSTL on the same {n} series ...")
        done = subprocess.run([str(PEERS_PYTHON), str(REPO / "bench" / "peers" / "scale_mstl.py"), str(path),
                               "--horizon", str(M4_H), "--workers", str(workers)], capture_output=True, text=True)
    if done.returncode:
        return {"not_run": f"scale_mstl.py exited {done.returncode}: {(done.stdout + done.stderr)[-300:]}"}
    return json.loads(done.stdout.splitlines()[-1])


# ----------------------------------------------------------------------------- the protocol (issue 13)
#
# Every choice AutoForecaster ships with (candidates, selection/combination rule, the median's level correction)
# is one of PROTOCOL_CONFIGS, picked by ONE rule on a choose-on part and reported on a test-on part:
#   M4 hourly halves by series: even positions (0, 2, ...) choose, odd positions test (horizon 48, their test set);
#   leave-one-trace-out over the three shared hourly traces (7 daily folds, horizon 24): the config chosen on M4's
#   choose half plus the two other traces is scored on the third.
# The rule: the lowest geometric mean, over the choose-on units, of mean MASE / mean MASE of snaive24 (one unit
# per trace and one for M4's half). The shipped config is the rule's pick on M4's choose half plus all three
# traces; M4's test half is out of sample for it, the leave-one-trace-out rows say whether the rule carries over.

OLD_FAST = ("snaive24", "snaive168", "profile", "profile24")
CANDIDATE_SETS = {"fast4": OLD_FAST, "fast4+naive": OLD_FAST + ("naive",), "fast4+theta": OLD_FAST + ("theta",),
                  "fast6": OLD_FAST + ("naive", "theta")}
# Round 1 (forecast.json "choices_round1") ran fast4 and fast6 x best-or-mean, best, median, weighted x lc, nolc
# on M4 and the traces alone; best, median and weighted lost on the choose-on part with either pool, so round 2
# (this list) varies the pool and the level correction under best-or-mean, and adds the week and gauge units.
PROTOCOL_CONFIGS = [
    {"name": f"{cname}/best-or-mean/{lname}", "candidates": cands, "combine": "best-or-mean", "level_correction": lc,
     "min_selection_folds": 0, "weak_evidence": "mean"}
    for cname, cands in CANDIDATE_SETS.items() for lname, lc in (("lc", True), ("lc14", 14), ("nolc", False))
] + [  # added after round 2 picked lc14, which cost on the traces: a shorter minimum, for the leading pool only
    {"name": "fast4+naive/best-or-mean/lc7", "candidates": CANDIDATE_SETS["fast4+naive"], "combine": "best-or-mean",
     "level_correction": 7, "min_selection_folds": 0, "weak_evidence": "mean"},
    # added in round 3, when the one-week peers showed picking on 1-4 inner folds losing to seasonal naive: with
    # k < 7 inner folds, the mean of the whole pool instead of a pick, or the pick shrunk towards it (weight k/7)
    *({"name": f"fast4+naive/best-or-mean/lc7/{rule}<7", "candidates": CANDIDATE_SETS["fast4+naive"],
       "combine": "best-or-mean", "level_correction": 7, "min_selection_folds": 7, "weak_evidence": rule}
      for rule in ("mean", "shrink")),
    # added in round 6 with the synthetic kinds units (bench/kinds.py), where the pool's equal-share mean below 7
    # folds carried the last value held (zero all day after a zero night) and no candidate followed a level shift:
    # the rest of the weight by 1 / MASE^2 on the k folds, and Theta in the pool again under either rule
    *({"name": f"{pool}/best-or-mean/lc7/{rule}<7", "candidates": CANDIDATE_SETS[pool], "combine": "best-or-mean",
       "level_correction": 7, "min_selection_folds": 7, "weak_evidence": rule}
      for pool, rule in (("fast4+naive", "shrink-inverse"), ("fast6", "shrink"), ("fast6", "shrink-inverse"))),
    # added in round 12 (LATER_ROUNDS), the two it tried: the pool without the last value held, and the rest shared
    # only among the candidates the best one did not beat on every inner fold
    *({"name": f"{pool}/best-or-mean/lc7/{rule}<7", "candidates": CANDIDATE_SETS[pool], "combine": "best-or-mean",
       "level_correction": 7, "min_selection_folds": 7, "weak_evidence": weak}
      for pool, rule, weak in (("fast4", "shrink", "shrink"), ("fast4+naive", "unrefuted", "shrink-unrefuted")))]
PROTOCOL_QUANTILES = [0.05, 0.1, 0.5, 0.9, 0.95]


def _protocol_one(args):
    config, y, cut_points, h = args
    from forecast.backtest import AutoForecaster
    history = pd.Series(y, index=pd.date_range("2001-01-01", periods=len(y), freq="h", tz="UTC"))
    out = []
    for o in cut_points:
        model = AutoForecaster(candidates=config["candidates"], horizon=h, combine=config["combine"],
                               level_correction=config["level_correction"],
                               min_selection_folds=config["min_selection_folds"],
                               weak_evidence=config["weak_evidence"]).fit(history.iloc[:o])
        out.append(model.predict(h, PROTOCOL_QUANTILES).to_numpy())
    return out


def _score_frames(frames, y, cut_points, h) -> dict:
    m, sn, inside80, inside90 = [], [], [], []
    for frame, o in zip(frames, cut_points):
        actual, scale = y[o:o + h], seasonal_scale(y[:o], SEASON)
        m.append(mase(actual, frame[:, 2], scale))
        sn.append(mase(actual, snaive(y[:o], h), scale))
        real = np.isfinite(actual)
        inside80.append(((frame[:, 1] <= actual) & (actual <= frame[:, 3]))[real])
        inside90.append(((frame[:, 0] <= actual) & (actual <= frame[:, 4]))[real])
    return {"mase": m, "snaive_mase": sn, "inside80": np.concatenate(inside80), "inside90": np.concatenate(inside90)}


def choose_weeks() -> list[pd.Series]:
    """The protocol's `week` unit: every whole week of the shared hourly traces (bench/week_windows.py), each a
    one-week history of its own."""
    return [week for kind, week in week_windows(DATA).values() if kind == "choose"]


def daily_cuts(n: int) -> list[int]:
    """The trace protocol's origins in a series of `n` hours: the last FOLDS, STEP apart, each with TRACE_H to score."""
    return [n - TRACE_H - STEP * j for j in range(FOLDS - 1, -1, -1)]


def flat_gauge(seed: int, days: int = 21) -> np.ndarray:
    """A GPU-in-use gauge: a slow mean-reverting drift around a level, small noise, no daily cycle."""
    rng = np.random.default_rng(100 + seed)
    drift = np.zeros(days * 24)
    for t in range(1, len(drift)):
        drift[t] = 0.995 * drift[t - 1] + rng.normal(0, 0.4)
    return np.clip(40 + 20 * seed + drift + rng.normal(0, 0.3, len(drift)), 0, None)


ROUND6_REJECTED = (
    "The rule over round 5's units and the kinds' seed 1 picks fast4+theta/best-or-mean/lc14 (`pick_with_kinds`; the "
    "top three within 0.5 %: 0.789 / 0.790 / 0.793, round 5's pick 0.823), which also leads on the test-on units "
    "(0.849 against 0.937). Shipped as the default (commit b76cc94, reverted next), it lost on the real held-out "
    "series nothing was chosen on: above the best peer on 3 of 5 where round 5's pick is above it on none "
    "(alibaba's hourly peaks 0.953 against 0.934, servegen's 1.068 against 0.968, the GPU gauge 0.925 against "
    "0.909; round 5's 0.919 / 0.968 / 0.899), the shared traces' MASE rose (alibaba 0.857, servegen 1.006 against "
    "0.827 / 0.962), M4's OWA to 0.487 (0.480), and the level-shift kind stayed far above its best peer (MASE "
    "2.50-3.10 against 1.46-2.72). In the simulator it moved servegen's evaluated week outside 1.5x the objective "
    "(0.165 % shortage against 0.121 %, tune picking targetQuantile 0.5 on its 3.5 days of history). Rejected: the "
    "three synthetic series outweighed M4's 207 and the real traces in an equal-weight geometric mean, and the "
    "choice did not hold where nothing was tuned. The shipped pick stays the rule's on round 5's units; the kinds' "
    "seeds are reported (the `kind:` and `kindtest:` columns and the synthetic kinds' section). Round 7 (commit "
    "5cdcb5a, reverted next): among the configs within 1 % of round 5's pick on every one of its units, the lowest "
    "geometric mean with the kinds' seed 1 too; written after this table was seen, it picked shrink-inverse<7, to "
    "be adopted only through gates set down before they ran. The fresh-seed gate failed: on kind seeds 30-99 "
    "(never scored before) bursts 0.798 against 0.882 and tokens 0.926 against 1.102, but level shifts 1.03349 "
    "against 1.03341, above by 0.008 % where the gate said at or below. A second try (commit 9563b49, reverted "
    "next) gated on parts nobody had scored under it: kind seeds 100-199 within 0.5 % of the equal-share rule "
    "passed (bursts 0.799 against 0.890, level shifts 1.01466 against 1.01465, tokens 0.931 against 1.118), but "
    "the simulator's evaluated weeks failed: servegen 0.165 % shortage, outside 1.5x the objective, as under round "
    "6's pick. Tune replays servegen's 3.5 days of history, where the rule acts, finds the sharper forecasts meet "
    "the objective at targetQuantile 0.5, and the evaluated week is then short. Not adopted. A third look (the "
    "option as the default in a scratch copy; `simulate_bench.py --short-history 4,5,6` runs the new units) with "
    "a gate set down before it ran, on 36 simulator units (the evaluated weeks, the kinds' seeds 2-9 and each "
    "shared trace's evaluated week after 4, 5 and 6 days of history): objective met on 29 against 27 and "
    "utilization 0.7 points up, but within 1.5x on 31 against 32; the unit lost is servegen's evaluated week "
    "again, whose shortage was then 93 % one 10-minute spike (the step docs/bench-simulate.md names). Not "
    "adopted.")


# Rounds 8-11 and 13-14 ran outside this table (PROTOCOL_CONFIGS restricted to the shipped config and the new ones);
# each is a commit, reverted next, whose message has its gate and every number. Round 12's configs are in the table.
LATER_ROUNDS = (
    "Rounds 8-11 (each a commit reverted next, its gate set down before its test-on part ran): round 8 (d3d70a6) "
    "applied the median's level correction only where it had lowered the honest median's MASE on the inner folds; "
    "the rule kept the shipped config (alibaba's trace 0.578 -> 0.659 outweighed M4's choose half 0.780 -> 0.767). "
    "Round 9 (fde3ded) estimated the correction only from inner folds whose pick had stood on its 7 folds (on a "
    "two-week history the recent residuals were the shrunk pool mean's, the last value held among it): the rule "
    "picked it on round 5's units (0.7282 against 0.7300), the kinds' seeds 2-9 improved (bursts 0.904 -> 0.876, "
    "level shifts 1.011 -> 0.945, tokens unchanged) and M4's test half did not move, but the held-out series' "
    "geometric mean rose 0.013 % (servegen's hourly peaks 0.8111 -> 0.8119) where its gate, written without a "
    "tolerance, said not above: not adopted, and later gates carry tolerances set beforehand. Round 10 (41a8796): "
    "below 7 inner folds a weighted median of the pool instead of its weighted mean: the shared traces' one-week "
    "windows went 1.009 -> 1.046 (the mean's averaging gain lost), so the rule kept the shipped config. Round 11 "
    "(6d84e0d): the last value held only in the pool of a history without a daily cycle by the M4 test: the test "
    "reads the synthetic gauges' slow drift as a cycle (gauge unit 0.786 -> 0.949), so the rule kept the shipped "
    "config. Round 12 (in the table: its two configs, run under one gate set down first, with tolerances): below 7 "
    "inner folds every candidate had an equal share of the rest whatever its score, and the last value held is "
    "13.8x / 7.8x seasonal naive's MASE on the bursts' and the tokens' seed 2 (a daily cycle). Left out of the "
    "pool (fast4/.../shrink<7) the gauge unit went 0.786 -> 0.970 and the rule kept the shipped config. Shared "
    "only among the candidates the best one did not beat on every one of k >= 2 inner folds "
    "(fast4+naive/.../unrefuted<7), the rule picked it on round 5's units and in every leave-one-trace-out; then, "
    "on the test-on part, within the gate's tolerances: the held-out series' geometric mean x 1.00007 (<= 1.005), "
    "M4's test OWA unchanged, the kinds' seeds 2-9 bursts 0.904 -> 0.809, level shifts 1.011 -> 1.012 (<= 1.01x), "
    "tokens 1.123 -> 0.989; and on the simulator's 36 test-on units the objective met on 28 against 27, within "
    "1.5x on 33 against 32, 0 violations (servegen's evaluated week 0.121 % -> 0.094 %). Adopted: the default. "
    "Rounds 13-14 (8d7c77f, one gate with round 12's steps and tolerances, set down first): a damped Holt-Winters "
    "fitted on a grid (models.DampedHoltWinters, one pass for every inner fold) in the pool, with and without Theta, "
    "under round 12's rule. Round 13: the rule picked the pool with Theta (M4's choose half 0.7804 -> 0.7408), which "
    "failed on the test-on kinds (one-week tokens 0.989 -> 1.133): below four days Theta's seasonality test cannot "
    "see even a perfect daily cycle and Theta drew a flat line (found on the choose-on seed 1; Theta now assumes the "
    "cycle there). Round 14, with that Theta: the rule picked it on round 5's units and in every leave-one-trace-"
    "out; on the test-on part M4's test OWA 0.4521 -> 0.4472 and the kinds' seeds 2-9 bursts 0.809 -> 0.764, level "
    "shifts 1.012 -> 0.800, tokens 0.989 -> 0.898, but the held-out series' geometric mean 0.6895 -> 0.6987 (x 1.013, "
    "over the 1.005 allowed: alibaba's 5-minute peaks 0.919 -> 0.958, the GPU-in-use gauge 0.899 -> 0.946). Not "
    "adopted; hw stays a model to choose by name."
    " Round 15 (its gate set down first in commit 0657ca6, before any "
    "test-on run; run outside this table, whose columns predate it): a recent level shift found by a test "
    "(forecast/shifts.py: binary segmentation of the last week's hours less each hour of the day's mean, each split "
    "the OLS-CUSUM test at 1e-9 under its Kolmogorov limit with a Bartlett long-run variance, 12 h or more either "
    "side, a change of 1.25x or more either way and, from two weeks of history, confirmed on the changes from a "
    "week earlier) and the history before it scaled to the newest level for every candidate and the inner folds "
    "(AutoForecaster level_shifts=12, forecast.backtest LEVEL_SHIFTS). Chosen on the choose-on part and the level-"
    "shift kind's seed 1 alone, the rule's geometric mean over round 5's units (shipped 0.72992): at 1e-6 with any "
    "size 0.7349 (servegen's trace 0.733 -> 0.750, the gauge unit 0.786 -> 0.801: its drift read as shifts), with "
    "1.25x 0.7324, with 1.5x 0.72984; at 1e-9 with 1.25x 0.72982 (picked; no trace unit moves, so every leave-one-"
    "trace-out picks it too; seed 1 1.136 -> 0.883, 0.991 with 24 h after the shift). Test-on, every step of the "
    "gate held: the held-out geometric mean 0.68946 -> 0.69017 (x 1.001, <= 1.005: servegen's 10-minute peaks 0.968 "
    "-> 0.973, its 80 % coverage 69.6 % -> 69.0 %, nothing else moved), M4's test OWA 0.4521 unchanged, the shared "
    "traces unchanged, the kinds' seeds 2-9 level shifts 1.011 -> 0.873 (at or below the candidates' median on 8 of "
    "8, was 1 of 8), bursts and tokens unchanged; the simulator's 36 units (bench/simulate_gate.py) objective met on "
    "28 (28), within 1.5x on 33 (33), mean utilization 0.674 -> 0.677, 0 violations. Adopted (commit 74f0c3a), "
    "then reverted before it landed, on findings outside its gate: a gauge that rises steadily (GPUs in use over "
    "a ramp-up week, tests/test_history.py) was read as a run of shifts and forecast "
    "at 33 where it stood at 40 (forecast q0.5; 35-45 before), and the one-week windows of the held-out series lost "
    "(related 0.962 -> 0.965, independent 0.772 -> 0.788, the GPU gauge's second week 1.375 -> 1.555): a drift is "
    "read as steps. The real held-out series gained nothing (x 1.001); what it gained was on the synthetic kinds. "
    "In the simulator the untuned default policy on alibaba's fifth day, a real step (x3), lost goodput 0.903 -> "
    "0.897 for no shortage gained. A test that tells a step from a drift (a trend within the newest segment) would "
    "need a round of its own."
    " Round 16 (commit 3d68a33, reverted next; its gate set down there first, round 15's steps plus the three "
    "findings that reverted it): that test. Each CUSUM split stands only where a step (two levels and the break) "
    "explains the hours it splits better, by the Schwarz criterion, than a drift: the better of a linear trend "
    "and a continuous broken line with its knot searched (Perron 1989's changing trend), by more than 2, 6 or 10 "
    "(a BIC difference read as twice the log Bayes factor, Kass & Raftery 1995's positive / strong / very "
    "strong). The rule over round 5's units (shipped 0.729923): 0.729900 at 2 and at 6 (the same on every unit: "
    "the week unit 1.00938 -> 1.00919, nothing else moved, so every leave-one-trace-out the same), 0.730130 at "
    "10; picked 6 (the tie to the larger threshold); the level-shift kind's seed 1 1.136 -> 0.991. Test-on, steps "
    "1-6 held: the held-out geometric mean x 1.001 (servegen's 10-minute peaks, as round 15), M4's test OWA "
    "0.4521 and the shared traces unchanged, the kinds' seeds 2-9 level shifts 1.011 -> 0.900 (bursts, tokens "
    "unchanged), coverage within 0.6 points, and the ramp-up week now forecast where it stood "
    "(tests/test_history.py passes). Steps 7 and 8 failed: the GPU gauge's one-week windows 0.772 -> 0.788 (its "
    "second week 1.375 -> 1.555, over the 1.005x allowed), and alibaba's untuned fifth day goodput 0.901 -> 0.891 "
    "(test_every_policy_on_a_real_trace fails on it). Neither was a drift: the gauge's week, 96 hours in, had "
    "held about 28 GPUs for 67 hours and 40 for the last day, and fell back to 26 in the forecast day (a step "
    "explains it better than a drift by 23 in BIC; what it lacked was persistence), and alibaba's fifth day is a "
    "real x3 step that the forecast follows. Not adopted: telling a step from a drift does not tell a step that "
    "stays from a plateau that ends, and on this gauge and in the simulator following a step costs more than it "
    "gains.")


def decide(table: dict[str, dict[str, dict]]) -> dict:
    """The rule, on a table config -> unit -> scores: the pick on round 5's choose-on units (shipped), leave-one-
    trace-out on them, and round 6's pick with the synthetic kinds' seed 1 too, reported apart (ROUND6_REJECTED)."""
    units = list(next(iter(table.values())))
    trace_units = [u for u in units if u.startswith("trace:")]
    kinds = [u for u in units if u.startswith(("week:", "gauge:"))]
    synthetic = [u for u in units if u.startswith("kind:")]

    def pick(choose_units: list[str]) -> str:
        return min(table, key=lambda c: geomean([table[c][u]["rel_mase"] for u in choose_units]))

    shipped = pick(["m4_choose", *trace_units, *kinds])
    # Round 6 chose with the synthetic kinds' seed 1 too; its pick lost on the test-on part (ROUND6_REJECTED), so the
    # shipped pick stays the rule's on round 5's units and the kinds' seeds are reported beside it.
    with_kinds = pick(["m4_choose", *trace_units, *kinds, *synthetic]) if synthetic else None
    loto = {}
    for u in trace_units:
        chosen = pick(["m4_choose", *[t for t in trace_units if t != u], *kinds])
        loto[u.removeprefix("trace:")] = {"chosen": chosen, **table[chosen][u]}
    return {"shipped_pick": shipped, "test_m4": {"config": shipped, **table[shipped]["m4_test"]},
            "leave_one_trace_out": loto, "pick_with_kinds": with_kinds}


def protocol(traces: dict[str, pd.Series], workers: int = 2, m4_limit: int | None = None) -> dict:
    """Every PROTOCOL_CONFIGS entry on every unit; the choices the rule makes; their test-on scores."""
    from joblib import Parallel, delayed
    ids, train, test = load_m4()
    k = m4_limit or len(train)
    full = [np.concatenate([a, b]) for a, b in zip(train[:k], test[:k])]
    units: dict[str, list[tuple[np.ndarray, list[int], int]]] = {
        "m4_choose": [(full[i], [len(train[i])], M4_H) for i in range(0, k, 2)],
        "m4_test": [(full[i], [len(train[i])], M4_H) for i in range(1, k, 2)]}
    for name, series in traces.items():
        y = series.to_numpy(dtype=float)
        units[f"trace:{name}"] = [(y, daily_cuts(len(y)), TRACE_H)]
    # The kinds the owner's held-out traces are (issue 13), as far as the shared data has them: one week of
    # history (every whole week of the shared traces, 5 daily folds from two days on, as `backtest --folds 7`
    # does on a week; rounds 1-2 had each trace's first week only), and a flat gauge (synthetic: nothing shared is
    # one).
    units["week:shared traces"] = [(week.to_numpy(dtype=float), WEEK_ORIGINS, TRACE_H) for week in choose_weeks()]
    units["gauge:synthetic"] = [(flat_gauge(seed), daily_cuts(21 * 24), TRACE_H) for seed in range(6)]
    # The synthetic held-out kinds (bench/kinds.py, round 6): seed 1 chooses, seeds 2-9 test; hourly, at the origins
    # `backtest --folds 7` scores.
    for kind in KINDS:
        for prefix, seeds in (("kind", CHOOSE_SEEDS), ("kindtest", TEST_SEEDS)):
            units[f"{prefix}:{kind}"] = [(y, backtest_origins(len(y)), TRACE_H)
                                         for y in (kind_hourly(kind, seed).to_numpy(dtype=float) for seed in seeds)]
    jobs = [(c["name"], u, i) for c in PROTOCOL_CONFIGS for u, items in units.items() for i in range(len(items))]
    by_name = {c["name"]: c for c in PROTOCOL_CONFIGS}
    started = time.perf_counter()
    log(f"protocol: {len(PROTOCOL_CONFIGS)} configs x {sum(len(v) for v in units.values())} series ...")
    results = Parallel(n_jobs=workers, batch_size=4)(
        delayed(_protocol_one)((by_name[c], units[u][i][0], units[u][i][1], units[u][i][2])) for c, u, i in jobs)
    scored: dict[str, dict[str, dict]] = {c["name"]: {} for c in PROTOCOL_CONFIGS}
    for (c, u, i), frames in zip(jobs, results):
        y, cuts, h = units[u][i]
        one = _score_frames(frames, y, cuts, h)
        acc = scored[c].setdefault(u, {"mase": [], "snaive_mase": [], "inside80": [], "inside90": [], "forecasts": []})
        for key in ("mase", "snaive_mase", "inside80", "inside90"):
            acc[key].append(one[key])
        acc["forecasts"].append([f[:, 2] for f in frames])
    table: dict[str, dict[str, dict]] = {}
    for c, per_unit in scored.items():
        table[c] = {}
        for u, acc in per_unit.items():
            m, sn = np.concatenate(acc["mase"]), np.concatenate(acc["snaive_mase"])
            row = {"mase": float(np.nanmean(m)), "rel_mase": float(np.nanmean(m) / np.nanmean(sn)),
                   "coverage_80": float(np.mean(np.concatenate(acc["inside80"]))),
                   "coverage_90": float(np.mean(np.concatenate(acc["inside90"])))}
            if u.startswith("m4_"):
                idx = range(0, k, 2) if u == "m4_choose" else range(1, k, 2)
                tr, te = [train[i] for i in idx], [test[i] for i in idx]
                sc = m4_score([f[0] for f in acc["forecasts"]], tr, te)
                n2 = m4_score([naive2(t) for t in tr], tr, te)
                row.update({"smape": sc["smape"], "owa": owa(sc, n2)})
            table[c][u] = row
    out = {"configs": PROTOCOL_CONFIGS, "table": table, **decide(table), "m4_split": "even positions choose, odd "
           "positions test", "series_m4": k, "wall_seconds": time.perf_counter() - started}
    shipped, loto = out["shipped_pick"], out["leave_one_trace_out"]
    log(f"protocol: pick {shipped}; M4 test OWA {table[shipped]['m4_test'].get('owa'):.3f}; LOTO "
        + ", ".join(f"{n} {v['chosen']} rel {v['rel_mase']:.3f}" for n, v in loto.items()))
    return out


# ----------------------------------------------------------------------------- the interval protocol (issue 13)
#
# The interval model (forecast.calibrate.IntervalModel) is chosen the same way, with the point forecasts fixed
# (the shipped AutoForecaster: its median, hence MASE, is the same under every candidate). ONE rule: the fewest
# 80 % and 90 % coverages outside +-5 points over the choose-on units (issue 13's target, counted where choices are
# made; round 3), then the lowest geometric mean, over the same units, of the mean pinball loss over the bounds'
# quantiles (0.05, 0.1, 0.9, 0.95, 0.99; a proper scoring rule: it rewards calibration and sharpness together)
# relative to "level", issue 2's model. Rounds 1-2 used the loss alone; in round 3 it picked bands that cover 70 % /
# 78 % on the one-week unit. Choose-on: M4's even positions, the shared traces (leave-one-trace-out), the week and
# gauge units; test-on: M4's odd positions, the trace left out and the held-out series.

INTERVAL_QUANTILES = [0.05, 0.1, 0.5, 0.9, 0.95, 0.99]
BOUNDS = (0.05, 0.1, 0.9, 0.95, 0.99)


def _interval_models() -> dict:
    """The candidates. Round 1: the error's unit and grouping, short histories by day-over-day changes ("level" is
    issue 2's model as it was, "binned/changes" round 1's pick). Round 2 (binned, which round 1 picked): the short
    histories' fallback (refits every 6, 12 or 24 hours) x the adaptive levels' step (0, 0.1, 0.2)."""
    from forecast.calibrate import MIN_CALIBRATION_FOLDS as MIN
    from forecast.calibrate import IntervalModel
    models = {"level": IntervalModel("level", 1, 0, "own", aci_gamma=0.2),
              "point+mase": IntervalModel("point+mase", 1, MIN, "changes", aci_gamma=0.2),
              "mase": IntervalModel("mase", 1, MIN, "changes", aci_gamma=0.2),
              "raw": IntervalModel("raw", 1, MIN, "changes", aci_gamma=0.2)}
    for label, how, step in (("changes", "changes", 0), *((f"refit{k}", "refit", k) for k in (6, 12, 24))):
        for gamma in (0.0, 0.1, 0.2):
            models[f"binned/{label}/aci{gamma:g}"] = IntervalModel("raw", 2, MIN, how, step, gamma)
    return models


INTERVAL_TEXT = {
    "level": "issue 2's: error / (point + a fifth of the last week's mean), one group; no fallback",
    "point+mase": "error / (point + the MASE scale of the fold's window), one group",
    "mase": "error / the MASE scale of the fold's window, one group",
    "raw": "the error in demand units, one group",
    "binned": "the error in demand units, Mondrian groups: hours above / at or below the path's median point; "
              "`/changes` or `/refitK`: the short-history fallback (the history's day-over-day changes, round 1's; "
              "or the model refit every K hours, forecast.calibrate.refit_errors); `/aciG`: the adaptive levels' "
              "step G (0: split conformal alone)"}
ROUND1_PICK = "binned/changes/aci0.2"
# The short-history replay (the defect) runs these and the code's default only: it refits every hour of a day.
SHORT_HISTORY_MODELS = ("level", ROUND1_PICK)


def _interval_one(args) -> list[dict[str, np.ndarray]]:
    """The shipped AutoForecaster fitted at each cut, its quantiles under every interval model."""
    y, start, cuts, h = args
    from forecast.backtest import AutoForecaster
    from forecast.calibrate import calibrated_predict
    history = pd.Series(y, index=pd.date_range(start, periods=len(y), freq="h"))
    out = []
    for o in cuts:
        auto = AutoForecaster(horizon=h).fit(history.iloc[:o])
        out.append({name: calibrated_predict(auto.model_, auto.residuals_, auto.history_, h, INTERVAL_QUANTILES,
                                             auto.origins_, auto.points_, level_correction=auto._corrects(),
                                             intervals=model).to_numpy() for name, model in _interval_models().items()})
    return out


def _interval_scores(cases: list[tuple[np.ndarray, list[int], int]], frames: list[list[np.ndarray]]) -> dict:
    """Pooled coverage, share below q0.9 / q0.99, mean scaled pinball per bound, their mean (the rule's loss) and,
    with several series, the spread of per-series coverage."""
    inside: dict[str, list] = {"coverage_80": [], "coverage_90": [], "below_q0.9": [], "below_q0.95": [],
                               "below_q0.99": [], "zero_at_zero_q0.05": []}
    loss: dict[float, list[float]] = {q: [] for q in BOUNDS}
    per_series: dict[int, list[float]] = {80: [], 90: []}
    col = {q: INTERVAL_QUANTILES.index(q) for q in INTERVAL_QUANTILES}
    for (y, cuts, h), series_frames in zip(cases, frames):
        mine: dict[int, list] = {80: [], 90: []}
        for o, f in zip(cuts, series_frames):
            actual, scale = y[o:o + h], seasonal_scale(y[:o], SEASON)
            real = np.isfinite(actual)
            a = actual[real]
            in80 = (f[real, col[0.1]] <= a) & (a <= f[real, col[0.9]])
            in90 = (f[real, col[0.05]] <= a) & (a <= f[real, col[0.95]])
            inside["coverage_80"].append(in80)
            inside["coverage_90"].append(in90)
            for q in (0.9, 0.95, 0.99):
                inside[f"below_q{q}"].append(a <= f[real, col[q]])
            inside["zero_at_zero_q0.05"].append((a == 0) & (f[real, col[0.05]] <= 0))  # covered, whatever q0.95
            mine[80].append(in80)
            mine[90].append(in90)
            for q in BOUNDS:
                loss[q].append(pinball(actual, f[:, col[q]], q, scale))
        for lv in (80, 90):
            per_series[lv].append(float(np.mean(np.concatenate(mine[lv]))))
    row = {k: float(np.mean(np.concatenate(v))) for k, v in inside.items()}
    row.update({f"pinball_{q:g}": _nanmean(v) for q, v in loss.items()})
    row["loss"] = float(np.mean([row[f"pinball_{q:g}"] for q in BOUNDS]))
    if len(cases) > 3:
        for lv in (80, 90):
            row[f"per_series_coverage_{lv}"] = [float(x) for x in np.percentile(per_series[lv], [10, 50, 90])]
    if len(cases) == 1 and len(mine[80]) >= 2 * FOLDS:  # how far FOLDS folds, a trace's protocol, wander
        for lv in (80, 90):
            windows = [np.concatenate(mine[lv][i:i + FOLDS]) for i in range(len(mine[lv]) - FOLDS + 1)]
            cov = np.array([w.mean() for w in windows if len(w)])
            within = float(np.mean(np.abs(100 * cov - lv) <= 5))
            row[f"window_coverage_{lv}"] = {"windows": len(cov), "within_5": within, "min": float(cov.min()),
                                            "max": float(cov.max())}
    return row


def interval_protocol(traces: dict[str, pd.Series], heldout: dict[str, pd.Series], workers: int = 2,
                      m4_limit: int | None = None) -> dict:
    """Every interval model on every unit; the rule's pick on the choose-on part, leave-one-trace-out, test-on."""
    from joblib import Parallel, delayed

    from forecast.calibrate import INTERVALS
    models = _interval_models()
    ids, train, test = load_m4()
    k = m4_limit or len(train)
    epoch = pd.Timestamp("2001-01-01", tz="UTC")
    units: dict[str, list[tuple[np.ndarray, pd.Timestamp, list[int], int]]] = {
        "m4_choose": [(np.concatenate([train[i], test[i]]), epoch, [len(train[i])], M4_H) for i in range(0, k, 2)],
        "m4_test": [(np.concatenate([train[i], test[i]]), epoch, [len(train[i])], M4_H) for i in range(1, k, 2)]}
    for name, series in traces.items():
        units[f"trace:{name}"] = [(series.to_numpy(dtype=float), series.index[0], daily_cuts(len(series)), TRACE_H)]
    units["week:shared traces"] = [(week.to_numpy(dtype=float), week.index[0], WEEK_ORIGINS, TRACE_H)
                                   for week in choose_weeks()]
    units["gauge:synthetic"] = [(flat_gauge(seed), epoch, daily_cuts(21 * 24), TRACE_H) for seed in range(6)]
    for name, (series, cuts) in heldout.items():
        units[f"heldout:{name}"] = [(series.to_numpy(dtype=float), series.index[0], cuts, TRACE_H)]
    jobs = [(u, i) for u, items in units.items() for i in range(len(items))]
    started = time.perf_counter()
    log(f"interval protocol: {len(models)} interval models x {len(jobs)} series ...")
    results = Parallel(n_jobs=workers, batch_size=4)(
        delayed(_interval_one)((units[u][i][0], units[u][i][1], units[u][i][2], units[u][i][3])) for u, i in jobs)
    by_unit: dict[str, list] = {}
    for (u, _), frames in zip(jobs, results):
        by_unit.setdefault(u, []).append(frames)
    table: dict[str, dict[str, dict]] = {}
    for name in models:
        table[name] = {u: _interval_scores([(y, cuts, h) for y, _, cuts, h in units[u]],
                                           [[f[name] for f in frames] for frames in by_unit[u]]) for u in units}
    for name in models:
        for u in units:
            table[name][u]["rel_loss"] = table[name][u]["loss"] / table["level"][u]["loss"]
    trace_units = [u for u in units if u.startswith("trace:")]
    kinds = [u for u in units if u.startswith(("week:", "gauge:"))]

    def pick(choose_units: list[str]) -> str:
        return min(table, key=lambda c: (coverage_misses_of(table[c], choose_units),
                                         geomean([table[c][u]["rel_loss"] for u in choose_units])))

    shipped = pick(["m4_choose", *trace_units, *kinds])
    loto = {u.removeprefix("trace:"): {"chosen": (c := pick(["m4_choose", *[t for t in trace_units if t != u],
                                                             *kinds])), **table[c][u]} for u in trace_units}
    code_default = next((n for n, m in models.items() if m == INTERVALS), repr(INTERVALS))
    log(f"interval protocol: pick {shipped} (forecast.calibrate.INTERVALS is {code_default}); "
        f"in {time.perf_counter() - started:.0f}s")
    return {"models": {n: m._asdict() for n, m in models.items()}, "table": table, "shipped_pick": shipped,
            "code_default": code_default, "leave_one_trace_out": loto, "units": list(units),
            "short_history": short_history_check(), "wall_seconds": time.perf_counter() - started}


def coverage_misses_of(row: dict[str, dict], units: list[str]) -> int:
    """How many of the units' 80 % and 90 % coverages are outside +-5 points (issue 13's target)."""
    return sum(abs(100 * row[u][f"coverage_{lv}"] - lv) > 5 for u in units for lv in (80, 90))


def short_history_check(days: int = 5) -> dict[str, dict]:
    """The defect issue 13 names: each sub-hourly trace's first `days` days replayed as the simulator forecasts the
    last of them (refit every hour on the complete hours before it, hourly max): per interval model, the largest q0.9
    and q0.99 over the horizon as a multiple of the history's peak (median and worst over the refits), and the
    share of the next hour's peak at or below q0.9."""
    from controller.observe import hourly_history
    from forecast.backtest import AutoForecaster
    from forecast.calibrate import INTERVALS, calibrated_predict
    from forecast.history import at_own_step, load_history
    models = {n: m for n, m in _interval_models().items() if n in SHORT_HISTORY_MODELS or m == INTERVALS}
    out = {}
    for path in sorted((DATA / "traces").glob("*min.csv")):
        raw = at_own_step(load_history(path))
        raw = raw[raw.index < raw.index[0] + pd.Timedelta(days=days)]
        ratios: dict[str, dict[str, list]] = {n: {"q0.9": [], "q0.99": [], "below": []} for n in models}
        for now in pd.date_range((raw.index[-1] - pd.Timedelta(days=1)).ceil("h"), raw.index[-1], freq="h"):
            history = hourly_history(raw[raw.index < now], "max", now)
            auto = AutoForecaster(horizon=TRACE_H).fit(history)
            peak = float(np.nanmax(history.to_numpy(dtype=float)))
            nxt = raw[(raw.index >= now) & (raw.index < now + pd.Timedelta(hours=1))].max()
            for name, model in models.items():
                frame = calibrated_predict(auto.model_, auto.residuals_, auto.history_, TRACE_H, [0.9, 0.99],
                                           auto.origins_, auto.points_, level_correction=auto._corrects(),
                                           intervals=model)
                ratios[name]["q0.9"].append(frame[0.9].max() / peak)
                ratios[name]["q0.99"].append(frame[0.99].max() / peak)
                ratios[name]["below"].append(float(nxt <= frame[0.9].iloc[0]))
        out[path.stem] = {n: {"q0.9_over_peak_median": float(np.median(r["q0.9"])),
                              "q0.9_over_peak_max": float(np.max(r["q0.9"])),
                              "q0.99_over_peak_median": float(np.median(r["q0.99"])),
                              "q0.99_over_peak_max": float(np.max(r["q0.99"])),
                              "next_hour_below_q0.9": float(np.mean(r["below"]))} for n, r in ratios.items()}
    return out


# ----------------------------------------------------------------------------- report

def geomean(xs) -> float | None:
    xs = [x for x in xs if x is not None and x > 0 and np.isfinite(x)]
    return float(np.exp(np.mean(np.log(xs)))) if xs else None


def targets(report: dict) -> dict:
    t = {}
    traces = report["traces"]
    hr_ok = all(v.get("headroom") for v in traces.values())
    if hr_ok:
        per = {}
        for name, v in traces.items():
            peers = [m["mase"] for m in v["peers"].values() if m.get("mase") is not None]
            auto = v["headroom"]["models"]["auto"]["mase"]
            per[name] = {"auto_mase": auto, "best_peer_mase": min(peers), "pass": auto <= min(peers)}
        t["auto_mase_le_best_peer"] = {"per_trace": per, "pass": all(p["pass"] for p in per.values())}
        ratios = [v["headroom"]["models"]["auto"]["mase"] / v["peers"]["SeasonalNaive24"]["mase"]
                  for v in traces.values()]
        g = geomean(ratios)
        t["geomean_mase_over_sn24_le_0.75"] = {"value": g, "pass": g is not None and g <= 0.75}
        for lv in (80, 90):
            covs = {n: v["headroom"]["models"]["auto"][f"coverage_{lv}"] for n, v in traces.items()}
            t[f"coverage_{lv}_within_5pts"] = {
                "per_trace": covs, "pass": all(c is not None and abs(100 * c - lv) <= 5 for c in covs.values())}
        speed = {n: {"auto_s_per_fold": v["headroom"]["models"]["auto"]["seconds_per_fold"],
                     "mstl_s_per_fold": v["peers"]["MSTL24_168"]["seconds_per_fold"]} for n, v in traces.items()}
        for s in speed.values():
            s["pass"] = s["auto_s_per_fold"] <= s["mstl_s_per_fold"]
        t["speed_le_statsforecast_mstl_traces"] = {"per_trace": speed, "pass": all(s["pass"] for s in speed.values())}
        from forecast.backtest import FAST
        never = {}
        for name, v in traces.items():
            models = v["headroom"]["models"]
            cands = [models[c]["mase"] for c in FAST if models.get(c, {}).get("mase") is not None]
            med = float(np.median(cands)) if cands else None
            never[name] = {"auto_mase": models["auto"]["mase"], "median_candidate_mase": med,
                           "pass": med is not None and models["auto"]["mase"] <= med}
        t["auto_le_median_of_candidates"] = {"per_trace": never, "pass": all(n["pass"] for n in never.values())}
    held = {n: v for n, v in report.get("heldout", {}).items() if v.get("auto") is not None}
    if held:  # a check that the targets carry over to series like the traces, not a target of its own
        per = {n: {"auto_mase": v["auto"], "best_peer_mase": min(v["peers"].values()),
                   "pass": v["auto"] <= min(v["peers"].values())} for n, v in held.items()}
        t["heldout_auto_mase_le_best_peer"] = {"per_series": per, "pass": all(p["pass"] for p in per.values())}
        t["heldout_auto_mase_le_1.05x_best_peer"] = {"pass": all(p["auto_mase"] <= 1.05 * p["best_peer_mase"]
                                                             for p in per.values())}
        never = {n: {"auto_mase": v["auto"], "median_candidate_mase": float(np.median(list(v["candidates"].values())))}
                 for n, v in held.items() if v.get("candidates")}
        if never:
            t["heldout_auto_le_median_of_candidates"] = {
                "per_series": never, "pass": all(r["auto_mase"] <= r["median_candidate_mase"] for r in never.values())}
        g = geomean([v["auto"] / v["peers"]["SeasonalNaive24"] for v in held.values()])
        # each peer's geometric mean over the series it finished (AutoARIMA is dropped where a fit takes over a
        # minute), against auto's on the same series
        versus = {}
        for m in sorted({m for v in held.values() for m in v["peers"]} - {"SeasonalNaive24"}):
            done = [v for v in held.values() if m in v["peers"]]
            versus[m] = {"series": len(done), "peer": geomean([v["peers"][m] / v["peers"]["SeasonalNaive24"]
                                                                for v in done]),
                         "auto": geomean([v["auto"] / v["peers"]["SeasonalNaive24"] for v in done])}
        t["heldout_geomean_mase_over_sn24_le_0.80_and_below_every_peer"] = {
            "value": g, "peers": versus,
            "pass": g is not None and g <= 0.80 and all(r["auto"] < r["peer"] for r in versus.values())}
        for lv in (80, 90):
            covs = {n: v.get(f"coverage_{lv}") for n, v in held.items()}
            t[f"heldout_coverage_{lv}_within_5pts"] = {
                "per_series": covs, "pass": all(c is not None and abs(100 * c - lv) <= 5 for c in covs.values())}
    # issue 13's per-trace target on each one-week history and each synthetic kind's series, and the geometric
    # mean by kind of history (by kind and part for the synthetic kinds)
    for name, summary, per in (("weeks", week_summary(report.get("weeks", {})), "per_kind"),
                               ("kinds", kinds_summary(report.get("kinds", {})), "per_group")):
        if summary:
            t.update(group_targets(name, summary, per))
    m4 = report.get("m4", {})
    if "headroom" in m4.get("methods", {}):
        hr = m4["methods"]["headroom"]
        t["m4_owa_le_0.55"] = {"value": hr["owa"], "pass": hr["owa"] <= 0.55}
        if "statsforecast MSTL" in m4["methods"]:
            mstl = m4["methods"]["statsforecast MSTL"]["seconds_per_series"]
            t["speed_le_statsforecast_mstl_m4"] = {
                "headroom_s_per_series": hr["seconds_per_series"], "mstl_s_per_series": mstl,
                "pass": hr["seconds_per_series"] <= mstl}
    if report.get("m4_global"):
        g = report["m4_global"]
        # the model `headroom train` scores (the combination with auto is this bench's only)
        test_owa = g["scores"]["global"]["odd"]["owa"]
        t["m4_owa_le_0.44_on_the_test_half"] = {"value": test_owa, "pass": test_owa <= 0.44,
                                                "all_414": g["scores"]["global"]["all"]["owa"],
                                                "combination_odd": g["scores"]["combination"]["odd"]["owa"]}
    if "sNaive" in m4.get("methods", {}):
        mine, pub = m4["methods"]["sNaive"], m4["published"]["sNaive"]
        t["scorer_reproduces_published_snaive"] = {
            "pass": abs(mine["smape"] - pub["smape"]) < 0.0015 and abs(mine["mase"] - pub["mase"]) < 0.0015
            and abs(mine["owa"] - pub["owa"]) < 0.0015}
    if report.get("scale"):
        t["scale_1000_series_under_120s"] = {"value": report["scale"]["wall_seconds"], "pass": report["scale"]["pass"]}
        peer = report["scale"].get("statsforecast_mstl", {})
        if "wall_seconds" in peer:
            t["scale_no_slower_than_statsforecast_mstl_same_run"] = {
                "headroom_seconds": report["scale"]["wall_seconds"], "mstl_seconds": peer["wall_seconds"],
                "pass": report["scale"]["wall_seconds"] <= peer["wall_seconds"]}
    return t


def group_targets(name: str, summary: dict[str, dict], per: str) -> dict[str, dict]:
    """Per group of a week_summary: auto within 1.05 x the best peer on every series, at or below its candidates'
    median MASE on every series (issue 13's "never hurts"), and its geometric mean below every peer's."""
    return {f"{name}_auto_le_median_of_candidates": {
                per: {k: f"{v['le_candidates_median']}/{v['windows']}" for k, v in summary.items()},
                "pass": all(v["le_candidates_median"] == v["windows"] for v in summary.values())},
            f"{name}_auto_le_1.05x_best_peer": {
                per: {k: f"{v['within_1.05']}/{v['windows']}" for k, v in summary.items()},
                "pass": all(v["within_1.05"] == v["windows"] for v in summary.values())},
            f"{name}_auto_geomean_below_every_peer": {
                per: {k: v["auto"] for k, v in summary.items()},
                "pass": all(v["auto"] < p for v in summary.values() for p in v["peers"].values() if p is not None)}}


PICKING = "auto picking on its 1-4 folds (min_selection_folds=0, the rule before round 3)"
POOLED = "auto serving its pool's mean below 7 folds (weak_evidence='mean', round 3's first try)"
WEEK_KINDS = {"choose": "shared hourly traces (choose-on)", "related": "their hourly peaks (held out, same weeks)",
              "independent": "GPUs in use (held out, independent)"}


KIND_VARIANTS = {"inverse": "auto sharing the rest by 1 / MASE^2 below 7 folds (weak_evidence='shrink-inverse')"}


def kind_group(row: dict) -> str:
    """A synthetic kind's series' group: its kind and the part it is in."""
    return f"{row['kind']} ({'choose-on' if row['seed'] in CHOOSE_SEEDS else 'test-on'})"


def week_summary(weeks: dict, groups=WEEK_KINDS, group_of=lambda v: v.get("kind"),
                 variants=(("picking", PICKING), ("pooled", POOLED))) -> dict[str, dict]:
    """Per group of series (the kinds of one-week history by default): geometric means of MASE / seasonal naive 24's
    (auto, each of `variants`, its candidates' median, each peer, over the series it finished), how many series auto
    is within 1.05 x and at or below the best peer, and auto's coverage (the mean over series)."""
    out = {}
    for kind in groups:
        rows = [v for v in weeks.values() if group_of(v) == kind and v.get("auto") is not None
                and v["peers"].get("SeasonalNaive24")]
        if not rows:
            continue
        peers = sorted({m for v in rows for m in v["peers"]} - {"SeasonalNaive24"})
        rel = lambda v, x: x / v["peers"]["SeasonalNaive24"]  # noqa: E731
        best = [min(v["peers"].values()) for v in rows]
        out[kind] = {"windows": len(rows), "auto": geomean([rel(v, v["auto"]) for v in rows]),
                     **{key: geomean([rel(v, v["variants"][label]) for v in rows if label in v.get("variants", {})])
                        for key, label in variants},
                     "candidates_median": geomean([rel(v, float(np.median(list(v["candidates"].values()))))
                                                   for v in rows]),
                     "peers": {m: geomean([rel(v, v["peers"][m]) for v in rows if m in v["peers"]]) for m in peers},
                     "within_1.05": sum(v["auto"] <= 1.05 * b for v, b in zip(rows, best)),
                     "le_candidates_median": sum(v["auto"] <= float(np.median(list(v["candidates"].values())))
                                                 for v in rows),
                     "at_or_below": sum(v["auto"] <= b for v, b in zip(rows, best)),
                     "coverage_80": float(np.mean([v["coverage_80"] for v in rows])),
                     "coverage_90": float(np.mean([v["coverage_90"] for v in rows]))}
    return out


WEEKS_INTRO = ("Every whole week of each series as a history of its own (bench/week_windows.py), scored as `headroom "
               "backtest --folds 7` scores a one-week trace: 5 daily origins from two days on, horizon 24. Each cell "
               "is the geometric mean over the windows of MASE / MASE of seasonal naive 24 on the same folds (a "
               "peer's over the windows it finished); 'within 1.05x' counts the windows where auto is at most 1.05 x "
               "that window's best peer, issue 13's per-trace target. The protocol chooses on the shared hourly "
               "traces' weeks (its `week` unit); the other two kinds are held out. Coverage: auto's 80 % / 90 % "
               "intervals, the mean over windows.")
KINDS_INTRO = ("The synthetic streams of the owner's held-out kinds (bench/kinds.py, written from the issues' "
               "description alone; the same streams as bench/simulate_kinds.py), each seed's hourly means scored as "
               "`headroom backtest --horizon 24 --folds 7 --step 24` scores them: 7 daily origins (two days of "
               "history before the first on the nine-day token stream). Seed 1 of each kind is a unit of the "
               "protocol's choose-on part (from round 6); seeds 2-9 are tested on. Cells as in the one-week table: "
               "geometric means of MASE / seasonal naive 24's, 'within 1.05x' per series. Beside auto: the "
               "inverse-MASE^2 rule below 7 inner folds (round 6's shrink-inverse<7; not the protocol's pick on "
               "either set of units, so not the default; it changes only histories under about nine days).")


def windows_markdown(rows: dict, title: str, intro: str, summary: dict, groups: dict,
                     variants: dict[str, str]) -> list[str]:
    """A table of `summary` (week_summary) per group, then every series' MASE beside its best peer's."""
    if not summary:
        return []
    peers = sorted({m for v in summary.values() for m in v["peers"]})
    lines = [title, "", intro, "",
             "| group | series | headroom auto | " + " | ".join(f"{label}" for label in variants.values())
             + " | its candidates' median | " + " | ".join(f"statsforecast {m}" for m in peers)
             + " | auto within 1.05x best peer | auto at or below it | cov 80 | cov 90 |",
             "|---" * (len(peers) + len(variants) + 8) + "|"]
    for kind, v in summary.items():
        lines.append(f"| {groups[kind]} | {v['windows']} | {_f(v['auto'])} | "
                     + "".join(f"{_f(v[key])} | " for key in variants)
                     + f"{_f(v['candidates_median'])} | " + " | ".join(_f(v["peers"].get(m)) for m in peers)
                     + f" | {v['within_1.05']} | {v['at_or_below']} | {_pct(v['coverage_80'])} | "
                       f"{_pct(v['coverage_90'])} |")
    lines += ["", "Per series (MASE):", "", "| series | auto | best peer | auto / best peer | cov 80 | cov 90 |",
              "|---|---|---|---|---|---|"]
    for name, v in rows.items():
        if v.get("auto") is None:
            continue
        best = min(v["peers"], key=v["peers"].get)
        lines.append(f"| {name} | {_f(v['auto'])} | {best} {_f(v['peers'][best])} | "
                     f"{_f(v['auto'] / v['peers'][best], 2)} | {_pct(v.get('coverage_80'))} | "
                     f"{_pct(v.get('coverage_90'))} |")
    return lines + [""]


def weeks_markdown(weeks: dict) -> list[str]:
    return windows_markdown(weeks, "## One-week histories (issue 13's one-week trace kind)", WEEKS_INTRO,
                            week_summary(weeks), WEEK_KINDS, {"picking": "auto picking on 1-4 folds (before)",
                                                              "pooled": "the pool's mean below 7 folds"})


def kind_groups(rows: dict) -> dict[str, str]:
    return {g: g for g in dict.fromkeys(kind_group(v) for v in rows.values())}


def kinds_summary(rows: dict) -> dict[str, dict]:
    return week_summary(rows, kind_groups(rows), kind_group, tuple(KIND_VARIANTS.items()))


def kinds_markdown(rows: dict) -> list[str]:
    return windows_markdown(rows, "## Synthetic held-out kinds (issue 13's held-out trace kinds)", KINDS_INTRO,
                            kinds_summary(rows), kind_groups(rows), KIND_VARIANTS)


def _f(x, nd=3) -> str:
    return "—" if x is None else f"{x:.{nd}f}"


def _pct(x) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def markdown(report: dict) -> str:
    lines = ["# Forecast benchmark: headroom vs statsforecast", "",
             f"Generated {report['generated']} by `bench/forecast_bench.py` on {report['machine']}. "
             f"Peers: statsforecast {report.get('statsforecast', '?')} (bench/.venv-peers). "
             "Everything is scored by one scorer, `forecast.metrics` (MASE scale = mean absolute 24-h "
             "seasonal difference of each fold's fitting window).", "",
             "Traces: rolling origin, last 7 origins 24 h apart, horizon 24, fit only on data before each origin. "
             "Peers get gaps in the fitting window filled by linear interpolation (statsforecast rejects NaN); "
             "headroom fills its own way (forecast/models.py `fill_gaps`). NaN actuals are not scored. "
             "Coverage is pooled over all scored hours. Time = wall seconds per fold (fit + predict), "
             "peers after a numba warm-up.", "",
             "Reproduce: `bash bench/setup_peers.sh && nice -n 10 bench/.venv-peers/bin/python "
             "bench/peers/run_peers.py && python bench/forecast_bench.py` (raw peer forecasts: "
             "bench/results/peers.json; scores: bench/results/forecast.json).", ""]
    if report.get("headroom_missing"):
        lines += [f"**headroom side not run**: {report['headroom_missing']}", ""]
    for name, v in report["traces"].items():
        lines += [f"## {name}", "", "| model | MASE | sMAPE | cov 80 | cov 90 | s/fold |", "|---|---|---|---|---|---|"]
        rows = [(f"statsforecast {m}", r) for m, r in v["peers"].items()]
        if v.get("headroom"):
            rows += [(f"headroom {m}" + (" (selected: " + v["headroom"]["selected"] + ")" if m == "auto" else ""), r)
                     for m, r in v["headroom"]["models"].items()]
        for label, r in rows:
            if "dropped" in r:
                lines.append(f"| {label} | dropped: {r['dropped']} | | | | |")
                continue
            lines.append(f"| {label} | {_f(r.get('mase'))} | {_f(r.get('smape'), 2)} | {_pct(r.get('coverage_80'))} | "
                         f"{_pct(r.get('coverage_90'))} | {_f(r.get('seconds_per_fold'), 4)} |")
        lines.append("")
    if report.get("heldout"):
        peers = sorted({m for v in report["heldout"].values() for m in v["peers"]})
        lines += ["## Held-out series (nothing was chosen on them)", "",
                  "No choice was made on these series. The peak in each hour (hourly max) of every sub-hourly "
                  "trace, last 7 daily origins, and nasa's 28 daily origins before the 7 above, are built from the "
                  f"same three traces as the choose-on units, so they are not independent of them. {GAUGE} is "
                  "not: the GPUs held by the running pods of the shared GPU job trace at each hour of its last six "
                  "weeks (bench/gpu_gauge.py), a gauge that drifts slowly with a weak daily cycle, like the "
                  "owner's held-out GPU-in-use gauge; no choice saw it. The same protocol and scorer, MASE "
                  "(headroom's 80 % and 90 % interval coverage pooled over the scored hours); —: AutoARIMA "
                  "stopped, a fit taking over a minute. The peers' series are built by bench/peers/run_peers.py "
                  "and checked equal to headroom's.", "",
                  "| series | folds | headroom auto | its candidates' median (best) | cov 80 | cov 90 | "
                  + " | ".join(f"statsforecast {m}" for m in peers) + " |", "|---" * (len(peers) + 6) + "|"]
        for name, v in report["heldout"].items():
            cands = list(v.get("candidates", {}).values())
            among = f"{_f(float(np.median(cands)))} ({_f(min(cands))})" if cands else "—"
            lines.append(f"| {name} | {v['folds']} | {_f(v.get('auto'))} | {among} | {_pct(v.get('coverage_80'))} | "
                         f"{_pct(v.get('coverage_90'))} | " + " | ".join(_f(v["peers"].get(m)) for m in peers) + " |")
        lines.append("")
    lines += weeks_markdown(report.get("weeks", {}))
    lines += kinds_markdown(report.get("kinds", {}))
    m4 = report.get("m4")
    if m4:
        lines += [f"## M4 hourly ({m4['series']} series, horizon 48)", "",
                  "OWA = 0.5·(sMAPE/sMAPE_Naive2 + MASE/MASE_Naive2) with our own Naive2. "
                  "Published rows from shared/data/m4/m4_hourly_point_forecast_results.csv.", "",
                  "| method | sMAPE | MASE | OWA | s/series | published sMAPE / MASE / OWA |",
                  "|---|---|---|---|---|---|"]
        pub = m4["published"]
        for name, r in m4["methods"].items():
            p = pub.get(name)
            ps = f"{p['smape']:.3f} / {p['mase']:.3f} / {p['owa']:.3f}" if p else ""
            lines.append(f"| {name} | {_f(r['smape'])} | {_f(r['mase'])} | {_f(r['owa'])} | "
                         f"{_f(r.get('seconds_per_series'), 4)} | {ps} |")
        for ref in ("238", "118"):
            if ref in pub:
                p = pub[ref]
                lines.append(f"| published {p['description']} | | | | | "
                             f"{p['smape']:.3f} / {p['mase']:.3f} / {p['owa']:.3f} |")
        lines.append("")
    if report.get("m4_global"):
        lines += global_markdown(report["m4_global"])
    if report.get("choices"):
        lines += protocol_markdown(report["choices"])
        if report.get("choices_from"):
            lines += [f"(This section is from an earlier run, {report['choices_from']}: its coverage is that run's "
                      "interval model's; the interval section below has the shipped one.)", ""]
    if report.get("intervals"):
        lines += interval_markdown(report["intervals"])
    if report.get("choices_round1"):
        lines += protocol_markdown(report["choices_round1"], "### Round 1 (before the kinds units were added)")
    if report.get("scale"):
        s = report["scale"]
        lines += ["## Scale", "", f"{s['series']} synthetic hourly series x {s['days']} days, horizon {s['horizon']}, "
                  f"AutoForecaster(candidates=\"{s['candidates']}\"), {s['workers']} workers: "
                  f"**{s['wall_seconds']:.1f} s** wall (target < {s['target_seconds']} s)."]
        if s.get("global"):
            g = s["global"]
            lines += ["", f"The model learned across series on the same {g['series']} series (one fit on "
                      f"{g['rows']:,} sampled rows, then a 48-hour path for each, 2 cores): "
                      f"**{g['wall_seconds']:.1f} s** wall."]
        peer = s.get("statsforecast_mstl")
        if peer:
            lines += ["", "statsforecast's MSTL (daily and weekly seasons, AutoETS trend) on the same series in the "
                      f"same run, one StatsForecast call with {s['workers']} jobs (bench/peers/scale_mstl.py): "
                      + (f"**{peer['wall_seconds']:.1f} s** wall, {peer['wall_seconds'] / s['wall_seconds']:.1f} x "
                         "headroom's time." if "wall_seconds" in peer
                         else f"not run: {peer['not_run']}.")]
        lines.append("")
    if report.get("notes"):
        lines += ["## Not run / caveats", ""] + [f"- {n}" for n in report["notes"]] + [""]
    lines += ["## Targets", "", "| target | result | detail |", "|---|---|---|"]
    for name, t in report["targets"].items():
        detail = {k: v for k, v in t.items() if k != "pass"}
        verdict = "PASS" if t["pass"] else "FAIL"
        lines.append(f"| {name} | {verdict} | `{json.dumps(detail, default=_json_num)[:300]}` |")
    if not report["targets"]:
        lines.append("| (none evaluated) | | |")
    return "\n".join(lines) + "\n"


def global_markdown(g: dict) -> list[str]:
    halves = ("even", "odd", "all")
    lines = ["### The model learned across series (issue 13 item 2)", "",
             "forecast/global_model.py: one HistGradientBoostingRegressor (absolute error, so a median) fitted across "
             "series on each origin's last 48 hours, the target's hour on the 7 whole days and 1-2 weeks before, the "
             "last day's mean and the step ahead, all divided by the mean of the week before the origin; hour of day "
             "and day of week by position (M4 has no dates). Training origins every 24 h of each training part. Picked "
             "on M4's even positions only (fitted across their training parts, scored on their test parts): the "
             "hyper-parameters by OWA of the global model alone, then its weight in "
             "weight x global + (1 - weight) x auto (the per-series AutoForecaster).", "",
             "| config (even half) | OWA global | " + " | ".join(f"weight {w:g}" for w in GLOBAL_WEIGHTS[1:])
             + " | s (fit + predict, 207 series) |", "|---|---|" + "---|" * len(GLOBAL_WEIGHTS[1:]) + "---|"]
    for name, row in g["grid"].items():
        mark = " **(picked)**" if name == g["pick"] else ""
        lines.append(f"| {name}{mark} | {_f(row['weight_1.0'])} | "
                     + " | ".join(_f(row[f"weight_{w}"]) for w in GLOBAL_WEIGHTS[1:])
                     + f" | {row['fit_predict_seconds']:.0f} |")
    lines += ["", f"Picked: {g['pick']}, weight {g['weight']:g}. Refitted across all 414 training parts "
              f"({g['fit_predict_seconds_all']:.0f} s fit + predict); OWA by half (odd: no choice was made on it):",
              "", "| method | " + " | ".join(f"OWA {h}" for h in halves) + " | MASE all | sMAPE all |",
              "|---|---|---|---|---|---|"]
    for label, row in g["scores"].items():
        name = {"global": "global", "auto": "auto (per series, as shipped)",
                "combination": f"{g['weight']:g} x global + {1 - g['weight']:g} x auto"}[label]
        lines.append(f"| {name} | " + " | ".join(_f(row[h]["owa"]) for h in halves)
                     + f" | {_f(row['all']['mase'])} | {_f(row['all']['smape'])} |")
    return lines + [""]


def protocol_markdown(p: dict, title: str = "## Choices and the data they were made on (issue 13)") -> list[str]:
    units = list(next(iter(p["table"].values())))
    lines = [title, "",
             "Every configuration of AutoForecaster below was run on every unit. ONE rule picks: the lowest "
             "geometric mean, over the choose-on units, of MASE / MASE of seasonal naive 24 on the same folds. "
             "Choose-on: M4 hourly's even positions "
             f"({p['series_m4'] // 2 + p['series_m4'] % 2} series, horizon 48), the shared traces (leave-one-trace-"
             "out: the other two), and where present the kinds units (`week`: every whole week of the shared "
             "traces, each a history of its own (the first week of each in rounds 1-2), 5 daily folds from day 2 as "
             "`backtest --folds 7` does on a week; `gauge`: 6 synthetic flat gauges, a "
             "slow mean-reverting drift without a daily cycle, since no shared trace is one; `kind`: seed 1 of each "
             "synthetic held-out kind, from round 6); test-on: M4's odd positions, the trace left out and, from "
             "round 6, the kinds' seeds 2-9 (`kindtest`). Pools: fast4 = snaive24, snaive168, profile, profile24 "
             "(issue 2's); "
             "+naive / +theta / fast6 add forecast/models.py's Naive and Theta. Rules: best-or-mean = the best "
             "candidate or the mean of the top 3, whichever scored better on the 14 inner days (issue 2's); best = "
             "the best alone; median / weighted = the median / inverse-MASE-weighted mean of the top 3, always. "
             "lc = the median's recent level correction (forecast.calibrate.level_correction) always, "
             "lc14 / lc7 = only with 14 / 7 or more inner folds of residuals (lc7 added after round 2, for the "
             "leading pool only), "
             "nolc = never. mean<7 / shrink<7 (round 3, for the leading config only): with k < 7 inner folds (a "
             "history under about nine days) no pick but the mean of the whole pool, or the pick weighing k/7 and "
             "every candidate an equal share of the rest (forecast.backtest MIN_SELECTION_FOLDS, WEAK_EVIDENCE); "
             "every other config picks on however few folds there are. shrink<7 came after mean<7 had been run: "
             "the evaluated week switched from the pool's mean to a pick after two days, so `tune`, which replays "
             "the shorter history, tuned a forecaster other than the one that then ran (servegen's simulated "
             "shortage 0.164 %, the old rule 0.126 %). Round 4, not in the table (rejected, its code reverted; "
             "commit d653fdb has it and how to rerun it): a history without a daily cycle by the M4 test on its "
             "hour-to-hour changes forecast by naive, or naive and theta, alone, for the GPU gauge's weeks. With "
             "shrink<7 it scored servegen 0.931 / 0.933 (shipped 0.733), the week unit 1.108 / 1.104 (1.009) and "
             "the gauge unit 0.781 / 0.780 (0.786): servegen's daily cycle is too weak for the test, yet the "
             "seasonal models forecast it far better than a level. Round 5, not in the table either (rejected): "
             "Theta in the pool under shrink<7 (fast6 / fast4+theta with best-or-mean, lc7, shrink<7; rerun by "
             "adding them to PROTOCOL_CONFIGS): M4's choose half 0.820 / 0.819 (shipped 0.780), the week unit "
             "1.018 / 0.999 (1.009), the gauge unit 0.776 / 0.811 (0.786), the traces within 0.013. Round 6 (this "
             "table): the synthetic held-out kinds (bench/kinds.py: bursts every two hours, level shifts, a nine-day "
             "token stream; the streams of bench/simulate_kinds.py, written from the issues' description alone) join "
             "the units, seed 1 of each as a choose-on unit (`kind:`), seeds 2-9 test-on (`kindtest:`). They showed "
             "round 5's pick worse than seasonal naive on the token stream (its equal-share pool mean below 7 folds "
             "carried the last value held, zero all day after a zero night) and no candidate following a level "
             "shift. Three configs were added before the run: shrink-inverse<7 (the rest of the weight by 1 / MASE^2 "
             "on the k folds, Bates & Granger's inverse error variance) and Theta in the pool (fast6) under either "
             "rule. " + ROUND6_REJECTED + " " + LATER_ROUNDS, "",
             "Relative MASE (M4 also OWA):", "",
             "| config | " + " | ".join(u.removeprefix("trace:") for u in units) + " | M4 choose OWA | M4 test OWA |",
             "|---" * (len(units) + 3) + "|"]
    for c, row in p["table"].items():
        mark = " **(picked)**" if c == p["shipped_pick"] else ""
        lines.append(f"| {c}{mark} | " + " | ".join(_f(row[u]["rel_mase"]) for u in units)
                     + f" | {_f(row['m4_choose'].get('owa'))} | {_f(row['m4_test'].get('owa'))} |")
    with_kinds = p.get("pick_with_kinds")
    lines += ["", "The rule's pick on round 5's choose-on units (M4's choose half, the three traces, the week and "
              f"gauge units): **{p['shipped_pick']}**"
              + (f" (with the synthetic kinds' seed 1 too: {with_kinds}, rejected on the test-on part above)"
                 if with_kinds and with_kinds != p["shipped_pick"] else "") + "; on M4's test "
              f"half (out of sample) it scores OWA {_f(p['test_m4'].get('owa'))}, relative MASE "
              f"{_f(p['test_m4']['rel_mase'])}, coverage 80 % {_pct(p['test_m4']['coverage_80'])} / 90 % "
              f"{_pct(p['test_m4']['coverage_90'])}.", "",
              "Leave one trace out (the rule run without the trace, scored on it):", "",
              "| trace left out | config chosen without it | relative MASE on it | MASE | cov 80 | cov 90 |",
              "|---|---|---|---|---|---|"]
    for name, v in p["leave_one_trace_out"].items():
        lines.append(f"| {name} | {v['chosen']} | {_f(v['rel_mase'])} | {_f(v['mase'])} | {_pct(v['coverage_80'])} | "
                     f"{_pct(v['coverage_90'])} |")
    return lines + [""]


def interval_markdown(p: dict) -> list[str]:
    """The interval protocol: the candidates, the rule's pick, per-unit loss and coverage, the short-history check."""
    units, table, pick = p["units"], p["table"], p["shipped_pick"]
    label = lambda u: u.removeprefix("trace:").removeprefix("heldout:")  # noqa: E731
    lines = ["## Interval models (issue 13): chosen on the choose-on part, tested out of sample", "",
             "The point forecasts are the shipped AutoForecaster's (its median, hence MASE, is the same under every "
             "interval model); only the bands differ. Candidates (bench/forecast_bench.py `_interval_models`; all "
             "but `level` fall back, with fewer than 5 honest folds, to the stated short-history bands in the same "
             "groups; all but the `aciG` ones adapt their levels with step 0.2):", ""]
    lines += [f"- `{n}`: {text}" for n, text in INTERVAL_TEXT.items()] + [
        "", "ONE rule: the fewest 80 % and 90 % coverages outside ±5 points over the choose-on units (M4's even "
        "positions, the three traces, the week and gauge units; issue 13's target, counted where choices are "
        "made), then the lowest geometric mean, over the same units, of the mean pinball loss over q0.05, 0.1, "
        "0.9, 0.95, 0.99 (MASE-scaled; a proper scoring rule, rewarding calibration and sharpness together) "
        "relative to `level`. Rounds 1-2 used the loss alone; in round 3 (the one-week unit grown to every whole "
        "week of the shared traces, the pool's mean below 7 inner folds) the loss alone picked binned/changes/aci0.2, "
        "whose bands cover 70 % / 78 % on the one-week unit, so the target comes first. Test-on: M4's "
        "odd positions, the trace left out, the held-out series. Round 4, not in the table (rejected, its code "
        "reverted; commit 9a44e89 has it and how to rerun it): each bound as the one-sided split-conformal quantile "
        "(q (n+1)/n above the median, 1 - (1-q)(n+1)/n below, instead of the distance from the median widened by "
        "(n+1)/n), with n the folds (`tail`) or their summed recency weights (`weighted`, Barber et al. 2023), "
        "under adaptive steps 0, 0.1 and 0.2: 4 to 9 choose-on coverages outside ±5 points against the pick's 1 "
        "(the adaptive levels already move the level; the wider start overshoots: alibaba's 90 % interval "
        "95-98 %).", "",
        "The adaptive levels (every `aciG` with G > 0) adapt on a fixed grid, every hundredth from 0 to 1, not on "
        "the quantiles asked (round 5, forecast.calibrate.monotone_levels). Each level adapts on its own, so two "
        "can cross, and the forecast then sorted the values among the quantiles asked: q0.05 asked alone differed "
        "from q0.05 asked with q0.1, and the controller, the backtest and the forecast store, asking different "
        "lists, got different q0.9s of one forecaster. The grid's levels are sorted (a monotone rearrangement, "
        "Chernozhukov et al. 2010) and a quantile reads its level off the grid, linear between its neighbours: a "
        "quantile is then the same whichever others are asked, and the quantiles never cross. Sorting levels, not "
        "each hour's values over a dense grid of quantiles, gives the same bands (an hour's value rises with the "
        "level) for one sort per forecast, and a quantile on the grid (all of the ones here) keeps its own adaptive "
        "level wherever no other level crosses it. Measured against the code before (the point forecasts, hence "
        "every MASE, identical): the pick and every leave-one-out pick unchanged, its choose-on geomean 0.829 → "
        "0.830, its coverages within 0.6 points of before but alibaba_openb_gpus_in_use's 90 % (91.7 % → 94.0 %), "
        "none across ±5; among the rejected candidates nasa_http_1995_hourly's 80 % moved most (`point+mase` "
        "75.6 % → 70.8 %, `level` 75.6 % → 73.2 %, both now outside ±5; `raw` 72.6 % → 74.4 %).", "",
        "Loss relative to `level` (lower is better):", "",
        "| model | " + " | ".join(label(u) for u in units) + " | choose-on geomean | coverages outside ±5 (of "
        f"{2 * len(units)}: choose-on + test-on) |", "|---" * (len(units) + 3) + "|"]
    choose = [u for u in units if u == "m4_choose" or u.startswith(("trace:", "week:", "gauge:"))]
    for name, row in table.items():
        mark = " **(picked)**" if name == pick else ""
        outside = [coverage_misses_of(row, part) for part in (choose, [u for u in units if u not in choose])]
        lines.append(f"| {name}{mark} | " + " | ".join(_f(row[u]["rel_loss"]) for u in units)
                     + f" | {_f(geomean([row[u]['rel_loss'] for u in choose]))} | {outside[0]} + {outside[1]} |")
    lines += ["", f"The rule picks **{pick}** (the code's default, forecast.calibrate.INTERVALS: {p['code_default']}).",
              "", f"Issue 2's model (`level`), round 1's pick (`{ROUND1_PICK}`) and the pick, per unit: "
              "coverage of the 80 % and 90 % intervals and the share of actuals at or below the planner's q0.9 / "
              "q0.99 (pooled over every scored hour), mean pinball at q0.9 / q0.99; M4 also the 10th / 50th / 90th "
              "percentile of per-series coverage:", "",
              "| unit | cov 80 level → round 1 → pick | cov 90 level → round 1 → pick | below q0.9 | below q0.99 | "
              "pinball q0.9 | pinball q0.99 | M4 per-series cov 80 / 90 (pick) |", "|---|---|---|---|---|---|---|---|"]
    steps = (table["level"], table[ROUND1_PICK], table[pick])
    for u in units:
        a = table[pick][u]
        spread = (" / ".join("-".join(f"{100 * x:.0f}" for x in a[f"per_series_coverage_{lv}"]) for lv in (80, 90))
                  if u.startswith("m4_") and "per_series_coverage_80" in a else "")
        path = lambda key, fmt, u=u: " → ".join(fmt(t[u][key]) for t in steps)  # noqa: E731
        lines.append(f"| {label(u)} | {path('coverage_80', _pct)} | {path('coverage_90', _pct)} | "
                     f"{path('below_q0.9', _pct)} | {path('below_q0.99', _pct)} | {path('pinball_0.9', _f)} | "
                     f"{path('pinball_0.99', _f)} | {spread} |")
    for u in units:
        w = table[pick][u].get("window_coverage_80")
        if w:
            w90, a = table[pick][u]["window_coverage_90"], table[pick][u]
            lines += ["", f"How far {FOLDS} folds wander: on {label(u)} ({w['windows']} windows of {FOLDS} "
                      f"consecutive daily folds) the pick covers {_pct(a['coverage_80'])} / {_pct(a['coverage_90'])} "
                      f"over all folds, but only {_pct(w['within_5'])} / "
                      f"{_pct(w90['within_5'])} of the windows are within ±5 points (80 % windows from "
                      f"{_pct(w['min'])} to {_pct(w['max'])}, 90 % from {_pct(w90['min'])} to {_pct(w90['max'])}): "
                      f"the per-trace ±5 target on {FOLDS} folds is as much the scored week's luck as calibration."]
    for u in units:
        a = table[pick][u]
        if a.get("zero_at_zero_q0.05", 0) > 0.05 and a["coverage_90"] > 0.95:
            lines += ["", f"Zero hours: on {label(u)}, {_pct(a['zero_at_zero_q0.05'])} of the scored hours are 0 with "
                      "q0.05 at 0, covered whatever the upper bound, so even an exact q0.95 (5 % above it) puts the "
                      f"90 % interval at 95 % or more; here {_pct(1 - a['below_q0.95'])} are above q0.95 and "
                      f"{_pct(1 - a['below_q0.9'])} above q0.9."]
    lines += ["", "Leave one trace out (the rule run without the trace, scored on it):", "",
              "| trace left out | model chosen without it | loss relative to level | cov 80 | cov 90 |",
              "|---|---|---|---|---|"]
    for name, v in p["leave_one_trace_out"].items():
        lines.append(f"| {name} | {v['chosen']} | {_f(v['rel_loss'])} | {_pct(v['coverage_80'])} | "
                     f"{_pct(v['coverage_90'])} |")
    lines += ["", "Short histories (the defect): each sub-hourly trace's first 5 days, forecast as the simulator "
              "does on the 5th (refit every hour on the complete hours before it, hourly max, horizon 24): the "
              "largest q0.9 / q0.99 of the horizon as a multiple of the history's peak (median and worst of the 24 "
              "refits), and the share of the next hour's peak at or below q0.9.", "",
              "| trace | model | q0.9 / peak median (max) | q0.99 / peak median (max) | next hour below q0.9 |",
              "|---|---|---|---|---|"]
    for trace, models in p["short_history"].items():
        for name, r in models.items():
            lines.append(f"| {trace} | {name} | {r['q0.9_over_peak_median']:.2f} ({r['q0.9_over_peak_max']:.2f}) | "
                         f"{r['q0.99_over_peak_median']:.2f} ({r['q0.99_over_peak_max']:.2f}) | "
                         f"{_pct(r['next_hour_below_q0.9'])} |")
    return lines + [""]


def _json_num(x):
    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    if isinstance(x, np.bool_):
        return bool(x)
    raise TypeError(type(x))


def _clean(obj):
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if isinstance(obj, (np.floating, float)):
        return float(obj) if np.isfinite(obj) else None
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    return obj


def notes(report: dict, peers: dict) -> list[str]:
    out = []
    m4_done = set(peers.get("m4", {}).get("models", {}))
    lacking = [m for m in ("SeasonalNaive", "MSTL", "AutoTheta", "AutoETS") if m not in m4_done]
    if lacking:
        out.append(f"M4 peers not in this run: {', '.join(lacking)} (statsforecast AutoETS costs ~3 s a series here); "
                   "finish with `bench/.venv-peers/bin/python bench/peers/run_peers.py --resume`.")
    arima = [v["peers"].get("AutoARIMA24") for v in report["traces"].values()]
    if not any(arima):
        out.append("AutoARIMA on traces not attempted in this run (run_peers.py tries it last, dropping it when a "
                   "fold takes over 60 s); `--resume` runs it.")
    if report.get("headroom_missing"):
        out.append(f"headroom side not run: {report['headroom_missing']}")
    for name, v in report["traces"].items():
        auto = (v.get("headroom") or {}).get("models", {}).get("auto", {})
        if auto.get("coverage_80_se") is not None:
            out.append(f"{name}: auto coverage 80 % {_pct(auto['coverage_80'])} ± {_pct(auto['coverage_80_se'])}, "
                       f"90 % {_pct(auto['coverage_90'])} ± {_pct(auto['coverage_90_se'])} (± one standard error "
                       "over the folds: hours within a fold err together).")
    out += choices(report)
    from forecast.calibrate import ACI_GAMMA, REFIT_STEP
    out.append("Intervals (issue 13, section above): weighted split conformal (forecast/calibrate.py) at 28 daily "
               "inner origins (the model is picked on the last 14) on the errors of the selection procedure itself "
               "(at each inner fold, the model it would have picked on the 14 folds before, so the winner's optimism "
               "does not narrow the band), in demand units, Mondrian by the busier and the quieter "
               "half of the hours, folds weighted 0.5^(age / two weeks); the level of each bound is split-conformal "
               "((folds+1)/folds per tail) plus an adaptive-conformal offset (Gibbs & Candès 2021, step "
               f"{ACI_GAMMA:g}) learned by replaying the inner folds oldest first, on a fixed grid of levels sorted "
               "there (so a quantile is the same whichever others are asked). With fewer than 5 honest folds (a "
               "week of history; split "
               f"conformal cannot put q0.9 below the largest error) the fitted model is refit every {REFIT_STEP} hours "
               "from the "
               "first day on and the bands are the split-conformal quantiles of those refits' errors over whole "
               "horizons (each origin a unit), grouped at one threshold, the median of the refits' points (round 1 "
               "used the history's day-over-day changes, grouped at each path's own median: a flat path, the last "
               "value held, then took the quiet half's errors, bands a fifth of its errors on alibaba's first "
               "week). Issue 2's model (errors over the point + 0.2 x the week's "
               "mean) is `level` in that section; it made q0.9 10-20x the peak on alibaba's first days.")
    out.append("Issue 13's interval change leaves the median's path as it was, except that a bound crossing it no "
               "longer takes its place when the quantile columns are sorted (issue 2's bands crossed it on a few M4 "
               "series: M4 MASE 0.916 before, "
               f"{_f(report.get('m4', {}).get('methods', {}).get('headroom', {}).get('mase'))} after; the traces' and "
               "held-out MASE are unchanged).")
    out.append("The median (the point forecast scored by MASE) is the model's path times 1 + the recent mean of "
               "the same residuals: folds weighted 0.5^(age / two days), the top and bottom 10 % of the weight "
               "trimmed (forecast.calibrate.level_correction); scaling keeps zero hours at zero. It replaced the "
               "residuals' weighted median over four weeks, which lagged level changes and read ~0 on traces with "
               "near-zero nights. How it was chosen, "
               "honestly: on these three traces and M4, half-lives 12 h to four weeks and mean, median, clipped and "
               "trimmed means, added to the path, were compared; every clipped or trimmed mean with a 24-48 h "
               "half-life beat the best peer on all three traces (nasa 0.541-0.550, alibaba 0.844-0.869), the "
               "median at any half-life missed nasa, a plain mean was unstable (alibaba 2.2 at one week), and M4 "
               "OWA cost 0.008-0.03 against the four-week median (0.480); then the kept setting (10 % trimmed, two "
               "days) scaling the path instead of adding to it measured better on all four (below). Treat the "
               "traces' MASE as in-sample evidence for this choice and the held-out series as the test: there "
               "the previous four-week median (commit 61e3049's parent) measured 0.991 / 0.552 / 0.390 / 0.902 "
               "(alibaba max / nasa max / nasa earlier / servegen max), better on two of the four and above the "
               "best peer on alibaba's.")
    out.append("How 28 calibration origins was chosen, honestly: on these three traces 14, 21, 28 and 42 were tried; "
               "21 and 28 put every trace within ±5 points, 14 left nasa's 90 % interval at 83 %, 42 nasa's 80 % at "
               "73 %. 28 (four weeks, where the two-week recency weights have faded to a quarter) was kept; it was "
               "checked on these traces, so treat its coverage here as in-sample evidence and M4 (below) as the "
               "test; on M4, 14 origins measured 76.6 % / 87.9 % and 28 measure the line below.")
    m4 = report.get("m4", {}).get("methods", {}).get("headroom", {})
    if m4.get("coverage_80") is not None:
        out.append(f"M4 hourly (the calibration settings were not chosen on M4; pool, rule and level correction "
                   "were chosen on its even half, whose test half is reported in the choices section): "
                   f"headroom's 80 % "
                   f"intervals cover {_pct(m4['coverage_80'])}, its 90 % intervals {_pct(m4['coverage_90'])} "
                   "(pooled over 414 series x 48 hours).")
    out += coverage_misses(report) + mase_misses(report)
    out.append("Timings come from a shared 2-core machine under load from other jobs; compare them within one run.")
    out.append("headroom's trace table lists forecast.backtest.FULL (BENCH_ALL_MODELS=1: every model); `headroom "
               "backtest` scores every model, these among them, and its `auto` is this one (the same MASE on the same "
               "folds): the honest AutoForecaster with its default candidates, re-selected inside every fold.")
    return out


def choices(report: dict) -> list[str]:
    """Every choice AutoForecaster ships with and the data it was made on (issue 13)."""
    from forecast.backtest import COMBINE, FAST, LEVEL_CORRECTION, MIN_SELECTION_FOLDS, WEAK_EVIDENCE
    p = report.get("choices") or {}
    made = (f"picked by the protocol's rule (section above) as {p['shipped_pick']} on the choose-on part"
            if p else "not re-run in this report")
    return [
        f"Choice: candidates {', '.join(FAST)}; rule {COMBINE}; level correction {LEVEL_CORRECTION!r}; below "
        f"{MIN_SELECTION_FOLDS} inner folds {WEAK_EVIDENCE} — {made}. The code's defaults (forecast/backtest.py FAST, "
        "COMBINE, LEVEL_CORRECTION, MIN_SELECTION_FOLDS, WEAK_EVIDENCE) are that pick. The 7 and 14 of lc7 / lc14 "
        "and shrink<7 were not tuned: a week and two weeks of inner folds.",
        "Choice: selection window 14 inner days, top 3 for combinations, 28 calibration origins, recency half-life "
        "two weeks, level correction half-life two days and 10 % trimming: issue 2's, made on the "
        "three shared traces and all of M4 (so in-sample for both parts here); not re-chosen in issue 13. The "
        "protocol's M4 test half and the left-out traces are out of sample only for the choices in the table.",
        f"Choice: the intervals' model (error unit, groups, the short-history fallback and its refit step, the "
        f"adaptive levels' step) — picked by the interval protocol's rule on its choose-on part as "
        f"{(report.get('intervals') or {}).get('shipped_pick', 'not re-run in this report')}; forecast.calibrate."
        "INTERVALS, REFIT_STEP and ACI_GAMMA are that pick. The minimum of 5 honest folds is split conformal's "
        "(q0.9 below the largest error), not tuned.",
        "Choice: Theta's alpha grid, its four-week window and its seasonality test (M4's 90 % test at lag 24), "
        "gbm's lags (one and two days, or a week, eight days and two weeks from three weeks of history) and "
        "MSTL's period rule (a period only with more than two cycles): fixed from the literature and the models' "
        "limits before any run, not tuned.",
        "Choice: the model learned across series (forecast/global_model.py): its boosting settings (GLOBAL_GRID) "
        "and its weight with auto (GLOBAL_WEIGHTS) picked on M4's even half only (the M4 section); "
        "forecast.global_model.GlobalSettings' defaults are that pick. Its features (48 recent hours, the target's "
        "hour on 7 whole days and 1-2 weeks back, the last day's mean, the step ahead, hour of day and day of week), "
        "the level (the week's mean), training origins every 24 h and the 400,000-row sample were fixed before any "
        "run. Scratch runs on the even half only (not in this report's tables), at 150 iterations and learning rate "
        "0.15: 24 recent hours OWA 0.475 and no calendar 0.461, both with training origins from each series' first "
        "day, which measured 0.467 against 0.460 with origins from a week in; so origins start a week in where a "
        "series has one, and 48 hours and the calendar were kept. The weighted combination "
        "with auto is this bench's (the M4 target is scored on the global model alone); the product (`headroom "
        "train` with several series) scores the global model on each series' folds and logs it to MLflow beside the "
        "candidates, but never promotes it: the controller refits each series alone, so a champion learned across "
        "series would serve a model other than the one scored (serving it needs the controller to fit across its "
        "policies' series; not built).",
        "Not a dependency: statsforecast 2.1.1 (PyPI, checked with `pip download --no-deps statsforecast`) requires "
        "pandas < 3 and the product runs on pandas 3.1; it stays a peer in its own venv (bench/.venv-peers) and the "
        "product's pool is numpy/scipy/statsmodels (forecast/models.py).",
    ]


def coverage_misses(report: dict) -> list[str]:
    """Why a trace's coverage misses ±5 points, in numbers the run measured (empty when none miss)."""
    out = []
    for name, v in report["traces"].items():
        auto = (v.get("headroom") or {}).get("models", {}).get("auto", {})
        for lv in (80, 90):
            cov, se = auto.get(f"coverage_{lv}"), auto.get(f"coverage_{lv}_se")
            if cov is None or se is None or abs(100 * cov - lv) <= 5:
                continue
            within = abs(100 * cov - lv) <= 5 + 2 * 100 * se
            out.append(f"{name}: {lv} % coverage {_pct(cov)} misses ±5 points. "
                       + (f"The miss is within two standard errors ({_pct(2 * se)}) of the fold-to-fold noise: "
                          "7 daily folds are 7 samples of a day's error, and the calibration cannot know in advance "
                          "that the scored week errs more or less than the weeks before it."
                          if within else "The miss exceeds two standard errors of the fold-to-fold noise: "
                          "the intervals are mis-calibrated on this trace."))
    return out


def mase_misses(report: dict) -> list[str]:
    """Where auto's MASE is above the best peer's: by how much, and what its best single candidate scored."""
    out = []
    for name, v in report["traces"].items():
        models = (v.get("headroom") or {}).get("models", {})
        peers = {m: r["mase"] for m, r in v["peers"].items() if r.get("mase") is not None}
        if "auto" not in models or not peers or models["auto"]["mase"] <= min(peers.values()):
            continue
        peer = min(peers, key=peers.get)
        single = {m: r["mase"] for m, r in models.items() if m != "auto" and r.get("mase") is not None}
        best = min(single, key=single.get)
        out.append(f"{name}: auto MASE {_f(models['auto']['mase'])} is above statsforecast {peer} "
                   f"({_f(peers[peer])}). Its best candidate in hindsight, {best}, scores {_f(single[best])}; auto "
                   "picks from 14 inner days before each origin (it cannot know the hindsight winner) and corrects "
                   "its level by the recent mean of its inner residuals. Fixed combinations (profile with "
                   "snaive168, or with profile24) and selection variants were each better on one trace and worse "
                   "on another, so none replaced the selection.")
    return out


def write(report: dict, args) -> dict:
    report = dict(report)
    report["targets"] = targets(report)
    report = _clean(report)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    args.md.parent.mkdir(parents=True, exist_ok=True)
    args.md.write_text(markdown(report))
    return report


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="score headroom and statsforecast peers with forecast.metrics")
    ap.add_argument("--peers", type=Path, default=RESULTS / "peers.json")
    ap.add_argument("--out", type=Path, default=RESULTS / "forecast.json")
    ap.add_argument("--md", type=Path, default=REPO / "docs" / "bench-forecast.md")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--skip-headroom", action="store_true", help="score the peer side only")
    ap.add_argument("--skip-m4-headroom", action="store_true")
    ap.add_argument("--skip-scale", action="store_true")
    ap.add_argument("--skip-protocol", action="store_true", help="skip the choose-on / test-on protocol")
    ap.add_argument("--reuse-protocol", type=Path, default=None, help="take the protocol section from a JSON file")
    ap.add_argument("--protocol-round1", type=Path, default=None, help="an earlier protocol JSON to report as round 1")
    ap.add_argument("--skip-intervals", action="store_true", help="skip the interval models' protocol")
    ap.add_argument("--reuse-intervals", type=Path, default=None, help="take the interval protocol from a JSON file")
    ap.add_argument("--intervals-only", action="store_true",
                    help="rerun what the interval model changes (traces, held-out, M4, the interval protocol); take "
                         "the point-forecast protocol and the scale test from the earlier --out")
    ap.add_argument("--m4-only", action="store_true",
                    help="rerun the M4 section only (with the model learned across series); take every other "
                         "section from the earlier --out")
    ap.add_argument("--scale-only", action="store_true",
                    help="rerun the scale test only (with statsforecast's MSTL on the same series); take every "
                         "other section from the earlier --out")
    ap.add_argument("--kinds-only", action="store_true",
                    help="rerun the synthetic kinds' section only; take every other section from the earlier --out")
    ap.add_argument("--m4-candidates", default="default",
                    help='"default" (AutoForecaster\'s own), "fast", "full" or a comma list of model names')
    ap.add_argument("--m4-limit", type=int, default=None)
    ap.add_argument("--reuse-headroom", type=Path, default=None,
                    help="take headroom's results (traces, M4, scale) from an earlier forecast.json; "
                         "re-score peers only")
    args = ap.parse_args(argv)
    prev = json.loads(args.reuse_headroom.read_text()) if args.reuse_headroom else None
    earlier = json.loads(args.out.read_text()) if (args.intervals_only or args.m4_only or args.scale_only
                                                    or args.kinds_only) else {}
    if not DATA.is_dir():
        log(f"no data at {DATA}; nothing to benchmark")
        return 2
    peers = json.loads(args.peers.read_text()) if args.peers.exists() else {}
    if not peers:
        log(f"no peer output at {args.peers}: run bench/peers/run_peers.py in bench/.venv-peers first")
    missing = "skipped (--skip-headroom)" if args.skip_headroom else headroom_available()
    if prev is not None:
        missing = prev.get("headroom_missing")
    if missing:
        log(f"headroom side not run: {missing}")
    report = {"generated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "machine": f"{platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}",
              "statsforecast": peers.get("statsforecast"), "protocol": {"horizon": TRACE_H, "folds": FOLDS,
              "step": STEP, "m4_horizon": M4_H, "season": SEASON}, "headroom_missing": missing, "traces": {}}

    if args.kinds_only:
        report.update({k: v for k, v in earlier.items() if k not in ("generated", "machine")})
        report["kinds"] = score_kinds(peers.get("kinds", {}), missing)
        report["notes"] = notes(report, peers)
        write(report, args)
        log(f"synthetic kinds: wrote {args.out} and {args.md}")
        return 0
    if args.scale_only:
        report.update({k: v for k, v in earlier.items() if k not in ("generated", "machine")})
        log("scale test: 1000 synthetic series ...")
        report["scale"] = scale_test(1000, args.workers)
        report["scale"]["global"] = global_scale(1000)
        report["notes"] = notes(report, peers)
        write(report, args)
        log(f"scale test: {report['scale']['wall_seconds']:.1f}s; wrote {args.out} and {args.md}")
        return 0
    if args.m4_only:  # every other section first, so a partial write (a stopped run) keeps them
        report.update({k: earlier[k] for k in ("traces", "heldout", "weeks", "choices_round1", "choices",
                                                "choices_from", "intervals", "scale") if k in earlier})
    for path in [] if args.m4_only else sorted((DATA / "traces").glob("*_hourly.csv")):
        series = load_trace(path)
        entry = {"n": len(series), "missing": int(series.isna().sum())}
        ptrace = peers.get("traces", {}).get(path.stem)
        if ptrace:
            entry["peers"] = score_trace_peer(series, ptrace)
            entry["origins"] = ptrace["origins"]
            log(f"{path.stem}: scored {len(entry['peers'])} peer models")
        else:
            entry["peers"] = {}
        if prev is not None and prev["traces"].get(path.stem, {}).get("headroom"):
            hr = prev["traces"][path.stem]["headroom"]
            log(f"{path.stem}: headroom results reused from {args.reuse_headroom}")
        elif not missing:
            log(f"{path.stem}: headroom backtest ...")
            hr = headroom_trace(series)
        else:
            hr = None
        if hr is not None:
            if ptrace:
                want = [pd.Timestamp(o).isoformat() for o in ptrace["origins"]]
                got = [pd.Timestamp(o).isoformat() for o in hr["origins"]]
                hr["origins_match_peers"] = want == got
                if want != got:
                    log(f"{path.stem}: WARNING headroom origins {got} != peers {want}")
            entry["headroom"] = hr
            log(f"{path.stem}: headroom auto MASE {_f(hr['models']['auto']['mase'])} (selected {hr['selected']}) "
                f"in {hr['wall_seconds']:.1f}s")
        report["traces"][path.stem] = entry
        write(report, args)  # partial results survive a long run being stopped

    if args.m4_only:
        pass
    elif prev is not None and prev.get("heldout"):
        report["heldout"] = prev["heldout"]
    elif peers.get("heldout"):
        report["heldout"] = score_heldout(peers["heldout"], missing)
    else:
        log("no held-out peer forecasts in the peer output: `bench/peers/run_peers.py --resume` adds them")
    if args.m4_only:
        pass
    elif peers.get("weeks"):
        windows = week_windows(DATA)
        from forecast.backtest import AutoForecaster
        picking = {PICKING: lambda: AutoForecaster(horizon=TRACE_H, min_selection_folds=0),
                   POOLED: lambda: AutoForecaster(horizon=TRACE_H, weak_evidence="mean")}
        report["weeks"] = score_heldout(peers["weeks"], missing, build=lambda name: windows[name][1], label="week",
                                        variants=picking)
    else:
        log("no one-week peer forecasts in the peer output: `bench/peers/run_peers.py --resume` adds them")
    if args.m4_only:
        pass
    elif peers.get("kinds"):
        report["kinds"] = score_kinds(peers["kinds"], missing)
    else:
        log("no synthetic-kind peer forecasts in the peer output: `bench/peers/run_peers.py --resume` adds them")
    write(report, args)

    ids, train, test = load_m4()
    pub = published_m4()
    bench = m4_benchmarks(train, test)
    n2 = bench["Naive2"]
    methods = dict(bench)
    log(f"M4 Naive2 sMAPE {n2['smape']:.3f} MASE {n2['mase']:.3f} (published {pub['Naive2']['smape']} / "
        f"{pub['Naive2']['mase']}); sNaive {bench['sNaive']['smape']:.3f} / {bench['sNaive']['mase']:.3f} / "
        f"OWA {bench['sNaive']['owa']:.3f}")
    if peers.get("m4"):
        for name, r in score_m4_peers(peers["m4"], ids, train, test, n2).items():
            methods[f"statsforecast {name}"] = r
            log(f"M4 statsforecast {name}: sMAPE {r['smape']:.3f} MASE {r['mase']:.3f} OWA {r['owa']:.3f}")
    if prev is not None and "headroom" in prev.get("m4", {}).get("methods", {}):
        methods["headroom"] = prev["m4"]["methods"]["headroom"]
    elif not missing and not args.skip_m4_headroom:
        c = args.m4_candidates
        cands = None if c == "default" else c if c in ("fast", "full") else tuple(c.split(","))
        k = args.m4_limit or len(train)
        log(f"M4 headroom AutoForecaster({c}) on {k} series, {args.workers} workers ...")
        hr = headroom_m4(train[:k], M4_H, cands, args.workers)
        sc = m4_score(hr["forecasts"], train[:k], test[:k])
        n2k = n2 if k == len(train) else m4_score([naive2(t) for t in train[:k]], train[:k], test[:k])
        chosen = pd.Series(hr["chosen"]).value_counts().to_dict()
        methods["headroom"] = {**sc, **m4_coverage(hr["bands"], test[:k]), "owa": owa(sc, n2k),
                               "seconds_per_series": float(np.mean(hr["seconds"])),
                               "wall_seconds": hr["wall_seconds"], "series": k, "chosen": chosen, "candidates": c}
        log(f"M4 headroom: sMAPE {sc['smape']:.3f} MASE {sc['mase']:.3f} OWA {owa(sc, n2k):.3f} coverage 80/90 "
            f"{methods['headroom']['coverage_80']:.3f}/{methods['headroom']['coverage_90']:.3f} "
            f"in {hr['wall_seconds']:.0f}s")
        if k == len(train):
            found = m4_global(train, test, hr["forecasts"])
            report["m4_global"] = found
            weight = found["weight"]
            for label, name in (("global", "headroom global"),
                                ("combination", f"headroom {weight:g} x global + {1 - weight:g} x auto")):
                methods[name] = {**found["scores"][label]["all"], "series": k}
    report["m4"] = {"series": len(ids), "methods": methods, "published": pub}
    write(report, args)
    if args.protocol_round1:
        report["choices_round1"] = json.loads(args.protocol_round1.read_text())
    if args.m4_only:
        pass
    elif args.intervals_only:
        report.update({k: earlier[k] for k in ("choices_round1", "choices") if k in earlier})
        report["choices_from"] = earlier.get("choices_from", earlier["generated"])
    elif args.reuse_protocol:
        reused = json.loads(args.reuse_protocol.read_text())
        report["choices"] = reused.get("choices", reused)
    elif not missing and not args.skip_protocol:
        traces = {p.stem: load_trace(p) for p in sorted((DATA / "traces").glob("*_hourly.csv"))}
        report["choices"] = protocol(traces, args.workers, args.m4_limit)
    write(report, args)
    if args.m4_only:
        pass
    elif args.reuse_intervals:
        report["intervals"] = json.loads(args.reuse_intervals.read_text())["intervals"]
    elif not missing and not args.skip_intervals:
        traces = {p.stem: load_trace(p) for p in sorted((DATA / "traces").glob("*_hourly.csv"))}
        heldout = {n: (heldout_series(n), e["origin_index"]) for n, e in peers.get("heldout", {}).items()}
        report["intervals"] = interval_protocol(traces, heldout, args.workers, args.m4_limit)
    write(report, args)
    if (prev or earlier).get("scale"):
        report["scale"] = (prev or earlier)["scale"]
    elif not missing and not args.skip_scale:
        log("scale test: 1000 synthetic series ...")
        report["scale"] = scale_test(1000, args.workers)
        log(f"scale test: {report['scale']['wall_seconds']:.1f}s")
    if "scale" in report and not missing and not args.skip_scale:
        log("scale test: the global model on the same 1000 synthetic series ...")
        report["scale"]["global"] = global_scale(1000)
        log(f"scale test, global model: {report['scale']['global']['wall_seconds']:.1f}s")
    report["notes"] = notes(report, peers)
    final = write(report, args)
    log(f"wrote {args.out} and {args.md}")
    for name, t in final["targets"].items():
        log(f"target {name}: {'PASS' if t['pass'] else 'FAIL'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
