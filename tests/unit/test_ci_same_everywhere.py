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


def test_every_pulumi_cli_and_backend_is_the_same_everywhere():
    """One CLI release and one backend URL in every workflow: each installs `$PULUMI_VERSION` (the curl
    installer or the action's `pulumi-version`), each workflow pins the same version, and the backend
    its CLI and its token exchange use is the repository's PULUMI_BACKEND_URL."""
    versions = set()
    for path in sorted(WORKFLOWS.glob("*.yml")):
        wf = yaml.safe_load(path.read_text())
        env = wf.get("env", {})
        uses_pulumi = False
        for job in wf["jobs"].values():
            for step in job.get("steps", []):
                run, uses = step.get("run", ""), step.get("uses", "")
                if "get.pulumi.com" in run:
                    uses_pulumi = True
                    assert '--version "$PULUMI_VERSION"' in run, path.name
                if uses.startswith("pulumi/actions@"):
                    uses_pulumi = True
                    assert step["with"]["pulumi-version"] == "${{ env.PULUMI_VERSION }}", path.name
                if uses.startswith("pulumi/auth-actions@"):
                    uses_pulumi = True
        if uses_pulumi:
            versions.add(env["PULUMI_VERSION"])
            assert env.get("PULUMI_BACKEND_URL") == "${{ vars.PULUMI_BACKEND_URL }}", path.name
    requirements = (ROOT / "requirements.txt").read_text()
    (sdk,) = re.findall(r"(?m)^pulumi==([0-9.]+)", requirements)
    assert versions == {sdk}
