"""Pieces every launch template and managed node group of this program shares."""

from __future__ import annotations

import pulumi_aws as aws

from .config import NodeScaling

# IMDSv2 only; hop limit 1 keeps pods (one hop further) away from the node's credentials:
# workloads get AWS access through IRSA (the cluster's OIDC provider) instead.
IMDSV2 = aws.ec2.LaunchTemplateMetadataOptionsArgs(
    http_endpoint="enabled",
    http_tokens="required",
    http_put_response_hop_limit=1,
)


def root_volume(size_gib: int) -> aws.ec2.LaunchTemplateBlockDeviceMappingArgs:
    """An encrypted gp3 root volume (AL2023 EKS AMIs boot from /dev/xvda)."""
    return aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
        device_name="/dev/xvda",
        ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
            volume_size=size_gib, volume_type="gp3", encrypted="true", delete_on_termination="true"
        ),
    )


def instance_tags(tags: dict[str, str], name: str) -> aws.ec2.LaunchTemplateTagSpecificationArgs:
    """The stack's tags plus `Name` on every instance the template launches (the console shows it)."""
    return aws.ec2.LaunchTemplateTagSpecificationArgs(resource_type="instance", tags={**tags, "Name": name})


def scaling_config(cfg: NodeScaling) -> aws.eks.NodeGroupScalingConfigArgs:
    return aws.eks.NodeGroupScalingConfigArgs(
        min_size=cfg.min_size, desired_size=cfg.desired_size, max_size=cfg.max_size
    )


def launch_template_ref(template: aws.ec2.LaunchTemplate) -> aws.eks.NodeGroupLaunchTemplateArgs:
    """The template at its latest version, so a template change rolls the node group."""
    return aws.eks.NodeGroupLaunchTemplateArgs(id=template.id, version=template.latest_version.apply(str))
