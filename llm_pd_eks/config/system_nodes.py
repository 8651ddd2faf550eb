"""The `systemNodes` section: the CPU node group (llm_pd_eks/system_nodes.py)."""

from __future__ import annotations

import difflib

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from .base import shown
from .nodes import (
    EBS_GP3_MAX_GIB,
    EC2_INSTANCE_TYPES,
    GP3_BASELINE_IOPS,
    GP3_BASELINE_MIBPS,
    MAX_NODES_PER_NODE_GROUP,
    NodeScaling,
    gp3_problem,
)


class SystemNodesConfig(NodeScaling):
    """CPU nodes for system pods, the operators and the Ray head (label role=system)."""

    instance_type: str = Field(
        default="m7i.2xlarge",
        description="EC2 instance type of the CPU nodes (operators, Ray head).",
    )
    disk_size_gib: int = Field(default=100, ge=20, le=EBS_GP3_MAX_GIB, description="Encrypted gp3 root volume, GiB.")
    min_size: int = Field(default=2, ge=1, description="Fewest system nodes.")
    desired_size: int = Field(default=2, ge=1, description="System nodes to start with.")
    max_size: int = Field(default=4, ge=1, le=MAX_NODES_PER_NODE_GROUP, description="Most system nodes.")
    root_volume_iops: int = Field(
        default=GP3_BASELINE_IOPS, ge=3000, le=80000, description="provisioned IOPS of the gp3 root volume"
    )
    root_volume_throughput_mibps: int = Field(
        default=GP3_BASELINE_MIBPS, ge=125, le=2000, description="provisioned throughput (MiB/s) of the gp3 root volume"
    )

    @field_validator("instance_type")
    @classmethod
    def _ec2_type(cls, value: str) -> str:
        # A misspelt type would fail `up` 15 minutes in (and drops out of the preview's cost).
        if value not in EC2_INSTANCE_TYPES:
            hint = difflib.get_close_matches(value[:64], sorted(EC2_INSTANCE_TYPES), n=1)
            raise ValueError(
                f"{shown(value)} is not an EC2 instance type"
                + (f" (did you mean {hint[0]!r}?)" if hint else " such as 'm7i.2xlarge'")
            )
        return value

    @model_validator(mode="after")
    def _gp3(self) -> "SystemNodesConfig":
        problem = gp3_problem(self.root_volume_iops, self.root_volume_throughput_mibps, self.disk_size_gib)
        if problem:
            raise ValueError(problem)
        return self
