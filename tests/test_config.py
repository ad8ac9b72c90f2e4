import re
from pathlib import Path

import pytest

from cli.config import load_config
from core.errors import ConfigError


def test_defaults_are_valid():
    cfg = load_config()
    assert cfg.forecast.quantiles == [0.5, 0.9, 0.99] and cfg.backtest.folds == 7


def test_every_error_is_listed_with_its_field_path(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("history:\n  statistc: max\n  statistic: p101\nforecast:\n  quantiles: [0.9, 0.5]\nbogus: 1\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, {"backtest.folds": 0})
    paths = {line.split(":")[0] for line in err.value.errors}
    assert paths == {"history.statistc", "history.statistic", "forecast.quantiles", "backtest.folds", "bogus"}
    flagged = [line for line in err.value.errors if line.endswith("(given on the command line: --help names each "
                                                                   "flag's field)")]
    assert [line.split(":")[0] for line in flagged] == ["backtest.folds"]  # the file's errors are the file's


@pytest.mark.parametrize("statistic", ["p 95", "p1e1", "p1_0", "p0.5", "p095", "p100.0"])
def test_a_statistic_is_written_as_a_policy_takes_it_everywhere(statistic, tmp_path):
    """history.statistic (and --statistic) took forms of a percentile float() reads but the ReservationPolicy CRD
    refuses ("p 95", "p1e1", "p0.5"): a forecast set up in one could not be written as a policy. One rule now."""
    from core.policy import PolicySpec

    path = tmp_path / "c.yaml"
    path.write_text(f"history:\n  statistic: '{statistic}'\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert [line.split(":")[0] for line in err.value.errors] == ["history.statistic"]
    with pytest.raises(ValueError, match="p1 to p100"):
        PolicySpec.model_validate({"statistic": statistic, "target": {"kind": "Deployment", "name": "x"}})


def test_flags_override_the_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("forecast:\n  horizon: 12\nbacktest:\n  folds: 3\n")
    cfg = load_config(path, {"forecast.horizon": 6, "backtest.folds": None})
    assert cfg.forecast.horizon == 6 and cfg.backtest.folds == 3


@pytest.mark.parametrize("text, message", [("- a\n- b\n", "mapping"), ("a: [\n", "YAML")])
def test_malformed_yaml(tmp_path, text, message):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_config(path)


def test_a_yaml_syntax_error_names_the_file_at_its_line(tmp_path):
    """A typo (`file x.csv`, no colon) said where it was `in "<unicode string>", line 3`: PyYAML's name for text."""
    from core.policy import load_manifests

    config, policy = tmp_path / "c.yaml", tmp_path / "p.yaml"
    config.write_text("history:\n  file x.csv\n  statistic: max\n")
    policy.write_text("apiVersion: headroom.dev/v1alpha1\nkind: ReservationPolicy\nspec:\n  mode active\n  query: up\n")
    for path, load in ((config, load_config), (policy, load_manifests)):
        with pytest.raises(ConfigError) as err:
            load(path)
        said = "\n".join(err.value.errors)
        assert f'in "{path}", line ' in said and "<unicode string>" not in said, said


def test_a_key_given_twice_is_refused_naming_its_path_and_lines(tmp_path):
    """PyYAML keeps the last of two values silently: the run would use a value nobody may have meant."""
    path = tmp_path / "c.yaml"
    path.write_text("forecast:\n  horizon: 12\n  quantiles: [0.5, 0.9]\n  horizon: 48\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert err.value.errors == ["forecast.horizon: given twice (lines 2 and 4); give it once"]


def test_one_document_is_a_configuration(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("forecast:\n  horizon: 12\n---\nforecast:\n  horizon: 48\n")
    with pytest.raises(ConfigError, match="one YAML document expected, found 2"):
        load_config(path)


def test_missing_file():
    with pytest.raises(ConfigError, match="cannot read"):
        load_config("/nonexistent/headroom.yaml")


def test_one_history_source_only():
    with pytest.raises(ConfigError, match="either file or prometheus"):
        load_config(None, {"history.file": "a.csv", "history.prometheus": {"url": "http://x", "query": "up"}})


def test_relative_paths_in_a_file_are_relative_to_the_file_and_flags_to_the_working_directory(tmp_path, monkeypatch):
    folder = tmp_path / "conf"
    folder.mkdir()
    config = folder / "headroom.yaml"
    kubeconfig = tmp_path / "kubeconfig"  # an absolute path: kept as it is (and it must exist)
    kubeconfig.write_text("{}")
    config.write_text("history: {file: demand.csv}\n"
                      f"run:\n  kubeconfig: {kubeconfig}\n  policies:\n  - name: chat\n    history_file: d/chat.csv\n"
                      "    spec: {query: q, capacity: {demandPerGpu: 1}, target: {kind: Deployment, name: chat}}\n")
    monkeypatch.chdir(tmp_path)
    cfg = load_config(config)
    assert cfg.history.file == folder / "demand.csv"
    assert cfg.run.policies[0].history_file == folder / "d" / "chat.csv"
    assert cfg.run.kubeconfig == kubeconfig
    assert cfg.run.forecast_log_dir.is_absolute() is False  # a default is not in the file: the working directory's
    assert load_config(config, {"history.file": "other.csv"}).history.file.as_posix() == "other.csv"


@pytest.mark.parametrize("text, field", [
    ("forecast:\n  horizon: true\n", "forecast.horizon"),         # once a 1-hour forecast
    ("simulate:\n  gpus: '128'\n", "simulate.gpus"),             # a quoted number is a typo, not a number
    ("forecast:\n  quantiles: [0.5, '0.9']\n", "forecast.quantiles[1]"),
    ("training:\n  promotion_margin: true\n", "training.promotion_margin"),
])
def test_a_value_of_the_wrong_type_is_refused_not_converted(tmp_path, text, field):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert any(line.startswith(field + ":") for line in err.value.errors), err.value.errors


@pytest.mark.parametrize("spec, field", [({"minGpus": True}, "minGpus"), ({"targetQuantile": "0.9"}, "targetQuantile"),
                                         ({"capacity": {"demandPerGpu": "10"}}, "capacity.demandPerGpu")])
def test_a_policy_field_of_the_wrong_type_is_refused(spec, field):
    from pydantic import ValidationError

    from core.policy import PolicySpec

    base = {"query": "up", "capacity": {"demandPerGpu": 10}, "target": {"kind": "Deployment", "name": "x"}}
    with pytest.raises(ValidationError) as err:
        PolicySpec.model_validate({**base, **spec})
    assert any(".".join(map(str, e["loc"])) == field for e in err.value.errors()), err.value.errors()


def test_a_maximum_below_one_replica_is_refused():
    """maxGpus 4 with 8-GPU replicas once reported 4 reserved while the Deployment held 8, lending 4 GPUs twice."""
    from pydantic import ValidationError

    from core.policy import PolicySpec

    base = {"query": "up", "target": {"kind": "Deployment", "name": "x"}}
    with pytest.raises(ValidationError, match=r"maxGpus must be at least one replica \(capacity.gpusPerReplica 8\)"):
        PolicySpec.model_validate({**base, "capacity": {"demandPerGpu": 4, "gpusPerReplica": 8}, "maxGpus": 4})
    PolicySpec.model_validate({**base, "capacity": {"demandPerGpu": 4, "gpusPerReplica": 8}, "maxGpus": 8})


POLICY_ENTRY = ("run:\n  policies:\n  - name: chat\n    history_file: h.csv\n    spec: {query: up, capacity: "
                "{demandPerGpu: 10}, target: {kind: Deployment, name: chat}, %s}\n")


@pytest.mark.parametrize("text, field, value", [
    ("history:\n  prometheus: {url: http://p:9090, query: up, lookback: 28}\n", "history.prometheus.lookback", "28"),
    ("history:\n  prometheus: {url: http://p:9090, query: up, step: 300}\n", "history.prometheus.step", "300"),
    ("tune:\n  lead_times: [15m, 30]\n", "tune.lead_times[1]", "30"),
    (POLICY_ENTRY % "leadTime: 15", "run.policies[0].spec.leadTime", "15"),
    (POLICY_ENTRY % "reclaimDeadline: 2.5", "run.policies[0].spec.reclaimDeadline", "2.5"),
])
def test_a_duration_written_without_its_unit_is_said_to_lack_one(tmp_path, text, field, value):
    """A new user's first duration is often a bare number (`leadTime: 15`, `lookback: 28`): it was refused as "Input
    should be a valid string", which does not say that a unit is missing (a policy file's spec is read so too)."""
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert [line for line in err.value.errors if line.startswith(field + ":")] == \
        [f"{field}: {value} has no unit: write a duration with one, e.g. 90s, 15m or 1h30m"], err.value.errors


def test_a_kubeconfig_that_is_not_a_file_is_a_bad_request(tmp_path):
    with pytest.raises(ConfigError, match=r"run.kubeconfig: .*nowhere is not a file \(given on the command line"):
        load_config(None, {"run.kubeconfig": str(tmp_path / "nowhere")})



@pytest.mark.parametrize("text, value", [
    # YAML 1.1's octal: read as 8, a week of folds quietly one day short (YAML 1.2 reads ten, kubectl 8: neither)
    ("backtest: {folds: 010}", "010: a number with a leading zero is octal to kubectl and YAML 1.1, decimal to YAML"),
    ("backtest: {folds: 0o10}", 8),
    ("backtest: {folds: 1_0}", 10),
    ("backtest: {folds: 1e1}", "backtest.folds: Input should be a valid integer"),  # a float for a count: not rounded
    ("backtest: {folds: '10'}", "backtest.folds: Input should be a valid integer"),
    ("backtest: {folds: 1:30}", "backtest.folds: Input should be a valid integer"),  # YAML 1.1's base 60: read as 90
    (f"backtest: {{folds: 1{'0' * 5000}}}", "a number of 5001 digits"),  # past int()'s limit: a traceback before
])
def test_numbers_are_read_as_written_not_as_yaml_1_1_octal_or_base_60(tmp_path, text, value):
    path = tmp_path / "c.yaml"
    path.write_text(text + "\n")
    if isinstance(value, str):
        with pytest.raises(ConfigError, match=re.escape(value)):
            load_config(path)
    else:
        assert load_config(path).backtest.folds == value


def test_a_nested_section_with_every_key_commented_out_takes_its_defaults(tmp_path):
    """README: such a section takes its defaults; simulate.world and run.lease were refused as 'not a dictionary'."""
    path = tmp_path / "c.yaml"
    path.write_text("simulate:\n  world:\n    # seed: 3\nrun:\n  lease:\n  # name: other\n  team_weights:\n"
                    "  # research: 2\n  policies:\n  # - {name: chat}\nhistory:\n  prometheus:\n")
    cfg = load_config(path)
    assert cfg.simulate.world.seed == 0 and cfg.run.lease.name == "headroom" and cfg.history.prometheus is None
    assert cfg.run.team_weights == {} and cfg.run.policies == []  # were 'Input should be a valid dictionary/list'


def test_a_flag_beside_a_section_that_is_not_a_mapping_does_not_hide_it(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("forecast: [48]\n")  # was replaced by {horizon: 6} and accepted
    with pytest.raises(ConfigError, match="forecast: Input should be a valid dictionary"):
        load_config(path, {"forecast.horizon": 6})


@pytest.mark.parametrize("text, error", [
    ("history: {file: ''}", "history.file: an empty path"),  # was the working directory, '.'
    ("run: {forecast_log_dir: ''}", "run.forecast_log_dir: an empty path"),  # logs written into the working dir
    ("run: {kubeconfig: ~/no-such-kubeconfig}", f"run.kubeconfig: {Path.home()}/no-such-kubeconfig is not a file"),
])
def test_an_empty_path_is_refused_and_a_home_path_is_the_users_home(tmp_path, text, error):
    path = tmp_path / "c.yaml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert err.value.errors == [error]


def test_a_path_under_home_in_the_file_or_a_flag_is_under_home(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("history: {file: ~/demand.csv}\n")
    assert load_config(path).history.file == Path.home() / "demand.csv"  # was tmp_path/'~/demand.csv', unexpanded
    assert load_config(None, {"simulate.jobs": "~/jobs.csv"}).simulate.jobs == Path.home() / "jobs.csv"


@pytest.mark.parametrize("world, error", [
    ("{seed: -1}", "simulate.world.seed: Input should be greater than or equal to 0"),  # numpy's traceback before
    ("{preemption_seconds: [100000, 100000]}", "preemption_seconds must be [low, high] with 0 <= low <= high <= 3600"),
])
def test_a_simulated_world_the_simulator_cannot_run_is_refused(tmp_path, world, error):
    from cli.main import main
    from forecast.synthetic import synthetic_demand, write_csv

    path = tmp_path / "c.yaml"
    path.write_text(f"simulate: {{world: {world}}}\n")
    with pytest.raises(ConfigError, match=re.escape(error)):
        load_config(path)
    demand = tmp_path / "d.csv"
    write_csv(synthetic_demand(days=3, step="1h"), demand)
    assert main(["--config", str(path), "simulate", str(demand), "--policy", "oracle", "--days", "1"]) == 2


def test_the_traces_scale_is_one_setting_and_a_flag_replaces_the_files(tmp_path):
    """simulate.per_gpu in the file silently beat --peak-gpus (the flag had no effect, exit 0); the file may give
    one of the two."""
    path = tmp_path / "c.yaml"
    path.write_text("simulate: {per_gpu: 1000}\n")
    cfg = load_config(path, {"simulate.peak_gpus": 50})
    assert (cfg.simulate.peak_gpus, cfg.simulate.per_gpu) == (50, None)
    path.write_text("simulate: {peak_gpus: 20}\n")
    cfg = load_config(path, {"simulate.per_gpu": 5})
    assert cfg.simulate.per_gpu == 5
    path.write_text("simulate: {peak_gpus: 20, per_gpu: 3}\n")
    with pytest.raises(ConfigError, match="simulate: give peak_gpus or per_gpu, not both"):
        load_config(path)
    path.write_text("simulate: {peak_gpus: null}\n")  # report's header formatted None: a traceback after the work
    with pytest.raises(ConfigError, match="simulate.peak_gpus"):
        load_config(path)


@pytest.mark.parametrize("overrides, field", [
    ({"training.tracking_uri": ""}, "training.tracking_uri"),  # `--tracking-uri "$UNSET"` trained into the default
    ({"run.tracking_uri": ""}, "run.tracking_uri"),
    ({"run.namespace": ""}, "run.namespace"),  # matched no policy: the controller watched nothing, silently
    ({"run.namespace": "Inference"}, "run.namespace"),
    ({"run.lease": {"namespace": "headroom system"}}, "run.lease.namespace"),
])
def test_a_value_that_would_silently_mean_something_else_is_refused(overrides, field):
    with pytest.raises(ConfigError) as err:
        load_config(None, overrides)
    assert [line.split(":")[0] for line in err.value.errors] == [field]


@pytest.mark.parametrize("text", ["0.5,,0.9", "0.5,0.9,", ""])
def test_quantiles_with_a_value_left_out_are_refused_naming_the_flag(text, capsys):
    from cli.main import main

    with pytest.raises(SystemExit) as exit_:  # 0.5,,0.9 ran as 0.5,0.9, exit 0
        main(["forecast", "h.csv", "--quantiles", text])
    assert exit_.value.code == 2 and f"--quantiles: not a comma-separated list of numbers: {text!r}" in \
        capsys.readouterr().err


def test_a_bad_flag_without_a_configuration_file_is_said_to_be_a_flag(capsys):
    """`headroom simulate D --max-shortage 5` said "invalid configuration (defaults)": no file was given, and the
    defaults are valid, so what is invalid is the flag."""
    from cli.main import main

    assert main(["simulate", "demand.csv", "--max-shortage", "5"]) == 2
    assert capsys.readouterr().err.splitlines()[:2] == [
        "headroom: error: invalid configuration (command-line flags):",
        "  tune.max_shortage: Input should be less than or equal to 1 (given on the command line as --max-shortage)"]


@pytest.mark.parametrize("argv, error, flag", [
    (["forecast", "h.csv", "--timezone", "Berlin"], "forecast.timezone: 'Berlin' is not an IANA time zone",
     "--timezone"),
    (["simulate", ""], "history.file: an empty path", "the DEMAND argument"),
    (["plan", "--gpus", "0"], "run.capacity_gpus: Input should be greater than or equal to 1", "--gpus"),
    (["train", "--tracking-uri", "mlflow.db"], "training.tracking_uri: 'mlflow.db' is a path", "--tracking-uri"),
    # an item of the list the flag gives: said as forecast.quantiles[2], which names no flag
    (["forecast", "h.csv", "--quantiles", "0.5,0.9,1.2"], "forecast.quantiles[2]: Input should be less than 1",
     "--quantiles"),
], ids=["flag", "argument", "flag-of-another-key", "flag-beside-the-key's-name", "an-item-of-the-flag's-list"])
def test_a_bad_flag_is_named_by_the_flag_typed(argv, error, flag, capsys):
    """A flag's error named only the field it sets, "(given on the command line: --help names each flag's field)":
    the user typed --timezone, not forecast.timezone, and had to read --help to find which it was."""
    from cli.main import main

    assert main(argv) == 2
    lines = [line.strip() for line in capsys.readouterr().err.splitlines()]
    assert any(line.startswith(error) and line.endswith(f"(given on the command line as {flag})") for line in lines), \
        lines


def test_an_empty_config_path_is_refused_and_a_home_one_read(tmp_path, monkeypatch, capsys):
    """`--config ""` was read as the working directory ("invalid configuration (defaults): cannot read file: Is a
    directory"), or ignored beside a --config before the command; --config=~/x.yaml was not found."""
    from cli.main import main

    for argv in (["--config", "", "forecast", "h.csv"], ["--config", "x.yaml", "forecast", "--config", "", "h.csv"]):
        assert main(argv) == 2
        assert "invalid configuration (--config):\n  an empty path: give the configuration file" in \
            capsys.readouterr().err
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "headroom.yaml").write_text("forecast: {horizon: 7}\n")
    assert load_config("~/headroom.yaml").forecast.horizon == 7


def test_a_history_file_argument_replaces_the_files_prometheus_and_run_s_demand_is_no_history(tmp_path, monkeypatch):
    """`headroom forecast FILE` (or train --history FILE) beside a config holding history.prometheus was refused
    ("history: give either file or prometheus, not both"); so was `plan --policy-file P --history DEMAND`, whose
    --history is the policies' demand and was read as history.file."""
    import cli.run
    from cli.main import main

    config = tmp_path / "headroom.yaml"
    config.write_text("history: {prometheus: {url: 'http://127.0.0.1:9', query: up}}\n")
    cfg = load_config(config, {"history.file": "d.csv"})
    assert cfg.history.file == Path("d.csv") and cfg.history.prometheus is None
    seen = {}
    monkeypatch.setattr(cli.run, "cmd_plan", lambda cfg, args: seen.update(cfg=cfg, args=args) or 0)
    assert main(["--config", str(config), "plan", "--policy-file", "p.yaml", "--history", "d.csv"]) == 0
    assert seen["args"].demand == "d.csv" and seen["cfg"].history.prometheus is not None


def test_train_name_beside_training_series_is_refused_not_ignored(tmp_path, capsys):
    """`train --name chat` with training.series in the file trained every series under its own name, the flag
    dropped with exit 0."""
    from cli.main import main

    config = tmp_path / "headroom.yaml"
    config.write_text("training: {series: [{name: a, file: a.csv}]}\n")
    assert main(["train", "--config", str(config), "--name", "chat", "--tracking-uri", f"sqlite:///{tmp_path}/m.db"]) \
        == 2
    assert "--name chat: training.series names each series it trains" in capsys.readouterr().err
    assert not (tmp_path / "m.db").exists()


@pytest.mark.parametrize("text, error", [
    ("history: {file: ~nobody-here/d.csv}", "history.file: ~nobody-here/d.csv: ~nobody-here is no user's home"),
    ("forecast: {timezone: 2026-02-30}", "'2026-02-30' cannot be read as timestamp (day is out of range for month)"),
    ("forecast: {horizon: !!int abc}", "'abc' cannot be read as int"),  # ValueError, IndexError, ...: tracebacks
    ("forecast: {horizon: !!float }", "'' cannot be read as float"),
])
def test_text_no_home_date_or_number_can_be_made_of_is_an_error_not_a_traceback(tmp_path, text, error):
    path = tmp_path / "c.yaml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert error in err.value.errors[0]
    with pytest.raises(ConfigError, match="~nobody-here is no user's home directory on this machine"):
        load_config("~nobody-here/headroom.yaml")


def test_each_item_out_of_range_is_named_by_its_index_and_an_order_by_its_pair(tmp_path):
    """An item's error named its list only ("forecast.quantiles: quantile 1.5 is not strictly between 0 and 1"), and
    an unsorted list none of its items."""
    path = tmp_path / "c.yaml"
    path.write_text("forecast: {quantiles: [0.5, 1.5, 0.2]}\ntune: {margins_gpus: [0, -1], warm_buffers: [1, 200], "
                    "warm_buffer_quantiles: [null, 1], target_quantiles: [0.9, 0.5]}\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert [line.split(": ")[0] for line in err.value.errors] == [
        "forecast.quantiles[1]", "tune.target_quantiles", "tune.warm_buffers[1]", "tune.warm_buffer_quantiles[1]",
        "tune.margins_gpus[1]"]
    assert "tune.target_quantiles: must be strictly increasing (0.9 then 0.5)" in err.value.errors


@pytest.mark.parametrize("end", ["20260504", "'1700000000'", "1.7e9"])
def test_a_number_where_a_time_is_meant_is_refused_not_read_as_an_epoch(tmp_path, end):
    """`end: 20260504` was epoch seconds, 1970-08-23: a replay of a window nobody asked for."""
    path = tmp_path / "c.yaml"
    path.write_text(f"history: {{prometheus: {{url: 'http://x', query: up, end: {end}}}}}\n")
    with pytest.raises(ConfigError, match=r"history.prometheus.end: .* is not a time: give it as ISO-8601"):
        load_config(path)


BAD_SECTION = "simulate:\n  gpus: -3\n"
BAD_MANIFEST = ("apiVersion: headroom.dev/v1alpha1\nkind: ReservationPolicy\nmetadata: {name: chat}\n"
                "spec:\n  query: demand\n  target: {kind: Deployment, name: chat}\n  capacity: {demandPerGpu: 100}\n"
                "  minGpus: -1\n")
UNKNOWN_QUEUE = "simulate:\n  world:\n    strict_fifo_queues: [trian]\n"
GOOD_MANIFEST = ("apiVersion: headroom.dev/v1alpha1\nkind: ReservationPolicy\nmetadata: {{name: {name}}}\n"
                 "spec:\n  query: demand\n  target: {{kind: Deployment, name: chat}}\n"
                 "  capacity: {{demandPerGpu: {per}}}\n  minGpus: {least}\n  mode: {mode}\n")


def manifest(name="chat", per=100, least=0, mode="active") -> str:
    return GOOD_MANIFEST.format(name=name, per=per, least=least, mode=mode)


MISSING_HISTORY = ("run:\n  policies:\n  - name: chat\n    namespace: inference\n    history_file: missing.csv\n"
                   "    spec: {query: demand, target: {kind: Deployment, name: chat}, capacity: {demandPerGpu: 100}}\n")


@pytest.mark.parametrize("argv, text, source, path", [
    (["run", "--config", "{file}"], BAD_SECTION, "{file}", "simulate.gpus"),
    (["train", "--config", "{file}"], BAD_SECTION, "{file}", "simulate.gpus"),
    (["simulate", "{demand}", "--gpus", "-3"], None, "command-line flags", "simulate.gpus"),
    (["simulate", "{demand}", "--policy-file", "{file}"], BAD_MANIFEST, "{file}", "spec.minGpus"),
    # found by the embedded cluster, which is given the settings, not the file: the CLI names the file
    (["simulate", "{demand}", "--days", "1", "--policy", "oracle", "--config", "{file}"], UNKNOWN_QUEUE, "{file}",
     "simulate.world.strict_fifo_queues"),
    # an otherwise valid policy file the replay cannot run, and a run.policies history file that is not there
    (["simulate", "{demand}", "--days", "1", "--policy-file", "{file}"], manifest(mode="forecast-only"), "{file}",
     "spec.mode"),
    (["simulate", "{demand}", "--days", "1", "--policy-file", "{file}"], manifest(per=1e-300), "{file}",
     "spec.capacity.demandPerGpu"),
    (["simulate", "{demand}", "--days", "1", "--policy-file", "{file}", "--gpus", "16"], manifest(least=500), "{file}",
     "spec.minGpus"),
    (["simulate", "{demand}", "--days", "1", "--policy-file", "{file}"], manifest() + "---\n" + manifest("search"),
     "{file}", "(top level)"),
    (["run", "--once", "--config", "{file}"], MISSING_HISTORY, "{file}", "run.policies[0].history_file"),
], ids=["run-config", "train-config", "flag", "policy-file", "world", "mode", "scale", "too-big", "several",
        "history-file"])
def test_every_configuration_error_is_said_in_one_form(argv, text, source, path, tmp_path, capsys):
    """A bad configuration file said "headroom: invalid configuration (FILE):", a bad policy file (read later, by the
    command) "headroom: error: invalid configuration (FILE):", and a ClusterQueue simulate.world.strict_fifo_queues
    misnames "... (simulate.world):" then "strict_fifo_queues: ...": a field for the file, half the path. Each is
    said alike now: the file (or the flags), then each error under its whole field path."""
    from cli.main import main

    fill = {"file": tmp_path / "bad.yaml", "demand": Path(__file__).parents[1] / "examples" / "demand_5min.csv"}
    if text is not None:
        fill["file"].write_text(text)
    assert main([a.format(**fill) for a in argv]) == 2
    lines = capsys.readouterr().err.splitlines()
    said = lines.index(f"headroom: error: invalid configuration ({source.format(**fill)}):")
    assert lines[said + 1:] and lines[said + 1].startswith(f"  {path}: "), lines


def test_demand_is_stale_after_a_week_at_most(tmp_path):
    """run.stale_after_seconds took any value: at 900000 a policy whose history ended 9 days before now read that
    sample as its demand now ('demand now 187' in headroom plan) and refit on it. A week is the planner's recent past
    (its fallback is last week's peaks): beyond it, refused by field path."""
    path = tmp_path / "c.yaml"
    path.write_text("run:\n  stale_after_seconds: 900000\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert [line.split(":")[0] for line in err.value.errors] == ["run.stale_after_seconds"]
    assert "604800" in err.value.errors[0]
    path.write_text("run:\n  stale_after_seconds: 604800\n")
    assert load_config(path).run.stale_after_seconds == 604800
