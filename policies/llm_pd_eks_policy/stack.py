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
    LAUNCH_CONFIGURATION,
    LAUNCH_TEMPLATE,
    MANAGED_NODE_GROUP,
    NODE_GROUP,
    PLACEMENT_GROUP,
    SUBNET,
    as_int,
    dig,
    is_unknown,
    known_list,
    memoized,
    norm_type,
    truthy,
)
from .network import DEFAULT_ROUTE_TABLE, MAIN_ROUTE_TABLE_ASSOCIATION, VPC, NetworkView
from .stack_index import NO_SOURCE, EfaInterfaces, Ref, SubnetRefs, merge_subnets

NETWORK_INTERFACE = "aws:ec2/networkInterface:NetworkInterface"
PULUMI_EKS_GROUPS = (MANAGED_NODE_GROUP, EKS_NODE_GROUP, EKS_NODE_GROUP_V2)
NO_EFA_LAUNCH_CONFIGURATION = "a launch configuration, which cannot attach EFA interfaces"
NO_EFA_PULUMI_EKS = "the launch template pulumi-eks generates for it (no EFA option outside ManagedNodeGroup)"


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


class StackView(NetworkView):
    """Every path to EC2 capacity (`capacities`) joined with its template, subnets and groups.

    `StackView.of(resources)` is the one view of a request shared by all stack policies."""

    @classmethod
    def of(cls, resources: list) -> "StackView":
        key = ("stack-view", tuple(r.urn for r in resources))
        return memoized(key, None, lambda: cls(resources))

    def capacities(self) -> list[Capacity]:
        return memoized(("capacities", id(self)), self, self._capacities)

    # -- every path to EC2 capacity -------------------------------------------------------------
    def _capacities(self) -> list[Capacity]:
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


__all__ = [
    "DEFAULT_ROUTE_TABLE",
    "MAIN_ROUTE_TABLE_ASSOCIATION",
    "NO_SOURCE",
    "VPC",
    "Capacity",
    "EfaInterfaces",
    "Ref",
    "StackView",
    "SubnetRefs",
]
