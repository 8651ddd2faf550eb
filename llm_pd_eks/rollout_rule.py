"""Which RayService change needs a new Ray cluster: the one rule the program and the preview share.

KubeRay 1.7's RayService controller (ray-operator/controllers/ray/rayservice_controller.go, tag v1.7.0)
compares the RayService's cluster spec with the running RayCluster by a hash
(utils/util.go `GenerateHashWithoutReplicasAndWorkersToDelete`, lines 645-668) that leaves out each
worker group's `replicas`, `minReplicas`, `maxReplicas`, `scaleStrategy.workersToDelete` and every
pod template's `tolerations` and `schedulingGates` (plus `suspend`, `rayClusterSpecForHashing`):
- hashes equal: `shouldUpdateCluster` returns false and the RayCluster is **not updated**: a change
  of only those fields never reaches the live cluster (the Ray autoscaler keeps the old bounds);
- equal once the goal's extra worker groups at the end are cut off (`isClusterSpecHashEqual`, partial):
  the RayCluster is updated in place (`modifyRayCluster` copies the whole spec, bounds included);
- otherwise a new cluster is needed: `NewCluster` builds one next to the serving one, `None` never
  does (this program pairs `None` with a Pulumi replacement: serving.upgradeStrategy `Recreate`).
`serveConfigV2` is applied to the running cluster in place either way.

`spec.serveService` (the endpoint Service) is not: KubeRay creates that Service once and afterwards
updates it only when its selector's `ray.io/cluster` switches to a new cluster, and then copies only
its `spec` (rayservice_controller.go `reconcileServices`, tag v1.7.0: "Only update the service if the
RayCluster switches"; `oldSvc.Spec = *newSvc.Spec.DeepCopy()`). A change of its type, ports or source
ranges waits for the next cluster switch, one of its annotations never arrives, and a new name makes
a second Service next to the old one. So the program carries the endpoint fields KubeRay never changes
on a live Service (its annotations, `type`, `loadBalancerSourceRanges`) itself, by a server-side apply
patch of the Service KubeRay made (llm_pd_eks/serve_endpoint.py `ENDPOINT_PATCHED_PATHS`): the same
Service and NLB, no new cluster. Only a new name (`spec.serveService.metadata.name`) replaces the
RayService; any other serveService change waits for the next cluster switch.

`replace_on_change_paths` (the RayService's Pulumi replaceOnChanges) and llm_pd_eks_tools/plan/rayservice_rollout.py's
classifier are both built on `cluster_change`, so they cannot disagree.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

CLUSTER = "spec.rayClusterConfig"
SERVE_SERVICE = "spec.serveService"
SERVE_SERVICE_NAME = f"{SERVE_SERVICE}.metadata.name"  # a rename: KubeRay would make a second Service
# What the program's server-side apply patch sets on the live endpoint Service (serve_endpoint.py).
ENDPOINT_PATCHED_PATHS = (
    f"{SERVE_SERVICE}.metadata.annotations",
    f"{SERVE_SERVICE}.spec.type",
    f"{SERVE_SERVICE}.spec.loadBalancerSourceRanges",
)
# Fields KubeRay's hash leaves out (util.go lines 650-664; rayservice_controller.go rayClusterSpecForHashing).
MUTED_WORKER_FIELDS = ("replicas", "minReplicas", "maxReplicas")
MUTED_POD_FIELDS = ("tolerations", "schedulingGates")
MUTED_CLUSTER_FIELDS = ("upgradeStrategy", "suspend")

SAME = "same"  # nothing in the cluster spec changed
NOT_APPLIED = "not applied"  # only fields KubeRay leaves out of its hash changed: the live cluster keeps the old ones
UPDATED_IN_PLACE = "updated in place"  # worker groups appended at the end (and bounds): KubeRay updates the RayCluster
NEEDS_NEW_CLUSTER = "needs a new cluster"


@dataclass(frozen=True)
class ClusterChange:
    kind: str  # SAME | NOT_APPLIED | UPDATED_IN_PLACE | NEEDS_NEW_CLUSTER
    paths: tuple[str, ...] = ()  # the spec paths that differ (for NEEDS_NEW_CLUSTER: the hashed ones)


def hashed_cluster(cluster: dict[str, Any]) -> dict[str, Any]:
    """The RayCluster spec as KubeRay hashes it (the muted fields removed)."""
    spec = copy.deepcopy(cluster or {})
    for key in MUTED_CLUSTER_FIELDS:
        spec.pop(key, None)
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


def differing_paths(old: Any, new: Any, path: str) -> list[str]:
    """Spec paths (`a.b[1].c`) where `old` and `new` differ, as deep as both sides are alike in shape."""
    if isinstance(old, dict) and isinstance(new, dict):
        found: list[str] = []
        for key in sorted(set(old) | set(new)):
            found += differing_paths(old.get(key), new.get(key), f"{path}.{key}")
        return found
    if isinstance(old, list) and isinstance(new, list):
        found = []
        for i, (a, b) in enumerate(zip(old, new)):
            found += differing_paths(a, b, f"{path}[{i}]")
        # elements added or removed at the end, each by its index (as Pulumi's diff names them)
        found += [f"{path}[{i}]" for i in range(min(len(old), len(new)), max(len(old), len(new)))]
        return found
    return [] if old == new else [path]


def cluster_change(old_cluster: dict[str, Any], new_cluster: dict[str, Any]) -> ClusterChange:
    """What KubeRay does with a change of the RayService's `rayClusterConfig` from old to new."""
    all_paths = tuple(differing_paths(old_cluster or {}, new_cluster or {}, CLUSTER))
    if not all_paths:
        return ClusterChange(SAME)
    old_hashed, new_hashed = hashed_cluster(old_cluster), hashed_cluster(new_cluster)
    if old_hashed == new_hashed:
        return ClusterChange(NOT_APPLIED, all_paths)
    old_groups, new_groups = old_hashed.get("workerGroupSpecs") or [], new_hashed.get("workerGroupSpecs") or []
    cut = {**new_hashed, "workerGroupSpecs": new_groups[: len(old_groups)]}
    if len(new_groups) > len(old_groups) and cut == old_hashed:
        return ClusterChange(UPDATED_IN_PLACE, all_paths)
    return ClusterChange(NEEDS_NEW_CLUSTER, tuple(differing_paths(old_hashed, new_hashed, CLUSTER)))


def replace_on_change_paths(spec: dict[str, Any]) -> list[str]:
    """Pulumi replaceOnChanges for a RayService `spec`, from the rule above.

    With KubeRay's `None` strategy (serving.upgradeStrategy `Recreate`) a change that needs a new
    cluster would never reach the pods, and one of only the muted fields (scale bounds, tolerations)
    would never reach the live cluster either: Pulumi replaces the RayService for both. A property
    path cannot tell a worker group appended at the end (which KubeRay would add in place) from one
    removed or changed, so the whole `workerGroupSpecs` list is listed: under `Recreate` any change
    of the worker groups is a replacement, and the preview (llm_pd_eks_tools/plan/rayservice_rollout.py, on these
    same paths)
    says so. With `NewCluster` KubeRay builds the new cluster itself: no cluster path is listed, and
    the preview says when a muted change will not be applied. Of `spec.serveService` only its name is
    listed, under both: the fields a user changes are patched on the live Service in place (see the
    module docstring).
    """
    if ((spec.get("upgradeStrategy") or {}).get("type")) != "None":
        return [SERVE_SERVICE_NAME]
    cluster = spec.get("rayClusterConfig") or {}
    keys = sorted(set(cluster) | {"workerGroupSpecs"})
    return [f"{CLUSTER}.{key}" for key in keys if key not in MUTED_CLUSTER_FIELDS] + [SERVE_SERVICE_NAME]
