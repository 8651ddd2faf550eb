"""Secrets reach no line a tool prints and no file it writes, whatever carried them in: a credential
process's output, the environment, a URL's password (through each tool's own process)."""

from __future__ import annotations

import os
import subprocess
import sys

from helpers import ROOT

from llm_pd_eks_tools.core.cli import Exit

SECRET = "s3cr3t/SECRETVALUE+xyz"


def tool(module: str, argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "PULUMI_", "KUBECONFIG"))}
    return subprocess.run(
        [sys.executable, "-m", module, *argv],
        cwd=ROOT,
        env=base | {"PYTHONPATH": str(ROOT)} | env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_failing_credential_process_s_json_is_not_echoed(tmp_path):
    script = tmp_path / "cred.sh"
    script.write_text(
        "#!/bin/sh\n"
        f'echo \'{{"Version": 1, "AccessKeyId": "AKIAEXAMPLE", "SecretAccessKey": "{SECRET}", '
        '"SessionToken": "TOKENVALUE123456"}\' >&2\nexit 3\n'
    )
    script.chmod(0o755)
    config = tmp_path / "config"
    config.write_text(f"[default]\ncredential_process = {script}\nregion = us-east-1\n")
    proc = tool(
        "llm_pd_eks_tools.ops.preflight",
        ["--stack", "dev", "--deadline", "30"],
        {"AWS_CONFIG_FILE": str(config), "AWS_SHARED_CREDENTIALS_FILE": os.devnull},
    )
    assert SECRET not in proc.stdout + proc.stderr and "TOKENVALUE123456" not in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and proc.returncode in {int(code) for code in Exit}


def test_an_environment_credential_echoed_by_a_failure_is_removed(tmp_path):
    # the workload path itself holds the token: the tool's one-line error names the path
    token = "ghp_TOKENINAPATH12345"
    proc = tool(
        "llm_pd_eks_sizing.size",
        ["--stack", "dev", "--workload", str(tmp_path / token)],
        {"GITHUB_TOKEN": token},
    )
    assert proc.returncode == Exit.USAGE, proc.stderr
    assert token not in proc.stderr and "[redacted]" in proc.stderr


def test_a_url_password_holding_at_signs_is_removed_whole(tmp_path):
    proc = tool(
        "llm_pd_eks_sizing.cost_audit",
        ["--stack", "dev", "--prometheus", "http://admin:pa@ss@word-9@127.0.0.1:9/", "--out", str(tmp_path / "audit")],
        {},
    )
    assert "pa@ss" not in proc.stderr + proc.stdout and "word-9" not in proc.stderr + proc.stdout
    assert "Traceback" not in proc.stderr
