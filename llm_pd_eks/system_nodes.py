"""CPU managed node group for system pods, the operators and the Ray head.

Like the GPU group, its EKS name is keyed by everything that shapes its nodes (the launch template,
the Kubernetes version, the AMI release: node_common.keyed_node_group_name), so a node change creates
a new group before the old one is deleted. The Ray head selects system nodes by role, not this group's
name (llm_pd_eks/ray_head_pod.py): a system change builds no second Ray cluster; the head restarts on a
new system node when the old group is deleted, and GCS fault tolerance keeps the Ray cluster through it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import pulumi
import pulumi_aws as aws

from .config.system_nodes import SystemNodesConfig
from .node_common import (
    IMDSV2,
    IN_PLACE_UPDATE,
    instance_tags,
    keyed_node_group_name,
    launch_template_ref,
    node_group_options,
    root_volume,
    scaling_config,
    volume_tags,
)
from .versions import node_ami_release_version

SYSTEM_LABELS = {"role": "system"}
SYSTEM_AMI_TYPE = "AL2023_x86_64_STANDARD"


@dataclass(frozen=True)
class SystemNodeGroupArgs:
    """Inputs of `SystemNodeGroup`; the role and subnets come from `Cluster` and `Network`."""

    config: SystemNodesConfig
    """The `systemNodes` section: instance type, sizes, root volume."""
    cluster_name: str
    """The EKS cluster the group joins."""
    kubernetes_version: str
    """The cluster's Kubernetes minor (`cluster.kubernetesVersion`): the nodes' kubelet and AMI release."""
    node_role_arn: pulumi.Input[str]
    """The nodes' IAM role (`Cluster.node_role`)."""
    subnet_ids: Sequence[pulumi.Input[str]]
    """The private subnets, all availability zones; at least one."""
    depends_on: Sequence[pulumi.Resource] = ()
    """What the group waits for: the control plane, the node role's policies, the VPC CNI, the routes out."""
    tags: dict[str, str] | None = None
    """Tags on every resource."""
    autoscaler_tags: Mapping[str, str] = field(default_factory=dict)
    """Cluster Autoscaler's discovery and node-template tags (empty when it is not installed)."""


def check_system_node_group_args(args: SystemNodeGroupArgs) -> None:
    """`pulumi.InputPropertyError` naming the input the `systemNodes` section alone cannot rule out."""
    if not args.cluster_name:
        raise pulumi.InputPropertyError("cluster_name", "empty; the node group must name the cluster it joins")
    if not args.subnet_ids:
        raise pulumi.InputPropertyError("subnet_ids", "empty; the node group needs at least one private subnet")


def system_autoscaler_template() -> dict[str, dict[str, str]]:
    """What a system node offers the node autoscaler's template: its label (no taint, no extras)."""
    return {"labels": dict(SYSTEM_LABELS), "taints": {}, "resources": {}}


class SystemNodeGroup(pulumi.ComponentResource):
    """An EKS managed node group across the private subnets, labelled role=system."""

    node_group: aws.eks.NodeGroup

    def __init__(self, name: str, args: SystemNodeGroupArgs, opts: pulumi.ResourceOptions | None = None):
        check_system_node_group_args(args)
        super().__init__("llm-pd-eks:index:SystemNodeGroup", name, None, opts)
        cfg = args.config
        tags = dict(args.tags or {})
        child = pulumi.ResourceOptions(parent=self)

        template_args: dict[str, Any] = {
            "description": "System nodes: IMDSv2, encrypted gp3 root",
            "metadata_options": IMDSV2,
            "block_device_mappings": [
                root_volume(cfg.disk_size_gib, cfg.root_volume_iops, cfg.root_volume_throughput_mibps)
            ],
            "tag_specifications": [instance_tags(tags, name), volume_tags(tags, name)],
            "tags": tags,
        }
        launch_template = aws.ec2.LaunchTemplate(f"{name}-lt", opts=child, **template_args)
        node_args: dict[str, Any] = {
            "subnet_ids": list(args.subnet_ids),
            "instance_types": [cfg.instance_type],
            "ami_type": SYSTEM_AMI_TYPE,
            "version": args.kubernetes_version,
            "release_version": node_ami_release_version(args.kubernetes_version),
            "capacity_type": "ON_DEMAND",
        }
        self.node_group = aws.eks.NodeGroup(
            f"{name}-ng",
            cluster_name=args.cluster_name,
            node_group_name=keyed_node_group_name(
                args.cluster_name, "system", {"launchTemplate": template_args, "nodeGroup": node_args}
            ),
            node_role_arn=args.node_role_arn,
            scaling_config=scaling_config(cfg),
            update_config=IN_PLACE_UPDATE,
            launch_template=launch_template_ref(launch_template),
            labels=SYSTEM_LABELS,
            tags={**tags, **dict(args.autoscaler_tags)},
            opts=node_group_options(self, list(args.depends_on)),
            **node_args,
        )
        self.register_outputs({"nodeGroupName": self.node_group.node_group_name})
