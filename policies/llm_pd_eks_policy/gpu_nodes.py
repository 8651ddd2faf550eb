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

from typing import Any, Callable, Iterable, Iterator, Optional

from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    ReportViolation,
    StackValidationArgs,
    StackValidationPolicy,
)

from .capacity import is_capacity_block_template
from .common import (
    GPU_TABLE_SCHEMA,
    TypeTable,
    config_with_defaults,
    dig,
    guarded,
    is_unknown,
    join,
    truthy,
)
from .node_labels import LabelIndex, node_labels
from .pod_efa import pod_instance_types
from .pod_env import requested
from .ray_serving import kv_configs
from .stack import Capacity, EfaInterfaces, StackView
from .workloads import Workload, container_command, containers, kv_flags, workloads

EFA_CONFIG = GPU_TABLE_SCHEMA


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
        check(StackView.of(args.resources), TypeTable.from_config(config_with_defaults(args, EFA_CONFIG)), report)

    return StackValidationPolicy(
        name=name,
        description=description,
        validate=guarded(name, validate),
        enforcement_level=level,
        config_schema=PolicyConfigSchema(properties=EFA_CONFIG),
    )


# -- 1. one AZ ---------------------------------------------------------------------------------
def capacity_azs(view: StackView, cap: Capacity) -> dict[str, list[str]]:
    """AZ -> what puts the capacity there (its subnets, AZs named on it or its template)."""
    azs: dict[str, list[str]] = {az: ["the resource itself"] for az in cap.literal_azs}
    for subnet in cap.subnets.resolved:
        az = view.subnet_az(subnet)
        if az is not None and not is_unknown(az):
            azs.setdefault(str(az), []).append(f"subnet {subnet.name}")
    return azs


def placement_of(view: StackView, cap: Capacity) -> Optional[Any]:
    """The placement group resource a capacity launches into (its own, else its template's)."""
    if cap.placement.state == "resolved":
        return cap.placement.resource
    if cap.launch_template.state == "resolved":
        ref = view.placement_group(cap.launch_template.resource)
        return ref.resource if ref.state == "resolved" else None
    return None


def _single_az(view: StackView, table: TypeTable, report: ReportViolation) -> None:
    shared: dict[str, tuple[Any, dict[str, set[str]]]] = {}  # placement group -> (group, AZ -> labels)
    for cap, gpu in gpu_capacities(view, table):
        azs = capacity_azs(view, cap)
        group = placement_of(view, cap)
        if group is not None and len(azs) == 1:  # one in several AZs is refused on its own below
            by_az = shared.setdefault(group.urn, (group, {}))[1]
            for az in azs:
                by_az.setdefault(az, set()).add(cap.label)
        if len(azs) > 1:
            spread = "; ".join(f"{az}: {join(names)}" for az, names in sorted(azs.items()))
            report(
                f"{cap.label} runs {join(gpu)} across {len(azs)} availability zones ({spread}). EFA "
                f"traffic does not cross AZs and a cluster placement group lives in one AZ. Fix: give it "
                f"the private subnet of a single AZ.",
                cap.resource.urn,
            )
    _serving_spread(view, gpu_capacities(view, table), report)
    for cap, gpu in gpu_capacities(view, table):
        unplaced = [s.name for s in cap.subnets.resolved if view.subnet_az(s) is None]
        if unplaced:
            report(
                f"{cap.label} runs {join(gpu)} in subnet(s) {join(unplaced)} that name no availability zone: EC2 "
                f"picks one for each, so the group's AZ is not known. Fix: set availabilityZone on the subnet.",
                cap.resource.urn,
            )
    for group, by_az in shared.values():  # prefill and decode groups sharing one cluster placement group
        if len(by_az) > 1:
            spread = "; ".join(f"{az}: {join(labels)}" for az, labels in sorted(by_az.items()))
            report(
                f"placement group '{group.name}' is shared by GPU capacity in {len(by_az)} availability zones "
                f"({spread}). A cluster placement group lives in one AZ, so the groups of another AZ never "
                f"launch into it. Fix: put every group that shares it in the same AZ (or give each its own).",
                group.urn,
            )


def _served_model(work: Any) -> Optional[str]:
    """The model a workload's engines serve when they move KV caches (a `--kv-transfer-config` on a
    `vllm serve MODEL` line): prefill and decode Deployments of one model are one P/D pair."""
    for _, pod in work.pods():
        for container in containers(pod):
            for argv in container_command(container).commands:
                if not kv_flags(argv) or "serve" not in argv:
                    continue
                rest = argv[argv.index("serve") + 1 :]
                model = next((a for a in rest if not a.startswith("-")), None)
                if "--model" in rest[:-1]:
                    model = rest[rest.index("--model") + 1]
                return model
    return None


def _moves_kv(work: Any) -> bool:
    return _served_model(work) is not None or any(
        isinstance(node, dict) and "kv_connector" in node for _, node in kv_configs(work)
    )


def _serving_spread(view: StackView, caps: list[tuple[Capacity, set[str]]], report: ReportViolation) -> None:
    """A serving deployment's GPU pods (prefill and decode, every worker group; the prefill and decode
    Deployments of one model) on groups of one AZ and, when they move KV caches, of one placement
    group: each pod may land on every GPU group whose node labels its nodeSelector admits (and, when
    it pins instance types, of those types); KV-cache transfer does not cross AZs, and EFA latency
    needs the nodes in one cluster placement group."""
    placed = _single_az_groups(view, caps)
    if len(placed) < 2:
        return  # one GPU group: nothing to spread over
    pairs: dict[str, list[tuple[Any, dict[str, set[str]]]]] = {}
    for resource, work, by_az, groups in _gpu_workloads(view, placed):
        model = _served_model(work)
        if model is not None:
            pairs.setdefault(model, []).append((resource, by_az))
        _workload_spread(work, by_az, groups, resource.urn, report)
    for model, members in pairs.items():  # prefill and decode Deployments of one model
        _model_spread(model, members, report)


def _single_az_groups(view: StackView, caps: list[tuple[Capacity, set[str]]]) -> list:
    """(capacity, GPU types, its one AZ, its nodes' labels, its placement group) of each GPU group
    in one AZ; groups in several AZs are refused on their own."""
    placed = []
    for cap, gpu in caps:
        azs = capacity_azs(view, cap)
        if len(azs) == 1:
            group = placement_of(view, cap)
            placed.append((cap, gpu, next(iter(azs)), node_labels(view, cap, set(azs)), group))
    return placed


def _gpu_workloads(
    view: StackView, placed: list
) -> Iterator[tuple[Any, Workload, dict[str, set[str]], dict[str, str]]]:
    """(resource, workload, AZ -> groups, placement group urn -> name) of every Kubernetes workload
    whose GPU pods may land on the `placed` groups."""
    seen: dict[str, tuple[dict[str, set[str]], dict[str, str]]] = {}  # pods with the same selector land alike
    index = LabelIndex([labels for _, _, _, labels, _ in placed])
    for resource in view.resources:
        if not resource.resource_type.startswith("kubernetes:"):
            continue
        for work in workloads(resource.resource_type, view.props(resource)):
            by_az: dict[str, set[str]] = {}
            groups: dict[str, str] = {}
            for _, pod in work.pods():
                if not any((requested(c, "nvidia.com/gpu") or 0) > 0 for c in containers(pod)):
                    continue
                landing = _landing(placed, index, dig(pod, "nodeSelector"), pod_instance_types(pod), seen)
                for az, labels in landing[0].items():
                    by_az.setdefault(az, set()).update(labels)
                groups.update(landing[1])
            if by_az:
                yield resource, work, by_az, groups


def _workload_spread(
    work: Workload, by_az: dict[str, set[str]], groups: dict[str, str], urn: str, report: ReportViolation
) -> None:
    """One workload's GPU pods may land in several AZs, or move KV caches across placement groups."""
    if len(by_az) > 1:
        _spread_verdict(work.label, by_az, urn, report)
    elif len(groups) > 1 and _moves_kv(work):
        report(
            f"{work.label} moves KV caches between GPU pods that may land in {len(groups)} placement "
            f"groups ({join(groups.values())}); EFA latency needs them in one cluster placement group. "
            f"Fix: run its prefill and decode groups in one placement group, or select one group.",
            urn,
        )


def _model_spread(model: str, members: list[tuple[Any, dict[str, set[str]]]], report: ReportViolation) -> None:
    """The prefill and decode workloads of one model, taken together, may land in several AZs."""
    merged: dict[str, set[str]] = {}
    for _, by_az in members:
        for az, labels in by_az.items():
            merged.setdefault(az, set()).update(labels)
    if len(members) > 1 and len(merged) > 1:
        _spread_verdict(f"the P/D workloads of model {model!r}", merged, members[0][0].urn, report)


def _landing(
    placed: list, index: LabelIndex, selector: Any, pinned: set[str], seen: dict
) -> tuple[dict[str, set[str]], dict[str, str]]:
    """(AZ -> groups, placement group urn -> name) of the GPU groups a pod with `selector` and
    instance-type pins may land on, computed once per distinct selector and pins."""
    key = repr((sorted(selector.items(), key=repr) if isinstance(selector, dict) else selector, sorted(pinned)))
    if key not in seen:
        by_az: dict[str, set[str]] = {}
        groups: dict[str, str] = {}
        for i in sorted(index.admitted(selector)):
            cap, gpu, az, _, group = placed[i]
            if pinned and not pinned & gpu:
                continue
            by_az.setdefault(az, set()).add(cap.label)
            if group is not None:
                groups[group.urn] = group.name
        seen[key] = (by_az, groups)
    return seen[key]


def _spread_verdict(label: str, by_az: dict[str, set[str]], urn: str, report: ReportViolation) -> None:
    spread = "; ".join(f"{az}: {join(labels)}" for az, labels in sorted(by_az.items()))
    report(
        f"{label} runs GPU pods on groups in {len(by_az)} availability zones ({spread}); its prefill and "
        f"decode pods move the KV cache over EFA, which does not cross AZs. Fix: keep the GPU groups it may "
        f"use in one AZ, or select one with nodeSelector.",
        urn,
    )


gpu_group_single_az = gpu_stack_policy(
    name="gpu-node-group-single-az",
    description="Every resource that launches EFA-capable GPU instances keeps them in one availability zone, "
    "and so do all GPU groups sharing a placement group or serving one deployment.",
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
            if cap.launch_template.state == "resolved" and is_unknown(
                dig(view.props(cap.launch_template.resource), "networkInterfaces")
            ):
                report(
                    f"{label} ({join(gpu)}): its networkInterfaces are not known at preview (built in the same "
                    f"apply), so no rule can count its EFA interfaces. Fix: build the interface list from literal "
                    f"values (IDs may stay outputs).",
                    urn,
                )
            elif efa.malformed:
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
    seen: set[tuple[str, str]] = set()
    for cap, gpu in gpu_capacities(view, table):
        source = _interfaces(view, cap)
        if source is None:
            continue
        label, urn, efa = source
        # Several GPU types (a mixed group, overrides): the one with the most EFA cards sets the bar.
        # A template shared by groups of different types is judged for each group's strictest type.
        strictest = table.strictest(gpu)
        if not efa.known or efa.count == 0 or efa.malformed or (urn, strictest) in seen:
            continue  # unknown: skip; none / malformed: efa-on-gpu-nodes reports it
        seen.add((urn, strictest))
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


POLICIES = [
    gpu_group_single_az,
    efa_on_every_card,
    efa_interface_count,
    cluster_placement,
    private_gpu_nodes,
]
