"""Every make variable reaches its tool as one quoted `--opt='value'` word (the Makefile's `q`): no
value reaches the shell, and a value starting with `-` is a value, never an option.

Each case runs `make` for real with a value that would create a marker file if the shell saw it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT


def make(*args: str, env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAKE", "MFLAGS", "KUBECONFIG"))}
    env.update(env_extra or {})
    return subprocess.run(
        ["make", "--no-print-directory", f"PY={sys.executable}", "STAMP=", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def injected(marker: Path) -> str:
    return f"x'; touch {marker}; echo '"


@pytest.mark.parametrize(
    "target, variable, extra",
    [
        ("size", "STACK", []),
        ("size", "WORKLOAD", ["STACK=dev"]),
        ("cost-audit", "STACK", []),
        ("cost-audit", "SINCE", ["STACK=dev"]),
        ("cost-audit", "PROMETHEUS", ["STACK=dev", "SINCE=bad"]),
        ("calibrate", "STACK", []),
        ("calibrate", "KUBECONFIG", ["STACK=dev", "TIMEOUT=bad"]),
        ("calibrate", "ENDPOINT", ["STACK=dev", "TIMEOUT=bad"]),
        ("calibrate", "TIMEOUT", ["STACK=dev"]),
        ("verify", "KUBECONFIG", ["STACK=nosuch"]),
        ("verify", "TIMEOUT", ["STACK=dev"]),
        ("preview-diff", "BASE", ["STACK=nosuch"]),
    ],
)
def test_no_make_variable_reaches_the_shell(tmp_path, target, variable, extra):
    marker = tmp_path / "ran"
    proc = make(target, *extra, f"{variable}={injected(marker)}")
    assert not marker.exists(), proc.stderr
    assert "Error 2" in proc.stderr.splitlines()[-1]  # the tool's usage error, not the shell's


@pytest.mark.parametrize("target", ["size", "cost-audit", "calibrate", "preview-diff"])
def test_a_stack_starting_with_a_dash_is_a_stack_name(target):
    proc = make(target, "STACK=-canary", "BASE=HEAD")
    assert "expected one argument" not in proc.stderr and "unrecognized arguments" not in proc.stderr
    assert "Pulumi.-canary.yaml" in proc.stderr, proc.stderr


# Every variable a user may give make; the Makefile's USER_VARS must name each (it unexports them).
USER_VARS = ("STACK", "WORKLOAD", "ENDPOINT", "KUBECONFIG", "SINCE", "TIMEOUT", "BASE", "FROM", "TO", "RUNNER")
USER_VARS += ("PROMETHEUS", "NIXLBENCH", "JSON", "STRICT", "WRITE", "PULUMI_STACK")
USER_VARS += ("FIRST", "PULUMI_EKS", "PULUMI_EKS_COMMIT", "REFERENCE", "RESOURCES", "SHAPE")

MAKE_SYNTAX_CASES = [
    ("size", "STACK", []),
    ("size", "WORKLOAD", ["STACK=dev"]),
    ("size", "JSON", ["STACK=nosuch"]),
    ("size", "WRITE", ["STACK=nosuch"]),
    ("preflight", "STRICT", ["STACK=nosuch"]),
    ("cost-audit", "SINCE", ["STACK=dev"]),
    ("cost-audit", "PROMETHEUS", ["STACK=dev", "SINCE=bad"]),
    ("calibrate", "ENDPOINT", ["STACK=dev", "TIMEOUT=bad"]),
    ("calibrate", "NIXLBENCH", ["STACK=dev", "TIMEOUT=bad"]),
    ("calibrate", "TIMEOUT", ["STACK=dev"]),
    ("verify", "KUBECONFIG", ["STACK=nosuch"]),
    ("placeholders", "RUNNER", ["STACK=nosuch"]),
    ("promote-check", "FROM", []),
    ("promote-check", "TO", []),
    ("up-guard", "PULUMI_STACK", []),
    ("destroy-check", "STACK", []),
    ("cutover-replicas", "STACK", []),
    ("preview-diff", "BASE", ["STACK=nosuch"]),
]


@pytest.mark.parametrize("where", ["command line", "environment"])
@pytest.mark.parametrize("target, variable, extra", MAKE_SYNTAX_CASES)
def test_make_never_expands_what_it_is_given(tmp_path, where, target, variable, extra):
    """`$(shell ...)` in a value is text for the tool, from the command line or the environment alike."""
    marker = tmp_path / "expanded"
    value = f"$(shell touch {marker})x"
    if where == "command line":
        proc = make(target, *extra, f"{variable}={value}")
    else:
        proc = make(target, *extra, env_extra={variable: value})
    assert not marker.exists(), proc.stderr
    assert proc.returncode == 2, proc.stderr  # the tool refused the value (make reports any failure as 2)


def test_the_makefile_unexports_every_user_variable():
    text = (ROOT / "Makefile").read_text()
    declared = re.findall(r"^USER_VARS :?\+?= (.*)$", text, re.M)
    assert declared and {name for line in declared for name in line.split()} == set(USER_VARS)
    assert "unexport $(USER_VARS)" in text


def test_every_tool_recipe_passes_variables_quoted():
    """A user's variable in a recipe line is read unexpanded (`$(value NAME)`), as one quoted word."""
    recipes = [line for line in (ROOT / "Makefile").read_text().splitlines() if line.startswith("\t")]
    assert any("$(call v,STACK)" in line for line in recipes)
    for line in recipes:
        for name in USER_VARS:
            assert f"$({name})" not in line, line


def test_make_calibrate_gives_calibrate_its_own_timeout():
    proc = make("-n", "calibrate", "STACK=dev")
    assert "--timeout='1800'" in proc.stdout, proc.stdout
    proc = make("-n", "verify", "STACK=dev")
    assert "--timeout='600'" in proc.stdout, proc.stdout
