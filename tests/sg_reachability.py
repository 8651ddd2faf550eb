"""Which traffic the security groups of a recorded plan let through, computed from their rules.

Security groups are stateful allow-lists: a flow from A to B passes when one of A's groups has an
egress rule covering B (B's group, or a CIDR holding B's subnet) AND one of B's groups has an ingress
rule covering A; replies are allowed implicitly. A rule with protocol "-1" covers every protocol
and port (https://docs.aws.amazon.com/vpc/latest/userguide/vpc-security-group-rules.html).

The rules come from two places:
- every `aws:ec2/securityGroup:SecurityGroup` (inline `ingress`/`egress`) and
  `aws:ec2/securityGroupRule:SecurityGroupRule` the program registers, read from the plan;
- the groups created outside the plan, written down below as data with their source: the group EKS
  creates for every cluster, and the two groups pulumi-eks creates inside its `Cluster` component
  (a remote component, so its children are not in a mock plan).

Which groups an endpoint carries is also EKS behaviour, not the program's say-so:
- the control-plane ENIs carry the EKS-created cluster group and `vpcConfig.securityGroupIds`
  (pulumi-eks puts its own cluster group there);
- a managed node whose launch template has network interfaces carries exactly their groups; one
  whose template names `vpcSecurityGroupIds` carries those; otherwise EKS attaches the EKS-created
  cluster group (https://docs.aws.amazon.com/eks/latest/userguide/launch-templates.html).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from llm_pd_eks_tools.plan.preview.mockrun import ProgramRun, Registration, eks_cluster_ids

ALL = "-1"


@dataclass(frozen=True)
class Rule:
    protocol: str  # "-1", "tcp", "udp", "icmp"
    from_port: int
    to_port: int
    groups: frozenset[str] = frozenset()
    cidrs: tuple[str, ...] = ()

    def covers(self, protocol: str, port: int) -> bool:
        if self.protocol == ALL:
            return True
        return protocol != ALL and self.protocol == protocol and self.from_port <= port <= self.to_port

    def admits(self, peer: Endpoint) -> bool:
        if self.groups & set(peer.groups):
            return True
        nets = [ipaddress.ip_network(c) for c in self.cidrs]
        return any(any(ipaddress.ip_network(s).subnet_of(n) for n in nets) for s in peer.subnets)  # type: ignore[arg-type]


@dataclass
class SecurityGroup:
    id: str
    ingress: list[Rule] = field(default_factory=list)
    egress: list[Rule] = field(default_factory=list)


@dataclass(frozen=True)
class Endpoint:
    name: str
    groups: tuple[str, ...]
    subnets: tuple[str, ...]  # CIDRs its addresses come from


# --- groups created outside the plan, as documented ----------------------------------------------


def eks_created_group(group_id: str) -> SecurityGroup:
    """The cluster security group EKS creates: all traffic from itself in, everything out.

    https://docs.aws.amazon.com/eks/latest/userguide/sec-group-reqs.html ("Default cluster security
    group rules": inbound all/all from the group itself; outbound all/all to 0.0.0.0/0).
    """
    return SecurityGroup(
        group_id,
        ingress=[Rule(ALL, 0, 0, groups=frozenset({group_id}))],
        egress=[Rule(ALL, 0, 0, cidrs=("0.0.0.0/0",))],
    )


def pulumi_eks_groups(cluster_group: str, node_group: str) -> list[SecurityGroup]:
    """pulumi-eks's own cluster and node groups (nodejs/eks/securitygroup.ts, cluster.ts).

    Cluster group: `eksClusterIngressRule` (443/tcp from the node group), `eksClusterInternetEgressRule`
    (all out). Node group: `eksNodeIngressRule` (all from itself), `eksNodeClusterIngressRule`
    (1025-65535/tcp from the cluster group), `eksExtApiServerClusterIngressRule` (443/tcp from the
    cluster group), `eksNodeInternetEgressRule` (all out).
    """
    return [
        SecurityGroup(
            cluster_group,
            ingress=[Rule("tcp", 443, 443, groups=frozenset({node_group}))],
            egress=[Rule(ALL, 0, 0, cidrs=("0.0.0.0/0",))],
        ),
        SecurityGroup(
            node_group,
            ingress=[
                Rule(ALL, 0, 0, groups=frozenset({node_group})),
                Rule("tcp", 1025, 65535, groups=frozenset({cluster_group})),
                Rule("tcp", 443, 443, groups=frozenset({cluster_group})),
            ],
            egress=[Rule(ALL, 0, 0, cidrs=("0.0.0.0/0",))],
        ),
    ]


# --- groups and endpoints of a plan ----------------------------------------------------------------


def _rule(raw: dict, own_id: str) -> Rule:
    groups = set(raw.get("securityGroups") or [])
    if raw.get("self"):
        groups.add(own_id)
    if raw.get("sourceSecurityGroupId"):
        groups.add(raw["sourceSecurityGroupId"])
    return Rule(
        str(raw["protocol"]),
        int(raw.get("fromPort", 0)),
        int(raw.get("toPort", 0)),
        frozenset(groups),
        tuple(raw.get("cidrBlocks") or ()),
    )


def plan_groups(run: ProgramRun) -> dict[str, SecurityGroup]:
    """Every security group of the plan with its rules, plus the ones EKS and (unless skipped) pulumi-eks create."""
    eks = run.one("eks:index:Cluster")
    ids = eks_cluster_ids(eks.name)
    groups = {
        g.id: g
        for g in [
            eks_created_group(ids["eksClusterSecurityGroupId"]),
            *(
                []
                if eks.inputs.get("skipDefaultSecurityGroups")
                else pulumi_eks_groups(eks.outputs["clusterSecurityGroupId"], eks.outputs["nodeSecurityGroupId"])
            ),
        ]
    }
    for sg in run.of_type("aws:ec2/securityGroup:SecurityGroup"):
        groups[sg.id] = SecurityGroup(
            sg.id,
            ingress=[_rule(r, sg.id) for r in sg.inputs.get("ingress") or []],
            egress=[_rule(r, sg.id) for r in sg.inputs.get("egress") or []],
        )
    for rule in run.of_type("aws:ec2/securityGroupRule:SecurityGroupRule"):
        target = groups.setdefault(rule.inputs["securityGroupId"], SecurityGroup(rule.inputs["securityGroupId"]))
        (target.ingress if rule.inputs["type"] == "ingress" else target.egress).append(_rule(rule.inputs, target.id))
    return groups


def _subnet_cidrs(run: ProgramRun, subnet_ids: list[str]) -> tuple[str, ...]:
    by_id = {s.id: s for s in run.of_type("aws:ec2/subnet:Subnet")}
    return tuple(by_id[i].inputs["cidrBlock"] for i in subnet_ids)


def control_plane(run: ProgramRun) -> Endpoint:
    eks = run.one("eks:index:Cluster")
    ids = eks_cluster_ids(eks.name)
    return Endpoint(
        "control plane",
        (ids["eksClusterSecurityGroupId"], eks.outputs["clusterSecurityGroupId"]),
        _subnet_cidrs(run, eks.inputs["privateSubnetIds"]),
    )


def node_endpoint(run: ProgramRun, node_group: Registration) -> Endpoint:
    """The groups EKS gives the group's nodes, decided by its launch template as EKS documents."""
    eks = run.one("eks:index:Cluster")
    lt_ref = node_group.inputs.get("launchTemplate") or {}
    lt = next((t for t in run.of_type("aws:ec2/launchTemplate:LaunchTemplate") if t.id == lt_ref.get("id")), None)
    nics = (lt.inputs.get("networkInterfaces") or []) if lt else []
    if nics:
        groups = tuple(dict.fromkeys(g for nic in nics for g in nic.get("securityGroups") or []))
    elif lt and lt.inputs.get("vpcSecurityGroupIds"):
        groups = tuple(lt.inputs["vpcSecurityGroupIds"])
    else:
        groups = (eks_cluster_ids(eks.name)["eksClusterSecurityGroupId"],)
    return Endpoint(node_group.name, groups, _subnet_cidrs(run, node_group.inputs["subnetIds"]))


def allowed(groups: dict[str, SecurityGroup], src: Endpoint, dst: Endpoint, protocol: str, port: int = 0) -> bool:
    """Does a `protocol`/`port` flow from `src` to `dst` pass both sides' groups? (Unknown groups allow nothing.)"""
    out_ok = any(
        r.covers(protocol, port) and r.admits(dst) for g in src.groups if g in groups for r in groups[g].egress
    )
    in_ok = any(
        r.covers(protocol, port) and r.admits(src) for g in dst.groups if g in groups for r in groups[g].ingress
    )
    return out_ok and in_ok


def missing_flows(run: ProgramRun) -> list[str]:
    """Every flow a working cluster needs that the groups would drop, named; empty when all pass.

    What each node needs: its kubelet and pods reach the API server (443/tcp); the control plane
    reaches the kubelet (10250/tcp, logs/exec/metrics); pods reach CoreDNS on the system nodes
    (53/udp and 53/tcp); Ray head (system nodes) and workers (GPU nodes) talk on many ports both
    ways (GCS 6379, object manager, worker ports: all traffic); GPU nodes reach each other on all
    traffic (NCCL/NIXL); and EFA needs one group that admits all traffic from and to itself.
    """
    groups = plan_groups(run)
    cp = control_plane(run)
    nodes = {ng.name: node_endpoint(run, ng) for ng in run.of_type("aws:eks/nodeGroup:NodeGroup")}
    system = next(e for n, e in nodes.items() if "system" in n)
    gpu = next(e for n, e in nodes.items() if "gpu" in n)
    needs = []
    for node in nodes.values():
        needs += [
            (node, cp, "tcp", 443),
            (cp, node, "tcp", 10250),
            (node, system, "udp", 53),
            (node, system, "tcp", 53),
        ]
    needs += [(system, gpu, ALL, 0), (gpu, system, ALL, 0), (gpu, gpu, ALL, 0), (system, system, ALL, 0)]
    problems = [
        f"{a.name} -> {b.name}: {'all traffic' if p == ALL else f'{port}/{p}'} blocked"
        for a, b, p, port in needs
        if not allowed(groups, a, b, p, port)
    ]
    efa_self = [
        g
        for g in gpu.groups
        if g in groups
        and any(r.protocol == ALL and g in r.groups for r in groups[g].ingress)
        and any(r.protocol == ALL and g in r.groups for r in groups[g].egress)
    ]
    if not efa_self:
        problems.append(f"{gpu.name}: no security group admits all traffic from and to itself (EFA)")
    return problems
