"""Cluster Autoscaler: a pending pod that fits no node gets one, up to each node group's maxSize.

Why Cluster Autoscaler rather than Karpenter (docs/architecture.md): the GPU nodes are defined
once, as an EKS managed node group on a launch template this program registers and the policy pack
judges (one EFA interface per network card, a cluster placement group, one AZ, the capacity
reservation). Cluster Autoscaler only moves that group's desired size between min and max; every
instance still comes from the same template. Karpenter launches instances itself from an
EC2NodeClass, i.e. a second launch path with its own interface, placement-group and reservation
settings that the plan's template no longer governs.

What it needs, all built here:
- an IAM role for its service account (IRSA through the cluster's OIDC provider) with the actions
  the AWS cloud provider documents (cluster-autoscaler/cloudprovider/aws/README.md, "Full Cluster
  Autoscaler Features Policy"), the two mutating ones limited by tag to this cluster's groups;
- auto-discovery tags on both node groups (`k8s.io/cluster-autoscaler/enabled`,
  `k8s.io/cluster-autoscaler/<cluster>`), which EKS also puts on the groups' Auto Scaling groups;
- node-template tags (labels, taints, extended resources) on the Auto Scaling groups themselves:
  EKS does not copy node group tags to its ASG, and Cluster Autoscaler builds the node it would add
  from the ASG's tags (aws_manager.go `buildNodeFromTemplate`); without `nvidia.com/gpu` and
  `vpc.amazonaws.com/efa` there it could never place a Ray worker on a new GPU node.
- node groups that ignore `scalingConfig.desiredSize` (node_common.ignore_desired_size).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Mapping, Sequence

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from .catalog import CLUSTER_AUTOSCALER_IMAGE
from .cluster import irsa_trust_policy
from .config.autoscaler import NodeAutoscalerConfig
from .gpu_cutover import NODE_GROUP_LABEL
from .helm import HelmChart, pinned_release
from .system_nodes import SYSTEM_LABELS

AUTOSCALER_CHART = HelmChart("cluster-autoscaler", "https://kubernetes.github.io/autoscaler")
NAMESPACE = "kube-system"
SERVICE_ACCOUNT = "cluster-autoscaler"
TAG_PREFIX = "k8s.io/cluster-autoscaler"

# Read-only calls it makes to discover groups and instance types (Resource "*": they take no ARN).
DESCRIBE_ACTIONS = (
    "autoscaling:DescribeAutoScalingGroups",
    "autoscaling:DescribeAutoScalingInstances",
    "autoscaling:DescribeLaunchConfigurations",
    "autoscaling:DescribeScalingActivities",
    "ec2:DescribeImages",
    "ec2:DescribeInstanceTypes",
    "ec2:DescribeLaunchTemplateVersions",
    "ec2:GetInstanceTypesFromInstanceRequirements",
)
# The only calls that change anything: limited to ASGs tagged as this cluster's.
MUTATING_ACTIONS = ("autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup")


def discovery_tags(cluster_name: str) -> dict[str, str]:
    """The tags `--node-group-auto-discovery=asg:tag=...` (the chart's autoDiscovery) matches."""
    return {f"{TAG_PREFIX}/enabled": "true", f"{TAG_PREFIX}/{cluster_name}": "owned"}


def node_template_tags(template: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
    """`{labels, taints, resources}` as Cluster Autoscaler's node-template tags (value formats per its AWS README)."""
    tags = {}
    for kind, prefix in (("labels", "label"), ("taints", "taint"), ("resources", "resources")):
        for key, value in template.get(kind, {}).items():
            tags[f"{TAG_PREFIX}/node-template/{prefix}/{key}"] = value
    return tags


def autoscaler_tags(cluster_name: str, template: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
    return {**discovery_tags(cluster_name), **node_template_tags(template)}


def trust_policy(oidc_provider_arn: str, oidc_issuer: str) -> str:
    """IRSA trust: only kube-system/cluster-autoscaler's projected token, audience STS."""
    return irsa_trust_policy(oidc_provider_arn, oidc_issuer, NAMESPACE, SERVICE_ACCOUNT)


def permissions_policy(cluster_name: str, node_group_arns: Sequence[str]) -> str:
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {"Sid": "Discover", "Effect": "Allow", "Action": list(DESCRIBE_ACTIONS), "Resource": "*"},
                {
                    "Sid": "ScaleThisClustersGroups",
                    "Effect": "Allow",
                    "Action": list(MUTATING_ACTIONS),
                    "Resource": "*",
                    "Condition": {"StringEquals": {f"aws:ResourceTag/{TAG_PREFIX}/{cluster_name}": "owned"}},
                },
                # Labels and taints of a managed group at zero nodes come from DescribeNodegroup.
                {
                    "Sid": "ReadThisClustersNodeGroups",
                    "Effect": "Allow",
                    "Action": "eks:DescribeNodegroup",
                    "Resource": list(node_group_arns),
                },
            ],
        }
    )


def chart_values(cluster_name: str, region: str, image_tag: str, role_arn: pulumi.Input[str]) -> dict:
    """Values of the `cluster-autoscaler` chart (keys checked against its values.yaml in the tests)."""
    return {
        "cloudProvider": "aws",
        "awsRegion": region,
        "autoDiscovery": {"clusterName": cluster_name},
        "image": {"repository": CLUSTER_AUTOSCALER_IMAGE, "tag": image_tag},
        "rbac": {"serviceAccount": {"name": SERVICE_ACCOUNT, "annotations": {"eks.amazonaws.com/role-arn": role_arn}}},
        "nodeSelector": dict(SYSTEM_LABELS),
        "extraArgs": {
            # fewest idle GPUs after a scale-up
            "expander": "least-waste",
            # Ray pods keep /dev/shm and caches in emptyDir; without this their nodes never scale down.
            "skip-nodes-with-local-storage": "false",
            # A p5 node with 32 EFA interfaces, a 20 GiB image and the NVIDIA stack takes longer than 15 min.
            "max-node-provision-time": "30m0s",
        },
    }


@dataclass(frozen=True)
class AutoscaledGroup:
    """A managed node group and the node-template tags its Auto Scaling group must carry."""

    key: str  # short name used in resource names ("system", "gpu")
    node_group: aws.eks.NodeGroup
    template_tags: Mapping[str, str]


@dataclass(frozen=True)
class NodeAutoscalerArgs:
    """Inputs of `NodeAutoscaler`; the OIDC provider, provider and node groups come from the other components."""

    config: NodeAutoscalerConfig
    """The `nodeAutoscaler` section: the chart version and image tag."""
    cluster_name: str
    """The EKS cluster whose node groups it scales (auto-discovery and the IAM condition use it)."""
    region: str
    """The AWS region of the Auto Scaling groups."""
    image_tag: str
    """StackConfig.autoscaler_image_tag(): a `v1.<minor>.<patch>` release of the cluster's Kubernetes minor."""
    oidc_provider_arn: pulumi.Input[str]
    """The cluster's IAM OIDC provider: the trust principal of its role (IRSA)."""
    oidc_issuer: pulumi.Input[str]
    """The OIDC issuer without `https://` (the trust condition's key prefix)."""
    provider: k8s.Provider
    """The cluster's Kubernetes provider (the Helm release)."""
    groups: Sequence[AutoscaledGroup]
    """The node groups it scales, each with a key of its own; at least one."""
    depends_on: Sequence[pulumi.Resource] = ()
    """What the release waits for: the system node group it runs on, the CNI."""
    tags: dict[str, str] | None = None
    """Tags on every AWS resource."""


def check_node_autoscaler_args(args: NodeAutoscalerArgs) -> None:
    """`pulumi.InputPropertyError` naming the input the `nodeAutoscaler` section alone cannot rule out."""
    if not re.fullmatch(r"v1\.\d+\.\d+", args.image_tag):
        raise pulumi.InputPropertyError(
            "image_tag", f"{args.image_tag[:60]!r} is not a cluster-autoscaler image tag such as 'v1.35.2'"
        )
    if not args.groups:
        raise pulumi.InputPropertyError("groups", "empty; Cluster Autoscaler needs at least one node group to scale")
    keys = [g.key for g in args.groups]
    dupes = sorted({k for k in keys if keys.count(k) > 1})
    if dupes:
        raise pulumi.InputPropertyError("groups", f"key(s) {', '.join(dupes)} given twice; each names its tags")


def with_group_name(group: AutoscaledGroup) -> dict[str, pulumi.Input[str]]:
    """The group's node-template tags plus EKS's node group label with its name: the Ray pods select
    their group by it (llm_pd_eks/gpu_cutover.py). EKS sets that label on the nodes but not in the
    group's `labels`, and Cluster Autoscaler builds a node for a group with no nodes from the ASG's
    node-template tags and DescribeNodegroup's labels (kubernetes/autoscaler
    cluster-autoscaler/cloudprovider/aws/aws_manager.go `buildNodeFromTemplate`): without this tag a
    pending Ray pod of a new or scaled-to-zero group matches no template and never triggers a scale-up."""
    key = f"{TAG_PREFIX}/node-template/label/{NODE_GROUP_LABEL}"
    return {**group.template_tags, key: group.node_group.node_group_name}


def _slug(tag_key: str) -> str:
    """A resource-name-safe, stable form of a tag key (the tag key decides the name, not its position)."""
    return re.sub(r"[^a-z0-9]+", "-", tag_key.removeprefix(f"{TAG_PREFIX}/node-template/").lower()).strip("-")


def asg_name(node_group: aws.eks.NodeGroup) -> pulumi.Output[str]:
    """The Auto Scaling group EKS created for a managed node group."""

    def first_asg(resources) -> str:
        return str(resources[0].autoscaling_groups[0].name)

    return node_group.resources.apply(first_asg)


class NodeAutoscaler(pulumi.ComponentResource):
    role: aws.iam.Role
    release: k8s.helm.v3.Release
    asg_tags: list[aws.autoscaling.Tag]

    def __init__(self, name: str, args: NodeAutoscalerArgs, opts: pulumi.ResourceOptions | None = None):
        check_node_autoscaler_args(args)
        super().__init__("llm-pd-eks:index:NodeAutoscaler", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        tags = dict(args.tags or {})

        self.role = aws.iam.Role(
            f"{name}-role",
            description=f"Cluster Autoscaler of {args.cluster_name} (IRSA, {NAMESPACE}/{SERVICE_ACCOUNT})",
            assume_role_policy=pulumi.Output.all(args.oidc_provider_arn, args.oidc_issuer).apply(
                lambda a: trust_policy(a[0], a[1])
            ),
            tags=tags,
            opts=child,
        )
        aws.iam.RolePolicy(
            f"{name}-policy",
            role=self.role.id,
            policy=pulumi.Output.all(*[g.node_group.arn for g in args.groups]).apply(
                lambda arns: permissions_policy(args.cluster_name, arns)
            ),
            opts=child,
        )
        self.asg_tags = [
            aws.autoscaling.Tag(
                f"{name}-{group.key}-{_slug(key)}",
                autoscaling_group_name=asg_name(group.node_group),
                tag=aws.autoscaling.TagTagArgs(key=key, value=value, propagate_at_launch=False),
                opts=child,
            )
            for group in args.groups
            for key, value in sorted(with_group_name(group).items())
        ]
        self.release = pinned_release(
            f"{name}-release",
            AUTOSCALER_CHART,
            args.config.chart_version,
            NAMESPACE,
            chart_values(args.cluster_name, args.region, args.image_tag, self.role.arn),
            pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=list(args.depends_on)),
        )
        self.register_outputs({"roleArn": self.role.arn, "status": self.release.status})
