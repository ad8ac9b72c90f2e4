"""statsforecast's MSTL on the scale test's series, timed in the same run as headroom (issue 13's speed target).

Runs in bench/.venv-peers; never imports headroom. bench/forecast_bench.py's scale test writes the series it
forecast (an .npz of equal-length hourly arrays, NaN = a gap) and calls this with it; this prints one JSON line.
Gaps are filled the way the other peer runs fill them (linear interpolation); MSTL is configured as on the traces
(daily and weekly seasons, AutoETS trend) and run the way a statsforecast user runs many series: one
StatsForecast call over the long frame, with as many jobs as headroom's workers.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import warnings

import numpy as np
import pandas as pd
from statsforecast import StatsForecast
from statsforecast.models import MSTL, AutoETS


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("series", help=".npz with an array `values` (series x hours)")
    ap.add_argument("--horizon", type=int, default=48)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    values = np.load(args.series)["values"]
    n, hours = values.shape
    filled = pd.DataFrame(values.T).interpolate(method="linear", limit_direction="both").to_numpy().T
    frame = pd.DataFrame({"unique_id": np.repeat(np.arange(n), hours),
                          "ds": np.tile(pd.date_range("2026-01-05", periods=hours, freq="h"), n),
                          "y": filled.ravel()})
    model = MSTL(season_length=[24, 168], trend_forecaster=AutoETS(model="ZZN"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # numba compiles on the first fit: a small warm-up call, not billed
        StatsForecast(models=[model], freq="h", n_jobs=1).forecast(df=frame[frame.unique_id == 0], h=args.horizon)
        started = time.perf_counter()
        out = StatsForecast(models=[model], freq="h", n_jobs=args.workers).forecast(df=frame, h=args.horizon)
        wall = time.perf_counter() - started
    if len(out) != n * args.horizon or not np.isfinite(out["MSTL"].to_numpy()).all():
        print(json.dumps({"error": f"MSTL returned {len(out)} rows for {n} series x {args.horizon} hours"}))
        return 1
    print(json.dumps({"series": n, "hours": hours, "horizon": args.horizon, "workers": args.workers,
                      "wall_seconds": wall}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
