"""A stack's resources joined the way the GPU rules need them: every path to EC2 capacity
(`Capacity`) with its launch template, subnets, placement group and security groups.

Links are followed through property dependencies first (the engine records which resources fed
`subnetIds`, `launchTemplate`, `placement`; this works on a first preview, when every ID is still
unknown) and then through IDs/names where those are known. Every reference ends in one of four
states (`Ref.state`):

- "none": not set at all (a rule decides what absence means),
- "resolved": the resource in this stack,
- "unresolved": not known yet (first preview): never a violation, the check skips,
- "external": a literal ID/name that no resource in this stack carries. The rules cannot see it,
  so `gpu-references-in-stack` reports it (its level decides whether that blocks).
- "unjudgeable": not known yet, and fed by something other than the expected resource type (a
  component's output, a remote component, a StackReference, another provider's resource): the
  rules skip it and `gpu-references-in-stack` refuses it unless its config names the resource in
  `unjudgeable.allow`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Optional

from .common import (
    AUTOSCALING_GROUP,
    EC2_INSTANCE,
    EFA_INTERFACE_TYPES,
    EKS_NODE_GROUP,
    EKS_NODE_GROUP_V2,
    INTERNET_GATEWAY,
    LAUNCH_CONFIGURATION,
    LAUNCH_TEMPLATE,
    MANAGED_NODE_GROUP,
    NODE_GROUP,
    PLACEMENT_GROUP,
    ROUTE,
    ROUTE_TABLE,
    ROUTE_TABLE_ASSOCIATION,
    SECURITY_GROUP,
    SUBNET,
    as_int,
    dig,
    is_unknown,
    known_list,
    norm_type,
    plain,
    truthy,
)

VPC = "aws:ec2/vpc:Vpc"
NETWORK_INTERFACE = "aws:ec2/networkInterface:NetworkInterface"
MAIN_ROUTE_TABLE_ASSOCIATION = "aws:ec2/mainRouteTableAssociation:MainRouteTableAssociation"
DEFAULT_ROUTE_TABLE = "aws:ec2/defaultRouteTable:DefaultRouteTable"
PULUMI_EKS_GROUPS = (MANAGED_NODE_GROUP, EKS_NODE_GROUP, EKS_NODE_GROUP_V2)
NO_SOURCE = "a value no resource of this stack feeds (an invoke result?)"
NO_EFA_LAUNCH_CONFIGURATION = "a launch configuration, which cannot attach EFA interfaces"
NO_EFA_PULUMI_EKS = "the launch template pulumi-eks generates for it (no EFA option outside ManagedNodeGroup)"


@dataclass
class Ref:
    state: str  # "none" | "resolved" | "unresolved" | "external" | "unjudgeable"
    resource: Any = None
    literal: str = ""
    candidates: list = field(default_factory=list)  # unresolved: the resources the engine says feed it


@dataclass
class SubnetRefs:
    resolved: list = field(default_factory=list)  # subnet PolicyResources
    unknown: bool = False  # some entries are not known yet
    external: list[str] = field(default_factory=list)  # literal IDs no subnet of the stack carries
    unjudgeable: str = ""  # unknown IDs fed by something other than a subnet (what feeds them)


@dataclass
class Capacity:
    """One resource that can launch EC2 instances, with what the GPU rules need to judge it."""

    resource: Any
    kind: str  # short label for messages
    instance_types: set[str] = field(default_factory=set)  # normalised, known ones
    launch_template: Ref = field(default_factory=lambda: Ref("none"))
    launch_configuration: Ref = field(default_factory=lambda: Ref("none"))
    subnets: SubnetRefs = field(default_factory=SubnetRefs)
    literal_azs: set[str] = field(default_factory=set)  # AZs named on the resource itself
    version: Any = None  # the launch template version it launches (None: the API's default, $Default)
    placement: Ref = field(default_factory=lambda: Ref("none"))  # a placement group set on the resource
    builtin_efa: bool = False  # pulumi-eks enableEfaSupport: EFA on every card + cluster placement group
    no_efa_reason: str = ""  # set when the resource type has no way to attach EFA interfaces
    public_ip: bool = False  # asks for public IPs on the resource itself
    attached: Optional["EfaInterfaces"] = None  # an EC2 instance's own networkInterfaces (existing ENIs)
    enis: list = field(default_factory=list)  # the aws:ec2/networkInterface resources it attaches

    @property
    def label(self) -> str:
        return f"{self.kind} '{self.resource.name}'"


@dataclass
class EfaInterfaces:
    """The EFA interfaces of a launch template, as far as they are known."""

    known: bool  # False when the list or any interface type / card is unknown
    count: int  # interfaces whose type is efa/efa-only
    cards: dict[int, int]  # network card index -> EFA interfaces on it
    public: list[int]  # indexes of interfaces that ask for a public IP
    malformed: list[str] = field(default_factory=list)  # e.g. networkCardIndex "zero"


def merge_subnets(a: SubnetRefs, b: SubnetRefs) -> SubnetRefs:
    """Both sets of subnet references (a capacity's and its template's or ENIs')."""
    resolved = {s.urn: s for s in [*a.resolved, *b.resolved]}
    return SubnetRefs(
        list(resolved.values()),
        unknown=a.unknown or b.unknown,
        external=[*a.external, *b.external],
        unjudgeable=a.unjudgeable or b.unjudgeable,
    )


class StackView:
    def __init__(self, resources: list) -> None:
        self.resources = list(resources)
        self._props = {r.urn: plain(r.props) for r in self.resources}
        # Indexes, so that joining a 10,000-resource stack stays linear (llm_pd_eks_tools/bench_policies.py).
        self._by_type: dict[str, list] = {}
        for r in self.resources:
            self._by_type.setdefault(r.resource_type, []).append(r)
        self._by_value: dict[tuple[str, str], dict[Any, list]] = {}

    def props(self, resource: Any) -> dict:
        return self._props[resource.urn]

    def of_type(self, *types: str) -> list:
        if len(types) == 1:
            return list(self._by_type.get(types[0], ()))
        return [r for r in self.resources if r.resource_type in types]

    def deps(self, resource: Any, key: str, *types: str) -> list:
        """Resources of `types` the engine recorded as feeding property `key` of `resource`."""
        seen, found = set(), []
        for dep in (resource.property_dependencies or {}).get(key, []):
            if dep.resource_type in types and dep.urn not in seen:
                seen.add(dep.urn)
                found.append(dep)
        return found

    def fed_by(self, resource: Any, *types: str) -> list:
        """Resources of `types` the engine recorded as feeding any property of `resource`."""
        found = {
            d.urn: d for ds in (resource.property_dependencies or {}).values() for d in ds if d.resource_type in types
        }
        return list(found.values())

    def by_property(self, type_: str, key: str, value: Any) -> list:
        if value is None or is_unknown(value):
            return []
        if not isinstance(value, (str, int, float, bool)):
            return [r for r in self.of_type(type_) if self.props(r).get(key) == value]
        index = self._by_value.get((type_, key))
        if index is None:
            index = self._by_value[(type_, key)] = {}
            for r in self.of_type(type_):
                found = self.props(r).get(key)
                if isinstance(found, (str, int, float, bool)):
                    index.setdefault(found, []).append(r)
        return list(index.get(value, ()))

    def ref(self, owner: Any, dep_key: str, type_: str, candidates: list[tuple[str, Any]]) -> Ref:
        """Resolve a reference given as (property of the target, value) pairs, e.g. [("id", "lt-1")]."""
        values = [(k, v) for k, v in candidates if v is not None]
        if not values:
            return Ref("none")
        found = self.deps(owner, dep_key, type_)
        if not found:
            for key, value in values:
                found = self.by_property(type_, key, value)
                if found:
                    break
        if len(found) == 1:
            return Ref("resolved", found[0])
        if not found and any(is_unknown(v) for _, v in values):
            return self._unknown_ref(owner, dep_key, type_)
        if found:
            return Ref("unresolved", candidates=found)
        literal = next((str(v) for _, v in values if isinstance(v, str)), "")
        if not literal:  # a number, a list...: not a reference anything could resolve
            return Ref("external", literal=repr(values[0][1]))
        return Ref("external", literal=literal)

    def _unknown_ref(self, owner: Any, dep_key: str, type_: str) -> Ref:
        """A reference not known yet that no resource of `type_` feeds is "unjudgeable": its value
        comes from something else — a component's output, a remote component, a StackReference, a
        resource of another provider — or from nothing the engine records (an invoke whose inputs are
        not known yet), and the pack cannot resolve it."""
        others = self.feeders(owner, dep_key, type_)
        return Ref("unjudgeable", literal=others or NO_SOURCE)

    def feeders(self, owner: Any, key: str, type_: str) -> str:
        """What feeds property `key` of `owner` other than resources of `type_` ("" when nothing)."""
        others = [d for d in (owner.property_dependencies or {}).get(key, []) if d.resource_type != type_]
        return ", ".join(sorted({f"{d.resource_type} '{d.name}'" for d in others}))

    def subnet_refs(self, owner: Any, key: str, ids: Any) -> SubnetRefs:
        refs = SubnetRefs()
        dep_subnets = self.deps(owner, key, SUBNET)
        listed = known_list(ids)
        if listed is None:  # the whole list is unknown: only the dependencies can tell
            others = self.feeders(owner, key, SUBNET)
            return SubnetRefs(
                dep_subnets,
                unknown=not dep_subnets,
                unjudgeable=others if others else "" if dep_subnets else NO_SOURCE,
            )
        found = {s.urn: s for s in dep_subnets}
        matched: set[str] = set()
        unmatched: list[str] = []
        for subnet_id in listed:
            if is_unknown(subnet_id):
                refs.unknown = True
                continue
            hits = self.by_property(SUBNET, "id", subnet_id)
            for s in hits:
                found.setdefault(s.urn, s)
                matched.add(s.urn)
            if not hits:
                unmatched.append(str(subnet_id))
        refs.resolved = list(found.values())
        # IDs of the stack's own subnets are outputs the inputs do not carry: the dependencies stand
        # for them, one entry each. An unknown entry beyond them comes from something else (an invoke
        # whose inputs are not known yet, another stack): unjudgeable. Literal IDs beyond them point
        # outside the stack.
        covered = len([s for s in dep_subnets if s.urn not in matched])
        unknown_entries = sum(1 for i in listed if is_unknown(i))
        if unknown_entries > covered:
            refs.unjudgeable = self.feeders(owner, key, SUBNET) or NO_SOURCE
        covered = max(0, covered - unknown_entries)
        if len(unmatched) > covered:
            refs.external = unmatched if covered == 0 else unmatched[covered:]
        return refs

    # -- every path to EC2 capacity -------------------------------------------------------------
    def capacities(self) -> list[Capacity]:
        groups = self.of_type(NODE_GROUP)
        parents = {g.parent.urn for g in groups if g.parent is not None}
        out = [self._node_group(g, "node group") for g in groups]
        out += [
            self._node_group(m, "pulumi-eks ManagedNodeGroup")
            for m in self.of_type(MANAGED_NODE_GROUP)
            if m.urn not in parents
        ]
        out += [self._eks_self_managed(g) for g in self.of_type(EKS_NODE_GROUP, EKS_NODE_GROUP_V2)]
        out += [self._instance(i) for i in self.of_type(EC2_INSTANCE)]
        out += [self._launch_configuration(c) for c in self.of_type(LAUNCH_CONFIGURATION)]
        out = [each for cap in out for each in self._each_template(cap)]
        for asg in self.of_type(AUTOSCALING_GROUP):
            out += self._asg_with_overrides(asg)
        out += self._standalone_templates(out)
        return out

    def _each_template(self, cap: Capacity) -> list[Capacity]:
        """A capacity fed by several launch templates (a conditional ID, two templates recorded for
        `launchTemplate`) as one capacity per template: each may be the one launched, so each is judged."""
        if cap.launch_template.state != "unresolved" or len(cap.launch_template.candidates) < 2:
            return [cap]
        out = []
        for template in cap.launch_template.candidates:
            each = copy.copy(cap)
            each.instance_types, each.literal_azs = set(cap.instance_types), set(cap.literal_azs)
            each.subnets = copy.copy(cap.subnets)
            each.launch_template = Ref("resolved", template)
            out.append(self._with_template_types(each))
        return out

    def _add_types(self, cap: Capacity, *values: Any) -> None:
        for value in values:
            for t in known_list(value) or []:
                name = norm_type(t)
                if name:
                    cap.instance_types.add(name)

    def _lt_ref(self, owner: Any, dep_key: str, spec: Any, id_key: str = "id", name_key: str = "name") -> Ref:
        if spec is None:
            return Ref("none")
        if is_unknown(spec):  # unknown as a whole (first preview): the recorded dependencies tell
            fed = self.deps(owner, dep_key, LAUNCH_TEMPLATE)
            if len(fed) == 1:
                return Ref("resolved", fed[0])
            return Ref("unresolved", candidates=fed) if fed else self._unknown_ref(owner, dep_key, LAUNCH_TEMPLATE)
        return self.ref(owner, dep_key, LAUNCH_TEMPLATE, [("id", dig(spec, id_key)), ("name", dig(spec, name_key))])

    def _with_template_types(self, cap: Capacity) -> Capacity:
        """The launch template's own instance type and `placement.availabilityZone` count too."""
        if cap.launch_template.state == "resolved":
            template = cap.launch_template.resource
            props = self.props(template)
            self._add_types(cap, dig(props, "instanceType"))
            az = dig(props, "placement", "availabilityZone")
            if isinstance(az, str) and not is_unknown(az):
                cap.literal_azs.add(az)
            # A subnet on the template's interfaces is where EC2 puts them: judged with the group's.
            ids = [dig(n, "subnetId") for n in known_list(dig(props, "networkInterfaces")) or []]
            if any(i is not None for i in ids) or self.deps(template, "networkInterfaces", SUBNET):
                cap.subnets = merge_subnets(
                    cap.subnets, self.subnet_refs(template, "networkInterfaces", [i for i in ids if i is not None])
                )
        return cap

    def _node_group(self, group: Any, kind: str) -> Capacity:
        props = self.props(group)
        cap = Capacity(group, kind)
        self._add_types(cap, dig(props, "instanceTypes"))
        cap.launch_template = self._lt_ref(group, "launchTemplate", dig(props, "launchTemplate"))
        cap.version = dig(props, "launchTemplate", "version")
        cap.subnets = self.subnet_refs(group, "subnetIds", dig(props, "subnetIds"))
        if group.resource_type == MANAGED_NODE_GROUP:
            self._pulumi_eks_efa(cap, props)
        return self._with_template_types(cap)

    def _pulumi_eks_efa(self, cap: Capacity, props: dict) -> None:
        """pulumi-eks `enableEfaSupport` (with the required `placementGroupAvailabilityZone`) builds a
        launch template with an EFA interface per network card and a cluster placement group in that AZ."""
        if truthy(dig(props, "enableEfaSupport")):
            cap.builtin_efa = True
            az = dig(props, "placementGroupAvailabilityZone")
            if isinstance(az, str) and not is_unknown(az):
                cap.literal_azs.add(az)

    def _eks_self_managed(self, group: Any) -> Capacity:
        """pulumi-eks self-managed groups build their own launch template (V2) or CloudFormation launch
        configuration (V1) from `NodeGroupBaseOptions`, which has no EFA option (only
        ManagedNodeGroup has `enableEfaSupport`, pulumi/pulumi-eks#1593)."""
        props = self.props(group)
        kind = group.resource_type.split(":")[-1]
        cap = Capacity(group, f"pulumi-eks {kind}", no_efa_reason=NO_EFA_PULUMI_EKS)
        self._add_types(cap, dig(props, "instanceType"))
        cap.subnets = self.subnet_refs(group, "nodeSubnetIds", dig(props, "nodeSubnetIds"))
        cap.public_ip = truthy(dig(props, "nodeAssociatePublicIpAddress")) is True
        return cap

    def _instance(self, inst: Any) -> Capacity:
        props = self.props(inst)
        cap = Capacity(inst, "EC2 instance")
        self._add_types(cap, dig(props, "instanceType"))
        cap.launch_template = self._lt_ref(inst, "launchTemplate", dig(props, "launchTemplate"))
        cap.version = dig(props, "launchTemplate", "version")
        cap.subnets = self.subnet_refs(inst, "subnetId", dig(props, "subnetId"))
        az = dig(props, "availabilityZone")
        if isinstance(az, str) and not is_unknown(az):
            cap.literal_azs.add(az)
        cap.placement = self.ref(inst, "placementGroup", PLACEMENT_GROUP, [("name", dig(props, "placementGroup"))])
        cap.public_ip = truthy(dig(props, "associatePublicIpAddress")) is True
        if dig(props, "networkInterfaces") is not None:
            cap.attached = self.instance_interfaces(inst)
            cap.enis = self.attached_enis(inst)
            for eni in cap.enis:  # the ENIs' own subnets are where the instance's interfaces live
                cap.subnets = merge_subnets(
                    cap.subnets, self.subnet_refs(eni, "subnetId", dig(self.props(eni), "subnetId"))
                )
        return self._with_template_types(cap)

    def attached_enis(self, inst: Any) -> list:
        """The aws:ec2/networkInterface resources an instance attaches (by dependency or known ID)."""
        found = {e.urn: e for e in self.deps(inst, "networkInterfaces", NETWORK_INTERFACE)}
        for entry in known_list(dig(self.props(inst), "networkInterfaces")) or []:
            for eni in self.by_property(NETWORK_INTERFACE, "id", dig(entry, "networkInterfaceId")):
                found.setdefault(eni.urn, eni)
        return list(found.values())

    def instance_interfaces(self, inst: Any) -> "EfaInterfaces":
        """EFA interfaces of an instance built from existing ENIs (`networkInterfaces` entries naming
        aws:ec2/networkInterface resources whose `interfaceType` is efa/efa-only)."""
        entries = known_list(dig(self.props(inst), "networkInterfaces"))
        if entries is None:
            return EfaInterfaces(False, 0, {}, [])
        enis = self.deps(inst, "networkInterfaces", NETWORK_INTERFACE)
        dep_kinds = {str(dig(self.props(e), "interfaceType")).lower() for e in enis}
        result = EfaInterfaces(True, 0, {}, [])
        for i, entry in enumerate(entries):
            eni_id = dig(entry, "networkInterfaceId")
            hits = self.by_property(NETWORK_INTERFACE, "id", eni_id)
            if hits:
                kind = dig(self.props(hits[0]), "interfaceType")
            elif len(dep_kinds) == 1 and (is_unknown(eni_id) or len(enis) >= len(entries)):
                kind = next(iter(dep_kinds))  # every ENI feeding the list has the same type
            else:
                result.known = False
                continue
            if is_unknown(kind):
                result.known = False
            elif isinstance(kind, str) and kind.lower() in EFA_INTERFACE_TYPES:
                card = dig(entry, "networkCardIndex")
                index = 0 if card is None else as_int(card)
                if is_unknown(card):
                    result.known = False
                elif index is None or index < 0:
                    result.malformed.append(f"networkInterfaces[{i}].networkCardIndex is {card!r}")
                else:
                    result.count += 1
                    result.cards[index] = result.cards.get(index, 0) + 1
        return result

    def _launch_configuration(self, conf: Any) -> Capacity:
        props = self.props(conf)
        cap = Capacity(conf, "launch configuration", no_efa_reason=NO_EFA_LAUNCH_CONFIGURATION)
        self._add_types(cap, dig(props, "instanceType"))
        cap.public_ip = truthy(dig(props, "associatePublicIpAddress")) is True
        return cap

    def _asg(self, asg: Any) -> Capacity:
        props = self.props(asg)
        cap = Capacity(asg, "Auto Scaling group")
        mixed = dig(props, "mixedInstancesPolicy", "launchTemplate")
        if dig(props, "launchTemplate") is not None:
            cap.launch_template = self._lt_ref(asg, "launchTemplate", dig(props, "launchTemplate"))
            cap.version = dig(props, "launchTemplate", "version")
        elif mixed is not None:
            cap.launch_template = self._lt_ref(
                asg,
                "mixedInstancesPolicy",
                dig(mixed, "launchTemplateSpecification"),
                id_key="launchTemplateId",
                name_key="launchTemplateName",
            )
            for override in known_list(dig(mixed, "overrides")) or []:
                if not isinstance(dig(override, "launchTemplateSpecification"), dict):
                    self._add_types(cap, dig(override, "instanceType"))
            cap.version = dig(mixed, "launchTemplateSpecification", "version")
        conf = dig(props, "launchConfiguration")
        if conf is not None:
            cap.launch_configuration = self.ref(asg, "launchConfiguration", LAUNCH_CONFIGURATION, [("name", conf)])
            if cap.launch_configuration.state == "resolved":
                self._add_types(cap, dig(self.props(cap.launch_configuration.resource), "instanceType"))
                cap.no_efa_reason = NO_EFA_LAUNCH_CONFIGURATION
        cap.subnets = self.subnet_refs(asg, "vpcZoneIdentifiers", dig(props, "vpcZoneIdentifiers"))
        for az in known_list(dig(props, "availabilityZones")) or []:
            if isinstance(az, str) and not is_unknown(az):
                cap.literal_azs.add(az)
        cap.placement = self.ref(asg, "placementGroup", PLACEMENT_GROUP, [("name", dig(props, "placementGroup"))])
        return self._with_template_types(cap)

    def _asg_with_overrides(self, asg: Any) -> list[Capacity]:
        """The group, and one capacity per mixed-instances override that names its own launch template
        (`overrides[].launchTemplateSpecification`): EC2 launches that override's type from that
        template, so the template is judged for it. The engine records every template feeding
        `mixedInstancesPolicy` under that one key; while their IDs are not known the pack cannot tell
        which template is whose, so each of them is judged for every type of the group."""
        main = self._asg(asg)
        mixed = dig(self.props(asg), "mixedInstancesPolicy", "launchTemplate")
        overrides = [
            o
            for o in known_list(dig(mixed, "overrides")) or []
            if isinstance(dig(o, "launchTemplateSpecification"), dict)
        ]
        if not overrides:
            return [main]
        out = [main]
        fed = self.deps(asg, "mixedInstancesPolicy", LAUNCH_TEMPLATE)
        for i, override in enumerate(overrides):
            spec = dig(override, "launchTemplateSpecification")
            ref = self._lt_ref(
                asg, "mixedInstancesPolicy", spec, id_key="launchTemplateId", name_key="launchTemplateName"
            )
            cap = Capacity(asg, f"Auto Scaling group override {i}")
            cap.subnets, cap.literal_azs, cap.placement = main.subnets, main.literal_azs, main.placement
            cap.version = dig(spec, "version")
            self._add_types(cap, dig(override, "instanceType"))
            if ref.state == "unresolved" and len(fed) > 1:
                for template in fed:  # ambiguous: each candidate template for every type of the group
                    each = copy.copy(cap)
                    each.instance_types = set(cap.instance_types) | main.instance_types
                    each.launch_template = Ref("resolved", template)
                    out.append(self._with_template_types(each))
                continue
            cap.launch_template = ref
            out.append(self._with_template_types(cap))
        return out

    def _standalone_templates(self, capacities: list[Capacity]) -> list[Capacity]:
        """Launch templates naming an instance type that no capacity above uses: judged on their own
        (a node group in another stack, or one created later, would launch them)."""
        used = {c.launch_template.resource.urn for c in capacities if c.launch_template.state == "resolved"}
        out = []
        for lt in self.of_type(LAUNCH_TEMPLATE):
            if lt.urn in used or norm_type(dig(self.props(lt), "instanceType")) is None:
                continue
            cap = Capacity(lt, "launch template", launch_template=Ref("resolved", lt))
            self._add_types(cap, dig(self.props(lt), "instanceType"))
            cap.subnets = SubnetRefs(unknown=True)  # subnets come from whoever launches it
            out.append(cap)
        return out

    # -- subnets ---------------------------------------------------------------------------------
    def subnet_az(self, subnet: Any) -> Any:
        props = self.props(subnet)
        az = dig(props, "availabilityZone")
        return az if az is not None else dig(props, "availabilityZoneId")

    def routes_to_internet_gateway(self, subnet: Any) -> list[str]:
        """Route tables associated with `subnet` that send traffic to an internet gateway (AWS's
        definition of a public subnet), as labels. Unknown links are skipped."""
        subnet_id = dig(self.props(subnet), "id")
        tables: dict[str, Any] = {}
        for assoc in self.of_type(ROUTE_TABLE_ASSOCIATION):
            props = self.props(assoc)
            linked = subnet in self.deps(assoc, "subnetId", SUBNET) or (
                subnet_id is not None and not is_unknown(subnet_id) and dig(props, "subnetId") == subnet_id
            )
            if not linked:
                continue
            ref = self.ref(assoc, "routeTableId", ROUTE_TABLE, [("id", dig(props, "routeTableId"))])
            if ref.state == "resolved":
                tables[ref.resource.urn] = ref.resource
        public = []
        if not tables:  # no explicit association: the VPC's main route table applies
            tables = {t.urn: t for t in self._main_route_tables(subnet)}
            public += self._vpc_main_table_routes(subnet)
        for table in tables.values():
            if self._table_has_igw_route(table):
                public.append(f"route table '{table.name}'")
        return public

    def _vpc_main_table_routes(self, subnet: Any) -> list[str]:
        """Routes to an internet gateway added to the VPC's own main route table (`routeTableId` is the
        Vpc's `mainRouteTableId` output: fed by the Vpc, or its known value)."""
        vpcs = self.deps(subnet, "vpcId", VPC) or self.by_property(VPC, "id", dig(self.props(subnet), "vpcId"))
        found = []
        for vpc in vpcs:
            main_id = dig(self.props(vpc), "mainRouteTableId")
            for route in self.of_type(ROUTE):
                props = self.props(route)
                table_id = dig(props, "routeTableId")
                fed = vpc in self.deps(route, "routeTableId", VPC)
                named = isinstance(main_id, str) and not is_unknown(main_id) and table_id == main_id
                if (fed or named) and self._is_igw(route, "gatewayId", dig(props, "gatewayId")):
                    found.append(f"route '{route.name}' on VPC '{vpc.name}''s main route table")
        return found

    def _same_vpc(self, a: Any, a_key: str, b: Any, b_key: str) -> bool:
        vpcs_a = {v.urn for v in self.deps(a, a_key, VPC)}
        vpcs_b = {v.urn for v in self.deps(b, b_key, VPC)}
        if vpcs_a and vpcs_b:
            return bool(vpcs_a & vpcs_b)
        id_a, id_b = dig(self.props(a), a_key), dig(self.props(b), b_key)
        return isinstance(id_a, str) and not is_unknown(id_a) and id_a == id_b

    def _main_route_tables(self, subnet: Any) -> list:
        """The subnet's VPC's main route table: a MainRouteTableAssociation's table, or a
        DefaultRouteTable (which manages the VPC's default main table and carries the routes)."""
        found = []
        for main in self.of_type(MAIN_ROUTE_TABLE_ASSOCIATION):
            if self._same_vpc(subnet, "vpcId", main, "vpcId"):
                ref = self.ref(main, "routeTableId", ROUTE_TABLE, [("id", dig(self.props(main), "routeTableId"))])
                if ref.state == "resolved":
                    found.append(ref.resource)
        if not found:
            found = [
                d
                for d in self.of_type(DEFAULT_ROUTE_TABLE)
                if self._same_vpc(subnet, "vpcId", d, "defaultRouteTableId")
            ]
        return found

    def _is_igw(self, owner: Any, key: str, gateway: Any) -> bool:
        if gateway is None:
            return False
        if isinstance(gateway, str) and not is_unknown(gateway):
            if gateway.startswith("igw-"):
                return True
            if self.by_property(INTERNET_GATEWAY, "id", gateway):
                return True
        return bool(self.deps(owner, key, INTERNET_GATEWAY)) and not (
            isinstance(gateway, str) and gateway.startswith(("vgw-", "local"))
        )

    def _table_has_igw_route(self, table: Any) -> bool:
        for route in known_list(dig(self.props(table), "routes")) or []:
            if self._is_igw(table, "routes", dig(route, "gatewayId")):
                return True
        for route in self.of_type(ROUTE):
            props = self.props(route)
            if table in self.deps(route, "routeTableId", ROUTE_TABLE) and self._is_igw(
                route, "gatewayId", dig(props, "gatewayId")
            ):
                return True
        return False

    # -- launch templates -----------------------------------------------------------------------
    def efa_interfaces(self, template: Any) -> EfaInterfaces:
        interfaces = known_list(dig(self.props(template), "networkInterfaces"))
        if interfaces is None:
            return EfaInterfaces(False, 0, {}, [])
        result = EfaInterfaces(True, 0, {}, [])
        for i, nic in enumerate(interfaces):
            if not isinstance(nic, dict):
                if is_unknown(nic):
                    result.known = False
                else:
                    result.malformed.append(f"networkInterfaces[{i}] is {nic!r}, not an object")
                continue
            kind = dig(nic, "interfaceType")
            if is_unknown(kind):
                result.known = False
                continue
            if truthy(dig(nic, "associatePublicIpAddress")):
                result.public.append(i)
            if isinstance(kind, str) and kind.strip().lower() in EFA_INTERFACE_TYPES:
                result.count += 1
                card = dig(nic, "networkCardIndex")
                if is_unknown(card):
                    result.known = False
                    continue
                index = 0 if card is None else as_int(card)
                if index is None or index < 0 or (isinstance(card, float) and card != int(card)):
                    result.malformed.append(f"networkInterfaces[{i}].networkCardIndex is {card!r}")
                    continue
                result.cards[index] = result.cards.get(index, 0) + 1
        return result

    def placement_group(self, template: Any) -> Ref:
        props = self.props(template)
        return self.ref(
            template,
            "placement",
            PLACEMENT_GROUP,
            [("name", dig(props, "placement", "groupName")), ("placementGroupId", dig(props, "placement", "groupId"))],
        )

    def eni_security_groups(self, eni: Any) -> tuple[list, bool, list[str]]:
        """Security groups of an aws:ec2/networkInterface (`securityGroups`): (resolved, unknown?,
        external literal IDs)."""
        listed = known_list(dig(self.props(eni), "securityGroups"))
        found = {g.urn: g for g in self.deps(eni, "securityGroups", SECURITY_GROUP)}
        unknown, external = listed is None and not found, []
        for sg_id in listed or []:
            hits = self.by_property(SECURITY_GROUP, "id", sg_id)
            found.update({g.urn: g for g in hits})
            if is_unknown(sg_id):
                unknown = unknown or not found
            elif not hits and isinstance(sg_id, str) and len(found) < len(listed or []):
                external.append(sg_id)
        return list(found.values()), unknown, external

    def template_security_groups(self, template: Any) -> tuple[list, bool, list[str]]:
        """Security groups on the template's interfaces (and vpcSecurityGroupIds): (resolved,
        unknown?, external literal IDs)."""
        props = self.props(template)
        ids: list[Any] = []
        unknown = False
        for nic in known_list(dig(props, "networkInterfaces")) or []:
            groups = dig(nic, "securityGroups")
            listed = known_list(groups)
            if listed is None:
                unknown = True
            else:
                ids += listed
        vpc = known_list(dig(props, "vpcSecurityGroupIds"))
        if vpc is None:
            unknown = True
        else:
            ids += vpc
        found = {
            g.urn: g
            for key in ("networkInterfaces", "vpcSecurityGroupIds")
            for g in self.deps(template, key, SECURITY_GROUP)
        }
        matched: set[str] = set()
        unmatched: list[str] = []
        # The same group on every interface counts once; a non-string is no ID (EC2 would refuse it).
        for sg_id in dict.fromkeys(i for i in ids if isinstance(i, str)):
            if is_unknown(sg_id):
                unknown = True
                continue
            hits = self.by_property(SECURITY_GROUP, "id", sg_id)
            for g in hits:
                found.setdefault(g.urn, g)
                matched.add(g.urn)
            if not hits:
                unmatched.append(str(sg_id))
        # IDs produced by resources of the stack (its own groups, the EKS cluster's group) are
        # accounted for by the dependencies; literal IDs beyond those point outside the stack.
        deps = {
            d.urn: d
            for key in ("networkInterfaces", "vpcSecurityGroupIds")
            for d in (template.property_dependencies or {}).get(key, [])
        }
        feeders = set(deps) - matched
        external = unmatched[len(feeders) :] if len(unmatched) > len(feeders) else []
        # Unknown IDs fed only by security groups of this stack are those groups: nothing is hidden.
        if unknown and found and all(d.resource_type == SECURITY_GROUP for d in deps.values()):
            unknown = False
        return list(found.values()), unknown, external
