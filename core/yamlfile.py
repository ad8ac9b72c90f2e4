"""YAML read as a configuration or a manifest: every document, and no key given twice."""
from __future__ import annotations

from typing import Any

import yaml


class RepeatedKeys(ValueError):
    """Keys given twice in one mapping; `errors` lists 'field.path: message' lines."""

    def __init__(self, errors: list[str]):
        self.errors = errors
        super().__init__("\n".join(errors))


def documents(text: str) -> list[Any]:
    """Every document in `text` (safe: plain data only, nothing runs). A key given twice in one mapping is an
    error naming its path and lines: YAML libraries keep the last value silently (PyYAML does), so a setting
    would run with a value nobody may have meant, where `kubectl apply` refuses such a manifest."""
    loader = yaml.SafeLoader(text)
    try:
        nodes: list[yaml.Node] = []
        while loader.check_node():
            nodes.append(loader.get_node())  # type: ignore[arg-type]  # not None after check_node
        repeated = [f"document {i + 1}: {line}" if len(nodes) > 1 else line
                    for i, node in enumerate(nodes) for line in _repeated_keys(node, "", set())]
        if repeated:
            raise RepeatedKeys(repeated)
        return [loader.construct_document(node) for node in nodes]
    finally:
        loader.dispose()


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
