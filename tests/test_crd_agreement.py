"""The ReservationPolicy CRD and core.policy agree on every spec, asked of the real API server.

A file `headroom simulate --policy-file P` (and `tune --write-policy`) takes is one `kubectl apply -f P` takes
unchanged, and `headroom run` reads the object the API server stored exactly as simulate reads the file. Specs are
drawn from the CRD's own schema: valid values, and near-invalid ones (each bound and one past it, wrong types, nulls,
missing required fields, unknown fields, empty and repeated list items), created with `dryRun=All` (nothing stored).
Then the same file as kubectl reads it (Go's YAML typing of plain scalars), and the object's metadata.
"""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import pytest
import yaml
from annotated_types import Ge, Gt, Le, Lt, MaxLen, MinLen
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from controller.reconcile import identified, parse_policies
from core.errors import ClusterError, ConfigError
from core.objects import ObjectRef
from core.policy import (
    API_VERSION,
    DURATION_PATTERN,
    INT64_MAX,
    KIND,
    NAME_PATTERN,
    OBJECT_NAME_PATTERN,
    PolicySpec,
    load_manifests,
)
from core.units import STATISTIC_PATTERN, TIMEZONE_PATTERN
from core.yamlfile import KubectlLoader, documents, manifest_text
from tests.servers import unavailable
from tests.servers.fixtures import crd_documents

NS = "default"  # a dry run needs a namespace that exists
RP = f"/apis/headroom.dev/v1alpha1/namespaces/{NS}/reservationpolicies"

# core.policy's checks the CRD's OpenAPI schema cannot state (kube-apiserver 1.20 has no CEL): the API server takes
# such a spec, and the controller refuses it as InvalidSpec, naming the field
BEYOND_THE_SCHEMA = (
    "headroomQuantile must be at least targetQuantile",  # one field against another
    "maxGpus must be at least",
    "cannot also be a training ClusterQueue",
    "is longer than a day",  # a pattern could hold it, but no reader could
    "is not an IANA time zone",  # the time zone database
)
# the API server prunes an unknown field silently; kubectl's own validation refuses it (test_kubectl_... below), and
# so does core.policy
UNKNOWN_FIELD = "not a field"

# values by what a string field's pattern holds, valid ones first
DURATIONS = ["0s", "90s", "15m", "1h30m", "1.5h", "500ms", "24h", "90m", "1440m", "86400s", "1h1h", "1m1h",
             "0.0000000001s", "24h0.001s", "25h", "2562048h", "99999999999999999999h", "-1s", "+1s", "1d", "1w",
             "1us", "1µs", "1ns", ".5h", "1.h", "1H", "15", "", " 1h", "1h ", "1h 30m"]
STATISTICS = ["max", "mean", "sum", "p50", "p99.9", "p100", "p1", "p0", "p0.5", "p100.0", "p101", "p09", "P50",
              "p", "p 50", "p5_0", "p1e1", "median", ""]
TIMEZONES = ["UTC", "Europe/Berlin", "America/Argentina/Buenos_Aires", "Etc/GMT+5", "Europe/Berln", "localtime",
             "utc", "Factory", "Europe//Berlin", "/Europe/Berlin", "../etc/passwd", "Europe Berlin", ""]
# a Deployment's, an HPA's or a ClusterQueue's name (a DNS-1123 subdomain), and a namespace (a DNS-1123 label)
OBJECT_NAMES = ["chat", "team-b", "a", "gpu.queue-1", "0", "a" * 253, "Bad_Q", "a_b", "-a", "a-", ".a", "a.", "a..b",
                "a.-b", "A", "a b", "a/b", "ä", "a" * 254, ""]
NAMESPACES = ["default", "ml-team", "a", "0a", "a" * 63, "a.b", "A", "a_b", "-a", "a-", "a" * 64, ""]
BY_PATTERN = {DURATION_PATTERN: DURATIONS, STATISTIC_PATTERN: STATISTICS, TIMEZONE_PATTERN: TIMEZONES,
              OBJECT_NAME_PATTERN: OBJECT_NAMES, NAME_PATTERN: NAMESPACES}
VALID_COUNT = {DURATION_PATTERN: 7, STATISTIC_PATTERN: 6, TIMEZONE_PATTERN: 4,  # the valid ones at their head
               OBJECT_NAME_PATTERN: 5, NAME_PATTERN: 4}
WRONG_TYPES = [None, True, "1", 1, 0.5, [], {}]


# every disagreement found, each checked on every run: the spec's fields set so
FOUND = [
    {"statistic": None}, {"objective": None}, {"trainingClusterQueues": None},  # null: pruned, then defaulted
    {"minGpus": 1.0}, {"maxGpus": 2.0**53 - 1}, {"maxGpus": 2.0**53},  # a whole float: the integer it is
    {"maxGpus": 2**63}, {"capacity": {"demandPerGpu": 1, "gpusPerReplica": 1025}},
    {"target": {"kind": "Deployment", "name": "d", "namespace": 64 * "a"}},
    {"trainingClusterQueues": ["train-a", "train-a"]},
    {"scaleInDelay": "9300000000000ms"},  # past what pandas holds: longer than a day, said so
]


def spec_schema(crd_dir) -> dict:
    (crd,) = [d for d in crd_documents(crd_dir) if d["spec"]["names"]["kind"] == KIND]
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]


def valid(prop: dict, key: str) -> st.SearchStrategy:
    """A value the schema takes (core.policy's cross-field checks may still refuse it)."""
    kind = prop.get("type")
    if "enum" in prop:
        return st.sampled_from(prop["enum"])
    if kind == "integer":
        low = prop.get("minimum", 0)
        return st.integers(low, min(prop.get("maximum", low + 64), low + 64))
    if kind == "number":
        low, high = prop.get("minimum", 0), prop.get("maximum", 1000)
        return st.floats(low, high, exclude_min=prop.get("exclusiveMinimum", False),
                         exclude_max=prop.get("exclusiveMaximum", False))
    if kind == "string":
        if "pattern" in prop:
            return st.sampled_from(BY_PATTERN[prop["pattern"]][:VALID_COUNT[prop["pattern"]]])
        return st.sampled_from([f"{key.lower()}-a", f"{key.lower()}-b", "x"])
    if kind == "array":
        return st.lists(st.sampled_from(["train-a", "train-b", "train-c"]), unique=True, max_size=3)
    return objects(prop)


def near_invalid(prop: dict) -> st.SearchStrategy:
    """A value at or past the schema's edge for this field, or of another type."""
    kind = prop.get("type")
    values: list[Any] = list(WRONG_TYPES)
    more: list[st.SearchStrategy] = []
    bounds = [prop[b] for b in ("minimum", "maximum") if b in prop]
    if "enum" in prop:
        values += [v.upper() for v in prop["enum"]] + [v + " " for v in prop["enum"]] + [""]
    elif kind == "integer":
        ints = [b + d for b in bounds for d in (-1, 0, 1)] + [0, -1, 2**53, 2**53 + 1, 2**63 - 1, 2**63, 10**30]
        values += ints + [float(i) for i in ints] + [1.5, 1e30, -0.0]
    elif kind == "number":
        values += [b + d for b in bounds for d in (-1, -1e-9, 0, 1e-9, 1)] + [0, -1, 5e-324, 1e308, 10**30, 2**53 + 1]
        more.append(st.floats(allow_nan=False, allow_infinity=False))
    elif kind == "string":
        values += BY_PATTERN.get(prop.get("pattern"), [])
        values += ["", "a"] + [n * "a" for b in ("minLength", "maxLength") if b in prop for n in (prop[b], prop[b] + 1)]
        if "pattern" in prop:
            more.append(st.from_regex(prop["pattern"], fullmatch=True))
        more.append(st.text(st.characters(blacklist_categories=("Cs",)), max_size=6))
    elif kind == "array":
        values += [[], ["train-a", "train-a"], [""], [None], [1], ["train-a", "Bad_Q"], ["a" * 254], ["a" * 253],
                   [f"q{i}" for i in range(prop.get("maxItems", 64))],
                   [f"q{i}" for i in range(prop.get("maxItems", 64) + 1)]]
    return st.one_of(st.sampled_from(values), *more)


@st.composite
def objects(draw, schema: dict) -> dict:
    """An object of the schema: its required fields, and some of the others, with valid values."""
    out = {}
    for key, prop in schema.get("properties", {}).items():
        if key in schema.get("required", []) or draw(st.integers(0, 3)) == 0:
            out[key] = draw(valid(prop, key))
    return out


def schema_paths(schema: dict, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], dict]]:
    """Every field of the schema, nested objects' fields too."""
    out = []
    for key, prop in schema.get("properties", {}).items():
        out.append((prefix + (key,), prop))
        if prop.get("type") == "object":
            out += schema_paths(prop, prefix + (key,))
    return out


@st.composite
def specs(draw, schema: dict) -> dict:
    """A valid spec, then up to two of its fields set past the schema's edge, removed, or given an unknown brother."""
    spec = draw(objects(schema))
    fields = schema_paths(schema)
    for _ in range(draw(st.integers(0, 2))):
        path, prop = draw(st.sampled_from(fields))
        parent = spec
        for key in path[:-1]:
            parent = parent.setdefault(key, {})
            if not isinstance(parent, dict):
                break
        else:
            how = draw(st.sampled_from(["edge", "edge", "remove", "unknown"]))
            if how == "edge":
                parent[path[-1]] = draw(near_invalid(prop))
            elif how == "remove":
                parent.pop(path[-1], None)
            else:
                parent[path[-1] + "Typo"] = parent.get(path[-1], 1)
    return spec


def policy(name: str, spec: dict) -> dict:
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": name, "namespace": NS}, "spec": spec}


def read_as_simulate(tmp_path, body: dict) -> PolicySpec | list[str]:
    path = tmp_path / "policy.yaml"
    path.write_text(manifest_text(body))  # the file kubectl reads as `body` (PyYAML left a key 09 plain: Go's 9.0)
    return simulate_reads(path)


def where_the_server_takes(kube_admin, tmp_path, body: dict) -> PolicySpec | list[str] | None:
    """What simulate reads from `body`'s file where the API server takes `body` (a dry run); None where both refuse
    it (simulate running what the server refuses fails the test here)."""
    file = read_as_simulate(tmp_path, body)
    try:
        kube_admin.create(RP, body, dry_run=True)
    except ClusterError as exc:
        assert not isinstance(file, PolicySpec), f"simulate runs what the API server refuses: {exc}"
        return None
    return file


def simulate_reads(path) -> PolicySpec | list[str]:
    """The spec `headroom simulate --policy-file P` runs (cli/simulate.py), or its errors."""
    try:
        (obj,) = load_manifests(path)
    except ConfigError as exc:
        return exc.errors
    return PolicySpec.model_validate(obj["spec"])


def controller_reads(stored: dict, beside: dict) -> tuple[PolicySpec | None, str | None, bool]:
    """What the controller's reader makes of a stored object next to a valid one: its spec or its InvalidSpec
    message, and whether the valid one goes on."""
    valid_ones, invalid = parse_policies(identified([stored, beside]))
    ours = {p.ref: p.spec for p in valid_ones}
    ref, beside_ref = ObjectRef.of(stored), ObjectRef.of(beside)
    return ours.get(ref), invalid.get(ref), beside_ref in ours


@pytest.fixture(scope="module")
def beside(kube_admin) -> dict:
    """A valid policy on a target of its own, as the API server returns it."""
    body = policy("crd-agreement-beside", {"query": "q", "capacity": {"demandPerGpu": 1},
                                           "target": {"kind": "Deployment", "name": "beside"}})
    return kube_admin.create(RP, body, dry_run=True)


def test_the_api_server_and_core_policy_take_the_same_specs_and_read_them_alike(kube_admin, crd_dir, beside,
                                                                               tmp_path_factory):
    """(a) The API server takes a spec exactly when simulate does, but for an unknown field (pruned by the server,
    refused by kubectl and core.policy alike) and core.policy's checks beyond the schema, which the controller then
    reports as InvalidSpec naming the field while the other policies go on; (b) an accepted spec, as the API server
    stores it (defaults filled in), is the spec simulate reads from the file."""
    schema = spec_schema(crd_dir)
    tmp_path = tmp_path_factory.mktemp("crd-agreement")

    @settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(specs(schema))
    def agree(spec: dict) -> None:
        body = policy("crd-agreement", spec)
        file = read_as_simulate(tmp_path, body)
        try:
            stored = kube_admin.create(RP, body, dry_run=True)
        except ClusterError as exc:
            assert not isinstance(file, PolicySpec), f"simulate runs what the API server refuses: {exc}"
            return
        read, why, beside_goes_on = controller_reads(stored, beside)
        assert beside_goes_on
        if not isinstance(file, PolicySpec) and any(UNKNOWN_FIELD in e for e in file):
            # kubectl refuses the unknown field as simulate does; the server pruned it: the rest is compared
            assert all(UNKNOWN_FIELD in e for e in file if "Typo" in e)
            file = read_as_simulate(tmp_path, policy("crd-agreement", stored["spec"]))
        if isinstance(file, PolicySpec):
            assert read == file, (stored["spec"], why)  # (b)
            return
        assert all(any(b in e for b in BEYOND_THE_SCHEMA) for e in file), \
            f"the API server takes what core.policy refuses, and the CRD could say so: {file}"
        # the controller refuses the stored object with simulate's errors, each naming its field
        assert read is None and why is not None and all(e in why for e in file), (why, file)
        assert all(e.startswith("spec") for e in file)

    for found in FOUND:
        agree = example({"query": "q", "capacity": {"demandPerGpu": 1}, "target": {"kind": "Deployment", "name": "d"},
                         **found})(agree)
    agree()


# core.policy's constraint -> the CRD's keyword, and whether it is exclusive
CRD_BOUNDS = {Ge: ("minimum", False), Gt: ("minimum", True), Le: ("maximum", False), Lt: ("maximum", True)}


def bounds_otherwise(model: type[BaseModel], schema: dict, path: str) -> list[str]:
    """Where a core.policy field's bounds, lengths or choices are not its CRD field's."""
    wrong = []
    for name, f in model.model_fields.items():
        key = f.alias or name
        prop = schema["properties"][key]
        if isinstance(f.annotation, type) and issubclass(f.annotation, BaseModel):
            wrong += bounds_otherwise(f.annotation, prop, f"{path}.{key}")
            continue
        ours: dict[str, Any] = {}
        unit = "Items" if prop["type"] == "array" else "Length"
        for m in f.metadata:
            if isinstance(m, (Ge, Gt, Le, Lt)) and m != Le(INT64_MAX):  # int64's largest: the integer type's own
                keyword, exclusive = CRD_BOUNDS[type(m)]
                ours[keyword] = getattr(m, type(m).__name__.lower())
                if exclusive:
                    ours["exclusive" + keyword.capitalize()] = True
            elif isinstance(m, MinLen):
                ours["min" + unit] = m.min_length
            elif isinstance(m, MaxLen):
                ours["max" + unit] = m.max_length
        if get_origin(f.annotation) is Literal:
            ours["enum"] = list(get_args(f.annotation))
        theirs = {k: prop[k] for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength",
                                       "maxLength", "minItems", "maxItems", "enum") if k in prop}
        if ours != theirs:
            wrong.append(f"{path}.{key}: core.policy {ours}, the CRD {theirs}")
    return wrong


def test_the_crd_bounds_each_field_as_core_policy_does(crd_dir):
    """One definition of each field's bounds, lengths and choices: kubectl refuses up front what the controller would
    (the property above asks the server; this names the field whose bound went astray)."""
    assert bounds_otherwise(PolicySpec, spec_schema(crd_dir), "spec") == []


# --------------------------------------------------------------------------- the same YAML, read by kubectl
@pytest.mark.parametrize("line", [
    "minGpus: 1.0", "statistic:", "objective: null", "warmBuffer: .5", "warmBuffer: 1.", "marginGpus: +1",
    "capacity: {demandPerGpu: 1e3}", "capacity: {demandPerGpu: 1.5e3}", "capacity: {demandPerGpu: 2.5E-1}",
    "targetQuantile: 5e-1", "capacity: {demandPerGpu: 0x10}", "capacity: {demandPerGpu: .inf}",
    "target: {kind: Deployment, name: y}", "target: {kind: Deployment, name: 0o17}",
    "target: {kind: Deployment, name: 0b11}", "target: {kind: Deployment, name: 1_000}", "inferenceClusterQueue: n",
    "inferenceClusterQueue: off", "inferenceClusterQueue: ~", "query: 1:30", "query: '='", "leadTime: 1:30",
    "timezone: Etc/GMT+5", "mode: 'on'",
])
@pytest.mark.usefixtures("kube_admin")  # the CRD installed
def test_kubectl_and_simulate_read_a_policy_file_alike(kube_server, tmp_path, line):
    """`kubectl apply -f P` takes a file exactly when `simulate --policy-file P` does, and stores the spec simulate
    runs: kubectl reads YAML as Go's YAML library does (1e3 a number, y a boolean, 0o17 an integer), not as
    PyYAML's YAML 1.1."""
    kubectl = shutil.which("kubectl")
    if not kubectl:
        unavailable("kubectl not installed: run scripts/install-kubectl.sh")
    fields = {"query": "query: q", "capacity": "capacity: {demandPerGpu: 1}",
              "target": "target: {kind: Deployment, name: d}", line.split(":")[0]: line}
    path = tmp_path / "policy.yaml"
    path.write_text(f"apiVersion: {API_VERSION}\nkind: {KIND}\nmetadata: {{name: kubectl-agreement, namespace: {NS}}}\n"
                    "spec:\n" + "".join(f"  {f}\n" for f in fields.values()))
    ran = subprocess.run([kubectl, "--kubeconfig", str(kube_server.apiserver.kubeconfig(tmp_path / "kubeconfig")),
                          "apply", "--dry-run=server", "-o", "json", "-f", str(path)],
                         capture_output=True, text=True, timeout=60)
    file = simulate_reads(path)
    if ran.returncode != 0:
        assert not isinstance(file, PolicySpec), f"simulate runs what kubectl refuses: {ran.stderr}"
        return
    assert isinstance(file, PolicySpec), f"kubectl takes what simulate refuses: {file}"
    assert PolicySpec.model_validate(json.loads(ran.stdout)["spec"]) == file


def read_as(value: Any) -> tuple[str, Any]:
    """A scalar's kind and value, a whole number past int64 as the float kubectl sends it as."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return type(value).__name__, value
    return "number", float(value) if abs(value) > INT64_MAX else value


def kubectl_json(kubectl: str, kubeconfig, path) -> dict:
    """The object `kubectl create` sends for the file (a client-side dry run: nothing validated, nothing pruned)."""
    ran = subprocess.run([kubectl, "--kubeconfig", str(kubeconfig), "create", "--dry-run=client", "--validate=false",
                          "-o", "json", "-f", str(path)], capture_output=True, text=True, timeout=60, check=True)
    return json.loads(ran.stdout)


# scalars a YAML 1.1 reader and Go's may type apart: number-like ones built piece by piece, the words, and the rest
_DIGITS = st.text("0123456789_aF", max_size=4)
SCALAR = st.one_of(
    st.builds("".join, st.tuples(st.sampled_from(["", "+", "-"]),
                                 st.sampled_from(["", "0", "0b", "0o", "0x", "0X", "."]), _DIGITS,
                                 st.sampled_from(["", "."]), _DIGITS,
                                 st.sampled_from(["", "e3", "E-2", "e+1", "e", ":30", ":30:00"]))),
    st.sampled_from(["y", "Y", "n", "N", "yes", "No", "on", "OFF", "true", "False", "TRUE", "null", "~", ".inf",
                     "-.Inf", ".nan", "2026-05-04", "2026-05-04T09:00:00Z", "1e400", "99999999999999999999",
                     "18446744073709551615", "9223372036854775808", "-9223372036854775809", "0777", "08", "1.e3",
                     ".5_", ".0_1", "+.in_f", "1_0.5"]),
    st.text("0123456789+-._:eEobxXyYnNtrufalsOo~", min_size=1, max_size=7))


@pytest.fixture
def kubectl_on_the_server(kube_admin, kube_server, tmp_path_factory) -> tuple[str, Path, Path]:
    """(kubectl, a kubeconfig for the test API server, a folder): the CRD installed, since kubectl looks its kind up."""
    kubectl = shutil.which("kubectl")
    if not kubectl:
        unavailable("kubectl not installed: run scripts/install-kubectl.sh")
    folder = tmp_path_factory.mktemp("kubectl")
    return kubectl, kube_server.apiserver.kubeconfig(folder / "kubeconfig"), folder


def test_a_manifest_s_plain_scalars_are_typed_as_kubectl_types_them(kubectl_on_the_server):
    """Every plain scalar of a manifest (numbers, booleans, octal and binary integers, underscores, sexagesimal and
    date-like forms) reads as kubectl's YAML library reads it: of the same kind, and the same value."""
    kubectl, kubeconfig, tmp_path = kubectl_on_the_server

    @settings(max_examples=30, deadline=None)
    @given(st.lists(SCALAR, min_size=1, max_size=40))
    def alike(scalars: list[str]) -> None:
        text = (f"apiVersion: {API_VERSION}\nkind: {KIND}\nmetadata: {{name: scalars}}\nspec:\n  samples:\n"
                + "".join(f"  - {s}\n" for s in scalars))
        try:
            (ours,) = documents(text, KubectlLoader)
        except yaml.YAMLError:
            return  # not a plain scalar (e.g. "-" or ":"): kubectl has nothing to say about it either
        samples = ours["spec"]["samples"]
        if len(samples) != len(scalars) or any(isinstance(v, float) and v in (float("inf"), float("-inf"))
                                                or v != v for v in samples):
            return  # a scalar YAML read as structure, or a value JSON cannot carry
        path = tmp_path / "scalars.yaml"
        path.write_text(text)
        theirs = kubectl_json(kubectl, kubeconfig, path)["spec"]["samples"]
        # a whole number past int64 kubectl sends as a float (headroom's integer fields stop at int64: both refuse it)
        assert [read_as(v) for v in samples] == [read_as(v) for v in theirs], \
            list(zip(scalars, samples, theirs, strict=True))

    alike()


def test_a_manifest_s_keys_are_the_strings_kubectl_makes_of_them(kubectl_on_the_server):
    """A plain key Go types as a number or a boolean (a label 09, an annotation yes) is the string kubectl sends:
    simulate refused a label kubectl takes; a null key both refuse."""
    kubectl, kubeconfig, tmp_path = kubectl_on_the_server

    @settings(max_examples=30, deadline=None)
    @example(["09", "yes", "1e3", "0x1F", "1.5", "0.1", "1e7", "-0", "0777", "0.000012", "12345678.0", ".inf", "1:30",
              "1E100", "-1e-50"])
    @given(st.lists(SCALAR, min_size=1, max_size=20, unique=True))
    def alike(keys: list[str]) -> None:
        text = (f"apiVersion: {API_VERSION}\nkind: {KIND}\nmetadata: {{name: keys}}\nspec:\n  samples:\n"
                + "".join(f"    {k}: v\n" for k in keys))
        path = tmp_path / "keys.yaml"
        path.write_text(text)
        try:
            (ours,) = documents(text, KubectlLoader)
        except yaml.YAMLError:  # not a plain key, or a null one
            with pytest.raises(subprocess.CalledProcessError):
                kubectl_json(kubectl, kubeconfig, path)
            return
        theirs = kubectl_json(kubectl, kubeconfig, path)["spec"]["samples"]
        assert sorted(ours["spec"]["samples"]) == sorted(theirs), list(zip(keys, ours["spec"]["samples"]))

    alike()


@pytest.mark.parametrize("name", ["a", "a-b", 63 * "a", 64 * "a", 253 * "a", 254 * "a", "a.b", "A", "-a", "a_b"])
def test_a_policy_s_name_simulate_takes_is_one_the_api_server_takes(kube_admin, tmp_path, name):
    """metadata.name: simulate runs no manifest `kubectl apply` refuses, and takes every one it takes but a name
    with a dot: a policy's name is a DNS label to headroom, where the API server takes a subdomain."""
    body = policy(name, {"query": "q", "capacity": {"demandPerGpu": 1}, "target": {"kind": "Deployment", "name": "d"}})
    file = where_the_server_takes(kube_admin, tmp_path, body)
    assert file is None or isinstance(file, PolicySpec) or (
        "." in name and "is not a lowercase DNS label" in file[0]), file


@pytest.mark.parametrize("metadata", [
    {"labels": {"app": "chat"}}, {"labels": {"app": "b c"}}, {"labels": {"app": 5}}, {"labels": {"b c": "x"}},
    {"labels": {"app": 64 * "a"}}, {"labels": None}, {"labels": []}, {"annotations": {"note": "any text: at all"}},
    {"annotations": {"note": 5}}, {"annotations": {"b c": "x"}}, {"finalizers": ["example.com/keep"]},
    {"finalizers": ["b c"]}, {"generateName": "x-"}, {"uid": 5}, {"creationTimestamp": "yesterday"},
    {"resourceVersion": "1"}, {"ownerReferences": [{}]}, {"generation": "x"}, {"namespace": None},
    {"labels": {"app": None}}, {"annotations": {"note": None}}, {"uid": None}, {"generation": 1.0},
])
def test_a_policy_s_metadata_simulate_takes_is_one_the_api_server_takes(kube_admin, tmp_path, metadata):
    """metadata beside the name: simulate takes a manifest exactly when `kubectl apply` does."""
    body = policy("crd-agreement-meta", {"query": "q", "capacity": {"demandPerGpu": 1},
                                         "target": {"kind": "Deployment", "name": "d"}})
    body["metadata"].update(metadata)
    file = where_the_server_takes(kube_admin, tmp_path, body)
    assert file is None or isinstance(file, PolicySpec), f"the API server takes what simulate refuses: {file}"


_LABEL_TEXT = st.text("aZ09-_. /", max_size=8)
_LABEL_KEY = st.one_of(_LABEL_TEXT, st.builds("/".join, st.tuples(_LABEL_TEXT, _LABEL_TEXT)),
                       st.sampled_from([63 * "a", 64 * "a", "a" + 62 * "b" + "c", "example.com/" + 63 * "a"]))


def test_labels_annotations_and_finalizers_simulate_takes_are_ones_the_api_server_takes(kube_admin, tmp_path_factory):
    """Keys and values near Kubernetes' rules for them (prefixes, lengths, the characters allowed at each end)."""
    tmp_path = tmp_path_factory.mktemp("labels")
    spec = {"query": "q", "capacity": {"demandPerGpu": 1}, "target": {"kind": "Deployment", "name": "d"}}

    @settings(max_examples=80, deadline=None)
    @example("annotations", "Z/0", "")  # an annotation's key is checked lower-cased, a label's is not
    @example("labels", "Z/0", "")
    @given(st.sampled_from(["labels", "annotations", "finalizers"]), _LABEL_KEY,
           st.one_of(_LABEL_TEXT, st.sampled_from([63 * "a", 64 * "a"])))
    def alike(field: str, key: str, value: str) -> None:
        body = policy("crd-agreement-labels", spec)
        body["metadata"][field] = [key] if field == "finalizers" else {key: value}
        file = where_the_server_takes(kube_admin, tmp_path, body)
        assert file is None or isinstance(file, PolicySpec), f"the API server takes what simulate refuses: {file}"

    alike()
