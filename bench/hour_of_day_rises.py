"""Experiment (rejected, reverted): the rises' warm buffer from the last week's rises at the same hours of day
(+-WIDTH h) only, instead of from all of them.

  python bench/hour_of_day_rises.py 1            -> the --choose rows (history only) for the shipped rule
  python bench/hour_of_day_rises.py 1 --evaluate -> the whole bench on the evaluated weeks, into /tmp/hodbench
"""
import math
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "bench"), str(REPO)]
import numpy as np  # noqa: E402

import planning.planner as pl  # noqa: E402


def hod_rise_buffer(w, h):
    q = w.warm_buffer_quantile
    if q is None or h.newest is None:
        return 0.0
    times, values = h.last_week
    if len(times) < 2:
        return 0.0
    step = pl._sampling_step(times)
    if not step > 0:
        return 0.0
    behind = int(w.scale_in_delay_seconds // step) + 1
    ahead = max(int(math.ceil(w.lead_time_seconds / step - 1e-9)), 1)
    n = len(values) - behind - ahead + 1
    if n < 1:
        return 0.0
    gpus = w.gpus_each(values)
    finite = np.isfinite(values)
    before, after = pl._window_peaks(np.where(finite, gpus, np.nan), behind, ahead)
    at_hour = ((times[behind - 1:behind - 1 + n] // 3600) % 24).astype(int)
    now_hour = int((h.now // 3600) % 24)
    near = np.minimum((at_hour - now_hour) % 24, (now_hour - at_hour) % 24) <= WIDTH
    seen = np.isfinite(before) & np.isfinite(after) & near
    before, after = before[seen], after[seen]
    rise = (after - before) / np.sqrt(np.maximum(before, 1))
    if not len(rise):
        return 0.0
    return max(float(np.quantile(rise, q)), 0.0)

WIDTH = int(sys.argv[1]) if len(sys.argv) > 1 else 1
pl._rise_buffer = hod_rise_buffer
import simulate_bench as sb  # noqa: E402

if "--evaluate" in sys.argv:
    sys.exit(sb.main(["--out", "/tmp/hodbench"]))
sb.RULES = {k: v for k, v in sb.RULES.items() if "objective" in k}
files = sorted(p for p in sb.DATA.glob("*.csv") if not p.name.endswith("_hourly.csv")) + [sb.DEMO_HISTORY]
for path in files:
    out = sb.choose(sb.load(path, sb.DAYS, None), sb.TuneConfig())
    (r,) = out.values()
    print(path.stem, f"width {WIDTH}: util {r['utilization']:.3f} short {r['shortage_within_cluster']:.3%} "
          f"steps {r['short_steps']:.2%} met {r['objective_met']} goodput {r['training_goodput']:.3f}",
          r["policy"]["targetQuantile"], r["policy"]["warmBuffer"], flush=True)
