"""The `deploy` section: how `pulumi up` reaches the stack (the deploy workflow, the placeholder check
and the API access check, llm_pd_eks/api_access.py)."""

from __future__ import annotations

from typing import Optional

from pydantic import (
    Field,
    field_validator,
)

from .base import Strict, ipv4_network


class DeployConfig(Strict):
    """How `pulumi up` reaches the stack (read by the deploy workflow and the placeholder check)."""

    runner_label: Optional[str] = Field(
        default=None,
        description="GitHub Actions runner label for `pulumi up` (e.g. a self-hosted runner inside the VPC); "
        "required in practice when the API endpoint is private-only",
    )
    api_source_cidrs: list[str] = Field(
        default_factory=list,
        description="Where `pulumi up` reaches the Kubernetes API from (required): the deploying machine's "
        "egress CIDRs, each inside cluster.publicAccessCidrs, or private CIDRs of a peered/VPN network "
        "outside network.vpcCidr (443 ingress on the cluster security group); checked before anything is created",
    )

    @field_validator("api_source_cidrs")
    @classmethod
    def _source_cidrs(cls, values: list[str]) -> list[str]:
        for value in values:
            ipv4_network(value)
        return values
