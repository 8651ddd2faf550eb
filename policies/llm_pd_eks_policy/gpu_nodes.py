"""Rules for EFA GPU capacity: one AZ, EFA on every network card, cluster placement, IMDSv2,
private subnets, the EFA security group, and no blind spots (unlisted types, references outside
the stack).

The intent is stated once and applied to every resource that can launch GPU instances
(`stack.Capacity`: EKS managed node groups, pulumi-eks node groups, Auto Scaling groups, launch
configurations, EC2 instances, launch templates of a GPU type) and to Karpenter NodePools. EFA
traffic does not leave an AZ, a cluster placement group lives in one AZ, and an EFA device left off
a network card is bandwidth the KV-cache transfer never gets; none of these fail loudly at deploy
time, so the pack is where they are caught. Stack policies, because the facts sit on different
resources joined by `StackView`.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any, Callable, Iterable, Optional

from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    ReportViolation,
    ResourceValidationArgs,
    StackValidationArgs,
    StackValidationPolicy,
)

from .capacity import is_capacity_block_template, targets_reservation
from .common import (
    AUTOSCALING_GROUP,
    EC2_INSTANCE,
    GPU_TABLE_SCHEMA,
    LAUNCH_CONFIGURATION,
    LAUNCH_TEMPLATE,
    SECURITY_GROUP,
    SECURITY_GROUP_RULE,
    SG_EGRESS_RULE,
    SG_INGRESS_RULE,
    TypeTable,
    as_int,
    config_with_defaults,
    dig,
    guarded,
    is_unknown,
    join,
    known_list,
    plain,
    resource_policy,
    truthy,
)
from .efa_table import ROWS
from .stack import Capacity, EfaInterfaces, StackView

EFA_CONFIG = GPU_TABLE_SCHEMA
KARPENTER_NODE_POOLS = ("kubernetes:karpenter.sh/v1:NodePool", "kubernetes:karpenter.sh/v1beta1:NodePool")
_KARPENTER_TYPE_KEYS = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")
_KARPENTER_FAMILY_KEY = "karpenter.k8s.aws/instance-family"


def gpu_capacities(view: StackView, table: TypeTable) -> list[tuple[Capacity, set[str]]]:
    """(capacity, its EFA GPU types) for every capacity that launches a type of the table."""
    out = []
    for cap in view.capacities():
        gpu = table.efa_of(cap.instance_types)
        if gpu:
            out.append((cap, gpu))
    return out


def _hint(table: TypeTable, types: Iterable[str]) -> str:
    return "; ".join(f"{t} has {table.efa[t]} network card(s) with EFA" for t in sorted(types) if t in table.efa)


def _template_of(cap: Capacity) -> str:
    """`launch template 'x' of node group 'y'` (or just the template when it is judged on its own)."""
    lt = cap.launch_template.resource
    return cap.label if lt is cap.resource else f"launch template '{lt.name}' of {cap.label}"


GpuCheck = Callable[[StackView, TypeTable, ReportViolation], None]


def gpu_stack_policy(
    name: str, description: str, check: GpuCheck, level: EnforcementLevel = EnforcementLevel.MANDATORY
) -> StackValidationPolicy:
    """A stack policy over the GPU resources: `check` gets the joined view and the type table."""

    def validate(args: StackValidationArgs, report: ReportViolation) -> None:
        check(StackView(args.resources), TypeTable.from_config(config_with_defaults(args, EFA_CONFIG)), report)

    return StackValidationPolicy(
        name=name,
        description=description,
        validate=guarded(name, validate),
        enforcement_level=level,
        config_schema=PolicyConfigSchema(properties=EFA_CONFIG),
    )


# -- 1. one AZ ---------------------------------------------------------------------------------
def _single_az(view: StackView, table: TypeTable, report: ReportViolation) -> None:
    for cap, gpu in gpu_capacities(view, table):
        azs: dict[str, list[str]] = {az: ["the resource itself"] for az in cap.literal_azs}
        for subnet in cap.subnets.resolved:
            az = view.subnet_az(subnet)
            if az is not None and not is_unknown(az):
                azs.setdefault(str(az), []).append(f"subnet {subnet.name}")
        if len(azs) > 1:
            spread = "; ".join(f"{az}: {join(names)}" for az, names in sorted(azs.items()))
            report(
                f"{cap.label} runs {join(gpu)} across {len(azs)} availability zones ({spread}). EFA "
                f"traffic does not cross AZs and a cluster placement group lives in one AZ. Fix: give it "
                f"the private subnet of a single AZ.",
                cap.resource.urn,
            )


gpu_group_single_az = gpu_stack_policy(
    name="gpu-node-group-single-az",
    description="Every resource that launches EFA-capable GPU instances keeps them in one availability zone.",
    check=_single_az,
)


# -- 2. EFA present on every path ----------------------------------------------------------------
def _efa_present(view: StackView, table: TypeTable, report: ReportViolation) -> None:
    for cap, gpu in gpu_capacities(view, table):
        fix = (
            f"Fix: a launch template with interfaceType 'efa' on network card 0 and 'efa-only' on every "
            f"further card ({_hint(table, gpu)})."
        )
        if cap.no_efa_reason:
            report(f"{cap.label} launches {join(gpu)} through {cap.no_efa_reason}. {fix}", cap.resource.urn)
        elif cap.launch_template.state == "none" and not cap.builtin_efa and cap.attached is None:
            report(
                f"{cap.label} runs {join(gpu)} without a launch template, so its nodes get no EFA interface. {fix}",
                cap.resource.urn,
            )
        elif (source := _interfaces(view, cap)) is not None:
            label, urn, efa = source
            if efa.malformed:
                report(f"{label}: {'; '.join(efa.malformed)}. EC2 refuses such an interface. {fix}", urn)
            elif efa.known and efa.count == 0:
                report(f"{label} ({join(gpu)}) declares no EFA network interface. {fix}", urn)


def _interfaces(view: StackView, cap: Capacity) -> Optional[tuple[str, str, EfaInterfaces]]:
    """(label, urn, interfaces) of where a capacity's network interfaces are declared, if known."""
    if cap.launch_template.state == "resolved":
        return _template_of(cap), cap.launch_template.resource.urn, view.efa_interfaces(cap.launch_template.resource)
    if cap.launch_template.state == "none" and cap.attached is not None:
        return f"{cap.label}'s networkInterfaces", cap.resource.urn, cap.attached
    return None


efa_on_every_card = gpu_stack_policy(
    name="efa-on-gpu-nodes",
    description="Every resource that launches EFA-capable GPU instances attaches EFA interfaces.",
    check=_efa_present,
)


def _efa_count(view: StackView, table: TypeTable, report: ReportViolation) -> None:
    seen: set[str] = set()
    for cap, gpu in gpu_capacities(view, table):
        source = _interfaces(view, cap)
        if source is None:
            continue
        label, urn, efa = source
        if not efa.known or efa.count == 0 or efa.malformed or urn in seen:
            continue  # unknown: skip; none / malformed: efa-on-gpu-nodes reports it
        seen.add(urn)
        # Several GPU types (a mixed group, overrides): the one with the most EFA cards sets the bar.
        strictest = table.strictest(gpu)
        cards = table.cards(strictest)
        expected = len(cards)
        missing = sorted(set(cards) - set(efa.cards))
        doubled = sorted(c for c, n in efa.cards.items() if n > 1)
        beyond = sorted(set(efa.cards) - set(cards))
        if missing or doubled or beyond:
            problems = [f"cards without EFA: {missing}"] if missing else []
            problems += [f"more than one EFA interface on card(s) {doubled}"] if doubled else []
            problems += [f"card index(es) {beyond} carry no EFA on {strictest}"] if beyond else []
            of_types = strictest if len(gpu) == 1 else f"{strictest} (the strictest of {join(gpu)})"
            report(
                f"{label} has {efa.count} EFA interface(s) on card(s) "
                f"{sorted(efa.cards)} but {of_types} has {expected} network card(s) with EFA; "
                f"{'; '.join(problems)}. KV-cache transfer gets only part of the node's EFA bandwidth. "
                f"Fix: exactly one EFA interface on each of network cards {_cards_text(cards)}.",
                urn,
            )


def _cards_text(cards: tuple[int, ...]) -> str:
    return f"{cards[0]}..{cards[-1]}" if cards == tuple(range(cards[0], cards[-1] + 1)) else str(list(cards))


efa_interface_count = gpu_stack_policy(
    name="efa-interface-count",
    description="GPU launch templates attach exactly one EFA interface on each network card the type has.",
    check=_efa_count,
)


# -- 3. cluster placement ----------------------------------------------------------------------
def _cluster_placement(view: StackView, table: TypeTable, report: ReportViolation) -> None:
    fix = "Fix: create an aws.ec2.PlacementGroup with strategy 'cluster' and set placement.groupName to it."
    for cap, gpu in gpu_capacities(view, table):
        if cap.builtin_efa or cap.no_efa_reason:
            continue  # pulumi-eks builds its own cluster group; efa-on-gpu-nodes refuses the other
        if cap.launch_template.state == "resolved" and is_capacity_block_template(
            view.props(cap.launch_template.resource)
        ):
            continue  # a Capacity Block needs no placement group (capacity-reservation-in-gpu-az judges it)
        refs = [("the resource's placementGroup", cap.placement)]
        if cap.launch_template.state == "resolved":
            refs.append(
                (
                    f"launch template '{cap.launch_template.resource.name}'",
                    view.placement_group(cap.launch_template.resource),
                )
            )
        elif cap.launch_template.state == "none" and cap.placement.state == "none":
            report(
                f"{cap.label} runs {join(gpu)} without a launch template or placement group. {fix}", cap.resource.urn
            )
            continue
        if cap.launch_template.state in ("unresolved", "external", "unjudgeable") and cap.placement.state == "none":
            continue  # the template decides; it is unknown yet or outside the stack
        if all(ref.state == "none" for _, ref in refs):
            target = cap.launch_template.resource if cap.launch_template.state == "resolved" else cap.resource
            report(f"{cap.label} ({join(gpu)}) sets no placement group. {fix}", target.urn)
            continue
        for where, ref in refs:
            if ref.state != "resolved":
                continue
            strategy = dig(view.props(ref.resource), "strategy")
            if strategy is not None and not is_unknown(strategy) and strategy != "cluster":
                report(
                    f"{cap.label} ({join(gpu)}): {where} uses placement group '{ref.resource.name}' with "
                    f"strategy '{strategy}'; EFA needs the nodes close together. {fix}",
                    (cap.launch_template.resource if "template" in where else cap.resource).urn,
                )


cluster_placement = gpu_stack_policy(
    name="gpu-cluster-placement-group",
    description="EFA-capable GPU instances launch into a placement group with strategy 'cluster'.",
    check=_cluster_placement,
)


# -- 4. IMDSv2 and the hop limit ------------------------------------------------------------------
IMDS_CONFIG: dict[str, dict[str, Any]] = {
    "maxHopLimit": {
        "type": "integer",
        "minimum": 1,
        "description": "largest httpPutResponseHopLimit allowed (1 keeps pods off the node's IMDS credentials)",
        "default": 1,
    },
}


def _imdsv2(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type not in (LAUNCH_TEMPLATE, EC2_INSTANCE, LAUNCH_CONFIGURATION):
        return
    props = plain(args.props)
    if (
        args.resource_type == EC2_INSTANCE
        and dig(props, "launchTemplate") is not None
        and dig(props, "metadataOptions") is None
    ):
        # No metadataOptions of its own: EC2 launches it with its launch template's, and this rule
        # judges that template as a resource of its own (a template outside the stack of a GPU
        # instance is refused by gpu-references-in-stack).
        return
    endpoint = dig(props, "metadataOptions", "httpEndpoint")
    tokens = dig(props, "metadataOptions", "httpTokens")
    hops = dig(props, "metadataOptions", "httpPutResponseHopLimit")
    if is_unknown(endpoint) or endpoint == "disabled":
        return
    kind = args.resource_type.split(":")[-1]
    problems = []
    if not is_unknown(tokens) and tokens != "required":
        shown = f"'{tokens}'" if tokens else "unset (EC2 then defaults to 'optional')"
        problems.append(f"metadataOptions.httpTokens is {shown}, so IMDSv1 stays open to SSRF-style credential theft")
    limit = int(config_with_defaults(args, IMDS_CONFIG)["maxHopLimit"])
    value = as_int(hops)
    if not is_unknown(hops) and (hops is None or value is None or value > limit):
        shown = "unset (EC2 takes the AMI's or the service's default, which can be 2)" if hops is None else repr(hops)
        problems.append(
            f"metadataOptions.httpPutResponseHopLimit is {shown}; above {limit} every pod on "
            f"the node can reach the node role's credentials through IMDS"
        )
    if problems:
        report(
            f"{kind} '{args.name}': {'; '.join(problems)}. Fix: metadataOptions={{httpTokens: 'required', "
            f"httpEndpoint: 'enabled', httpPutResponseHopLimit: 1}}."
        )


imdsv2_required = resource_policy(
    name="launch-template-imdsv2",
    description="Launch templates, instances and launch configurations require IMDSv2 with a small hop limit.",
    validate=_imdsv2,
    config=IMDS_CONFIG,
)


# -- 5. private GPU nodes ----------------------------------------------------------------------
def _private_gpu_nodes(view: StackView, table: TypeTable, report: ReportViolation) -> None:
    for cap, gpu in gpu_capacities(view, table):
        public = []
        for s in cap.subnets.resolved:
            why = ["mapPublicIpOnLaunch true"] if truthy(dig(view.props(s), "mapPublicIpOnLaunch")) else []
            why += [f"{t} routes to an internet gateway" for t in view.routes_to_internet_gateway(s)]
            if why:
                public.append(f"{s.name} ({', '.join(why)})")
        if public:
            report(
                f"{cap.label} places {join(gpu)} nodes in public subnet(s): {'; '.join(public)}. Fix: use "
                f"the private subnet of the GPU AZ (no public IPs, default route through NAT).",
                cap.resource.urn,
            )
        if cap.public_ip:
            report(
                f"{cap.label} ({join(gpu)}) asks for public IP addresses. Fix: drop "
                f"associatePublicIpAddress (GPU nodes stay private).",
                cap.resource.urn,
            )
        if cap.launch_template.state == "resolved":
            efa = view.efa_interfaces(cap.launch_template.resource)
            if efa.public:
                report(
                    f"{_template_of(cap)} sets "
                    f"associatePublicIpAddress on interface(s) {efa.public}. Fix: drop it (GPU nodes stay "
                    f"private).",
                    cap.launch_template.resource.urn,
                )


private_gpu_nodes = gpu_stack_policy(
    name="gpu-nodes-private",
    description="GPU nodes run only in private subnets (no public IP mapping, no route to an internet "
    "gateway) and ask for no public IPs.",
    check=_private_gpu_nodes,
)


# -- 6. the EFA security group ----------------------------------------------------------------------
_ALL_PROTOCOLS = ("-1", "all")
# A block this wide (or wider) is the internet for this rule, also when it is split into pieces:
# the ingress CIDRs of a group are collapsed as address sets before they are compared.
_WIDEST = {4: 8, 6: 32}


def _wide_blocks(cidrs: list[Any]) -> list[str]:
    """The collapsed address blocks of `cidrs` wider than /8 (IPv4) or /32 (IPv6)."""
    nets: dict[int, list] = {4: [], 6: []}
    for cidr in cidrs:
        if not isinstance(cidr, str) or is_unknown(cidr):
            continue
        try:
            net = ipaddress.ip_network(cidr.strip(), strict=False)
        except ValueError:
            continue  # EC2 refuses it
        nets[net.version].append(net)
    wide = []
    for version, group in nets.items():
        for block in ipaddress.collapse_addresses(group):
            if block.prefixlen < _WIDEST[version]:
                wide.append(str(block))
    return wide


def _admits_itself(view: StackView, rule: Any, group: Any, key: str) -> bool:
    """`key` of a rule resource names `group` itself (by property dependency or by its known ID)."""
    if group in view.deps(rule, key, SECURITY_GROUP):
        return True
    source, own = dig(view.props(rule), key), dig(view.props(group), "id")
    return isinstance(source, str) and not is_unknown(source) and own is not None and source == own


def _sg_rules(view: StackView, group: Any) -> tuple[set[str], list[str]]:
    """({"ingress", "egress"} that allow all traffic to/from the group itself, open ingress rules)."""
    props = view.props(group)
    self_all: set[str] = set()
    ingress: list[tuple[str, list[Any]]] = []  # (label, CIDRs) of every ingress rule of the group
    for direction in ("ingress", "egress"):
        for rule in known_list(dig(props, direction)) or []:
            cidrs = (known_list(dig(rule, "cidrBlocks")) or []) + (known_list(dig(rule, "ipv6CidrBlocks")) or [])
            if str(dig(rule, "protocol")) in _ALL_PROTOCOLS and (
                truthy(dig(rule, "self")) or (direction == "egress" and "0.0.0.0/0" in cidrs)
            ):
                self_all.add(direction)  # all egress includes the group itself
            if direction == "ingress":
                ingress.append((f"inline ingress {dig(rule, 'description') or cidrs}", cidrs))
    for rule in view.of_type(SECURITY_GROUP_RULE):
        rp = view.props(rule)
        if group not in view.deps(rule, "securityGroupId", SECURITY_GROUP):
            continue
        direction = str(dig(rp, "type"))
        # EC2 treats a rule whose source is the group itself exactly like `self: true`.
        if str(dig(rp, "protocol")) in _ALL_PROTOCOLS and (
            truthy(dig(rp, "self")) or _admits_itself(view, rule, group, "sourceSecurityGroupId")
        ):
            self_all.add(direction)
        cidrs = (known_list(dig(rp, "cidrBlocks")) or []) + (known_list(dig(rp, "ipv6CidrBlocks")) or [])
        if direction == "ingress":
            ingress.append((f"rule '{rule.name}'", cidrs))
    for type_, direction in ((SG_INGRESS_RULE, "ingress"), (SG_EGRESS_RULE, "egress")):
        for rule in view.of_type(type_):
            rp = view.props(rule)
            if group not in view.deps(rule, "securityGroupId", SECURITY_GROUP):
                continue
            if str(dig(rp, "ipProtocol")) in _ALL_PROTOCOLS and _admits_itself(
                view, rule, group, "referencedSecurityGroupId"
            ):
                self_all.add(direction)
            if direction == "ingress":
                ingress.append((f"rule '{rule.name}'", [dig(rp, "cidrIpv4"), dig(rp, "cidrIpv6")]))
    open_in = [label for label, cidrs in ingress if _wide_blocks(cidrs)]
    together = _wide_blocks([c for _, cidrs in ingress for c in cidrs])
    if together and not open_in:  # only the rules taken together cover the internet
        open_in.append(f"its {len(ingress)} ingress rules together ({', '.join(together)})")
    return self_all, open_in


def _efa_security_group(view: StackView, table: TypeTable, report: ReportViolation) -> None:
    seen: set[str] = set()
    for cap, gpu in gpu_capacities(view, table):
        if cap.launch_template.state != "resolved" or cap.launch_template.resource.urn in seen:
            continue
        lt = cap.launch_template.resource
        seen.add(lt.urn)
        efa = view.efa_interfaces(lt)
        if efa.count == 0:
            continue  # efa-on-gpu-nodes
        groups, unknown, external = view.template_security_groups(lt)
        for group in groups:
            _, open_in = _sg_rules(view, group)
            if open_in:
                report(
                    f"security group '{group.name}' on the EFA interfaces of launch template '{lt.name}' "
                    f"({join(gpu)}) admits the internet (an address block wider than /8, or /32 for IPv6, also "
                    f"when split across rules): {', '.join(open_in)}. Fix: EFA needs only "
                    f"all traffic from the group itself (self rule).",
                    group.urn,
                )
        if unknown or external:
            continue  # not known yet / outside the stack (gpu-references-in-stack)
        if not any({"ingress", "egress"} <= _sg_rules(view, g)[0] for g in groups):
            names = join(f"'{g.name}'" for g in groups) or "none"
            report(
                f"launch template '{lt.name}' ({join(gpu)}): no security group on its EFA interfaces "
                f"(groups: {names}) allows all traffic to and from itself; EFA's OS-bypass traffic is "
                f"dropped without it. Fix: a security group with ingress and egress rules protocol '-1', "
                f"self true, on every EFA interface.",
                lt.urn,
            )


efa_security_group = gpu_stack_policy(
    name="efa-security-group",
    description="EFA interfaces carry a security group that allows all traffic to and from itself, "
    "and none that admits 0.0.0.0/0.",
    check=_efa_security_group,
)


# -- 7. no blind spots: unlisted GPU types, references outside the stack, Karpenter -------------
_KARPENTER_CATEGORY_KEY = "karpenter.k8s.aws/instance-category"
_KARPENTER_GPU_COUNT_KEY = "karpenter.k8s.aws/instance-gpu-count"


def _family(instance_type: str) -> str:
    return instance_type.split(".")[0]


# Well-known labels karpenter-provider-aws gives each instance type (pkg/providers/instancetype/types.go,
# computeRequirements): category/generation from instanceTypeScheme, family/size from the name,
# GPU name/manufacturer in lower kebab case, counts and MiB as decimal strings, arch as Kubernetes names.
_KARPENTER_ARCH = {"x86_64": "amd64", "arm64": "arm64"}
_NUMERIC_OPS = {
    "Gt": lambda a, b: a > b,
    "Lt": lambda a, b: a < b,
    "Gte": lambda a, b: a >= b,
    "Lte": lambda a, b: a <= b,
}


def _karpenter_labels(instance_type: str) -> dict[str, set[str]]:
    """The label values Karpenter would give `instance_type` (only those the pack knows)."""
    family, _, size = instance_type.partition(".")
    labels = {key: {instance_type} for key in _KARPENTER_TYPE_KEYS}
    labels[_KARPENTER_FAMILY_KEY] = {family}
    labels["karpenter.k8s.aws/instance-size"] = {size}
    scheme = re.match(r"(^[a-z]+)(-[0-9]+tb)?([0-9]+).*\.", instance_type)
    if scheme:
        labels[_KARPENTER_CATEGORY_KEY] = {scheme.group(1)}
        labels["karpenter.k8s.aws/instance-generation"] = {scheme.group(3)}
    row = ROWS.get(instance_type)
    if row is not None:
        labels["kubernetes.io/arch"] = {_KARPENTER_ARCH.get(a, a) for a in row["architectures"]}
        labels["karpenter.k8s.aws/instance-cpu"] = {str(row["vcpus"])}
        labels["karpenter.k8s.aws/instance-memory"] = {str(row["memoryMiB"])}
        labels[_KARPENTER_GPU_COUNT_KEY] = {str(row["gpus"])}
        labels["karpenter.k8s.aws/instance-gpu-name"] = {row["gpuName"].lower().replace(" ", "-")}
        labels["karpenter.k8s.aws/instance-gpu-manufacturer"] = {row["gpuManufacturer"].lower().replace(" ", "-")}
        labels["karpenter.k8s.aws/instance-gpu-memory"] = {str(row["gpuMemoryMiB"])}
    return labels


def _admits(labels: dict[str, set[str]], key: str, op: str, values: list[str]) -> bool:
    """Whether one NodePool requirement lets a type with `labels` through (Kubernetes node selector
    semantics; a label the pack does not model never excludes)."""
    if key not in labels:
        return True
    have = labels[key]
    if op == "In":
        return bool(have & set(values))
    if op == "NotIn":
        return not have & set(values)
    if op == "Exists":
        return True
    if op == "DoesNotExist":
        return False
    if op in _NUMERIC_OPS and len(values) == 1 and as_int(values[0]) is not None:
        return any(as_int(v) is not None and _NUMERIC_OPS[op](as_int(v), as_int(values[0])) for v in have)
    return True  # an operator Kubernetes would refuse: it excludes nothing the pack can show


def _karpenter_types(view: StackView, pool: Any, table: TypeTable) -> tuple[set[str], set[str]]:
    """(EFA table types, unlisted GPU types) a NodePool's requirements allow.

    Karpenter ANDs the requirements and evaluates each against every instance type's labels, as
    sets: a category minus some families still admits the other GPU families; an arch or size
    restriction can exclude every GPU type. A NodePool that restricts nothing may launch any type a
    pending pod fits, GPU types included (a pod asking for nvidia.com/gpu makes it pick one)."""
    possible = set(table.efa)
    named: set[str] = set()  # types/families named by In requirements (for unlisted ones)
    for req in known_list(dig(view.props(pool), "spec", "template", "spec", "requirements")) or []:
        key, op = dig(req, "key"), dig(req, "operator")
        if is_unknown(key) or is_unknown(op) or is_unknown(dig(req, "values")) or not isinstance(key, str):
            continue  # not known yet: it might restrict, so it does not narrow either
        raw = [str(v).strip() for v in known_list(dig(req, "values")) or [] if not is_unknown(v)]
        values = [v.lower() for v in raw] if key in (*_KARPENTER_TYPE_KEYS, _KARPENTER_FAMILY_KEY) else raw
        if op == "In" and key in _KARPENTER_TYPE_KEYS:
            named |= set(values)
        elif op == "In" and key == _KARPENTER_FAMILY_KEY:
            named |= {f"{v}.*" for v in values if not any(_family(t) == v for t in table.efa)}
        possible = {t for t in possible if _admits(_karpenter_labels(t), key, str(op), values)}
    return possible, table.unlisted(named)


# Resources that launch EC2 instances which the joined view does not model: judged only for whether
# they can launch a GPU type, and then refused as unjudgeable (the classic provider's fleet and spot
# resources by token; every aws-native EC2 / Auto Scaling / EKS resource by module).
UNMODELLED_LAUNCHERS = (
    "aws:ec2/fleet:Fleet",
    "aws:ec2/spotFleetRequest:SpotFleetRequest",
    "aws:ec2/spotInstanceRequest:SpotInstanceRequest",
)
_UNMODELLED_MODULES = ("aws-native:ec2:", "aws-native:autoscaling:", "aws-native:eks:")
_TYPE_KEYS = ("instanceType", "instanceTypes", "InstanceType", "InstanceTypes")
_REQUIREMENTS_KEYS = ("instanceRequirements", "InstanceRequirements")


def _gpu_paths(props: Any, table: TypeTable, path: str = "") -> list[str]:
    """Where a resource's properties can pick a GPU type: a type of the table or of a GPU family, or
    attribute-based `instanceRequirements` that do not rule accelerators out (max count 0)."""
    found: list[str] = []
    stack: list[tuple[str, Any]] = [(path, props)]
    while stack:
        where, node = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                here = f"{where}.{key}" if where else str(key)
                if key in _TYPE_KEYS:
                    for t in known_list(value) or []:
                        name = t.strip().lower() if isinstance(t, str) and not is_unknown(t) else None
                        if name and (name in table.efa or (table.family.search(name) and name not in table.non_efa)):
                            found.append(f"{here} {name}")
                        elif is_unknown(t):
                            found.append(f"{here} (not known yet)")
                elif key in _REQUIREMENTS_KEYS and isinstance(value, dict):
                    count = value.get("acceleratorCount") or value.get("AcceleratorCount") or {}
                    top = count.get("max", count.get("Max")) if isinstance(count, dict) else None
                    if as_int(top) != 0:
                        found.append(f"{here} (accelerators not excluded: acceleratorCount.max 0 would)")
                else:
                    stack.append((here, value))
        elif isinstance(node, list):
            stack.extend((f"{where}[{i}]", v) for i, v in enumerate(node))
    return sorted(found)


def _unmodelled_launchers(view: StackView, table: TypeTable, report: ReportViolation) -> None:
    for resource in view.resources:
        kind = resource.resource_type
        if kind not in UNMODELLED_LAUNCHERS and not kind.startswith(_UNMODELLED_MODULES):
            continue
        paths = _gpu_paths(view.props(resource), table)
        if paths:
            report(
                f"{kind.split(':')[-1]} '{resource.name}' can launch GPU instances ({'; '.join(paths[:5])}), "
                f"but the pack cannot judge this resource type for EFA, one AZ and cluster placement. Fix: "
                f"launch GPU capacity from an aws.eks.NodeGroup / aws.autoscaling.Group with a launch template "
                f"of this stack; or, once it is checked elsewhere, lower gpu-references-in-stack in the policy "
                f"config.",
                resource.urn,
            )
    for asg in view.of_type(AUTOSCALING_GROUP):  # overrides choosing by attributes, not by type name
        overrides = dig(view.props(asg), "mixedInstancesPolicy", "launchTemplate", "overrides")
        paths = [p for p in _gpu_paths({"overrides": overrides}, table) if "instanceRequirements" in p]
        if paths:
            report(
                f"Auto Scaling group '{asg.name}' chooses instance types by attributes ({'; '.join(paths[:5])}), "
                f"which may select GPU types no rule can name. Fix: list instanceType overrides, or set "
                f"acceleratorCount.max 0.",
                asg.urn,
            )


def version_problem(version: Any, template: dict) -> Optional[str]:
    """Why the launch template version a group launches may not be the one the plan shows (the one
    every rule judges: the template's newest inputs); None when it is.

    `$Latest` and a version not known yet (the template's `latestVersion` output) are the newest.
    `$Default` — also an omitted version: EKS CreateNodegroup, EC2 RunInstances and Auto Scaling
    LaunchTemplateSpecification all default to it — stays at version 1 unless the template sets
    `updateDefaultVersion: true` (or `defaultVersion` equal to a known `latestVersion`): it is refused
    when the template has more than one version or an existing template is changing. A number is
    the judged version only when it equals the template's known `latestVersion` (or is 1 for a
    template the plan does not show a latestVersion for)."""
    if is_unknown(version) or version == "$Latest":
        return None
    latest = dig(template, "latestVersion")
    template_id = dig(template, "id")
    changing = is_unknown(latest) and isinstance(template_id, str) and not is_unknown(template_id)
    if version is None or version == "$Default":
        if truthy(dig(template, "updateDefaultVersion")):
            return None
        default = dig(template, "defaultVersion")
        if as_int(default) is not None and as_int(latest) is not None and as_int(default) == as_int(latest):
            return None
        if latest is None or (as_int(latest) == 1) or (is_unknown(latest) and not changing):
            return None  # a single version (or one being created): $Default is the one judged
        return (
            f"version {version or '$Default (the default when none is given)'}, which stays at an earlier "
            f"version than the one judged unless updateDefaultVersion is true"
        )
    number = as_int(version)
    if number is None or str(version).strip() != str(number):
        return f"version {version!r}, which is neither $Latest, $Default nor a version number"
    if is_unknown(latest):
        return (
            None
            if number == 1 and not changing
            else (f"version {number}, while the template's newest version is not known yet (it is changing)")
        )
    if as_int(latest) is not None:
        return None if number == as_int(latest) else f"version {number}, not the newest ({as_int(latest)})"
    return None if number == 1 else f"version {number}, while the plan shows no newer version than 1"


def _unjudgeable(view: StackView, cap: Any, gpu: set[str], allow: set[str], report: ReportViolation) -> None:
    """References of GPU capacity whose value comes from something the pack cannot resolve."""
    found = []
    refs = [("launch template", cap.resource, cap.launch_template), ("placement group", cap.resource, cap.placement)]
    if cap.launch_template.state == "resolved":
        lt = cap.launch_template.resource
        refs.append((f"placement group (of launch template '{lt.name}')", lt, view.placement_group(lt)))
    for what, owner, ref in refs:
        if ref.state == "unjudgeable" and owner.name not in allow:
            found.append(f"{what} from {ref.literal}")
    if cap.subnets.unjudgeable and cap.resource.name not in allow:
        found.append(f"subnet IDs from {cap.subnets.unjudgeable}")
    if found:
        report(
            f"{cap.label} runs {join(gpu)} with {'; '.join(found)}, which the pack cannot resolve to a resource "
            f"of this stack, so the EFA/AZ/placement rules cannot judge it. Fix: pass the output of the "
            f"aws.ec2 Subnet / LaunchTemplate / PlacementGroup resource itself (not a component's, a stack "
            f"reference's or another provider's output), or list {cap.resource.name!r} in this policy's "
            f"unjudgeable.allow once it is checked elsewhere.",
            cap.resource.urn,
        )


def _blind_spots(view: StackView, table: TypeTable, report: ReportViolation, allow: set[str]) -> None:
    _unmodelled_launchers(view, table, report)
    for cap in view.capacities():
        unlisted = table.unlisted(cap.instance_types)
        if unlisted and table.deny_unlisted:
            report(
                f"{cap.label} launches {join(unlisted)}, a GPU type the pack's table does not list, so no "
                f"EFA rule can judge it. Fix: add it with its EFA interface count to the policy config "
                f"extraEfaGpuTypes (or to nonEfaGpuTypes if it is deliberately used without EFA).",
                cap.resource.urn,
            )
        gpu = table.efa_of(cap.instance_types)
        if not gpu and not cap.instance_types and cap.launch_template.state == "unjudgeable":
            # its types live in a template the pack cannot find: it may launch anything
            _unjudgeable(view, cap, {"instance types of a launch template it cannot see"}, allow, report)
        if not gpu:
            continue
        external = []
        if cap.launch_template.state == "external":
            external.append(f"launch template {cap.launch_template.literal!r}")
        if cap.placement.state == "external":
            external.append(f"placement group {cap.placement.literal!r}")
        if cap.subnets.external:
            external.append(f"subnet(s) {cap.subnets.external}")
        if cap.launch_template.state == "resolved":
            lt = cap.launch_template.resource
            problem = version_problem(cap.version, view.props(lt))
            if problem and cap.resource.name not in allow:
                report(
                    f"{cap.label} runs {join(gpu)} from launch template '{lt.name}' {problem}: the rules judge "
                    f"the template as the plan shows it, which may not be the version launched. Fix: "
                    f"version=template.latest_version (or '$Latest'), or updateDefaultVersion=True on the "
                    f"template; or list {cap.resource.name!r} in unjudgeable.allow.",
                    cap.resource.urn,
                )
            pg = view.placement_group(lt)
            # a reservation's own placement group: capacity-reservation-in-gpu-az judges it
            if pg.state == "external" and not targets_reservation(view.props(lt)):
                external.append(f"placement group {pg.literal!r} (of launch template '{lt.name}')")
            _, _, sgs = view.template_security_groups(lt)
            if sgs:
                external.append(f"security group(s) {sgs} (of launch template '{lt.name}')")
        _unjudgeable(view, cap, gpu, allow, report)
        if external:
            report(
                f"{cap.label} runs {join(gpu)} with {'; '.join(external)} that no resource in this stack "
                f"defines, so the EFA/AZ/placement rules cannot judge them. Fix: create them in this stack "
                f"(or lower this policy to advisory in the policy config once they are checked elsewhere).",
                cap.resource.urn,
            )
    for pool in view.of_type(*KARPENTER_NODE_POOLS):
        gpu, unlisted = _karpenter_types(view, pool, table)
        if unlisted and table.deny_unlisted:
            report(
                f"Karpenter NodePool '{pool.name}' allows {join(unlisted)}, GPU type(s) the pack's table does "
                f"not list. Fix: add them to extraEfaGpuTypes or nonEfaGpuTypes.",
                pool.urn,
            )
        if gpu:
            report(
                f"Karpenter NodePool '{pool.name}' may launch {join(gpu)}: its EC2NodeClass is a launch path "
                f"this pack does not judge (EFA interface per card, placement group, reservation, one AZ). "
                f"Fix: run EFA GPU types in a managed node group with a launch template; exclude them from "
                f"the NodePool's requirements.",
                pool.urn,
            )


UNJUDGEABLE_SCHEMA: dict[str, dict[str, Any]] = {
    "unjudgeable": {
        "type": "object",
        "description": "GPU capacity (by Pulumi name) whose references may come from outputs the pack cannot "
        "resolve: {allow: [names]}",
        "properties": {"allow": {"type": "array", "items": {"type": "string"}, "description": "Pulumi resource names"}},
        "default": {"allow": []},
    },
}


def _validate_blind_spots(args: StackValidationArgs, report: ReportViolation) -> None:
    cfg = config_with_defaults(args, {**EFA_CONFIG, **UNJUDGEABLE_SCHEMA})
    allow = dig(cfg, "unjudgeable", "allow")
    _blind_spots(
        StackView(args.resources),
        TypeTable.from_config(cfg),
        report,
        {str(a) for a in allow} if isinstance(allow, list) else set(),
    )


gpu_blind_spots = StackValidationPolicy(
    name="gpu-references-in-stack",
    description="GPU capacity uses only instance types the table knows and launch templates, subnets, "
    "placement and security groups defined in this stack (not outputs the pack cannot resolve); Karpenter "
    "does not launch EFA GPU types.",
    validate=guarded("gpu-references-in-stack", _validate_blind_spots),
    enforcement_level=EnforcementLevel.MANDATORY,
    config_schema=PolicyConfigSchema(properties={**EFA_CONFIG, **UNJUDGEABLE_SCHEMA}),
)

POLICIES = [
    gpu_group_single_az,
    efa_on_every_card,
    efa_interface_count,
    cluster_placement,
    imdsv2_required,
    private_gpu_nodes,
    efa_security_group,
    gpu_blind_spots,
]
