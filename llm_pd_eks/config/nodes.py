"""What the system and the GPU node groups share: EKS's node group sizes, the gp3 root volume's
limits and the EC2 instance type names."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from pydantic import (
    Field,
    model_validator,
)

from .base import Strict

# EKS service quota L-BD136A63 "Nodes per managed node group", default 450 (adjustable: raise this
# with the quota). Without a bound, `maxSize: 1000000000` priced at millions of dollars an hour.
MAX_NODES_PER_NODE_GROUP = 450
# Largest gp3 volume: 16 TiB (Amazon EBS volume types, "Volume size").
EBS_GP3_MAX_GIB = 16_384


def _ec2_instance_types() -> frozenset[str]:
    """Every EC2 instance type name (vendored from botocore's EC2 model: see llm_pd_eks/data/SOURCE)."""
    path = Path(__file__).resolve().parents[1] / "data" / "ec2_instance_types.json"
    return frozenset(json.loads(path.read_text())["instanceTypes"])


EC2_INSTANCE_TYPES = _ec2_instance_types()


class NodeScaling(Strict):
    """Managed node group sizes. EKS refuses desired outside [min, max]; so do we, earlier."""

    min_size: int = Field(ge=0, description="Fewest nodes the group scales in to.")
    desired_size: int = Field(ge=0, description="Nodes the group starts with; between minSize and maxSize.")
    max_size: int = Field(ge=1, le=MAX_NODES_PER_NODE_GROUP, description="Most nodes the group scales out to.")

    @model_validator(mode="after")
    def _ordered(self) -> "NodeScaling":
        if self.min_size > self.max_size:
            raise ValueError(f"minSize ({self.min_size}) is greater than maxSize ({self.max_size})")
        if not self.min_size <= self.desired_size <= self.max_size:
            raise ValueError(
                f"desiredSize ({self.desired_size}) must lie between minSize ({self.min_size}) "
                f"and maxSize ({self.max_size})"
            )
        return self


# gp3 limits (https://docs.aws.amazon.com/ebs/latest/userguide/general-purpose.html#gp3-ebs-volume-type):
# 3,000 IOPS and 125 MiB/s baseline, up to 80,000 IOPS and 2,000 MiB/s (the EC2 API model's
# LaunchTemplateEbsBlockDeviceRequest docs, checked in tests); throughput at most 0.25 MiB/s per IOPS.
GP3_BASELINE_IOPS = 3000
GP3_BASELINE_MIBPS = 125
GP3_MIBPS_PER_IOPS = 0.25
# Same page: "The maximum ratio of provisioned IOPS to provisioned volume size is 500 IOPS per GiB."
GP3_IOPS_PER_GIB = 500


def gp3_problem(iops: int, throughput: int, size_gib: Optional[int] = None) -> Optional[str]:
    """Why an IOPS/throughput pair (on a volume of `size_gib`) is not a valid gp3 volume, or None."""
    if size_gib is not None and iops > size_gib * GP3_IOPS_PER_GIB:
        return (
            f"rootVolumeIops {iops} exceeds gp3's {GP3_IOPS_PER_GIB} IOPS per GiB on a {size_gib} GiB volume "
            f"(at most {size_gib * GP3_IOPS_PER_GIB}; raise diskSizeGib or lower rootVolumeIops)"
        )
    if throughput > iops * GP3_MIBPS_PER_IOPS:
        return (
            f"rootVolumeThroughputMibps {throughput} exceeds {GP3_MIBPS_PER_IOPS} MiB/s per IOPS at "
            f"rootVolumeIops {iops} (gp3 allows at most {int(iops * GP3_MIBPS_PER_IOPS)})"
        )
    return None
