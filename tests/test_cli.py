"""The CLI as a user runs it: exit codes, output shapes, errors that name what is wrong."""
import argparse
import json
import re
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from cli.main import main
from forecast.synthetic import synthetic_demand, write_csv


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    path = tmp_path_factory.mktemp("h") / "demand.csv"
    write_csv(synthetic_demand(days=21, step="10min"), path)
    return path


def test_help_is_fast_and_lists_commands():
    out = subprocess.run([sys.executable, "-m", "cli.main", "--help"], capture_output=True, text=True, check=True)
    for command in ("forecast", "backtest", "simulate", "tune"):
        assert command in out.stdout


def test_every_flag_names_the_configuration_field_it_sets():
    """A bad flag value is reported by its field and the flag that gave it: so --help must name the field
    (--peak-gpus, --days, --jobs and --policy did not)."""
    import argparse

    from cli.main import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for command, parser in sub.choices.items():
        flags = {a.dest: a for a in parser._actions if a.option_strings}
        given = argparse.Namespace(**{dest: f"<{dest}>" for dest in flags})
        for field, value in parser.get_default("overrides")(given).items():
            if isinstance(value, str) and value.startswith("<"):
                flag = flags[value[1:-1]]
                assert field in (flag.help or ""), f"headroom {command} {flag.option_strings[0]}: --help omits {field}"


def test_two_config_files_one_before_and_one_after_the_command_are_refused(history, tmp_path, capsys):
    """--config before the command and another after it: the one before was dropped without a word, exit 0."""
    before, after = tmp_path / "before.yaml", tmp_path / "after.yaml"
    before.write_text("forecast: {horizon: 2}\n")
    after.write_text("forecast: {horizon: 3}\n")
    assert main(["--config", str(before), "forecast", "--config", str(after), str(history)]) == 2
    err = capsys.readouterr().err
    assert f"--config given twice ({before} before the command, {after} after it)" in err, err
    assert main(["--config", str(after), "forecast", "--config", str(after), str(history), "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["forecast"]) == 3


def test_forecast_json(history, capsys):
    assert main(["forecast", str(history), "--horizon", "12", "--quantiles", "0.5,0.9", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["model"].startswith("auto(") and len(out["forecast"]) == 12
    assert all(row["q0.5"] <= row["q0.9"] for row in out["forecast"])


def test_forecast_says_its_step_as_the_configuration_writes_a_duration(history, capsys):
    """`headroom forecast` said "2016 samples at step 0 days 00:10:00" (pandas' words), also in its JSON."""
    assert main(["forecast", str(history), "--horizon", "2"]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert "samples at step 10m -> " in header and "days" not in header
    assert main(["forecast", str(history), "--horizon", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["cleaning"][0].startswith("3024 samples at step 10m -> ")


def test_forecast_says_when_upper_quantiles_are_the_largest_error_seen(history, capsys):
    """q0.999 from three weeks of daily folds cannot be told apart from q0.99: said, not left to look calibrated."""
    assert main(["forecast", str(history), "--horizon", "6", "--quantiles", "0.5,0.99,0.999", "--json"]) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    capped = all(row["q0.999"] == row["q0.99"] for row in out["forecast"])
    assert capped == bool(out["notes"]) and capped  # 19 folds resolve no level above 0.95
    assert "q0.999 equal the quantile below in every hour" in out["notes"][0] and out["notes"][0] in captured.err
    assert main(["forecast", str(history), "--horizon", "6", "--quantiles", "0.5,0.9", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["notes"] == []


def test_upper_quantiles_equal_but_for_rounding_are_said_equal(tmp_path, capsys):
    """A history that repeats each day exactly: q0.99 is q0.9 to the last bits (1 unit in the last place in one hour
    of two), and the note that says they cannot be told apart was missing."""
    hours = pd.date_range("2026-01-01", periods=24 * 5, freq="h", tz="UTC")
    history = tmp_path / "daily.csv"
    pd.DataFrame({"timestamp": hours.strftime("%Y-%m-%dT%H:%M:%SZ"),
                  "value": 100 + 50 * np.sin(np.arange(len(hours)) * 2 * np.pi / 24)}).to_csv(history, index=False)
    assert main(["forecast", str(history), "--horizon", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert all(row["q0.99"] == pytest.approx(row["q0.9"], rel=1e-9) for row in out["forecast"])
    assert any(note.startswith("q0.99 equal the quantile below in every hour") for note in out["notes"])


def test_backtest_json_contract(history, capsys):
    assert main(["backtest", str(history), "--folds", "2", "--horizon", "12", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["horizon"] == 12 and out["folds"] == 2 and isinstance(out["selected"], str) and out["selected"]
    keys = {"mase", "smape", "pinball_50", "pinball_90", "pinball_95", "coverage_80", "coverage_90", "fit_seconds"}
    assert len(out["models"]) >= 3 and all(keys <= set(m) for m in out["models"].values())


def test_backtest_says_its_progress_where_stderr_is_no_terminal(history, capsys):
    """The fold counter is a line rewritten in place on a terminal; in a log, a pipe or CI it printed nothing, and a
    backtest ran minutes silent (2 min 8 s on the example history). There it says a stage line as each model starts
    scoring, and at the end."""
    assert main(["backtest", str(history), "--folds", "2", "--horizon", "12", "--json"]) == 0
    captured = capsys.readouterr()
    models = json.loads(captured.out)["models"]
    said = re.findall(r"^\[backtest \+ *[0-9.]+s\] (.+): (\d+)/(\d+) folds scored$", captured.err, re.M)
    assert [name for name, _, _ in said][:len(models)] == list(models), captured.err
    assert said[-1][1] == said[-1][2] == str(2 * len(models)) and "\r" not in captured.err


def test_bad_flag_and_bad_config_exit_2(tmp_path, history, capsys):
    assert main(["forecast", str(history), "--quantiles", "0.9,0.5"]) == 2
    assert "forecast.quantiles" in capsys.readouterr().err
    config = tmp_path / "c.yaml"
    config.write_text("forecast:\n  horizn: 3\n")
    assert main(["--config", str(config), "forecast", str(history)]) == 2
    assert "forecast.horizn" in capsys.readouterr().err


def test_malformed_history_exit_1_names_file_and_line(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("timestamp,value\n2026-01-01T00:00:00Z,1\n2026-01-01T01:00:00Z,oops\n")
    assert main(["forecast", str(bad)]) == 1
    assert f"{bad}:3" in capsys.readouterr().err


def test_simulate_json(history, capsys):
    assert main(["simulate", str(history), "--policy", "oracle", "--days", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["headroom_violations"] == 0 and 0 < out["utilization"] <= 1


def test_simulate_and_tune_text_name_the_policy_and_give_shares_in_percent(history, capsys):
    """simulate's text began `reference   forecast` (the JSON's key for the policy replayed, which is no reference)
    and gave shares as 7.446e-05; tune's sweep gave 0.9089 beside a verdict in percent, and an unset
    warm_buffer_quantile as None. Each figure is now its --json value, in percent where it is a share."""
    assert main(["simulate", str(history), "--policy", "reactive", "--days", "1", "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert main(["simulate", str(history), "--policy", "reactive", "--days", "1"]) == 0
    lines = dict(line.split(maxsplit=1) for line in capsys.readouterr().out.splitlines())
    assert next(iter(lines.items())) == ("policy", "reactive") and "reference" not in lines
    for share in ("utilization", "shortage_within_cluster", "short_steps", "training_goodput"):
        assert lines[share] == f"{100 * figures[share]:.4g}%", share
    assert lines["steps"] == str(figures["steps"]) and lines["objective_met"] == str(figures["objective_met"])
    assert main(["tune", str(history), "--days", "1", "--json"]) == 0
    settings = json.loads(capsys.readouterr().out)["settings"]
    assert main(["tune", str(history), "--days", "1"]) == 0
    header, *rows = capsys.readouterr().out.splitlines()[:len(settings) + 1]
    columns = header.split()
    for row, setting in zip(rows, settings, strict=True):
        cells = dict(zip(columns, row.replace(" (unset)", "(unset)").split(), strict=True))
        assert cells["utilization"] == f"{100 * setting['utilization']:.4g}%"
        assert cells["warm_buffer_quantile"] == (f"{setting['warm_buffer_quantile']:g}" if
                                                 setting["warm_buffer_quantile"] is not None else "0.99(unset)")


def test_every_command_s_help_lists_config(capsys):
    """Every command takes --config (README, Commands), but `headroom tune --help` and the others did not list it:
    only `headroom --help` did, so a user reading a command's help never learnt of the file its flags override."""
    from cli.main import build_parser

    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert {"forecast", "backtest", "simulate", "tune", "report", "train", "demo", "run", "plan"} <= set(commands)
    for command in commands:
        with pytest.raises(SystemExit) as exit_:
            main([command, "--help"])
        assert exit_.value.code == 0
        assert "--config FILE" in capsys.readouterr().out, command


def _refusal(argv: list[str], capsys) -> str:
    """What the parser said refusing `argv` (exit 2)."""
    from cli.main import build_parser

    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(argv)
    assert exit_.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("argv, typo, flag", [(["tune", "d.csv", "--polcy", "forecast"], "--polcy", "--policy"),
                                              (["simulate", "--peak-gpu", "100", "d.csv"], "--peak-gpu", "--peak-gpus"),
                                              (["forecast", "--jsn"], "--jsn", "--json"),
                                              (["run", "--metrics-prot=9108"], "--metrics-prot", "--metrics-port")])
def test_a_mistyped_flag_is_refused_in_its_command_s_usage_naming_the_flag_meant(argv, typo, flag, capsys):
    """`headroom tune X --polcy forecast` printed the top-level usage (`usage: headroom [-h] [--config CONFIG]
    COMMAND ...`), which lists no flag of tune, and no hint; `--peak-gpu 100` ran as --peak-gpus."""
    err = _refusal(argv, capsys)
    assert err.startswith(f"usage: headroom {argv[0]} "), err
    assert f"unrecognized arguments: {typo}" in err and f"{typo}: did you mean {flag}?" in err, err


@pytest.mark.parametrize("argv, typo", [(["--confg", "c.yaml", "forecast"], "--confg"),
                                         (["--config", "c.yaml", "--confg", "x", "forecast"], "--confg"),
                                         (["--conf=c.yaml", "forecast"], "--conf")])
def test_a_mistyped_flag_before_the_command_is_refused_naming_the_flag_meant(argv, typo, capsys):
    """`headroom --confg c.yaml forecast` said "argument COMMAND: invalid choice: 'c.yaml'": the unknown flag was
    passed over and its value read as the command."""
    err = _refusal(argv, capsys)
    assert f"unrecognized arguments: {typo}" in err and f"{typo}: did you mean --config?" in err, err


def test_flags_before_the_command_still_parse():
    from cli.main import build_parser

    assert build_parser().parse_args(["--config", "c.yaml", "forecast"]).config == "c.yaml"
    assert build_parser().parse_args(["--config=c.yaml", "forecast", "x.csv"]).history == "x.csv"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_an_abbreviated_flag_is_refused(data, capsys):
    """argparse took any unambiguous prefix of a flag (`--peak-gpu`, `--pol`): a flag added later that shares it would
    make an old script's abbreviation ambiguous, or mean another flag. Every command refuses every abbreviation."""
    from cli.main import build_parser

    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    command = data.draw(st.sampled_from(sorted(commands)))
    flags = {f for a in commands[command]._actions for f in a.option_strings if f.startswith("--")}
    flag = data.draw(st.sampled_from(sorted(flags)))
    given = flag[:data.draw(st.integers(3, len(flag) - 1))]
    assume(given not in flags)
    err = _refusal([command, f"{given}=1"], capsys)
    assert err.startswith(f"usage: headroom {command} ") and f"unrecognized arguments: {given}=1" in err, err


def test_run_names_what_is_missing(tmp_path, capsys):
    assert main(["run"]) == 2  # the embedded cluster with no policies
    assert "run.policies" in capsys.readouterr().err
    assert main(["run", "--kubeconfig", str(tmp_path / "kubeconfig")]) == 2  # a real cluster needs Prometheus
    # named by its field path and where it is set: the flag that made the controller kubernetes has no URL beside it
    assert "set run.prometheus.url in the --config file (no flag sets it)" in capsys.readouterr().err
    config = tmp_path / "headroom.yaml"
    config.write_text("run:\n  prometheus: {url: 'http://127.0.0.1:9'}\n")
    assert main(["run", "--config", str(config), "--kubeconfig", str(tmp_path / "kubeconfig"), "--once"]) == 2
    assert f"run.kubeconfig: {tmp_path / 'kubeconfig'} is not a file" in capsys.readouterr().err  # a bad flag
    (tmp_path / "kubeconfig").write_text("not: a kubeconfig\n")
    assert main(["run", "--config", str(config), "--kubeconfig", str(tmp_path / "kubeconfig"), "--once"]) == 1
    assert f"cannot load kubeconfig {tmp_path / 'kubeconfig'}" in capsys.readouterr().err  # an unusable one


def test_a_kubeconfig_from_the_environment_is_the_one_read_and_named(tmp_path, monkeypatch, capsys):
    """Without --kubeconfig the kubeconfig is $KUBECONFIG's, read as it is when run starts (as kubectl does); an
    unusable one was said to be ~/.kube/config, a file nobody had named."""
    config = tmp_path / "headroom.yaml"
    config.write_text("run:\n  cluster: kubernetes\n  prometheus: {url: 'http://127.0.0.1:9'}\n")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)  # not in a pod: the kubeconfig is read
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
    (tmp_path / "kubeconfig").write_text("x: [\n")
    assert main(["run", "--config", str(config), "--once"]) == 1
    err = capsys.readouterr().err
    assert f"cannot load kubeconfig {tmp_path / 'kubeconfig'} ($KUBECONFIG): not a kubeconfig" in err, err
    # one that is not there was said to be "Invalid kube-config file. No configuration found."
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    assert main(["run", "--config", str(config), "--once"]) == 1
    err = capsys.readouterr().err
    assert f"cannot load kubeconfig {tmp_path / 'absent'} ($KUBECONFIG): no such file" in err, err


@pytest.mark.parametrize("text, why", [("timestamp,value\n2026-01-01T00:00:00Z,5\n", "TypeError"),
                                       ("- a\n- b\n", "TypeError"), ("a: \x00\n", "ReaderError"),
                                       ("a: " + "[" * 5000 + "]" * 5000 + "\n", "RecursionError")],
                         ids=["a-csv", "a-list", "binary", "nested-deep"])
def test_a_file_that_is_no_kubeconfig_is_named_not_a_traceback(tmp_path, capsys, text, why):
    """The Kubernetes client's loader raised a TypeError, a YAML ReaderError or a RecursionError on such a file (a
    history given as --kubeconfig, say): a traceback. It is an unusable kubeconfig, named as the others are."""
    config = tmp_path / "headroom.yaml"
    config.write_text("run:\n  prometheus: {url: 'http://127.0.0.1:9'}\n")
    (tmp_path / "kubeconfig").write_text(text)
    assert main(["run", "--config", str(config), "--kubeconfig", str(tmp_path / "kubeconfig"), "--once"]) == 1
    err = capsys.readouterr().err
    assert f"cannot load kubeconfig {tmp_path / 'kubeconfig'}: not a kubeconfig (YAML with clusters, contexts and " \
        f"users): {why}" in err, err


def test_plan_shows_the_hours_ahead_with_reasons_and_writes_nothing(tmp_path, monkeypatch, capsys):
    import shutil
    from pathlib import Path

    shutil.copytree(Path(__file__).resolve().parents[1] / "examples", tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["plan", "--config", "examples/headroom.yaml", "--now", "2026-02-11T08:00:00Z", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    hours = plan["policies"]["inference/chat"]["hours"]
    assert [h["hour"][11:16] for h in hours] == ["08:00", "09:00", "10:00", "11:00", "12:00", "13:00"]
    assert all(h["reserved_gpus"] >= 4 and h["reserved_gpus"] + h["slack_gpus"] == 128 for h in hours)
    assert hours[2]["reserved_gpus"] > hours[0]["reserved_gpus"]  # reserved ahead of the 10:30 peak
    assert all("q0.9 forecast" in h["reason"] and "headroom" in h["reason"] for h in hours)
    actions = plan["actions"]  # decided as if active, applied nowhere
    assert any(a.startswith("scale Deployment chat to ") for a in actions)
    assert any(a.startswith("set ClusterQueue research quota") for a in actions)
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no forecast log, no MLflow store
    assert main(["plan", "--config", "examples/headroom.yaml", "--now", "2026-02-11T08:00:00Z", "--hours", "2"]) == 0
    text = capsys.readouterr().out
    assert "(nothing is changed)" in text and "what it would do now (as if every policy were active):" in text
    assert "\n  08:00 " in text  # one day: the hour alone
    # the text says each hour's reservation, headroom and slack (README), as the JSON does
    rows = [line.split()[:5] for line in text.splitlines() if line.startswith(("  08:00 ", "  09:00 "))]
    assert rows == [[h["hour"][11:16], str(h["reserved_gpus"]), str(h["headroom_gpus"]), str(h["slack_gpus"]),
                     h["source"]] for h in hours[:2]]
    assert "hour   reserved headroom    slack  source" in text
    assert main(["plan", "--config", "examples/headroom.yaml", "--now", "2026-02-11T22:00:00Z", "--hours", "3"]) == 0
    assert "\n  02-12 00:00 " in capsys.readouterr().out  # past midnight: which day it is


def test_plan_takes_the_cluster_size_as_run_does_and_says_it(tmp_path, monkeypatch, capsys):
    """deploy/examples' policy is for a 64-GPU cohort, but plan had no --gpus (run has): it planned on 128 GPUs,
    lending 107 to training, without saying the cluster's size."""
    from pathlib import Path

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    root = Path(__file__).resolve().parents[1]
    plan = ["plan", "--policy-file", str(root / "deploy" / "examples" / "reservationpolicy.yaml"),
            "--history", str(root / "examples" / "demand_5min.csv"), "--hours", "1", "--gpus", "64"]
    assert main([*plan, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    quotas = [int(a.split(" quota to ")[1].split()[0]) for a in out["actions"] if " quota to " in a]
    assert out["capacity_gpus"] == 64 and len(quotas) == 3 and sum(quotas) == 64  # inference + two training queues
    assert main(plan) == 0
    assert capsys.readouterr().out.startswith("plan at 2026-02-15 23:55 UTC on the embedded 64-GPU cluster")


def test_run_and_plan_say_the_demand_in_gpus_beside_the_query_s_unit(tmp_path, monkeypatch, capsys):
    """The embedded run printed "demand 220.8 -> reserved 33 GPUs": requests/s beside GPUs, read as demand far over
    the reservation. Each now says the GPUs the demand asks for too (examples/headroom.yaml: demandPerGpu 10)."""
    import re
    import shutil
    from pathlib import Path

    shutil.copytree(Path(__file__).resolve().parents[1] / "examples", tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert main(["run", "--config", "examples/headroom.yaml", "--hours", "1"]) == 0
    ran = re.search(r"inference/chat: demand ([0-9.]+) \(([0-9.]+) GPUs\) -> reserved", capsys.readouterr().out)
    assert main(["plan", "--config", "examples/headroom.yaml", "--hours", "1"]) == 0
    planned = re.search(r"inference/chat: .*, demand now ([0-9.]+) \(([0-9.]+) GPUs\);", capsys.readouterr().out)
    for said in (ran, planned):
        assert said is not None
        assert float(said[2]) == pytest.approx(float(said[1]) / 10, rel=1e-2)


def test_plan_forecasts_with_the_champion_run_serves_and_creates_no_store(tmp_path, monkeypatch, capsys):
    """plan is what `run` would do: run serves the champion of ./mlflow.db (its default store) but plan read champions
    only from a URI given explicitly, so it showed automatic selection instead; and given a URI of a sqlite store that
    did not exist, plan created it ("changes and writes nothing")."""
    import shutil
    from pathlib import Path

    shutil.copytree(Path(__file__).resolve().parents[1] / "examples", tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    plan = ["plan", "--config", "examples/headroom.yaml", "--now", "2026-02-11T08:00:00Z", "--hours", "1", "--json"]
    missing = tmp_path / "elsewhere" / "mlflow.db"
    missing.parent.mkdir()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{missing}")
    assert main(plan) == 0
    assert json.loads(capsys.readouterr().out)["policies"]["inference/chat"]["model"].startswith("auto")
    assert list(missing.parent.iterdir()) == []  # no store created, no lock folder beside it
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    assert main(["train", "--config", "examples/headroom.yaml"]) == 0  # registers ./mlflow.db's champion
    capsys.readouterr()
    assert main(plan) == 0
    assert json.loads(capsys.readouterr().out)["policies"]["inference/chat"]["model"].startswith("champion v1")


def test_plan_is_at_the_histories_end_by_default_and_may_be_asked_there(tmp_path, monkeypatch, capsys):
    import pandas as pd
    """plan --help: '--now: default: where the histories end'. It planned an hour before the end (the last hour's
    samples unread), and a --now at the end, or within the last hour, was refused as '--hours 1 ... runs past the
    histories' end' (plan's --hours is the rows shown, and one reconcile needs one step)."""
    import shutil
    from pathlib import Path

    shutil.copytree(Path(__file__).resolve().parents[1] / "examples", tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    config = ["--config", "examples/headroom.yaml", "--json"]
    assert main(["plan", *config]) == 0
    assert json.loads(capsys.readouterr().out)["now"] == "2026-02-15T23:55:00+00:00"  # the last sample's time
    for now in ("2026-02-15T23:55:00Z", "2026-02-15T23:30:00Z"):
        assert main(["plan", *config, "--now", now]) == 0
        assert json.loads(capsys.readouterr().out)["now"] == pd.Timestamp(now).isoformat()
    assert main(["plan", *config, "--now", "2026-02-16T00:00:00Z"]) == 2
    assert "is outside the histories" in capsys.readouterr().err


@pytest.fixture(scope="module")
def repaired_history(tmp_path_factory):
    """Four days at 10 min with a sample given twice (a correction) and two rows swapped: read, but repaired."""
    import pandas as pd

    series = synthetic_demand(days=4, step="10min")
    lines = [f"{t.isoformat()},{v:.4f}" for t, v in series.items()]
    lines.insert(300, f"{series.index[299].isoformat()},{series.iloc[299] * 1.5:.4f}")  # 299 again: the later wins
    lines[400], lines[401] = lines[401], lines[400]
    path = tmp_path_factory.mktemp("repaired") / "demand.csv"
    path.write_text("timestamp,value\n" + "\n".join(lines) + "\n")
    assert pd.read_csv(path)["timestamp"].duplicated().sum() == 1
    return path


@pytest.mark.parametrize("argv", [
    ["backtest", "{h}", "--folds", "1", "--horizon", "2", "--json"],
    ["forecast", "{h}", "--horizon", "2", "--csv"],  # --json has it under "cleaning", the table in its header
    ["simulate", "{h}", "--policy", "oracle", "--days", "1", "--json"],
    ["plan", "--policy-file", "{p}", "--history", "{h}", "--now", "2026-01-08T00:00:00Z", "--json"],
    ["run", "--policy-file", "{p}", "--history", "{h}", "--now", "2026-01-08T00:00:00Z", "--hours", "1"],
])
def test_every_command_says_what_cleaning_repaired_in_its_history(repaired_history, tmp_path, monkeypatch, capsys,
                                                                  argv):
    """Only forecast and demo printed the cleaning report: backtest, simulate, tune, report, train, plan and run
    sorted out-of-order samples and dropped a duplicate timestamp's earlier sample without a word."""
    import yaml

    policy = tmp_path / "p.yaml"
    policy.write_text(yaml.safe_dump({"apiVersion": "headroom.dev/v1alpha1", "kind": "ReservationPolicy",
                                      "metadata": {"name": "chat", "namespace": "inference"}, "spec": {
                                          "query": "up", "capacity": {"demandPerGpu": 10},
                                          "target": {"kind": "Deployment", "name": "chat"}}}))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert main([a.format(h=repaired_history, p=policy) for a in argv]) == 0
    err = capsys.readouterr().err
    assert f"history {repaired_history}: " in err
    assert "1 duplicate timestamps (the later sample of each kept)" in err and "out of order (sorted)" in err


@pytest.mark.parametrize("command", [["plan", "--json"], ["run", "--hours", "2"]])
def test_the_embedded_cluster_reads_each_policy_s_history_once(history, tmp_path, monkeypatch, command, caplog):
    """run and plan read every history file twice (the clock, then the cluster and its demand), and a file that
    cannot be read once more at each step: twice the start-up on a large file, and a file written to between the
    reads (a live export) set the clock by one version and replayed another. Each is read once now, and what makes
    one unusable is said once at start (it was said by the clock and again by the cluster)."""
    import logging

    import yaml

    import controller.demand

    broken = tmp_path / "broken.csv"
    broken.write_text("timestamp,value\nnot a time,1\n")
    spec = {"query": "up", "capacity": {"demandPerGpu": 10}}
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"run": {"tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}", "policies": [
        {"name": name, "namespace": "inference", "history_file": str(path),
         "spec": {**spec, "target": {"kind": "Deployment", "name": name}}}
        for name, path in (("chat", history), ("search", broken))]}}))
    reads: list[str] = []
    read = controller.demand.load_history

    def counted(path, *args, **kwargs):
        reads.append(str(path))
        return read(path, *args, **kwargs)
    monkeypatch.setattr(controller.demand, "load_history", counted)
    with caplog.at_level(logging.WARNING, logger="cli.run"):
        assert main([command[0], "--config", str(config), *command[1:]]) == 0
    assert sorted(reads) == sorted([str(broken), str(history)])
    said = [m for m in caplog.messages if "its history cannot be used" in m]
    assert len(said) == 1 and "inference/search" in said[0], caplog.messages


def test_the_model_label_stays_while_the_same_models_serve(shared_data, tmp_path, monkeypatch, capsys):
    """The model a policy is forecast by is a label of headroom_policy_info, a Prometheus series per value. An hour's
    refit that kept automatic selection's three models but ranked them anew gave a new value, "auto:
    mean(snaive168+profile+profile24)" at 16:00, "auto: mean(profile+snaive168+profile24)" at 17:00 (NASA's trace,
    the example policy): a new series for no change. A combination is named by its members alone."""
    from pathlib import Path

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")  # none: automatic selection
    policy = Path(__file__).resolve().parents[1] / "deploy" / "examples" / "reservationpolicy.yaml"
    models = []
    for hour in ("16", "17"):
        assert main(["plan", "--policy-file", str(policy), "--history",
                     str(shared_data / "traces" / "nasa_http_1995_5min.csv"), "--now", f"1995-08-30T{hour}:00:00Z",
                     "--json"]) == 0
        (planned,) = json.loads(capsys.readouterr().out)["policies"].values()
        models.append(planned["model"])
    assert models == ["auto: mean(profile+profile24+snaive168)"] * 2


def test_simulate_reads_a_counter_history_as_its_increments(tmp_path, capsys):
    """history.counter: true was applied by forecast, backtest and train but not by simulate, tune and report,
    which replayed the counter's running total as demand."""
    import numpy as np
    import pandas as pd

    from cli.config import load_config
    from cli.sources import native_series

    gauge = synthetic_demand(days=5, step="10min").fillna(0.0)
    path = tmp_path / "requests_total.csv"
    write_csv(gauge.cumsum(), path)
    config = tmp_path / "c.yaml"
    config.write_text(f"history: {{file: {path}, counter: true}}\n")
    replayed = native_series(load_config(config), pd.Timestamp.now("UTC"))
    np.testing.assert_allclose(replayed.to_numpy(), gauge.iloc[1:].to_numpy(), rtol=1e-6, atol=1e-6)
    assert main(["simulate", str(path), "--policy", "oracle", "--days", "1"]) == 1
    assert "history.counter: true" in capsys.readouterr().err
    assert main(["simulate", "--config", str(config), "--policy", "oracle", "--days", "1", "--json"]) == 0


def test_simulate_shows_progress_while_it_tunes_on_the_history(history, capsys):
    """simulate tuned its policy on the history (a minute on a year of 1-min samples) without a line: the first
    output came when everything was done."""
    assert main(["simulate", str(history), "--days", "1"]) == 0
    err = capsys.readouterr().err.splitlines()
    tuned = next(k for k, line in enumerate(err) if "policy tuned on the history" in line)
    assert any("tuning the forecast policy on the history" in line for line in err[:tuned])
    assert any("utilization" in line and "short steps" in line for line in err[:tuned]), err


def test_a_history_whose_step_changes_gives_the_numbers_of_its_demand_sampled_uniformly(tmp_path, capsys):
    """A file at 5 minutes for five days, then at 1 minute (the scrape interval changed): backtest `--statistic sum`
    read its first five days at five times their demand and simulate replayed them at 1 minute with four samples
    in five missing, both with exit 0. Each now gives the numbers of the same demand sampled at one step, and says
    where the step changed."""
    import pandas as pd

    demand = synthetic_demand(days=9, step="1min")  # requests per minute, with a 3-hour gap on day 4
    change = demand.index[0] + pd.Timedelta(days=5)
    before, after = demand[demand.index < change], demand[demand.index >= change]
    said = "sampling step changes from 5m to 1m at 2026-01-10T00:00:00+00:00"

    def flat(tree, at=""):
        """A JSON answer as {path: leaf}, without what names the file or times the run."""
        items = tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(tree, list) else None
        if items is None:
            return {} if at.endswith(("/history", "/fit_seconds", "seconds")) else {at: tree}
        return {path: leaf for key, value in items for path, leaf in flat(value, f"{at}/{key}").items()}

    def output(argv, series, name):
        write_csv(series, tmp_path / name)
        assert main([argv[0], str(tmp_path / name), *argv[1:], "--json"]) == 0
        captured = capsys.readouterr()
        return flat(json.loads(captured.out)), captured.err

    backtest = ["backtest", "--statistic", "sum", "--folds", "2", "--horizon", "12"]
    changed, err = output(backtest, pd.concat([before.resample("5min").sum(min_count=1), after]), "sums.csv")
    uniform, _ = output(backtest, demand, "uniform_sums.csv")
    assert said in err and changed == pytest.approx(uniform)

    simulate = ["simulate", "--policy", "oracle", "--days", "2"]
    changed, err = output(simulate, pd.concat([before.resample("5min").mean(), after]), "means.csv")
    uniform, _ = output(simulate, demand.resample("5min").mean(), "uniform_means.csv")
    assert said in err and changed == pytest.approx(uniform)


@pytest.mark.parametrize("status, reason, said", [
    ("True", "ReclaimableBelowHeadroom", "headroom at risk (ReclaimableBelowHeadroom): m"),
    ("Unknown", "CohortsUnreadable", "headroom not checked (CohortsUnreadable): m"),
    ("False", "CohortReclaims", "headroom covered (CohortReclaims): m"),
    ("False", "HeadroomCovered", None)])
def test_run_s_summary_says_the_headroom_condition_unless_covered_with_nothing_to_add(status, reason, said, capsys):
    """`headroom run`'s summary said HeadroomAtRisk only when True: a cluster whose Cohorts could not be read
    (Unknown) and one where Kueue preempts training on its own (False, CohortReclaims) read as covered."""
    import pandas as pd

    from cli.run import _print_state
    from controller.state import ControllerState
    from core.objects import Condition

    _print_state(pd.Timestamp("2026-01-05", tz="UTC"), ControllerState(
        headroom_at_risk=Condition("HeadroomAtRisk", status, reason, "m")))
    out = capsys.readouterr().out
    assert (said in out) if said else ("headroom" not in out), out
