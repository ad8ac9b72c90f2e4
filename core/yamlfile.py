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


_GO_BOOLS = {"y": True, "Y": True, "yes": True, "Yes": True, "YES": True, "true": True, "True": True, "TRUE": True,
             "on": True, "On": True, "ON": True, "n": False, "N": False, "no": False, "No": False, "NO": False,
             "false": False, "False": False, "FALSE": False, "off": False, "Off": False, "OFF": False}
# Go's strconv.ParseInt(s, 0, 64) and gopkg.in/yaml.v2's float form, on the scalar with its underscores removed
_GO_INT = re.compile(r"[-+]?(0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+|0[0-7]*|[1-9][0-9]*)")
_GO_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")
_GO_INF_NAN = re.compile(r"[-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN)")


def _go_int(text: str) -> int:
    plain = text.replace("_", "")
    sign, digits = (-1, plain[1:]) if plain[0] == "-" else (1, plain.removeprefix("+"))
    if len(digits) > 1 and digits[0] == "0" and digits[1].isdigit():  # 0777: Go's octal, which Python spells 0o777
        return sign * int(digits, 8)
    return sign * int(digits, 0)


def _go_type(text: str) -> str | None:
    """The YAML tag gopkg.in/yaml.v2 (kubectl's) gives a plain scalar, where it is not PyYAML's; None: a string or
    null, as PyYAML says."""
    if text in _GO_BOOLS:
        return "tag:yaml.org,2002:bool"
    plain = text.replace("_", "")
    if not text or text[0] not in "+-.0123456789":
        return None
    if _GO_INT.fullmatch(plain) and -2**63 <= _go_int(plain) < 2**64:  # int64, or uint64 unsigned
        return "tag:yaml.org,2002:int"
    if _GO_INF_NAN.fullmatch(plain) or (_GO_FLOAT.fullmatch(plain) and abs(float(plain)) != float("inf")):
        return "tag:yaml.org,2002:float"
    return None


class KubectlLoader(yaml.SafeLoader):
    """A Kubernetes manifest's plain scalars typed as kubectl types them (Go's YAML library), not as PyYAML's YAML
    1.1: 1e3 and 5e-1 numbers, y and n booleans, 0o17 and 0X1F integers, 1:30 and 2026-05-04 strings. A manifest
    simulate runs is then the object `kubectl apply` sends, and one kubectl refuses (a target named y) simulate
    refuses too."""

    bool_values = {k.lower(): v for k, v in _GO_BOOLS.items()}

    def resolve(self, kind: type[yaml.Node], value: str | None, implicit: tuple[bool, bool]) -> str:
        go_tag = _go_type(value) if kind is yaml.ScalarNode and implicit[0] and value is not None else None
        tag: str = go_tag or super().resolve(kind, value, implicit)  # type: ignore[no-untyped-call]
        return tag

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        return _go_int(str(self.construct_scalar(node)))


_GO_TYPED = {"tag:yaml.org,2002:bool", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float",
             "tag:yaml.org,2002:timestamp", "tag:yaml.org,2002:value"}
# PyYAML's own typing of these (1:30 an integer, 2026-05-04 a date, 1e3 a string) is not kubectl's: _go_type says
KubectlLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in _GO_TYPED]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
KubectlLoader.add_constructor("tag:yaml.org,2002:int", KubectlLoader.construct_yaml_int)


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


class KubectlDumper(yaml.SafeDumper):
    """Writes a manifest kubectl reads back as written: a string kubectl would type otherwise (y, 1e3, 0o17: Go's
    YAML, see KubectlLoader) is quoted, where PyYAML quotes only what its own YAML 1.1 would."""

    def represent_str(self, data: str) -> yaml.ScalarNode:
        if _go_type(data) is not None:
            return self.represent_scalar("tag:yaml.org,2002:str", data, style='"')
        return super().represent_str(data)


KubectlDumper.add_representer(str, KubectlDumper.represent_str)


def manifest_text(obj: Any) -> str:
    """`obj` as a YAML manifest that kubectl and KubectlLoader read back equal to `obj`, its keys in their order."""
    return yaml.dump(obj, Dumper=KubectlDumper, sort_keys=False)
