"""The `headroom` command. Heavy libraries are imported inside the subcommands
so `headroom --help` stays fast.

Exit status: 0 ok, 1 the work failed (unusable data, a server down, an output that cannot be written), 2 the
request was invalid (bad flag, bad configuration); nothing is half-done on 2. 141: the reader of its output went away.
"""
from __future__ import annotations

import argparse
import difflib
import json
import signal
import sys
from datetime import UTC, datetime

from cli.config import Config, config_source, flag_path, load_config
from cli.outputs import NamedStream, ReaderGone
from cli.progress import counter
from cli.simulate import cmd_simulate, cmd_tune
from cli.sources import history_name, load_series
from controller.simulate import POLICIES, TUNABLE
from core.errors import BadRequest, ConfigError, HeadroomError
from forecast.baselines import BASELINES


def _quantile_list(text: str) -> list[float]:
    try:
        return [float(q) for q in text.split(",")]  # 0.5,,0.9 is a value left out, not two quantiles
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of numbers: {text!r}") from None


def _capped_quantiles(frame, model) -> list[str]:
    """Upper quantiles equal to the one below them in every hour: the calibration folds (on a short history, the
    refits that stand in for them) showed no larger error, and split conformal places no bound above the largest
    error n of them showed beyond level n / (n + 1)."""
    import numpy as np

    from forecast.calibrate import INTERVALS, scored_folds

    upper = [q for q in frame.columns if q > 0.5]
    # equal up to rounding: the same largest error reaches each quantile by its own sum (112.94095225512592 and
    # ...259 on a history that repeats each day)
    capped = [q for below, q in zip(upper, upper[1:]) if np.allclose(frame[q], frame[below], rtol=1e-9, atol=0)]
    if not capped:
        return []
    folds = scored_folds(model.residuals_)
    shown_by = (f"{folds} calibration folds" if folds >= INTERVALS.min_folds else
                f"the model's refits every {INTERVALS.refit_step} h (a history with {folds} daily calibration folds, "
                f"under {INTERVALS.min_folds}, has its bands from them)")
    return [f"{', '.join(f'q{q:g}' for q in capped)} equal the quantile below in every hour: the largest error shown "
            f"by {shown_by} (with n of them nothing above level n/(n+1) can be told from it); more history gives room "
            "above it"]


def _uncalibrated(model) -> list[str]:
    """The bands are the models' own where the history has neither the calibration folds nor a refit with a whole
    horizon after its first day (calibrate.calibrated_predict's last fallback)."""
    from forecast.calibrate import DAY, INTERVALS, refit_origins, scored_folds

    hours = len(model.history_)
    if scored_folds(model.residuals_) >= INTERVALS.min_folds or refit_origins(hours, model.horizon):
        return []
    return [f"the bands are the models' own, not calibrated: {hours} h of history leave no refit with a whole "
            f"{model.horizon} h horizon after the first day; {DAY + model.horizon} h of history, or a shorter "
            "--horizon, calibrate them on the history's own errors"]


def _refuse_under_two_days(cfg: Config, series, needs: str) -> None:
    """A model fits on two days of hours with data at least: its quantiles come from day-over-day errors, and fewer
    would give q0.5 = q0.99 (a backtest's every fold would score null)."""
    from forecast.calibrate import MIN_FIT_HOURS
    from forecast.history import HistoryError

    real = int(series.notna().sum())
    if real < MIN_FIT_HOURS:
        raise HistoryError(f"{history_name(cfg)}: {real} hourly points with data of {len(series)}; {needs} at "
                           f"least {MIN_FIT_HOURS} (two days): its quantiles come from day-over-day errors")


def cmd_forecast(cfg: Config, args) -> int:
    from forecast.backtest import AutoForecaster
    from forecast.clock import on_clock

    # the cleaning report is printed with the forecast (the table's header, the JSON's "cleaning"); a CSV has no room
    series, report = load_series(cfg, datetime.now(UTC), say=args.csv)
    _refuse_under_two_days(cfg, series, "a forecast needs")
    # inner folds as long as the horizon asked: the procedure `backtest --horizon` scores as `auto`
    model = AutoForecaster(horizon=cfg.forecast.horizon)
    frame = on_clock(model, cfg.forecast.timezone).fit(series).predict(cfg.forecast.horizon, cfg.forecast.quantiles)
    notes = _capped_quantiles(frame, model) + _uncalibrated(model)
    if model.fallback_reason:
        notes.append(f"{model.name}: fallback to seasonal naive ({model.fallback_reason})")
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    if args.json:
        print(json.dumps({"model": model.name, "cleaning": report.lines(), "notes": notes,
                          "forecast": [{"timestamp": ts.isoformat(), **{f"q{q:g}": v for q, v in row.items()}}
                                       for ts, row in frame.iterrows()]}))
        return 0
    table = frame.rename(columns=lambda q: f"q{q:g}")
    table.insert(0, "model", model.name)
    table.index = table.index.strftime("%Y-%m-%dT%H:%M:%SZ")
    table.index.name = "timestamp"
    if args.csv:
        # significant digits, not decimals: demand in large units (1e-6 per hour) must not print as 0
        sys.stdout.write(table.to_csv(float_format="%.10g"))
    else:
        print(f"# model: {model.name}; " + "; ".join(report.lines()))
        print(table.to_string(float_format=lambda v: f"{v:.2f}"))
    return 0


def cmd_backtest(cfg: Config, args) -> int:
    from forecast.backtest import backtest
    from forecast.calibrate import MIN_FIT_HOURS, origins
    from forecast.clock import local_hours
    from forecast.history import HistoryError, clip_outliers

    # on the wall-clock hours of forecast.timezone: the models fit, and are scored, as the seasonal clock serves them
    h = cfg.history
    as_read = cfg.model_copy(update={"history": h.model_copy(update={"outlier_factor": None})})
    series = local_hours(load_series(as_read, datetime.now(UTC))[0], cfg.forecast.timezone)
    clipped = [] if h.outlier_factor is None else clip_outliers(series, h.outlier_factor)[1]
    if clipped:  # a clipped hour scored at its clipped value would flatter every model (a glitch, or a real burst)
        print(f"note: history {history_name(cfg)}: {len(clipped)} outliers clipped in what the models fit (over "
              f"{h.outlier_factor:g}x the 99th percentile of the whole history; each fold's bound is that of its "
              "hours before its origin); scored as they were", file=sys.stderr)
    b = cfg.backtest
    if not origins(len(series), b.horizon, b.folds, b.step):
        raise HistoryError(f"{history_name(cfg)}: {len(series)} hourly points; a backtest needs two "
                           f"days to fit plus --horizon (backtest.horizon) {b.horizon} h to score "
                           f"({MIN_FIT_HOURS + b.horizon} points at least)")
    _refuse_under_two_days(cfg, series, "a backtest fits its models on")  # else a minute's run to score null
    result = backtest(series, horizon=b.horizon, folds=b.folds, step=b.step, progress=counter("backtest"),
                      outlier_factor=h.outlier_factor)
    payload = result.to_json()
    payload["folds_asked"] = b.folds  # beside `folds`, the origins the history holds: a script sees it got fewer
    payload["history"] = str(h.file or (h.prometheus.query if h.prometheus is not None else None))
    payload["timezone"] = cfg.forecast.timezone
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
    if args.json:
        print(json.dumps(payload))
        return 0
    print(f"history {payload['history']} ({cfg.forecast.timezone} hours): horizon {b.horizon} h, "
          f"{payload['folds']} folds {b.step} h apart "
          f"({'as asked' if payload['folds'] == b.folds else f'{b.folds} asked: the history holds fewer'}); "
          f"selected: {payload['selected']}" + (f" ({result.selected_why})" if result.selected_why else ""))
    cols = ["mase", "smape", "pinball_50", "pinball_90", "pinball_95", "coverage_80", "coverage_90", "fit_seconds"]
    print(f"{'model':<22}" + "".join(f"{c:>13}" for c in cols))
    # a score the history cannot define (MASE of a constant series: no error to scale by) is null in JSON, n/a here
    ranked = sorted(payload["models"].items(), key=lambda kv: (kv[1]["mase"] is None, kv[1]["mase"] or 0.0))
    for name, m in ranked:
        print(f"{name:<22}" + "".join(f"{'n/a':>13}" if m[c] is None else f"{m[c]:>13.3f}" for c in cols))
    return 0


def cmd_train(cfg: Config, args) -> int:
    from cli.train import cmd_train as train

    return train(cfg, args)


def _history_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("history", nargs="?", metavar="HISTORY", help="CSV or Parquet file with timestamp,value (overrides "
                                                                "history.file)")
    p.add_argument("--statistic", help="aggregation to the forecast step: mean, max, sum or pNN "
                                       "(history.statistic, default mean)")
    _timezone_arg(p)


def _timezone_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--timezone", help="IANA time zone whose wall-clock hours the daily and weekly seasons follow, "
                                      "e.g. Europe/Berlin (forecast.timezone, default UTC)")


class Parser(argparse.ArgumentParser):
    """The command's parser and each subcommand's (add_subparsers makes them of its own class). A flag is given
    whole: an abbreviation is refused, as a flag added later would silently change what an old script means. An
    unknown flag is refused by the subcommand it follows, with that command's usage and the flag it is closest to
    (argparse leaves it to the top parser, whose usage names no flag of the command); one before the command by the
    top parser (argparse passed over it and read its value as the command)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **{**kwargs, "allow_abbrev": False})

    def parse_known_args(self, args=None, namespace=None):
        if self._subparsers is not None:  # the top parser
            self._refuse([a for a in self._leading_flags(sys.argv[1:] if args is None else args)
                          if a.split("=", 1)[0] not in self._option_string_actions])
        parsed, unknown = super().parse_known_args(args, namespace)
        self._refuse(unknown)
        return parsed, unknown

    def _leading_flags(self, args: list[str]) -> list[str]:
        """The flags before the command in `args`, each flag's value left out."""
        flags: list[str] = []
        value_next = False
        for arg in args:
            if value_next:
                value_next = False
            elif arg.startswith("-"):
                flags.append(arg)
                action = self._option_string_actions.get(arg)  # --flag=value: None, its value in it
                value_next = action is not None and action.nargs != 0
            else:
                break
        return flags

    def _refuse(self, unknown: list[str]) -> None:
        if unknown:
            flags = [f for a in self._actions for f in a.option_strings]
            given = [a.split("=", 1)[0] for a in unknown if a.startswith("-")]  # --flag=value: the flag
            near = {g: difflib.get_close_matches(g, flags, n=1) for g in given}
            self.error(f"unrecognized arguments: {' '.join(unknown)}" +
                       "".join(f" ({g}: did you mean {close[0]}?)" for g, close in near.items() if close))


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="headroom", description="Forecasting-driven GPU autoscaling: reserve "
                                     "inference ahead of demand, lend the slack to training, always able to take it "
                                     "back.")
    parser.add_argument("--config", help="YAML configuration file (flags override it)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("forecast", help="predict hourly demand quantiles from a history")
    _history_args(p)
    p.add_argument("--horizon", type=int, help="hours ahead (forecast.horizon, default 48)")
    p.add_argument("--quantiles", type=_quantile_list, help="e.g. 0.5,0.9,0.99 (forecast.quantiles)")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="one JSON object")
    fmt.add_argument("--csv", action="store_true", help="CSV: timestamp, model, one column per quantile")
    p.set_defaults(run=cmd_forecast, overrides=lambda a: {"forecast.horizon": a.horizon,
                                                          "forecast.quantiles": a.quantiles})

    p = sub.add_parser("backtest", help="rolling-origin backtest of every model and of automatic selection")
    _history_args(p)
    p.add_argument("--horizon", type=int, help="hours each fold forecasts (backtest.horizon, default 24)")
    p.add_argument("--folds", type=int, help="number of origins (backtest.folds, default 7)")
    p.add_argument("--step", type=int, help="hours between origins (backtest.step, default 24)")
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.set_defaults(run=cmd_backtest, overrides=lambda a: {"backtest.horizon": a.horizon, "backtest.folds": a.folds,
                                                          "backtest.step": a.step})
    def cmd_report(cfg: Config, args) -> int:
        from cli.report import cmd_report as report

        return report(cfg, args)

    baselines = ", ".join(BASELINES)
    policy_help = {
        "simulate": f"forecast (default), a baseline ({baselines}: its margin tuned) or a reference that knows the "
                    "future (oracle, hourly-oracle; simulate.policy)",
        "tune": f"what to tune: the forecast policy (default) or a baseline's margin ({baselines}; simulate.policy)",
        "report": "the policy the plots and --timeline follow (default forecast; the table compares every policy; "
                  "simulate.policy)"}
    # simulate, tune and report take the same scenario and objective options
    for command, run, what in (("simulate", cmd_simulate, "replay a demand trace on the simulated cluster under a "
                                                          "policy (tuned on the history unless --policy-file)"),
                               ("tune", cmd_tune, "sweep the policy's own fields on the history against the "
                                                  "objective; recommend, re-check and write the setting"),
                               ("report", cmd_report, "HTML report with plots: DEMAND simulated under every policy")):
        p = sub.add_parser(command, help=what)
        p.add_argument("history", nargs="?", metavar="DEMAND", help="demand trace, CSV or Parquet (history.file)")
        p.add_argument("--gpus", type=int, help="cluster size (simulate.gpus, default 128)")
        scale = p.add_mutually_exclusive_group()
        scale.add_argument("--peak-gpus", type=float,
                           help="scale the trace's 99.9th percentile to N GPUs (simulate.peak_gpus, default 100)")
        scale.add_argument("--per-gpu", type=float, help="demand one GPU serves (simulate.per_gpu)")
        p.add_argument("--days", type=float, help="evaluated days at the end; before is history (simulate.days, "
                                                  "default 7)")
        # tune's list is what it tunes: a reference, which knows the future, has nothing to tune
        p.add_argument("--policy", choices=TUNABLE if command == "tune" else POLICIES, help=policy_help[command])
        p.add_argument("--max-shortage", type=float, help="objective: unmet demand within the cluster, share of demand "
                                                          "GPU-time (tune.max_shortage, default 0.001)")
        p.add_argument("--max-short-steps", type=float, help="objective: share of steps with any unmet demand "
                                                             "(tune.max_short_steps, default 0.01)")
        _timezone_arg(p)
        p.set_defaults(run=run, overrides=lambda a: {
            "simulate.gpus": a.gpus, "simulate.peak_gpus": a.peak_gpus, "simulate.per_gpu": a.per_gpu,
            "simulate.days": a.days, "simulate.jobs": getattr(a, "jobs", None), "simulate.policy": a.policy,
            "simulate.policy_file": getattr(a, "policy_file", None), "tune.max_shortage": a.max_shortage,
            "tune.max_short_steps": a.max_short_steps})
        if command == "tune":
            p.add_argument("--write-policy", metavar="FILE.yaml", type=flag_path,
                           help="write the recommendation as a ReservationPolicy manifest (a new file: an existing "
                                "one is never overwritten)")
            p.add_argument("--plot", metavar="FILE.png", type=flag_path,
                           help="write the trade-off plot (a PNG: a .png name)")
            p.add_argument("--json", action="store_true", help="one JSON object: the sweep, the recommendation and its "
                                                               "re-check, the notes")
            continue
        # tune replays the history with a saturated backlog: a job trace is replayed on the evaluated days only
        p.add_argument("--jobs", help="training job trace CSV (num_gpu, creation_time, scheduled_time, deletion_time; "
                                      "simulate.jobs)")
        p.add_argument("--policy-file", metavar="P.yaml", help="a ReservationPolicy manifest, run exactly "
                                                               "(simulate.policy_file)")
        p.add_argument("--timeline", metavar="FILE.csv", type=flag_path,
                       help="write one row per step (the columns `headroom run --timeline` writes)")
        p.add_argument("--json", action="store_true", help="one JSON object")
        if command == "report":
            p.add_argument("--out", default="headroom-report", type=flag_path,
                           help="directory for index.html and the PNGs, made if missing; a re-run replaces them "
                                "(default headroom-report)")
    p = sub.add_parser("train", help="backtest candidates, track them in MLflow, promote the champion by margin")
    p.add_argument("--history", type=flag_path,
                   help="train one series from this file (with --name) instead of training.series")
    p.add_argument("--name", help="series name (training.name; with --history, default: that file's name)")
    p.add_argument("--tracking-uri", dest="tracking_uri", help="MLflow tracking URI (training.tracking_uri)")
    p.add_argument("--force", action="store_true", help="train even where an earlier training had the same history, "
                                                        "settings and code (its result is given otherwise)")
    _timezone_arg(p)
    p.set_defaults(run=cmd_train,
                   overrides=lambda a: {"training.name": a.name, "training.tracking_uri": a.tracking_uri})

    def cmd_demo(cfg: Config, args) -> int:
        from cli.demo import cmd_demo as demo

        return demo(cfg, args)

    p = sub.add_parser("demo", help="the whole product on embedded defaults, no servers: train, plan, simulate, report")
    p.add_argument("--out", default="headroom-demo", type=flag_path,
                   help="directory for the history, MLflow store and report: a new or empty one, or an earlier "
                        "demo's (default headroom-demo)")
    p.add_argument("--quick", action="store_true", help="shorter history and simulation, every stage still runs")
    p.set_defaults(run=cmd_demo, overrides=lambda a: {})
    from cli import run as run_command

    run_command.add_parser(sub)
    run_command.add_plan_parser(sub)
    # --config is accepted after the subcommand too, as users type it there, and so each command's --help lists it
    for action in list(sub.choices.values()):
        action.add_argument("--config", dest="sub_config", metavar="FILE",
                            help="YAML configuration file, before or after the command (flags override it)")
    return parser


# the reader of the output went away (`headroom ... | head -1`): the status a shell gives a command SIGPIPE ended
READER_GONE = 128 + signal.SIGPIPE


def main(argv: list[str] | None = None) -> int:
    """The command `argv` asks for; its exit status. stdout and stderr say which of them failed a write: a reader
    that closed one ends the command quietly (READER_GONE; the files written by then are whole, those not yet
    written are not made), any other failure (a full disk) is an error naming the stream."""
    streams = sys.stdout, sys.stderr
    out = NamedStream(sys.stdout, "stdout", collect=True)
    named = out, NamedStream(sys.stderr, "stderr", first=out)
    sys.stdout, sys.stderr = named
    try:
        try:
            status = _command(argv)
        finally:  # what the command printed is written whatever ends it (a Ctrl-C, an error)
            sys.stdout.flush()  # what is still buffered fails here, said, not as Python exits
        return status
    except ReaderGone:
        for stream in named:  # both: they may be one pipe (2>&1), and the end is quiet
            stream.silence()
        return READER_GONE
    except HeadroomError as exc:  # the flush's
        print(f"headroom: error: {exc}", file=sys.stderr)
        return exc.exit_status
    finally:
        sys.stdout, sys.stderr = streams


def _flags(parser: argparse.ArgumentParser, command: str) -> dict[str, str]:
    """The flag (or argument) of `command` that sets each configuration field: what its overrides read each flag
    into, found by giving every flag its own name as its value."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    by_dest = {a.dest: a.option_strings[0] if a.option_strings else f"the {a.metavar or a.dest} argument"
               for a in sub._actions}
    named = argparse.Namespace(**{dest: f"<{dest}>" for dest in by_dest})
    fields = {**sub.get_default("overrides")(named), "history.file": "<history>", "history.statistic": "<statistic>",
              "forecast.timezone": "<timezone>"}  # the three _command sets for every command that has them
    return {field: by_dest[dest[1:-1]] for field, dest in fields.items()
            if isinstance(dest, str) and dest.startswith("<") and dest[1:-1] in by_dest}


def _command(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    overrides = args.overrides(args)
    overrides["history.file"] = getattr(args, "history", None)
    overrides["history.statistic"] = getattr(args, "statistic", None)
    overrides["forecast.timezone"] = getattr(args, "timezone", None)
    from adapters.prometheus import PrometheusError
    from forecast.history import HistoryError

    config = args.sub_config if args.sub_config is not None else args.config
    try:  # every error said alike ("headroom: error: ..."), a bad configuration's as a file's found later
        if args.sub_config and args.config and args.sub_config != args.config:  # an empty one is refused below
            # one would be dropped without a word: the file after the command was read, the one before it not
            raise BadRequest(f"--config given twice ({args.config} before the command, {args.sub_config} after "
                             "it): give one file")
        cfg = load_config(config, overrides, _flags(parser, args.command))
        return args.run(cfg, args)
    except KeyboardInterrupt:  # Ctrl-C: a file being written is left as it was (core.files), nothing to undo
        print("headroom: interrupted (a file being written was left as it was)", file=sys.stderr)
        return 130
    except HeadroomError as exc:
        if isinstance(exc, ConfigError) and exc.source is None:  # found below the CLI, which alone knows the file
            exc = ConfigError(config_source(config), exc.errors)
        print(f"headroom: error: {exc}", file=sys.stderr)
        return exc.exit_status
    except (HistoryError, PrometheusError, OSError) as exc:  # OSError: a file or server that failed mid-work
        print(f"headroom: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
