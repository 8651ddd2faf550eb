"""CI (.ci/run) and the GitHub workflows run the same make targets, and nothing installs around make."""

from __future__ import annotations

import re

import yaml
from helpers import ROOT

WORKFLOWS = ROOT / ".github" / "workflows"


def _targets(text: str) -> set[str]:
    return set(re.findall(r"(?m)^\s*(?:-\s*run:\s*)?make\s+([a-z][a-z-]*)", text))


def _workflow_runs() -> str:
    runs = []
    for path in WORKFLOWS.glob("*.yml"):
        for job in yaml.safe_load(path.read_text())["jobs"].values():
            runs += [step["run"] for step in job.get("steps", []) if "run" in step]
    return "\n".join(runs)


def test_every_ci_target_runs_in_the_pull_request_workflow():
    ci = _targets((ROOT / ".ci" / "run").read_text())
    pull_request = yaml.safe_load((WORKFLOWS / "pull-request.yml").read_text())
    pr_runs = "\n".join(s["run"] for j in pull_request["jobs"].values() for s in j.get("steps", []) if "run" in s)
    assert {"test", "lint", "preview"} <= ci
    assert ci <= _targets(pr_runs), ci - _targets(pr_runs)


def test_ci_installs_nothing_itself():
    """What the tests need is installed by the make targets, so CI and a developer's `make test` agree."""
    ci = (ROOT / ".ci" / "run").read_text()
    assert not re.search(r"(?m)^[^#]*\b(apt-get|pip|uv)\s+install", ci)
    assert not re.search(
        r"(?m)^[^#]*\b(apt-get|pip install|uv pip)\b", _workflow_runs().replace("policies/.venv/bin/pip", "")
    )


def test_workflow_caches_are_uv_caches_keyed_by_the_locks():
    for path in WORKFLOWS.glob("*.yml"):
        for job in yaml.safe_load(path.read_text())["jobs"].values():
            for step in job.get("steps", []):
                uses = step.get("uses", "")
                if uses.startswith("actions/setup-python@"):
                    assert "cache" not in step.get("with", {}), f"{path.name}: setup-python caches pip, make uses uv"
                if uses.startswith("actions/cache@"):
                    assert step["with"]["path"] == "~/.cache/uv"
                    assert "hashFiles('requirements*.txt')" in step["with"]["key"]
