"""The `cluster` section: the EKS control plane (llm_pd_eks/cluster.py)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from ..versions import EKS_ADDON_VERSIONS, NODE_AMI_RELEASE, NODE_AMI_RELEASE_VERSIONS
from .base import Strict, ipv4_network, shown

# Kubernetes minor versions Amazon EKS has released (the EKS "Kubernetes versions" page; 1.28 was
# released on EKS in Sept 2023, 1.35 in Jan 2026, 1.36 is the page's newest example). `make
# preflight` asks EKS which of them the region still offers.
EKS_KUBERNETES_VERSIONS = tuple(f"1.{minor}" for minor in range(28, 37))
# EKS CreateCluster `name` (botocore eks model, shape ClusterName): 1-100 characters, this pattern.
EKS_CLUSTER_NAME = re.compile(r"^[0-9A-Za-z][A-Za-z0-9\-_]{0,99}$")


LogType = Literal["api", "audit", "authenticator", "controllerManager", "scheduler"]
# The retentions CloudWatch Logs accepts (PutRetentionPolicy, retentionInDays):
# https://docs.aws.amazon.com/AmazonCloudWatchLogs/latest/APIReference/API_PutRetentionPolicy.html
LogRetentionDays = Literal[
    1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653
]


class ClusterConfig(Strict):
    """The EKS control plane."""

    kubernetes_version: str = Field(
        default="1.35",
        description='EKS Kubernetes minor version, quoted (`"1.35"`); 1.35 is in standard support until 2027-03-27. '
        "The node groups follow it with the AMI release llm_pd_eks/versions.py pins for it; a change is a "
        "previewed sequence: control plane, then new node groups and the Ray cluster's cut-over onto them.",
    )
    public_access_cidrs: list[str] = Field(
        default_factory=list,
        description="CIDRs allowed to reach the public API endpoint; empty: private endpoint only.",
    )
    admin_principal_arns: list[str] = Field(
        default_factory=list,
        description="IAM role or user ARNs given cluster-admin through EKS access entries (authentication mode "
        "API), one entry each, removed by deleting the line. Name a person's or break-glass role here: the "
        "identity that creates the cluster (the deploy role) gets EKS's own bootstrap entry, which this list "
        "must not repeat (docs/cluster-access.md).",
    )
    preview_principal_arns: list[str] = Field(
        default_factory=list,
        description="IAM role or user ARNs given read-only access (AmazonEKSAdminViewPolicy, cluster scope) "
        "through EKS access entries: the preview role, so a refreshed `pulumi preview` can read the "
        "Kubernetes objects it compares (docs/cluster-access.md).",
    )
    log_types: list[LogType] = Field(
        default_factory=lambda: list[LogType](["api", "audit", "authenticator"]),
        description="Control-plane log types sent to CloudWatch Logs.",
    )
    log_retention_days: LogRetentionDays = Field(
        default=90,
        description="Retention of the control-plane log group `/aws/eks/<cluster>/cluster`, which the "
        "program creates and `destroy` deletes; a value CloudWatch Logs accepts.",
    )
    extended_support: bool = Field(
        default=False,
        description="EKS upgrade policy: false is STANDARD (the control plane is upgraded when standard "
        "support ends); true is EXTENDED (it stays on its version, billed the extended-support rate).",
    )

    @field_validator("public_access_cidrs")
    @classmethod
    def _cidrs(cls, values: list[str]) -> list[str]:
        for value in values:
            ipv4_network(value)
        return values

    @field_validator("kubernetes_version")
    @classmethod
    def _version(cls, value: str) -> str:
        if not re.fullmatch(r"1\.\d{2}", value):
            raise ValueError(f"{shown(value)} is not a Kubernetes minor version such as '1.33'")
        if value not in EKS_KUBERNETES_VERSIONS:
            raise ValueError(
                f"{value} is not a Kubernetes version Amazon EKS has released; choose one of "
                f"{', '.join(EKS_KUBERNETES_VERSIONS)}"
            )
        if value not in NODE_AMI_RELEASE_VERSIONS:
            # the node groups name their AMI release (llm_pd_eks/versions.py, the "nodes" section)
            raise ValueError(
                f"{value} has no EKS-optimized AL2023 AMI release pinned (AMI release {NODE_AMI_RELEASE} covers "
                f"{', '.join(NODE_AMI_RELEASE_VERSIONS)}); choose one of those"
            )
        if value not in EKS_ADDON_VERSIONS:
            # every EKS add-on names its version per minor (llm_pd_eks/versions.py, EKS_ADDON_VERSIONS)
            raise ValueError(
                f"{value} has no EKS add-on versions pinned (llm_pd_eks/versions.py EKS_ADDON_VERSIONS covers "
                f"{', '.join(EKS_ADDON_VERSIONS)}); choose one of those, or add the versions "
                f"`aws eks describe-addon-versions --kubernetes-version {value}` lists"
            )
        return value

    @field_validator("admin_principal_arns", "preview_principal_arns")
    @classmethod
    def _arns(cls, values: list[str]) -> list[str]:
        # An access entry names one IAM role or user; not an STS session (`assumed-role/...`: "a
        # temporary principal for each session"), and no principal in two entries (EKS API reference,
        # CreateAccessEntry principalArn; https://docs.aws.amazon.com/eks/latest/userguide/creating-access-entries.html).
        for value in values:
            if re.fullmatch(r"arn:aws[\w-]*:sts::\d{12}:assumed-role/\S+", value):
                raise ValueError(
                    f"{shown(value)} is an STS session, which EKS access entries refuse: give the role's "
                    "ARN (arn:aws:iam::<account>:role/<name>)"
                )
            if not re.fullmatch(r"arn:aws[\w-]*:iam::\d{12}:(role|user)/\S+", value):
                raise ValueError(f"{shown(value)} is not an IAM role or user ARN")
        repeated = sorted({v for v in values if values.count(v) > 1})
        if repeated:
            listed = ", ".join(shown(v) for v in repeated)
            raise ValueError(f"{listed} listed twice: EKS allows one access entry per principal")
        return values

    @model_validator(mode="after")
    def _one_entry_per_principal(self) -> "ClusterConfig":
        both = sorted(set(self.admin_principal_arns) & set(self.preview_principal_arns))
        if both:
            raise ValueError(
                f"{', '.join(shown(v) for v in both)} in both adminPrincipalArns and previewPrincipalArns: EKS "
                "allows one access entry per principal; keep it in one list"
            )
        return self
