"""GPU nodes with Elastic Fabric Adapter: one AZ, a cluster placement group per node group, EFA on every card.

Why each piece exists:
- EFA traffic does not cross AZs, so every node sits in the one private subnet of `gpu_az`.
- Placement follows the capacity (`placement_choice`): on demand, this program's own `cluster`
  placement group packs the nodes onto the same network spine, one per keyed node group and named
  like it, so a new generation of nodes never launches into the group the serving nodes fill; an
  ODCR bought inside a cluster placement group serves only instances launched into that group, so
  the template names it; a Capacity Block is already placed close together and needs none.
- A node change never rolls the running group in place: EKS's roll drains through the one-pod
  disruption budgets and fails after 15 minutes. The group's name is keyed by everything that shapes
  its nodes (node_common.keyed_node_group_name: the whole launch template, the Kubernetes version, the
  AMI release), so a new group replaces the old one (`gpuNodes.templateChange`) and the Ray workers,
  which select their group by name, move with KubeRay's own upgrade (llm_pd_eks/gpu_cutover.py).
- One EFA interface per network card, or the card's bandwidth is lost: card 0 carries the
  node's IP (`efa`, device index 0); the others are `efa-only` (device index 1) so they use
  no VPC IPs.
- EFA's SRD traffic needs a security group that admits all traffic from and to itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, Optional, Sequence

import pulumi
import pulumi_aws as aws

from .catalog import GpuInstanceType
from .config.gpu_nodes import CapacityBlock, CapacityReservation, GpuNodesConfig
from .node_common import (
    IMDSV2,
    IN_PLACE_UPDATE,
    hugepages_script,
    instance_tags,
    keyed_node_group_name,
    launch_template_ref,
    node_config,
    node_group_options,
    nodeadm_user_data,
    root_volume,
    scaling_config,
    volume_tags,
)
from .versions import node_ami_release_version

GPU_TAINT_KEY = "nvidia.com/gpu"
GPU_LABELS = {"role": "gpu", "vpc.amazonaws.com/efa.present": "true"}
# What a pod needs to land on these nodes past their taint (device plugins, Ray workers).
GPU_TOLERATION = {"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}


def efa_network_interfaces(
    efa_count: int, security_group_ids: Sequence[pulumi.Input[str]]
) -> list[aws.ec2.LaunchTemplateNetworkInterfaceArgs]:
    """One EFA interface per network card; only card 0 gets an IP address."""
    return [
        aws.ec2.LaunchTemplateNetworkInterfaceArgs(
            network_card_index=card,
            device_index=0 if card == 0 else 1,
            interface_type="efa" if card == 0 else "efa-only",
            security_groups=list(security_group_ids),
            delete_on_termination="true",
        )
        for card in range(efa_count)
    ]


GPU_TAINT_VALUE = "true"
GPU_TAINT_EFFECT = "NoSchedule"  # Kubernetes spelling; EKS's node group API spells it NO_SCHEDULE


def capacity_type(cfg: GpuNodesConfig) -> str:
    """The node group's capacity type: a Capacity Block needs CAPACITY_BLOCK; an ODCR is ON_DEMAND."""
    return "CAPACITY_BLOCK" if isinstance(cfg.capacity, CapacityBlock) else "ON_DEMAND"


def capacity_reservation_id(cfg: GpuNodesConfig) -> str | None:
    if isinstance(cfg.capacity, CapacityReservation):
        return cfg.capacity.reservation_id
    if isinstance(cfg.capacity, CapacityBlock):
        return cfg.capacity.capacity_block_id
    return None


def capacity_settings(cfg: GpuNodesConfig) -> dict:
    """Launch template arguments that put the nodes on the configured capacity.

    ODCR: the template targets the reservation (CapacityReservationSpecification), so instances
    launch into it rather than "open" matching. Capacity Block: EKS documents market type
    `capacity-block` plus the block as the reservation target, and node group capacity type
    CAPACITY_BLOCK (https://docs.aws.amazon.com/eks/latest/userguide/capacity-blocks-mng.html).
    """
    reservation = capacity_reservation_id(cfg)
    if reservation is None:
        return {}
    settings: dict = {
        "capacity_reservation_specification": aws.ec2.LaunchTemplateCapacityReservationSpecificationArgs(
            capacity_reservation_target=aws.ec2.LaunchTemplateCapacityReservationSpecificationCapacityReservationTargetArgs(
                capacity_reservation_id=reservation
            )
        )
    }
    if isinstance(cfg.capacity, CapacityBlock):
        settings["instance_market_options"] = aws.ec2.LaunchTemplateInstanceMarketOptionsArgs(
            market_type="capacity-block"
        )
    return settings


# Cluster Autoscaler's AWS provider: a node carrying this label is "GPU not ready yet" (counted as
# unready, so no second scale-up) until the device plugin advertises nvidia.com/gpu
# (kubernetes/autoscaler cluster-autoscaler/cloudprovider/aws/README.md "Special note on GPU
# instances" and aws_cloud_provider.go `GPULabel`, tag cluster-autoscaler-1.35.2;
# processors/customresources/gpu_processor.go FilterOutNodesWithUnreadyResources).
ACCELERATOR_LABEL = "k8s.amazonaws.com/accelerator"
# The label's values the AWS provider knows (aws_cloud_provider.go `availableGPUTypes`, same tag; they
# only name the GPU in its metrics): those for catalogued GPUs; the others follow the same pattern.
KNOWN_ACCELERATORS = {"A100": "nvidia-tesla-a100", "A10G": "nvidia-a10g", "L40S": "nvidia-l40s"}


def accelerator_label(instance: GpuInstanceType) -> str:
    """`<gpu-type>` of the accelerator label: the provider's own name where it has one."""
    return KNOWN_ACCELERATORS.get(instance.gpu_model, f"nvidia-{instance.gpu_model.lower()}")


def gpu_node_labels(cfg: GpuNodesConfig, instance: GpuInstanceType) -> dict[str, str]:
    """What the node group applies to its nodes at registration (so before the device plugins run)."""
    return {**GPU_LABELS, "llm-pd-eks/gpu-az": cfg.availability_zone, ACCELERATOR_LABEL: accelerator_label(instance)}


def gpu_autoscaler_template(cfg: GpuNodesConfig, instance: GpuInstanceType) -> dict[str, dict[str, str]]:
    """What a node of this group will offer, for the node autoscaler's scale-from-template.

    Labels, taint and the extended resources the device plugins advertise only once a node runs;
    without them Cluster Autoscaler cannot tell that a pending Ray worker (asking for
    `nvidia.com/gpu`, `vpc.amazonaws.com/efa` and `hugepages-2Mi`, tolerating the taint) fits this
    group. Cluster Autoscaler builds a node at zero from the instance type (CPU, memory, GPUs only)
    plus these tags, each value a resource quantity as in a pod spec (aws_manager.go
    `extractAllocatableResourcesFromAsg`: resource.ParseQuantity): without `hugepages-2Mi` a worker
    requesting huge pages never fits the template and the group never scales from zero.
    """
    return {
        "labels": gpu_node_labels(cfg, instance),
        "taints": {GPU_TAINT_KEY: f"{GPU_TAINT_VALUE}:{GPU_TAINT_EFFECT}"},
        "resources": {
            "nvidia.com/gpu": str(instance.gpus),
            "vpc.amazonaws.com/efa": str(instance.efa_interfaces),
            # node_common.hugepages_script reserves this much before the kubelet starts
            "hugepages-2Mi": f"{instance.efa_hugepages_2mi_mib}Mi",
        },
    }


# --- placement and the GPU roll -----------------------------------------------------------------

Placement = Literal["own", "reservation", "none"]


def placement_choice(cfg: GpuNodesConfig) -> tuple[Placement, Optional[str]]:
    """Which placement group the GPU template launches into: (kind, existing group name).

    - on demand, or an ODCR in no placement group: `own`, a cluster group this program creates;
    - an ODCR created in a cluster placement group: `reservation`, that group by name (a targeted
      reservation in a cluster placement group serves only instances launched into it,
      https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/cr-cpg.html);
    - a Capacity Block: `none` ("there is no need to use a cluster placement group with a Capacity
      Block", https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-using.html).
    """
    if isinstance(cfg.capacity, CapacityBlock):
        return "none", None
    if isinstance(cfg.capacity, CapacityReservation) and cfg.capacity.placement_group:
        return "reservation", cfg.capacity.placement_group
    return "own", None


GPU_AMI_TYPE = "AL2023_x86_64_NVIDIA"

# Node auto repair: EKS replaces or reboots a node whose conditions the node monitoring agent (an EKS
# add-on, llm_pd_eks/addons.py) reports as failed, GPU XID and NVLink errors among them, 10 minutes
# after `AcceleratedHardwareReady` turns false (EKS User Guide, "Enable node auto repair and investigate
# node health issues"; pulumi-aws 7.51.1 `NodeGroupNodeRepairConfigArgs`). One node at a time: a p5 is
# an eighth of the serving fleet and a replacement reloads a model. Above half the group unhealthy the
# cause is not the nodes (a bad AMI or driver, a network event) and repair stops rather than churn.
NODE_REPAIR = aws.eks.NodeGroupNodeRepairConfigArgs(
    enabled=True, max_parallel_nodes_repaired_count=1, max_unhealthy_node_threshold_percentage=50
)


@dataclass(frozen=True)
class EfaGpuNodeGroupArgs:
    """Inputs of `EfaGpuNodeGroup`; the role, VPC, subnets and security group come from `Cluster` and
    `Network`."""

    config: GpuNodesConfig
    """The `gpuNodes` section: instance type, the one availability zone, sizes, capacity, root volume."""
    instance: GpuInstanceType
    """The catalog entry of `config.instance_type` (GPUs, EFA interfaces, instance store, huge pages)."""
    cluster_name: str
    """The EKS cluster the group joins (the node group's name starts with it)."""
    kubernetes_version: str
    """The cluster's Kubernetes minor (`cluster.kubernetesVersion`): the nodes' kubelet and AMI release."""
    node_role_arn: pulumi.Input[str]
    """The nodes' IAM role (`Cluster.node_role`)."""
    vpc_id: pulumi.Input[str]
    """The VPC of the EFA security group."""
    private_subnet_ids: Mapping[str, pulumi.Input[str]]
    """The private subnets by availability zone; the nodes launch only in that of `config.availability_zone`."""
    cluster_security_group_id: pulumi.Input[str]
    """The security group EKS created for the cluster (`Cluster.security_group_id`), on every EFA interface."""
    depends_on: Sequence[pulumi.Resource] = ()
    """What the group waits for: the control plane, the node role's policies, the VPC CNI, the API probe."""
    tags: dict[str, str] | None = None
    """Tags on every resource."""
    autoscaler_tags: Mapping[str, str] = field(default_factory=dict)
    """Cluster Autoscaler's discovery and node-template tags (empty when it is not installed)."""


def check_efa_gpu_node_group_args(args: EfaGpuNodeGroupArgs) -> None:
    """`pulumi.InputPropertyError` naming the input the `gpuNodes` section alone cannot rule out."""
    cfg = args.config
    if args.instance.name != cfg.instance_type:
        raise pulumi.InputPropertyError(
            "instance", f"catalog entry {args.instance.name} does not match config.instance_type {cfg.instance_type}"
        )
    if not args.cluster_name:
        raise pulumi.InputPropertyError("cluster_name", "empty; the node group must name the cluster it joins")
    if cfg.availability_zone not in args.private_subnet_ids:
        raise pulumi.InputPropertyError(
            "private_subnet_ids",
            f"no subnet in {cfg.availability_zone} (config.availability_zone), only in "
            f"{', '.join(sorted(args.private_subnet_ids)) or 'no availability zone'}; EFA traffic does not cross AZs",
        )


class EfaGpuNodeGroup(pulumi.ComponentResource):
    """Managed node group built from a launch template this program registers (tests and policies read it)."""

    placement_group: Optional[aws.ec2.PlacementGroup]  # only when the nodes launch into a group of this program
    security_group: aws.ec2.SecurityGroup
    launch_template: aws.ec2.LaunchTemplate
    node_group: aws.eks.NodeGroup

    def __init__(self, name: str, args: EfaGpuNodeGroupArgs, opts: pulumi.ResourceOptions | None = None):
        check_efa_gpu_node_group_args(args)
        super().__init__("llm-pd-eks:index:EfaGpuNodeGroup", name, None, opts)
        cfg, instance = args.config, args.instance
        tags = dict(args.tags or {})
        child = pulumi.ResourceOptions(parent=self)

        placement_kind, existing_group = placement_choice(cfg)
        self.security_group = aws.ec2.SecurityGroup(
            f"{name}-efa-sg",
            description="EFA: all traffic from and to members of this group",
            vpc_id=args.vpc_id,
            ingress=[
                aws.ec2.SecurityGroupIngressArgs(
                    protocol="-1", from_port=0, to_port=0, self=True, description="EFA from group members"
                )
            ],
            egress=[
                aws.ec2.SecurityGroupEgressArgs(
                    protocol="-1", from_port=0, to_port=0, self=True, description="EFA to group members"
                ),
                aws.ec2.SecurityGroupEgressArgs(
                    protocol="-1",
                    from_port=0,
                    to_port=0,
                    cidr_blocks=["0.0.0.0/0"],
                    description="Images, model weights, AWS APIs (through NAT)",
                ),
            ],
            tags={**tags, "Name": f"{name}-efa-sg"},
            opts=child,
        )

        # Instance store (catalog): nodeadm RAID0s the NVMe disks for kubelet/containerd state;
        # the huge pages the EFA worker pod requests are reserved before the kubelet starts.
        user_data = nodeadm_user_data(
            node_config(local_storage_raid0=instance.nvme_disks > 0),
            scripts=[hugepages_script(instance.efa_hugepages_2mi_mib)],
        )
        # One dict: what the template is built from is what keys the group's name. The placement group
        # enters the key as the capacity's choice, not by name: this group's own cluster placement group
        # is named by the key (one per generation of nodes), so its name cannot also be part of it.
        template_args: dict[str, Any] = dict(
            description=f"EFA GPU nodes: {instance.name}, {instance.efa_interfaces} EFA interface(s), IMDSv2",
            instance_type=instance.name,
            metadata_options=IMDSV2,
            network_interfaces=efa_network_interfaces(
                instance.efa_interfaces, [self.security_group.id, args.cluster_security_group_id]
            ),
            block_device_mappings=[
                root_volume(cfg.disk_size_gib, cfg.root_volume_iops, cfg.root_volume_throughput_mibps)
            ],
            user_data=user_data,
            tag_specifications=[instance_tags(tags, name), volume_tags(tags, name)],
            tags=tags,
            **capacity_settings(cfg),
        )
        node_args: dict[str, Any] = {
            "ami_type": GPU_AMI_TYPE,
            "version": args.kubernetes_version,
            "release_version": node_ami_release_version(args.kubernetes_version),
            "capacity_type": capacity_type(cfg),
            "subnet_ids": [args.private_subnet_ids[cfg.availability_zone]],  # ONE subnet, hence one AZ
        }
        group_name = keyed_node_group_name(
            args.cluster_name,
            "gpu",
            {
                "launchTemplate": {**template_args, "placement": {"kind": placement_kind, "group": existing_group}},
                "nodeGroup": node_args,
            },
        )

        # A cluster placement group per generation of nodes, named like the node group it serves: a new
        # group (another GPU type, AZ, AMI, template) launches into an empty one of its own instead of the
        # one the serving nodes fill (a CPG cannot span AZs, and a second instance type added to a full
        # one is EC2's recipe for InsufficientInstanceCapacity). It is replaced with the node group and
        # deleted after it (the node group depends on it, so the engine deletes the old group first).
        self.placement_group = None
        placement: Optional[aws.ec2.LaunchTemplatePlacementArgs] = None
        if placement_kind == "own":
            self.placement_group = aws.ec2.PlacementGroup(
                f"{name}-pg", name=group_name, strategy="cluster", tags=tags, opts=child
            )
            placement = aws.ec2.LaunchTemplatePlacementArgs(group_name=self.placement_group.name)
        elif placement_kind == "reservation":
            placement = aws.ec2.LaunchTemplatePlacementArgs(group_name=existing_group)
        self.launch_template = aws.ec2.LaunchTemplate(f"{name}-lt", opts=child, placement=placement, **template_args)
        # A node change renames the group, and the name forces a replacement: blue/green creates the new
        # group first and Pulumi deletes the old one last, after the RayService (whose workers select
        # this group by name) has cut over to it; recreate deletes the old group first (gpuNodes.templateChange).
        options = node_group_options(
            self, [*args.depends_on, *([self.placement_group] if self.placement_group else [])]
        )
        options.delete_before_replace = cfg.roll() == "recreate"
        self.node_group = aws.eks.NodeGroup(
            f"{name}-ng",
            cluster_name=args.cluster_name,
            node_group_name=group_name,
            node_role_arn=args.node_role_arn,
            scaling_config=scaling_config(cfg),
            # EKS drains through the eviction API and honours PodDisruptionBudgets (the RayService's keep
            # one prefill and one decode pod): rather than evict the last one it fails an in-place update
            # (PodEvictionFailure) unless forced, and force_update_version stays unset.
            update_config=IN_PLACE_UPDATE,
            node_repair_config=NODE_REPAIR,
            launch_template=launch_template_ref(self.launch_template),
            labels=gpu_node_labels(cfg, instance),
            taints=[aws.eks.NodeGroupTaintArgs(key=GPU_TAINT_KEY, value=GPU_TAINT_VALUE, effect="NO_SCHEDULE")],
            tags={**tags, **dict(args.autoscaler_tags)},
            opts=options,
            **node_args,
        )
        self.register_outputs(
            {
                "nodeGroupName": self.node_group.node_group_name,
                "launchTemplateId": self.launch_template.id,
                "placementGroup": self.placement_group.name if self.placement_group else existing_group,
                "availabilityZone": cfg.availability_zone,
            }
        )
