"""`headroom simulate` and `headroom tune`: the what-if engine on a demand trace."""
from __future__ import annotations

from datetime import datetime, timezone

from cli.config import Config
from cli.sources import source


def native_series(cfg: Config):
    """The history at its own step (the simulator replays every sample), gaps kept."""
    from forecast.history import at_own_step

    return at_own_step(source(cfg, datetime.now(timezone.utc)).fetch())


def simulation(cfg: Config):
    """Keyword arguments for simulate() from the config, and the forecaster factory."""
    from dataclasses import replace

    import pandas as pd

    from controller.simulate import SimSettings
    from forecast.backtest import AutoForecaster

    c = cfg.simulate
    settings = replace(SimSettings(), target_quantile=c.target_quantile, headroom_quantile=c.headroom_quantile,
                       lead_time_seconds=c.lead_time_seconds, warmup_seconds=c.warmup_seconds,
                       reclaim_deadline_seconds=c.reclaim_deadline_seconds,
                       checkpoint_interval_seconds=c.checkpoint_interval_seconds)
    jobs = pd.read_csv(c.jobs) if c.jobs else None
    kwargs = dict(gpus=c.gpus, peak_gpus=None if c.per_gpu else c.peak_gpus, per_gpu=c.per_gpu, days=c.days,
                  jobs=jobs, make_forecaster=lambda: AutoForecaster("fast", horizon=24))
    return settings, kwargs


def cmd_simulate(cfg: Config, args) -> int:
    from dataclasses import asdict

    from controller.simulate import simulate

    settings, kwargs = simulation(cfg)
    result = simulate(native_series(cfg), policy=cfg.simulate.policy, settings=settings, **kwargs)
    if args.json:
        print(result.to_json())
    else:
        for key, value in asdict(result).items():
            print(f"{key:<26}{value:.4g}" if isinstance(value, float) else f"{key:<26}{value}")
    return 0


def cmd_tune(cfg: Config, args) -> int:
    from controller.tune import plot_tradeoff, tune

    settings, kwargs = simulation(cfg)
    t = cfg.tune
    result = tune(native_series(cfg), kwargs.pop("make_forecaster"), target_quantiles=t.target_quantiles,
                  lead_times_seconds=t.lead_times_seconds, headroom_quantiles=t.headroom_quantiles,
                  shortage_objective=t.shortage_objective, base=settings, **kwargs)
    cols = ["target_quantile", "lead_time_seconds", "headroom_quantile", "utilization", "inference_shortage",
            "training_goodput", "headroom_violations"]
    print(result.table[cols].to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print(f"recommended: {result.recommended} ({result.reason})")
    print(f"trade-off plot: {plot_tradeoff(result, args.plot)}")
    return 0
