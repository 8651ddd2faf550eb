"""`cluster.adminPrincipalArns` and `cluster.previewPrincipalArns`: strict, one access entry per
principal, example accounts flagged as placeholders, free to differ between environments."""

from __future__ import annotations

from fnmatch import fnmatchcase

from helpers import config_problems, merged, validate_values

from llm_pd_eks.config import PROJECT
from llm_pd_eks_tools.gates.placeholders import find_placeholders
from llm_pd_eks_tools.gates.promote_check import PER_ENVIRONMENT

GOOD = {
    "network": {"vpcCidr": "10.0.0.0/16", "availabilityZones": ["us-west-2a", "us-west-2b"]},
    "gpuNodes": {"instanceType": "g6e.12xlarge", "availabilityZone": "us-west-2a"},
}
ADMIN = "arn:aws:iam::210987654321:role/platform-admins"
PREVIEW = "arn:aws:iam::210987654321:role/llm-pd-eks-preview"


def _cluster(**keys) -> dict:
    return merged(GOOD, {"cluster": keys})


def test_both_lists_are_read():
    cluster = validate_values(_cluster(adminPrincipalArns=[ADMIN], previewPrincipalArns=[PREVIEW])).cluster
    assert cluster.admin_principal_arns == [ADMIN] and cluster.preview_principal_arns == [PREVIEW]


def test_a_preview_principal_must_be_a_role_or_user_not_a_session():
    session = "arn:aws:sts::210987654321:assumed-role/llm-pd-eks-preview/gh-run-1"
    (problem,) = config_problems(_cluster(previewPrincipalArns=[session]))
    assert problem.startswith(f"{PROJECT}:cluster.previewPrincipalArns") and "STS session" in problem
    (problem,) = config_problems(_cluster(previewPrincipalArns=["llm-pd-eks-preview"]))
    assert "is not an IAM role or user ARN" in problem


def test_one_principal_in_both_lists_is_refused():
    (problem,) = config_problems(_cluster(adminPrincipalArns=[ADMIN], previewPrincipalArns=[ADMIN]))
    assert "both adminPrincipalArns and previewPrincipalArns" in problem and "one access entry" in problem


def test_an_example_account_in_the_preview_list_is_a_placeholder():
    config = validate_values(_cluster(previewPrincipalArns=["arn:aws:iam::123456789012:role/preview"]))
    assert [p.key for p in find_placeholders(config, None) if "Principal" in p.key] == [
        f"{PROJECT}:cluster.previewPrincipalArns"
    ]


def test_principals_may_differ_between_environments():
    for key in ("adminPrincipalArns", "previewPrincipalArns"):
        assert any(fnmatchcase(f"{PROJECT}:cluster.{key}", glob) for glob in PER_ENVIRONMENT)


def test_a_protected_stack_needs_an_admin_besides_the_deploy_role():
    """The deploy gate refuses it (a placeholder finding); an unprotected stack is left to its owner."""
    key = f"{PROJECT}:cluster.adminPrincipalArns"
    protected = validate_values(merged(GOOD, {"protect": True}))
    (found,) = [p for p in find_placeholders(protected, None) if p.key == key]
    assert "deploy role" in str(found) and "docs/cluster-access.md" in str(found)
    named = validate_values(merged(GOOD, {"protect": True, "cluster": {"adminPrincipalArns": [ADMIN]}}))
    assert [p for p in find_placeholders(named, None) if p.key == key] == []
    assert [p for p in find_placeholders(validate_values(GOOD), None) if p.key == key] == []
