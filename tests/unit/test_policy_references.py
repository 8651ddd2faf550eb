"""gpu-references-in-stack in-process (pulumi_policy's StackValidationArgs / PolicyResource): a known-good
first-preview GPU group whose subnets come from a remote component once, and its launch template version."""

from __future__ import annotations

from typing import Any

from pulumi_policy import PolicyCustomTimeouts, PolicyResource, PolicyResourceOptions, StackValidationArgs
from pulumi_policy.proxy import UNKNOWN_STRING_VALUE as UNKNOWN_STRING

from llm_pd_eks_policy.references import gpu_blind_spots, version_problem


def _resource(resource_type: str, name: str, props: dict, deps: dict[str, list] | None = None) -> PolicyResource:
    opts = PolicyResourceOptions(False, [], None, [], PolicyCustomTimeouts(0, 0, 0), [])
    return PolicyResource(
        resource_type,
        props,
        f"urn:pulumi:test::llm-pd-eks::{resource_type}::{name}",
        name,
        opts,
        None,
        None,
        [d for ds in (deps or {}).values() for d in ds],
        deps or {},
    )


def _stack(subnet_feeder: Any) -> list[PolicyResource]:
    subnet = _resource("aws:ec2/subnet:Subnet", "private-a", {"availabilityZone": "us-west-2a"})
    group = _resource(
        "aws:eks/nodeGroup:NodeGroup",
        "gpu",
        {"instanceTypes": ["m7i.large", "p5.48xlarge"], "subnetIds": [UNKNOWN_STRING]},
        {"subnetIds": [subnet_feeder or subnet]},
    )
    return [subnet, group] + ([subnet_feeder] if subnet_feeder else [])


def _messages(resources: list, config: dict | None = None) -> list[str]:
    found: list[str] = []
    gpu_blind_spots.validate(StackValidationArgs(resources, config), lambda m, urn=None: found.append(m))
    return [m for m in found if "subnet IDs from" in m]


def test_subnets_from_a_remote_component_are_unjudgeable():
    assert _messages(_stack(None)) == []
    vpc = _resource("awsx:ec2:Vpc", "vpc", {})
    (message,) = _messages(_stack(vpc))
    assert "awsx:ec2:Vpc 'vpc'" in message and "'gpu'" in message
    assert _messages(_stack(vpc), {"unjudgeable": {"allow": ["gpu"]}}) == []


def test_version_problem_table():
    assert version_problem("$Latest", {"latestVersion": 4}) is None
    assert version_problem("4", {"latestVersion": 4}) is None
    assert "not the newest (4)" in str(version_problem("3", {"latestVersion": 4}))
    assert version_problem(None, {"latestVersion": 4, "updateDefaultVersion": "true"}) is None
    assert "updateDefaultVersion" in str(version_problem(None, {"latestVersion": 4}))
