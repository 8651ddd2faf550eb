"""Who may assume each role: GitHub Actions jobs by OIDC subject (branch-bound), and Pulumi ESC.

GitHub's default subject of an environment job, `repo:<owner>/<repo>:environment:<name>`, carries no
branch: any branch a deployment branch policy lets through would do. The repository's OIDC subject
template (program.py sets it: include_claim_keys repo, context, ref; GitHub Docs, "Customizing the
subject claims for an organization or repository") adds it:
`repo:<owner>/<repo>:environment:prod:ref:refs/heads/main`, and for a pull request
`repo:<owner>/<repo>:pull_request:ref:refs/pull/<N>/merge`. Every subject below has that shape.

Pulumi ESC's `aws-login` presents a token of issuer api.pulumi.com/oidc, audience `aws:<org>` and
subject `pulumi:environments:org:<org>:env:<project>/<environment>` (Pulumi docs, "Configuring OIDC
for AWS"; read, not run against a real token).
"""

from __future__ import annotations

import json
from typing import Any

from .settings import MAIN_BRANCH, PROJECT

GITHUB_ISSUER = "token.actions.githubusercontent.com"
GITHUB_AUDIENCE = "sts.amazonaws.com"  # aws-actions/configure-aws-credentials' default audience
PULUMI_ISSUER = "api.pulumi.com/oidc"
# The repository's subject template: the branch (ref) after the context.
SUBJECT_CLAIM_KEYS = ("repo", "context", "ref")


def environment_subject(repo: str, environment: str, ref: str = f"refs/heads/{MAIN_BRANCH}") -> str:
    return f"repo:{repo}:environment:{environment}:ref:{ref}"


def pull_request_subject(repo: str) -> str:
    return f"repo:{repo}:pull_request:ref:refs/pull/*/merge"


def esc_subject(org: str, stack: str) -> str:
    """The subject of `esc/llm-pd-eks/<stack>-aws.yaml`'s aws-login."""
    return f"pulumi:environments:org:{org}:env:{PROJECT}/{stack}-aws"


def _statement(provider_arn: str, issuer: str, audience: str, subjects: list[str]) -> dict[str, Any]:
    exact = [s for s in subjects if "*" not in s]
    pattern = [s for s in subjects if "*" in s]
    condition: dict[str, Any] = {"StringEquals": {f"{issuer}:aud": audience}}
    if exact:
        condition["StringEquals"][f"{issuer}:sub"] = exact
    if pattern:
        condition["StringLike"] = {f"{issuer}:sub": pattern}
    return {
        "Effect": "Allow",
        "Principal": {"Federated": provider_arn},
        "Action": "sts:AssumeRoleWithWebIdentity",
        "Condition": condition,
    }


def trust_policy(
    github_provider: str, subjects: list[str], pulumi_provider: str = "", org: str = "", esc_subjects: list[str] = ()
) -> str:
    """A role's trust: the GitHub subjects (each a separate statement's sub list would do; one holds
    them all), and, when given, Pulumi ESC's subjects for the organization's audience."""
    statements = []
    if subjects:
        statements.append(_statement(github_provider, GITHUB_ISSUER, GITHUB_AUDIENCE, subjects))
    if esc_subjects:
        statements.append(_statement(pulumi_provider, PULUMI_ISSUER, f"aws:{org}", list(esc_subjects)))
    return json.dumps({"Version": "2012-10-17", "Statement": statements}, sort_keys=True)
