"""YAML read as a configuration or a manifest: every document, and no key given twice."""
from __future__ import annotations

import re
from typing import Any

import yaml

from core.errors import field_path


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
_GO_DOT_FLOAT = re.compile(r"\.[0-9]+(_[0-9]+)*([eE][-+]?[0-9]+(_[0-9]+)*)?")
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
    if _GO_INF_NAN.fullmatch(text):  # its table of words, looked up as written
        return "tag:yaml.org,2002:float"
    if not text or text[0] not in "+-.0123456789":
        return None
    # from a dot Go's ParseFloat reads the scalar as written, an underscore only between digits (.0_1 is 0.01, .5_ a
    # string); from a digit or a sign, yaml.v2 removes every underscore first
    if text[0] == "." and not _GO_DOT_FLOAT.fullmatch(text):
        return None
    plain = text.replace("_", "")
    # int64, or uint64 unsigned (at most 67 characters, 0b and 64 binary digits: longer, int() may refuse the text)
    if _GO_INT.fullmatch(plain) and len(plain) <= 67 and -2**63 <= _go_int(plain) < 2**64:
        return "tag:yaml.org,2002:int"
    if _GO_FLOAT.fullmatch(plain) and abs(float(plain)) != float("inf"):
        return "tag:yaml.org,2002:float"
    return None


def _go_key(key: Any) -> Any:
    """A mapping key as sigs.k8s.io/yaml (kubectl) turns it into a JSON object's key: a boolean its word, an integer
    its digits, a float Go's strconv.FormatFloat(key, 'g', -1, 32) (the shortest float32 digits; an exponent from
    below -4 or from 6 up written as e+07); anything else as it is."""
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, int):
        return str(key)
    if not isinstance(key, float):
        return key
    import numpy as np

    with np.errstate(over="ignore"):
        single = np.float32(key)  # 1e100 is +Inf as a float32: ".inf", as Go writes it
    if single != single or np.isinf(single):
        return {"nan": ".nan", "inf": ".inf", "-inf": "-.inf"}[str(float(single))]
    mantissa, exponent = np.format_float_scientific(single, unique=True, trim="-").split("e")
    sign, mantissa = ("-", mantissa[1:]) if mantissa.startswith("-") else ("", mantissa)
    digits, power = mantissa.replace(".", ""), int(exponent)
    if power < -4 or power >= 6:
        return f"{sign}{digits[0]}{'.' + digits[1:] if len(digits) > 1 else ''}e{'-' if power < 0 else '+'}" \
               f"{abs(power):02d}"
    point = power + 1  # digits before the decimal point
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return f"{sign}{digits}{'0' * (point - len(digits))}"
    return f"{sign}{digits[:point]}.{digits[point:]}"


class ScalarsChecked(yaml.SafeLoader):
    """A scalar that cannot be what its tag says (2026-02-30 typed a date, !!int abc, !!float with no value, !!bool
    maybe) is an error naming its line, where PyYAML's constructors raise ValueError, IndexError, KeyError or
    AttributeError: a traceback."""

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except (ValueError, IndexError, KeyError, AttributeError) as exc:
            tag = node.tag.removeprefix("tag:yaml.org,2002:")
            raise yaml.constructor.ConstructorError(None, None, f"{node.value!r} cannot be read as {tag} ({exc})",
                                                    node.start_mark) from None


class KubectlLoader(ScalarsChecked):
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

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        """A key Go types as a number or a boolean is the string kubectl makes of it (09: "9", yes: "true"), made
        as it is read (0 and n are two keys, "0" and "false", where a dict holds 0 and False as one); a null key,
        or one Go reads as a uint64, kubectl refuses."""
        self.flatten_mapping(node)  # merge keys (<<), as SafeConstructor does
        mapping: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key is None or (type(key) is int and key >= 2**63):  # Go's uint64
                raise yaml.constructor.ConstructorError(None, None, "a null key, or an integer key past int64: "
                                                                    "kubectl refuses it", key_node.start_mark)
            if isinstance(key, (list, dict)):
                raise yaml.constructor.ConstructorError(None, None, "a key that is a list or a mapping",
                                                        key_node.start_mark)
            mapping[_go_key(key)] = self.construct_object(value_node, deep=deep)
        return mapping


_GO_TYPED = {"tag:yaml.org,2002:bool", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float",
             "tag:yaml.org,2002:timestamp", "tag:yaml.org,2002:value"}
# PyYAML's own typing of these (1:30 an integer, 2026-05-04 a date, 1e3 a string) is not kubectl's: _go_type says
KubectlLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in _GO_TYPED]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
KubectlLoader.add_constructor("tag:yaml.org,2002:int", KubectlLoader.construct_yaml_int)


class ConfigLoader(ScalarsChecked):
    """A configuration's plain scalars as PyYAML types them, but numbers as YAML 1.2 and kubectl write them: YAML 1.1
    read `days: 1:30` as 90 (base 60), a value other than the one written, and `1e3` as text. Here 0o17 is 15, 1e3 is
    1000.0 and 1:30 the text "1:30" (refused where a number is meant); 010, octal 8 to YAML 1.1 and kubectl and ten to
    YAML 1.2, is refused naming its line, never read as either."""

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        text = str(self.construct_scalar(node)).replace("_", "")
        sign, digits = (-1, text[1:]) if text[0] == "-" else (1, text.removeprefix("+"))
        if digits[:2] in ("0b", "0o", "0x"):
            return sign * int(digits, 0)
        if len(digits) > 1 and digits[0] == "0":
            raise yaml.constructor.ConstructorError(
                None, None, f"{node.value}: a number with a leading zero is octal to kubectl and YAML 1.1, decimal "
                "to YAML 1.2: write it without the zero (0o17 for octal)", node.start_mark)
        if len(digits) > 4300:  # Python's limit for int(text): its ValueError was a traceback
            raise yaml.constructor.ConstructorError(None, None, f"a number of {len(digits)} digits", node.start_mark)
        return sign * int(digits)


_NUMBERS = {"tag:yaml.org,2002:int", "tag:yaml.org,2002:float"}
ConfigLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in _NUMBERS]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
ConfigLoader.add_implicit_resolver(
    "tag:yaml.org,2002:int",
    re.compile(r"^[-+]?(0b[01][01_]*|0o[0-7][0-7_]*|0x[0-9a-fA-F][0-9a-fA-F_]*|[0-9][0-9_]*)$"),
    list("-+0123456789"))
ConfigLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^([-+]?([0-9][0-9_]*\.[0-9_]*|\.[0-9][0-9_]*)([eE][-+]?[0-9]+)?"
                                          r"|[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+|[-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN))$"),
    list("-+.0123456789"))
ConfigLoader.add_constructor("tag:yaml.org,2002:int", ConfigLoader.construct_yaml_int)


def csv_read_as_yaml(document: Any) -> bool:
    """A CSV file read as YAML (a history given where a YAML file goes): one plain string of comma-separated lines."""
    return isinstance(document, str) and "," in document


def documents(text: str, loader: type[yaml.SafeLoader] = yaml.SafeLoader, name: str = "<text>") -> list[Any]:
    """Every document in `text` (safe: plain data only, nothing runs). A key given twice in one mapping is an
    error naming its path and lines: YAML libraries keep the last value silently (PyYAML does), so a setting
    would run with a value nobody may have meant, where `kubectl apply` refuses such a manifest. `loader`:
    KubectlLoader for a Kubernetes manifest. `name`: the file, as a syntax error names it with its line (PyYAML
    names text it was given "<unicode string>")."""
    try:
        reader = loader(text)  # checks the characters already: its error would name "<unicode string>"
    except yaml.reader.ReaderError as exc:
        exc.name = name
        raise
    reader.name = name
    try:
        nodes: list[yaml.Node] = []
        while reader.check_node():
            nodes.append(reader.get_node())  # type: ignore[arg-type]  # not None after check_node
        repeated = [f"document {i + 1}: {line}" if len(nodes) > 1 else line
                    for i, node in enumerate(nodes) for line in _repeated_keys(node, (), set())]
        if repeated:
            raise RepeatedKeys(repeated)
        return [reader.construct_document(node) for node in nodes]
    except RecursionError:  # PyYAML composes and constructs by recursion: [[[[...]]]] hundreds deep was a traceback
        raise yaml.YAMLError(f"{name}: lists or mappings nested too deep to read") from None
    finally:
        reader.dispose()


def _repeated_keys(node: yaml.Node, path: tuple[str | int, ...], seen: set[int]) -> list[str]:
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
            here, line = (*path, str(name)), key.start_mark.line + 1
            if (key.tag, name) in first_line:
                out.append(f"{field_path(here)}: given twice (lines {first_line[key.tag, name]} and {line}); give it "
                           "once")
            else:
                first_line[key.tag, name] = line
            out += _repeated_keys(value, here, seen)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            out += _repeated_keys(item, (*path, i), seen)
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
