"""What a RayService change does when it rolls out: Serve-only in place, or a new Ray cluster.

A pure function over the old and new RayService specs (as the preview records them in
resources.json). It follows KubeRay 1.7's RayService controller:
- `serveConfigV2` changes are applied to the running cluster in place (no new cluster).
- The RayCluster part is compared by a hash that leaves out each worker group's `replicas`,
  `minReplicas`, `maxReplicas`, `scaleStrategy.workersToDelete` and the pods' `tolerations` and
  `schedulingGates` (utils.GenerateHashWithoutReplicasAndWorkersToDelete); worker groups appended at
  the end are also added in place (isClusterSpecHashEqual, partial). Anything else needs a new cluster.
- How that new cluster comes is `spec.upgradeStrategy.type`: `NewCluster` builds a second full
  cluster next to the serving one and switches traffic once it is ready (no downtime; its worker
  pods need GPU nodes of their own), `None` never builds one: this program pairs it with a Pulumi
  replacement of the RayService (serving.upgradeStrategy `Recreate`: downtime, no extra nodes).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Optional

RAY_SERVICE_TYPE = "kubernetes:ray.io/v1:RayService"
GPU_RESOURCE = "nvidia.com/gpu"
# Worker-group fields KubeRay leaves out of the cluster hash (changing them never needs a new cluster).
MUTED_WORKER_FIELDS = ("replicas", "minReplicas", "maxReplicas")
MUTED_POD_FIELDS = ("tolerations", "schedulingGates")

NO_CHANGE = "no change"
CREATE = "create"
DELETE = "delete"
IN_PLACE = "in place"
NEW_CLUSTER = "new Ray cluster"


@dataclass(frozen=True)
class Rollout:
    kind: str  # NO_CHANGE | CREATE | DELETE | IN_PLACE | NEW_CLUSTER
    strategy: Optional[str] = None  # KubeRay upgradeStrategy.type of the new spec (for NEW_CLUSTER)
    extra_gpu_nodes: int = 0  # GPU nodes the roll-out needs on top of the serving cluster's
    downtime: bool = False  # the endpoint stops serving while the new cluster loads the model
    reasons: tuple[str, ...] = field(default_factory=tuple)  # what changed, as spec paths

    def describe(self) -> str:
        """One line for a preview diff."""
        if self.kind == NO_CHANGE:
            return "RayService unchanged."
        if self.kind == CREATE:
            return "RayService created: a first Ray cluster comes up."
        if self.kind == DELETE:
            return "RayService deleted: serving stops."
        what = ", ".join(f"`{r}`" for r in self.reasons)
        if self.kind == IN_PLACE:
            return f"RayService: Serve-only change, applied in place to the running cluster (no new cluster): {what}."
        if self.downtime:
            how = (
                "the RayService is replaced (upgradeStrategy None + Recreate): the endpoint is down until the new "
                "cluster has loaded the model; no extra GPU nodes"
            )
        else:
            how = (
                f"KubeRay builds a second cluster (upgradeStrategy {self.strategy}) and switches when it is ready: "
                f"no downtime, {self.extra_gpu_nodes} extra GPU node(s) while both run"
            )
        return f"RayService: Ray cluster replacement, {how}; because of {what}."


def _hashed_cluster(cluster: dict[str, Any]) -> dict[str, Any]:
    """The RayCluster spec as KubeRay hashes it (the muted fields removed)."""
    spec = copy.deepcopy(cluster or {})
    for group in spec.get("workerGroupSpecs") or []:
        for key in MUTED_WORKER_FIELDS:
            group.pop(key, None)
        (group.get("scaleStrategy") or {}).pop("workersToDelete", None)
        for key in MUTED_POD_FIELDS:
            ((group.get("template") or {}).get("spec") or {}).pop(key, None)
    head_pod = ((spec.get("headGroupSpec") or {}).get("template") or {}).get("spec") or {}
    for key in MUTED_POD_FIELDS:
        head_pod.pop(key, None)
    return spec


def _differing_paths(old: Any, new: Any, path: str) -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        found: list[str] = []
        for key in sorted(set(old) | set(new)):
            found += _differing_paths(old.get(key), new.get(key), f"{path}.{key}")
        return found
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        found = []
        for i, (a, b) in enumerate(zip(old, new)):
            found += _differing_paths(a, b, f"{path}[{i}]")
        return found
    return [] if old == new else [path]


def _gpu_pods_at_start(cluster: dict[str, Any]) -> int:
    """Worker pods a new cluster starts with (`replicas`) that take GPUs: one GPU node each here."""
    pods = 0
    for group in cluster.get("workerGroupSpecs") or []:
        containers = ((group.get("template") or {}).get("spec") or {}).get("containers") or []
        if any(int(str((c.get("resources") or {}).get("limits", {}).get(GPU_RESOURCE, 0))) for c in containers):
            pods += int(group.get("replicas", group.get("minReplicas", 0)) or 0) * int(group.get("numOfHosts", 1))
    return pods


def classify(old_spec: Optional[dict[str, Any]], new_spec: Optional[dict[str, Any]]) -> Rollout:
    """How the change from `old_spec` to `new_spec` (RayService `spec`s; None: absent) rolls out."""
    if old_spec is None and new_spec is None:
        return Rollout(NO_CHANGE)
    if old_spec is None:
        return Rollout(CREATE)
    if new_spec is None:
        return Rollout(DELETE)
    old_cluster, new_cluster = old_spec.get("rayClusterConfig") or {}, new_spec.get("rayClusterConfig") or {}
    old_hashed, new_hashed = _hashed_cluster(old_cluster), _hashed_cluster(new_cluster)
    old_groups, new_groups = old_hashed.get("workerGroupSpecs") or [], new_hashed.get("workerGroupSpecs") or []
    if len(new_groups) > len(old_groups):  # groups appended at the end are added in place
        new_hashed = {**new_hashed, "workerGroupSpecs": new_groups[: len(old_groups)]}
    cluster_paths = _differing_paths(old_hashed, new_hashed, "spec.rayClusterConfig")
    if cluster_paths:
        strategy = str(((new_spec.get("upgradeStrategy") or {}).get("type")) or "NewCluster")  # KubeRay's default
        if strategy == "None":
            return Rollout(NEW_CLUSTER, strategy, 0, True, tuple(cluster_paths))
        return Rollout(NEW_CLUSTER, strategy, _gpu_pods_at_start(new_cluster), False, tuple(cluster_paths))
    paths = _differing_paths(old_spec, new_spec, "spec")
    return Rollout(IN_PLACE, reasons=tuple(paths)) if paths else Rollout(NO_CHANGE)


def classify_resources(
    old: dict[str, dict[str, Any]], new: dict[str, dict[str, Any]]
) -> list[tuple[str, Rollout]]:
    """(name, roll-out) for every RayService in either preview's resources (urn -> record)."""
    out = []
    for urn in sorted(set(old) | set(new)):
        record = new.get(urn) or old[urn]
        if record.get("type") != RAY_SERVICE_TYPE:
            continue
        before = (old.get(urn) or {}).get("inputs", {}).get("spec") if urn in old else None
        after = (new.get(urn) or {}).get("inputs", {}).get("spec") if urn in new else None
        out.append((str(record.get("name", urn)), classify(before, after)))
    return out
