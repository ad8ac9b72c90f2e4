"""YAML as headroom reads a configuration or a manifest: the data as written, and never a key given twice."""
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from core.yamlfile import KubectlLoader, RepeatedKeys, documents, manifest_text

KEYS = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1, max_size=6)
SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8)
TREES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
                     max_leaves=20)


@settings(max_examples=200, deadline=None)
@given(st.lists(TREES, min_size=1, max_size=3), st.sampled_from([dict(), dict(default_flow_style=True)]))
def test_what_yaml_writes_is_read_back_unchanged(trees, style):
    assert documents(yaml.safe_dump_all(trees, **style)) == trees


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(KEYS, SCALARS, min_size=1, max_size=5), st.data())
def test_any_key_written_twice_is_named_with_its_path(mapping, data):
    key = data.draw(st.sampled_from(sorted(mapping)))
    text = yaml.safe_dump({"spec": mapping}) + "  " + yaml.safe_dump({key: "again"}, width=10**6)
    with pytest.raises(RepeatedKeys) as err:
        documents(text)
    assert [line.split(": given twice")[0] for line in err.value.errors] == [f"spec.{key}"]


def test_paths_through_lists_documents_and_the_lines_of_both():
    with pytest.raises(RepeatedKeys) as err:
        documents("a: 1\n---\nrun:\n  policies:\n  - name: x\n    name: y\n")
    assert err.value.errors == ["document 2: run.policies[0].name: given twice (lines 5 and 6); give it once"]


def test_keys_written_beside_a_merge_override_it_as_yaml_means():
    assert documents("base: &b {k: 1, j: 2}\nd:\n  <<: *b\n  k: 3\n") == [{"base": {"k": 1, "j": 2},
                                                                          "d": {"k": 3, "j": 2}}]


def test_an_integer_key_and_the_string_of_it_are_two_keys():
    assert documents("1: x\n'1': y\n") == [{1: "x", "1": "y"}]


# strings Go's YAML (kubectl's) would read as something else, and near misses
GO_LOOKING = st.sampled_from(["y", "n", "Yes", "off", "1e3", "5e-1", "0o17", "0X1F", "0777", "1_000", "1:30",
                              "2026-05-04", ".5", "+1", "-0", ".inf", ".NaN", "0b101", "1e", "e3", "0x"]) | st.text(
    "0123456789eExXoObB._+-:ynYN", min_size=1, max_size=6)
MANIFEST_SCALARS = st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.floats(allow_nan=False) | \
    st.text(max_size=8) | GO_LOOKING
MANIFESTS = st.recursive(MANIFEST_SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
    KEYS | GO_LOOKING, inner, max_size=4), max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(KEYS | GO_LOOKING, MANIFESTS, min_size=1, max_size=4))
def test_a_manifest_headroom_writes_is_read_back_as_written_by_kubectl_s_typing(obj):
    """`tune --write-policy` wrote with PyYAML, which leaves a string such as y, 1e3 or 0o17 plain: kubectl reads it
    as a boolean or a number (a policy named 1e3 was a file kubectl refused)."""
    assert documents(manifest_text(obj), KubectlLoader) == [obj]


def test_an_integer_past_uint64_in_a_manifest_is_text_as_kubectl_reads_it_not_a_traceback():
    """Past Python's 4,300 digits int(text) raised while typing the scalar: a traceback from --policy-file."""
    digits = "1" + "0" * 5000
    assert documents(f"minGpus: {digits}\n", KubectlLoader) == [{"minGpus": digits}]
    assert documents("minGpus: 18446744073709551616\n", KubectlLoader) == [{"minGpus": 18446744073709551616.0}]


@pytest.mark.parametrize("text", ["a: !!int abc", "a: !!float", "a: !!timestamp x", "a: !!bool maybe",
                                  "b: [{c: !!int x}]"])
def test_a_scalar_its_tag_cannot_read_is_a_yaml_error_naming_its_line(text):
    """PyYAML's constructors raised ValueError, IndexError, AttributeError or KeyError: a traceback from --config or
    --policy-file."""
    with pytest.raises(yaml.YAMLError, match=r"(?s)cannot be read as .* line 1"):
        documents(text, KubectlLoader)


@pytest.mark.parametrize("nested", ["[" * 5000 + "]" * 5000, "{a: " * 5000 + "1" + "}" * 5000])
@pytest.mark.parametrize("read", ["config", "policy"])
def test_lists_or_mappings_nested_thousands_deep_are_an_error_naming_the_file_not_a_recursion_traceback(
        tmp_path, nested, read):
    """PyYAML composes and constructs nodes by recursion: a value nested a few thousand deep was a RecursionError
    traceback from --config or --policy-file."""
    from cli.config import load_config
    from core.errors import ConfigError
    from core.policy import load_manifests

    path = tmp_path / "deep.yaml"
    path.write_text(f"spec: {nested}\n")
    with pytest.raises(ConfigError) as err:
        load_config(path) if read == "config" else load_manifests(path)
    assert str(path) in str(err.value) and "nested too deep to read" in str(err.value), str(err.value)


def test_a_control_character_is_named_in_the_file_that_holds_it():
    """A control character (a binary file's bytes that happen to be UTF-8) was said to be in "<unicode string>":
    PyYAML checks the characters as its loader is made, before the file's name was given to it."""
    with pytest.raises(yaml.YAMLError, match='in "policy.yaml", position 3'):
        documents("a: \x01\x02\n", KubectlLoader, "policy.yaml")
