"""`headroom demo --quick`: every stage runs for real (MLflow sqlite, planner, simulator, report)."""
from __future__ import annotations

import contextlib
import io
import re

import pandas as pd
import pytest

from adapters.mlflow import Tracker, registered_name
from cli.demo import SERIES
from cli.main import main
from controller.simulate import POLICIES
from core.policy import load_manifests
from training.pipeline import load_champion

STAGES = ("history:", "trained:", "forecast:", "recommended:", "plan at", "simulated forecast", "simulated oracle",
          "simulated hourly-oracle", "report written")


# keys the demo makes itself: given, they are said unused, and every figure below is the demo's without them
UNREAD = ("simulate:\n  days: 1\n  policy: static\nforecast:\n  timezone: Europe/Berlin\n"
          "training:\n  candidates: [snaive24]\n  drift_window: 12\nhistory:\n  counter: true\n"
          "run:\n  namespace: prod\n")


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    config = tmp_path_factory.mktemp("config") / "headroom.yaml"
    config.write_text(UNREAD)
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        status = main(["demo", "--quick", "--out", str(out), "--config", str(config)])
    return out, status, stdout.getvalue(), stderr.getvalue()


def test_the_configurations_keys_the_demo_makes_itself_are_said_unused(demo):
    """A configuration's simulate.days, forecast.timezone, ... were dropped without a word: the demo simulates its own
    days of its own history under every policy. run.namespace, read, left the demo's own policy (in `default`)
    outside it: a KeyError traceback, exit 1."""
    err = demo[3]
    assert "headroom: note: history.counter, forecast.timezone, simulate.policy, simulate.days, " \
           "training.candidates, training.drift_window, run.namespace of the configuration not used: the demo makes " \
           "its own history, " \
           "training and scenario" in err, err
    assert "simulating the last 2 day(s)" in err and "the embedded 128-GPU cluster" in err


def test_demo_succeeds_and_shows_progress_per_stage(demo):
    _, status, _, err = demo
    assert status == 0, err
    for stage in STAGES:
        assert re.search(r"\[demo \+ *\d+\.\ds\] " + re.escape(stage), err), f"no progress line for {stage!r}:\n{err}"


def test_history_is_the_projects_own_and_complete(demo):
    out = demo[0]
    history = pd.read_csv(out / "demand_5min.csv")
    assert list(history.columns) == ["timestamp", "value"]
    assert len(history) == 15 * 24 * 12  # --quick: 15 days of 5-minute steps
    assert history["value"].isna().sum() > 0  # the scrape gap stays missing, never zero


def test_mlflow_store_has_the_run_and_a_champion(demo):
    out, _, stdout, _ = demo
    tracker = Tracker(f"sqlite:///{out / 'mlflow.db'}").connect()
    champion = tracker.champion(registered_name(SERIES))
    assert champion is not None and str(champion.version) == "1"
    tags = tracker.run_tags(champion.run_id)
    assert tags["headroom.promoted"] == "true"
    served = load_champion(SERIES, f"sqlite:///{out / 'mlflow.db'}")  # a model card, refit on fresh history
    history = pd.read_csv(out / "demand_5min.csv", parse_dates=["timestamp"], index_col="timestamp")["value"]
    hourly = history.resample("1h").max().interpolate()
    assert served.card.model == served.tags["headroom.model"]
    assert served.make().fit(hourly).predict(3, [0.5]).shape == (3, 1)
    assert f"mlflow ui --backend-store-uri sqlite:///{out / 'mlflow.db'}" in stdout


def test_the_recommended_setting_is_written_as_a_policy_the_controller_accepts(demo):
    out, _, stdout, err = demo
    line = re.search(r"recommended: (.*)", err).group(1)
    assert "None" not in line and "meeting shortage <= 0.100% and short steps <= 1.00%" in line
    (policy,) = load_manifests(out / "policy.yaml")
    spec = policy["spec"]
    setting = re.findall(r"(\w+) ([\d.]+)[,:]", line.split(":")[0] + ":")
    assert setting and all(float(spec[name]) == float(value) for name, value in setting)  # what was recommended
    assert f"headroom run --policy-file {out / 'policy.yaml'}" in stdout


def test_the_printed_run_command_serves_the_champion_the_demo_trained(demo, tmp_path, monkeypatch, capsys):
    """The demo's own plan and the command it prints for the user look the champion up as the policy's series
    (namespace.name) in the demo's store: both serve the model it says it trained, not automatic selection."""
    stdout = demo[2]
    assert re.search(r"^  model: champion v1\b", stdout, re.M), stdout
    command = re.search(r"run it: +MLFLOW_TRACKING_URI=(\S+) headroom (run .*?)   \(", stdout)
    assert command, stdout
    monkeypatch.setenv("MLFLOW_TRACKING_URI", command.group(1))
    monkeypatch.chdir(tmp_path)  # its forecast log goes here, not into the demo's folder
    capsys.readouterr()
    assert main([*command.group(2).split(), "--once"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "default/inference:" in x)
    assert re.search(r"model champion v1\b", line), line


def test_plan_summary_is_printed_with_reasons(demo):
    stdout = demo[2]
    plan = stdout.split("policies compared:")[0]
    rows = re.findall(r"^\s+\d{4}-\d\d-\d\d \d\d:00\s+(\d+)\s+(\d+)$", plan, re.M)
    assert len(rows) == 6 and all(0 <= int(r) <= 128 for r, _ in rows)
    assert re.search(r"now: \d+ GPUs: forecast reservation \d+ \(lead time included\), recent peak \d+ \+ warm buffer",
                     plan)
    assert "would scale Deployment inference to" in plan and "would set ClusterQueue training quota" in plan


def test_comparison_has_every_policy_and_the_forecast_policy_meets_the_objective(demo):
    stdout = demo[2]
    table = stdout.split("policies compared:")[1].split("\nreport:")[0]
    util, met = _compared(stdout)
    assert set(util) == set(POLICIES)
    assert met["forecast"], table  # the default objective, on the demo's own data
    assert util["oracle"] >= util["forecast"] > util["static"]


def _compared(stdout: str) -> tuple[dict[str, float], dict[str, bool]]:
    table = stdout.split("policies compared:")[1].split("\nreport:")[0]
    rows = {line.split()[0]: line.split() for line in table.strip().splitlines()[2:]}
    return {p: float(r[1].rstrip("%")) for p, r in rows.items()}, {p: r[4] == "True" for p, r in rows.items()}


# Open: on --quick's data the warm buffer from the last week's rises at the objective's level (1 - maxShortSteps)
# costs the forecast policy utilization where its forecast already covers the demand: 90.6% against the tuned
# seasonal-naive's 92.0% (both meet the objective; on the full demo 88.4% against 70.4%). strict: fails once it passes.
@pytest.mark.xfail(strict=True, reason="the rises' warm buffer on --quick's demand: below tuned seasonal-naive")
def test_forecast_policy_at_or_above_every_tuned_baseline_meeting_the_objective(demo):
    util, met = _compared(demo[2])
    assert all(util["forecast"] >= util[b] for b in ("static", "reactive", "seasonal-naive") if met[b])


def test_report_has_every_plot_embedded(demo):
    out, _, stdout, _ = demo
    page = out / "report" / "index.html"
    assert f"xdg-open {page}" in stdout
    text = page.read_text()
    assert len(re.findall(r'<img src="data:image/png;base64,[A-Za-z0-9+/=]{1000,}"', text)) == 4
    assert "champion v1" in text and all(f">{p}<br>" in text for p in POLICIES)


def test_the_demos_plan_is_the_one_headroom_plan_makes_of_its_policy_and_history(demo, tmp_path, monkeypatch, capsys):
    """The demo's history is the gauge it wrote: a configuration's history.counter (true in the fixture's) had its plan
    read it as a counter's increments (58 GPUs now and 70 lent, against 15 and 113), exit 0, while the simulation
    beside it read the history as written. Its plan is what `headroom plan` makes of its policy and history."""
    out, _, stdout, _ = demo
    at = pd.Timestamp(re.search(r"^plan at (\S+ \S+) UTC", stdout, re.M).group(1), tz="UTC")
    now = re.search(r"^  now: (.+)$", stdout, re.M).group(1)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{out / 'mlflow.db'}")  # its champion, as the demo serves
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    assert main(["plan", "--policy-file", str(out / "policy.yaml"), "--history", str(out / "demand_5min.csv"),
                 "--now", at.isoformat(), "--gpus", "128"]) == 0
    planned = capsys.readouterr().out
    assert f"; now: {now}\n" in planned, (now, planned)


def test_a_second_demo_into_its_own_folder_replaces_its_policy(demo):
    """Last in this file: it runs the demo again into the folder the tests above read. An earlier demo's folder is
    taken and its files replaced (README), policy.yaml too, which `tune --write-policy` never overwrites."""
    out = demo[0]
    (out / "policy.yaml").write_text("# headroom demo: the earlier demo's\n")  # as the demo's own begins
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        assert main(["demo", "--quick", "--out", str(out)]) == 0, err.getvalue()[-2000:]
    (policy,) = load_manifests(out / "policy.yaml")
    assert policy["kind"] == "ReservationPolicy"


def test_every_key_the_demo_says_it_does_not_read_is_a_configuration_key():
    """NOT_READ names keys by hand: one renamed in core.settings would no longer be said, without a word."""
    from cli.demo import NOT_READ
    from core.settings import Config

    for section, keys in NOT_READ.items():
        fields_ = Config.model_fields[section].annotation.model_fields
        assert set(keys) <= set(fields_), (section, set(keys) - set(fields_))


def test_the_demo_says_every_training_key_unused():
    """The demo trains with its own settings and its controller retrains nothing: no key of `training` is read, and
    training.lock_ttl_seconds, drift_factor and drift_window were dropped without a word (a key added there would be
    too)."""
    from cli.demo import NOT_READ
    from core.settings import Config

    assert set(NOT_READ["training"]) == set(Config.model_fields["training"].annotation.model_fields)
