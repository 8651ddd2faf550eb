"""What a change does to the GPU node group when it is applied: nothing, in place, or a replacement.

A pure function over the old and new plan records (resources.json) of the GPU managed node group
and its launch template. llm_pd_eks/efa_gpu_nodes.py keys the group's EKS name (`nodeGroupName`)
by the launch template's content, and EKS cannot rename a node group, so:
- a new `nodeGroupName` is a replacement. Blue/green (the default on demand): the new group starts
  at its desiredSize next to the old one, which Pulumi deletes after everything else: extra GPU
  nodes, billed, while both run; the serving pods are drained onto the new, already Ready nodes
  when the old group goes, and each reloads the model there.
  Recreate (`deleteBeforeReplace`; the default on a reservation): the old group goes first, no extra
  nodes, and the endpoint is down until new nodes have joined and the model has loaded;
- any other change of the group (scaling, labels, taints) is applied in place by EKS without new nodes;
- a launch-template change that keeps `nodeGroupName` would be EKS's in-place roll, which adds
  max(2 x AZs, maxUnavailable) nodes and then fails on the one-pod PodDisruptionBudgets after 15
  minutes (PodEvictionFailure; https://docs.aws.amazon.com/eks/latest/userguide/managed-node-update-behavior.html):
  reported as such, so a preview diff shows it before `up` does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

NODE_GROUP_TYPE = "aws:eks/nodeGroup:NodeGroup"
LAUNCH_TEMPLATE_TYPE = "aws:ec2/launchTemplate:LaunchTemplate"
GPU_COMPONENT = "llm-pd-eks:index:EfaGpuNodeGroup"

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
    extra_nodes: int = 0  # GPU nodes billed on top of the running group while the change runs
    hourly: Optional[float] = None  # their on-demand list price per hour, when known
    downtime: bool = False
    reasons: tuple[str, ...] = field(default_factory=tuple)  # what changed (input paths)

    def describe(self) -> str:
        """One line for a preview diff."""
        what = f" because of {', '.join(f'`{r}`' for r in self.reasons)}" if self.reasons else ""
        price = f" (about ${self.hourly:,.2f}/hour)" if self.hourly is not None else ""
        if self.kind == NO_CHANGE:
            return "GPU node group unchanged."
        if self.kind == CREATE:
            return "GPU node group created."
        if self.kind == DELETE:
            return "GPU node group deleted: serving stops."
        if self.kind == IN_PLACE:
            return f"GPU node group updated in place by EKS, no new nodes{what}."
        if self.kind == BLUE_GREEN:
            return (
                f"GPU node group replaced blue/green{what}: a new group of {self.extra_nodes} × "
                f"{self.instance_type} runs next to the old one until the end of `up`: {self.extra_nodes} extra "
                f"GPU node(s){price}; the serving pods move onto the new nodes when the old group is deleted."
            )
        if self.kind == RECREATE:
            return (
                f"GPU node group recreated{what}: the old group is deleted first, no extra nodes; the endpoint "
                f"is DOWN until {self.extra_nodes or 'the new'} node(s) have joined and loaded the model."
            )
        return (
            f"GPU node group rolled in place by EKS{what}: it adds {self.extra_nodes} node(s){price}, then "
            f"fails on the one-pod PodDisruptionBudgets (PodEvictionFailure after 15 minutes)."
        )


def _is_gpu(record: dict[str, Any], gpu_urns: set[str]) -> bool:
    return record.get("parent") in gpu_urns


def _changed(old: Any, new: Any, path: str = "") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in sorted(set(old) | set(new)):
            out += _changed(old.get(key), new.get(key), f"{path}.{key}" if path else key)
        return out
    return [] if old == new else [path or "(value)"]


def _pick(resources: dict[str, dict[str, Any]], type_: str) -> Optional[dict[str, Any]]:
    gpu_urns = {u for u, r in resources.items() if r.get("type") == GPU_COMPONENT}
    found = [r for r in resources.values() if r.get("type") == type_ and _is_gpu(r, gpu_urns)]
    return found[0] if len(found) == 1 else None


def classify_gpu_roll(
    old: dict[str, dict[str, Any]], new: dict[str, dict[str, Any]], hourly_price: Optional[float] = None
) -> GpuRoll:
    """The GPU node group's roll between two previews' resources (urn -> record).

    `hourly_price`: on-demand list price of one GPU node, for the extra nodes' cost.
    """
    before, after = _pick(old, NODE_GROUP_TYPE), _pick(new, NODE_GROUP_TYPE)
    if before is None and after is None:
        return GpuRoll(NO_CHANGE)
    if before is None:
        return GpuRoll(CREATE)
    if after is None:
        return GpuRoll(DELETE)
    a, b = before.get("inputs", {}), after.get("inputs", {})
    lt_a = (_pick(old, LAUNCH_TEMPLATE_TYPE) or {}).get("inputs", {})
    lt_b = (_pick(new, LAUNCH_TEMPLATE_TYPE) or {}).get("inputs", {})
    template = tuple(f"launchTemplate.{p}" for p in _changed(lt_a, lt_b))
    group = tuple(p for p in _changed(a, b) if not p.startswith("launchTemplate"))
    instance = str(lt_b.get("instanceType", ""))
    desired = int((b.get("scalingConfig") or {}).get("desiredSize", 0))

    def cost(nodes: int) -> Optional[float]:
        return None if hourly_price is None else nodes * hourly_price

    if a.get("nodeGroupName") != b.get("nodeGroupName"):
        reasons = template + tuple(p for p in group if p != "nodeGroupName")
        if after.get("delete_before_replace"):
            return GpuRoll(RECREATE, instance, desired, None, True, reasons)
        return GpuRoll(BLUE_GREEN, instance, desired, cost(desired), False, reasons)
    if template:
        # EKS's surge: max(2 x AZs, maxUnavailable); the group has one subnet, so one AZ
        surge = max(2 * len(b.get("subnetIds") or [1]), int((b.get("updateConfig") or {}).get("maxUnavailable", 1)))
        return GpuRoll(EKS_ROLL, instance, surge, cost(surge), True, template)
    if group:
        return GpuRoll(IN_PLACE, instance, reasons=group)
    return GpuRoll(NO_CHANGE)
