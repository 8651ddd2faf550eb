"""The bootstrap's resources: AWS (OIDC providers, roles), Pulumi Cloud (teams, permissions, token
policies) and GitHub (environments, branch policies, variables, the subject template)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, TypeVar

import pulumi
import pulumi_aws as aws
import pulumi_github as github
import pulumi_pulumiservice as ps
import yaml

from .permissions import deploy_policy, preview_policy
from .settings import MAIN_BRANCH, PREVIEW_SESSION_MINUTES, PROJECT, UP_BUDGET_MINUTES, BootstrapConfig
from .trust import (
    GITHUB_ISSUER,
    PULUMI_ISSUER,
    SUBJECT_CLAIM_KEYS,
    environment_subject,
    esc_subject,
    pull_request_subject,
    trust_policy,
)

R = TypeVar("R", bound=pulumi.Resource)
ROOT = Path(__file__).resolve().parent.parent  # the main program's checkout: its stack files
REVIEW_BASE_STACK = "dev"  # review-stack.yml's BASE_STACK: a review stack copies dev's layout
POLICY_PUBLISH = "policy-publish"  # policy-publish.yml's environment, run on tags policy-pack-v*


def stack_region(stack: str, root: Path = ROOT) -> str:
    """The main program's `aws:region` of `stack` (its stack file)."""
    data = yaml.safe_load((root / f"Pulumi.{stack}.yaml").read_text(encoding="utf-8")) or {}
    return str((data.get("config") or {})["aws:region"])


def team_of(stack: str) -> str:
    return f"{PROJECT}-{stack}"


PR_PREVIEW_TEAM = f"{PROJECT}-preview"
REVIEW_TEAM = f"{PROJECT}-review"


class Prerequisites:
    """Everything one bootstrap stack creates; `outputs` is what it exports."""

    def __init__(self, config: BootstrapConfig, root: Path = ROOT):
        self.config, self.root = config, root
        self.roles: dict[str, aws.iam.Role] = {}
        self.checklist: list[str] = []
        self.created: list[pulumi.Resource] = []  # everything registered, in order (outputs wait on it)
        self.github_provider_arn = self._github_provider()
        self.pulumi_provider_arn = self._pulumi_provider()
        self._roles()
        if config.manage_pulumi_cloud:
            self._pulumi_cloud()
        else:
            self.checklist.append(
                "Pulumi Cloud: create the teams, stack and environment permissions and the GitHub issuer's "
                "policies of docs/operations.md, step 1 (managePulumiCloud is false)"
            )
        if config.manage_github:
            self._github()
        else:
            self.checklist.append(
                "GitHub: create the environments, their branch policies and AWS_ROLE_ARN variables, and the "
                "repository's OIDC subject template of docs/operations.md, step 1 (manageGitHub is false)"
            )

    def _add(self, resource: R) -> R:
        self.created.append(resource)
        return resource

    # -- AWS -------------------------------------------------------------------------------------------

    def _github_provider(self) -> pulumi.Input[str]:
        if self.config.github_oidc_provider_arn:
            return self.config.github_oidc_provider_arn
        return self._add(
            aws.iam.OpenIdConnectProvider(
                "github-actions",
                url=f"https://{GITHUB_ISSUER}",
                client_id_lists=["sts.amazonaws.com"],
                tags={"project": PROJECT},
            )
        ).arn

    def _pulumi_provider(self) -> Optional[pulumi.Input[str]]:
        if not self.config.stacks:
            return None
        if self.config.pulumi_oidc_provider_arn:
            return self.config.pulumi_oidc_provider_arn
        return self._add(
            aws.iam.OpenIdConnectProvider(
                "pulumi-esc",
                url=f"https://{PULUMI_ISSUER}",
                client_id_lists=[f"aws:{self.config.pulumi_organization}"],
                tags={"project": PROJECT},
            )
        ).arn

    def _role(
        self, key: str, subjects: list[str], minutes: int, policy: str, esc: Optional[list[str]] = None
    ) -> aws.iam.Role:
        trust = pulumi.Output.all(self.github_provider_arn, self.pulumi_provider_arn or "").apply(
            lambda arns: trust_policy(arns[0], subjects, arns[1], self.config.pulumi_organization, esc or [])
        )
        role = self._add(
            aws.iam.Role(
                key,
                name=f"{PROJECT}-{key}",
                assume_role_policy=trust,
                max_session_duration=minutes * 60,
                tags={"project": PROJECT},
            )
        )
        self._add(aws.iam.RolePolicy(f"{key}-policy", role=role.id, policy=policy))
        self.roles[key] = role
        return role

    def _roles(self) -> None:
        repo, c = self.config.github_repository, self.config
        for stack in c.stacks:
            self._role(
                f"{stack}-deploy",
                [environment_subject(repo, stack)],
                UP_BUDGET_MINUTES,
                deploy_policy([stack_region(stack, self.root)]),
                esc=[esc_subject(c.pulumi_organization, stack)],
            )
        previewed = c.pr_preview_stacks + c.preview_first_stacks
        if previewed:
            subjects = [pull_request_subject(repo)] if c.pr_preview_stacks else []
            subjects += [environment_subject(repo, f"{s}-preview") for s in c.preview_first_stacks]
            regions = [stack_region(s, self.root) for s in previewed]
            self._role("preview", subjects, PREVIEW_SESSION_MINUTES, preview_policy(regions))
        if c.review_stacks:
            subjects = [environment_subject(repo, "review", "refs/pull/*/merge"), environment_subject(repo, "review")]
            region = stack_region(REVIEW_BASE_STACK, self.root)
            self._role("review", subjects, UP_BUDGET_MINUTES, deploy_policy([region]))

    # -- Pulumi Cloud ----------------------------------------------------------------------------------

    def _team(self, name: str, description: str) -> ps.Team:
        return self._add(
            ps.Team(
                name,
                organization_name=self.config.pulumi_organization,
                team_type="pulumi",
                name=name,
                display_name=name,
                description=description,
            )
        )

    def _grant(self, team: ps.Team, key: str, stack: str, permission: ps.TeamStackPermissionScope) -> None:
        org = self.config.pulumi_organization
        self._add(
            ps.TeamStackPermission(
                f"{key}-{stack}",
                organization=org,
                project=PROJECT,
                stack=stack,
                team=team.name,
                permission=permission,
            )
        )
        self._add(
            ps.TeamEnvironmentPermission(
                f"{key}-{stack}-env",
                organization=org,
                project=PROJECT,
                environment=stack,
                team=team.name,
                permission=ps.EnvironmentPermission.OPEN,
            )
        )

    def _pulumi_cloud(self) -> None:
        c = self.config
        if c.pulumi_token_type == "team":
            for stack in c.stacks:
                name = team_of(stack)
                self._grant(self._team(name, f"deploys {stack}"), name, stack, ps.TeamStackPermissionScope.EDIT)
            for stack in c.preview_first_stacks:
                name = team_of(f"{stack}-preview")
                team = self._team(name, f"previews {stack} before its approval")
                self._grant(team, name, stack, ps.TeamStackPermissionScope.READ)
            if c.pr_preview_stacks:
                team = self._team(PR_PREVIEW_TEAM, "pull-request previews, never prod")
                for stack in c.pr_preview_stacks:
                    self._grant(team, PR_PREVIEW_TEAM, stack, ps.TeamStackPermissionScope.READ)
            if c.review_stacks:
                self._team(REVIEW_TEAM, "review stacks pr-<N>")
                self.checklist.append(
                    f"Pulumi Cloud: let team {REVIEW_TEAM} create stacks in project {PROJECT} (organization "
                    "settings, default stack permissions): pr-<N> stacks do not exist before their first up"
                )
        if c.primary:
            self._add(
                ps.OidcIssuer(
                    "github-actions",
                    organization=c.pulumi_organization,
                    name="github-actions",
                    url=f"https://{GITHUB_ISSUER}",
                    max_expiration_seconds=UP_BUDGET_MINUTES * 60,
                    policies=token_policies(c),
                )
            )

    # -- GitHub ----------------------------------------------------------------------------------------

    def _github(self) -> None:
        c = self.config
        opts = pulumi.ResourceOptions(provider=github.Provider("github", owner=c.owner))
        repo = c.repository
        if c.primary:
            self._add(
                github.ActionsRepositoryOidcSubjectClaimCustomizationTemplate(
                    "oidc-subject",
                    repository=repo,
                    use_default=False,
                    include_claim_keys=list(SUBJECT_CLAIM_KEYS),
                    opts=opts,
                )
            )
            self._add(
                github.ActionsVariable(
                    "pulumi-org", repository=repo, variable_name="PULUMI_ORG", value=c.pulumi_organization, opts=opts
                )
            )
            if c.pulumi_token_type == "organization":
                self._add(
                    github.ActionsVariable(
                        "pulumi-token-type",
                        repository=repo,
                        variable_name="PULUMI_TOKEN_TYPE",
                        value="organization",
                        opts=opts,
                    )
                )
            self._environment(POLICY_PUBLISH, None, opts, tag_pattern="policy-pack-v*")
        for stack in c.stacks:
            self._environment(
                stack, self.roles[f"{stack}-deploy"].arn, opts, reviewers=c.prod_reviewers if stack == "prod" else []
            )
        for stack in c.preview_first_stacks:
            self._environment(f"{stack}-preview", self.roles["preview"].arn, opts)
        if c.pr_preview_stacks:
            self._add(
                github.ActionsVariable(
                    "preview-role",
                    repository=repo,
                    variable_name="AWS_PREVIEW_ROLE_ARN",
                    value=self.roles["preview"].arn,
                    opts=opts,
                )
            )
        if c.review_stacks:
            self._environment("review", self.roles["review"].arn, opts, branch=None)

    def _environment(
        self,
        name: str,
        role_arn: Optional[pulumi.Input[str]],
        opts: pulumi.ResourceOptions,
        reviewers: Optional[list[int]] = None,
        branch: Optional[str] = MAIN_BRANCH,
        tag_pattern: Optional[str] = None,
    ) -> None:
        """A GitHub environment: deployable from `branch` (or tags matching `tag_pattern`) only, with its
        reviewers and its role; `branch=None` and no tag: any ref (a review stack runs a PR's ref)."""
        repo = self.config.repository
        restricted = branch is not None or tag_pattern is not None
        env = self._add(
            github.RepositoryEnvironment(
                f"env-{name}",
                repository=repo,
                environment=name,
                prevent_self_review=bool(reviewers),
                can_admins_bypass=not reviewers,  # an approval no administrator skips
                reviewers=[github.RepositoryEnvironmentReviewerArgs(users=reviewers)] if reviewers else None,
                deployment_branch_policy=github.RepositoryEnvironmentDeploymentBranchPolicyArgs(
                    protected_branches=False, custom_branch_policies=True
                )
                if restricted
                else None,
                opts=opts,
            )
        )
        child = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[env]))
        if restricted:
            self._add(
                github.RepositoryEnvironmentDeploymentPolicy(
                    f"env-{name}-ref",
                    repository=repo,
                    environment=name,
                    opts=child,
                    **({"tag_pattern": tag_pattern} if tag_pattern else {"branch_pattern": branch}),
                )
            )
        if role_arn is not None:
            self._add(
                github.ActionsEnvironmentVariable(
                    f"env-{name}-role",
                    repository=repo,
                    environment=name,
                    variable_name="AWS_ROLE_ARN",
                    value=role_arn,
                    opts=child,
                )
            )

    @property
    def outputs(self) -> dict[str, Any]:
        return {
            "roleArns": {key: role.arn for key, role in self.roles.items()},
            "githubOidcProviderArn": self.github_provider_arn,
            "checklist": self.checklist,
        }


def token_policies(c: BootstrapConfig) -> list[ps.AuthPolicyDefinitionArgs]:
    """The GitHub issuer's policies: which job (audience and branch-bound subject) gets which token."""
    repo, aud = c.github_repository, f"urn:pulumi:org:{c.pulumi_organization}"

    def allow(subject: str, team: str = "", admin: bool = False) -> ps.AuthPolicyDefinitionArgs:
        rules = {"aud": aud, "sub": subject}
        if team:
            return ps.AuthPolicyDefinitionArgs(
                decision=ps.AuthPolicyDecision.ALLOW,
                token_type=ps.AuthPolicyTokenType.TEAM,
                team_name=team,
                rules=rules,
            )
        level = ps.AuthPolicyPermissionLevel.ADMIN if admin else ps.AuthPolicyPermissionLevel.STANDARD
        return ps.AuthPolicyDefinitionArgs(
            decision=ps.AuthPolicyDecision.ALLOW,
            token_type=ps.AuthPolicyTokenType.ORGANIZATION,
            authorized_permissions=[level],
            rules=rules,
        )

    publish = environment_subject(repo, POLICY_PUBLISH, "refs/tags/policy-pack-v*")
    policies = [allow(publish, admin=True)]
    team = c.pulumi_token_type == "team"
    for stack in c.every_stack:
        policies.append(allow(environment_subject(repo, stack), team_of(stack) if team else ""))
        if stack in ("prod",):
            policies.append(
                allow(environment_subject(repo, f"{stack}-preview"), team_of(f"{stack}-preview") if team else "")
            )
    if team:
        policies.append(allow(pull_request_subject(repo), PR_PREVIEW_TEAM))
        if c.review_stacks:
            policies.append(allow(environment_subject(repo, "review", "refs/pull/*/merge"), REVIEW_TEAM))
            policies.append(allow(environment_subject(repo, "review"), REVIEW_TEAM))
    return policies
