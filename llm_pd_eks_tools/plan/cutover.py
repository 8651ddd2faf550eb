"""The sequence a node change runs through in one `pulumi up`, with its overlap cost and time.

A pure function over two previews' resources (resources.json records). The node groups' rolls come
from llm_pd_eks_tools/plan/gpu_node_rollout.py, the RayService's from
llm_pd_eks_tools/plan/rayservice_rollout.py; this module
puts them in the order the engine runs them (llm_pd_eks/gpu_cutover.py says why that order holds):
the control plane first (every node group depends on it), the new node groups, the RayService's
KubeRay upgrade onto them, and the old groups' deletion at the end. A change that touches no node
property plans nothing.

Times are planning figures, not measurements: EKS documents no duration for a control-plane upgrade
or for a node group's nodes to become Ready, so `PLANNING_MINUTES` holds the figures this plan
assumes; the model's load is bounded by the engine start budget the worker pods carry
(`RAYLLM_ENGINE_START_TIMEOUT_S`, llm_pd_eks/engine_start.py `engine_start_timeout_s`), and KubeRay
deletes the old Ray cluster 60 s after the switch (kuberay v1.7.0 rayservice_controller.go
`RayClusterDeletionDelayDuration`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from llm_pd_eks.catalog import GPU_INSTANCE_TYPES
from llm_pd_eks.engine_start import ENGINE_START_TIMEOUT_ENV
from llm_pd_eks_tools.plan.gpu_node_rollout import (
    BLUE_GREEN,
    EKS_ROLL,
    RECREATE,
    SYSTEM_COMPONENT,
    GpuRoll,
    classify_gpu_roll,
    classify_node_group_roll,
)
from llm_pd_eks_tools.plan.rayservice_rollout import NEW_CLUSTER, RAY_SERVICE_TYPE, Rollout, classify_resources

EKS_CLUSTER_TYPE = "eks:index:Cluster"
# Planning figures (minutes): see the module docstring.
PLANNING_MINUTES = {"control plane": 15.0, "nodes ready": 15.0, "group deleted": 5.0}
RAY_CLUSTER_DELETION_DELAY_MINUTES = 1.0


@dataclass(frozen=True)
class CutOver:
    """What `up` does, step by step, and what the old GPU nodes cost while they overlap the new ones."""

    steps: tuple[str, ...]
    minutes: float  # wall time of the whole sequence at the engines' start budget (an upper bound)
    overlap_hours: float  # how long the old GPU group runs next to the new one
    overlap_gpu_hours: float
    overlap_cost: Optional[float]  # USD at on-demand list price, when the price is known
    downtime: bool

    def lines(self) -> list[str]:
        """The sequence as numbered lines, then the totals, for a preview diff."""
        out = [f"{i}. {step}" for i, step in enumerate(self.steps, 1)]
        cost = f", about ${self.overlap_cost:,.2f}" if self.overlap_cost is not None else ""
        serving = "the endpoint is DOWN while the new cluster loads" if self.downtime else "no downtime"
        out.append(
            f"At most about {self.minutes:.0f} min (the engines' start budget, not a measured load); old GPU nodes "
            f"overlap the new ones for up to "
            f"{self.overlap_hours:.2f} h ({self.overlap_gpu_hours:,.1f} GPU-hours{cost}); {serving}."
        )
        return out


def _cluster_version(resources: dict[str, dict[str, Any]]) -> Optional[str]:
    found = [r for r in resources.values() if r.get("type") == EKS_CLUSTER_TYPE]
    return str(found[0].get("inputs", {}).get("version")) if len(found) == 1 else None


def _engine_start_minutes(resources: dict[str, dict[str, Any]]) -> float:
    """The longest engine start budget of the RayService's worker pods (minutes; 0 without one)."""
    seconds = 0.0
    for record in resources.values():
        if record.get("type") != RAY_SERVICE_TYPE:
            continue
        cluster = (record.get("inputs", {}).get("spec") or {}).get("rayClusterConfig") or {}
        for group in cluster.get("workerGroupSpecs") or []:
            for container in ((group.get("template") or {}).get("spec") or {}).get("containers") or []:
                for env in container.get("env") or []:
                    if env.get("name") == ENGINE_START_TIMEOUT_ENV:
                        seconds = max(seconds, float(env.get("value", 0)))
    return seconds / 60


def _gpus(instance_type: str) -> int:
    found = GPU_INSTANCE_TYPES.get(instance_type)
    return found.gpus if found else 0


def _group_step(roll: GpuRoll) -> Optional[str]:
    group = roll.group[:1].upper() + roll.group[1:]
    if roll.kind == BLUE_GREEN:
        return (
            f"{group} nodes: `{roll.new_name}` ({roll.extra_nodes} × {roll.instance_type}) is "
            f"created next to `{roll.old_name}`, whose {roll.old_nodes} node(s) keep running."
        )
    if roll.kind == RECREATE:
        return f"{group} nodes: `{roll.old_name}` is deleted first, then `{roll.new_name}` is created."
    if roll.kind == EKS_ROLL:
        return f"{group} nodes: {roll.describe()}"
    return None


PLACEMENT_GROUP_TYPE = "aws:ec2/placementGroup:PlacementGroup"


def _gpu_placement_group(resources: dict[str, dict[str, Any]]) -> Optional[str]:
    """The name of the GPU group's own cluster placement group (None: the capacity brings its own)."""
    for record in resources.values():
        if record.get("type") == PLACEMENT_GROUP_TYPE and "gpu" in str(record.get("name", "")):
            return str((record.get("inputs") or {}).get("name") or "") or None
    return None


def _gcs_fault_tolerant(resources: dict[str, dict[str, Any]]) -> bool:
    """Whether the RayService's cluster keeps its GCS in an external store (`gcsFaultToleranceOptions`)."""
    for record in resources.values():
        if record.get("type") == RAY_SERVICE_TYPE:
            cluster = (record.get("inputs", {}).get("spec") or {}).get("rayClusterConfig") or {}
            return bool(cluster.get("gcsFaultToleranceOptions"))
    return False


def _head_step(system: GpuRoll, fault_tolerant: bool, ray_cluster_changes: bool) -> str:
    """What a system group replacement does to the Ray head, which selects system nodes by role only
    (llm_pd_eks/ray_head_pod.py): no second Ray cluster of its own, one head restart when the old group
    goes (if the head is still there)."""
    if ray_cluster_changes:
        where = (
            "The Ray head selects system nodes by role, not by group: the new Ray cluster's head may start on "
            f"either system group; one still on `{system.old_name}` when it is deleted at the end of `up` "
            "restarts on a node of the new group"
        )
    else:
        where = (
            "The Ray head selects system nodes by role, not by group: the RayService is unchanged (no second Ray "
            f"cluster, no extra GPU nodes); the head runs on until `{system.old_name}` is deleted at the end of "
            "`up`, then restarts on a node of the new group"
        )
    if fault_tolerant:
        return where + "; GCS fault tolerance keeps the Ray cluster and its Serve replicas through the restart."
    return (
        where + "; without serving.gcsFaultTolerance the Ray cluster restarts with it: the endpoint is DOWN until it "
        "serves again."
    )


def _ray_step(rollout: Optional[Rollout], engine_minutes: float) -> Optional[str]:
    if rollout is None or rollout.kind != NEW_CLUSTER:
        return None
    load = f"up to {engine_minutes:.0f} min for the model to load" if engine_minutes else "the model loads"
    if rollout.downtime:
        return (
            "RayService: replaced (upgradeStrategy Recreate): the old Ray cluster is deleted, the new one is "
            f"built on the new group(s); the endpoint is DOWN until it serves ({load})."
        )
    return (
        f"RayService: KubeRay's {rollout.strategy} upgrade builds the new Ray cluster on the new group(s), switches "
        f"the serve Service to it once its Serve applications are healthy ({load}) and deletes the old cluster 60 s "
        "later; `up` waits for `Ready` and `UpgradeInProgress=False`."
    )


def plan_cutover(
    old: dict[str, dict[str, Any]], new: dict[str, dict[str, Any]], hourly_price: Optional[float] = None
) -> Optional[CutOver]:
    """The sequence of the change from `old` to `new` (urn -> record), or None when no node changes.

    `hourly_price`: one GPU node's on-demand list price per hour (llm_pd_eks/prices.py).
    """
    before, after = _cluster_version(old), _cluster_version(new)
    control_plane = before is not None and after is not None and before != after
    system = classify_node_group_roll(old, new, SYSTEM_COMPONENT)
    gpu = classify_gpu_roll(old, new, hourly_price)
    replaced = [r for r in (system, gpu) if r.kind in (BLUE_GREEN, RECREATE, EKS_ROLL)]
    if not control_plane and not replaced:
        return None
    rollouts = [r for _, r in classify_resources(old, new)]
    rollout = rollouts[0] if len(rollouts) == 1 else None
    engine = _engine_start_minutes(new)

    steps: list[str] = []
    minutes = 0.0
    if control_plane:
        steps.append(
            f"Control plane: Kubernetes {before} → {after}, upgraded in place by EKS; the node groups wait for it."
        )
        minutes += PLANNING_MINUTES["control plane"]
    steps += [s for s in map(_group_step, replaced) if s]
    old_pg, new_pg = _gpu_placement_group(old), _gpu_placement_group(new)
    if gpu.kind in (BLUE_GREEN, RECREATE) and new_pg and new_pg != old_pg:
        steps.append(
            f"GPU placement: the new nodes launch into their own cluster placement group `{new_pg}`"
            + (
                f", not into `{old_pg}` that the serving nodes fill; `{old_pg}` is deleted after its group."
                if old_pg
                else "."
            )
        )
    if replaced:
        minutes += PLANNING_MINUTES["nodes ready"]
    ray = _ray_step(rollout, engine)
    if ray:
        steps.append(ray)
        minutes += engine + RAY_CLUSTER_DELETION_DELAY_MINUTES
    has_head = any(r.get("type") == RAY_SERVICE_TYPE for r in new.values())
    head_restarts = has_head and system.kind in (BLUE_GREEN, RECREATE, EKS_ROLL)
    fault_tolerant = _gcs_fault_tolerant(new)
    old_groups = [r.old_name for r in replaced if r.kind == BLUE_GREEN]
    if old_groups:
        steps.append(
            f"Pulumi deletes {', '.join(f'`{n}`' for n in old_groups)} at the end of `up` "
            "(no Ray worker of the serving cluster runs there any more)."
        )
        minutes += PLANNING_MINUTES["group deleted"]
    if head_restarts:
        steps.append(_head_step(system, fault_tolerant, bool(rollout and rollout.kind == NEW_CLUSTER)))

    overlap_nodes = gpu.old_nodes if gpu.kind == BLUE_GREEN else 0
    overlap_hours = (PLANNING_MINUTES["nodes ready"] + engine + RAY_CLUSTER_DELETION_DELAY_MINUTES) / 60
    overlap_hours = overlap_hours if overlap_nodes else 0.0
    downtime = (
        gpu.kind in (RECREATE, EKS_ROLL) or bool(rollout and rollout.downtime) or (head_restarts and not fault_tolerant)
    )
    return CutOver(
        tuple(steps),
        minutes,
        overlap_hours,
        overlap_nodes * _gpus(gpu.instance_type) * overlap_hours,
        None if hourly_price is None else overlap_nodes * hourly_price * overlap_hours,
        downtime,
    )
