"""The configuration as a user writes it (hypothesis): documents drawn from core.settings' own sections and keys,
each value in the spellings YAML allows, read back exactly as written, or refused with every mistake named by its
field path; a flag reads a value as its key in the file does, and wins beside it; the same file, the same settings."""
import json
import math
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import get_args

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

import cli.main
import cli.report
import cli.run
from cli.config import load_config
from cli.main import main
from core.errors import ConfigError
from core.policy import PolicySpec, load_manifests
from core.settings import Config

PROPERTY = settings(max_examples=int(os.environ.get("HEADROOM_FUZZ_EXAMPLES", "60")), deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])
FLAGGED = " (given on the command line as {})"  # the flag's name in it


def leaves(model: type[BaseModel], prefix: str = "") -> dict[str, object]:
    """Every key of the configuration that holds a value (a section's keys, not the section, also of an optional
    section such as history.prometheus), by its dotted path."""
    out: dict[str, object] = {}
    for name, field in model.model_fields.items():
        kind = field.annotation
        optional = get_args(kind) if type(None) in get_args(kind) else ()
        section = next((k for k in (kind, *optional) if isinstance(k, type) and issubclass(k, BaseModel)), None)
        if section is not None:
            out |= leaves(section, f"{prefix}{name}.")
        else:
            out[f"{prefix}{name}"] = kind
    return out


# a valid value of each key, as YAML data; absent: a key whose values need files or servers (tested by example)
NUMBER_OF_GPUS = st.integers(1, 10**6)
QUANTILES = st.lists(st.floats(0.001, 0.999), min_size=1, max_size=4, unique=True).map(sorted)
GO_DURATION = st.sampled_from(["0s", "90s", "10m", "1h30m", "1.5h", "2h"])
VALID = {
    "history.statistic": st.sampled_from(["mean", "max", "sum", "p95", "p99.9", "p100"]),
    "history.step": st.sampled_from(["1h", "60m", "3600s", "0.5h30m"]),
    "history.counter": st.booleans(),
    "history.outlier_factor": st.none() | st.floats(1.001, 1e6),
    "forecast.horizon": st.integers(1, 336),
    "forecast.quantiles": QUANTILES,
    "forecast.timezone": st.sampled_from(["UTC", "Europe/Berlin", "America/New_York", "Etc/GMT+5", "Asia/Kolkata"]),
    "backtest.horizon": st.integers(1, 336),
    "backtest.folds": st.integers(1, 365),
    "backtest.step": st.integers(1, 10**12),
    "simulate.gpus": NUMBER_OF_GPUS,
    "simulate.peak_gpus": st.floats(1e-3, 1e6),
    "simulate.policy": st.sampled_from(["forecast", "static", "reactive", "seasonal-naive", "oracle", "hourly-oracle"]),
    "simulate.days": st.floats(1e-3, 3660),
    "simulate.world.warmup_seconds": st.floats(0, 3600),
    "simulate.world.preemption_seconds": st.tuples(st.floats(0, 3600), st.floats(0, 3600)).map(sorted),
    "simulate.world.checkpoint_interval_seconds": st.floats(1e-3, 1e9),
    "simulate.world.backlog_job_gpus": st.lists(st.integers(1, 64), min_size=1, max_size=5),
    "simulate.world.backlog_job_hours": st.tuples(st.floats(1e-3, 1e3), st.floats(1e-3, 1e3)).map(sorted),
    "simulate.world.hpa_scale_down_seconds": st.floats(0, 1e6),
    "simulate.world.strict_fifo_queues": st.lists(st.from_regex(r"[a-z][a-z0-9-]{0,10}", fullmatch=True), max_size=3),
    "simulate.world.seed": st.integers(0, 2**70),
    "tune.max_shortage": st.floats(0, 1),
    "tune.max_short_steps": st.floats(0, 1),
    "tune.target_quantiles": QUANTILES,
    "tune.warm_buffers": st.lists(st.floats(0, 100), min_size=1, max_size=4, unique=True).map(sorted),
    "tune.warm_buffer_quantiles": st.lists(st.none() | st.floats(0, 0.999), min_size=1, max_size=3),
    "tune.scale_in_delays": st.lists(GO_DURATION, min_size=1, max_size=3),
    "tune.lead_times": st.lists(GO_DURATION, min_size=1, max_size=3),
    "tune.margins_gpus": st.lists(st.integers(0, 64), min_size=1, max_size=4, unique=True).map(sorted),
    "tune.forecasters": st.lists(st.sampled_from(["auto", "seasonal-naive", "reactive", "static"]), min_size=1),
    "training.tracking_uri": st.sampled_from(["http://mlflow:5000", "sqlite:///mlflow.db", "postgresql://mlflow@db/mlflow"]),
    "training.name": st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,20}", fullmatch=True),
    "training.candidates": st.lists(st.sampled_from(["auto", "profile", "snaive24", "ets", "theta"]), min_size=1),
    "training.objective": st.sampled_from(["mase", "pinball"]),
    "training.target_quantile": st.floats(0.001, 0.999),
    "training.promotion_margin": st.floats(0, 0.999),
    "training.lock_ttl_seconds": st.floats(1e-3, 1e9),
    "training.drift_factor": st.floats(1.001, 1e3),
    "training.drift_window": st.integers(1, 10**6),
    "run.namespace": st.sampled_from(["default", "inference", "a-b-1"]),
    "run.capacity_gpus": st.integers(2, 10**6),
    "run.interval_seconds": st.floats(1e-3, 1e6),
    "run.horizon_hours": st.integers(2, 336),
    "run.stale_after_seconds": st.floats(1e-3, 1e6),
    "run.keep_forecast_seconds": st.floats(1e-3, 1e6),
    "run.metrics_port": st.integers(0, 65535),
    "run.metrics_address": st.sampled_from(["0.0.0.0", "127.0.0.1", "::1", "::"]),
    "run.lease.namespace": st.sampled_from(["headroom-system", "default"]),
    "run.lease.name": st.sampled_from(["headroom", "headroom-2"]),
    "run.lease.duration_seconds": st.integers(2, 3600),
    "run.forecast_log_dir": st.sampled_from(["logs", "a/b", "/tmp/headroom-forecasts"]),
    "run.tracking_uri": st.sampled_from(["http://mlflow:5000", "sqlite:///mlflow.db"]),
    "run.retrain_every_seconds": st.floats(0, 1e9),
    "history.prometheus.url": st.sampled_from(["http://prometheus:9090", "https://p.example/prometheus"]),
    "history.prometheus.query": st.sampled_from(["sum(rate(requests_total[5m]))", "up", "1e3"]),
    "history.prometheus.lookback": st.sampled_from(["28d", "2w", "36h", "1.5d", "90m", "1h30m", "3600s", "1d12h"]),
    "history.prometheus.step": st.sampled_from(["5m", "1s", "1h", "90s", "1m30s", "0.5m", "1000ms", "2.5s2.5s"]),
    "history.prometheus.end": st.datetimes(timezones=st.just(UTC)),
    "history.prometheus.insecure_skip_verify": st.booleans(),
    "history.prometheus.timeout_seconds": st.floats(1e-3, 1e4),
    "history.prometheus.retries": st.integers(0, 10),
    "run.team_weights": st.dictionaries(st.from_regex(r"[a-z][a-z0-9-]{0,10}", fullmatch=True),
                                        st.floats(1e-3, 1e3), max_size=3),
}
BY_EXAMPLE = {  # their values name files that must exist, servers, or each other (test_config.py, test_bad_input.py)
    "history.file", "history.prometheus.bearer_token_file", "history.prometheus.ca_file", "simulate.per_gpu",
    "simulate.policy_file", "simulate.jobs", "training.series", "run.cluster", "run.kubeconfig",
    "run.non_lendable_gpus", "run.policies", *(k for k in leaves(Config) if k.startswith("run.prometheus."))}
NEEDED = {"history.prometheus": ("history.prometheus.url", "history.prometheus.query")}  # keys a section requires


def test_every_key_of_the_settings_is_drawn_or_tested_by_example():
    """A key added to core.settings without a strategy here would go untested: listed, it fails."""
    assert set(leaves(Config)) == set(VALID) | BY_EXAMPLE


def spell(value, data) -> str:
    """`value` as YAML text, in one of the spellings that means it (what a user may write)."""
    if isinstance(value, bool):
        return data.draw(st.sampled_from(["true", "yes", "on", "True"] if value else ["false", "no", "off", "FALSE"]))
    if isinstance(value, int):
        digits = str(abs(value))
        forms = [digits, f"{abs(value):#x}", f"0o{abs(value):o}", f"+{digits}"]
        if len(digits) > 3:
            forms.append(f"{digits[:-3]}_{digits[-3:]}")
        return ("-" if value < 0 else "") + data.draw(st.sampled_from(forms))
    if isinstance(value, float):
        return data.draw(st.sampled_from([repr(value), f"{value:.17e}", f"{value:.17E}"]))
    if value is None:
        return data.draw(st.sampled_from(["null", "~"]))
    if isinstance(value, str):
        return json.dumps(value)  # quoted: the text as written
    if isinstance(value, datetime):
        return data.draw(st.sampled_from([value.isoformat(), json.dumps(value.isoformat())]))
    if isinstance(value, list | tuple):
        return "[" + ", ".join(spell(v, data) for v in value) + "]"
    return "{" + ", ".join(f"{json.dumps(k)}: {spell(v, data)}" for k, v in value.items()) + "}"


def nest(pairs: dict[str, object]) -> dict:
    tree: dict = {}
    for path, value in pairs.items():
        *parents, leaf = path.split(".")
        node = tree
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    return tree


SECTIONS = {"world", "lease", "prometheus", *Config.model_fields}


def document(tree: dict, data, indent: str = "") -> str:
    """YAML with its sections in block style and their values spelled by `spell`."""
    return "".join(f"{indent}{key}:\n" + document(value, data, indent + "  ")
                   if isinstance(value, dict) and key in SECTIONS else f"{indent}{key}: {spell(value, data)}\n"
                   for key, value in tree.items())


def read_back(cfg: Config, path: str):
    node = cfg
    for key in path.split("."):
        node = getattr(node, key)
    return node


def as_written(path: str, value, folder: Path):
    if path == "run.forecast_log_dir":
        return folder / value
    if isinstance(value, list) and path.startswith("simulate.world"):
        return tuple(value)
    return value


@PROPERTY
@given(st.sets(st.sampled_from(sorted(VALID)), min_size=1, max_size=12), st.data())
def test_what_the_file_says_is_what_the_settings_hold(tmp_path_factory, monkeypatch, keys, data):
    """Every valid value, in any spelling YAML gives it (0o17 is fifteen, 1e3 a thousand, yes true), reads back
    exactly; the same file gives the same settings every time, from any working directory."""
    keys |= {k for section, needed in NEEDED.items() if any(key.startswith(section) for key in keys) for k in needed}
    pairs = {k: data.draw(VALID[k], label=k) for k in sorted(keys)}
    folder = tmp_path_factory.mktemp("cfg")
    path = folder / "headroom.yaml"
    path.write_text(document(nest(pairs), data))
    cfg = load_config(path)
    for key, value in pairs.items():
        assert read_back(cfg, key) == as_written(key, value, folder), (key, path.read_text())
    with monkeypatch.context() as m:
        m.chdir(tmp_path_factory.mktemp("elsewhere"))
        assert load_config(path) == cfg == load_config(path)


# mistakes, each refused naming its own path: (value as YAML text, what it is)
WRONG_FOR_NUMBER = st.sampled_from(["true", "on", "'12'", "1:30", "1e3x", "[1]", "{a: 1}", "2026-01-01", ".nan", ".inf",
                                    "-.inf", "null", "abc"])
WRONG_FOR_TEXT = st.sampled_from(["true", "no", "12", "1.5", "[a]", "{a: 1}", "2026-01-01", "null"])
NUMBER_KEYS = sorted(k for k, kind in leaves(Config).items() if kind in (int, float) and k in VALID)
TEXT_KEYS = sorted(k for k, kind in leaves(Config).items() if kind is str and k in VALID)
OUT_OF_RANGE = {"forecast.horizon": ["0", "-1", "337", "10000000000000000000000"], "backtest.folds": ["0", "366"],
                "backtest.step": ["0", "-24"], "simulate.gpus": ["0", "1000001"], "simulate.days": ["0", "-1", "1e9"],
                "simulate.world.seed": ["-1"], "simulate.world.preemption_seconds": ["[120, 30]", "[0, 1e6]", "[1]"],
                "forecast.quantiles": ["[]", "[0.9, 0.5]", "[0.5, 0.5]", "[0, 0.5]", "[0.5, 1]", "[1e3]"],
                "run.lease.duration_seconds": ["1", "2147483648"], "tune.margins_gpus": ["[-1]"],
                "run.metrics_port": ["65536"],
                "history.outlier_factor": ["1", "0.5"], "training.drift_factor": ["1"], "run.horizon_hours": ["1"]}


@st.composite
def mistakes(draw):
    """{path: YAML text} of 1-4 mistakes at distinct keys, and where an unknown key goes."""
    kinds = draw(st.lists(st.sampled_from(["number", "text", "range", "unknown"]), min_size=1, max_size=4))
    out: dict[str, str] = {}
    for kind in kinds:
        if kind == "number":
            out[draw(st.sampled_from(NUMBER_KEYS))] = draw(WRONG_FOR_NUMBER)
        elif kind == "text":
            out[draw(st.sampled_from(TEXT_KEYS))] = draw(WRONG_FOR_TEXT)
        elif kind == "range":
            key = draw(st.sampled_from(sorted(OUT_OF_RANGE)))
            out[key] = draw(st.sampled_from(OUT_OF_RANGE[key]))
        else:
            where = draw(st.sampled_from(["", "forecast.", "simulate.", "simulate.world.", "run.lease.", "tune."]))
            out[where + draw(st.sampled_from(["horizn", "colour", "Horizon", "quantile", "x-y"]))] = "1"
    return out


@PROPERTY
@given(mistakes(), st.sets(st.sampled_from(sorted(VALID)), max_size=6), st.data())
def test_every_mistake_is_named_by_its_path_beside_valid_keys(tmp_path_factory, wrong, keys, data):
    pairs = {k: data.draw(VALID[k], label=k) for k in sorted(keys) if k not in wrong}
    tree = nest({**pairs, **{key: f"@@{key}@@" for key in wrong}})  # each mistake's text put in place below
    text = document(tree, data)
    for key, bad in wrong.items():
        text = text.replace(json.dumps(f"@@{key}@@"), bad)
    path = tmp_path_factory.mktemp("cfg") / "headroom.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    named = {line.split(": ")[0] for line in err.value.errors}
    for key in wrong:  # the key itself, one of its fields or one of its items (forecast.quantiles[1])
        assert any(n == key or n.startswith((key + ".", key + "[")) for n in named), (key, err.value.errors, text)
    assert all(line.split(": ")[0].split(".")[0] in {*Config.model_fields, *(k.split(".")[0] for k in wrong)}
               for line in err.value.errors), err.value.errors


def spec_leaves(model: type[BaseModel] = PolicySpec, prefix: str = "") -> list[str]:
    """Every key of a ReservationPolicy's spec that holds a value, by its dotted path in the names a manifest uses."""
    out = []
    for name, field in model.model_fields.items():
        key = field.alias or name
        section = next((k for k in (field.annotation, *get_args(field.annotation))
                        if isinstance(k, type) and issubclass(k, BaseModel)), None)
        out += spec_leaves(section, f"{prefix}{key}.") if section is not None else [f"{prefix}{key}"]
    return out


@st.composite
def misspelt(draw, keys: list[str]):
    """(the path with one of its keys misspelt, up to that key; the key as it should be): a character left out."""
    parts = draw(st.sampled_from(keys)).split(".")
    at = draw(st.integers(0, len(parts) - 1))
    right = parts[at]
    cut = draw(st.integers(0, len(right) - 1))
    return ".".join([*parts[:at], right[:cut] + right[cut + 1:]]), right


def typo_named(errors: list[str], typo: str, right: str) -> bool:
    return f"{typo}: not a field: did you mean {right}?" in errors


@PROPERTY
@given(misspelt(sorted(leaves(Config))))
def test_a_misspelt_configuration_key_is_named_with_the_key_it_misspells(tmp_path_factory, typo_and_right):
    """pydantic's own words for a key a section lacks, 'Extra inputs are not permitted', said neither that it was no
    key of headroom's nor which one was meant: a section's or a key's name with a letter left out now says which."""
    typo, right = typo_and_right
    path = tmp_path_factory.mktemp("cfg") / "headroom.yaml"
    path.write_text(yaml.safe_dump(nest({typo: 1})))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert typo_named(err.value.errors, typo, right), err.value.errors


@PROPERTY
@given(misspelt(spec_leaves()))
def test_a_misspelt_policy_field_is_named_with_the_field_it_misspells(tmp_path_factory, typo_and_right):
    """The same in a ReservationPolicy manifest (simulate's and run's --policy-file) and in a configuration's
    run.policies[].spec, at any depth of the spec (spec.capacity.demandPerGpu)."""
    typo, right = typo_and_right
    spec = {"capacity": {"demandPerGpu": 10}, "target": {"kind": "Deployment", "name": "chat"},
            "trainingClusterQueues": ["training"]}
    folder = tmp_path_factory.mktemp("policy")
    manifest = folder / "policy.yaml"
    manifest.write_text(yaml.safe_dump({"apiVersion": "headroom.dev/v1alpha1", "kind": "ReservationPolicy",
                                        "metadata": {"name": "chat"}, "spec": nest({**nest_pairs(spec), typo: 1})}))
    with pytest.raises(ConfigError) as err:
        load_manifests(manifest)
    assert typo_named(err.value.errors, f"spec.{typo}", right), err.value.errors
    (folder / "d.csv").write_text("timestamp,value\n")
    config = folder / "headroom.yaml"
    config.write_text(yaml.safe_dump({"run": {"policies": [{"name": "chat", "history_file": "d.csv", "spec": nest(
        {**nest_pairs(spec), typo: 1})}]}}))
    with pytest.raises(ConfigError) as err:
        load_config(config)
    assert typo_named(err.value.errors, f"run.policies[0].spec.{typo}", right), err.value.errors


def nest_pairs(tree: dict, prefix: str = "") -> dict[str, object]:
    """A nested mapping as {dotted path: value}, the inverse of nest."""
    out: dict[str, object] = {}
    for key, value in tree.items():
        out |= nest_pairs(value, f"{prefix}{key}.") if isinstance(value, dict) else {f"{prefix}{key}": value}
    return out


# ---------------------------------------------------------------------------- flags and the file
# (command, flag, field, values a user may type): argparse reads the text, the file the same number or text
FLAGS = [
    ("forecast", "--horizon", "forecast.horizon", st.integers(-5, 400) | st.integers()),
    ("forecast", "--quantiles", "forecast.quantiles",
     st.lists(st.floats(-1, 2) | st.sampled_from([0.5, 0.9, math.nan, math.inf]), min_size=1, max_size=4)),
    ("forecast", "--statistic", "history.statistic", st.sampled_from(["mean", "p95", "p0", "p101", "pnan", "median",
                                                                      "", "on", "1e3"])),
    ("forecast", "--timezone", "forecast.timezone", st.sampled_from(["UTC", "Europe/Berlin", "Mars/Olympus",
                                                                     "localtime", "", "utc", "2026-01-01"])),
    ("backtest", "--horizon", "backtest.horizon", st.integers(-1, 400)),
    ("backtest", "--folds", "backtest.folds", st.integers(-2, 400)),
    ("backtest", "--step", "backtest.step", st.integers(-2, 50) | st.integers(10**12, 10**30)),
    ("simulate", "--gpus", "simulate.gpus", st.integers(-1, 2 * 10**6)),
    ("simulate", "--days", "simulate.days", st.floats(-1, 4000) | st.sampled_from([math.nan, math.inf, 1e-300])),
    ("simulate", "--peak-gpus", "simulate.peak_gpus", st.floats(-1, 1e9) | st.sampled_from([math.nan, -math.inf])),
    ("simulate", "--per-gpu", "simulate.per_gpu", st.floats(-1, 1e9) | st.sampled_from([0.0, math.inf])),
    ("tune", "--max-shortage", "tune.max_shortage", st.floats(-0.5, 1.5) | st.sampled_from([math.nan])),
    ("report", "--max-short-steps", "tune.max_short_steps", st.floats(-0.5, 1.5)),
    ("train", "--name", "training.name", st.sampled_from(["chat", "a b", "", "-x", "x" * 101, "on"])),
    ("train", "--tracking-uri", "training.tracking_uri", st.sampled_from(["sqlite:///m.db", "", "http://x:5000"])),
    ("run", "--gpus", "run.capacity_gpus", st.integers(-1, 2 * 10**6)),
    ("run", "--metrics-port", "run.metrics_port", st.integers(-1, 70000)),
]


def flag_text(value) -> str:
    return ",".join(map(repr, value)) if isinstance(value, list) else repr(value) if isinstance(value, float) \
        else str(value)


def yaml_text(value) -> str:
    if isinstance(value, float):
        return {math.inf: ".inf", -math.inf: "-.inf"}.get(value, ".nan" if math.isnan(value) else repr(value))
    if isinstance(value, list):
        return "[" + ", ".join(map(yaml_text, value)) + "]"
    return json.dumps(value) if isinstance(value, str) else str(value)


def parsed(argv, monkeypatch, capsys):
    """main's exit status, the configuration the command would have run with (the command itself not run), and the
    error lines (the source's header and the flag's note left off)."""
    seen = {}

    def command(cfg, args):
        seen["cfg"] = cfg
        return 0

    for name in ("cmd_forecast", "cmd_backtest", "cmd_simulate", "cmd_tune", "cmd_train"):
        monkeypatch.setattr(cli.main, name, command)
    monkeypatch.setattr(cli.run, "cmd_run", command)
    monkeypatch.setattr(cli.report, "cmd_report", command)
    try:
        status = main([str(a) for a in argv])
    except SystemExit as exc:  # argparse's own refusal, naming the flag
        status = exc.code
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line.strip().split(" (given on the command line")[0] for line in err.splitlines()[1:]]
    return status, seen.get("cfg"), lines, err


def positional(command: str) -> list[str]:
    return ["--history", "h.csv"] if command == "train" else [] if command == "run" else ["h.csv"]


@PROPERTY
@pytest.mark.parametrize("command, flag, field, values", FLAGS, ids=[f"{c} {f}" for c, f, _, _ in FLAGS])
@given(data=st.data())
def test_a_flag_reads_a_value_as_the_file_does_and_wins_beside_it(tmp_path_factory, monkeypatch, capsys, command,
                                                                  flag, field, values, data):
    value = data.draw(values, label="value")
    folder = tmp_path_factory.mktemp("cfg")
    section, key = field.split(".")
    in_file = folder / "in_file.yaml"
    in_file.write_text(f"{section}:\n  {key}: {yaml_text(value)}\n")
    empty = folder / "empty.yaml"
    empty.write_text(f"{section}:\n")
    given_flag = f"{flag}={flag_text(value)}"
    by_file = parsed([command, *positional(command), "--config", in_file], monkeypatch, capsys)
    by_flag = parsed([command, *positional(command), "--config", empty, given_flag], monkeypatch, capsys)
    if f"error: argument {flag}" in by_flag[3]:
        assert by_flag[0] == 2
        return  # argparse refused the text itself (an int flag given 1e3), naming the flag
    assert by_file[0] == by_flag[0], (by_file, by_flag)
    assert by_file[2] == by_flag[2]  # the same error text, whichever way the value came
    # and the flag's error names the flag the user typed, not only the field it sets (--help had to be read for it)
    said = [line.strip() for line in by_flag[3].splitlines() if line.strip().startswith((field + ":", field + "["))]
    assert all(line.endswith(FLAGGED.format(flag)) for line in said), by_flag[3]
    if by_file[0] == 0:
        assert read_back(by_file[1], field) == read_back(by_flag[1], field) == value
        # beside another value of the same key in the file, the flag's wins
        other = folder / "other.yaml"
        other.write_text(f"{section}:\n  {key}: {yaml_text(data.draw(values, label='other'))}\n")
        status, cfg, _, err = parsed([command, *positional(command), "--config", other, given_flag], monkeypatch,
                                     capsys)
        assert status == 0 and read_back(cfg, field) == value, err


YAML_TOKENS = st.sampled_from(["forecast", "run", "history", "simulate", "world", "policies", "horizon", "file", ":",
                               ": ", "\n", "  ", "- ", "[", "]", "{", "}", ",", "'", '"', "~", "~x/", "!!int ",
                               "!!float ", "!!timestamp ", "!!binary ", "!!set ", "&a ", "*a", "<<: ", "? ", "#", "010",
                               "0o7", "1e3", "1:30", "2026-02-30", "2026-01-01T00:00:00Z", ".nan", "-.inf", "yes",
                               "null", "\t", "\ufeff", "\x00", "é", "9" * 5000])


@PROPERTY
@given(st.lists(YAML_TOKENS | st.text(max_size=3), max_size=40).map("".join))
def test_any_text_is_a_configuration_or_an_error_naming_what_is_wrong(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("cfg") / "headroom.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        load_config(path)
    except ConfigError as exc:
        assert exc.errors and all(line.strip() for line in exc.errors)


@given(st.integers(0, 10**12) | st.sampled_from([0, 600, 5400, 86400, 90061]).map(lambda s: s * 1000))
def test_a_duration_is_said_as_the_configuration_reads_one(millis):
    """Durations were said as pandas prints them ("samples at step 0 days 00:10:00"): each is said as a person and
    Prometheus write one, largest unit first (10m, 1h30m), and the configuration reads it back exactly."""
    import re

    import pandas as pd

    from core.units import duration, go_duration

    for value in (millis / 1000, pd.Timedelta(milliseconds=millis)):
        text = go_duration(value)
        assert re.fullmatch(r"(\d+(d|h|ms|m|s))+", text), text
        assert duration(text) == pd.Timedelta(milliseconds=millis)
    assert go_duration(600) == "10m" and go_duration(5400) == "1h30m" and go_duration(0) == "0s"
