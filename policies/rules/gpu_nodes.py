"""Rules for the EFA GPU node group: one AZ, EFA on every network card, cluster placement,
IMDSv2, private subnets.

EFA traffic does not leave an AZ and a cluster placement group lives in one AZ, so a GPU node
group across AZs either fails to launch or runs the KV-cache transfer over TCP. These checks are
stack policies because the facts sit on different resources (node group, launch template,
subnets, placement group), joined by `StackView`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    ReportViolation,
    ResourceValidationArgs,
    StackValidationArgs,
    StackValidationPolicy,
)

from .common import (
    EFA_TYPES_SCHEMA,
    LAUNCH_TEMPLATE,
    config_with_defaults,
    dig,
    efa_types,
    is_unknown,
    join,
    plain,
    resource_policy,
    truthy,
)
from .stack import NodeGroupView, StackView

EFA_CONFIG = {"efaGpuTypes": EFA_TYPES_SCHEMA}


@dataclass
class GpuTemplate:
    """A launch template that launches EFA-capable GPU instances."""

    resource: Any
    gpu_types: set[str]
    node_groups: list[str] = field(default_factory=list)

    def describe(self) -> str:
        used = f", used by node group(s) {join(self.node_groups)}" if self.node_groups else ""
        return f"launch template '{self.resource.name}' ({join(self.gpu_types)}{used})"


def gpu_node_groups(view: StackView, types: dict[str, int]) -> list[NodeGroupView]:
    return [g for g in view.node_groups() if g.instance_types & types.keys()]


def gpu_templates(view: StackView, types: dict[str, int]) -> tuple[list[GpuTemplate], list[NodeGroupView]]:
    """Launch templates for EFA GPU types (their own `instanceType` or a GPU node group using them),
    and the GPU node groups that have no launch template at all."""
    templates: dict[str, GpuTemplate] = {}
    for lt in view.of_type(LAUNCH_TEMPLATE):
        own = dig(view.props(lt), "instanceType")
        if isinstance(own, str) and own in types:
            templates[lt.urn] = GpuTemplate(lt, {own})
    without: list[NodeGroupView] = []
    for group in gpu_node_groups(view, types):
        gpu = group.instance_types & types.keys()
        if group.launch_template_state == "none":
            without.append(group)
        elif group.launch_template is not None:
            entry = templates.setdefault(group.launch_template.urn, GpuTemplate(group.launch_template, set()))
            entry.gpu_types |= gpu
            entry.node_groups.append(group.resource.name)
    return list(templates.values()), without


def _efa_hint(types: dict[str, int], gpu_types: set[str]) -> str:
    return "; ".join(f"{t} has {types[t]} network card(s)" for t in sorted(gpu_types) if t in types)


def _gpu_types(group: NodeGroupView, types: dict[str, int]) -> str:
    """The group's EFA GPU types, for messages."""
    return join(group.instance_types & types.keys())


GpuCheck = Callable[[StackView, dict[str, int], ReportViolation], None]


def gpu_stack_policy(
    name: str, description: str, check: GpuCheck, level: EnforcementLevel = EnforcementLevel.MANDATORY
) -> StackValidationPolicy:
    """A stack policy over the GPU resources: `check` gets the joined view and the `efaGpuTypes` table."""

    def validate(args: StackValidationArgs, report: ReportViolation) -> None:
        check(StackView(args.resources), efa_types(config_with_defaults(args, EFA_CONFIG)), report)

    return StackValidationPolicy(
        name=name,
        description=description,
        validate=validate,
        enforcement_level=level,
        config_schema=PolicyConfigSchema(properties=EFA_CONFIG),
    )


# -- 1. one AZ ---------------------------------------------------------------------------------
def _single_az(view: StackView, types: dict[str, int], report: ReportViolation) -> None:
    for group in gpu_node_groups(view, types):
        azs: dict[str, list[str]] = {}
        for subnet in group.subnets:
            az = view.subnet_az(subnet)
            if az is not None and not is_unknown(az):
                azs.setdefault(str(az), []).append(subnet.name)
        if len(azs) > 1:
            spread = "; ".join(f"{az}: {join(names)}" for az, names in sorted(azs.items()))
            report(
                f"node group '{group.resource.name}' runs {_gpu_types(group, types)} "
                f"across {len(azs)} availability zones ({spread}). EFA traffic does not cross AZs and a "
                f"cluster placement group lives in one AZ. Fix: give the node group the private subnet "
                f"of a single AZ.",
                group.resource.urn,
            )


gpu_group_single_az = gpu_stack_policy(
    name="gpu-node-group-single-az",
    description="Node groups of EFA-capable GPU instances keep all their subnets in one availability zone.",
    check=_single_az,
)


# -- 2. EFA on every card ----------------------------------------------------------------------
def _efa_present(view: StackView, types: dict[str, int], report: ReportViolation) -> None:
    templates, without = gpu_templates(view, types)
    for group in without:
        gpu = group.instance_types & types.keys()
        report(
            f"node group '{group.resource.name}' runs {join(gpu)} without a launch template, so its nodes "
            f"get no EFA interface. Fix: attach a launch template with one interface of type 'efa' "
            f"(card 0) or 'efa-only' per network card ({_efa_hint(types, gpu)}).",
            group.resource.urn,
        )
    for template in templates:
        efa = view.efa_interfaces(template.resource)
        if efa.count == 0 and efa.known:
            report(
                f"{template.describe()} declares no EFA network interface. Fix: add networkInterfaces "
                f"with interfaceType 'efa' on card 0 and 'efa-only' on every further card "
                f"({_efa_hint(types, template.gpu_types)}).",
                template.resource.urn,
            )


efa_on_every_card = gpu_stack_policy(
    name="efa-on-gpu-nodes",
    description="Launch templates and node groups for EFA-capable GPU instances attach EFA interfaces.",
    check=_efa_present,
)


def _efa_count(view: StackView, types: dict[str, int], report: ReportViolation) -> None:
    templates, _ = gpu_templates(view, types)
    for template in templates:
        efa = view.efa_interfaces(template.resource)
        if not efa.known or efa.count == 0:  # unknown: skip; none at all: efa-on-gpu-nodes reports it
            continue
        expected = min(types[t] for t in template.gpu_types)
        missing = sorted(set(range(expected)) - efa.cards)
        if efa.count < expected or missing:
            report(
                f"{template.describe()} has {efa.count} EFA interface(s) on card(s) "
                f"{sorted(efa.cards)} but the type supports {expected}; cards without EFA: {missing}. "
                f"KV-cache transfer gets only part of the node's EFA bandwidth. Fix: one 'efa-only' "
                f"interface per remaining network card (networkCardIndex 1..{expected - 1}).",
                template.resource.urn,
            )


efa_interface_count = gpu_stack_policy(
    name="efa-interface-count",
    description="GPU launch templates attach as many EFA interfaces as the instance type has network cards.",
    check=_efa_count,
    level=EnforcementLevel.ADVISORY,
)


# -- 3. cluster placement ----------------------------------------------------------------------
def _cluster_placement(view: StackView, types: dict[str, int], report: ReportViolation) -> None:
    templates, without = gpu_templates(view, types)
    fix = "Fix: create an aws.ec2.PlacementGroup with strategy 'cluster' and set placement.groupName to it."
    for group in without:
        report(
            f"node group '{group.resource.name}' runs {_gpu_types(group, types)} without "
            f"a launch template, so its nodes sit in no placement group. {fix}",
            group.resource.urn,
        )
    for template in templates:
        state, placement = view.placement_group(template.resource)
        if state == "none":
            report(f"{template.describe()} sets no placement group. {fix}", template.resource.urn)
        elif state == "resolved" and placement is not None:
            strategy = dig(view.props(placement), "strategy")
            if strategy is not None and not is_unknown(strategy) and strategy != "cluster":
                report(
                    f"{template.describe()} uses placement group '{placement.name}' with strategy "
                    f"'{strategy}'; EFA needs the nodes close together. {fix}",
                    template.resource.urn,
                )


cluster_placement = gpu_stack_policy(
    name="gpu-cluster-placement-group",
    description="Launch templates for EFA-capable GPU instances use a placement group with strategy 'cluster'.",
    check=_cluster_placement,
)


# -- 4. IMDSv2 ---------------------------------------------------------------------------------
def _imdsv2(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type != LAUNCH_TEMPLATE:
        return
    props = plain(args.props)
    endpoint = dig(props, "metadataOptions", "httpEndpoint")
    tokens = dig(props, "metadataOptions", "httpTokens")
    if is_unknown(tokens) or is_unknown(endpoint) or endpoint == "disabled":
        return
    if tokens != "required":
        shown = f"'{tokens}'" if tokens else "unset (EC2 then defaults to 'optional')"
        report(
            f"launch template '{args.name}': metadataOptions.httpTokens is {shown}, so IMDSv1 stays "
            f"open to SSRF-style credential theft. Fix: metadataOptions={{httpTokens: 'required', "
            f"httpEndpoint: 'enabled', httpPutResponseHopLimit: 1}}."
        )


imdsv2_required = resource_policy(
    name="launch-template-imdsv2",
    description="Every launch template requires IMDSv2 (metadataOptions.httpTokens = 'required').",
    validate=_imdsv2,
)


# -- 5. private GPU nodes ----------------------------------------------------------------------
def _private_gpu_nodes(view: StackView, types: dict[str, int], report: ReportViolation) -> None:
    for group in gpu_node_groups(view, types):
        public = [s.name for s in group.subnets if truthy(dig(view.props(s), "mapPublicIpOnLaunch"))]
        if public:
            report(
                f"node group '{group.resource.name}' places GPU nodes in subnet(s) {join(public)}, which "
                f"map public IPs on launch. Fix: use the private subnet of the GPU AZ (mapPublicIpOnLaunch "
                f"false, egress through NAT).",
                group.resource.urn,
            )
        if group.launch_template is not None:
            efa = view.efa_interfaces(group.launch_template)
            if efa.public:
                report(
                    f"launch template '{group.launch_template.name}' of GPU node group "
                    f"'{group.resource.name}' sets associatePublicIpAddress on interface(s) {efa.public}. "
                    f"Fix: drop associatePublicIpAddress (GPU nodes stay private).",
                    group.launch_template.urn,
                )


private_gpu_nodes = gpu_stack_policy(
    name="gpu-nodes-private",
    description="GPU node groups run only in subnets that do not map public IPs.",
    check=_private_gpu_nodes,
)

POLICIES = [
    gpu_group_single_az,
    efa_on_every_card,
    efa_interface_count,
    cluster_placement,
    imdsv2_required,
    private_gpu_nodes,
]
