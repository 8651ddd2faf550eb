"""A stack's resources with the links the node-group rules need: node group -> launch template,
subnets, placement group.

Links are followed through property dependencies first (the engine records which resources fed
`subnetIds`, `launchTemplate` and `placement`; this works on a first preview, when every ID is
still unknown) and then through IDs/names where those are known (resources created elsewhere in
the stack, or state after an update). Whatever cannot be resolved is reported as unresolved, and
the rules skip instead of guessing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from .common import (
    EFA_INTERFACE_TYPES,
    LAUNCH_TEMPLATE,
    MANAGED_NODE_GROUP,
    NODE_GROUP,
    PLACEMENT_GROUP,
    SUBNET,
    dig,
    is_unknown,
    known_list,
    plain,
)


@dataclass
class NodeGroupView:
    resource: Any  # PolicyResource
    props: dict
    launch_template: Optional[Any] = None  # PolicyResource, when resolved
    launch_template_state: str = "none"  # "none" (no LT given) | "resolved" | "unresolved"
    instance_types: set[str] = field(default_factory=set)  # the known ones
    subnets: list = field(default_factory=list)  # resolved subnet PolicyResources


@dataclass
class EfaInterfaces:
    """The EFA interfaces of a launch template, as far as they are known."""

    known: bool  # False when the list or any interface type is unknown
    count: int  # EFA interfaces whose type is known to be efa/efa-only
    cards: set[int]  # network card indexes carrying them
    public: list[int]  # indexes of interfaces that ask for a public IP


class StackView:
    def __init__(self, resources: list) -> None:
        self.resources = list(resources)
        self._props = {r.urn: plain(r.props) for r in self.resources}

    def props(self, resource: Any) -> dict:
        return self._props[resource.urn]

    def of_type(self, *types: str) -> list:
        return [r for r in self.resources if r.resource_type in types]

    def deps(self, resource: Any, key: str, type_: str) -> list:
        """Resources of `type_` the engine recorded as feeding property `key` of `resource`."""
        seen, found = set(), []
        for dep in (resource.property_dependencies or {}).get(key, []):
            if dep.resource_type == type_ and dep.urn not in seen:
                seen.add(dep.urn)
                found.append(dep)
        return found

    def by_property(self, type_: str, key: str, value: Any) -> list:
        if value is None or is_unknown(value):
            return []
        return [r for r in self.of_type(type_) if self.props(r).get(key) == value]

    # -- node groups ----------------------------------------------------------------------------
    def node_groups(self) -> list[NodeGroupView]:
        """EKS managed node groups: AWS-level ones, and pulumi-eks components without such a child
        (under mocks, or when the component's children are not in the set)."""
        groups = self.of_type(NODE_GROUP)
        parents = {g.parent.urn for g in groups if g.parent is not None}
        groups += [m for m in self.of_type(MANAGED_NODE_GROUP) if m.urn not in parents]
        return [self._view(g) for g in groups]

    def _view(self, group: Any) -> NodeGroupView:
        props = self.props(group)
        view = NodeGroupView(resource=group, props=props)
        for t in known_list(dig(props, "instanceTypes")) or []:
            if isinstance(t, str) and not is_unknown(t):
                view.instance_types.add(t)
        view.launch_template_state, view.launch_template = self._launch_template(group, props)
        if view.launch_template is not None:
            lt_type = dig(self.props(view.launch_template), "instanceType")
            if isinstance(lt_type, str):
                view.instance_types.add(lt_type)
        view.subnets = self._subnets(group, props)
        return view

    def _launch_template(self, group: Any, props: dict) -> tuple[str, Optional[Any]]:
        spec = dig(props, "launchTemplate")
        if spec is None:
            return "none", None
        found = self.deps(group, "launchTemplate", LAUNCH_TEMPLATE)
        if not found and not is_unknown(spec):
            found = self.by_property(LAUNCH_TEMPLATE, "id", dig(spec, "id")) or self.by_property(
                LAUNCH_TEMPLATE, "name", dig(spec, "name")
            )
        if len(found) == 1:
            return "resolved", found[0]
        return "unresolved", None

    def _subnets(self, group: Any, props: dict) -> list:
        """The node group's subnets: from its recorded dependencies, plus any matched by known ID."""
        found = {s.urn: s for s in self.deps(group, "subnetIds", SUBNET)}
        ids = known_list(dig(props, "subnetIds"))
        if ids is None:  # the whole list is unknown: only the dependencies can tell
            return list(found.values())
        for subnet_id in ids:
            for s in self.by_property(SUBNET, "id", subnet_id):
                found.setdefault(s.urn, s)
        return list(found.values())

    def subnet_az(self, subnet: Any) -> Any:
        props = self.props(subnet)
        az = dig(props, "availabilityZone")
        return az if az is not None else dig(props, "availabilityZoneId")

    # -- launch templates -----------------------------------------------------------------------
    def efa_interfaces(self, template: Any) -> EfaInterfaces:
        interfaces = known_list(dig(self.props(template), "networkInterfaces"))
        if interfaces is None:
            return EfaInterfaces(False, 0, set(), [])
        known, count, cards, public = True, 0, set(), []
        for i, nic in enumerate(interfaces):
            kind = dig(nic, "interfaceType")
            if is_unknown(kind):
                known = False
                continue
            if str(dig(nic, "associatePublicIpAddress")).lower() == "true":
                public.append(i)
            if kind in EFA_INTERFACE_TYPES:
                count += 1
                card = dig(nic, "networkCardIndex")
                if is_unknown(card):
                    known = False
                else:
                    cards.add(int(float(card)) if card is not None else 0)
        return EfaInterfaces(known, count, cards, public)

    def placement_group(self, template: Any) -> tuple[str, Optional[Any]]:
        """("none" | "resolved" | "unresolved" | "external", the placement group)."""
        props = self.props(template)
        group_name = dig(props, "placement", "groupName")
        group_id = dig(props, "placement", "groupId")
        if group_name is None and group_id is None:
            return "none", None
        found = self.deps(template, "placement", PLACEMENT_GROUP)
        if not found:
            found = self.by_property(PLACEMENT_GROUP, "name", group_name) or self.by_property(
                PLACEMENT_GROUP, "placementGroupId", group_id
            )
        if len(found) == 1:
            return "resolved", found[0]
        if found or is_unknown(group_name) or is_unknown(group_id):
            return "unresolved", None
        return "external", None  # a known name that no placement group in this stack carries
