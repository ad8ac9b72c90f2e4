"""One-week histories for the forecast bench: issue 13's one-week held-out trace kind, as the shared data has it.

Every whole week (168 hours from the series' start) of each series becomes a history of its own, scored as
`headroom backtest --horizon 24 --folds 7 --step 24` scores a one-week trace: 5 daily origins from two days on
(ORIGINS). Three kinds of series:
- "choose": the shared hourly traces. The forecast protocol chooses on their weeks (its `week` unit).
- "related": the peak in each hour of the sub-hourly traces: held out, but the same weeks of the same services.
- "independent": the GPUs in use of the shared job trace (bench/gpu_gauge.py): nothing was chosen on it.
A week with a missing hour is left out: the NASA trace's outage (1-3 August 1995) leaves no scorable folds.

Shared by bench/peers/run_peers.py (statsforecast's venv, which never imports headroom) and
bench/forecast_bench.py, so both score the same windows.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from gpu_gauge import GAUGE, gpus_in_use, timestamps

WEEK = 168
HORIZON = 24
ORIGINS = [48, 72, 96, 120, 144]  # origins(168, 24, folds=7, step=24) with backtest's two days of minimum history


def hourly(path: Path, peak: bool) -> pd.Series:
    """A shared trace's values; `peak`: a sub-hourly trace's peak in each hour (the held-out `_max` series)."""
    frame = pd.read_csv(path)
    series = pd.Series(pd.to_numeric(frame["value"], errors="coerce").to_numpy(dtype=float),
                       index=pd.to_datetime(frame["timestamp"], utc=True))
    return series.resample("1h").max() if peak else series


def source_series(data: Path) -> dict[str, tuple[str, pd.Series]]:
    """name -> (kind, hourly series)."""
    out = {}
    for path in sorted((data / "traces").glob("*.csv")):
        is_hourly = path.stem.endswith("_hourly")
        out[path.stem if is_hourly else f"{path.stem}_max"] = ("choose" if is_hourly else "related",
                                                            hourly(path, peak=not is_hourly))
    gauge = gpus_in_use(data / "jobs" / "alibaba_openb_pods.csv")
    out[GAUGE] = ("independent", pd.Series(gauge, index=pd.to_datetime(timestamps(len(gauge)), utc=True)))
    return out


def week_windows(data: Path) -> dict[str, tuple[str, pd.Series]]:
    """"<series>#w<k>" -> (kind, the k-th whole week of the series), weeks with a missing hour left out."""
    out = {}
    for name, (kind, series) in source_series(data).items():
        for k in range(len(series) // WEEK):
            week = series.iloc[k * WEEK:(k + 1) * WEEK]
            if np.isfinite(week.to_numpy(dtype=float)).all():
                out[f"{name}#w{k}"] = (kind, week.rename(f"{name}#w{k}"))
    return out
