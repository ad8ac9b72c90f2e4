"""A GPU-in-use gauge from the shared GPU job trace; shared by the peer script (its own venv) and the harness.

Issue 13's held-out traces include "a GPU-in-use gauge that drifts slowly with no daily cycle", and no shared
trace is one. The job trace (jobs/alibaba_openb_pods.csv, a production GPU cluster) is: summing the GPUs of the
pods running at each hour gives the cluster's GPUs in use. Nothing in headroom was chosen on it.
"""
from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

HOUR = 3600
GAUGE = "alibaba_openb_gpus_in_use"  # the held-out series' name, in the peers' output and the report
# Before its last six weeks the trace holds a few long-running pods (1-13 GPUs, 13 changes in 15 weeks): a
# gauge with nearly nothing to forecast, on which the MASE scale is close to 0. The last six weeks are the
# working cluster (13-58 GPUs, changing in 76 % of the hours).
DAYS = 42
START = "2024-01-01T00:00:00+00:00"  # the trace's clock is relative (seconds from its start)


def gpus_in_use(path: Path, days: int = DAYS) -> np.ndarray:
    """GPUs held by running pods at the start of each hour of the trace's last `days` days: a pod holds
    num_gpu GPUs, or gpu_milli / 1000 of one when it asks for a single GPU; pods never scheduled hold none."""
    starts, ends, gpus = [], [], []
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh):
            if not row["scheduled_time"]:
                continue
            starts.append(float(row["scheduled_time"]))
            ends.append(float(row["deletion_time"]))
            n = int(row["num_gpu"])
            gpus.append(int(row["gpu_milli"]) / 1000 if n == 1 else n)
    if not starts:
        raise ValueError(f"{path}: no pod was ever scheduled, so no GPU was ever in use")
    begin, end, held = np.array(starts), np.array(ends), np.array(gpus)
    last = int(end.max() // HOUR) * HOUR
    hours = np.arange(last - (days * 24 - 1) * HOUR, last + 1, HOUR, dtype=float)
    running = (begin[None, :] <= hours[:, None]) & (end[None, :] > hours[:, None])
    return running.astype(float) @ held


def timestamps(n: int) -> list[str]:
    """ISO hours from START: the clock the series is given to both sides."""
    first = np.datetime64(START.removesuffix("+00:00"), "h")
    return [f"{first + k}:00:00+00:00" for k in range(n)]
