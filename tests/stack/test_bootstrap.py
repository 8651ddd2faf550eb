"""The bootstrap program (bootstrap/) under Pulumi's mock runtime, as the main program's unit tests run:
what it registers in AWS, Pulumi Cloud and GitHub, and its policies kept in step with the main
program's recorded plans and tools."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import botocore.session
import pulumi
import pydantic
import pytest
import yaml
from helpers import ROOT, STACKS

from bootstrap import permissions
from bootstrap.program import Prerequisites, stack_region, token_policies
from bootstrap.settings import PREVIEW_SESSION_MINUTES, UP_BUDGET_MINUTES, BootstrapConfig
from llm_pd_eks_tools.plan import up_budget
from tests.unit.mocks import install

REPO = "acme/llm-pd-eks"
BASE = {"githubRepository": REPO, "pulumiOrganization": "acme"}
ONE_ACCOUNT = {**BASE, "stacks": ["dev", "staging", "prod"], "reviewStacks": True, "prodReviewers": [4242]}


def run(config: dict[str, Any]):
    """Register the bootstrap under fresh mocks; (mocks, Prerequisites, an Output that resolves once all
    its resources are registered)."""
    mocks = install()
    pre = Prerequisites(BootstrapConfig.model_validate(config))
    done = pulumi.Output.all(*[r.urn for r in pre.created])
    return mocks, pre, done


def inputs_of(mocks, typ: str) -> dict[str, dict]:
    return {r.name: r.inputs for r in mocks.of_type(typ)}


def trust(mocks, name: str) -> dict:
    return json.loads(inputs_of(mocks, "aws:iam/role:Role")[name]["assumeRolePolicy"])


@pulumi.runtime.test
def test_roles_trust_branch_bound_subjects_and_last_the_up_budget():
    mocks, _, done = run(ONE_ACCOUNT)

    def check(_):
        roles = inputs_of(mocks, "aws:iam/role:Role")
        assert set(roles) == {"dev-deploy", "staging-deploy", "prod-deploy", "preview", "review"}
        for stack in ("dev", "staging", "prod"):
            role = roles[f"{stack}-deploy"]
            assert role["maxSessionDuration"] == UP_BUDGET_MINUTES * 60
            github, esc = trust(mocks, f"{stack}-deploy")["Statement"]
            subject = github["Condition"]["StringEquals"]["token.actions.githubusercontent.com:sub"]
            assert subject == [f"repo:{REPO}:environment:{stack}:ref:refs/heads/main"]
            assert "StringLike" not in github["Condition"]  # no wildcard on a deploy role
            assert esc["Condition"]["StringEquals"]["api.pulumi.com/oidc:aud"] == "aws:acme"
            assert esc["Condition"]["StringEquals"]["api.pulumi.com/oidc:sub"] == [
                f"pulumi:environments:org:acme:env:llm-pd-eks/{stack}-aws"
            ]
        assert roles["preview"]["maxSessionDuration"] == PREVIEW_SESSION_MINUTES * 60
        assert roles["review"]["maxSessionDuration"] == UP_BUDGET_MINUTES * 60
        (preview,) = trust(mocks, "preview")["Statement"]
        assert preview["Condition"]["StringEquals"]["token.actions.githubusercontent.com:sub"] == [
            f"repo:{REPO}:environment:prod-preview:ref:refs/heads/main"
        ]
        assert preview["Condition"]["StringLike"]["token.actions.githubusercontent.com:sub"] == [
            f"repo:{REPO}:pull_request:ref:refs/pull/*/merge"
        ]
        providers = inputs_of(mocks, "aws:iam/openIdConnectProvider:OpenIdConnectProvider")
        assert providers["github-actions"]["clientIdLists"] == ["sts.amazonaws.com"]
        assert providers["pulumi-esc"]["url"] == "https://api.pulumi.com/oidc"

    return done.apply(check)


def test_the_deploy_roles_are_the_ones_people_log_in_to():
    """esc/llm-pd-eks/<stack>-aws.yaml opens the role the bootstrap names llm-pd-eks-<stack>-deploy."""
    for stack in ("dev", "staging", "prod"):
        data = yaml.safe_load((ROOT / "esc" / "llm-pd-eks" / f"{stack}-aws.yaml").read_text())
        arn = data["values"]["aws"]["login"]["fn::open::aws-login"]["oidc"]["roleArn"]
        assert arn.endswith(f":role/llm-pd-eks-{stack}-deploy")


def test_the_session_length_is_the_up_budget(programs):
    chains = [up_budget.longest_chain(programs(s)) for s in STACKS]
    assert UP_BUDGET_MINUTES == up_budget.ci_budget_minutes(chains)


def test_the_policies_cover_exactly_the_types_the_plans_hold(programs):
    """A resource type the program starts creating fails here until its actions are named."""
    planned = {r.type for s in STACKS for r in programs(s).resources}
    aws_types = {t for t in planned if t.startswith("aws:")}
    assert all(t.startswith(permissions.NON_AWS_PREFIXES) for t in planned - aws_types), planned - aws_types
    expected = aws_types | set(permissions.EKS_CHILD_TYPES) | set(permissions.CONDITIONAL_TYPES)
    assert set(permissions.TYPE_ACTIONS) == expected


_PREFIX_TO_BOTOCORE = {"servicequotas": "service-quotas"}


def _operations(service: str) -> set[str]:
    session = botocore.session.get_session()
    return set(session.get_service_model(_PREFIX_TO_BOTOCORE.get(service, service)).operation_names)


def test_every_action_is_an_api_operation_of_its_service():
    """Each `svc:Operation` names an operation of botocore's model of that service (a typo never passes)."""
    by_service: dict[str, set[str]] = {}
    for action in permissions.deploy_actions():
        service, operation = action.split(":", 1)
        by_service.setdefault(service, set()).add(operation)
    for service, operations in by_service.items():
        assert operations <= _operations(service), (service, operations - _operations(service))


def _boto_calls(path: Path) -> set[tuple[str, str]]:
    """(client variable, method) of every `<client>.<method>(` and `get_paginator("<op>")` in a tool."""
    calls = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
        ):
            name, method = node.func.value.id, node.func.attr
            if method == "get_paginator" and node.args and isinstance(node.args[0], ast.Constant):
                method = node.args[0].value
            calls.add((name, method))
    return calls


def test_the_tools_calls_are_allowed():
    """Preflight's and the alert gate's boto3 calls, mapped to their IAM actions by botocore."""
    clients = {
        "sts": "sts",
        "ec2": "ec2",
        "quotas": "service-quotas",
        "eks": "eks",
        "sns": "sns",
        "ssm": "ssm",
        "autoscaling": "autoscaling",
    }
    prefixes = {"service-quotas": "servicequotas"}
    session = botocore.session.get_session()
    found = set()
    ops = ROOT / "llm_pd_eks_tools" / "ops"
    tools = [*sorted(ops.glob("preflight*.py")), ops / "alert_delivery.py", ops / "destroy_check.py"]
    assert len(tools) >= 3
    for tool in tools:
        for client, method in _boto_calls(tool):
            if client not in clients or method.startswith(("get_paginator", "meta")):
                continue
            service = clients[client]
            model = session.get_service_model(service)
            operation = next(op for op in model.operation_names if botocore.xform_name(op) == method)
            found.add(f"{prefixes.get(service, service)}:{operation}")
    assert found and found <= set(permissions.TOOL_ACTIONS), found - set(permissions.TOOL_ACTIONS)


def test_the_preview_role_only_reads_and_the_deploy_role_passes_roles_to_eks_and_ec2_only():
    regions = ["us-west-2"]
    (read,) = json.loads(permissions.preview_policy(regions))["Statement"]
    assert read["Action"] and all(permissions.is_read(a) for a in read["Action"])
    assert "eks:DescribeCluster" in read["Action"] and "ec2:DescribeVpcs" in read["Action"]
    assert read["Condition"] == {"StringEquals": {"aws:RequestedRegion": regions}}
    statements = {s["Sid"]: s for s in json.loads(permissions.deploy_policy(regions))["Statement"]}
    assert "iam:PassRole" not in statements["ProgramResources"]["Action"]
    assert statements["PassProgramRoles"]["Condition"]["StringEquals"]["iam:PassedToService"] == [
        "eks.amazonaws.com",
        "ec2.amazonaws.com",
    ]
    assert "ec2:CreateVpc" in statements["ProgramResources"]["Action"]


@pulumi.runtime.test
def test_pulumi_cloud_teams_never_give_a_pull_request_prod():
    mocks, _, done = run(ONE_ACCOUNT)

    def check(_):
        grants = {
            (g["team"], g["stack"], g["permission"])
            for g in inputs_of(mocks, "pulumiservice:index:TeamStackPermission").values()
        }
        assert ("llm-pd-eks-prod", "prod", 102) in grants and ("llm-pd-eks-prod-preview", "prod", 101) in grants
        assert {(t, s) for t, s, _ in grants if t == "llm-pd-eks-preview"} == {
            ("llm-pd-eks-preview", "dev"),
            ("llm-pd-eks-preview", "staging"),
        }
        (issuer,) = inputs_of(mocks, "pulumiservice:index:OidcIssuer").values()
        assert issuer["url"] == "https://token.actions.githubusercontent.com"
        assert issuer["maxExpirationSeconds"] == UP_BUDGET_MINUTES * 60
        by_subject = {p["rules"]["sub"]: p for p in issuer["policies"]}
        assert all(p["rules"]["aud"] == "urn:pulumi:org:acme" for p in issuer["policies"])
        assert by_subject[f"repo:{REPO}:pull_request:ref:refs/pull/*/merge"]["teamName"] == "llm-pd-eks-preview"
        assert by_subject[f"repo:{REPO}:environment:prod:ref:refs/heads/main"]["teamName"] == "llm-pd-eks-prod"
        publish = by_subject[f"repo:{REPO}:environment:policy-publish:ref:refs/tags/policy-pack-v*"]
        assert publish["tokenType"] == "organization" and publish["authorizedPermissions"] == ["admin"]
        assert all(":ref:" in s or s.endswith(":pull_request") for s in by_subject)

    return done.apply(check)


@pulumi.runtime.test
def test_github_environments_bind_roles_branches_and_reviewers():
    mocks, _, done = run(ONE_ACCOUNT)

    def check(_):
        (template,) = inputs_of(
            mocks,
            "github:index/actionsRepositoryOidcSubjectClaimCustomizationTemplate:ActionsRepositoryOidcSubjectClaimCustomizationTemplate",
        ).values()
        assert template["includeClaimKeys"] == ["repo", "context", "ref"] and template["useDefault"] is False
        envs = {
            e["environment"]: e
            for e in inputs_of(mocks, "github:index/repositoryEnvironment:RepositoryEnvironment").values()
        }
        assert set(envs) == {"dev", "staging", "prod", "prod-preview", "review", "policy-publish"}
        assert envs["prod"]["reviewers"] == [{"users": [4242]}] and envs["prod"]["preventSelfReview"] is True
        assert envs["prod"]["canAdminsBypass"] is False
        assert "deploymentBranchPolicy" not in envs["review"]  # a review stack runs a pull request's ref
        refs = {
            p["environment"]: p.get("branchPattern") or p.get("tagPattern")
            for p in inputs_of(
                mocks, "github:index/repositoryEnvironmentDeploymentPolicy:RepositoryEnvironmentDeploymentPolicy"
            ).values()
        }
        assert refs == dict.fromkeys(("dev", "staging", "prod", "prod-preview"), "main") | {
            "policy-publish": "policy-pack-v*"
        }
        roles = {
            v["environment"]: v["value"]
            for v in inputs_of(mocks, "github:index/actionsEnvironmentVariable:ActionsEnvironmentVariable").values()
        }
        assert set(roles) == {"dev", "staging", "prod", "prod-preview", "review"}
        assert roles["prod-preview"] != roles["prod"]  # the read-only preview role, not prod's deploy role
        variables = {
            v["variableName"] for v in inputs_of(mocks, "github:index/actionsVariable:ActionsVariable").values()
        }
        # the switches (DEPLOY_ENABLED, ...) are a person's last step, never the bootstrap's
        assert variables == {"PULUMI_ORG", "AWS_PREVIEW_ROLE_ARN"}

    return done.apply(check)


def test_editions_without_team_tokens_get_organization_tokens_and_no_pull_request_path():
    config = BootstrapConfig.model_validate({**ONE_ACCOUNT, "reviewStacks": False, "pulumiTokenType": "organization"})
    policies = token_policies(config)
    assert all(p.token_type == "organization" for p in policies)
    assert not any("pull_request" in p.rules["sub"] for p in policies)
    assert config.pr_preview_stacks == []
    with pytest.raises(pydantic.ValidationError, match="reviewStacks needs team tokens"):
        BootstrapConfig.model_validate({**ONE_ACCOUNT, "pulumiTokenType": "organization"})


def test_a_prod_account_without_approvers_is_refused_with_every_problem():
    with pytest.raises(pydantic.ValidationError) as raised:
        BootstrapConfig.model_validate({**BASE, "stacks": ["prod"], "githubRepository": "no slash"})
    text = str(raised.value)
    assert "githubRepository" in text or "github_repository" in text
    with pytest.raises(pydantic.ValidationError, match="prodReviewers must name"):
        BootstrapConfig.model_validate({**BASE, "stacks": ["prod"]})


def test_regions_come_from_the_main_programs_stack_files():
    for stack in STACKS:
        assert (
            stack_region(stack) == yaml.safe_load((ROOT / f"Pulumi.{stack}.yaml").read_text())["config"]["aws:region"]
        )


def test_the_bootstrap_stays_out_of_the_main_programs_install():
    main = (ROOT / "requirements.txt").read_text()
    assert "pulumi-github" not in main and "pulumi-pulumiservice" not in main
    own = (ROOT / "bootstrap" / "requirements.txt").read_text()
    assert "pulumi-github==6.15.0" in own and "pulumi-pulumiservice==1.5.0" in own
    project = yaml.safe_load((ROOT / "bootstrap" / "Pulumi.yaml").read_text())
    assert project["name"] == "llm-pd-eks-bootstrap" and project["runtime"]["name"] == "python"


@pytest.fixture
def example_config():
    """Pulumi.example.yaml's config as the engine hands it (plain strings, JSON for lists and booleans)."""
    from llm_pd_eks.pulumi_sdk import runtime_config

    example = yaml.safe_load((ROOT / "bootstrap" / "Pulumi.example.yaml").read_text())["config"]
    runtime_config.set_all_config({k: v if isinstance(v, str) else json.dumps(v) for k, v in example.items()}, [])
    yield
    runtime_config.set_all_config({}, [])


@pulumi.runtime.test
def test_the_entry_point_runs_the_example_stack(example_config):
    """bootstrap/__main__.py under the mocks with the example stack's config: it is valid, every role made."""
    import runpy

    from tests.unit.mocks import PublicMocks

    mocks = PublicMocks()
    pulumi.runtime.set_mocks(mocks, project="llm-pd-eks-bootstrap", stack="example", preview=False)
    program = runpy.run_path(str(ROOT / "bootstrap" / "__main__.py"), run_name="__main__")

    def check(_):
        names = {r.name for r in mocks.of_type("aws:iam/role:Role")}
        assert names == {"dev-deploy", "staging-deploy", "preview", "review"}

    return pulumi.Output.all(*[r.urn for r in program["prerequisites"].created]).apply(check)
