"""A stack that imports a Pulumi ESC environment: every offline tool resolves its values through the
Pulumi CLI (`pulumi config --json`) or refuses, naming the keys it cannot see; never a silent default.

The CLI is a fake `pulumi` on PATH that prints recorded JSON (tests/data/pulumi-config-json, the
CLI's own --json shape) and logs how it was called.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import DATA, ROOT, copy_checkout

from llm_pd_eks_tools.core import esc_imports, stackfile
from llm_pd_eks_tools.core.cli import Exit
from llm_pd_eks_tools.core.esc_imports import EnvironmentImportError, imported_environments
from llm_pd_eks_tools.core.stack import load_stack_config as load
from llm_pd_eks_tools.core.stack import stack_config

RECORDED = DATA / "pulumi-config-json" / "dev.json"
ENV = "llm-pd-eks/dev"
# What esc/llm-pd-eks/dev.yaml's pulumiConfig sets, written out here (the test's own expectation).
ENV_KEYS = ["llm-pd-eks:alertWebhookUrl", "llm-pd-eks:grafanaAdminPassword", "llm-pd-eks:hfToken"]

FAKE_PULUMI = """#!{python}
import os, sys
with open(os.environ["FAKE_PULUMI_LOG"], "a") as log:
    log.write(" ".join(sys.argv[1:]) + "\\n")
if os.environ.get("FAKE_PULUMI_MODE") == "logged-out":
    sys.stderr.write("error: PULUMI_ACCESS_TOKEN must be set for login during non-interactive CLI sessions\\n")
    sys.exit(255)
sys.stdout.write(open(os.environ["FAKE_PULUMI_JSON"]).read())
"""


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A copy whose dev stack imports the ESC environment (its own config block unchanged)."""
    root = copy_checkout(tmp_path / "repo")
    path = root / "Pulumi.dev.yaml"
    path.write_text(f"environment:\n  - {ENV}\n" + path.read_text())
    return root


@pytest.fixture
def fake_cli(tmp_path: Path, monkeypatch) -> Path:
    """A `pulumi` on a PATH of its own; returns its call log."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "pulumi"
    script.write_text(FAKE_PULUMI.format(python=sys.executable))
    script.chmod(0o755)
    log = tmp_path / "pulumi-calls.log"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_PULUMI_LOG", str(log))
    monkeypatch.setenv("FAKE_PULUMI_JSON", str(RECORDED))
    return log


@pytest.fixture
def no_cli(tmp_path: Path, monkeypatch) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


def test_checked_in_stacks_import_nothing_and_need_no_cli(no_cli):
    """The repository's own stacks stay readable offline (the tests and `make preview` rely on it)."""
    for stack in stackfile.stacks(ROOT):
        assert imported_environments(stack, ROOT) == []
        assert load(stack, ROOT)[0]


def test_definitions_set_every_secret_only_key_as_a_secret():
    """The environment a stack imports carries every secret-only value the program reads, and no
    credentials (a job keeps its GitHub environment's role)."""
    from llm_pd_eks.config.stack import SECRET_ONLY_KEYS

    for stack in ("dev", "staging", "prod"):
        path = ROOT / "esc" / "llm-pd-eks" / f"{stack}.yaml"
        values = yaml.safe_load(path.read_text())["values"]
        for name in SECRET_ONLY_KEYS:
            secret = values["secrets"][name]["fn::secret"]
            assert not secret.startswith(("hf_", "https://")), f"{path}: a real secret is checked in"
        assert sorted(values["pulumiConfig"]) == sorted(f"llm-pd-eks:{k}" for k in SECRET_ONLY_KEYS)
        assert all(v.startswith("${secrets.") for v in values["pulumiConfig"].values())
        assert "aws" not in values and "environmentVariables" not in values, path
    assert esc_imports.environment_keys([ENV], ROOT) == ENV_KEYS


def test_people_log_in_by_oidc_through_an_environment_no_stack_imports():
    for stack in ("dev", "staging", "prod"):
        path = ROOT / "esc" / "llm-pd-eks" / f"{stack}-aws.yaml"
        data = yaml.safe_load(path.read_text())
        login = data["values"]["aws"]["login"]["fn::open::aws-login"]
        assert "static" not in login, path
        assert login["oidc"]["roleArn"].endswith(f":role/llm-pd-eks-{stack}-deploy") and login["oidc"]["sessionName"]
        assert data["imports"] == [f"llm-pd-eks/{stack}"]
        assert set(data["values"]["environmentVariables"]) == {
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN",
        }


def test_imported_values_come_from_the_cli(checkout, fake_cli):
    values, secret_keys = load("dev", checkout)
    assert sorted(secret_keys) == ENV_KEYS
    assert values["llm-pd-eks:hfToken"] == stackfile.SECRET_PLACEHOLDER  # never the value itself
    assert json.loads(values["llm-pd-eks:gpuNodes"])["instanceType"] == "p4d.24xlarge"
    (call,) = fake_cli.read_text().splitlines()
    assert call == f"config --json --stack dev --cwd {checkout}"  # no --show-secrets
    # and the program's validation sees the environment's secrets as secrets
    assert stack_config("dev", checkout).gpu_nodes.instance_type == "p4d.24xlarge"


def test_a_key_only_the_environment_sets_reaches_the_tools(checkout, fake_cli, tmp_path, monkeypatch):
    """Drop a section from the stack file; the environment (the CLI's view) still provides it."""
    path = checkout / "Pulumi.dev.yaml"
    data = yaml.safe_load(path.read_text())
    del data["config"]["llm-pd-eks:kuberay"]
    path.write_text(yaml.safe_dump(data))
    assert json.loads(load("dev", checkout)[0]["llm-pd-eks:kuberay"]) == {"chartVersion": "1.7.0"}


def test_without_a_cli_every_tool_refuses_naming_the_keys(checkout, no_cli):
    with pytest.raises(EnvironmentImportError) as info:
        load("dev", checkout)
    message = str(info.value)
    assert info.value.exit_code == Exit.UNVERIFIED
    assert "\n" not in message and ENV in message
    assert all(key in message for key in ENV_KEYS)


def test_a_logged_out_cli_is_a_refusal_with_its_reason(checkout, fake_cli, monkeypatch):
    monkeypatch.setenv("FAKE_PULUMI_MODE", "logged-out")
    with pytest.raises(EnvironmentImportError) as info:
        load("dev", checkout)
    assert "PULUMI_ACCESS_TOKEN must be set" in str(info.value) and "pulumi login" in str(info.value)


def test_an_environment_that_lost_a_key_is_named(checkout, fake_cli, tmp_path, monkeypatch):
    recorded = json.loads(RECORDED.read_text())
    del recorded["llm-pd-eks:grafanaAdminPassword"]
    short = tmp_path / "short.json"
    short.write_text(json.dumps(recorded))
    monkeypatch.setenv("FAKE_PULUMI_JSON", str(short))
    with pytest.raises(EnvironmentImportError, match="lacks llm-pd-eks:grafanaAdminPassword"):
        load("dev", checkout)


def test_environment_must_be_a_list(checkout):
    path = checkout / "Pulumi.dev.yaml"
    path.write_text(path.read_text().replace(f"environment:\n  - {ENV}\n", f"environment: {{imports: {ENV}}}\n"))
    with pytest.raises(stackfile.StackFileError, match="must be a list of ESC environment names"):
        load("dev", checkout)


def test_a_tool_exits_unverified_with_one_line(checkout, no_cli):
    """Through a real command line: promote-check reads both stacks with the one reader."""
    env = {**os.environ, "PATH": os.environ["PATH"]}
    done = subprocess.run(
        [sys.executable, "-m", "llm_pd_eks_tools.gates.promote_check", "--from", "dev", "--to", "staging"],
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == Exit.UNVERIFIED, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "hfToken" in lines[0] and "Traceback" not in done.stderr
