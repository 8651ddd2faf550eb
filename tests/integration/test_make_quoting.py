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


def make(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAKE", "MFLAGS", "KUBECONFIG"))}
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


def test_every_tool_recipe_passes_variables_quoted():
    """A `$(VAR)` of the user's in a recipe line is always inside `$(call q,...)`."""
    user_vars = ("STACK", "WORKLOAD", "ENDPOINT", "KUBECONFIG", "SINCE", "TIMEOUT", "BASE", "FROM", "TO", "RUNNER")
    user_vars += ("PROMETHEUS", "NIXLBENCH")
    recipes = [line for line in (ROOT / "Makefile").read_text().splitlines() if line.startswith("\t")]
    for line in recipes:
        bare = re.sub(r"\$\(call q,\$\([A-Z_]+\)\)", "", line)
        bare = re.sub(r"\$\(if \$\([A-Z_]+\),", "", bare)  # `$(if $(VAR),--opt=...)`: the test, not the value
        for name in user_vars:
            assert f"$({name})" not in bare, line


def test_make_calibrate_gives_calibrate_its_own_timeout():
    proc = make("-n", "calibrate", "STACK=dev")
    assert "--timeout='1800'" in proc.stdout, proc.stdout
    proc = make("-n", "verify", "STACK=dev")
    assert "--timeout='600'" in proc.stdout, proc.stdout
