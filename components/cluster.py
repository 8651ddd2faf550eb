"""The EKS control plane (pulumi-eks), its secrets key, the node IAM role and a Kubernetes provider."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Sequence

import pulumi
import pulumi_aws as aws
import pulumi_eks as eks
import pulumi_kubernetes as k8s

from .config import ClusterConfig

_NODE_POLICIES = {
    "worker": "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy",
    "cni": "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy",
    "ecr": "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly",
    "ssm": "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore",  # shell access without SSH keys
}
_ADMIN_POLICY = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"


@dataclass(frozen=True)
class ClusterArgs:
    config: ClusterConfig
    cluster_name: str
    vpc_id: pulumi.Input[str]
    private_subnet_ids: Sequence[pulumi.Input[str]]
    public_subnet_ids: Sequence[pulumi.Input[str]]
    protect: bool = False
    tags: dict[str, str] | None = None


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

    def __init__(self, name: str, args: ClusterArgs, opts: pulumi.ResourceOptions | None = None):
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

        access_entries = {
            f"admin-{i}": eks.AccessEntryArgs(
                principal_arn=arn,
                access_policies={
                    "cluster-admin": eks.AccessPolicyAssociationArgs(
                        policy_arn=_ADMIN_POLICY,
                        access_scope=aws.eks.AccessPolicyAssociationAccessScopeArgs(type="cluster"),
                    )
                },
            )
            for i, arn in enumerate(cfg.admin_principal_arns)
        }

        self.eks = eks.Cluster(
            f"{name}-eks",
            name=args.cluster_name,
            version=cfg.kubernetes_version,
            vpc_id=args.vpc_id,
            private_subnet_ids=list(args.private_subnet_ids),
            public_subnet_ids=list(args.public_subnet_ids),
            node_associate_public_ip_address=False,
            skip_default_node_group=True,
            create_oidc_provider=True,  # IRSA for add-ons and workloads instead of node credentials
            authentication_mode=eks.AuthenticationMode.API,
            access_entries=access_entries,
            endpoint_private_access=True,
            endpoint_public_access=bool(cfg.public_access_cidrs),
            public_access_cidrs=list(cfg.public_access_cidrs) or None,
            encryption_config_key_arn=secrets_key.arn,
            enabled_cluster_log_types=list(cfg.log_types),
            # The three core add-ons are EKS-managed `aws.eks.Addon`s registered by CoreAddons,
            # visible in the plan; pulumi-eks must not install its own copies.
            use_default_vpc_cni=True,
            coredns_addon_options=eks.CoreDnsAddonOptionsArgs(enabled=False),
            kube_proxy_addon_options=eks.KubeProxyAddonOptionsArgs(enabled=False),
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self, protect=args.protect),
        )

        self.provider = k8s.Provider(
            f"{name}-k8s",
            kubeconfig=self.eks.kubeconfig_json,
            enable_server_side_apply=True,
            opts=child,
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

        Not pulumi-eks's `cluster_security_group_id`: that is pulumi-eks's own extra control-plane
        group (created unless `skipDefaultSecurityGroups`), which admits 443 only from pulumi-eks's
        node security group. EKS attaches *this* group to the control-plane ENIs and to managed nodes
        whose launch template names no security group; it allows all traffic among its members.
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
