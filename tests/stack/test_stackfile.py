"""llm_pd_eks_tools/core/stackfile.py: the one strict reader of Pulumi.<stack>.yaml (stack-file cases)."""

from __future__ import annotations

import json

import pytest
import yaml
from helpers import ROOT

from llm_pd_eks_tools.core import stackfile
from llm_pd_eks_tools.core.cli import Exit
from llm_pd_eks_tools.core.stack import load_stack_config
from llm_pd_eks_tools.core.stackfile import PROJECT

DEV = (ROOT / "Pulumi.dev.yaml").read_text()


def write(tmp_path, text: str, stack: str = "dev"):
    (tmp_path / f"Pulumi.{stack}.yaml").write_text(text)
    return tmp_path


def refused(tmp_path, text: str) -> str:
    with pytest.raises(stackfile.StackFileError) as info:
        load_stack_config("dev", write(tmp_path, text))
    assert info.value.exit_code == Exit.USAGE
    return str(info.value)


def test_the_checked_in_stack_reads_as_the_engine_hands_it_over(tmp_path):
    config, secrets = load_stack_config("dev", write(tmp_path, DEV))
    assert (config, secrets) == load_stack_config("dev")
    assert config["aws:region"] == "us-west-2"
    assert (
        json.loads(config[f"{PROJECT}:gpuNodes"])["instanceType"]
        == yaml.safe_load(DEV)["config"][f"{PROJECT}:gpuNodes"]["instanceType"]
    )


def test_a_duplicate_key_is_refused_with_both_lines(tmp_path):
    # The red-team case: a second gpuNodes block silently turned dev into 2 x p5.
    text = DEV + f"  {PROJECT}:gpuNodes:\n    instanceType: p5.48xlarge\n    availabilityZone: us-west-2a\n"
    first = DEV.splitlines().index(f"  {PROJECT}:gpuNodes:") + 1
    second = len(DEV.splitlines()) + 1
    assert refused(tmp_path, text) == (
        f"Pulumi.dev.yaml line {second}: key '{PROJECT}:gpuNodes' is defined twice (first at line {first}); "
        "keep one (the Pulumi CLI refuses duplicate keys too)"
    )


def test_a_duplicate_nested_key_is_refused(tmp_path):
    text = "config:\n  llm-pd-eks:gpuNodes:\n    maxSize: 2\n    maxSize: 9\n"
    assert refused(tmp_path, text) == (
        "Pulumi.dev.yaml line 4: key 'maxSize' is defined twice (first at line 3); keep one (the Pulumi CLI refuses "
        "duplicate keys too)"
    )


def test_an_alias_bomb_is_refused_before_any_expansion(tmp_path):
    lines = ["config:", "  a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"  a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    assert refused(tmp_path, "\n".join(lines) + "\n") == (
        "Pulumi.dev.yaml line 3: YAML alias *a0 is not allowed in a stack file; write the value out in full"
    )


def test_a_list_shaped_file_is_refused_clearly(tmp_path):
    assert refused(tmp_path, "- aws:region: us-west-2\n") == (
        "Pulumi.dev.yaml: the file is a YAML list, but a stack file is a mapping with a `config:` key "
        "(`config:` then `namespace:key: value` lines)"
    )
    assert refused(tmp_path, "config:\n  - aws:region: us-west-2\n") == (
        "Pulumi.dev.yaml: `config:` is a YAML list; it must be a mapping of `namespace:key: value` lines"
    )


def test_broken_yaml_names_the_line(tmp_path):
    assert refused(tmp_path, "config:\n  aws:region: [us-west-2\n") == (
        "Pulumi.dev.yaml line 3: expected ',' or ']', but got '<stream end>'"
    )


def test_an_oversized_file_is_refused_unread(tmp_path):
    size = stackfile.MAX_BYTES + 1
    assert refused(tmp_path, "#" * size) == (
        f"Pulumi.dev.yaml: {size} bytes is larger than a stack file can be ({stackfile.MAX_BYTES}); "
        "is it the right file?"
    )


def test_a_missing_stack_names_the_stacks_there(tmp_path):
    write(tmp_path, DEV, "staging")
    with pytest.raises(stackfile.StackFileError) as info:
        load_stack_config("dev", tmp_path)
    assert str(info.value) == (
        "no stack file Pulumi.dev.yaml; stacks here: staging (or create it: `pulumi stack init dev`)"
    )


def test_secure_values_become_secret_keys(tmp_path):
    config, secrets = load_stack_config("dev", write(tmp_path, DEV + f"  {PROJECT}:hfToken:\n    secure: v1:abc\n"))
    assert secrets == [f"{PROJECT}:hfToken"]
    assert config[f"{PROJECT}:hfToken"] == stackfile.SECRET_PLACEHOLDER


def test_booleans_are_read_as_the_pulumi_cli_reads_them():
    # yaml.v3 (YAML 1.2) reads yes/no/on/off as strings; only true/false are booleans.
    data = stackfile.parse("a: yes\nb: off\nc: true\nd: False\ne: 'true'\n", "x.yaml")
    assert data == {"a": "yes", "b": "off", "c": True, "d": False, "e": "true"}


def test_protect_yes_is_refused_not_read_as_true(tmp_path):
    from llm_pd_eks.config import ConfigError, validate_engine_config

    config, secrets = load_stack_config("dev", write(tmp_path, DEV + f"  {PROJECT}:protect: yes\n"))
    with pytest.raises(ConfigError) as info:
        validate_engine_config(config, secrets, stack="dev")
    assert info.value.problems == [f"{PROJECT}:protect: Input should be a valid boolean (got 'yes')"]
    config, secrets = load_stack_config("dev", write(tmp_path, DEV + f"  {PROJECT}:protect: true\n"))
    assert validate_engine_config(config, secrets, stack="dev").protect is True


def test_a_deeply_nested_file_is_refused_not_a_crash(tmp_path):
    text = "config:\n  llm-pd-eks:x: " + "[" * 50_000 + "]" * 50_000 + "\n"
    assert refused(tmp_path, text) == "Pulumi.dev.yaml: nested too deeply to be a stack file; is it the right file?"


def test_python_tags_are_refused_with_the_line(tmp_path):
    message = refused(tmp_path, "config:\n  llm-pd-eks:x: !!python/object/apply:os.system [echo hi]\n")
    assert message.startswith("Pulumi.dev.yaml line 2: could not determine a constructor for the tag")


@pytest.mark.parametrize("name", ["../etc/x", "a/b", "", "s" * 101, ".."])
def test_a_stack_name_the_pulumi_cli_refuses_is_refused(tmp_path, name):
    with pytest.raises(stackfile.StackFileError) as info:
        load_stack_config(name, tmp_path)
    assert str(info.value).endswith(
        " is not a Pulumi stack name (letters, digits, '-', '_' and '.', at most 100 characters)"
    )


def test_an_inline_merge_key_still_reads():
    # `<<` without an alias merges an inline mapping (yaml.v3 supports it too); explicit keys win.
    assert stackfile.parse("a:\n  <<: {x: 1, z: 0}\n  y: 2\n  z: 3\n", "x.yaml") == {"a": {"x": 1, "y": 2, "z": 3}}
