"""The VPC: public subnets for NAT and load balancers, private subnets for every node.

Hand-written rather than `awsx.ec2.Vpc` on purpose: the subnets and their AZs must be resources
this program registers, so the policy pack and the tests can see which AZ each node group lands in.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from .config.base import REGION_NAME, in_region, shown
from .config.network import NetworkConfig

# `kubernetes.io/cluster/<cluster>` on every subnet: "shared" lets EKS and its load-balancer
# controllers use the subnet without claiming it ("owned" would tie its lifetime to the cluster).
# https://docs.aws.amazon.com/eks/latest/userguide/network-reqs.html#network-requirements-subnets
CLUSTER_TAG_VALUE = "shared"


@dataclass(frozen=True)
class NetworkArgs:
    """Inputs of `Network`, all known when it is constructed (they decide which resources exist)."""

    config: NetworkConfig
    """The `network` section: VPC CIDR, availability zones, subnet blocks, NAT gateways."""
    cluster_name: str
    """The EKS cluster's name, for the `kubernetes.io/cluster/<name>` tag of every subnet."""
    region: str
    """The AWS region: every availability zone must belong to it; it names the S3 gateway endpoint's
    service (`com.amazonaws.<region>.s3`)."""
    protect: bool = False
    """protect=True on the VPC, so `pulumi destroy` must be a deliberate act."""
    tags: dict[str, str] | None = None
    """Tags on every resource."""


def check_network_args(args: NetworkArgs) -> None:
    """`pulumi.InputPropertyError` naming the input the `network` section alone cannot rule out."""
    if not args.cluster_name:
        raise pulumi.InputPropertyError("cluster_name", "empty; the subnets' kubernetes.io/cluster/<name> tag needs it")
    if not REGION_NAME.fullmatch(args.region):
        raise pulumi.InputPropertyError("region", f"{shown(args.region)} is not an AWS region name such as 'us-west-2'")
    for az in args.config.availability_zones:
        if not in_region(az, args.region):
            raise pulumi.InputPropertyError(
                "config.availability_zones", f"{shown(az)} is not an availability zone of region {args.region}"
            )


class Network(pulumi.ComponentResource):
    """VPC, one public and one private subnet per AZ, IGW, NAT gateway(s) and routes."""

    vpc: aws.ec2.Vpc
    public_subnets: dict[str, aws.ec2.Subnet]  # by AZ
    private_subnets: dict[str, aws.ec2.Subnet]  # by AZ
    nat_gateways: list[aws.ec2.NatGateway]
    s3_endpoint: aws.ec2.VpcEndpoint
    # The routes out of the VPC (IGW, NAT, route table associations, the S3 endpoint): nodes need them
    # to pull images, and what runs on the cluster must be deleted before them (an NLB's public
    # addresses keep the IGW from detaching, a node's ENIs its subnet from deleting).
    egress: list[pulumi.Resource]

    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None):
        check_network_args(args)
        super().__init__("llm-pd-eks:index:Network", name, None, opts)
        cfg = args.config
        tags = dict(args.tags or {})
        cluster_tag = {f"kubernetes.io/cluster/{args.cluster_name}": CLUSTER_TAG_VALUE}
        child = pulumi.ResourceOptions(parent=self)

        self.vpc = aws.ec2.Vpc(
            f"{name}-vpc",
            cidr_block=cfg.vpc_cidr,
            enable_dns_hostnames=True,  # EKS nodes and the private API endpoint need DNS names
            enable_dns_support=True,
            tags={**tags, "Name": f"{name}-vpc"},
            opts=pulumi.ResourceOptions(parent=self, protect=args.protect),
        )
        igw = aws.ec2.InternetGateway(
            f"{name}-igw", vpc_id=self.vpc.id, tags={**tags, "Name": f"{name}-igw"}, opts=child
        )

        self.public_subnets, self.private_subnets = {}, {}
        for az, public_cidr, private_cidr in zip(cfg.availability_zones, cfg.public_cidrs(), cfg.private_cidrs()):
            self.public_subnets[az] = aws.ec2.Subnet(
                f"{name}-public-{az}",
                vpc_id=self.vpc.id,
                availability_zone=az,
                cidr_block=public_cidr,
                map_public_ip_on_launch=True,
                tags={**tags, **cluster_tag, "Name": f"{name}-public-{az}", "kubernetes.io/role/elb": "1"},
                opts=child,
            )
            self.private_subnets[az] = aws.ec2.Subnet(
                f"{name}-private-{az}",
                vpc_id=self.vpc.id,
                availability_zone=az,
                cidr_block=private_cidr,
                map_public_ip_on_launch=False,  # nodes live here and never get a public IP
                tags={**tags, **cluster_tag, "Name": f"{name}-private-{az}", "kubernetes.io/role/internal-elb": "1"},
                opts=child,
            )

        public_rt = aws.ec2.RouteTable(
            f"{name}-public-rt",
            vpc_id=self.vpc.id,
            routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", gateway_id=igw.id)],
            tags={**tags, "Name": f"{name}-public-rt"},
            opts=child,
        )
        associations = [
            aws.ec2.RouteTableAssociation(
                f"{name}-public-rta-{az}", subnet_id=subnet.id, route_table_id=public_rt.id, opts=child
            )
            for az, subnet in self.public_subnets.items()
        ]

        # dev: one NAT in the first AZ (cheap; that AZ's outage cuts egress). prod: one per AZ.
        nat_azs = cfg.availability_zones if cfg.nat_gateways == "perAz" else cfg.availability_zones[:1]
        nat_by_az: dict[str, aws.ec2.NatGateway] = {}
        for az in nat_azs:
            eip = aws.ec2.Eip(
                f"{name}-nat-eip-{az}", domain="vpc", tags={**tags, "Name": f"{name}-nat-{az}"}, opts=child
            )
            nat_by_az[az] = aws.ec2.NatGateway(
                f"{name}-nat-{az}",
                allocation_id=eip.id,
                subnet_id=self.public_subnets[az].id,
                tags={**tags, "Name": f"{name}-nat-{az}"},
                opts=pulumi.ResourceOptions(parent=self, depends_on=[igw]),  # AWS: NAT needs the IGW attached
            )
        self.nat_gateways = list(nat_by_az.values())

        private_rts: list[aws.ec2.RouteTable] = []
        for az, subnet in self.private_subnets.items():
            nat = nat_by_az.get(az, self.nat_gateways[0])
            rt = aws.ec2.RouteTable(
                f"{name}-private-rt-{az}",
                vpc_id=self.vpc.id,
                routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", nat_gateway_id=nat.id)],
                tags={**tags, "Name": f"{name}-private-rt-{az}"},
                opts=child,
            )
            associations.append(
                aws.ec2.RouteTableAssociation(
                    f"{name}-private-rta-{az}", subnet_id=subnet.id, route_table_id=rt.id, opts=child
                )
            )
            private_rts.append(rt)

        # S3 through a gateway endpoint, not the NAT gateway: ECR serves image layers from S3
        # (https://docs.aws.amazon.com/AmazonECR/latest/userguide/vpc-endpoints.html), and weights kept in
        # S3 come the same way. Gateway endpoints have no hourly or per-GB charge
        # (https://docs.aws.amazon.com/vpc/latest/privatelink/gateway-endpoints.html), NAT bills every GB.
        # No ECR (api, dkr) or STS interface endpoints: each is billed per AZ-hour and per GB
        # (https://aws.amazon.com/privatelink/pricing/) and would carry only manifests, auth tokens and
        # IRSA's AssumeRoleWithWebIdentity calls, kilobytes that cost less through NAT.
        self.s3_endpoint = aws.ec2.VpcEndpoint(
            f"{name}-s3",
            vpc_id=self.vpc.id,
            service_name=f"com.amazonaws.{args.region}.s3",
            vpc_endpoint_type="Gateway",
            route_table_ids=[rt.id for rt in private_rts],
            tags={**tags, "Name": f"{name}-s3"},
            opts=child,
        )
        self.egress = [igw, *self.nat_gateways, *associations, self.s3_endpoint]

        self.register_outputs(
            {
                "vpcId": self.vpc.id,
                "privateSubnetIds": [s.id for s in self.private_subnets.values()],
                "publicSubnetIds": [s.id for s in self.public_subnets.values()],
            }
        )

    @property
    def private_subnet_ids(self) -> list[pulumi.Output[str]]:
        return [s.id for s in self.private_subnets.values()]

    @property
    def public_subnet_ids(self) -> list[pulumi.Output[str]]:
        return [s.id for s in self.public_subnets.values()]
