"""Reading the configuration: the YAML file and the command-line flags, validated once into core.settings.Config.

The CLI is the only reader of configuration; everything below it receives typed values."""
from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Annotated, Any, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from core.errors import ConfigError
from core.policy import field_errors
from core.settings import Config, home_expanded
from core.textfile import TooLong, read_text
from core.yamlfile import ConfigLoader, RepeatedKeys, csv_read_as_yaml
from core.yamlfile import documents as yaml_documents

# a flag giving one of two settings that exclude each other replaces whichever the file gives: the trace's scale, and
# the history's source (a HISTORY file argument beside history.prometheus)
EITHER = {"simulate.peak_gpus": "simulate.per_gpu", "simulate.per_gpu": "simulate.peak_gpus",
          "history.file": "history.prometheus"}


def _set(tree: dict, dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    for key in parents:
        node = tree.get(key, {})
        if not isinstance(node, dict):  # the file's section is no mapping: its error is listed, not replaced
            return
        tree[key] = node = dict(node)
        tree = node
    tree[leaf] = value


def _paths_relative_to(tree: Any, model: Any, base: Path) -> None:
    """Relative paths written in a configuration file name files beside it, wherever headroom is run from."""
    if not isinstance(tree, dict) or not (isinstance(model, type) and issubclass(model, BaseModel)):
        return
    for name, field in model.model_fields.items():
        value, kind = tree.get(name), field.annotation
        inner = [a for a in get_args(kind) if a is not type(None)] or [kind]
        inner = [get_args(a)[0] if get_origin(a) is Annotated else a for a in inner]  # core.settings.FilePath
        if get_origin(kind) is list:
            for element in value if isinstance(value, list) else []:
                _paths_relative_to(element, inner[0], base)
        elif Path in inner and isinstance(value, str) and value and not value.startswith("~") and \
                not Path(value).is_absolute():  # ~ is a home directory: expanded as the field is validated
            tree[name] = str(base / value)
        elif isinstance(inner[0], type) and issubclass(inner[0], BaseModel):
            _paths_relative_to(value, inner[0], base)


def _sections_defaulted(tree: dict, model: type[BaseModel]) -> dict:
    """A section written with every key commented out reads as null: it is empty, its defaults apply, at any depth
    (simulate.world, run.lease), and so for a list or mapping empty by default (run.policies, run.team_weights). A
    null where the field may be None (history.prometheus) says "none": kept."""
    out = dict(tree)
    for name, field in model.model_fields.items():
        section = field.annotation
        if name not in out:
            continue
        value = out[name]
        if isinstance(section, type) and issubclass(section, BaseModel):
            out[name] = {} if value is None else _sections_defaulted(value, section) if isinstance(value, dict) \
                else value
        elif value is None and field.default in ([], {}):
            out[name] = type(field.default)()
    return out


def flag_path(text: str) -> str:
    """A file flag that sets no configuration key (`--history`, `--timeline`, `--out`, ...): `~` and `~user` read as a
    configuration's paths are, since no shell expands `--timeline=~/t.csv`; an empty path is left to its flag's own
    error."""
    try:
        return str(home_expanded(Path(text))) if text else text
    except ValueError as exc:  # a ~user of no home directory
        raise argparse.ArgumentTypeError(str(exc)) from None


def config_source(path: str | Path | None) -> str:
    """What a configuration's errors name: its file, or the flags where none was given (the defaults are valid)."""
    return str(path) if path is not None else "command-line flags"


def load_config(path: str | Path | None = None, overrides: dict[str, Any] | None = None,
                flags: dict[str, str] | None = None) -> Config:
    """Parse YAML (if any), apply `{"section.key": value}` overrides, validate once. `flags` names the flag or
    argument that gave each override, for its error."""
    source = config_source(path)
    tree: Any = {}
    if path is not None:
        if source == "":  # `--config "$UNSET"`: not the working directory, and not the defaults either
            raise ConfigError("--config", ["an empty path: give the configuration file"])
        try:
            path = home_expanded(Path(path))  # --config=~/headroom.yaml: no shell expands it
            documents = yaml_documents(read_text(path), ConfigLoader, source)
        except TooLong as exc:
            raise ConfigError(source, [f"{exc}: not a headroom configuration"]) from None
        except OSError as exc:
            raise ConfigError(source, [f"cannot read file: {exc.strerror}"]) from None
        except RepeatedKeys as exc:
            raise ConfigError(source, exc.errors) from None
        except UnicodeDecodeError as exc:
            raise ConfigError(source, [f"not a UTF-8 text file (byte {exc.start}): a YAML file is expected"]) from None
        except yaml.YAMLError as exc:
            raise ConfigError(source, [f"not valid YAML: {exc}"]) from None
        except ValueError as exc:  # home_expanded: a ~user of no home directory
            raise ConfigError(source, [str(exc)]) from None
        if len(documents) > 1:
            raise ConfigError(source, [f"(top level): one YAML document expected, found {len(documents)}"])
        tree = (documents or [None])[0] or {}
        if not isinstance(tree, dict):
            csv = (" (a CSV, a history? --config takes the YAML configuration, e.g. examples/headroom.yaml; a history "
                   "is the command's HISTORY or DEMAND argument)") if csv_read_as_yaml(tree) else ""
            raise ConfigError(source, [f"(top level): must be a mapping of sections{csv}"])
        tree = _sections_defaulted(tree, Config)
        _paths_relative_to(tree, Config, path.parent)
    for dotted, value in (overrides or {}).items():
        if value is not None:
            _set(tree, dotted, value)
            if dotted in EITHER:  # the flag says which of the two applies: the file's other one is set aside
                section, key = EITHER[dotted].split(".")
                if isinstance(tree.get(section), dict):
                    tree[section].pop(key, None)
    try:
        config = Config.model_validate(tree)
    except ValidationError as exc:
        flagged = {tuple(dotted.split(".")[:2]): (flags or {}).get(dotted)
                   for dotted, value in (overrides or {}).items() if value is not None}
        errors = []
        for line in field_errors(exc, Config):
            # the section and key a flag sets: an item's error (forecast.quantiles[2]) is its list's flag's too
            field = tuple(re.split(r"[.\[]", line.split(":")[0])[:2])
            errors.append(_given_by_flag(line, flagged[field]) if field in flagged else line)
        raise ConfigError(source, errors + _unknown_candidates(tree)) from None
    if _unknown_candidates(tree):
        raise ConfigError(source, _unknown_candidates(tree))
    return config


def _given_by_flag(line: str, flag: str | None) -> str:
    """An error of a value a flag gave, said to be the flag's: the user typed the flag, not the field it sets."""
    return f"{line} (given on the command line as {flag})" if flag else \
        f"{line} (given on the command line: --help names each flag's field)"


def _unknown_candidates(tree: dict) -> list[str]:
    """training.candidates names forecast models, which core (below forecast) cannot list: checked here."""
    from forecast.models import MODELS

    training = tree.get("training")
    names = training.get("candidates") if isinstance(training, dict) else None
    unknown = [n for n in names if isinstance(n, str) and n not in {*MODELS, "auto"}] if isinstance(names, list) else []
    return [f"training.candidates: unknown model(s) {unknown}; known: auto, {', '.join(MODELS)}"] if unknown else []
