"""The EKS-managed core add-ons: vpc-cni, kube-proxy, coredns and the node monitoring agent.

vpc-cni is registered by the cluster (with its IRSA role, before any node group) and handed in here,
so `addons` still holds all of them. Each names the version pinned for the cluster's Kubernetes minor
(llm_pd_eks/versions.py `EKS_ADDON_VERSIONS`), so a minor upgrade moves them with the control plane.
The node monitoring agent reports the node conditions (GPU XID and NVLink errors among them) that the
GPU group's node auto repair acts on (llm_pd_eks/efa_gpu_nodes.py `NODE_REPAIR`).

Registered as `aws.eks.Addon`s (not left to pulumi-eks) so the plan shows them. EKS installs
self-managed copies when the cluster is created; `OVERWRITE` adopts those. CoreDNS only turns
healthy once nodes exist, so it waits for the system node group.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import pulumi
import pulumi_aws as aws

from .versions import eks_addon_version

CORE_ADDONS = ("vpc-cni", "kube-proxy", "coredns", "eks-node-monitoring-agent")


@dataclass(frozen=True)
class CoreAddonsArgs:
    cluster_name: str
    cluster: pulumi.Resource  # the control plane (the name above is known before it exists)
    system_nodes: pulumi.Resource  # coredns schedules onto these
    vpc_cni: aws.eks.Addon  # registered by the cluster component (its IRSA role, before the nodes)
    kubernetes_version: str  # the cluster's minor: which row of EKS_ADDON_VERSIONS the add-ons run
    tags: Optional[dict[str, str]] = None


class CoreAddons(pulumi.ComponentResource):
    addons: dict[str, aws.eks.Addon]

    def __init__(self, name: str, args: CoreAddonsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llm-pd-eks:index:CoreAddons", name, None, opts)
        self.addons = {"vpc-cni": args.vpc_cni}
        for addon in CORE_ADDONS:
            if addon in self.addons:
                continue
            after: Sequence[pulumi.Resource] = (
                [args.cluster, args.system_nodes] if addon == "coredns" else [args.cluster]
            )
            self.addons[addon] = aws.eks.Addon(
                f"{name}-{addon}",
                cluster_name=args.cluster_name,
                addon_name=addon,
                addon_version=eks_addon_version(args.kubernetes_version, addon),
                resolve_conflicts_on_create="OVERWRITE",
                resolve_conflicts_on_update="PRESERVE",
                tags=dict(args.tags or {}),
                opts=pulumi.ResourceOptions(parent=self, depends_on=list(after)),
            )
        self.register_outputs({addon: a.arn for addon, a in self.addons.items()})
