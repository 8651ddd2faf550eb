"""Nodes join and talk: security groups computed from the plan's rules and EKS's documented ones.

The mocks return realistic ids for pulumi-eks's outputs (the EKS-created
`eksCluster.vpcConfig.clusterSecurityGroupId`, OIDC; pulumi-eks's own groups are skipped, so its group
outputs are EKS's), so wiring a wrong group shows up here as a blocked flow, not as a matching placeholder.
"""

from __future__ import annotations

import re

import pytest
from helpers import LAUNCH_TEMPLATE, NODE_GROUP
from sg_reachability import ALL, allowed, control_plane, missing_flows, node_endpoint, plan_groups

from llm_pd_eks.cluster import Cluster
from llm_pd_eks_tools.plan.preview.mockrun import ProgramRun, eks_cluster_ids, run_program

SG_ID = re.compile(r"^sg-0[0-9a-f]{16}$")


def test_pulumi_eks_makes_no_groups_of_its_own(run: ProgramRun):
    eks = run.one("eks:index:Cluster")
    ids = eks_cluster_ids(eks.name)
    out = eks.outputs
    assert eks.inputs["skipDefaultSecurityGroups"] is True
    # skipped, both of pulumi-eks's group outputs are the group EKS created (pulumi-eks cluster.ts)
    assert out["clusterSecurityGroupId"] == out["nodeSecurityGroupId"] == ids["eksClusterSecurityGroupId"]
    assert SG_ID.match(ids["eksClusterSecurityGroupId"])
    assert re.fullmatch(
        r"arn:aws:iam::\d{12}:oidc-provider/oidc\.eks\.[a-z0-9-]+\.amazonaws\.com/id/[0-9A-F]{32}",
        out["oidcProviderArn"],
    )
    assert out["oidcProviderUrl"] == f"https://{out['oidcIssuer']}"
    assert all(SG_ID.match(sg.id) for sg in run.of_type("aws:ec2/securityGroup:SecurityGroup"))


def test_every_node_can_join_and_talk(run: ProgramRun):
    assert missing_flows(run) == []


def test_gpu_interfaces_carry_the_eks_created_group_not_pulumi_eks_own(run: ProgramRun):
    eks = run.one("eks:index:Cluster")
    ids = eks_cluster_ids(eks.name)
    eks_sg = ids["eksClusterSecurityGroupId"]
    lt = run.one(LAUNCH_TEMPLATE, "gpu")
    for nic in lt.inputs["networkInterfaces"]:
        assert eks_sg in nic["securityGroups"]
        assert ids["pulumiEksClusterSecurityGroupId"] not in nic["securityGroups"]


def test_system_nodes_get_the_eks_group_from_eks(programs):
    run = programs("dev")
    system = node_endpoint(run, run.one(NODE_GROUP, "system"))
    assert system.groups == (eks_cluster_ids(run.one("eks:index:Cluster").name)["eksClusterSecurityGroupId"],)


def test_the_model_refuses_what_it_should(programs):
    """The evaluator is not vacuous: the control plane never reaches GPU nodes through the EFA group alone."""
    run = programs("dev")
    groups = plan_groups(run)
    gpu = node_endpoint(run, run.one(NODE_GROUP, "gpu"))
    efa_only = type(gpu)(gpu.name, (run.one("aws:ec2/securityGroup:SecurityGroup", "efa").id,), gpu.subnets)
    assert allowed(groups, gpu, control_plane(run), "tcp", 443)
    assert not allowed(groups, efa_only, control_plane(run), "tcp", 443)
    assert not allowed(groups, control_plane(run), efa_only, "tcp", 10250)
    assert allowed(groups, efa_only, efa_only, ALL)


def test_wiring_pulumi_eks_cluster_group_no_longer_breaks_node_join(monkeypatch: pytest.MonkeyPatch):
    """pulumi-eks's own `clusterSecurityGroupId` on the GPU interfaces blocked the nodes while pulumi-eks
    made its own groups; with them skipped the output is EKS's group, and the nodes still join."""
    monkeypatch.setattr(Cluster, "security_group_id", property(lambda self: self.eks.cluster_security_group_id))
    assert missing_flows(run_program("dev")) == []
