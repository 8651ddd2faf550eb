"""CI credentials and job limits outlast the longest `pulumi up`: the figure comes from the plans'
own wait limits (llm_pd_eks_tools/plan/up_budget.py), the workflows and ESC files carry it."""

from __future__ import annotations

import pytest
import yaml
from helpers import ROOT, STACKS

from llm_pd_eks_tools.core.stack import load_stack_config
from llm_pd_eks_tools.plan import up_budget
from llm_pd_eks_tools.plan.preview.mockrun import ProgramRun, Registration

WORKFLOWS = ROOT / ".github" / "workflows"
# The jobs that run `pulumi up` (workflow file, job id).
UP_JOBS = [("pulumi-up.yml", "up"), ("review-stack.yml", "up")]


def reg(
    name: str, type_: str, deps: tuple[str, ...] = (), parent: str = "", custom: bool = True, **inputs
) -> Registration:
    return Registration(
        urn=f"urn:{name}",
        type=type_,
        name=name,
        parent=parent,
        custom=custom,
        protect=False,
        provider="",
        dependencies=[f"urn:{d}" for d in deps],
        property_dependencies={},
        inputs=inputs,
        inputs_struct=None,
    )


def test_each_wait_limit_comes_from_the_resource():
    ray = reg("rs", "kubernetes:ray.io/v1:RayService", metadata={"annotations": {"pulumi.com/timeoutSeconds": "5400"}})
    assert up_budget.wait_minutes(ray) == 90
    assert up_budget.wait_minutes(reg("r", up_budget.HELM_RELEASE)) == 5  # 300 s unless its `timeout` says
    assert up_budget.wait_minutes(reg("r", up_budget.HELM_RELEASE, timeout=900)) == 15
    assert up_budget.wait_minutes(reg("ng", "aws:eks/nodeGroup:NodeGroup")) == 60
    assert up_budget.wait_minutes(reg("role", "aws:iam/role:Role")) == 0


def test_the_longest_chain_follows_dependencies_through_components():
    resources = [
        reg("eks", "eks:index:Cluster", custom=False),
        reg("nat", "aws:ec2/natGateway:NatGateway"),
        reg("nodes", "llm-pd-eks:index:Nodes", custom=False),
        reg("ng", "aws:eks/nodeGroup:NodeGroup", ("eks", "nat"), parent="urn:nodes"),
        reg("op", up_budget.HELM_RELEASE, ("nodes",)),  # on the component: waits for its child
        reg("fast", "aws:iam/role:Role", ("eks",)),
    ]
    chain = up_budget.longest_chain(ProgramRun("t", resources, {}))
    assert chain.names == ("eks", "ng", "op") and chain.minutes == 60 + 60 + 5


def test_real_plans_chain_the_cluster_the_nodes_and_the_rayservice(programs):
    chains = {stack: up_budget.longest_chain(programs(stack)) for stack in STACKS}
    for stack, chain in chains.items():
        values, _ = load_stack_config(stack, ROOT)
        ready = yaml.safe_load(values["llm-pd-eks:serving"])["readyTimeoutMinutes"]
        assert chain.names[0] == "cluster-eks" and chain.names[-1] == "llm-rayservice", chain
        assert any(n.endswith("-ng") for n in chain.names), chain
        assert chain.minutes >= 60 + 60 + ready, chain
    budget = up_budget.ci_budget_minutes(chains.values())
    # a cut-over retires the old GPU group in the same `up`: its delete follows the chain
    assert all(c.delete_minutes == 60 for c in chains.values())
    longest = max(c.minutes + c.delete_minutes for c in chains.values())
    assert (
        budget % 60 == 0
        and longest + up_budget.JOB_STEPS_MINUTES <= budget < longest + up_budget.JOB_STEPS_MINUTES + 60
    )
    assert budget <= up_budget.HOSTED_JOB_LIMIT_MINUTES and budget <= up_budget.ROLE_SESSION_LIMIT_MINUTES


def test_a_cutover_delete_is_counted_after_the_chain():
    """The old node group of a cut-over is deleted after everything else: 60 min on top of the chain."""
    plain = ProgramRun("t", [reg("role", "aws:iam/role:Role"), reg("nat", "aws:ec2/natGateway:NatGateway")], {})
    with_group = ProgramRun("t", [*plain.resources, reg("ng", "aws:eks/nodeGroup:NodeGroup")], {})
    assert up_budget.longest_chain(plain).delete_minutes == 0
    chain = up_budget.longest_chain(with_group)
    assert chain.minutes == 60 and chain.delete_minutes == 60
    # 60 of chain + 60 of delete + the job's steps: past two hours, so three
    assert up_budget.ci_budget_minutes([chain]) == 180
    assert up_budget.ci_budget_minutes([up_budget.Chain("t", 60, ("ng",))]) == 120


@pytest.fixture(scope="module")
def budget(programs) -> int:
    return up_budget.ci_budget_minutes(up_budget.longest_chain(programs(s)) for s in STACKS)


def jobs(name: str) -> dict:
    return yaml.safe_load((WORKFLOWS / name).read_text())["jobs"]


def step_with(job: dict, action: str) -> dict:
    (found,) = [s for s in job["steps"] if s.get("uses", "").startswith(action)]
    return found["with"]


@pytest.mark.parametrize("workflow, job", UP_JOBS)
def test_up_jobs_last_as_long_as_the_longest_up(budget, workflow, job):
    up = jobs(workflow)[job]
    assert up["timeout-minutes"] == budget
    assert step_with(up, "aws-actions/configure-aws-credentials@")["role-duration-seconds"] == budget * 60
    assert step_with(up, "pulumi/auth-actions@")["token-expiration"] == budget * 60


def test_every_credential_outlasts_its_job():
    """AWS's OIDC session defaults to 1 h and Pulumi's exchanged token to 2 h: every job states both."""
    for path in sorted(WORKFLOWS.glob("*.yml")):
        for name, job in yaml.safe_load(path.read_text())["jobs"].items():
            for step in job.get("steps", []):
                uses, args = step.get("uses", ""), step.get("with", {})
                if uses.startswith("aws-actions/configure-aws-credentials@"):
                    assert args["role-duration-seconds"] >= job["timeout-minutes"] * 60, (path.name, name)
                if uses.startswith("pulumi/auth-actions@"):
                    assert args["token-expiration"] >= job["timeout-minutes"] * 60, (path.name, name)


def test_people_get_credentials_as_long(budget):
    for stack in ("dev", "staging", "prod"):
        data = yaml.safe_load((ROOT / "esc" / "llm-pd-eks" / f"{stack}-aws.yaml").read_text())
        assert data["values"]["aws"]["login"]["fn::open::aws-login"]["oidc"]["duration"] == f"{budget // 60}h"


TEAM_OR_ORGANIZATION = "urn:pulumi:token-type:access_token:${{ vars.PULUMI_TOKEN_TYPE || 'team' }}"


def test_tokens_are_team_tokens_of_the_jobs_environment():
    """Only publishing the policy pack (an admin action, its own environment) always takes an organization
    token. Deploy and prod-preview jobs (environment-bound, main only) take a team token, or an organization
    token on editions without team tokens (PULUMI_TOKEN_TYPE); jobs that run a pull request's code take a
    team token only, and do not run at all under PULUMI_TOKEN_TYPE=organization."""
    for path in sorted(WORKFLOWS.glob("*.yml")):
        wf = yaml.safe_load(path.read_text())
        pr_code = "pull_request" in wf[True] or path.name == "pulumi-preview.yml"
        for name, job in wf["jobs"].items():
            for step in job.get("steps", []):
                if not step.get("uses", "").startswith("pulumi/auth-actions@"):
                    continue
                kind = step["with"]["requested-token-type"]
                if (path.name, name) == ("policy-publish.yml", "publish"):
                    assert kind.endswith(":organization") and job["environment"] == "policy-publish"
                elif pr_code:
                    assert kind.endswith(":team") and step["with"]["scope"].startswith("team:"), (path.name, name)
                    gate = str(job.get("if", "")) or str(
                        yaml.safe_load((WORKFLOWS / "pull-request.yml").read_text())["jobs"]["cloud-preview"]["if"]
                    )
                    assert "vars.PULUMI_TOKEN_TYPE != 'organization'" in gate, (path.name, name)
                else:
                    assert kind == TEAM_OR_ORGANIZATION and job["environment"].startswith("${{ inputs.stack }}")
                    assert step["with"]["scope"].startswith(
                        "${{ vars.PULUMI_TOKEN_TYPE != 'organization' && format('team:"
                    )
    up = jobs("pulumi-up.yml")["up"]
    assert up["environment"] == "${{ inputs.stack }}"
    assert "inputs.stack" in step_with(up, "pulumi/auth-actions@")["scope"]
