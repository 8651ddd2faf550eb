"""Bad input is one line with its code (docs/exit-codes.md), never an internal error (70) and never a
wrong verdict: through each tool's entry point, with inputs a user can hand it by mistake.

Stack files and ESC imports, output paths, kubeconfigs, AWS config files, policy configs; and the
names a tool turns into directories (a stack name is matched whole, and must have a stack file).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import ROOT, tool

from llm_pd_eks_tools.core.cli import Exit


def one_line(proc: subprocess.CompletedProcess, code: int) -> str:
    """The run's last stderr line, after checking its code and that no traceback or internal error came out."""
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    return proc.stderr.strip().splitlines()[-1]


def stacks_root(tmp_path: Path, edit=None) -> Path:
    """Pulumi.yaml and the three stack files; `edit(name, text) -> text` changes one."""
    root = tmp_path / "root"
    root.mkdir()
    shutil.copy(ROOT / "Pulumi.yaml", root / "Pulumi.yaml")
    for name in ("dev", "staging", "prod"):
        text = (ROOT / f"Pulumi.{name}.yaml").read_text()
        (root / f"Pulumi.{name}.yaml").write_text(edit(name, text) if edit else text)
    return root


def promote(root: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return tool(
        "llm_pd_eks_tools.gates.promote_check", "--from", "staging", "--to", "prod", "--root", str(root), env=env
    )


@pytest.mark.parametrize(
    "environment, words",
    [
        ("  - /etc/passwd\n", "is not an ESC environment name"),
        ("  - ../../etc/x\n", "is not an ESC environment name"),
        ("  - [a, b]\n", "must be a list of ESC environment names"),
    ],
)
def test_an_esc_import_that_is_a_path_or_a_list_is_a_usage_error(tmp_path, environment, words):
    root = stacks_root(tmp_path, lambda name, text: f"environment:\n{environment}{text}" if name == "staging" else text)
    assert words in one_line(promote(root), Exit.USAGE)


def test_an_esc_definition_that_is_a_list_is_a_usage_error(tmp_path):
    root = stacks_root(
        tmp_path, lambda name, text: "environment:\n  - llm-pd-eks/x\n" + text if name == "staging" else text
    )
    (root / "esc" / "llm-pd-eks").mkdir(parents=True)
    (root / "esc" / "llm-pd-eks" / "x.yaml").write_text("- values\n- pulumiConfig\n")
    line = one_line(promote(root), Exit.USAGE)
    assert "esc/llm-pd-eks/x.yaml: not an ESC definition" in line


def test_promote_check_refuses_nan_in_a_stack_object(tmp_path):
    root = stacks_root(
        tmp_path, lambda name, text: text.replace("maxSize: 4", "maxSize: .nan", 1) if name == "staging" else text
    )
    assert "maxSize: .nan" in (root / "Pulumi.staging.yaml").read_text()
    line = one_line(promote(root), Exit.USAGE)
    assert "maxSize is nan; a config object cannot carry NaN or infinity" in line


def test_an_empty_secure_value_is_refused(tmp_path):
    def empty_secret(name: str, text: str) -> str:
        lines = [line for line in text.splitlines() if "hfToken" not in line and "secure:" not in line]
        return "\n".join(lines) + ("\n  llm-pd-eks:hfToken:\n    secure: ''\n" if name == "staging" else "\n")

    line = one_line(promote(stacks_root(tmp_path, empty_secret)), Exit.USAGE)
    assert "llm-pd-eks:hfToken: `secure:` holds no ciphertext" in line


def test_a_stack_name_with_a_trailing_newline_is_no_stack_name(tmp_path):
    out = tmp_path / "verify"
    line = one_line(tool("llm_pd_eks_tools.ops.verify", "--stack", "dev\n", "--out", str(out)), Exit.USAGE)
    assert "is not a Pulumi stack name" in line
    assert not out.exists()


def test_a_preview_of_a_stack_without_a_file_creates_nothing(tmp_path):
    root = stacks_root(tmp_path)
    line = one_line(
        tool("llm_pd_eks_tools.plan.preview", "--stack", "nosuch", "--root", str(root), "--quiet"), Exit.USAGE
    )
    assert line.startswith("preview: no stack file Pulumi.nosuch.yaml")
    assert not (root / "build").exists()


def test_placeholders_github_output_at_a_directory_is_a_usage_error(tmp_path):
    line = one_line(
        tool("llm_pd_eks_tools.gates.placeholders", "--stack", "prod", "--github-output", str(tmp_path)), Exit.USAGE
    )
    assert f"--github-output: {tmp_path} is not a regular file" in line


def test_calibrate_with_a_missing_kubeconfig_is_a_usage_error(tmp_path):
    missing = tmp_path / "no-such-kubeconfig"  # under the test's own folder: nothing else can create it
    line = one_line(tool("llm_pd_eks_sizing.calibrate", "--stack", "dev", "--kubeconfig", str(missing)), Exit.USAGE)
    assert line == f"calibrate: no such kubeconfig {missing}"


@pytest.mark.parametrize("module", ["llm_pd_eks_tools.ops.preflight", "llm_pd_eks_sizing.cost_audit"])
def test_a_garbled_aws_config_file_is_a_usage_error(tmp_path, module):
    config = tmp_path / "aws-config"
    config.write_bytes(b"garbage\x00[[[\n= =\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_CONFIG_FILE=str(config), AWS_ACCESS_KEY_ID="t", AWS_SECRET_ACCESS_KEY="t")
    out = ["--out", str(tmp_path / "o")] if module.endswith("cost_audit") else []
    proc = tool(module, "--stack", "dev", *out, env=env)
    line = one_line(proc, Exit.USAGE)
    assert "cannot create AWS clients" in line and "Unable to parse config file" in line


@pytest.mark.parametrize(
    "config, words",
    [
        ("[" * 100000 + "]" * 100000, "nested too deeply to be a policy config"),
        (json.dumps({"all": {"a": {"b": {"c": json.loads("[" * 40 + "1" + "]" * 40)}}}}), "nested deeper than 32"),
        (json.dumps({"all": {"level": "x"}}), "`all`"),
    ],
)
def test_a_policy_config_nested_or_shaped_wrong_is_a_usage_error(tmp_path, config, words):
    path = tmp_path / "policy.json"
    path.write_text(config)
    args = ["--stack", "dev", "--policy-config", str(path), "--out", str(tmp_path / "o"), "--quiet"]
    assert words in one_line(tool("llm_pd_eks_tools.plan.preview", *args), Exit.USAGE)


# -- one line, however many problems ---------------------------------------------------------------


def test_preflight_names_every_config_problem_on_one_line(tmp_path):
    root = tmp_path / "repo"
    shutil.copytree(ROOT / "llm_pd_eks", root / "llm_pd_eks", ignore=shutil.ignore_patterns("__pycache__"))
    for package in ("llm_pd_eks_tools", "llm_pd_eks_sizing"):
        shutil.copytree(ROOT / package, root / package, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("Pulumi.yaml", "Pulumi.dev.yaml"):
        shutil.copy(ROOT / name, root / name)
    text = (root / "Pulumi.dev.yaml").read_text()
    (root / "Pulumi.dev.yaml").write_text(text.replace("maxSize: ", "maxSize: -", 2))
    proc = tool("llm_pd_eks_tools.ops.preflight", "--stack", "dev", cwd=root)
    line = one_line(proc, Exit.USAGE)
    assert proc.stderr.count("\n") == 1 and line.count("maxSize") >= 2, line


def test_cost_audit_argument_errors_are_one_line():
    proc = tool("llm_pd_eks_sizing.cost_audit", "--stack", "dev", "--bogus")
    line = one_line(proc, Exit.USAGE)
    assert proc.stderr.count("\n") == 1 and "unrecognized arguments: --bogus" in line
