"""The EKS control plane (pulumi-eks), its secrets key, the node IAM role and a Kubernetes provider."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Sequence

import pulumi
import pulumi_aws as aws
import pulumi_eks as eks
import pulumi_kubernetes as k8s

from .config.base import shown
from .config.cluster import EKS_CLUSTER_NAME, ClusterConfig
from .versions import eks_addon_version

# No AmazonEKS_CNI_Policy here: the VPC CNI gets it through its own IRSA role below, so no pod that
# reaches the node's credentials can assign ENIs and addresses
# (https://docs.aws.amazon.com/eks/latest/userguide/cni-iam-role.html).
_NODE_POLICIES = {
    "worker": "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy",
    "ecr": "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly",
    "ssm": "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore",  # shell access without SSH keys
}
CNI_POLICY = "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy"
# The VPC CNI's DaemonSet runs as kube-system/aws-node (the add-on's service account).
CNI_SERVICE_ACCOUNT = ("kube-system", "aws-node")
_ADMIN_POLICY = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"
# Read-only, Secrets included: a refreshed preview reads every object the stack manages, the
# program's own Secrets among them (AmazonEKSViewPolicy cannot read Secrets;
# https://docs.aws.amazon.com/eks/latest/userguide/access-policy-permissions.html).
PREVIEW_POLICY = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSAdminViewPolicy"


def control_plane_log_group(cluster_name: str) -> str:
    """The log group EKS sends control-plane logs to; created by EKS with no retention (kept forever,
    and kept after the cluster is deleted) unless it exists already
    (https://docs.aws.amazon.com/eks/latest/userguide/control-plane-logs.html)."""
    return f"/aws/eks/{cluster_name}/cluster"


def irsa_trust_policy(oidc_provider_arn: str, oidc_issuer: str, namespace: str, service_account: str) -> str:
    """IRSA trust: only `namespace/service_account`'s projected token, audience STS."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Principal": {"Federated": oidc_provider_arn},
                    "Action": "sts:AssumeRoleWithWebIdentity",
                    "Condition": {
                        "StringEquals": {
                            f"{oidc_issuer}:sub": f"system:serviceaccount:{namespace}:{service_account}",
                            f"{oidc_issuer}:aud": "sts.amazonaws.com",
                        }
                    },
                }
            ],
        }
    )


@dataclass(frozen=True)
class ClusterArgs:
    """Inputs of `Cluster`; the ids come from `Network` (outputs until the VPC exists)."""

    config: ClusterConfig
    """The `cluster` section: Kubernetes version, endpoint access, admins, control-plane logs."""
    cluster_name: str
    """The EKS cluster's name (known up front: node groups, tags and the log group are named after it)."""
    vpc_id: pulumi.Input[str]
    """The VPC the control plane's ENIs are placed in."""
    private_subnet_ids: Sequence[pulumi.Input[str]]
    """The private subnets, one per availability zone; EKS needs subnets in at least two. The control
    plane's ENIs go only here (internet-facing load balancers find the public subnets by their tags)."""
    protect: bool = False
    """protect=True on the control plane, so `pulumi destroy` must be a deliberate act."""
    tags: dict[str, str] | None = None
    """Tags on every resource."""
    network_egress: Sequence[pulumi.Resource] = ()
    """The VPC's routes out (`Network.egress`): every Kubernetes object goes through the provider below,
    so depending on them there makes `destroy` remove the RayService's NLB before the IGW and NAT."""


def check_cluster_args(args: ClusterArgs) -> None:
    """`pulumi.InputPropertyError` naming the input the `cluster` section alone cannot rule out."""
    if not EKS_CLUSTER_NAME.match(args.cluster_name):
        raise pulumi.InputPropertyError(
            "cluster_name",
            f"{shown(args.cluster_name, 60)} is not an EKS cluster name (letters, digits, '-' and '_', at most 100)",
        )
    if len(args.private_subnet_ids) < 2:
        raise pulumi.InputPropertyError(
            "private_subnet_ids",
            f"{len(args.private_subnet_ids)} given; EKS needs subnets in at least two availability zones",
        )


def access_entry_key(principal_arn: str) -> str:
    """The access entry's key for a principal: its account and name from the ARN, letters, digits and
    '-' only, plus 6 hex digits of the whole ARN so two ARNs never share a key."""
    parts = principal_arn.split(":", 5)  # arn:partition:iam::account:role/name (config checks the shape)
    account, resource = (parts[4], parts[5]) if len(parts) == 6 else ("", principal_arn)
    readable = re.sub(r"[^A-Za-z0-9]+", "-", f"{account}-{resource}").strip("-")
    return f"{readable[:80]}-{hashlib.sha256(principal_arn.encode()).hexdigest()[:6]}"


class Cluster(pulumi.ComponentResource):
    """EKS with OIDC, API authentication with access entries, KMS-encrypted secrets, no node group.

    Core add-ons are managed by `CoreAddons` (coredns needs nodes first), node groups by their own
    components; both take `cluster_name` and the `node_role` from here.
    """

    eks: eks.Cluster
    node_role: aws.iam.Role
    node_policies: list[aws.iam.RolePolicyAttachment]
    provider: k8s.Provider
    cluster_name: str
    cni_role: aws.iam.Role
    cni_policy: aws.iam.RolePolicyAttachment
    vpc_cni: aws.eks.Addon
    log_group: aws.cloudwatch.LogGroup | None

    def __init__(self, name: str, args: ClusterArgs, opts: pulumi.ResourceOptions | None = None):
        check_cluster_args(args)
        super().__init__("llm-pd-eks:index:Cluster", name, None, opts)
        cfg = args.config
        tags = dict(args.tags or {})
        child = pulumi.ResourceOptions(parent=self)
        self.cluster_name = args.cluster_name

        secrets_key = aws.kms.Key(
            f"{name}-secrets",
            description=f"Envelope encryption of Kubernetes secrets in {args.cluster_name}",
            enable_key_rotation=True,
            deletion_window_in_days=30,
            tags=tags,
            opts=child,
        )

        self.node_role = aws.iam.Role(
            f"{name}-node-role",
            assume_role_policy=json.dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [
                        {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}
                    ],
                }
            ),
            tags=tags,
            opts=child,
        )
        # Node groups must wait for these: a node without them never joins (no data flow says so).
        self.node_policies = [
            aws.iam.RolePolicyAttachment(f"{name}-node-{key}", role=self.node_role.name, policy_arn=arn, opts=child)
            for key, arn in _NODE_POLICIES.items()
        ]

        # Keyed by principal: the key names pulumi-eks's AccessEntry resource, so removing one admin
        # leaves the others' entries alone (an index would shift and replace every later entry).
        # The identity that creates the cluster (the deploy role) also gets EKS's bootstrap entry:
        # pulumi-eks sets `bootstrapClusterCreatorAdminPermissions: true` whenever authentication
        # mode is given (v4.3.0 nodejs/eks/cluster/cluster.ts), and `up` needs it to apply the
        # Kubernetes objects. These entries are the admins besides it, each removable on its own.
        access_entries = {
            access_entry_key(arn): eks.AccessEntryArgs(
                principal_arn=arn,
                access_policies={
                    key: eks.AccessPolicyAssociationArgs(
                        policy_arn=policy,
                        access_scope=aws.eks.AccessPolicyAssociationAccessScopeArgs(type="cluster"),
                    )
                },
            )
            for arns, key, policy in (
                (cfg.admin_principal_arns, "cluster-admin", _ADMIN_POLICY),
                (cfg.preview_principal_arns, "read-only", PREVIEW_POLICY),
            )
            for arn in arns
        }

        # Created before the cluster, so EKS writes into it instead of creating a group that never
        # expires and outlives the stack; `pulumi destroy` deletes it after the cluster.
        self.log_group = None
        if cfg.log_types:
            self.log_group = aws.cloudwatch.LogGroup(
                f"{name}-control-plane-logs",
                name=control_plane_log_group(args.cluster_name),
                retention_in_days=cfg.log_retention_days,
                tags=tags,
                opts=child,
            )

        self.eks = eks.Cluster(
            f"{name}-eks",
            name=args.cluster_name,
            version=cfg.kubernetes_version,
            vpc_id=args.vpc_id,
            # Private subnets only: EKS places the control plane's ENIs in the subnets given here and
            # recommends private ones; public load balancers need none of them, only subnets tagged
            # kubernetes.io/role/elb (https://docs.aws.amazon.com/eks/latest/userguide/network-reqs.html).
            # pulumi-eks gives the inner cluster public + private when both are passed.
            private_subnet_ids=list(args.private_subnet_ids),
            # Kept (EKS's default, said here on purpose): EKS installs its self-managed vpc-cni,
            # kube-proxy and coredns with the cluster, so the first nodes' aws-node reaches the API
            # through kube-proxy before CoreAddons' managed kube-proxy exists; the managed add-ons
            # adopt them (resolve_conflicts_on_create OVERWRITE). Create-time only (pulumi-eks ignores
            # later changes).
            bootstrap_self_managed_addons=True,
            node_associate_public_ip_address=False,
            skip_default_node_group=True,
            # No `service_role`: pulumi-eks's own (eks:index:ServiceRole: a role EKS may assume with
            # AmazonEKSClusterPolicy only) is created inside the component, which orders its inner
            # aws.eks.Cluster after the policy attachment; a role passed in from here could not get
            # that order, since dependsOn on a remote component need not reach its children
            # (pulumi/pulumi#8721). The pack judges the ServiceRole by its two children.
            # pulumi-eks's own cluster and node security groups serve only its own node groups, and this
            # program makes none: every node here uses the group EKS creates (`security_group_id`).
            # Skipped, pulumi-eks's clusterSecurityGroupId/nodeSecurityGroupId outputs are that group
            # (pulumi/pulumi-eks v4.3.0 nodejs/eks/cluster/cluster.ts: `core.clusterSecurityGroup?.id ??
            # core.cluster.vpcConfig.clusterSecurityGroupId`).
            skip_default_security_groups=True,
            create_oidc_provider=True,  # IRSA for add-ons and workloads instead of node credentials
            authentication_mode=eks.AuthenticationMode.API,
            access_entries=access_entries,
            endpoint_private_access=True,
            endpoint_public_access=bool(cfg.public_access_cidrs),
            public_access_cidrs=list(cfg.public_access_cidrs) or None,
            encryption_config_key_arn=secrets_key.arn,
            enabled_cluster_log_types=list(cfg.log_types),
            # EXTENDED (the EKS default for a new cluster) bills extended support automatically once
            # the version leaves standard support; STANDARD upgrades the control plane instead
            # (https://docs.aws.amazon.com/eks/latest/userguide/view-upgrade-policy.html).
            upgrade_policy=aws.eks.ClusterUpgradePolicyArgs(
                support_type="EXTENDED" if cfg.extended_support else "STANDARD"
            ),
            # The three core add-ons are EKS-managed `aws.eks.Addon`s registered by CoreAddons,
            # visible in the plan; pulumi-eks must not install its own copies.
            use_default_vpc_cni=True,
            coredns_addon_options=eks.CoreDnsAddonOptionsArgs(enabled=False),
            kube_proxy_addon_options=eks.KubeProxyAddonOptionsArgs(enabled=False),
            tags=tags,
            # The log group's name as a tag of the control plane: a data dependency its inner
            # aws.eks.Cluster waits for (dependsOn on a component need not reach its children, pulumi/pulumi#8721).
            cluster_tags={**tags, "control-plane-log-group": self.log_group.name} if self.log_group else None,
            opts=pulumi.ResourceOptions(
                parent=self, protect=args.protect, depends_on=[self.log_group] if self.log_group else None
            ),
        )

        # The VPC CNI add-on with its own IRSA role. Registered here, not with the other core add-ons:
        # the node groups wait for it, so no node's aws-node pod starts without the role (the order
        # terraform-aws-eks calls `before_compute` for vpc-cni).
        namespace, service_account = CNI_SERVICE_ACCOUNT
        self.cni_role = aws.iam.Role(
            f"{name}-vpc-cni-role",
            description=f"VPC CNI of {args.cluster_name} (IRSA, {namespace}/{service_account})",
            assume_role_policy=pulumi.Output.all(self.eks.oidc_provider_arn, self.eks.oidc_issuer).apply(
                lambda a: irsa_trust_policy(a[0], a[1], namespace, service_account)
            ),
            tags=tags,
            opts=child,
        )
        self.cni_policy = aws.iam.RolePolicyAttachment(
            f"{name}-vpc-cni-policy", role=self.cni_role.name, policy_arn=CNI_POLICY, opts=child
        )
        self.vpc_cni = aws.eks.Addon(
            f"{name}-vpc-cni",
            cluster_name=args.cluster_name,
            addon_name="vpc-cni",
            addon_version=eks_addon_version(cfg.kubernetes_version, "vpc-cni"),  # pinned per minor
            service_account_role_arn=self.cni_role.arn,
            # EKS installs a self-managed copy with the cluster; OVERWRITE adopts it.
            resolve_conflicts_on_create="OVERWRITE",
            resolve_conflicts_on_update="PRESERVE",
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.eks, self.cni_policy]),
        )

        self.provider = k8s.Provider(
            f"{name}-k8s",
            kubeconfig=self.eks.kubeconfig_json,
            enable_server_side_apply=True,
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.network_egress)),
        )

        self.register_outputs(
            {
                "clusterName": args.cluster_name,
                "kubeconfig": self.kubeconfig,
                "oidcProviderArn": self.eks.oidc_provider_arn,
                "clusterSecurityGroupId": self.security_group_id,
            }
        )

    @property
    def kubeconfig(self) -> pulumi.Output[str]:
        """The kubeconfig as a secret: it names the endpoint and how to get a token."""
        return pulumi.Output.secret(self.eks.kubeconfig_json)

    @property
    def security_group_id(self) -> pulumi.Output[str]:
        """The security group EKS creates for the cluster (`vpcConfig.clusterSecurityGroupId`).

        Not pulumi-eks's own extra control-plane group, which admits 443 only from pulumi-eks's node
        security group: `skip_default_security_groups` keeps pulumi-eks from creating either. EKS
        attaches *this* group to the control-plane ENIs and to managed nodes whose launch template
        names no security group; it allows all traffic among its members.
        A launch template with its own network interfaces replaces that automatic attachment, so
        such nodes must list this group themselves or the kubelet never reaches the API server
        (https://docs.aws.amazon.com/eks/latest/userguide/sec-group-reqs.html). pulumi-eks's own EFA
        node path and terraform-aws-eks (`cluster_primary_security_group_id`) use the same group.
        """
        return self.eks.eks_cluster.apply(lambda c: c.vpc_config.cluster_security_group_id)

    @property
    def oidc_provider_arn(self) -> pulumi.Output[str]:
        """The IAM OIDC provider of the cluster (IRSA: the trust principal of service-account roles)."""
        return self.eks.oidc_provider_arn

    @property
    def oidc_issuer(self) -> pulumi.Output[str]:
        """The OIDC issuer without `https://`: the prefix of the `:sub`/`:aud` condition keys of IRSA trust."""
        return self.eks.oidc_issuer
