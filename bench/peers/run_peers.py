"""Raw statsforecast peer forecasts for the headroom forecast benchmark.

Runs in bench/.venv-peers (see bench/setup_peers.sh); never imports headroom.
Emits forecasts, not scores: bench/forecast_bench.py scores peers and headroom
with the one scorer (forecast.metrics).

Protocol
- Traces (shared/data/traces/*_hourly.csv, `timestamp,value`, blank = missing):
  rolling origin, the last FOLDS origins STEP hours apart, horizon 24; origin k
  is n - horizon - step*(folds-1-k), so the last fold ends at the last point.
  Each fold fits only on data before its origin. Gaps in the fitting window are
  filled the way a user would for statsforecast (which rejects NaN): linear
  interpolation in time, edges held at the nearest real value. Actuals are left
  as they are (NaN is not scored).
- M4 hourly: 414 series, train/test wide rows, horizon 48, season 24.
- Held-out: the hourly max of each sub-hourly trace (last FOLDS origins),
  nasa's 28 daily origins before the last FOLDS and the job trace's GPUs in use
  (bench/gpu_gauge.py); the series are stored so the harness can check it
  builds the same ones. AutoARIMA runs there too, under the same time limit.
- One-week histories (bench/week_windows.py): every whole week of every series above, 5 daily origins from
  two days on, as `headroom backtest --folds 7` scores a one-week trace; the peers a week allows (one daily
  season; Holt-Winters damped added, one of the owner's peers there), AutoARIMA under the same limit.
- Synthetic held-out kinds (bench/kinds.py): each kind's seeds 1-9, hourly, at the origins of
  `headroom backtest --folds 7`, the same peers as the one-week histories.
- Wall time is per model per fold (traces) or per series (M4), after a warm-up
  call on a small series so numba JIT compilation is not billed to fold 1.
"""
from __future__ import annotations

import argparse
import json
import math
import signal
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from statsforecast.models import MSTL, AutoARIMA, AutoETS, AutoTheta, SeasonalNaive

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gpu_gauge import GAUGE, gpus_in_use, timestamps  # noqa: E402  shared with the harness
from kinds import CHOOSE_SEEDS, KINDS, TEST_SEEDS, backtest_origins  # noqa: E402  shared with the harness
from kinds import hourly as kind_hourly  # noqa: E402
from m4_files import read_wide  # noqa: E402  shared with the harness
from week_windows import HORIZON, ORIGINS, hourly, week_windows  # noqa: E402  shared with the harness

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / ".." / "shared" / "data"
LEVELS = [80, 90]
ARIMA_LIMIT_S = 60.0


def log(*parts) -> None:
    print("[peers]", *parts, file=sys.stderr, flush=True)


def trace_models() -> dict:
    return {
        "SeasonalNaive24": lambda: SeasonalNaive(season_length=24),
        "SeasonalNaive168": lambda: SeasonalNaive(season_length=168),
        "AutoETS24": lambda: AutoETS(season_length=24),
        "MSTL24_168": lambda: MSTL(season_length=[24, 168], trend_forecaster=AutoETS(model="ZZN")),
        "AutoTheta24": lambda: AutoTheta(season_length=24),
    }


def m4_models() -> dict:
    return {
        # cheapest first: the file is rewritten after each model, so a long run leaves usable partial output
        "SeasonalNaive": lambda: SeasonalNaive(season_length=24),
        "MSTL": lambda: MSTL(season_length=24, trend_forecaster=AutoETS(model="ZZN")),
        "AutoTheta": lambda: AutoTheta(season_length=24),
        "AutoETS": lambda: AutoETS(season_length=24),
    }


def fill_for_fit(y: np.ndarray) -> np.ndarray:
    s = pd.Series(y, dtype=float)
    return s.interpolate(method="linear", limit_direction="both").to_numpy()


def fold_origins(n: int, horizon: int, folds: int, step: int) -> list[int]:
    return [n - horizon - step * (folds - 1 - k) for k in range(folds)]


def _r(a) -> list:
    return [None if not math.isfinite(v) else float(f"{v:.6g}") for v in np.asarray(a, dtype=float)]


def forecast(make, y: np.ndarray, h: int, levels: list[int] | None):
    """(output dict with mean/lo/hi lists, seconds, error)."""
    started = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = make()
            try:
                res = model.forecast(y=y, h=h, level=levels) if levels else model.forecast(y=y, h=h)
            except Exception:
                if not levels:
                    raise
                res = model.forecast(y=y, h=h)  # model without intervals
        seconds = time.perf_counter() - started
        out = {"mean": _r(res["mean"])}
        for lv in levels or []:
            if f"lo-{lv}" in res:
                out[f"lo-{lv}"] = _r(res[f"lo-{lv}"])
                out[f"hi-{lv}"] = _r(res[f"hi-{lv}"])
        return out, seconds, None
    except Exception as exc:  # recorded, not fatal
        return None, time.perf_counter() - started, f"{type(exc).__name__}: {exc}"


def warm_up(models: dict) -> None:
    rng = np.random.default_rng(0)
    y = 10 + np.sin(np.arange(24 * 21) * 2 * np.pi / 24) + rng.normal(0, 0.1, 24 * 21)
    for name, make in models.items():
        if name.startswith("AutoARIMA"):
            continue
        forecast(make, y, 24, LEVELS)


class _Timeout(Exception):
    pass


def _alarm(*_):
    raise _Timeout()


def forecast_limited(name: str, make, y: np.ndarray, h: int, levels: list[int] | None):
    """forecast(), with AutoARIMA stopped (error "timeout") when one fit takes over ARIMA_LIMIT_S."""
    if not name.startswith("AutoARIMA"):
        return forecast(make, y, h, levels)
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(int(ARIMA_LIMIT_S) + 1)
    try:
        res, sec, err = forecast(make, y, h, levels)
    except _Timeout:
        return None, ARIMA_LIMIT_S, "timeout"
    finally:
        signal.alarm(0)
    return (None, sec, "timeout") if sec > ARIMA_LIMIT_S else (res, sec, err)


def run_traces(horizon: int, folds: int, step: int, arima: bool, only_arima: bool = False) -> dict:
    models = {} if only_arima else trace_models()
    warm_up(models)
    out = {}
    for path in sorted((DATA / "traces").glob("*_hourly.csv")):
        frame = pd.read_csv(path)
        ts = frame["timestamp"].tolist()
        y = pd.to_numeric(frame["value"], errors="coerce").to_numpy(dtype=float)
        n = len(y)
        origins = fold_origins(n, horizon, folds, step)
        name = path.stem
        trace = {"file": path.name, "n": n, "origins": [ts[o] for o in origins], "origin_index": origins,
                 "fill": "linear interpolation (edges: nearest value)", "models": {}}
        run = dict(models)
        if arima:
            run["AutoARIMA24"] = lambda: AutoARIMA(season_length=24)
        for mname, make in run.items():
            trace["models"][mname] = run_folds(name, mname, make, y, ts, origins, horizon, LEVELS)
        out[name] = trace
    return out


def run_folds(label: str, mname: str, make, y: np.ndarray, ts: list[str], origins: list[int], horizon: int,
              levels: list[int] | None) -> list | dict:
    """One model's forecast at each origin, fitted on the gap-filled data before it; for AutoARIMA, {"dropped":
    why} at its first fit over ARIMA_LIMIT_S."""
    folds_out = []
    for k, o in enumerate(origins):
        res, sec, err = forecast_limited(mname, make, fill_for_fit(y[:o]), horizon, levels)
        if err == "timeout":
            log(f"{label} {mname}: fold {k} took over {ARIMA_LIMIT_S:.0f}s, dropped")
            return {"dropped": f"over {ARIMA_LIMIT_S:.0f} s per fold"}
        folds_out.append({"origin": ts[o], "seconds": round(sec, 4), "error": err, **(res or {})})
    log(f"{label} {mname}: {len(folds_out)} folds, {sum(f['seconds'] for f in folds_out):.2f}s")
    return folds_out


# Held-out series, never used to choose anything in headroom: the peak-in-hour (hourly max) of every sub-hourly
# trace, nasa's 28 daily origins before the main benchmark's last 7, and the GPU job trace's GPUs in use.
EARLIER_FOLDS = 28


def heldout_series(horizon: int, folds: int, step: int) -> dict:
    """name -> (timestamps, values, origin indices)."""
    out = {}
    for path in sorted((DATA / "traces").glob("*.csv")):
        if path.stem.endswith("_hourly"):
            if path.stem.startswith("nasa"):
                frame = pd.read_csv(path)
                values = pd.to_numeric(frame["value"], errors="coerce").to_numpy(dtype=float)
                origins = fold_origins(len(values), horizon, folds + EARLIER_FOLDS, step)[:EARLIER_FOLDS]
                out[f"{path.stem}_earlier"] = (frame["timestamp"].tolist(), values, origins)
            continue
        peaks = hourly(path, peak=True)
        ts = [t.isoformat() for t in peaks.index]
        out[f"{path.stem}_max"] = (ts, peaks.to_numpy(dtype=float), fold_origins(len(peaks), horizon, folds, step))
    gauge = gpus_in_use(DATA / "jobs" / "alibaba_openb_pods.csv")
    out[GAUGE] = (timestamps(len(gauge)), gauge, fold_origins(len(gauge), horizon, folds, step))
    return out


def run_series(label: str, models: dict, series: dict, horizon: int, levels: list[int] | None) -> dict:
    """Every model at each series' origins: name -> {**extra, "y", "origin_index", "origins", "models"}, `series`
    being name -> (timestamps, values, origin indices, extra fields)."""
    warm_up(models)
    out = {}
    for name, (ts, y, origins, extra) in series.items():
        entry = {**extra, "y": _r(y), "origin_index": origins, "origins": [ts[o] for o in origins], "models": {}}
        for mname, make in models.items():
            entry["models"][mname] = run_folds(f"{label} {name}", mname, make, y, ts, origins, horizon, levels)
        out[name] = entry
    return out


def run_heldout(horizon: int, folds: int, step: int) -> dict:
    models = {**trace_models(), "AutoARIMA24": lambda: AutoARIMA(season_length=24)}
    series = {name: (ts, y, origins, {}) for name, (ts, y, origins) in heldout_series(horizon, folds, step).items()}
    return run_series("held-out", models, series, horizon, None)


def daily_models() -> dict:
    """The peers a series of one or two weeks allows: one daily season (a weekly one needs more), Holt-Winters damped
    added (one of the owner's peers there)."""
    weekly = ("SeasonalNaive168", "MSTL24_168")
    return {**{k: v for k, v in trace_models().items() if k not in weekly},
            "HoltWintersDamped24": lambda: AutoETS(season_length=24, model="AAA", damped=True),
            "MSTL24": lambda: MSTL(season_length=24, trend_forecaster=AutoETS(model="ZZN")),
            "AutoARIMA24": lambda: AutoARIMA(season_length=24)}


def run_weeks() -> dict:
    series = {name: ([t.isoformat() for t in week.index], week.to_numpy(dtype=float), ORIGINS, {"kind": kind})
              for name, (kind, week) in week_windows(DATA).items()}
    return run_series("week", daily_models(), series, HORIZON, LEVELS)


def run_kinds() -> dict:
    """The synthetic held-out kinds (bench/kinds.py), hourly, at `headroom backtest --folds 7`'s origins."""
    series = {}
    for kind in KINDS:
        for seed in (*CHOOSE_SEEDS, *TEST_SEEDS):
            y = kind_hourly(kind, seed)
            series[str(y.name)] = ([t.isoformat() for t in y.index], y.to_numpy(dtype=float),
                                   backtest_origins(len(y)), {"kind": kind, "seed": seed})
    return run_series("kind", daily_models(), series, HORIZON, LEVELS)


def run_m4(horizon: int, limit: int | None, save=None, only=None, previous=None) -> dict:
    ids, train = read_wide(DATA / "m4" / "Hourly-train.csv")
    if limit:
        ids, train = ids[:limit], train[:limit]
    models = {k: v for k, v in m4_models().items() if not only or k in only}
    warm_up(models)
    out = previous if previous and previous.get("ids") == ids else {"ids": ids, "horizon": horizon, "season": 24,
                                                                     "models": {}}
    for mname, make in models.items():
        means, secs, errors = [], [], {}
        started = time.perf_counter()
        for i, (sid, y) in enumerate(zip(ids, train)):
            res, sec, err = forecast(make, y, horizon, None)
            if err:
                errors[sid] = err
                res = {"mean": _r(np.repeat(y[-24:], 2)[:horizon])}  # recorded fallback: sNaive
            means.append(res["mean"])
            secs.append(round(sec, 4))
            if (i + 1) % 100 == 0:
                log(f"M4 {mname}: {i + 1}/{len(ids)} ({time.perf_counter() - started:.0f}s)")
        out["models"][mname] = {"mean": means, "seconds": secs, "errors": errors}
        log(f"M4 {mname}: done, {sum(secs):.1f}s total, {len(errors)} errors")
        if save:
            save(out)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "peers.json")
    ap.add_argument("--horizon", type=int, default=24)
    ap.add_argument("--folds", type=int, default=7)
    ap.add_argument("--step", type=int, default=24)
    ap.add_argument("--m4-limit", type=int, default=None, help="only the first N M4 series (smoke runs)")
    ap.add_argument("--skip-m4", action="store_true")
    ap.add_argument("--no-arima", action="store_true", help="skip the AutoARIMA attempt on traces")
    ap.add_argument("--heldout", action="store_true", help="run the held-out stage again, keeping the rest")
    ap.add_argument("--weeks", action="store_true", help="run the one-week stage again, keeping the rest")
    ap.add_argument("--kinds", action="store_true", help="run the synthetic kinds' stage again, keeping the rest")
    ap.add_argument("--resume", action="store_true",
                    help="keep what --out already holds; run only the M4 models it lacks, the held-out, one-week "
                         "and kinds stages if missing, and the ARIMA stage")
    args = ap.parse_args(argv)
    if not DATA.is_dir():
        log(f"no data at {DATA}")
        return 2
    import statsforecast
    result = {"statsforecast": statsforecast.__version__, "pandas": pd.__version__, "levels": LEVELS,
              "protocol": {"horizon": args.horizon, "folds": args.folds, "step": args.step,
                           "m4_horizon": 48, "arima_limit_s": ARIMA_LIMIT_S}}
    # Order: traces, M4 (cheapest model first), the held-out series, the one-week histories, then the AutoARIMA
    # attempt on traces; saved after each stage.
    old = json.loads(args.out.read_text()) if args.resume and args.out.exists() else {}
    result["traces"] = old.get("traces") or run_traces(args.horizon, args.folds, args.step, arima=False)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if old.get("m4"):
        result["m4"] = old["m4"]

    def save(m4=None):
        if m4 is not None:
            result["m4"] = m4
        args.out.write_text(json.dumps(result))
        log(f"saved {args.out}")

    save()
    if not args.skip_m4:
        done = set(old.get("m4", {}).get("models", {})) if old else set()
        todo = [m for m in m4_models() if m not in done]
        if todo:
            run_m4(48, args.m4_limit, save=save, only=todo, previous=old.get("m4"))
        else:
            result["m4"] = old["m4"]
    if args.heldout or not old.get("heldout"):
        result["heldout"] = run_heldout(args.horizon, args.folds, args.step)
        save()
    else:
        result["heldout"] = old["heldout"]
    if args.weeks or not old.get("weeks"):
        result["weeks"] = run_weeks()
        save()
    else:
        result["weeks"] = old["weeks"]
    if args.kinds or not old.get("kinds"):
        result["kinds"] = run_kinds()
        save()
    else:
        result["kinds"] = old["kinds"]
    if not args.no_arima:
        arima = run_traces(args.horizon, args.folds, args.step, arima=True, only_arima=True)
        for name, trace in arima.items():
            result["traces"][name]["models"].update(trace["models"])
        save()
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
