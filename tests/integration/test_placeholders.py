"""Placeholder values (documentation CIDRs, the example account, a private endpoint with no runner)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers import ROOT, validate_values

from llm_pd_eks_tools.core.cli import Exit
from llm_pd_eks_tools.gates.placeholders import DEFAULT_RUNNER, documentation_range, find_placeholders, runner_label

CLEAN = {
    "observability": {
        "alerting": {
            "runbookBaseUrl": "https://github.com/acme/llm-pd-eks/blob/main/docs/operations.md",
            "snsSubscriptions": [
                {"protocol": "email", "endpoint": "oncall@acme.test", "severity": "critical"},
                {"protocol": "email", "endpoint": "tickets@acme.test", "severity": "warning"},
            ],
            "heartbeatUrl": "https://hc-ping.com/0f7c2a5e-real",
        }
    },
    "network": {"vpcCidr": "10.40.0.0/16", "availabilityZones": ["us-west-2a", "us-west-2b"]},
    "cluster": {"publicAccessCidrs": ["198.18.0.0/15"], "adminPrincipalArns": ["arn:aws:iam::210987654321:role/admin"]},
    "gpuNodes": {"instanceType": "p4d.24xlarge", "availabilityZone": "us-west-2a"},
    "serving": {
        "modelId": "Qwen/Qwen2.5-7B-Instruct",
        "image": "210987654321.dkr.ecr.us-west-2.amazonaws.com/ray-llm:2.60.0-py311-cu128",
    },
}


def keys(values: dict, runner=None, secret_keys=()) -> list[str]:
    config = validate_values(values, secret_keys=list(secret_keys))
    return [p.key.split(":", 1)[1] for p in find_placeholders(config, runner)]


def test_a_real_looking_stack_has_none():
    assert keys(CLEAN) == []


@pytest.mark.parametrize("cidr", ["192.0.2.0/24", "198.51.100.7/32", "203.0.113.0/24", "203.0.0.0/16"])
def test_documentation_cidrs_flagged(cidr):
    found = keys({**CLEAN, "cluster": {**CLEAN["cluster"], "publicAccessCidrs": [cidr]}})
    assert found == ["cluster.publicAccessCidrs"]


@pytest.mark.parametrize(
    "alerting, flagged",
    [
        ({"runbookBaseUrl": None}, ["observability.alerting.runbookBaseUrl"]),
        ({"snsSubscriptions": []}, ["observability.alerting.snsSubscriptions"] * 2),  # no pages, no tickets
        # pages to the webhook (its secret is required by the config), tickets still need a subscriber
        ({"snsSubscriptions": [], "receiver": "webhook"}, ["observability.alerting.snsSubscriptions"]),
        (
            {"snsSubscriptions": [{"protocol": "email", "endpoint": "t@acme.test", "severity": "warning"}]},
            ["observability.alerting.snsSubscriptions"],  # tickets only: pages would reach nobody
        ),
        (
            {
                "snsSubscriptions": [{"protocol": "email", "endpoint": "t@acme.test", "severity": "warning"}],
                "receiver": "webhook",
            },
            [],
        ),
        ({"heartbeatUrl": None}, ["observability.alerting.heartbeatUrl"]),  # no dead-man's switch
    ],
)
def test_alerting_that_reaches_nobody_is_flagged(alerting, flagged):
    values = {**CLEAN, "observability": {"alerting": {**CLEAN["observability"]["alerting"], **alerting}}}
    secrets = ["llm-pd-eks:alertWebhookUrl"] if alerting.get("receiver") == "webhook" else []
    if secrets:
        values["alertWebhookUrl"] = "https://hooks.example.invalid/x"
    assert keys(values, secret_keys=secrets) == flagged


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
        [sys.executable, "-m", "llm_pd_eks_tools.gates.placeholders", *args],
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
    # The image is the AWS Ray LLM DLC on ECR Public (llm_pd_eks/versions.py): no example account; only
    # the protected stack (prod) must pin it by digest before `pulumi up`.
    assert "123456789012" not in proc.stderr
    image_lines = [line for line in proc.stderr.splitlines() if "serving.image" in line]
    if stack == "prod":
        (line,) = image_lines
        assert "a tag without a digest on a protected (prod) stack" in line
        assert "make resolve-image STACK=prod" in line
    else:
        assert image_lines == []
    assert out.read_text() == f"runner={DEFAULT_RUNNER}\n"


DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    "image, protect, flagged",
    [
        ("public.ecr.aws/deep-learning-containers/ray:serve-llm-cuda-v1.0.0", True, True),
        (f"public.ecr.aws/deep-learning-containers/ray:serve-llm-cuda-v1.0.0@{DIGEST}", True, False),
        (f"public.ecr.aws/deep-learning-containers/ray@{DIGEST}", True, False),
        ("public.ecr.aws/deep-learning-containers/ray:serve-llm-cuda-v1.0.0", False, False),
    ],
)
def test_a_protected_stack_must_pin_its_image_by_digest(image, protect, flagged):
    from llm_pd_eks_tools.gates.placeholders import digest_warning

    config = validate_values({**CLEAN, "protect": protect, "serving": {**CLEAN["serving"], "image": image}})
    found = [p for p in find_placeholders(config, stack="prod") if p.key.endswith("serving.image")]
    assert bool(found) == flagged
    if flagged:
        assert "\n" not in str(found[0]) and "make resolve-image STACK=prod" in str(found[0])
    # the preview warns on any other stack whose image has no digest, in one line
    warned = digest_warning(config, "dev")
    assert len(warned) == (1 if ("@" not in image and not protect) else 0)
    if warned:
        assert (
            warned[0].startswith("WARNING: llm-pd-eks:serving.image ") and "make resolve-image STACK=dev" in warned[0]
        )


def test_unknown_stack_is_a_usage_error():
    proc = cli("--stack", "nosuch")
    assert proc.returncode == 2
    assert proc.stderr.startswith("placeholders: no stack file Pulumi.nosuch.yaml; stacks here:")


def test_preview_prints_the_warning_and_summary_has_a_callout(tmp_path, programs):
    from llm_pd_eks_tools.plan.preview.harness import preview
    from llm_pd_eks_tools.plan.preview.render import render_text

    result = preview("dev", out=tmp_path / "dev", run=programs("dev"), progress=lambda _m: None)
    text = render_text(result)
    # the CIDR, no runbook URL, no pages and no tickets subscription, no heartbeat; the DLC image is no
    # placeholder, but its tag has no digest
    assert "WARNING: 5 placeholder value(s)" in text
    assert "WARNING: llm-pd-eks:serving.image public.ecr.aws/deep-learning-containers/ray:" in text
    assert text.index("WARNING:") < text.index("RESULT: OK")
    summary = (tmp_path / "dev" / "summary.md").read_text()
    assert "> [!WARNING]" in summary and "203.0.113.0/24" in summary
    assert result.exit_code == 0  # a warning, not a violation


# --- ESC environments and the stack file's own values ------------------------------------------------


@pytest.fixture
def esc_checkout(tmp_path):
    """A copy whose dev stack imports llm-pd-eks/dev (its checked-in definition: "set me" values)."""
    from helpers import copy_checkout

    root = copy_checkout(tmp_path / "repo")
    path = root / "Pulumi.dev.yaml"
    path.write_text("environment:\n  - llm-pd-eks/dev\n" + path.read_text())
    return root


def test_esc_definitions_that_name_themselves_placeholders_are_found(esc_checkout):
    from llm_pd_eks_tools.gates.placeholders import stack_file_placeholders

    found = {p.key: p for p in stack_file_placeholders("dev", esc_checkout)}
    for name in ("hfToken", "grafanaAdminPassword", "alertWebhookUrl"):
        assert f"esc llm-pd-eks/dev: values.secrets.{name}.fn::secret" in found
    # filled in: nothing left in the environment
    definition = esc_checkout / "esc" / "llm-pd-eks" / "dev.yaml"
    definition.write_text(definition.read_text().replace('"set me: esc env set', '"{{from the vault}} esc env set'))
    assert not [p for p in stack_file_placeholders("dev", esc_checkout) if p.key.startswith("esc ")]


def test_a_stack_file_secret_hides_the_environments(esc_checkout):
    from llm_pd_eks_tools.gates.placeholders import stack_file_placeholders

    path = esc_checkout / "Pulumi.dev.yaml"
    path.write_text(path.read_text() + "  llm-pd-eks:hfToken:\n    secure: v1:placeholder:replace-me\n")
    (shadow,) = [p for p in stack_file_placeholders("dev", esc_checkout) if p.key == "llm-pd-eks:hfToken"]
    assert "the stack file's value wins and hides the environment's" in shadow.why
    assert "pulumi config rm llm-pd-eks:hfToken" in shadow.why


def test_a_plain_value_that_says_set_me_is_found(tmp_path):
    from helpers import copy_checkout

    from llm_pd_eks_tools.gates.placeholders import stack_file_placeholders

    root = copy_checkout(tmp_path / "repo")
    path = root / "Pulumi.dev.yaml"
    path.write_text(path.read_text().replace("modelId: ", "modelId: set-me-"))
    found = list(stack_file_placeholders("dev", root))
    assert [p.key for p in found] == ["llm-pd-eks:serving"] and "set-me-" in found[0].value


def test_the_gate_refuses_a_stack_importing_placeholder_secrets(esc_checkout, tmp_path):
    """Through the command line, as the deploy and review-stack jobs run it; the imported values come
    from a fake `pulumi config --json` (tests/data/pulumi-config-json/dev.json, the CLI's own shape)."""
    import os

    from helpers import DATA

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "pulumi"
    recorded = str(DATA / "pulumi-config-json" / "dev.json")
    fake.write_text(f"#!{sys.executable}\nimport sys\nsys.stdout.write(open({recorded!r}).read())\n")
    fake.chmod(0o755)
    proc = subprocess.run(
        [sys.executable, "-m", "llm_pd_eks_tools.gates.placeholders", "--stack", "dev"],
        cwd=esc_checkout,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"},
    )
    assert proc.returncode == 1, proc.stderr
    assert "esc llm-pd-eks/dev: values.secrets.alertWebhookUrl.fn::secret" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "cidrs, runner, refresh",
    [
        (["0.0.0.0/0"], "", "true"),  # open endpoint: a hosted runner reaches it
        (["198.18.0.0/15"], "", "false"),  # allow-listed: GitHub's shared ranges are not in it
        (["198.18.0.0/15"], "vpc-runner", "true"),  # the stack's runner
        ([], "vpc-runner", "true"),
    ],
)
def test_preview_runner_and_refresh(cidrs, runner, refresh):
    from llm_pd_eks_tools.gates.placeholders import reaches_api

    config = validate_values({**CLEAN, "cluster": {**CLEAN["cluster"], "publicAccessCidrs": cidrs}})
    why = reaches_api(config, runner_label(config, runner or None))
    assert (why is None) is (refresh == "true")


def test_preview_mode_writes_runner_refresh_and_note(tmp_path):
    out = tmp_path / "github_output"
    proc = cli("--stack", "prod", "--preview", "--github-output", str(out))
    assert proc.returncode == 0, proc.stderr  # placeholders do not stop a preview
    lines = dict(line.split("=", 1) for line in out.read_text().splitlines())
    assert lines["runner"] == DEFAULT_RUNNER and lines["refresh"] == "false"
    assert "admits only cluster.publicAccessCidrs (203.0.113.0/24)" in lines["note"]


# -- secure values, hosted runners and runner labels ---------------------------------------------

PRIVATE = {
    "network": {"vpcCidr": "10.40.0.0/16", "availabilityZones": ["us-west-2a", "us-west-2b"]},
    "gpuNodes": {"instanceType": "p4d.24xlarge", "availabilityZone": "us-west-2a"},
    # alerting that reaches someone, with a runbook link (else those are placeholders too)
    "observability": {
        "alerting": {
            "runbookBaseUrl": "https://github.com/acme/llm-pd-eks/blob/main/docs/operations.md",
            "snsSubscriptions": [
                {"protocol": "email", "endpoint": "oncall@acme.test", "severity": "critical"},
                {"protocol": "email", "endpoint": "tickets@acme.test", "severity": "warning"},
            ],
            "heartbeatUrl": "https://hc-ping.com/0f7c2a5e-real",
        }
    },
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
            "llm_pd_eks_tools.gates.placeholders",
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
