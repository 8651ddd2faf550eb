"""Storage that survives a reschedule: the EBS CSI driver (EKS managed add-on, its own IRSA role) and
an encrypted gp3 StorageClass, topology-bound to the system nodes' availability zones.

- The add-on `aws-ebs-csi-driver` runs its controller as `kube-system/ebs-csi-controller-sa`; that
  service account assumes an IAM role with the AWS managed policy `AmazonEBSCSIDriverPolicy`
  (AWS docs, "Amazon EBS CSI driver" add-on, "Required IAM permissions",
  https://docs.aws.amazon.com/eks/latest/userguide/add-ons-aws-ebs-csi-driver.html). The node role
  does not get it.
- The StorageClass provisions through `ebs.csi.aws.com` with `WaitForFirstConsumer`: the volume is
  created in the AZ of the node the pod is scheduled to, and `allowedTopologies` limits that to the
  AZs of the system nodes (the GPU-free ones that run Prometheus, Grafana and Alertmanager). The
  topology key is the one the driver reports, `topology.ebs.csi.aws.com/zone`
  (kubernetes-sigs/aws-ebs-csi-driver tests/e2e-kubernetes/manifests.yaml, `TopologyKeys`).
- Prometheus's volume is sized from retention and scrape load (`prometheus_volume_gib`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from .cluster import irsa_trust_policy

EBS_CSI_ADDON = "aws-ebs-csi-driver"
EBS_CSI_NAMESPACE = "kube-system"
EBS_CSI_SERVICE_ACCOUNT = "ebs-csi-controller-sa"
EBS_CSI_POLICY_ARN = "arn:aws:iam::aws:policy/service-role/AmazonEBSCSIDriverPolicy"
EBS_CSI_PROVISIONER = "ebs.csi.aws.com"
EBS_TOPOLOGY_KEY = "topology.ebs.csi.aws.com/zone"
STORAGE_CLASS = "gp3"

# Prometheus docs, "Storage" / "Operational aspects": "needed_disk_space = retention_time_seconds *
# ingested_samples_per_second * bytes_per_sample", and "Prometheus stores an average of only 1-2 bytes
# per sample" (https://prometheus.io/docs/prometheus/latest/storage/). The upper figure is used.
BYTES_PER_SAMPLE = 2.0
# Head block, WAL and compaction need room beyond the blocks; retentionSize keeps the blocks under
# the volume (the docs advise a retention size below the disk, as the WAL is not counted).
VOLUME_HEADROOM = 1.3
RETENTION_SIZE_FRACTION = 0.8

_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def duration_seconds(text: str) -> int:
    """A Prometheus duration of one unit (`15d`, `15s`) in seconds."""
    match = re.fullmatch(r"(\d+)([smhdw])", text)
    if match is None:
        raise ValueError(f"{text!r} is not a duration such as 15d or 30s")
    return int(match.group(1)) * _UNIT_SECONDS[match.group(2)]


@dataclass(frozen=True)
class PrometheusVolume:
    samples_per_second: float
    gib: int  # the volume to request
    retention_size: str  # prometheusSpec.retentionSize


def prometheus_volume(active_series: int, scrape_interval: str, retention: str) -> PrometheusVolume:
    """samples/s (active series / scrape interval) x bytes per sample x retention, plus headroom."""
    rate = active_series / duration_seconds(scrape_interval)
    needed = rate * BYTES_PER_SAMPLE * duration_seconds(retention)
    gib = max(10, math.ceil(needed * VOLUME_HEADROOM / 2**30))
    return PrometheusVolume(rate, gib, f"{math.floor(gib * RETENTION_SIZE_FRACTION)}GB")


def storage_class_spec(zones: Sequence[str], tags: Optional[dict[str, str]] = None) -> dict[str, Any]:
    """The gp3 StorageClass's fields (besides metadata), as registered. The stack's tags go on every
    volume the CSI driver creates (aws-ebs-csi-driver StorageClass parameters `tagSpecification_<n>`,
    `key=value`): the cost audit's Cost Explorer filter counts only tagged spend."""
    tag_parameters = {f"tagSpecification_{n}": f"{k}={v}" for n, (k, v) in enumerate(sorted((tags or {}).items()), 1)}
    return {
        "provisioner": EBS_CSI_PROVISIONER,
        "parameters": {"type": "gp3", "encrypted": "true", **tag_parameters},
        "reclaim_policy": "Retain",  # the metrics outlive a mistaken `helm uninstall`
        "volume_binding_mode": "WaitForFirstConsumer",
        "allow_volume_expansion": True,
        "allowed_topologies": [{"match_label_expressions": [{"key": EBS_TOPOLOGY_KEY, "values": sorted(zones)}]}],
    }


@dataclass(frozen=True)
class EbsStorageArgs:
    """Inputs of `EbsStorage`; the control plane, OIDC provider and provider come from `Cluster`."""

    cluster_name: str
    """The EKS cluster the add-on is installed in."""
    cluster: pulumi.Resource
    """The control plane (the add-on needs it)."""
    oidc_provider_arn: pulumi.Input[str]
    """The cluster's IAM OIDC provider: the trust principal of the controller's role (IRSA)."""
    oidc_issuer: pulumi.Input[str]
    """The OIDC issuer without `https://` (the trust condition's key prefix)."""
    provider: k8s.Provider
    """The cluster's Kubernetes provider (the StorageClass)."""
    zones: Sequence[str]
    """The system nodes' availability zones, the StorageClass's allowed topologies; at least one."""
    system_nodes: pulumi.Resource
    """The system node group: the controller schedules onto it."""
    addon_version: Optional[str] = None
    """The add-on's version; default: EKS's default for the Kubernetes version."""
    tags: dict[str, str] = field(default_factory=dict)
    """Tags on every AWS resource."""


def check_ebs_storage_args(args: EbsStorageArgs) -> None:
    """`pulumi.InputPropertyError` naming the input no config section rules out."""
    if not args.zones:
        raise pulumi.InputPropertyError("zones", "empty; a StorageClass topology-bound to no zone never provisions")
    dupes = sorted({z for z in args.zones if list(args.zones).count(z) > 1})
    if dupes:
        raise pulumi.InputPropertyError("zones", f"listed twice: {', '.join(dupes)}")


class EbsStorage(pulumi.ComponentResource):
    role: aws.iam.Role
    addon: aws.eks.Addon
    storage_class: k8s.storage.v1.StorageClass

    def __init__(self, name: str, args: EbsStorageArgs, opts: pulumi.ResourceOptions | None = None):
        check_ebs_storage_args(args)
        super().__init__("llm-pd-eks:index:EbsStorage", name, None, opts)
        self.role = aws.iam.Role(
            f"{name}-ebs-csi-role",
            description=f"EBS CSI controller of {args.cluster_name} (IRSA, "
            f"{EBS_CSI_NAMESPACE}/{EBS_CSI_SERVICE_ACCOUNT})",
            assume_role_policy=pulumi.Output.all(args.oidc_provider_arn, args.oidc_issuer).apply(
                lambda a: irsa_trust_policy(a[0], a[1], EBS_CSI_NAMESPACE, EBS_CSI_SERVICE_ACCOUNT)
            ),
            tags=dict(args.tags),
            opts=pulumi.ResourceOptions(parent=self),
        )
        attachment = aws.iam.RolePolicyAttachment(
            f"{name}-ebs-csi-policy",
            role=self.role.name,
            policy_arn=EBS_CSI_POLICY_ARN,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.addon = aws.eks.Addon(
            f"{name}-{EBS_CSI_ADDON}",
            cluster_name=args.cluster_name,
            addon_name=EBS_CSI_ADDON,
            addon_version=args.addon_version,
            service_account_role_arn=self.role.arn,
            resolve_conflicts_on_create="OVERWRITE",
            resolve_conflicts_on_update="PRESERVE",
            tags=dict(args.tags),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[args.cluster, args.system_nodes, attachment]),
        )
        spec = storage_class_spec(args.zones, dict(args.tags))
        self.storage_class = k8s.storage.v1.StorageClass(
            f"{name}-{STORAGE_CLASS}",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=STORAGE_CLASS),
            provisioner=spec["provisioner"],
            parameters=spec["parameters"],
            reclaim_policy=spec["reclaim_policy"],
            volume_binding_mode=spec["volume_binding_mode"],
            allow_volume_expansion=spec["allow_volume_expansion"],
            allowed_topologies=[
                k8s.core.v1.TopologySelectorTermArgs(
                    match_label_expressions=[
                        k8s.core.v1.TopologySelectorLabelRequirementArgs(key=e["key"], values=e["values"])
                        for e in term["match_label_expressions"]
                    ]
                )
                for term in spec["allowed_topologies"]
            ],
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[self.addon]),
        )
        self.register_outputs({"roleArn": self.role.arn, "storageClass": STORAGE_CLASS})
