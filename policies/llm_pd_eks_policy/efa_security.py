"""The security group on EFA interfaces: all traffic to and from itself (AWS drops EFA's OS-bypass
traffic without it), and no ingress from the internet, however the CIDRs are split across rules.
"""

from __future__ import annotations

import ipaddress
from typing import Any, Iterator

from pulumi_policy import (
    ReportViolation,
)

from .common import (
    EFA_INTERFACE_TYPES,
    SECURITY_GROUP,
    SECURITY_GROUP_RULE,
    SG_EGRESS_RULE,
    SG_INGRESS_RULE,
    TypeTable,
    dig,
    is_unknown,
    join,
    known_list,
    truthy,
)
from .gpu_nodes import gpu_capacities, gpu_stack_policy
from .stack import StackView

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
    # Inline rules, even `[]`, make the provider remove every rule of that direction it did not
    # declare inline (pulumi-aws SecurityGroup: inline rules and separate rule resources conflict):
    # separate rules of such a direction do not count.
    inline = {d for d in ("ingress", "egress") if dig(props, d) is not None and not is_unknown(dig(props, d))}
    prefix_lists: list[str] = []
    for direction in ("ingress", "egress"):
        for rule in known_list(dig(props, direction)) or []:
            if direction == "ingress" and known_list(dig(rule, "prefixListIds")):
                prefix_lists.append("inline ingress")
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
        if direction == "ingress" and known_list(dig(rp, "prefixListIds")):
            prefix_lists.append(f"rule '{rule.name}'")
        # EC2 treats a rule whose source is the group itself exactly like `self: true`.
        if (
            direction not in inline
            and str(dig(rp, "protocol")) in _ALL_PROTOCOLS
            and (truthy(dig(rp, "self")) or _admits_itself(view, rule, group, "sourceSecurityGroupId"))
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
            if direction == "ingress" and dig(rp, "prefixListId") is not None:
                prefix_lists.append(f"rule '{rule.name}'")
            if (
                direction not in inline
                and str(dig(rp, "ipProtocol")) in _ALL_PROTOCOLS
                and _admits_itself(view, rule, group, "referencedSecurityGroupId")
            ):
                self_all.add(direction)
            if direction == "ingress":
                ingress.append((f"rule '{rule.name}'", [dig(rp, "cidrIpv4"), dig(rp, "cidrIpv6")]))
    open_in = [label for label, cidrs in ingress if _wide_blocks(cidrs)]
    together = _wide_blocks([c for _, cidrs in ingress for c in cidrs])
    if together and not open_in:  # only the rules taken together cover the internet
        open_in.append(f"its {len(ingress)} ingress rules together ({', '.join(together)})")
    open_in += [f"{where} from a prefix list, whose entries the pack cannot read" for where in prefix_lists]
    return self_all, open_in


def _efa_sources(view: StackView, table: TypeTable) -> Iterator[tuple[str, Any, set[str], tuple[list, bool, list]]]:
    """(label, resource, GPU types, (groups, unknown?, external IDs)) of every place EFA interfaces of
    GPU capacity get their security groups: launch templates, and the EFA ENIs an instance attaches."""
    seen: set[str] = set()
    for cap, gpu in gpu_capacities(view, table):
        if cap.launch_template.state == "resolved" and cap.launch_template.resource.urn not in seen:
            lt = cap.launch_template.resource
            seen.add(lt.urn)
            if view.efa_interfaces(lt).count:  # none: efa-on-gpu-nodes
                yield f"launch template '{lt.name}'", lt, gpu, view.template_security_groups(lt)
        for eni in cap.enis:
            kind = dig(view.props(eni), "interfaceType")
            if eni.urn in seen or not (isinstance(kind, str) and kind.lower() in EFA_INTERFACE_TYPES):
                continue
            seen.add(eni.urn)
            yield f"EFA network interface '{eni.name}' of {cap.label}", eni, gpu, view.eni_security_groups(eni)


def _efa_security_group(view: StackView, table: TypeTable, report: ReportViolation) -> None:
    reported: set[str] = set()  # a group on several templates / ENIs is reported once
    for label, owner, gpu, (groups, unknown, external) in _efa_sources(view, table):
        for group in groups:
            _, open_in = _sg_rules(view, group)
            if open_in and group.urn not in reported:
                reported.add(group.urn)
                report(
                    f"security group '{group.name}' on the EFA interfaces of {label} "
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
                f"{label} ({join(gpu)}): no security group on its EFA interfaces "
                f"(groups: {names}) allows all traffic to and from itself; EFA's OS-bypass traffic is "
                f"dropped without it. Fix: a security group with ingress and egress rules protocol '-1', "
                f"self true, on every EFA interface (a group with inline ingress or egress, even [], drops the "
                f"separate rules of that direction).",
                owner.urn,
            )


efa_security_group = gpu_stack_policy(
    name="efa-security-group",
    description="EFA interfaces carry a security group that allows all traffic to and from itself, "
    "and none that admits 0.0.0.0/0.",
    check=_efa_security_group,
)

POLICIES = [efa_security_group]
