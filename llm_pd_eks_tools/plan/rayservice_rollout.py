"""What a RayService change does when it rolls out: Serve-only in place, or a new Ray cluster.

A pure function over the old and new RayService specs (as the preview records them in
resources.json). Which cluster change KubeRay applies, ignores or needs a new cluster for is the
rule in llm_pd_eks/rollout_rule.py (KubeRay 1.7's RayService controller), the same rule the
RayService's Pulumi replaceOnChanges is built from:
- `serveConfigV2` changes are applied to the running cluster in place (no new cluster).
- Worker groups appended at the end are added in place.
- A change of only the fields KubeRay leaves out of its cluster hash (worker-group `replicas`,
  `minReplicas`, `maxReplicas`; pods' `tolerations`, `schedulingGates`) is never applied to the live
  cluster by KubeRay: with `Recreate` Pulumi replaces the RayService so it is; with `NewCluster` the
  roll-out says it will not take effect.
- A `serveService` change (the endpoint Service) never reaches the live Service through KubeRay, which
  updates that Service only when its selector switches clusters: its annotations, type and source
  ranges are patched on the live Service by server-side apply (same Service and NLB, no new cluster);
  a new name replaces the RayService (downtime; a new Service, NLB and hostname); any other field waits
  for the next cluster switch.
- Anything else needs a new cluster; how it comes is `spec.upgradeStrategy.type`: `NewCluster`
  builds a second full cluster next to the serving one and switches traffic once it is ready (no
  downtime; its worker pods need GPU nodes of their own), `None` never builds one: this program
  pairs it with a Pulumi replacement of the RayService (serving.upgradeStrategy `Recreate`: downtime,
  no extra nodes).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Optional

from llm_pd_eks.rollout_rule import (
    CLUSTER,
    ENDPOINT_PATCHED_PATHS,
    NEEDS_NEW_CLUSTER,
    SERVE_SERVICE,
    UPDATED_IN_PLACE,
    cluster_change,
    replace_on_change_paths,
)
from llm_pd_eks.rollout_rule import NOT_APPLIED as KUBERAY_NOT_APPLIED
from llm_pd_eks.rollout_rule import differing_paths as _differing_paths

RAY_SERVICE_TYPE = "kubernetes:ray.io/v1:RayService"
GPU_RESOURCE = "nvidia.com/gpu"

NO_CHANGE = "no change"
CREATE = "create"
DELETE = "delete"
IN_PLACE = "in place"
NEW_CLUSTER = "new Ray cluster"
NOT_APPLIED = "not applied"  # KubeRay ignores the change: the live cluster keeps the old values


@dataclass(frozen=True)
class Rollout:
    kind: str  # NO_CHANGE | CREATE | DELETE | IN_PLACE | NEW_CLUSTER | NOT_APPLIED
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
            patched = [r for r in self.reasons if under_any(r, list(ENDPOINT_PATCHED_PATHS))]
            if patched:
                return (
                    "RayService: applied in place (no new cluster); the endpoint Service's "
                    f"{', '.join(f'`{r}`' for r in patched)} patched on the live Service by server-side apply "
                    f"(same Service, same NLB and hostname): {what}."
                )
            return f"RayService: applied in place to the running cluster (no new cluster): {what}."
        if self.kind == NOT_APPLIED:
            return (
                "RayService: WILL NOT TAKE EFFECT on the running cluster: KubeRay leaves worker-group bounds, "
                f"tolerations and scheduling gates out of its cluster hash and never applies a change of only {what}; "
                "it takes effect with the next Ray cluster replacement (or use upgradeStrategy Recreate)."
            )
        if self.downtime and any(under_any(r, [SERVE_SERVICE]) for r in self.reasons):
            how = (
                "the RayService is replaced (a renamed endpoint would be a second Service beside the old one): "
                "its Ray cluster and the endpoint Service are deleted and made anew (a public endpoint gets a new "
                "NLB and hostname); the endpoint is down until the new cluster has loaded the model; no extra GPU "
                "nodes"
            )
        elif self.downtime:
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
    change = cluster_change(old_spec.get("rayClusterConfig") or {}, new_spec.get("rayClusterConfig") or {})
    strategy = str(((new_spec.get("upgradeStrategy") or {}).get("type")) or "NewCluster")  # KubeRay's default
    # What Pulumi does first: a replacement when a changed path is under the RayService's replaceOnChanges.
    service_paths = [p for p in _differing_paths(old_spec, new_spec, "spec") if under_any(p, [SERVE_SERVICE])]
    replaced = [p for p in (*change.paths, *service_paths) if under_any(p, replace_on_change_paths(new_spec))]
    if replaced:
        return Rollout(NEW_CLUSTER, strategy, 0, True, tuple(replaced))
    new_cluster = new_spec.get("rayClusterConfig") or {}
    if change.kind == NEEDS_NEW_CLUSTER:
        if strategy == "None":  # KubeRay never builds one, and nothing replaces the RayService
            return Rollout(NOT_APPLIED, strategy, reasons=change.paths)
        return Rollout(NEW_CLUSTER, strategy, _gpu_pods_at_start(new_cluster), False, change.paths)
    other = tuple(p for p in _differing_paths(old_spec, new_spec, "spec") if not p.startswith(CLUSTER))
    # a serveService field the patch does not carry waits for KubeRay's next cluster switch
    waiting = tuple(p for p in service_paths if not under_any(p, list(ENDPOINT_PATCHED_PATHS)))
    if change.kind == KUBERAY_NOT_APPLIED or waiting:
        return Rollout(NOT_APPLIED, strategy, reasons=change.paths + other)
    paths = (change.paths if change.kind == UPDATED_IN_PLACE else ()) + other
    return Rollout(IN_PLACE, reasons=paths) if paths else Rollout(NO_CHANGE)


def under_any(path: str, patterns: list[str]) -> bool:
    """Is spec path `path` (`a.b[1].c`) at or below one of `patterns` (Pulumi property paths, `[*]` any index)?"""
    for pattern in patterns:
        regex = re.escape(pattern).replace(r"\[\*\]", r"\[\d+\]")
        if re.match(regex + r"($|[.\[])", path):
            return True
    return False


def classify_resources(old: dict[str, dict[str, Any]], new: dict[str, dict[str, Any]]) -> list[tuple[str, Rollout]]:
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
