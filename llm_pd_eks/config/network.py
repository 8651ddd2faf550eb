"""The `network` section: the VPC, its availability zones and subnets (llm_pd_eks/network.py)."""

from __future__ import annotations

import ipaddress
from typing import Literal, Optional

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from .base import Strict, clip, ipv4_network

# AWS subnets are /16 to /28 ("Subnet CIDR blocks", Amazon VPC User Guide).
SMALLEST_SUBNET_PREFIX = 28


class NetworkConfig(Strict):
    """VPC layout: one public and one private subnet per AZ."""

    vpc_cidr: str = Field(
        default="10.0.0.0/16",
        description="The VPC's IPv4 block, /16 to /22 when subnets are carved from it.",
    )
    availability_zones: list[str] = Field(
        min_length=2,
        description="AZs of the region, at least 2, no duplicates; one public and one private subnet each.",
    )
    private_subnet_cidrs: Optional[list[str]] = Field(
        default=None,
        description="One private subnet per AZ; omitted: carved from vpcCidr (its first eighths, /19 of a /16).",
    )
    public_subnet_cidrs: Optional[list[str]] = Field(
        default=None,
        description="One public subnet per AZ; omitted: carved from the top eighth of vpcCidr (/22 of a /16).",
    )
    nat_gateways: Literal["single", "perAz"] = Field(
        default="single",
        description="`single` NAT gateway (cheap, dev) or one `perAz` (survives an AZ outage).",
    )

    @field_validator("availability_zones")
    @classmethod
    def _unique_azs(cls, azs: list[str]) -> list[str]:
        dupes = sorted({az for az in azs if azs.count(az) > 1})
        if dupes:
            raise ValueError(f"availability zones listed twice: {clip(', '.join(dupes))}")
        return azs

    @field_validator("vpc_cidr")
    @classmethod
    def _vpc_cidr(cls, value: str) -> str:
        net = ipv4_network(value)
        if not 16 <= net.prefixlen <= 24:
            raise ValueError(f"{value} must be between /16 and /24 (an AWS VPC limit)")
        return value

    @field_validator("private_subnet_cidrs", "public_subnet_cidrs")
    @classmethod
    def _subnet_cidrs(cls, values: Optional[list[str]]) -> Optional[list[str]]:
        for value in values or []:
            ipv4_network(value)
        return values

    @model_validator(mode="after")
    def _layout(self) -> "NetworkConfig":
        vpc = ipaddress.IPv4Network(self.vpc_cidr)  # validated above: an IPv4 block
        problems = self._carving_problems(vpc)
        if problems:
            raise ValueError("\n".join(problems))
        for label, cidrs in (
            ("privateSubnetCidrs", self.private_subnet_cidrs),
            ("publicSubnetCidrs", self.public_subnet_cidrs),
        ):
            if cidrs is not None and len(cidrs) != len(self.availability_zones):
                problems.append(
                    f"{label} has {len(cidrs)} entries for {len(self.availability_zones)} availability zones"
                )
        subnets = [("private", c) for c in self.private_cidrs()] + [("public", c) for c in self.public_cidrs()]
        for kind, cidr in subnets:
            if not ipaddress.IPv4Network(cidr).subnet_of(vpc):
                problems.append(f"{kind} subnet {cidr} does not fit in vpcCidr {self.vpc_cidr}")
        for i, (kind_a, a) in enumerate(subnets):
            for kind_b, b in subnets[i + 1 :]:
                if ipaddress.ip_network(a).overlaps(ipaddress.ip_network(b)):
                    problems.append(f"{kind_a} subnet {a} overlaps {kind_b} subnet {b}")
        if problems:
            raise ValueError("\n".join(problems))  # one problem a line: reported separately
        return self

    def _carving_problems(self, vpc: ipaddress.IPv4Network) -> list[str]:
        """Subnets AWS would refuse (smaller than /28) and AZs the carved layout has no room for."""
        problems = []
        azs = len(self.availability_zones)
        for label, given, extra_bits, room in (
            ("privateSubnetCidrs", self.private_subnet_cidrs, 3, 7),
            ("publicSubnetCidrs", self.public_subnet_cidrs, 6, 8),
        ):
            if given is not None:
                small = [c for c in given if ipaddress.IPv4Network(c).prefixlen > SMALLEST_SUBNET_PREFIX]
                if small:
                    problems.append(
                        f"{label}: {clip(', '.join(small))} smaller than /{SMALLEST_SUBNET_PREFIX}, "
                        "the smallest subnet AWS allows"
                    )
                continue
            if vpc.prefixlen + extra_bits > SMALLEST_SUBNET_PREFIX:
                problems.append(
                    f"{label}: vpcCidr {self.vpc_cidr} carves /{vpc.prefixlen + extra_bits} subnets, smaller than "
                    f"/{SMALLEST_SUBNET_PREFIX} (the smallest AWS allows); use a vpcCidr of "
                    f"/{SMALLEST_SUBNET_PREFIX - extra_bits} or larger, or set {label}"
                )
            elif azs > room:
                problems.append(
                    f"{label}: the layout carved from vpcCidr has room for {room} subnets, not one for "
                    f"each of {azs} availability zones; list at most {room} or set {label}"
                )
        return problems

    def private_cidrs(self) -> list[str]:
        if self.private_subnet_cidrs is not None:
            return list(self.private_subnet_cidrs)
        vpc = ipaddress.IPv4Network(self.vpc_cidr)
        blocks = list(vpc.subnets(prefixlen_diff=3))[:-1]  # the last eighth is for public subnets
        return [str(b) for b in blocks[: len(self.availability_zones)]]

    def public_cidrs(self) -> list[str]:
        if self.public_subnet_cidrs is not None:
            return list(self.public_subnet_cidrs)
        vpc = ipaddress.IPv4Network(self.vpc_cidr)
        top = list(vpc.subnets(prefixlen_diff=3))[-1]
        return [str(b) for b in list(top.subnets(prefixlen_diff=3))[: len(self.availability_zones)]]
