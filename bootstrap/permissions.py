"""Least-privilege IAM for the deploy, preview and review roles, derived from what the main program creates.

TYPE_ACTIONS names, for every AWS resource type the main program's plans hold (and the children
pulumi-eks's `eks:index:Cluster` registers through the engine), the API actions the AWS provider
calls to create, read, update, tag and delete it (terraform-provider-aws's resource CRUD functions
under internal/service/<service>/, which pulumi-aws bridges). tests/stack/test_bootstrap.py keeps the keys
equal to the types of the recorded plans: a new resource type in the program fails that test until
its actions are named here. TOOL_ACTIONS are the calls the deploy job's own tools make (preflight,
`make verify`'s token, the alert-delivery gate); the same test reads them from the tools' boto3 calls.

The preview role gets only the read actions (Describe*, Get*, List*) of the same table; the review
role the deploy set, limited to the review stacks' region.
"""

from __future__ import annotations

import json
from typing import Any, Iterable

_TAGS_EC2 = ("ec2:CreateTags", "ec2:DeleteTags", "ec2:DescribeTags")

TYPE_ACTIONS: dict[str, tuple[str, ...]] = {
    "aws:autoscaling/tag:Tag": ("autoscaling:CreateOrUpdateTags", "autoscaling:DeleteTags", "autoscaling:DescribeTags"),
    "aws:cloudwatch/logGroup:LogGroup": (
        "logs:CreateLogGroup",
        "logs:DeleteLogGroup",
        "logs:DescribeLogGroups",
        "logs:PutRetentionPolicy",
        "logs:DeleteRetentionPolicy",
        "logs:ListTagsForResource",
        "logs:TagResource",
        "logs:UntagResource",
    ),
    "aws:ec2/eip:Eip": ("ec2:AllocateAddress", "ec2:ReleaseAddress", "ec2:DescribeAddresses", *_TAGS_EC2),
    "aws:ec2/internetGateway:InternetGateway": (
        "ec2:CreateInternetGateway",
        "ec2:DeleteInternetGateway",
        "ec2:AttachInternetGateway",
        "ec2:DetachInternetGateway",
        "ec2:DescribeInternetGateways",
        *_TAGS_EC2,
    ),
    "aws:ec2/launchTemplate:LaunchTemplate": (
        "ec2:CreateLaunchTemplate",
        "ec2:CreateLaunchTemplateVersion",
        "ec2:ModifyLaunchTemplate",
        "ec2:DeleteLaunchTemplate",
        "ec2:DescribeLaunchTemplates",
        "ec2:DescribeLaunchTemplateVersions",
        *_TAGS_EC2,
    ),
    "aws:ec2/natGateway:NatGateway": (
        "ec2:CreateNatGateway",
        "ec2:DeleteNatGateway",
        "ec2:DescribeNatGateways",
        *_TAGS_EC2,
    ),
    "aws:ec2/placementGroup:PlacementGroup": (
        "ec2:CreatePlacementGroup",
        "ec2:DeletePlacementGroup",
        "ec2:DescribePlacementGroups",
        *_TAGS_EC2,
    ),
    "aws:ec2/routeTable:RouteTable": (
        "ec2:CreateRouteTable",
        "ec2:DeleteRouteTable",
        "ec2:DescribeRouteTables",
        "ec2:CreateRoute",
        "ec2:ReplaceRoute",
        "ec2:DeleteRoute",
        *_TAGS_EC2,
    ),
    "aws:ec2/routeTableAssociation:RouteTableAssociation": (
        "ec2:AssociateRouteTable",
        "ec2:DisassociateRouteTable",
        "ec2:ReplaceRouteTableAssociation",
        "ec2:DescribeRouteTables",
    ),
    "aws:ec2/securityGroup:SecurityGroup": (
        "ec2:CreateSecurityGroup",
        "ec2:DeleteSecurityGroup",
        "ec2:DescribeSecurityGroups",
        "ec2:DescribeSecurityGroupRules",
        "ec2:AuthorizeSecurityGroupIngress",
        "ec2:AuthorizeSecurityGroupEgress",
        "ec2:RevokeSecurityGroupIngress",
        "ec2:RevokeSecurityGroupEgress",
        "ec2:DescribeNetworkInterfaces",
        *_TAGS_EC2,
    ),
    "aws:ec2/subnet:Subnet": (
        "ec2:CreateSubnet",
        "ec2:DeleteSubnet",
        "ec2:DescribeSubnets",
        "ec2:ModifySubnetAttribute",
        *_TAGS_EC2,
    ),
    "aws:ec2/vpc:Vpc": (
        "ec2:CreateVpc",
        "ec2:DeleteVpc",
        "ec2:DescribeVpcs",
        "ec2:DescribeVpcAttribute",
        "ec2:ModifyVpcAttribute",
        "ec2:DescribeNetworkAcls",
        *_TAGS_EC2,
    ),
    "aws:ec2/vpcEndpoint:VpcEndpoint": (
        "ec2:CreateVpcEndpoint",
        "ec2:ModifyVpcEndpoint",
        "ec2:DeleteVpcEndpoints",
        "ec2:DescribeVpcEndpoints",
        "ec2:DescribeVpcEndpointServices",
        "ec2:DescribePrefixLists",
        *_TAGS_EC2,
    ),
    "aws:eks/addon:Addon": (
        "eks:CreateAddon",
        "eks:UpdateAddon",
        "eks:DeleteAddon",
        "eks:DescribeAddon",
        "eks:DescribeAddonVersions",
        "eks:TagResource",
        "eks:UntagResource",
    ),
    "aws:eks/nodeGroup:NodeGroup": (
        "eks:CreateNodegroup",
        "eks:UpdateNodegroupConfig",
        "eks:UpdateNodegroupVersion",
        "eks:DeleteNodegroup",
        "eks:DescribeNodegroup",
        "eks:TagResource",
        "eks:UntagResource",
    ),
    "aws:elasticache/replicationGroup:ReplicationGroup": (
        "elasticache:CreateReplicationGroup",
        "elasticache:ModifyReplicationGroup",
        "elasticache:DeleteReplicationGroup",
        "elasticache:DescribeReplicationGroups",
        "elasticache:DescribeCacheClusters",
        "elasticache:AddTagsToResource",
        "elasticache:RemoveTagsFromResource",
        "elasticache:ListTagsForResource",
    ),
    "aws:elasticache/subnetGroup:SubnetGroup": (
        "elasticache:CreateCacheSubnetGroup",
        "elasticache:ModifyCacheSubnetGroup",
        "elasticache:DeleteCacheSubnetGroup",
        "elasticache:DescribeCacheSubnetGroups",
        "elasticache:AddTagsToResource",
        "elasticache:ListTagsForResource",
    ),
    "aws:iam/role:Role": (
        "iam:CreateRole",
        "iam:GetRole",
        "iam:UpdateRole",
        "iam:UpdateAssumeRolePolicy",
        "iam:DeleteRole",
        "iam:TagRole",
        "iam:UntagRole",
        "iam:ListRolePolicies",
        "iam:ListAttachedRolePolicies",
        "iam:ListInstanceProfilesForRole",
    ),
    "aws:iam/rolePolicy:RolePolicy": ("iam:PutRolePolicy", "iam:GetRolePolicy", "iam:DeleteRolePolicy"),
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment": (
        "iam:AttachRolePolicy",
        "iam:DetachRolePolicy",
        "iam:ListAttachedRolePolicies",
    ),
    "aws:kms/key:Key": (
        "kms:CreateKey",
        "kms:DescribeKey",
        "kms:GetKeyPolicy",
        "kms:PutKeyPolicy",
        "kms:GetKeyRotationStatus",
        "kms:EnableKeyRotation",
        "kms:ListResourceTags",
        "kms:TagResource",
        "kms:UntagResource",
        "kms:ScheduleKeyDeletion",
        "kms:CreateGrant",  # EKS envelope encryption: CreateCluster grants the cluster the key
    ),
    "aws:sns/topic:Topic": (
        "sns:CreateTopic",
        "sns:DeleteTopic",
        "sns:GetTopicAttributes",
        "sns:SetTopicAttributes",
        "sns:ListTagsForResource",
        "sns:TagResource",
        "sns:UntagResource",
    ),
    # created when observability.alerting.snsSubscriptions is set (no checked-in stack sets it)
    "aws:sns/topicSubscription:TopicSubscription": (
        "sns:Subscribe",
        "sns:Unsubscribe",
        "sns:GetSubscriptionAttributes",
        "sns:SetSubscriptionAttributes",
    ),
    # pulumi-eks's children of eks:index:Cluster (registered by the eks plugin, not under the mocks)
    "aws:eks/cluster:Cluster": (
        "eks:CreateCluster",
        "eks:UpdateClusterConfig",
        "eks:UpdateClusterVersion",
        "eks:DeleteCluster",
        "eks:DescribeCluster",
        "eks:DescribeUpdate",
        "eks:TagResource",
        "eks:UntagResource",
        "eks:CreateAccessEntry",
        "eks:DescribeAccessEntry",
        "eks:DeleteAccessEntry",
        "eks:AssociateAccessPolicy",
        "eks:DisassociateAccessPolicy",
        "eks:ListAssociatedAccessPolicies",
    ),
    "aws:iam/openIdConnectProvider:OpenIdConnectProvider": (
        "iam:CreateOpenIDConnectProvider",
        "iam:GetOpenIDConnectProvider",
        "iam:UpdateOpenIDConnectProviderThumbprint",
        "iam:TagOpenIDConnectProvider",
        "iam:DeleteOpenIDConnectProvider",
    ),
}
# Resource types of the recorded plans that are not AWS resources (Kubernetes objects go through the
# cluster's API with the EKS access entry of the role, random values are local).
NON_AWS_PREFIXES = ("kubernetes:", "random:", "pulumi:", "llm-pd-eks:", "eks:")
# The children pulumi-eks 4.x's `eks:index:Cluster` registers (its own implementation under Node
# mocks: an IAM role and its policy attachment for the service role, the cluster, the OIDC provider).
EKS_CHILD_TYPES = (
    "aws:iam/role:Role",
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment",
    "aws:eks/cluster:Cluster",
    "aws:iam/openIdConnectProvider:OpenIdConnectProvider",
)
# Types the program creates only under config no checked-in stack sets.
CONDITIONAL_TYPES = ("aws:sns/topicSubscription:TopicSubscription",)

# The deploy job's own AWS calls: preflight (sts, ec2, service quotas, eks, the AMI's SSM parameter, the
# Capacity Block's scheduled scale-in), the alert-delivery gate (sns), the destroy check (ec2) and the
# kubeconfig's token for `make verify` (eks:DescribeCluster, sts presigned).
TOOL_ACTIONS = (
    "sts:GetCallerIdentity",
    "ec2:DescribeAvailabilityZones",
    "ec2:DescribeInstanceTypes",
    "ec2:DescribeInstanceTypeOfferings",
    "ec2:DescribeCapacityReservations",
    "ec2:DescribeInstances",
    "ec2:DescribeAddresses",
    "servicequotas:GetServiceQuota",
    "servicequotas:GetAWSDefaultServiceQuota",
    "eks:DescribeClusterVersions",
    "eks:DescribeAddonVersions",
    "ssm:GetParameter",
    "autoscaling:DescribeAutoScalingGroups",
    "autoscaling:DescribeScheduledActions",
    "ec2:DescribeVpcEndpoints",
    "ec2:DescribeNetworkInterfaces",
    "eks:DescribeCluster",
    "sns:ListSubscriptionsByTopic",
)
READ_VERBS = ("Describe", "Get", "List")
# Roles the program creates are handed to EKS (cluster, node groups) and EC2 (launch templates' nodes).
PASS_ROLE_SERVICES = ("eks.amazonaws.com", "ec2.amazonaws.com")
# Service-linked roles a first cluster, node group, cache or Auto Scaling group creates in an account.
SERVICE_LINKED = (
    "eks.amazonaws.com",
    "eks-nodegroup.amazonaws.com",
    "elasticache.amazonaws.com",
    "autoscaling.amazonaws.com",
)


def deploy_actions() -> list[str]:
    """Every action a deploy job calls: the resource types' and the tools'."""
    return sorted({a for actions in TYPE_ACTIONS.values() for a in actions} | set(TOOL_ACTIONS))


def is_read(action: str) -> bool:
    return action.split(":", 1)[1].startswith(READ_VERBS)


def read_actions() -> list[str]:
    """The read-only subset: what a preview (with refresh) calls."""
    return [a for a in deploy_actions() if is_read(a)]


def _policy(statements: Iterable[dict[str, Any]]) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": list(statements)}, sort_keys=True)


def deploy_policy(regions: list[str]) -> str:
    """The deploy (and review) role's policy: the actions, in the stacks' regions only; PassRole only to
    EKS and EC2; service-linked roles only for the services the program uses."""
    region = {"StringEquals": {"aws:RequestedRegion": sorted(set(regions))}}
    return _policy(
        [
            {
                "Sid": "ProgramResources",
                "Effect": "Allow",
                "Action": deploy_actions(),
                "Resource": "*",
                "Condition": region,
            },
            {
                "Sid": "PassProgramRoles",
                "Effect": "Allow",
                "Action": "iam:PassRole",
                "Resource": "*",
                "Condition": {"StringEquals": {"iam:PassedToService": list(PASS_ROLE_SERVICES)}},
            },
            {
                "Sid": "ServiceLinkedRoles",
                "Effect": "Allow",
                "Action": "iam:CreateServiceLinkedRole",
                "Resource": "*",
                "Condition": {"StringEquals": {"iam:AWSServiceName": list(SERVICE_LINKED)}},
            },
        ]
    )


def preview_policy(regions: list[str]) -> str:
    """The preview role's policy: the read actions only, in the stacks' regions."""
    region = {"StringEquals": {"aws:RequestedRegion": sorted(set(regions))}}
    return _policy(
        [
            {
                "Sid": "ReadProgramResources",
                "Effect": "Allow",
                "Action": read_actions(),
                "Resource": "*",
                "Condition": region,
            }
        ]
    )
