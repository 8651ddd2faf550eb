"""The pack's one reader of command lines, vLLM's JSON arguments and YAML text, in-process.

Oracles: vLLM 0.26.0 `FlexibleArgumentParser.parse_args` (vllm/utils/argparse_utils.py in the wheel,
`pip download vllm==0.26.0 --no-deps`): `_` becomes `-` up to the first `.`, dotted keys merge into one
JSON dict appended after all other arguments, `key+ A,B` is the list [A, B]. bash(1): `-c` may be
combined with other single-letter options (`-lc`), the script is the first operand after them.
tini(1) and dumb-init(1) run the rest of their arguments after their options (and `--`).
"""

from __future__ import annotations

import pytest
import yaml

from llm_pd_eks_policy import yaml_text
from llm_pd_eks_policy.workloads import (
    FABRIC_VARIABLES,
    command_line,
    kv_flags,
    pod_specs,
    unreadable_settings,
    vllm_json_args,
)

SCRIPT = "export FI_PROVIDER=tcp; exec vllm serve qwen"


@pytest.mark.parametrize(
    "argv",
    [
        ["bash", "-c", SCRIPT],
        ["bash", "-lc", SCRIPT],
        ["/bin/sh", "-ec", SCRIPT],
        ["bash", "-o", "pipefail", "-c", SCRIPT],
        ["tini", "--", "sh", "-c", SCRIPT],
        ["/usr/bin/tini", "-g", "--", "bash", "-lc", SCRIPT],
        ["dumb-init", "--", "sh", "-c", SCRIPT],
        ["dumb-init", "-r", "15:2", "sh", "-c", SCRIPT],
        ["exec", "bash", "-c", SCRIPT],
        ["env", "LANG=C", "bash", "-c", SCRIPT],
        ["timeout", "3600", "sh", "-c", SCRIPT],
        "tini -- bash -lc 'export FI_PROVIDER=tcp; vllm serve qwen'",
    ],
)
def test_wrappers_and_shells_are_read_through(argv):
    line = command_line(argv)
    assert line.last("FI_PROVIDER") == "tcp"
    assert ["vllm", "serve", "qwen"] in line.commands


def test_a_plain_command_line_sets_nothing():
    line = command_line(["bash", "-l", "script.sh"])  # no -c: a file the pack does not read
    assert line.last("FI_PROVIDER") is None and line.opaque == []


@pytest.mark.parametrize(
    "argv",
    [
        ["sh", "-c", 'eval "export FI_PROVIDER=$P"'],
        ["sh", "-c", "echo FI_PROVIDER=tcp >> /etc/environment; vllm serve q"],
        ["sh", "-c", "export FI_PROVIDER='tcp"],  # unbalanced quote: not a command line
    ],
)
def test_a_line_that_may_set_fabric_variables_unreadably_is_named(argv):
    assert unreadable_settings(command_line(argv), FABRIC_VARIABLES)


def test_a_line_that_only_reads_fabric_variables_is_not_named():
    line = command_line(["sh", "-c", "echo $FI_PROVIDER; printenv NIXL_LOG_LEVEL; vllm serve q"])
    assert unreadable_settings(line, FABRIC_VARIABLES) == []


# -- vLLM's JSON arguments ------------------------------------------------------------------------
def test_dotted_list_append_flag_is_read_as_vllm_reads_it():
    argv = [
        "vllm",
        "serve",
        "qwen",
        "--kv-transfer-config.kv_connector",
        "NixlConnector",
        "--kv-transfer-config.kv_role",
        "kv_both",
        "--kv-transfer-config.kv_connector_extra_config.backends+",
        "LIBFABRIC",
    ]
    assert kv_flags(argv) == [
        (
            "--kv-transfer-config",
            {
                "kv_connector": "NixlConnector",
                "kv_role": "kv_both",
                "kv_connector_extra_config": {"backends": ["LIBFABRIC"]},
            },
        )
    ]


def test_underscores_equals_and_comma_lists():
    argv = [
        "--kv_transfer_config.kv_connector=NixlConnector",
        "--kv-transfer-config.kv_connector_extra_config.backends+=UCX,LIBFABRIC",
    ]
    ((_, value),) = kv_flags(argv)
    assert value["kv_connector_extra_config"]["backends"] == ["UCX", "LIBFABRIC"]


def test_dotted_form_wins_over_json_given_anywhere():
    # vLLM appends the merged dotted dict after every other argument: argparse keeps the last value.
    argv = [
        "--kv-transfer-config.kv_role",
        "kv_both",
        "--kv-transfer-config",
        '{"kv_connector": "NixlConnector", "kv_connector_extra_config": {"backends": ["LIBFABRIC"]}}',
    ]
    assert vllm_json_args(argv)["--kv-transfer-config"][-1] == {"kv_role": "kv_both"}


def test_text_that_is_not_json_stays_text():
    assert kv_flags(["--kv-transfer-config", "NixlConnector"]) == [("--kv-transfer-config", "NixlConnector")]


def test_a_dot_only_in_the_value_is_no_dotted_flag():
    assert "--model" in vllm_json_args(["--model=Qwen/Qwen2.5-7B"])


# -- pod templates by shape -----------------------------------------------------------------------
def test_pod_templates_of_a_kind_without_a_table_are_found():
    lws = {
        "spec": {
            "leaderWorkerTemplate": {
                "leaderTemplate": {"spec": {"containers": [{"name": "leader"}]}},
                "workerTemplate": {"spec": {"containers": [{"name": "worker"}]}},
            }
        }
    }
    assert [path for path, _ in pod_specs(lws)] == [
        "spec.leaderWorkerTemplate.leaderTemplate.spec",
        "spec.leaderWorkerTemplate.workerTemplate.spec",
    ]
    assert pod_specs({"spec": {"containers": "not a list"}}) == []


# -- bounded YAML ---------------------------------------------------------------------------------
def _laughs(levels: int) -> str:
    text = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    for i in range(levels):
        prev, cur = chr(97 + i), chr(98 + i)
        text += f"{cur}: &{cur} [{', '.join(['*' + prev] * 10)}]\n"
    return text


def test_alias_expansion_is_bounded():
    assert len(_laughs(8)) < 1024
    with pytest.raises(yaml_text.YamlTooLarge):
        yaml_text.load_all(_laughs(8))  # 10^9 nodes expanded


def test_small_aliases_load_as_pyyaml_does():
    text = _laughs(2)
    assert yaml_text.load(text) == yaml.safe_load(text)
    assert yaml_text.expanded_size(yaml.compose(text)) > 100  # 10x10 lols, counted expanded


def test_a_recursive_alias_is_refused():
    with pytest.raises(yaml_text.YamlTooLarge):
        yaml_text.load("a: &a [*a]")
