"""The EKS-managed core add-ons: vpc-cni, kube-proxy and coredns.

vpc-cni is registered by the cluster (with its IRSA role, before any node group) and handed in here,
so `addons` still holds all three.

Registered as `aws.eks.Addon`s (not left to pulumi-eks) so the plan shows them. EKS installs
self-managed copies when the cluster is created; `OVERWRITE` adopts those. CoreDNS only turns
healthy once nodes exist, so it waits for the system node group.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import pulumi
import pulumi_aws as aws

CORE_ADDONS = ("vpc-cni", "kube-proxy", "coredns")


@dataclass(frozen=True)
class CoreAddonsArgs:
    cluster_name: str
    cluster: pulumi.Resource  # the control plane (the name above is known before it exists)
    system_nodes: pulumi.Resource  # coredns schedules onto these
    vpc_cni: aws.eks.Addon  # registered by the cluster component (its IRSA role, before the nodes)
    versions: Optional[dict[str, str]] = None  # pin per add-on; default: EKS's default for the version
    tags: Optional[dict[str, str]] = None


class CoreAddons(pulumi.ComponentResource):
    addons: dict[str, aws.eks.Addon]

    def __init__(self, name: str, args: CoreAddonsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llm-pd-eks:index:CoreAddons", name, None, opts)
        versions = dict(args.versions or {})
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
                addon_version=versions.get(addon),
                resolve_conflicts_on_create="OVERWRITE",
                resolve_conflicts_on_update="PRESERVE",
                tags=dict(args.tags or {}),
                opts=pulumi.ResourceOptions(parent=self, depends_on=list(after)),
            )
        self.register_outputs({addon: a.arn for addon, a in self.addons.items()})
