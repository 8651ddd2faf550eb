"""SystemNodeGroup, one property per test, with Pulumi's public mocks (the fast tier)."""

from __future__ import annotations

import pulumi
import pytest

from llm_pd_eks.config import SystemNodesConfig
from llm_pd_eks.system_nodes import SYSTEM_LABELS, SystemNodeGroup, SystemNodeGroupArgs

PRIVATE = ["subnet-0a1b2c3d4e5f60001", "subnet-0a1b2c3d4e5f60002"]
ROLE = "arn:aws:iam::210987654321:role/llm-node-role"


def _group(**config) -> SystemNodeGroup:
    args = SystemNodeGroupArgs(
        config=SystemNodesConfig.model_validate(config),
        cluster_name="llm",
        kubernetes_version="1.35",
        node_role_arn=ROLE,
        subnet_ids=PRIVATE,
    )
    return SystemNodeGroup("system", args)


@pulumi.runtime.test
def test_nodes_launch_only_in_the_given_private_subnets(mocks):
    group = _group()
    return group.node_group.subnet_ids.apply(lambda ids: ids == PRIVATE or pytest.fail(f"subnets {ids}"))


@pulumi.runtime.test
def test_nodes_carry_the_system_role_label(mocks):
    group = _group()
    return group.node_group.labels.apply(lambda labels: labels == SYSTEM_LABELS or pytest.fail(str(labels)))


@pulumi.runtime.test
def test_the_launch_template_requires_imdsv2_with_one_hop(mocks):
    group = _group()

    def check(_):
        (template,) = mocks.of_type("aws:ec2/launchTemplate:LaunchTemplate")
        options = template.inputs["metadataOptions"]
        assert (options["httpTokens"], options["httpPutResponseHopLimit"]) == ("required", 1)

    return group.node_group.id.apply(check)


@pulumi.runtime.test
def test_the_root_volume_is_encrypted_gp3_of_the_configured_size(mocks):
    group = _group(diskSizeGib=150)

    def check(_):
        (template,) = mocks.of_type("aws:ec2/launchTemplate:LaunchTemplate")
        (device,) = template.inputs["blockDeviceMappings"]
        assert (device["ebs"]["volumeType"], device["ebs"]["encrypted"], device["ebs"]["volumeSize"]) == (
            "gp3",
            "true",
            150,
        )

    return group.node_group.id.apply(check)


@pulumi.runtime.test
def test_the_node_group_uses_its_own_launch_template(mocks):
    group = _group()

    def check(reference):
        template = mocks.by_id(reference["id"])
        assert (template.type, template.name) == ("aws:ec2/launchTemplate:LaunchTemplate", "system-lt")

    return group.node_group.launch_template.apply(check)
