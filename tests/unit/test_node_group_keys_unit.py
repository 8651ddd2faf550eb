"""Every node change renames its node group (a planned replacement), and nothing else does; the group
names its Kubernetes version, AMI release and update strategy. Pulumi's public mocks, one property per test."""

from __future__ import annotations

from typing import Any, Callable

import pulumi
import pytest

from llm_pd_eks.catalog import gpu_instance_type
from llm_pd_eks.config.gpu_nodes import GpuNodesConfig
from llm_pd_eks.config.system_nodes import SystemNodesConfig
from llm_pd_eks.efa_gpu_nodes import EfaGpuNodeGroup, EfaGpuNodeGroupArgs
from llm_pd_eks.system_nodes import SystemNodeGroup, SystemNodeGroupArgs
from llm_pd_eks.versions import node_ami_release_version
from tests.unit.mocks import install

SUBNETS = {"us-west-2a": "subnet-0a1b2c3d4e5f60001", "us-west-2b": "subnet-0a1b2c3d4e5f60002"}
ROLE = "arn:aws:iam::210987654321:role/llm-node-role"
GPU = gpu_instance_type("p4d.24xlarge")
BASE: dict[str, Any] = {
    "tags": {"project": "llm", "stack": "unit"},
    "cluster_security_group_id": "sg-0a1b2c3d4e5f60001",
    "kubernetes_version": "1.35",
}


def _gpu(name: str = "gpu", **overrides: Any) -> EfaGpuNodeGroup:
    values = {
        "config": GpuNodesConfig.model_validate({"instanceType": GPU.name, "availabilityZone": "us-west-2a"}),
        "instance": GPU,
        "cluster_name": "llm",
        "node_role_arn": ROLE,
        "vpc_id": "vpc-0a1b2c3d4e5f60001",
        "private_subnet_ids": SUBNETS,
        **BASE,
        **overrides,
    }
    return EfaGpuNodeGroup(name, EfaGpuNodeGroupArgs(**values))


def _system(name: str = "system", **overrides: Any) -> SystemNodeGroup:
    values = {
        "config": SystemNodesConfig(),
        "cluster_name": "llm",
        "node_role_arn": ROLE,
        "subnet_ids": list(SUBNETS.values()),
        "kubernetes_version": BASE["kubernetes_version"],
        "tags": BASE["tags"],
        **overrides,
    }
    return SystemNodeGroup(name, SystemNodeGroupArgs(**values))


def name_of(build: Callable[[], Any]) -> str:
    """The EKS name of the group `build` makes, in a run of its own (the same component name, as in a stack)."""
    install()
    found: list[str] = []

    @pulumi.runtime.test
    def run():
        return build().node_group.node_group_name.apply(found.append)

    run()
    return found[0]


def test_the_same_inputs_give_the_same_name():
    assert name_of(_gpu) == name_of(_gpu)
    assert name_of(_system) == name_of(_system)


@pytest.mark.parametrize(
    "change",
    [
        {"tags": {"project": "llm", "stack": "unit", "team": "serving"}},  # a tag only
        {"cluster_security_group_id": "sg-0a1b2c3d4e5f60002"},  # a security group only
        {"kubernetes_version": "1.34"},  # the Kubernetes version (and its AMI release)
    ],
)
def test_a_node_change_renames_the_gpu_group(change):
    assert name_of(_gpu) != name_of(lambda: _gpu(**change))


def test_scaling_keeps_the_gpu_group_name():
    bigger = GpuNodesConfig.model_validate({"instanceType": GPU.name, "availabilityZone": "us-west-2a", "maxSize": 3})
    assert name_of(_gpu) == name_of(lambda: _gpu(config=bigger))


@pytest.mark.parametrize(
    "change",
    [
        {"tags": {"project": "llm", "stack": "other"}},
        {"kubernetes_version": "1.36"},
        {"config": SystemNodesConfig.model_validate({"diskSizeGib": 60})},
    ],
)
def test_a_node_change_renames_the_system_group(change):
    assert name_of(_system) != name_of(lambda: _system(**change))


@pulumi.runtime.test
def test_groups_pin_version_release_and_update_minimal(mocks):
    gpu, system = _gpu(), _system()

    def check(_):
        for group in mocks.of_type("aws:eks/nodeGroup:NodeGroup"):
            inputs = group.inputs
            assert (inputs["version"], inputs["releaseVersion"]) == ("1.35", node_ami_release_version("1.35"))
            assert inputs["updateConfig"] == {"maxUnavailable": 1, "updateStrategy": "MINIMAL"}

    return pulumi.Output.all(gpu.node_group.id, system.node_group.id).apply(check)
