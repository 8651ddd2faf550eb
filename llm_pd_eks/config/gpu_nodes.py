"""The `gpuNodes` section: the EFA GPU node group and the capacity it launches on
(llm_pd_eks/efa_gpu_nodes.py)."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import (
    Discriminator,
    Field,
    Tag,
    field_validator,
    model_validator,
)

from ..catalog import GPU_INSTANCE_TYPES, unsupported_type
from .base import Strict, clip, shown
from .nodes import EBS_GP3_MAX_GIB, MAX_NODES_PER_NODE_GROUP, NodeScaling, gp3_problem

# EC2 capacity reservation ids: `cr-` and 17 hex digits (8 for older ids).
_RESERVATION_ID = re.compile(r"^cr-(?:[0-9a-f]{8}|[0-9a-f]{17})$")


def _reservation_id(value: str) -> str:
    if not _RESERVATION_ID.fullmatch(value):
        raise ValueError(f"{value!r} is not an EC2 capacity reservation id such as 'cr-0123456789abcdef0'")
    return value


# EC2 placement group names: up to 255 ASCII characters (EC2 API CreatePlacementGroup `GroupName`).
_PLACEMENT_GROUP_NAME = re.compile(r"^[\x21-\x7e]{1,255}$")


class CapacityReservation(Strict):
    """An On-Demand Capacity Reservation (ODCR) the GPU launch template targets.

    A reservation created in a cluster placement group serves only instances launched into that
    group, and cannot be moved out of it (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/cr-cpg.html,
    "Limitations"); one created outside any placement group also serves instances launched into one
    (https://docs.amazonaws.cn/en_us/AWSEC2/latest/UserGuide/limitations-placement-groups.html). So the
    template launches into the reservation's own group when it has one, else into this program's.
    """

    reservation_id: str = Field(
        description="ODCR id (`cr-…`) targeted by the GPU launch template's capacity reservation specification"
    )
    placement_group: Optional[str] = Field(
        default=None,
        description="name of the cluster placement group the ODCR was created in (preflight compares it with "
        "the reservation's PlacementGroupArn); the nodes launch into it and the program creates none. "
        "Unset: the ODCR is in no placement group and the program creates its own cluster group",
    )

    @field_validator("reservation_id")
    @classmethod
    def _id(cls, value: str) -> str:
        return _reservation_id(value)

    @field_validator("placement_group")
    @classmethod
    def _pg(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and not _PLACEMENT_GROUP_NAME.fullmatch(value):
            raise ValueError(f"{shown(value)} is not an EC2 placement group name (1-255 printable ASCII, no spaces)")
        return value


class CapacityBlock(Strict):
    """An EC2 Capacity Block for ML: node group capacity type CAPACITY_BLOCK, market type capacity-block."""

    capacity_block_id: str = Field(
        description="the Capacity Block's reservation id (`cr-…`); the node group runs CAPACITY_BLOCK, "
        "the template market type `capacity-block`"
    )

    @field_validator("capacity_block_id")
    @classmethod
    def _id(cls, value: str) -> str:
        return _reservation_id(value)


def _capacity_kind(value: Any) -> Optional[str]:
    """Which capacity shape `value` is (None: none of them, reported with the one message below)."""
    if isinstance(value, (CapacityReservation, CapacityBlock)):
        return type(value).__name__
    if value == "onDemand":
        return "onDemand"
    if isinstance(value, dict) and value:
        # The id key names the shape; any other key is then judged (and refused) by that model.
        ids = {"capacityBlockId", "reservationId"} & set(value)
        if ids == {"capacityBlockId"}:
            return "CapacityBlock"
        if ids == {"reservationId"}:
            return "CapacityReservation"
    return None


GpuCapacity = Annotated[
    Union[
        Annotated[Literal["onDemand"], Tag("onDemand")],
        Annotated[CapacityReservation, Tag("CapacityReservation")],
        Annotated[CapacityBlock, Tag("CapacityBlock")],
    ],
    Discriminator(
        _capacity_kind,
        custom_error_type="capacity_shape",
        custom_error_message=(
            "must be 'onDemand', {reservationId: cr-..., placementGroup: ...} or {capacityBlockId: cr-...}"
        ),
    ),
]


class GpuNodesConfig(NodeScaling):
    """The EFA GPU node group: one AZ, placement as the capacity needs, prefill and decode nodes."""

    instance_type: str = Field(description="An EFA GPU instance type from llm_pd_eks/catalog.py.")
    availability_zone: str = Field(
        description="The one AZ of every GPU node (one cluster placement group); one of network.availabilityZones.",
    )
    min_size: int = Field(
        default=2,
        ge=0,
        description="Fewest GPU nodes; at least 2 (prefill and decode run on separate nodes); "
        "0 allowed (with desiredSize 0) on a Capacity Block, which launches nothing before it starts.",
    )
    desired_size: int = Field(default=2, ge=0, description="GPU nodes to start with.")
    max_size: int = Field(
        default=2,
        ge=1,
        le=MAX_NODES_PER_NODE_GROUP,
        description="Most GPU nodes; prefill plus decode nodes at maxReplicas must fit.",
    )
    # Every catalog GPU type has instance-store NVMe, which nodeadm RAID0s and bind-mounts over
    # /var/lib/kubelet, /var/lib/containerd, /var/lib/soci-snapshotter-grpc and /var/log/pods
    # (awslabs/amazon-eks-ami v20260724, templates/al2023/runtime/bin/setup-local-disks lines 95-110):
    # images, the weights cache (pod volumes) and pod logs live there. The root keeps the OS, whose AMI
    # volume is 20 GiB (same tag, templates/al2023/template.json `ami_block_device_mappings`), and
    # system logs; 100 GiB is that with ample headroom, not the 500 GiB images and weights would need.
    disk_size_gib: int = Field(
        default=100,
        ge=100,
        le=EBS_GP3_MAX_GIB,
        description="Root volume, GiB: the OS and system logs; images, weights and pod logs live on the "
        "instance-store NVMe RAID0.",
    )
    capacity: GpuCapacity = Field(
        default="onDemand",
        description="`onDemand` (the program's own cluster placement group), `{reservationId: cr-…}` (targeted "
        "ODCR; add `placementGroup: <name>` when it was created in a cluster placement group, which the nodes "
        "then launch into) or `{capacityBlockId: cr-…}` (Capacity Block for ML: no placement group)",
    )
    template_change: Optional[Literal["blueGreen", "recreate"]] = Field(
        default=None,
        description="How a node change (launch template, Kubernetes version, AMI release) reaches the GPU nodes "
        "(never as EKS's in-place roll, which the one-pod disruption budgets fail). `blueGreen`: a new node "
        "group is created next to the old; the Ray workers select their group by name, so the RayService "
        "moves onto it (with serving.upgradeStrategy NewCluster, KubeRay switches once the new cluster serves) "
        "and the old group is deleted at the end of `up` (extra GPU nodes while both run). `recreate`: the old "
        "group is deleted first (no extra nodes, serving stops until the new nodes are up). "
        "Default: blueGreen on demand, recreate on an ODCR or Capacity Block (a fully used reservation "
        "has no room for a second group)",
    )
    # The image and weights land on the instance-store RAID0 where the type has one; the root volume
    # still holds the OS and anything else, so its throughput is raised over gp3's 125 MiB/s baseline.
    root_volume_iops: int = Field(
        default=6000, ge=3000, le=80000, description="provisioned IOPS of the gp3 root volume"
    )
    root_volume_throughput_mibps: int = Field(
        default=500, ge=125, le=2000, description="provisioned throughput (MiB/s) of the gp3 root volume"
    )

    @model_validator(mode="after")
    def _gp3(self) -> "GpuNodesConfig":
        problem = gp3_problem(self.root_volume_iops, self.root_volume_throughput_mibps, self.disk_size_gib)
        if problem:
            raise ValueError(problem)
        return self

    @field_validator("min_size")
    @classmethod
    def _two_nodes(cls, value: int) -> int:
        # Prefill and decode run on separate nodes, so the group can never be smaller than two; 0
        # (nothing at all) is for a Capacity Block only, checked with the capacity in _zero_nodes.
        if value == 1:
            raise ValueError(f"minSize is {value}: prefill and decode need separate GPU nodes, so at least 2")
        return value

    @model_validator(mode="after")
    def _zero_nodes(self) -> "GpuNodesConfig":
        # EKS asks for node groups on a Capacity Block to scale to 0 around its window
        # (https://docs.aws.amazon.com/eks/latest/userguide/capacity-blocks-mng.html, "Considerations").
        if self.min_size == 0 and not isinstance(self.capacity, CapacityBlock):
            raise ValueError(
                "minSize is 0: prefill and decode need separate GPU nodes, so at least 2 "
                "(only a Capacity Block may scale to 0)"
            )
        return self

    def roll(self) -> Literal["blueGreen", "recreate"]:
        """How a launch-template change replaces the GPU node group (templateChange or its default)."""
        if self.template_change is not None:
            return self.template_change
        return "blueGreen" if self.capacity == "onDemand" else "recreate"

    def roll_surge(self) -> int:
        """GPU nodes a launch-template change needs on top of the running group: blue/green starts the
        new group at desiredSize next to the old one (up to maxSize); recreate needs none."""
        return self.desired_size if self.roll() == "blueGreen" else 0

    @field_validator("instance_type")
    @classmethod
    def _efa_type(cls, value: str) -> str:
        if value not in GPU_INSTANCE_TYPES:
            raise ValueError(unsupported_type(clip(value)))
        return value
