"""Placeholder values (documentation CIDRs, the example account, a private endpoint with no runner)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers import ROOT, validate_values

from llm_pd_eks_tools.cli import Exit
from llm_pd_eks_tools.placeholders import DEFAULT_RUNNER, documentation_range, find_placeholders, runner_label

CLEAN = {
    "network": {"vpcCidr": "10.40.0.0/16", "availabilityZones": ["us-west-2a", "us-west-2b"]},
    "cluster": {"publicAccessCidrs": ["198.18.0.0/15"], "adminPrincipalArns": ["arn:aws:iam::210987654321:role/admin"]},
    "gpuNodes": {"instanceType": "p4d.24xlarge", "availabilityZone": "us-west-2a"},
    "serving": {
        "modelId": "Qwen/Qwen2.5-7B-Instruct",
        "image": "210987654321.dkr.ecr.us-west-2.amazonaws.com/ray-llm:2.60.0-py311-cu128",
    },
}


def keys(values: dict, runner=None) -> list[str]:
    return [p.key.split(":", 1)[1] for p in find_placeholders(validate_values(values), runner)]


def test_a_real_looking_stack_has_none():
    assert keys(CLEAN) == []


@pytest.mark.parametrize("cidr", ["192.0.2.0/24", "198.51.100.7/32", "203.0.113.0/24", "203.0.0.0/16"])
def test_documentation_cidrs_flagged(cidr):
    found = keys({**CLEAN, "cluster": {**CLEAN["cluster"], "publicAccessCidrs": [cidr]}})
    assert found == ["cluster.publicAccessCidrs"]


def test_ipv6_documentation_range_known():
    assert documentation_range("2001:db8:1::/48") == "2001:db8::/32"
    assert documentation_range("2001:db9::/32") is None


def test_vpc_in_a_documentation_range_flagged():
    network = {
        **CLEAN["network"],
        "vpcCidr": "198.51.100.0/24",  # a /24 VPC needs its subnets stated
        "privateSubnetCidrs": ["198.51.100.0/26", "198.51.100.64/26"],
        "publicSubnetCidrs": ["198.51.100.128/26", "198.51.100.192/26"],
    }
    found = keys({**CLEAN, "network": network})
    assert {"network.vpcCidr", "network.privateSubnetCidrs", "network.publicSubnetCidrs"} <= set(found)


def test_example_account_flagged_in_image_and_admin_arns():
    image = CLEAN["serving"]["image"].replace("210987654321", "123456789012")
    assert keys({**CLEAN, "serving": {**CLEAN["serving"], "image": image}}) == ["serving.image"]
    arn = "arn:aws:iam::123456789012:role/admin"
    assert keys({**CLEAN, "cluster": {**CLEAN["cluster"], "adminPrincipalArns": [arn]}}) == [
        "cluster.adminPrincipalArns"
    ]


def test_private_endpoint_needs_a_stated_runner():
    private = {**CLEAN, "cluster": {**CLEAN["cluster"], "publicAccessCidrs": []}}
    assert keys(private) == ["deploy.runnerLabel"]
    assert keys(private, runner="self-hosted-vpc") == []
    assert keys({**private, "deploy": {"runnerLabel": "vpc-runner"}}) == []
    assert runner_label(validate_values({**private, "deploy": {"runnerLabel": "vpc-runner"}})) == "vpc-runner"
    assert runner_label(validate_values(CLEAN)) == DEFAULT_RUNNER
    assert runner_label(validate_values(CLEAN), "from-input") == "from-input"


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "llm_pd_eks_tools.placeholders", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("stack", ["dev", "staging", "prod"])
def test_checked_in_stacks_are_refused_for_deploy(stack, tmp_path):
    out = tmp_path / "github_output"
    proc = cli("--stack", stack, "--github-output", str(out))
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "203.0.113.0/24" in proc.stderr
    # The image is the AWS Ray LLM DLC on ECR Public (llm_pd_eks/serving_image.py): no example account.
    assert "serving.image" not in proc.stderr and "123456789012" not in proc.stderr
    assert out.read_text() == f"runner={DEFAULT_RUNNER}\n"


def test_unknown_stack_is_a_usage_error():
    proc = cli("--stack", "nosuch")
    assert proc.returncode == 2
    assert proc.stderr.startswith("placeholders: no stack file Pulumi.nosuch.yaml; stacks here:")


def test_preview_prints_the_warning_and_summary_has_a_callout(tmp_path, programs):
    from llm_pd_eks_tools.preview.harness import preview
    from llm_pd_eks_tools.preview.render import render_text

    result = preview("dev", out=tmp_path / "dev", run=programs("dev"), progress=lambda _m: None)
    text = render_text(result)
    assert "WARNING: 1 placeholder value(s)" in text  # the CIDR; the DLC image is no placeholder
    assert text.index("WARNING:") < text.index("RESULT: OK")
    summary = (tmp_path / "dev" / "summary.md").read_text()
    assert "> [!WARNING]" in summary and "203.0.113.0/24" in summary
    assert result.exit_code == 0  # a warning, not a violation


# -- secure values, hosted runners and runner labels ---------------------------------------------

PRIVATE = {
    "network": {"vpcCidr": "10.40.0.0/16", "availabilityZones": ["us-west-2a", "us-west-2b"]},
    "gpuNodes": {"instanceType": "p4d.24xlarge", "availabilityZone": "us-west-2a"},
}


def _real_ciphertext() -> str:
    import base64

    return f"v1:{base64.b64encode(bytes(range(12))).decode()}:{base64.b64encode(bytes(range(40))).decode()}"


@pytest.mark.parametrize(
    "ciphertext, words",
    [
        ("v1:placeholder:replace-with-pulumi-config-set-secret", "names itself a placeholder"),
        ("v1:AAAA:BBBB", "not a passphrase-provider ciphertext"),  # base64, but a 3-byte nonce
        ("v1:not base64!:x", "not a passphrase-provider ciphertext"),
        ("v1:onlytwo", "not a passphrase-provider ciphertext"),
        ("AQICAHhEXAMPLEkmsblob==", "names itself a placeholder"),
    ],
)
def test_an_undecryptable_secure_value_is_a_placeholder(ciphertext, words):
    config = validate_values({**PRIVATE, "deploy": {"runnerLabel": "self-hosted-vpc"}})
    found = find_placeholders(config, secure_values={"llm-pd-eks:hfToken": ciphertext})
    assert [p.key for p in found] == ["llm-pd-eks:hfToken"] and words in found[0].why
    assert find_placeholders(config, secure_values={"llm-pd-eks:hfToken": _real_ciphertext()}) == []


@pytest.mark.parametrize("label", ["ubuntu-latest", "ubuntu-24.04", "ubuntu-22.04-arm", "windows-latest", "macos-15"])
def test_a_hosted_runner_for_a_private_only_cluster_is_a_placeholder(label):
    from_stack = find_placeholders(validate_values({**PRIVATE, "deploy": {"runnerLabel": label}}))
    assert [p.key for p in from_stack] == ["llm-pd-eks:deploy.runnerLabel"] and "GitHub-hosted" in from_stack[0].why
    from_input = find_placeholders(validate_values({**PRIVATE, "deploy": {"runnerLabel": "vpc-runner"}}), label)
    assert [p.key for p in from_input] == ["--runner"]
    public = {**PRIVATE, "cluster": {"publicAccessCidrs": ["198.18.0.0/15"]}}
    assert find_placeholders(validate_values(public), label) == []  # a public endpoint: fine


@pytest.mark.parametrize("label", ["vpc-runner\nrunner=ubuntu-latest", "two words", "tab\there", "a,b", "\x1b[31m"])
def test_a_runner_label_that_is_not_one_token_is_refused_and_never_written(label, tmp_path):
    out = tmp_path / "github_output"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "llm_pd_eks_tools.placeholders",
            "--stack",
            "dev",
            "--runner",
            label,
            "--github-output",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == Exit.FAILED, proc.stderr
    assert "not a single runner label" in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()  # nothing forged into $GITHUB_OUTPUT
