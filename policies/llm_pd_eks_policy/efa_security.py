"""The security group on EFA interfaces: all traffic to and from itself (AWS drops EFA's OS-bypass
traffic without it), and no ingress from the internet, however the CIDRs are split across rules.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any, Iterator, Optional

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


@dataclass(frozen=True)
class _Rule:
    """One rule of a group, whichever resource declares it: its direction, what the verdict calls
    it, whether it allows all traffic to or from the group itself, the addresses it admits, and
    (ingress from a managed prefix list, whose entries the plan does not hold) how the verdict names that."""

    direction: str
    label: str
    to_itself: bool
    cidrs: list[Any]
    prefix_list: Optional[str] = None


def _inline_rules(props: Any) -> Iterator[_Rule]:
    """The group's own `ingress`/`egress` blocks; all egress to 0.0.0.0/0 includes the group itself."""
    for direction in ("ingress", "egress"):
        for rule in known_list(dig(props, direction)) or []:
            cidrs = (known_list(dig(rule, "cidrBlocks")) or []) + (known_list(dig(rule, "ipv6CidrBlocks")) or [])
            to_itself = str(dig(rule, "protocol")) in _ALL_PROTOCOLS and (
                truthy(dig(rule, "self")) or (direction == "egress" and "0.0.0.0/0" in cidrs)
            )
            from_list = direction == "ingress" and bool(known_list(dig(rule, "prefixListIds")))
            label = f"inline ingress {dig(rule, 'description') or cidrs}"
            yield _Rule(direction, label, to_itself, cidrs, "inline ingress" if from_list else None)


def _rule_resources(view: StackView, group: Any, inline: set[str]) -> Iterator[_Rule]:
    """The group's `aws.ec2.SecurityGroupRule`s. EC2 treats one whose source is the group itself
    exactly like `self: true`; none counts as the self rule of a direction declared inline."""
    for rule in view.of_type(SECURITY_GROUP_RULE):
        if group not in view.deps(rule, "securityGroupId", SECURITY_GROUP):
            continue
        rp = view.props(rule)
        direction = str(dig(rp, "type"))
        to_itself = (
            direction not in inline
            and str(dig(rp, "protocol")) in _ALL_PROTOCOLS
            and (truthy(dig(rp, "self")) or _admits_itself(view, rule, group, "sourceSecurityGroupId"))
        )
        cidrs = (known_list(dig(rp, "cidrBlocks")) or []) + (known_list(dig(rp, "ipv6CidrBlocks")) or [])
        from_list = direction == "ingress" and bool(known_list(dig(rp, "prefixListIds")))
        label = f"rule '{rule.name}'"
        yield _Rule(direction, label, to_itself, cidrs, label if from_list else None)


def _vpc_rule_resources(view: StackView, group: Any, inline: set[str]) -> Iterator[_Rule]:
    """The group's `aws.vpc.SecurityGroupIngressRule`/`SecurityGroupEgressRule`s: one address each,
    the group itself named by `referencedSecurityGroupId`."""
    for type_, direction in ((SG_INGRESS_RULE, "ingress"), (SG_EGRESS_RULE, "egress")):
        for rule in view.of_type(type_):
            if group not in view.deps(rule, "securityGroupId", SECURITY_GROUP):
                continue
            rp = view.props(rule)
            to_itself = (
                direction not in inline
                and str(dig(rp, "ipProtocol")) in _ALL_PROTOCOLS
                and _admits_itself(view, rule, group, "referencedSecurityGroupId")
            )
            from_list = direction == "ingress" and dig(rp, "prefixListId") is not None
            label, cidrs = f"rule '{rule.name}'", [dig(rp, "cidrIpv4"), dig(rp, "cidrIpv6")]
            yield _Rule(direction, label, to_itself, cidrs, label if from_list else None)


def _open_ingress(ingress: list[_Rule]) -> list[str]:
    """Ingress rules that admit the internet: one alone, or only all of them together (CIDRs
    collapsed as address sets); and every ingress from a prefix list, which the pack cannot read."""
    open_in = [rule.label for rule in ingress if _wide_blocks(rule.cidrs)]
    together = _wide_blocks([c for rule in ingress for c in rule.cidrs])
    if together and not open_in:
        open_in.append(f"its {len(ingress)} ingress rules together ({', '.join(together)})")
    listed = [rule.prefix_list for rule in ingress if rule.prefix_list]
    return open_in + [f"{where} from a prefix list, whose entries the pack cannot read" for where in listed]


def _sg_rules(view: StackView, group: Any) -> tuple[set[str], list[str]]:
    """({"ingress", "egress"} that allow all traffic to/from the group itself, open ingress rules).

    Inline rules, even `[]`, make the provider remove every rule of that direction it did not
    declare inline (pulumi-aws SecurityGroup: inline rules and separate rule resources conflict):
    separate rules of such a direction do not count as its self rule."""
    props = view.props(group)
    inline = {d for d in ("ingress", "egress") if dig(props, d) is not None and not is_unknown(dig(props, d))}
    rules = [*_inline_rules(props), *_rule_resources(view, group, inline), *_vpc_rule_resources(view, group, inline)]
    self_all = {rule.direction for rule in rules if rule.to_itself}
    return self_all, _open_ingress([rule for rule in rules if rule.direction == "ingress"])


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
