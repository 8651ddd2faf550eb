"""No blind spots: GPU capacity uses instance types the table knows and launch templates, subnets,
placement and security groups the stack defines (not outputs the pack cannot resolve), the launch
template version the rules judge, and no launcher the joined view does not model; no Karpenter
NodePool may launch EFA GPU types.
"""

from __future__ import annotations

from typing import Any, Optional

from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    ReportViolation,
    StackValidationArgs,
    StackValidationPolicy,
)

from .capacity import targets_reservation
from .common import (
    AUTOSCALING_GROUP,
    GPU_TABLE_SCHEMA,
    LAUNCH_TEMPLATE,
    TypeTable,
    as_int,
    config_with_defaults,
    dig,
    guarded,
    is_unknown,
    join,
    known_list,
    truthy,
)
from .karpenter import karpenter_types, node_pools
from .stack import StackView

EFA_CONFIG = GPU_TABLE_SCHEMA
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
        for template in view.fed_by(resource, LAUNCH_TEMPLATE):  # a Fleet's types may sit on its template
            paths += [f"launch template '{template.name}' {p}" for p in _gpu_paths(view.props(template), table)]
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
    """Every way GPU capacity can escape the other rules, reported on the resource that opens it:
    launchers the joined view does not model, types the table does not list, a template version
    other than the one judged, references the pack cannot resolve or that point outside the stack,
    and Karpenter NodePools that may launch EFA GPU types."""
    _unmodelled_launchers(view, table, report)
    for cap in view.capacities():
        _unlisted_types(cap, table, report)
        gpu = table.efa_of(cap.instance_types)
        if gpu:
            _unjudged_version(view, cap, gpu, allow, report)
            _unjudgeable(view, cap, gpu, allow, report)
            _outside_stack(view, cap, gpu, report)
        elif not cap.instance_types and cap.launch_template.state == "unjudgeable":
            # its types live in a template the pack cannot find: it may launch anything
            _unjudgeable(view, cap, {"instance types of a launch template it cannot see"}, allow, report)
    for label, owner, pool in node_pools(view):
        _karpenter_gpu_pool(label, owner, pool, table, report)


def _unlisted_types(cap: Any, table: TypeTable, report: ReportViolation) -> None:
    """A GPU type the table does not list: no EFA rule knows its interface count."""
    unlisted = table.unlisted(cap.instance_types)
    if unlisted and table.deny_unlisted:
        report(
            f"{cap.label} launches {join(unlisted)}, a GPU type the pack's table does not list, so no "
            f"EFA rule can judge it. Fix: add it with its EFA interface count to the policy config "
            f"extraEfaGpuTypes (or to nonEfaGpuTypes if it is deliberately used without EFA).",
            cap.resource.urn,
        )


def _unjudged_version(view: StackView, cap: Any, gpu: set[str], allow: set[str], report: ReportViolation) -> None:
    """The rules judge a launch template as the plan shows it: a group launching another version
    runs what no rule has seen (`version_problem`)."""
    if cap.launch_template.state != "resolved":
        return
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


def _external_references(view: StackView, cap: Any) -> list[str]:
    """What GPU capacity (and its launch template) names by a literal ID no resource of the stack
    defines. A reservation's own placement group is left to capacity-reservation-in-gpu-az."""
    external = []
    if cap.launch_template.state == "external":
        external.append(f"launch template {cap.launch_template.literal!r}")
    if cap.placement.state == "external":
        external.append(f"placement group {cap.placement.literal!r}")
    if cap.subnets.external:
        external.append(f"subnet(s) {cap.subnets.external}")
    if cap.launch_template.state == "resolved":
        lt = cap.launch_template.resource
        pg = view.placement_group(lt)
        if pg.state == "external" and not targets_reservation(view.props(lt)):
            external.append(f"placement group {pg.literal!r} (of launch template '{lt.name}')")
        _, _, sgs = view.template_security_groups(lt)
        if sgs:
            external.append(f"security group(s) {sgs} (of launch template '{lt.name}')")
    return external


def _outside_stack(view: StackView, cap: Any, gpu: set[str], report: ReportViolation) -> None:
    """References outside the stack hide what the EFA/AZ/placement rules would judge."""
    external = _external_references(view, cap)
    if external:
        report(
            f"{cap.label} runs {join(gpu)} with {'; '.join(external)} that no resource in this stack "
            f"defines, so the EFA/AZ/placement rules cannot judge them. Fix: create them in this stack "
            f"(or lower this policy to advisory in the policy config once they are checked elsewhere).",
            cap.resource.urn,
        )


def _karpenter_gpu_pool(label: str, owner: Any, pool: Any, table: TypeTable, report: ReportViolation) -> None:
    """A NodePool's EC2NodeClass is a launch path no EFA rule judges: it may not allow EFA GPU types
    (or types the table does not list) unless its limits cap GPUs at 0."""
    gpu, unlisted = karpenter_types(pool, table)
    if unlisted and table.deny_unlisted:
        report(
            f"{label} allows {join(unlisted)}, GPU type(s) the pack's table does not list. Fix: add them "
            f"to extraEfaGpuTypes or nonEfaGpuTypes.",
            owner.urn,
        )
    if gpu and not _no_gpus_allowed(pool):
        report(
            f"{label} may launch {join(gpu)}: its EC2NodeClass is a launch path this pack does not judge "
            f"(EFA interface per card, placement group, reservation, one AZ). Fix: run EFA GPU types in a "
            f"managed node group with a launch template; exclude them from the NodePool's requirements.",
            owner.urn,
        )


def _no_gpus_allowed(pool: Any) -> bool:
    """A NodePool whose `spec.limits` caps GPUs at 0: Karpenter launches no node that would pass the
    limit, so no GPU instance (limits count the node's capacity, karpenter.sh docs "NodePools")."""
    limits = dig(pool, "spec", "limits")
    if not isinstance(limits, dict):
        return False
    return any("gpu" in str(key).lower() and as_int(value) == 0 for key, value in limits.items())


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
        StackView.of(args.resources),
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

POLICIES = [gpu_blind_spots]
