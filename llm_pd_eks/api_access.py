"""How `pulumi up` reaches the Kubernetes API: stated in the stack, checked before anything is created,
and proven by the first Kubernetes object before the GPU nodes launch.

Half of `up` (Helm releases, the RayService) goes through the cluster's API endpoint. EKS answers it
(https://docs.aws.amazon.com/eks/latest/userguide/cluster-endpoint.html):
- on the public endpoint, only from `publicAccessCidrs`;
- on the private endpoint, from inside the cluster's VPC or a connected network (peering, Transit
  Gateway, VPN, Direct Connect) once the cluster security group admits 443 from that network. With
  the public endpoint also enabled, the endpoint's name resolves to the public addresses outside the
  VPC, so a connected network is on the public route then.

`deploy.apiSourceCidrs` names where `up` runs from. `deploy_path_problems` refuses, before any
resource registers, a stack whose deploy path cannot reach the endpoint. `ApiAccess` then adds
the 443 rules a private route needs and applies one small ConfigMap in `kube-system`; the GPU node
group depends on it, so an unreachable API fails `up` before any GPU instance launches.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Sequence

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from .config.base import PROJECT
from .config.stack import StackConfig

# RFC 1918: the private blocks a connected network (and a VPC) is addressed from.
PRIVATE_BLOCKS = tuple(ipaddress.IPv4Network(b) for b in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"))
API_PORT = 443
PROBE_NAME = "llm-pd-eks-deploy-path"
PROBE_NAMESPACE = "kube-system"  # exists in every cluster, so the probe needs nothing but the API


def _key(name: str) -> str:
    return f"{PROJECT}:{name}"


def private_route_cidrs(config: StackConfig) -> list[str]:
    """The source CIDRs that reach the private endpoint (private-only endpoint, RFC 1918 sources)."""
    if config.cluster.public_access_cidrs:
        return []
    return [
        c for c in config.deploy.api_source_cidrs if any(ipaddress.IPv4Network(c).subnet_of(b) for b in PRIVATE_BLOCKS)
    ]


def deploy_path_problems(config: StackConfig) -> list[str]:
    """Why the machine running `up` could not reach the API endpoint, one problem a line (none: it can)."""
    sources = config.deploy.api_source_cidrs
    public = [ipaddress.IPv4Network(c) for c in config.cluster.public_access_cidrs]
    vpc = ipaddress.IPv4Network(config.network.vpc_cidr)
    if not sources:
        return [
            f"{_key('deploy.apiSourceCidrs')}: not set: name the CIDRs `pulumi up` runs from (inside "
            "cluster.publicAccessCidrs, or a connected private network for a private-only endpoint); "
            "without a route to the API the Kubernetes half of `up` fails after the nodes launch"
        ]
    problems = []
    for cidr in sources:
        net = ipaddress.IPv4Network(cidr)
        if net.overlaps(vpc):
            problems.append(
                f"{_key('deploy.apiSourceCidrs')}: {cidr} overlaps network.vpcCidr {vpc}, the VPC this `up` "
                "creates: no runner can be inside it before it exists; run `up` from a connected network"
            )
        elif public:
            if not any(net.subnet_of(p) for p in public):
                problems.append(
                    f"{_key('deploy.apiSourceCidrs')}: {cidr} is not inside cluster.publicAccessCidrs "
                    f"({', '.join(map(str, public))}); the public endpoint would refuse `up` (add it there, or "
                    "make the endpoint private-only and run `up` from a connected network)"
                )
        elif not any(net.subnet_of(b) for b in PRIVATE_BLOCKS):
            problems.append(
                f"{_key('deploy.apiSourceCidrs')}: {cidr} is not a private (RFC 1918) network, and the endpoint "
                "is private-only (cluster.publicAccessCidrs is empty); only a connected private network reaches it"
            )
    return problems


@dataclass(frozen=True)
class ApiAccessArgs:
    config: StackConfig
    cluster_security_group_id: pulumi.Input[str]  # the group EKS created (vpcConfig.clusterSecurityGroupId)
    provider: k8s.Provider
    # The control plane and its access entries: the probe applies as the identity running `up`.
    depends_on: Sequence[pulumi.Resource] = ()
    tags: dict[str, str] | None = None


class ApiAccess(pulumi.ComponentResource):
    """443 ingress on the cluster security group for a private route, and the probe object."""

    ingress: list[aws.vpc.SecurityGroupIngressRule]
    probe: k8s.core.v1.ConfigMap

    def __init__(self, name: str, args: ApiAccessArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llm-pd-eks:index:ApiAccess", name, None, opts)
        cidrs = private_route_cidrs(args.config)
        self.ingress = [
            aws.vpc.SecurityGroupIngressRule(
                f"{name}-ingress-{i}",
                security_group_id=args.cluster_security_group_id,
                cidr_ipv4=cidr,
                ip_protocol="tcp",
                from_port=API_PORT,
                to_port=API_PORT,
                description=f"pulumi up: Kubernetes API from {cidr}",
                tags=dict(args.tags or {}),
                opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)),
            )
            for i, cidr in enumerate(cidrs)
        ]
        self.probe = k8s.core.v1.ConfigMap(
            f"{name}-probe",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=PROBE_NAME, namespace=PROBE_NAMESPACE),
            data={"apiSourceCidrs": ",".join(args.config.deploy.api_source_cidrs)},
            opts=pulumi.ResourceOptions(
                parent=self, provider=args.provider, depends_on=[*args.depends_on, *self.ingress]
            ),
        )
        self.register_outputs({"privateRouteCidrs": cidrs})
