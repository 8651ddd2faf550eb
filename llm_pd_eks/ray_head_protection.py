"""The Ray head survives its node: nothing voluntary evicts it, and with GCS fault tolerance a restart
keeps the cluster (llm_pd_eks/gcs_store.py).

- Cluster Autoscaler never removes a node that runs a pod annotated
  `cluster-autoscaler.kubernetes.io/safe-to-evict: "false"` (kubernetes/autoscaler
  cluster-autoscaler/FAQ.md, "What types of pods can prevent CA from removing a node?", tag
  cluster-autoscaler-1.35.2): a scale-down of the system group never takes the head's node.
- A PodDisruptionBudget with `minAvailable: 1` over the head pods: a drain through the eviction API
  (a managed node-group update, `kubectl drain`) refuses to evict the only head. A planned system node
  change replaces the system group; the head selects system nodes by role, not that group's name
  (llm_pd_eks/ray_head_pod.py), so it stays until EKS deletes the old group at the end of `up` and
  then restarts on a new system node; while a GPU change runs two Ray clusters, two heads match the budget.
  KubeRay labels the head pod `ray.io/node-type: head` (ray-project/kuberay v1.7.0
  ray-operator/controllers/ray/utils/constant.go `RayNodeTypeLabelKey`).
What neither covers (a node failure, EKS deleting a node group whatever the budgets say) is what
`serving.gcsFaultTolerance` is for.
"""

from __future__ import annotations

import copy
from typing import Any, Optional

import pulumi
import pulumi_kubernetes as k8s

from .gcs_store import gcs_tls_env

SAFE_TO_EVICT = {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}
HEAD_NODE_TYPE_LABEL = {"ray.io/node-type": "head"}


def protect_head(spec: dict[str, Any], gcs_fault_tolerance: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """The RayService spec with the head's pod annotated safe-to-evict false and, when given, the
    RayCluster's `gcsFaultToleranceOptions` (gcs_store.gcs_fault_tolerance_options) and the head's TLS
    trust for the store (gcs_store.gcs_tls_env)."""
    out = copy.copy(spec)
    cluster = out["rayClusterConfig"] = dict(spec["rayClusterConfig"])
    head = cluster["headGroupSpec"] = dict(cluster["headGroupSpec"])
    template = head["template"] = dict(head["template"])
    metadata = template["metadata"] = dict(template.get("metadata") or {})
    metadata["annotations"] = {**(metadata.get("annotations") or {}), **SAFE_TO_EVICT}
    if gcs_fault_tolerance is not None:
        cluster["gcsFaultToleranceOptions"] = gcs_fault_tolerance
        # the GCS verifies the store's TLS certificate against the image's CA bundle (gcs_store.py)
        spec_ = template["spec"] = dict(template["spec"])
        spec_["containers"] = [
            {**c, "env": [*(c.get("env") or []), *gcs_tls_env()]} if i == 0 else c
            for i, c in enumerate(spec_["containers"])
        ]
    return out


def head_disruption_budget_spec(app_labels: dict[str, str]) -> k8s.policy.v1.PodDisruptionBudgetSpecArgs:
    """At least one head pod of this RayService stays through any voluntary eviction."""
    return k8s.policy.v1.PodDisruptionBudgetSpecArgs(
        min_available=1,
        selector=k8s.meta.v1.LabelSelectorArgs(match_labels={**app_labels, **HEAD_NODE_TYPE_LABEL}),
    )


def head_disruption_budget(
    name: str, budget_name: str, namespace: pulumi.Input[str], app_labels: dict[str, str], opts: pulumi.ResourceOptions
) -> k8s.policy.v1.PodDisruptionBudget:
    return k8s.policy.v1.PodDisruptionBudget(
        f"{name}-head-pdb",
        metadata=k8s.meta.v1.ObjectMetaArgs(name=budget_name, namespace=namespace),
        spec=head_disruption_budget_spec(app_labels),
        opts=opts,
    )
