"""YAML read as a configuration or a manifest: every document, and no key given twice."""
from __future__ import annotations

import re
from typing import Any

import yaml


class RepeatedKeys(ValueError):
    """Keys given twice in one mapping; `errors` lists 'field.path: message' lines."""

    def __init__(self, errors: list[str]):
        self.errors = errors
        super().__init__("\n".join(errors))


class KubectlLoader(yaml.SafeLoader):
    """A Kubernetes manifest's plain scalars typed as kubectl types them (Go's YAML library), not as PyYAML's YAML
    1.1: 1e3 and 5e-1 numbers, y and n booleans, 0o17 an integer, 1:30 and 2026-05-04 strings. A manifest simulate
    runs is then the object `kubectl apply` sends, and one kubectl refuses (a target named y) simulate refuses too."""

    bool_values = {**yaml.SafeLoader.bool_values, "y": True, "n": False}


_GO_TYPED = {"tag:yaml.org,2002:bool", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float",
             "tag:yaml.org,2002:timestamp", "tag:yaml.org,2002:value"}
KubectlLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in _GO_TYPED]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
for _tag, _pattern, _first in (  # gopkg.in/yaml.v2's resolve.go, underscores allowed in numbers as it allows them
        ("bool", r"y|Y|yes|Yes|YES|n|N|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF", "yYnNtTfFoO"),
        ("int", r"[-+]?(0b[01_]+|0o[0-7_]+|0x[0-9a-fA-F_]+|0[0-7_]*|[1-9][0-9_]*)", "-+0123456789"),
        ("float", r"[-+]?(\.[0-9_]+|[0-9][0-9_]*(\.[0-9_]*)?)([eE][-+]?[0-9]+)?|[-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN)",
         "-+.0123456789")):
    KubectlLoader.add_implicit_resolver(f"tag:yaml.org,2002:{_tag}", re.compile(f"^({_pattern})$"), list(_first))


def documents(text: str, loader: type[yaml.SafeLoader] = yaml.SafeLoader) -> list[Any]:
    """Every document in `text` (safe: plain data only, nothing runs). A key given twice in one mapping is an
    error naming its path and lines: YAML libraries keep the last value silently (PyYAML does), so a setting
    would run with a value nobody may have meant, where `kubectl apply` refuses such a manifest. `loader`:
    KubectlLoader for a Kubernetes manifest."""
    reader = loader(text)
    try:
        nodes: list[yaml.Node] = []
        while reader.check_node():
            nodes.append(reader.get_node())  # type: ignore[arg-type]  # not None after check_node
        repeated = [f"document {i + 1}: {line}" if len(nodes) > 1 else line
                    for i, node in enumerate(nodes) for line in _repeated_keys(node, "", set())]
        if repeated:
            raise RepeatedKeys(repeated)
        return [reader.construct_document(node) for node in nodes]
    finally:
        reader.dispose()


def _repeated_keys(node: yaml.Node, path: str, seen: set[int]) -> list[str]:
    if id(node) in seen:  # an alias: its node was checked where it was defined
        return []
    seen.add(id(node))
    out: list[str] = []
    if isinstance(node, yaml.MappingNode):
        first_line: dict[tuple[str, Any], int] = {}
        for key, value in node.value:
            if key.tag == "tag:yaml.org,2002:merge":  # `<<: *defaults`: keys written beside it override, by design
                out += _repeated_keys(value, path, seen)
                continue
            name = key.value if isinstance(key, yaml.ScalarNode) else f"(key at line {key.start_mark.line + 1})"
            here, line = f"{path}.{name}" if path else str(name), key.start_mark.line + 1
            if (key.tag, name) in first_line:
                out.append(f"{here}: given twice (lines {first_line[key.tag, name]} and {line}); give it once")
            else:
                first_line[key.tag, name] = line
            out += _repeated_keys(value, here, seen)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            out += _repeated_keys(item, f"{path}.{i}" if path else str(i), seen)
    return out
