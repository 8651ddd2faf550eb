"""docs/operations.md is an ordered path whose every quoted value is the value of the file it quotes:
the up budget and what carries it, the variables the workflows read, the token each job gets, the
branch-bound subjects, the alerting defaults, and every command, target, module and path it names."""

from __future__ import annotations

import re

import pytest
import yaml
from helpers import ROOT

from bootstrap import trust
from bootstrap.settings import PREVIEW_SESSION_MINUTES, UP_BUDGET_MINUTES
from llm_pd_eks.alerts import EKS_CONTROL_PLANE_ALERTS
from llm_pd_eks.config.observability import AlertingConfig
from llm_pd_eks.observability import EKS_MANAGED_COMPONENTS, EKS_MANAGED_RULE_GROUPS
from llm_pd_eks_tools.plan import up_budget

DOC = (ROOT / "docs" / "operations.md").read_text()
WORKFLOWS = ROOT / ".github" / "workflows"
STEPS = ["bootstrap", "the stack's config", "the first `up` of dev", "verify dev", "turn CI on", "promote", "destroy"]
REPO = "<owner>/<repo>"


def section(heading: str) -> str:
    start = DOC.index(heading)
    following = re.search(r"(?m)^#{2,3} ", DOC[start + len(heading) :])
    return DOC[start : start + len(heading) + (following.start() if following else len(DOC))]


def test_the_path_is_in_order():
    headings = re.findall(r"(?m)^### Step (\d): (.+)$", DOC)
    assert [int(n) for n, _ in headings] == list(range(1, len(STEPS) + 1))
    for (_, title), expected in zip(headings, STEPS):
        assert title.startswith(expected), title
    assert DOC.index("## The path") < DOC.index("## Credentials and job limits")


def test_the_budget_block_is_the_tools_output(capsys):
    """The console block under "Credentials and job limits" is what `python -m llm_pd_eks_tools.plan.up_budget`
    prints now."""
    assert up_budget.main([]) == 0
    printed = capsys.readouterr().out.strip().splitlines()
    block = re.search(r"```console\n\$ python -m llm_pd_eks_tools.plan.up_budget\n(.*?)```", DOC, re.S)
    assert block and block.group(1).strip().splitlines() == printed


def _budget() -> int:
    return up_budget.ci_budget_minutes(up_budget.stack_chains())


def test_every_quoted_length_is_the_one_in_use():
    budget = _budget()
    assert UP_BUDGET_MINUTES == budget
    credentials = section("## Credentials and job limits")
    assert f"The budget ({budget} min)" in credentials
    up = yaml.safe_load((WORKFLOWS / "pulumi-up.yml").read_text())["jobs"]["up"]
    (aws,) = [s for s in up["steps"] if s.get("uses", "").startswith("aws-actions/")]
    (token,) = [s for s in up["steps"] if s.get("uses", "").startswith("pulumi/auth-actions@")]
    assert f"`role-duration-seconds` ({aws['with']['role-duration-seconds']})" in credentials
    assert f"`token-expiration` ({token['with']['token-expiration']})" in credentials
    assert f"`MaxSessionDuration` ({UP_BUDGET_MINUTES * 60} s" in credentials
    for stack in ("dev", "staging", "prod"):
        esc = yaml.safe_load((ROOT / "esc" / "llm-pd-eks" / f"{stack}-aws.yaml").read_text())
        duration = esc["values"]["aws"]["login"]["fn::open::aws-login"]["oidc"]["duration"]
        assert f"`duration` (`{duration}`)" in credentials
    # no other length for the same things anywhere on the page
    assert set(re.findall(r"duration: (\w+)", DOC)) == {f"{budget // 60}h"}
    assert set(re.findall(r"`role-duration-seconds: (\d+)`", DOC)) == {str(budget * 60)}
    assert f"`MaxSessionDuration` is `{UP_BUDGET_MINUTES * 60}` s" in DOC
    assert f"the preview role's is `{PREVIEW_SESSION_MINUTES * 60}` s" in DOC


def _workflow_vars() -> set[str]:
    return {v for p in WORKFLOWS.glob("*.yml") for v in re.findall(r"vars\.([A-Z0-9_]+)", p.read_text())}


def test_the_variables_table_is_what_the_workflows_read():
    table = section("### Step 5: turn CI on")
    rows = re.findall(r"(?m)^\| `([A-Z_<>]+)` \| (repository|each environment) \|", table)
    listed = set()
    for name, _ in rows:
        listed |= {name.replace("<STACK>", s) for s in ("DEV", "STAGING", "PROD")} if "<STACK>" in name else {name}
    used = _workflow_vars()
    # the preview runner of prod is never read: prod is not previewed from a pull request
    assert used <= listed, used - listed
    assert listed - {"PREVIEW_RUNNER_PROD"} <= used, listed - used
    job_ifs = {
        v
        for p in WORKFLOWS.glob("*.yml")
        for job in yaml.safe_load(p.read_text())["jobs"].values()
        for v in re.findall(r"vars\.([A-Z_]+)", str(job.get("if", "")))
    }
    where = dict(rows)
    assert all(where[v] == "repository" for v in job_ifs), job_ifs


def test_the_token_table_is_what_each_workflow_requests():
    tokens = section("## Pulumi Cloud tokens")
    for path in sorted(WORKFLOWS.glob("*.yml")):
        for job_id, job in yaml.safe_load(path.read_text())["jobs"].items():
            for step in job.get("steps", []):
                if not step.get("uses", "").startswith("pulumi/auth-actions@"):
                    continue
                kind = step["with"]["requested-token-type"]
                (row,) = [
                    r
                    for r in tokens.splitlines()
                    if r.startswith(f"| `{path.name}`") and (path.name != "pulumi-up.yml" or f"`{job_id}`" in r)
                ]
                if kind.endswith(":organization"):
                    assert "organization token" in row, row
                else:
                    assert "| team `" in row, row
    assert "Stack Read includes decrypting" in tokens


def test_the_subjects_are_the_bootstraps():
    for subject in (
        trust.environment_subject(REPO, "prod"),
        trust.environment_subject(REPO, "prod-preview"),
        trust.pull_request_subject(REPO),
        trust.environment_subject(REPO, "review", "refs/pull/*/merge"),
        trust.environment_subject(REPO, "policy-publish", "refs/tags/policy-pack-v*"),
    ):
        assert f"`{subject}`" in DOC, subject
    assert "claims `repo`, `context`, `ref`" in DOC and trust.SUBJECT_CLAIM_KEYS == ("repo", "context", "ref")


def test_the_alerting_values_are_the_configs_and_the_programs():
    alerts = section("## Alerts")
    defaults = AlertingConfig()
    assert f"`heartbeatInterval` (`{defaults.heartbeat_interval}`)" in alerts
    assert (
        f"`observability.alerting.pageMinRequestRate` requests per second (`{defaults.page_min_request_rate:g}`"
        in alerts
    )
    for name in EKS_CONTROL_PLANE_ALERTS:
        assert f"`{name}`" in alerts, name
    for component in EKS_MANAGED_COMPONENTS:
        assert f"`{component}`" in alerts
    for group in EKS_MANAGED_RULE_GROUPS:
        assert f"`{group}`" in alerts or f"defaultRules.rules.{group}`" in alerts


def _makefile_targets() -> set[str]:
    return set(re.findall(r"(?m)^([a-z][a-z-]*):", (ROOT / "Makefile").read_text()))


@pytest.mark.parametrize("kind", ["make", "module", "path"])
def test_every_command_target_module_and_path_exists(kind):
    if kind == "make":
        named = set(re.findall(r"\bmake ([a-z][a-z-]+)", DOC)) - {"sure"}
        assert named and named <= _makefile_targets(), named - _makefile_targets()
    elif kind == "module":
        named = set(re.findall(r"python -m (llm_pd_eks_tools(?:\.[a-z_]+)+)", DOC))
        missing = {
            m
            for m in named
            if not (ROOT / (m.replace(".", "/") + ".py")).exists() and not (ROOT / m.replace(".", "/")).is_dir()
        }
        assert named and not missing, missing
    else:
        named = set(
            re.findall(
                r"`((?:\.github/workflows|esc/llm-pd-eks|bootstrap|llm_pd_eks_tools|llm_pd_eks|tests)/[\w./-]+)`", DOC
            )
        )
        missing = {p for p in named if "<" not in p and not (ROOT / p).exists()}
        assert named and not missing, missing
