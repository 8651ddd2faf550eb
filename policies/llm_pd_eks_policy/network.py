"""The network around GPU capacity as AWS decides it: a subnet's AZ, whether it is public (a route to
an internet gateway from its route table, or the VPC's main one, AWS's definition), a launch
template's EFA interfaces, placement group and security groups, an ENI's security groups.
"""

from __future__ import annotations

from typing import Any

from .common import (
    EFA_INTERFACE_TYPES,
    INTERNET_GATEWAY,
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
    truthy,
)
from .stack_index import EfaInterfaces, Ref, ResourceIndex

VPC = "aws:ec2/vpc:Vpc"
MAIN_ROUTE_TABLE_ASSOCIATION = "aws:ec2/mainRouteTableAssociation:MainRouteTableAssociation"
DEFAULT_ROUTE_TABLE = "aws:ec2/defaultRouteTable:DefaultRouteTable"


class NetworkView(ResourceIndex):
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
