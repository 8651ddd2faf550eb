"""What a change does to a managed node group when it is applied: nothing, in place, or a replacement.

A pure function over the old and new plan records (resources.json) of a node group and its launch
template. llm_pd_eks/node_common.py keys each group's EKS name (`nodeGroupName`) by everything that
shapes its nodes (the launch template's arguments, Kubernetes version, AMI release), and EKS cannot
rename a node group, so:
- a new `nodeGroupName` is a replacement. Blue/green (the default on demand): the new group starts
  at its desiredSize next to the old one, which Pulumi deletes last, after the RayService (whose pods
  select their group by name, llm_pd_eks/gpu_cutover.py) has moved onto it: extra nodes, billed, while
  both run (llm_pd_eks_tools/plan/cutover.py puts the sequence, its time and cost together).
  Recreate (`deleteBeforeReplace`; the default on a reservation): the old group goes first, no extra
  nodes, and the endpoint is down until new nodes have joined and the model has loaded;
- a change of scaling, labels, taints or the group's own tags is applied in place by EKS and
  replaces no node;
- a node change (launch template, `version`, `releaseVersion`, AMI or instance type) that keeps
  `nodeGroupName` is EKS's in-place roll: with update strategy MINIMAL one node is terminated before
  its replacement launches, with DEFAULT it first adds max(2 x AZs, maxUnavailable) nodes; either way
  it drains through the eviction API and fails on the one-pod PodDisruptionBudgets after 15 minutes
  (PodEvictionFailure; https://docs.aws.amazon.com/eks/latest/userguide/managed-node-update-behavior.html):
  reported as such, so a preview diff shows it before `up` does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

NODE_GROUP_TYPE = "aws:eks/nodeGroup:NodeGroup"
LAUNCH_TEMPLATE_TYPE = "aws:ec2/launchTemplate:LaunchTemplate"
GPU_COMPONENT = "llm-pd-eks:index:EfaGpuNodeGroup"
SYSTEM_COMPONENT = "llm-pd-eks:index:SystemNodeGroup"
# Node group inputs whose change replaces the nodes (EKS UpdateNodegroupVersion), the launch template aside.
NODE_INPUTS = ("version", "releaseVersion", "amiType", "instanceTypes", "capacityType")

NO_CHANGE = "no change"
CREATE = "create"
DELETE = "delete"
IN_PLACE = "in place"
BLUE_GREEN = "blue/green"
RECREATE = "recreate"
EKS_ROLL = "EKS in-place roll"


@dataclass(frozen=True)
class GpuRoll:
    kind: str  # NO_CHANGE | CREATE | DELETE | IN_PLACE | BLUE_GREEN | RECREATE | EKS_ROLL
    instance_type: str = ""
    old_name: str = ""  # the EKS node group names, before and after
    new_name: str = ""
    old_nodes: int = 0  # the replaced group's desiredSize: what runs next to the new group
    group: str = "GPU"  # which group: GPU | system
    extra_nodes: int = 0  # GPU nodes billed on top of the running group while the change runs
    hourly: Optional[float] = None  # their on-demand list price per hour, when known
    downtime: bool = False
    reasons: tuple[str, ...] = field(default_factory=tuple)  # what changed (input paths)

    def describe(self) -> str:
        """One line for a preview diff."""
        what = f" because of {', '.join(f'`{r}`' for r in self.reasons)}" if self.reasons else ""
        price = f" (about ${self.hourly:,.2f}/hour)" if self.hourly is not None else ""
        group = f"{self.group} node group"
        if self.kind == NO_CHANGE:
            return f"{group} unchanged."
        if self.kind == CREATE:
            return f"{group} created."
        if self.kind == DELETE:
            return f"{group} deleted" + (": serving stops." if self.group == "GPU" else ".")
        if self.kind == IN_PLACE:
            return f"{group} updated in place by EKS, no node replaced{what}."
        if self.kind == BLUE_GREEN:
            return (
                f"{group} replaced blue/green{what}: `{self.new_name}` ({self.extra_nodes} × {self.instance_type}) "
                f"is created next to `{self.old_name}`, which Pulumi deletes at the end of `up`, after the RayService "
                f"has moved onto the new group: {self.old_nodes} extra {self.group} node(s) while both run{price}."
            )
        if self.kind == RECREATE:
            return (
                f"{group} recreated{what}: `{self.old_name}` is deleted first, no extra nodes; the endpoint "
                f"is DOWN until {self.extra_nodes or 'the new'} node(s) of `{self.new_name}` have joined "
                "and loaded the model."
            )
        surge = (
            f"adds {self.extra_nodes} node(s){price}, then"
            if self.extra_nodes
            else "replaces one node at a time (MINIMAL),"
        )
        return (
            f"{group} rolled in place by EKS{what}: it {surge} drains each old node and "
            f"fails on the one-pod PodDisruptionBudgets (PodEvictionFailure after 15 minutes)."
        )


def _changed(old: Any, new: Any, path: str = "") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in sorted(set(old) | set(new)):
            out += _changed(old.get(key), new.get(key), f"{path}.{key}" if path else key)
        return out
    return [] if old == new else [path or "(value)"]


def _pick(resources: dict[str, dict[str, Any]], type_: str, component: str) -> Optional[dict[str, Any]]:
    parents = {u for u, r in resources.items() if r.get("type") == component}
    found = [r for r in resources.values() if r.get("type") == type_ and r.get("parent") in parents]
    return found[0] if len(found) == 1 else None


def classify_gpu_roll(
    old: dict[str, dict[str, Any]], new: dict[str, dict[str, Any]], hourly_price: Optional[float] = None
) -> GpuRoll:
    """The GPU node group's roll between two previews' resources (urn -> record).

    `hourly_price`: on-demand list price of one GPU node, for the extra nodes' cost.
    """
    return classify_node_group_roll(old, new, GPU_COMPONENT, hourly_price)


def classify_node_group_roll(
    old: dict[str, dict[str, Any]],
    new: dict[str, dict[str, Any]],
    component: str = GPU_COMPONENT,
    hourly_price: Optional[float] = None,
) -> GpuRoll:
    """The roll of the node group inside `component` (its type token) between two previews' resources."""
    label = "GPU" if component == GPU_COMPONENT else "system"
    before, after = _pick(old, NODE_GROUP_TYPE, component), _pick(new, NODE_GROUP_TYPE, component)
    if before is None and after is None:
        return GpuRoll(NO_CHANGE, group=label)
    if before is None:
        return GpuRoll(CREATE, group=label)
    if after is None:
        return GpuRoll(DELETE, group=label)
    a, b = before.get("inputs", {}), after.get("inputs", {})
    lt_a = (_pick(old, LAUNCH_TEMPLATE_TYPE, component) or {}).get("inputs", {})
    lt_b = (_pick(new, LAUNCH_TEMPLATE_TYPE, component) or {}).get("inputs", {})
    template = tuple(f"launchTemplate.{p}" for p in _changed(lt_a, lt_b))
    group = tuple(p for p in _changed(a, b) if not p.startswith("launchTemplate"))
    nodes = tuple(p for p in group if p.split(".")[0] in NODE_INPUTS)
    instance = str(lt_b.get("instanceType") or ",".join(b.get("instanceTypes") or []))
    desired = int((b.get("scalingConfig") or {}).get("desiredSize", 0))
    old_desired = int((a.get("scalingConfig") or {}).get("desiredSize", 0))
    old_name, new_name = str(a.get("nodeGroupName", "")), str(b.get("nodeGroupName", ""))

    def cost(count: int) -> Optional[float]:
        return None if hourly_price is None else count * hourly_price

    if a.get("nodeGroupName") != b.get("nodeGroupName"):
        reasons = template + tuple(p for p in group if p != "nodeGroupName")
        if after.get("delete_before_replace"):
            return GpuRoll(
                RECREATE,
                instance,
                old_name=old_name,
                new_name=new_name,
                group=label,
                extra_nodes=desired,
                downtime=True,
                reasons=reasons,
            )
        return GpuRoll(
            BLUE_GREEN, instance, old_name=old_name, new_name=new_name, old_nodes=old_desired, group=label,
            extra_nodes=desired, hourly=cost(old_desired), reasons=reasons,
        )  # fmt: skip
    if template or nodes:
        update = b.get("updateConfig") or {}
        # EKS's DEFAULT surge: max(2 x AZs, maxUnavailable); MINIMAL adds none
        subnets = len(b.get("subnetIds") or [1])
        surge = (
            0 if update.get("updateStrategy") == "MINIMAL" else max(2 * subnets, int(update.get("maxUnavailable", 1)))
        )
        return GpuRoll(
            EKS_ROLL, instance, old_name=old_name, new_name=new_name, group=label, extra_nodes=surge,
            hourly=cost(surge) if surge else None, downtime=True, reasons=template + nodes,
        )  # fmt: skip
    if group:
        return GpuRoll(IN_PLACE, instance, old_name=old_name, new_name=new_name, group=label, reasons=group)
    return GpuRoll(NO_CHANGE, group=label)
