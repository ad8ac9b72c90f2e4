"""docs/configuration.md lists every key of core.settings.Config with its default, and no key that does not exist:
a key added, renamed or given a new default without the reference fails here."""
from __future__ import annotations

import re
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from core.policy import PolicySpec
from core.settings import Config

REFERENCE = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"


def shown(value: Any) -> str:
    """A default as the reference writes it: YAML's flow style, numbers as %g."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int | float):
        return f"{value:g}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(shown(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {shown(v)}" for k, v in value.items()) + "}"
    return str(value)


def settings_keys(model: type[BaseModel], prefix: str = "") -> dict[str, str]:
    """Every leaf key of `model` (a list of sections as `key[].field`; a policy's spec is one key) -> its default."""
    keys = {}
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        annotation = field.annotation
        inner = [a for a in typing.get_args(annotation) if a is not type(None)] or [annotation]
        section = next((a for a in inner if isinstance(a, type) and issubclass(a, BaseModel)), None)
        if section is not None and section is not PolicySpec:
            list_of = typing.get_origin(annotation) is list
            keys.update(settings_keys(section, f"{key}[]." if list_of else f"{key}."))
        else:
            keys[key] = "required" if field.is_required() else shown(field.get_default(call_default_factory=True))
    return keys


def reference_keys(markdown: str) -> dict[str, str]:
    return dict(re.findall(r"^\| `([a-z_.\[\]]+)` \| `([^`]*)` \|", markdown, flags=re.M))


def test_the_reference_lists_every_key_with_its_default():
    documented = reference_keys(REFERENCE.read_text(encoding="utf-8"))
    actual = settings_keys(Config)
    assert sorted(set(actual) - set(documented)) == [], "keys missing from docs/configuration.md"
    assert sorted(set(documented) - set(actual)) == [], "keys in docs/configuration.md that do not exist"
    assert {k: v for k, v in documented.items() if actual[k] != v} == {}, "defaults that differ from core/settings.py"


def test_a_key_left_out_or_a_default_changed_is_seen():
    markdown = REFERENCE.read_text(encoding="utf-8")
    documented = reference_keys(markdown)
    assert documented["run.interval_seconds"] == "60" and documented["tune.warm_buffer_quantiles"] == "[null]"
    altered = reference_keys(markdown.replace("| `run.metrics_address` |", "| run.metrics_address |")
                             .replace("| `backtest.folds` | `7` |", "| `backtest.folds` | `5` |"))
    actual = settings_keys(Config)
    assert set(actual) - set(altered) == {"run.metrics_address"}
    assert altered["backtest.folds"] != actual["backtest.folds"]
