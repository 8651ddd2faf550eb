"""No tool repeats a credential it was handed: every message passes `llm_pd_eks_tools.core.io_safety.redact`.

A malformed kubeconfig `token:` line (YAML's own error quotes the offending line), and an
`AWS_ENDPOINT_URL` carrying `user:password@`, through verify's, preflight's and cost-audit's entry points.
"""

from __future__ import annotations

import os

import pytest
from helpers import tool
from prom_fixtures import free_port

from llm_pd_eks_tools.core.cli import Exit
from llm_pd_eks_tools.core.io_safety import REDACTED, redact

SECRET = "hunter2-Zq8xV3"


def test_verify_does_not_repeat_a_malformed_token_line(tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nclusters:\n- name: k\n  cluster:\n    server: https://127.0.0.1:6443\n"
        f"users:\n- name: u\n  user:\n    token: {SECRET}: extra\n"
    )
    proc = tool(
        "llm_pd_eks_tools.ops.verify", "--stack", "dev", "--kubeconfig", str(kubeconfig), "--out", str(tmp_path)
    )
    assert proc.returncode == Exit.USAGE, proc.stderr
    assert proc.stderr.count("\n") == 1 and "not a usable kubeconfig: not valid YAML at line 9" in proc.stderr
    assert SECRET not in proc.stdout + proc.stderr


def aws_env(endpoint: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_ENDPOINT_URL=endpoint,
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_EC2_METADATA_DISABLED="true",
        AWS_CONFIG_FILE=os.devnull,
        AWS_SHARED_CREDENTIALS_FILE=os.devnull,
    )
    return env


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_preflight_does_not_print_an_endpoints_password(json_flag):
    endpoint = f"http://admin:{SECRET}@127.0.0.1:{free_port()}"
    proc = tool(
        "llm_pd_eks_tools.ops.preflight", "--stack", "dev", "--deadline", "20", *json_flag, env=aws_env(endpoint)
    )
    assert proc.returncode == Exit.UNVERIFIED, proc.stderr
    assert SECRET not in proc.stdout + proc.stderr
    assert f"http://{REDACTED}@127.0.0.1" in proc.stderr


def test_cost_audit_does_not_print_or_write_an_endpoints_password(tmp_path):
    endpoint = f"http://admin:{SECRET}@127.0.0.1:{free_port()}"
    out = tmp_path / "audit"
    args = ["--stack", "dev", "--out", str(out), "--workload", str(tmp_path / "none")]
    proc = tool("llm_pd_eks_sizing.cost_audit", *args, env=aws_env(endpoint))
    assert proc.returncode == Exit.UNVERIFIED, proc.stderr
    written = "".join(p.read_text(errors="replace") for p in out.iterdir())
    assert SECRET not in proc.stdout + proc.stderr + written
    assert f"http://{REDACTED}@127.0.0.1" in proc.stderr


@pytest.mark.parametrize(
    "text, expected",
    [
        ("https://u:p@host:1/x", f"https://{REDACTED}@host:1/x"),
        ("token: abc.def", f"token: {REDACTED}"),
        ('"password": "x y"', f'"password": {REDACTED}'),
        ("Authorization: Bearer abcdefghijkl", f"Authorization: Bearer {REDACTED}"),
        ("aws_secret_access_key = wJalrXUt", f"aws_secret_access_key = {REDACTED}"),
        ("no credentials here: 10.0.0.1:443", "no credentials here: 10.0.0.1:443"),
    ],
)
def test_redact(text, expected):
    assert redact(text) == expected
